//! Log setup: `tracing-subscriber` fmt layer on stderr, text or JSON lines. Under systemd
//! (stderr is the journal's stream, `JOURNAL_STREAM`) text lines carry no timestamp or colour
//! (the journal records the time) and start with a syslog priority, `<3>` to `<7>`, so that
//! `journalctl -p warning` finds the warnings.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{DefaultFields, Format, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
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

/// Whether stderr is the journal's stream: `JOURNAL_STREAM` holds the device and inode of
/// the stream systemd connected (systemd.exec(5)), and they are stderr's.
pub fn stderr_is_journal() -> bool {
    let Ok(value) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = value.split_once(':') else {
        return false;
    };
    let Ok(stat) = rustix::fs::fstat(std::io::stderr()) else {
        return false;
    };
    dev.parse::<u64>().ok() == Some(stat.st_dev) && ino.parse::<u64>().ok() == Some(stat.st_ino)
}

/// The sd-daemon(3) priority prefix of a level.
fn priority(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "<3>",
        Level::WARN => "<4>",
        Level::INFO => "<6>",
        Level::DEBUG | Level::TRACE => "<7>",
    }
}

/// Journal lines: the priority, then the usual line without time or colour.
struct JournalFormat(Format<tracing_subscriber::fmt::format::Full, ()>);

impl<S, N> FormatEvent<S, N> for JournalFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        writer.write_str(priority(event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

/// Installs the global subscriber. `RUST_LOG`, when set and valid, overrides `-v`.
pub fn init(verbose: u8, format: LogFormat) {
    init_with(default_filter(verbose), format);
}

/// [`init`] for a command that serves a target in its own process as an instrument (`sluice
/// lab pdu-cost`): without `-v` only warnings, so that every point's logins and logouts do
/// not bury the progress bar.
pub fn init_quiet(verbose: u8, format: LogFormat) {
    init_with(
        if verbose == 0 {
            "warn"
        } else {
            default_filter(verbose)
        },
        format,
    );
}

fn init_with(default: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    if format == LogFormat::Text && stderr_is_journal() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .fmt_fields(DefaultFields::new())
            .event_format(JournalFormat(
                Format::default()
                    .without_time()
                    .with_ansi(false)
                    .with_level(false),
            ))
            .with_writer(std::io::stderr)
            .try_init();
        return;
    }
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

    #[test]
    fn priorities_follow_sd_daemon() {
        assert_eq!(priority(&Level::ERROR), "<3>");
        assert_eq!(priority(&Level::WARN), "<4>");
        assert_eq!(priority(&Level::INFO), "<6>");
        assert_eq!(priority(&Level::TRACE), "<7>");
    }
}
