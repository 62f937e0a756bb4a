//! What an emulated link does: rate, one-way delay, queue length, MTU.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::size_dist::parse_byte_size;

/// An emulated point-to-point link, the same in both directions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkSpec {
    /// Bits per second (`None`: as fast as the forwarder goes).
    pub rate_bps: Option<u64>,
    /// One-way delay added to every packet.
    pub delay: Duration,
    /// Bytes that may wait for the wire in each direction; a packet that finds more is
    /// dropped (a tail-drop queue, as a switch port's).
    pub queue_bytes: u64,
    /// MTU of both interfaces.
    pub mtu: u32,
}

impl Default for LinkSpec {
    /// Gigabit Ethernet as the parameter study had it: 1 Gbit/s, no added delay, 1500-byte
    /// MTU, a 1 MiB queue.
    fn default() -> Self {
        Self {
            rate_bps: Some(1_000_000_000),
            delay: Duration::ZERO,
            queue_bytes: 1 << 20,
            mtu: 1500,
        }
    }
}

impl fmt::Display for LinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rate_bps {
            Some(r) if r % 1_000_000_000 == 0 => write!(f, "rate={}gbit", r / 1_000_000_000)?,
            Some(r) if r % 1_000_000 == 0 => write!(f, "rate={}mbit", r / 1_000_000)?,
            Some(r) => write!(f, "rate={r}bit")?,
            None => f.write_str("rate=unlimited")?,
        }
        write!(
            f,
            ",delay={}us,queue={},mtu={}",
            self.delay.as_micros(),
            self.queue_bytes,
            self.mtu
        )
    }
}

impl FromStr for LinkSpec {
    type Err = String;

    /// `rate=1gbit,delay=5ms,queue=1M,mtu=1500`, any subset (the rest from
    /// [`LinkSpec::default`]); `gige` alone is the default. Rates take `bit`, `kbit`, `mbit`,
    /// `gbit` (powers of 1000) or `unlimited`; delays `us`, `ms`, `s`.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut spec = LinkSpec::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "gige" {
                continue;
            }
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: use KEY=VALUE (rate, delay, queue, mtu)"))?;
            match k {
                "rate" => spec.rate_bps = parse_rate(v)?,
                "delay" => spec.delay = parse_delay(v)?,
                "queue" => {
                    spec.queue_bytes =
                        parse_byte_size(v).map_err(|e| format!("queue {v:?}: {e}"))?
                }
                "mtu" => {
                    spec.mtu = v
                        .parse()
                        .ok()
                        .filter(|m| (576..=65_535).contains(m))
                        .ok_or_else(|| format!("mtu {v:?}: a number from 576 to 65535"))?
                }
                _ => return Err(format!("unknown link key {k:?} (rate, delay, queue, mtu)")),
            }
        }
        if spec.queue_bytes < u64::from(spec.mtu) {
            return Err(format!(
                "queue {} is smaller than one packet of MTU {}",
                spec.queue_bytes, spec.mtu
            ));
        }
        Ok(spec)
    }
}

/// `v` as a number with one of `units` (suffix, multiplier), scaled; `what` names the key.
fn scaled(v: &str, what: &str, units: &[(&str, f64)]) -> Result<f64, String> {
    let (num, mult) = units
        .iter()
        .find_map(|(u, m)| v.strip_suffix(u).map(|n| (n, *m)))
        .ok_or_else(|| {
            let names: Vec<&str> = units.iter().map(|(u, _)| *u).collect();
            let (last, rest) = names.split_last().unwrap_or((&"", &[]));
            format!("{what} {v:?}: a number with {} or {last}", rest.join(", "))
        })?;
    let x: f64 = num
        .parse()
        .map_err(|_| format!("{what} {v:?}: {num:?} is not a number"))?;
    Ok(x * mult)
}

fn parse_rate(v: &str) -> Result<Option<u64>, String> {
    if v == "unlimited" {
        return Ok(None);
    }
    let bps = scaled(
        v,
        "rate",
        &[("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)],
    )?;
    if !(1000.0..=1e12).contains(&bps) {
        return Err(format!("rate {v:?}: between 1kbit and 1000gbit"));
    }
    Ok(Some(bps as u64))
}

fn parse_delay(v: &str) -> Result<Duration, String> {
    let secs = scaled(v, "delay", &[("us", 1e-6), ("ms", 1e-3), ("s", 1.0)])?;
    if !(0.0..=10.0).contains(&secs) {
        return Err(format!("delay {v:?}: 0 to 10 s"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let s: LinkSpec = "rate=100mbit,delay=5ms,queue=256K".parse().unwrap();
        assert_eq!(s.rate_bps, Some(100_000_000));
        assert_eq!(s.delay, Duration::from_millis(5));
        assert_eq!(s.queue_bytes, 262_144);
        assert_eq!(s.mtu, 1500);
        assert_eq!(
            s.to_string(),
            "rate=100mbit,delay=5000us,queue=262144,mtu=1500"
        );
        assert_eq!("gige".parse::<LinkSpec>().unwrap(), LinkSpec::default());
        assert_eq!(
            "rate=unlimited,mtu=9000"
                .parse::<LinkSpec>()
                .unwrap()
                .rate_bps,
            None
        );
    }

    #[test]
    fn errors_name_the_problem() {
        for (bad, says) in [
            ("rate=fast", "bit"),
            ("delay=5", "us, ms or s"),
            ("speed=1gbit", "unknown link key"),
            ("mtu=100", "576"),
            ("queue=1K", "smaller than one packet"),
        ] {
            let e = bad.parse::<LinkSpec>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
