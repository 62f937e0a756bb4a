//! Runs the CRC-aliasing study and writes its figures, CSV, JSON and Markdown:
//!
//! ```text
//! cargo run --release -p sluice-lab --example crc_alias -- full docs/lab/simulation-study/crc
//! ```
//!
//! The first argument is the scale (`tiny`, `quick` or `full`), the second the output
//! directory. (`sluice lab simstudy` will call the same `run`.)

use std::path::PathBuf;
use std::time::Instant;

use sluice_lab::crc_alias::{run, CrcAliasScale};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let scale = match args.next().as_deref() {
        Some("tiny") => CrcAliasScale::Tiny,
        Some("quick") | None => CrcAliasScale::Quick,
        Some("full") => CrcAliasScale::Full,
        Some(other) => return Err(format!("scale {other:?}: tiny, quick or full").into()),
    };
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "crc-alias-out".into()));
    let start = Instant::now();
    let report = run(scale, &dir, &|line| {
        eprintln!("[{:7.1} s] {line}", start.elapsed().as_secs_f64());
    })?;
    eprintln!(
        "{} rows, {} figures in {} ({:.1} s)",
        report.rows.len(),
        report.pngs.len(),
        dir.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
