//! Log setup: `tracing-subscriber` fmt layer on stderr, text or JSON lines.

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// The filter for `-v` counts when `RUST_LOG` is unset: info, debug (`-v`), trace (`-vv`).
pub fn default_filter(verbose: u8) -> &'static str {
    match verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    }
}

/// Installs the global subscriber. `RUST_LOG`, when set and valid, overrides `-v`.
pub fn init(verbose: u8, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(default_filter(verbose)));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour only on a terminal: logs redirected to a file or journal stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    // try_init: a second initialisation (tests) is not an error worth reporting.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbosity_levels() {
        assert_eq!(default_filter(0), "info");
        assert_eq!(default_filter(1), "debug");
        assert_eq!(default_filter(2), "trace");
        assert_eq!(default_filter(9), "trace");
    }
}
