//! Human-friendly sizes (`1G`, `512M`, `1.5T`, `4096`) and durations (`30s`, `500ms`, `1m30s`).
//!
//! Sizes are powers of 1024 whatever the spelling: `1G`, `1GB` and `1GiB` all mean 2^30 bytes,
//! because a disk declared as "1G" that turns out 7% smaller than `qemu-img` says is a trap.

use std::fmt;
use std::time::Duration;

/// Why a size or duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

/// Parses a byte count: a number (integer or decimal) and an optional binary unit.
///
/// Units: none or `B` (bytes), `K`, `M`, `G`, `T`, `P`, each optionally followed by `B` or `iB`,
/// case-insensitive. The result must be a whole number of bytes: `1.5K` is 1536, `0.3K` is refused.
pub fn parse_size(text: &str) -> Result<u64, ParseError> {
    let s = text.trim();
    let err = |why: &str| {
        ParseError(format!(
            "invalid size {text:?}: {why} (examples: 4096, 512M, 1G, 1.5T, 64KiB)"
        ))
    };
    if s.is_empty() {
        return Err(err("empty"));
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let number: String = number.chars().filter(|&c| c != '_').collect();
    if number.is_empty() {
        return Err(err("it must start with a number"));
    }
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        "p" | "pb" | "pib" => 50,
        _ => return Err(err(&format!("unknown unit {unit:?}"))),
    };
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number.as_str(), ""),
    };
    if frac_part.contains('.') || (int_part.is_empty() && frac_part.is_empty()) {
        return Err(err("malformed number"));
    }
    let too_big = || err("too large");
    let int: u64 = if int_part.is_empty() {
        0
    } else {
        int_part.parse().map_err(|_| too_big())?
    };
    let whole = int
        .checked_shl(shift)
        .filter(|v| v >> shift == int)
        .ok_or_else(too_big)?;
    if frac_part.is_empty() {
        return Ok(whole);
    }
    // Exact arithmetic: fraction = digits / 10^len; bytes = digits * 2^shift / 10^len.
    if frac_part.len() > 18 {
        return Err(err("too many decimal places"));
    }
    let digits: u128 = frac_part.parse().map_err(|_| err("malformed number"))?;
    let denom = 10u128.pow(frac_part.len() as u32);
    let scaled = digits << shift;
    #[allow(clippy::manual_is_multiple_of)] // is_multiple_of needs Rust 1.87; MSRV is 1.85
    if scaled % denom != 0 {
        return Err(err("not a whole number of bytes"));
    }
    let frac = u64::try_from(scaled / denom).map_err(|_| too_big())?;
    whole.checked_add(frac).ok_or_else(too_big)
}

/// Formats a byte count with the largest binary unit that divides it exactly, e.g. `1 GiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(u32, &str); 5] = [
        (50, "PiB"),
        (40, "TiB"),
        (30, "GiB"),
        (20, "MiB"),
        (10, "KiB"),
    ];
    for (shift, name) in UNITS {
        #[allow(clippy::manual_is_multiple_of)] // is_multiple_of needs Rust 1.87; MSRV is 1.85
        if bytes != 0 && bytes % (1u64 << shift) == 0 {
            return format!("{} {name}", bytes >> shift);
        }
    }
    format!("{bytes} B")
}

/// Parses a duration: one or more `<number><unit>` groups (`ms`, `s`, `m`, `h`), or a bare
/// integer meaning seconds. Examples: `30s`, `500ms`, `1m30s`, `15`.
pub fn parse_duration(text: &str) -> Result<Duration, ParseError> {
    let s = text.trim();
    let err = |why: &str| {
        ParseError(format!(
            "invalid duration {text:?}: {why} (examples: 30s, 500ms, 2m, 1m30s)"
        ))
    };
    if s.is_empty() {
        return Err(err("empty"));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse()
            .map(Duration::from_secs)
            .map_err(|_| err("too large"));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let n_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if n_end == 0 {
            return Err(err("expected a number"));
        }
        let n: u64 = rest[..n_end].parse().map_err(|_| err("too large"))?;
        rest = &rest[n_end..];
        let u_end = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..u_end] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "" => return Err(err("missing unit after a number")),
            u => return Err(err(&format!("unknown unit {u:?} (use ms, s, m or h)"))),
        };
        total = total.checked_add(part).ok_or_else(|| err("too large"))?;
        rest = &rest[u_end..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1gb"), Ok(1 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("256K"), Ok(262_144));
        assert_eq!(parse_size("1.5T"), Ok(3 << 39));
        assert_eq!(parse_size("0.5K"), Ok(512));
        assert_eq!(parse_size("1_000"), Ok(1000));
        assert_eq!(parse_size(" 2 MiB "), Ok(2 << 20));
        assert_eq!(parse_size("16P"), Ok(16 << 50));
    }

    #[test]
    fn bad_sizes() {
        for bad in [
            "",
            "G",
            "1X",
            "1.2.3G",
            "-1G",
            "abc",
            "1.1",
            "99999999999P",
            "0.3K",
            "1e9",
        ] {
            let e = parse_size(bad).unwrap_err().to_string();
            assert!(e.starts_with("invalid size"), "{bad}: {e}");
        }
        assert!(parse_size("1Q")
            .unwrap_err()
            .to_string()
            .contains("unknown unit \"Q\""));
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(1 << 30), "1 GiB");
        assert_eq!(format_size(1536), "1536 B");
        assert_eq!(format_size(3 << 39), "1536 GiB");
        assert_eq!(format_size(0), "0 B");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("15"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        for bad in ["", "s", "10x", "1.5s", "10 s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
