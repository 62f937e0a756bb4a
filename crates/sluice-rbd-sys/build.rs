//! Links librbd and librados (Debian: librbd-dev, librados-dev). Debian ships no pkg-config
//! files for them, so the libraries are named directly; `SLUICE_RBD_LIB_DIR` adds a search
//! directory for a librbd installed elsewhere.

fn main() {
    println!("cargo:rerun-if-env-changed=SLUICE_RBD_LIB_DIR");
    if let Some(dir) = std::env::var_os("SLUICE_RBD_LIB_DIR") {
        println!("cargo:rustc-link-search=native={}", dir.to_string_lossy());
    }
    println!("cargo:rustc-link-lib=dylib=rbd");
    println!("cargo:rustc-link-lib=dylib=rados");
}
