//! `sluice`: the one binary.
fn main() {
    println!("sluice {}", env!("CARGO_PKG_VERSION"));
}
