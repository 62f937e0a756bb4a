//! `sluice`: the one binary. It owns argv, TOML and JSON; the libraries only see plain values.
//!
//! Modules: [`cli`] (clap definitions), [`cmd_target`] (`sluice target`), [`config_file`] (the
//! TOML schema), [`size`] (sizes and durations), [`logging`] (tracing setup).

mod cli;
mod cmd_target;
mod config_file;
mod logging;
mod size;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    logging::init(cli.verbose, cli.log_format);
    let result = match &cli.command {
        Command::Target(args) => {
            let sub = matches
                .subcommand_matches("target")
                .expect("clap matched the target subcommand");
            cmd_target::run(args, sub)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the context chain on one line: "iSCSI target on ...: Address in use".
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
