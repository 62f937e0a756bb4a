//! CRC and TCP checksum aliasing: the probability that a corrupted packet passes its check.
//!
//! Reproduces chapter 6 ("CRC Errors and iSCSI") of Sajid Hussain, "Performance Evaluation of
//! iSCSI for IP Storage and Transport Protocols" (PhD dissertation, University of Manitoba,
//! 2004): the Markov model of an n-bit CRC register under independent bit errors (after
//! Williams, Daehn, Gruetzner and Starke, "Bounds and analysis of aliasing errors in linear
//! feedback shift registers", IEEE TCAD 1988), its 3-bit example, aliasing against packet
//! length for 8-, 16-, 20- and 32-bit CRCs, and the TCP checksum's aliasing by simulation;
//! then measures how corrupted segments of real PDUs framed by `sluice_proto` fare against
//! the TCP checksum and the CRC32C digests.
//!
//! Module map: [`poly`] (generator polynomials, residues), [`markov`] (the transition matrix,
//! exact counts, the chain in `f64`), [`binomial`] (error counts), [`weights`] (the reduced
//! model for 32-bit CRCs: exact low-weight codeword counts), [`heavy`] (weights 5 and 6 at one
//! short length), [`montecarlo`] (plain
//! simulation, intervals), [`tcp`] (the ones'-complement checksum and its stratified
//! estimate), [`framer`] (the measurement on sluice's framer), [`plan`] (scales), [`study`]
//! (the experiments), [`rows`] (CSV and JSON), [`plot`] and [`figures`] (PNGs), [`writeup`]
//! (Markdown).

pub mod binomial;
pub mod figures;
pub mod framer;
pub mod heavy;
pub mod markov;
pub mod montecarlo;
pub mod plan;
pub mod plot;
pub mod poly;
pub mod rows;
pub mod study;
pub mod tcp;
pub mod weights;
pub mod writeup;

use std::path::{Path, PathBuf};

pub use plan::{CrcAliasScale, Plan};
pub use rows::AliasRow;

use crate::error::LabError;
use crate::study::table::{csv_header, csv_row};

/// CSV file of every row.
pub const CSV_FILE: &str = "crc-alias.csv";
/// JSON file of every row.
pub const JSON_FILE: &str = "crc-alias.json";
/// Markdown report.
pub const MARKDOWN_FILE: &str = "crc-alias.md";

/// What a run produced.
#[derive(Clone, Debug)]
pub struct CrcAliasReport {
    /// The report section (figures referenced by file name, relative to the output directory).
    pub markdown: String,
    /// The figures written.
    pub pngs: Vec<PathBuf>,
    /// Every computed and measured value.
    pub rows: Vec<AliasRow>,
}

/// Runs the study at `scale`, writes the figures, `crc-alias.csv`, `crc-alias.json` and
/// `crc-alias.md` into `out_dir` (created if missing), and returns them.
pub fn run(
    scale: CrcAliasScale,
    out_dir: &Path,
    progress: &dyn Fn(&str),
) -> Result<CrcAliasReport, LabError> {
    let io = |what: &str, e: &dyn std::fmt::Display| {
        LabError::Workload(format!("crc-alias: {what}: {e}"))
    };
    std::fs::create_dir_all(out_dir).map_err(|e| io(&out_dir.display().to_string(), &e))?;
    let plan = Plan::of(scale);
    let mut res = study::Results::default();
    study::crc_figures(&plan, progress, &mut res);
    study::tcp_figure(&plan, progress, &mut res);
    study::framer_measurement(&plan, progress, &mut res);
    progress("crc-alias: figures");
    let pngs = figures::draw_all(&res, out_dir).map_err(|e| io("figures", &e))?;
    let names: Vec<String> = pngs
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    let markdown = writeup::markdown(&res, &format!("{scale:?}"), &names);
    let mut csv = String::new();
    if let Some(first) = res.rows.first() {
        csv.push_str(&csv_header(first));
        csv.push('\n');
    }
    for r in &res.rows {
        csv.push_str(&csv_row(r));
        csv.push('\n');
    }
    let write =
        |name: &str, text: &str| std::fs::write(out_dir.join(name), text).map_err(|e| io(name, &e));
    write(CSV_FILE, &csv)?;
    write(JSON_FILE, &rows::to_json(&res.rows))?;
    write(MARKDOWN_FILE, &markdown)?;
    Ok(CrcAliasReport {
        markdown,
        pngs,
        rows: res.rows,
    })
}
