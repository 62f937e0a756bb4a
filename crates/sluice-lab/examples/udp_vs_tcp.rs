//! Runs the UDP-against-TCP measurement until `sluice lab` has a command for it:
//! `cargo run --release -p sluice-lab --example udp_vs_tcp -- quick OUT_DIR`.

use std::sync::Arc;

use sluice_lab::udp_vs_tcp::{run_udp_vs_tcp, Scale};
use sluice_lab::Progress;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let scale = match args.next().as_deref() {
        Some("tiny") => Scale::Tiny,
        Some("quick") | None => Scale::Quick,
        Some("full") => Scale::Full,
        Some(other) => return Err(format!("unknown preset {other:?}: tiny, quick or full").into()),
    };
    let out = args.next().unwrap_or_else(|| "udp-vs-tcp".into());
    let report = run_udp_vs_tcp(scale, out.as_ref(), Arc::new(Progress::new()))?;
    print!("{}", report.markdown);
    for f in &report.files {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}
