//! What every `sluice lab` study shares: rows of results written and read back as CSV
//! ([`table`]: one row per run, resumable), and PNG charts with labelled axes ([`plot`]).
//!
//! A study defines its row type (a [`table::Row`]), runs its plan row by row, and draws its
//! figures from the rows; the CLI keeps the output directory (CSV appended run by run, JSON,
//! the Markdown report) the same way for every study.

pub mod plot;
pub mod table;
