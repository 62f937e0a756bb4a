//! `sluice script [FILE|-]`: a small command language that drives the initiator library
//! line by line, for protocol experiments and reproducible bug reports (docs/script.md).
//!
//! `lex` splits a line into words (quotes, comments, `$variables`), `words` reads values
//! (numbers, statuses, sense keys, login classes, data sources), `parse` turns the whole
//! script into [`ast::Line`]s before anything runs, `exec` runs them against
//! `sluice_initiator::Session`, and `data` holds the pattern, comparisons and key values.
//! The transport is whatever the URL's scheme makes the library pick.

mod ast;
mod data;
mod exec;
mod lex;
mod parse;
mod words;

use std::fmt;
use std::io::Read as _;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::client_common::runtime;

/// Text after `sluice script --help`: the language in brief.
pub const AFTER_HELP: &str = "\
One command per line; # comments; \"quoted words\"; set NAME VALUE and --set NAME=VALUE define
$NAME. Commands:
  connect URL [KEY=VALUE ...]   any RFC 7143 key or URL option; digests=crc32c, erl=N
  login | logout | inquiry | readcapacity | testunitready | nop | print params
  read LBA BLOCKS [into=NAME] [hex] [file=PATH]
  write LBA BLOCKS DATA | verify LBA BLOCKS DATA
        DATA: zero, byte=N, pattern=SEED, file=PATH, buffer=NAME
  tmf abort-task|abort-task-set|clear-task-set|lun-reset|target-warm-reset|target-cold-reset
  sleep 500ms | echo TEXT...
  expect status GOOD|CHECK_CONDITION [sense=KEY] [asc=N] [ascq=N]
  expect data BUFFER DATA | expect key NAME VALUE | expect tmf RESPONSE
  expect login failed [initiator-error|authentication|authorization|not-found|0x0201...]
A non-GOOD status, a refused login or a TMF other than function complete is an error unless
the next line expects it. Example:
  sluice script docs/script-examples/basic.sluice --set url=iscsi://127.0.0.1/iqn.2026-11.io.sluice:default/0
See docs/script.md.";

/// `sluice script`.
#[derive(Debug, Args)]
pub struct ScriptArgs {
    /// The script, or `-` for standard input.
    #[arg(value_name = "FILE|-")]
    pub file: PathBuf,
    /// Set a variable before the script runs (repeatable), used as $NAME.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// Parse the script and report its errors without running it.
    #[arg(long)]
    pub check: bool,
}

/// A script that ran but did not pass: exits 1 for a failed expectation, 2 for an error.
#[derive(Debug)]
pub struct ScriptFailed {
    /// The process exit status.
    pub exit_code: u8,
    message: String,
}

impl fmt::Display for ScriptFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ScriptFailed {}

/// Exit status of a script whose expectation failed.
const EXIT_EXPECTATION: u8 = 1;
/// Exit status of a script that could not be parsed or run.
const EXIT_ERROR: u8 = 2;

/// Runs `sluice script`.
pub fn run(args: &ScriptArgs) -> Result<()> {
    let name = args.file.display().to_string();
    let text = if name == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading the script from standard input")?;
        s
    } else {
        std::fs::read_to_string(&args.file).with_context(|| format!("reading {name}"))?
    };
    let mut vars = lex::Variables::new();
    for s in &args.set {
        let Some((k, v)) = s.split_once('=') else {
            bail!("--set {s}: expected NAME=VALUE");
        };
        let k = words::buffer_name(k).map_err(|e| anyhow::anyhow!("--set {s}: {e}"))?;
        vars.insert(k, v.to_owned());
    }
    let failed = |exit_code, line: usize, message: String| ScriptFailed {
        exit_code,
        message: format!("{name}:{line}: {message}"),
    };
    let lines = parse::parse(&text, vars).map_err(|e| failed(EXIT_ERROR, e.line, e.message))?;
    if args.check {
        outln!("{name}: {} commands, no errors", lines.len());
        return Ok(());
    }
    let rt = runtime()?;
    let result = rt.block_on(async { exec::Executor::default().run(&lines).await });
    match result {
        Ok(()) => Ok(()),
        Err(exec::Stop::Expectation(line, m)) => {
            Err(failed(EXIT_EXPECTATION, line, format!("expectation failed: {m}")).into())
        }
        Err(exec::Stop::Error(line, m)) => Err(failed(EXIT_ERROR, line, m).into()),
    }
}
