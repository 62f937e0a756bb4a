//! `sluice`: the one binary. It owns argv, TOML and JSON; the libraries only see plain values.
//!
//! Modules: [`cli`] (clap definitions), [`cmd_target`] (`sluice target`), [`config_file`] (the
//! TOML schema), [`size`] (sizes and durations), [`logging`] (tracing setup), [`signals`]
//! (shutdown on SIGINT/SIGTERM). The initiator subcommands: [`client_args`] (their clap
//! definitions, added next to `target`), [`client_common`], [`cmd_discover`] (`discover`,
//! `ls`), [`cmd_inquiry`] (`inq`, `readcap`), [`cmd_rw`] (`read`, `write`), [`cmd_dd`] (`dd`).
//! The load generator: [`cmd_bench`] (`bench`, on `sluice-lab`) and [`bench_output`] (its
//! report). The fault-injecting proxy: [`cmd_proxy`] (`proxy`, on `sluice-proxy`).

// Doc comments on the clap structs are the `--help` text users read, where `[...]` marks an
// optional part (`HOST[:PORT]`), not a rustdoc link; escaping them would show backslashes in
// the help.
#![allow(rustdoc::broken_intra_doc_links)]
#![forbid(unsafe_code)]

#[macro_use]
mod stdout;

mod bench_output;
mod cli;
mod cli_ops;
mod client_args;
mod client_common;
mod cmd_bench;
mod cmd_ctl;
mod cmd_dd;
mod cmd_discover;
mod cmd_inquiry;
mod cmd_lab;
mod cmd_lab_crc;
mod cmd_lab_iser;
mod cmd_lab_pdu_cost;
mod cmd_lab_simstudy;
mod cmd_lab_wan;
mod cmd_proxy;
mod cmd_rw;
mod cmd_sim;
mod cmd_sweep;
mod cmd_sweep_grid;
mod cmd_target;
mod cmd_xcopy;
mod config_file;
mod lab_files;
mod logging;
mod ops;
mod portals;
mod script;
mod signals;
mod size;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Subcommand};

use crate::cli::{Cli, Command, LabCommand, LogFormat};
use crate::client_args::ClientCommand;

/// The whole command line: [`Cli`] with the client subcommands.
fn full_command() -> clap::Command {
    let cli = Cli::command();
    // Adding the client subcommands would replace the program's description with the enum's
    // doc comment; keep the program's own.
    let about = cli.get_about().cloned().unwrap_or_default();
    ClientCommand::augment_subcommands(cli)
        .about(about.clone())
        .long_about(about)
}

fn main() -> ExitCode {
    let matches = full_command().get_matches();
    if let Some(name) = matches.subcommand_name() {
        if ClientCommand::has_subcommand(name) {
            let cmd = ClientCommand::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
            let format = matches
                .get_one::<LogFormat>("log_format")
                .copied()
                .unwrap_or(LogFormat::Text);
            logging::init(matches.get_count("verbose"), format);
            return exit(run_client(&cmd));
        }
    }
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if matches!(cli.command, Command::Lab(LabCommand::PduCost(_))) {
        logging::init_quiet(cli.verbose, cli.log_format);
    } else {
        logging::init(cli.verbose, cli.log_format);
    }
    let result = match &cli.command {
        Command::Target(args) => {
            let sub = matches
                .subcommand_matches("target")
                .expect("clap matched the target subcommand");
            cmd_target::run(args, sub)
        }
        Command::Lab(LabCommand::Crc(args)) => cmd_lab_crc::run(args),
        Command::Lab(LabCommand::Iser(args)) => cmd_lab_iser::run(args),
        Command::Lab(LabCommand::Simstudy(args)) => cmd_lab_simstudy::run(args),
        Command::Lab(LabCommand::PduCost(args)) => cmd_lab_pdu_cost::run(args),
        Command::Lab(LabCommand::Loopback(args)) => cmd_lab::run_loopback(args),
        Command::Lab(LabCommand::Sim(args)) => cmd_sim::run(args),
        Command::Lab(LabCommand::Sweep(args)) => cmd_sweep::run(args),
        Command::Lab(LabCommand::Wan(args)) => cmd_lab_wan::run(args),
        Command::Proxy(args) => cmd_proxy::run(args),
        Command::Ctl(args) => cmd_ctl::run(args),
        Command::Completions(args) => {
            let mut cmd = full_command();
            clap_complete::generate(args.shell, &mut cmd, "sluice", &mut std::io::stdout());
            Ok(())
        }
        Command::Man => {
            let mut out = Vec::new();
            clap_mangen::Man::new(full_command())
                .render(&mut out)
                .and_then(|()| std::io::Write::write_all(&mut std::io::stdout(), &out))
                .map_err(anyhow::Error::from)
        }
    };
    exit(result)
}

fn run_client(cmd: &ClientCommand) -> anyhow::Result<()> {
    match cmd {
        ClientCommand::Discover(a) => cmd_discover::run_discover(a),
        ClientCommand::Ls(a) => cmd_discover::run_ls(a),
        ClientCommand::Inq(a) => cmd_inquiry::run_inq(a),
        ClientCommand::Readcap(a) => cmd_inquiry::run_readcap(a),
        ClientCommand::Read(a) => cmd_rw::run_read(a),
        ClientCommand::Write(a) => cmd_rw::run_write(a),
        ClientCommand::Dd(a) => cmd_dd::run_dd(a),
        ClientCommand::Xcopy(a) => cmd_xcopy::run_xcopy(a),
        ClientCommand::Bench(a) => cmd_bench::run(a),
        ClientCommand::Script(a) => script::run(a),
    }
}

fn exit(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(f) = e.downcast_ref::<script::ScriptFailed>() {
                eprintln!("error: {f}");
                return ExitCode::from(f.exit_code);
            }
            // `{:#}` prints the context chain on one line: "iSCSI target on ...: Address in use".
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
