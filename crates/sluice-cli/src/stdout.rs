//! Text output of the commands that print results (`outln!`).
//!
//! `println!` panics when stdout's reader has gone (`sluice ls | head -1`: EPIPE, since Rust
//! ignores SIGPIPE). The rest of the output is simply not wanted any more, so the command goes
//! on quietly, as `print_json` does; any other write error (a full disk) ends the command
//! with a message and status 1 instead of a panic.

use std::fmt;
use std::io::{ErrorKind, Write};

/// `println!` through [`write_line`].
macro_rules! outln {
    () => {
        $crate::stdout::write_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::stdout::write_line(format_args!($($arg)*))
    };
}

/// Writes one line to stdout; see the module documentation for what happens on errors.
pub fn write_line(args: fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let result = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
    match result {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {}
        Err(e) => {
            drop(out);
            eprintln!("error: writing to stdout: {e}");
            std::process::exit(1);
        }
    }
}
