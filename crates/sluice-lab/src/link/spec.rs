//! What an emulated link does, each direction on its own: rate, one-way delay, jitter,
//! random loss and queue length; and the MTU of both ends.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::size_dist::parse_byte_size;

/// One direction of a link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathSpec {
    /// Bits per second (`None`: as fast as the forwarder goes).
    pub rate_bps: Option<u64>,
    /// One-way delay added to every packet.
    pub delay: Duration,
    /// Each packet's delay is drawn uniformly from `delay ± jitter` (never below zero);
    /// packets keep their order, as on one wire.
    pub jitter: Duration,
    /// Probability that a packet is lost, from 0 to 1.
    pub loss: f64,
    /// Bytes that may wait for the wire; a packet that finds more is dropped (a tail-drop
    /// queue, as a switch port's).
    pub queue_bytes: u64,
}

impl Default for PathSpec {
    /// Gigabit Ethernet as the parameter study had it: 1 Gbit/s, no added delay, no jitter,
    /// no loss, a 1 MiB queue.
    fn default() -> Self {
        Self {
            rate_bps: Some(1_000_000_000),
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: 0.0,
            queue_bytes: 1 << 20,
        }
    }
}

/// An emulated point-to-point link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkSpec {
    /// Initiator to target.
    pub forward: PathSpec,
    /// Target to initiator.
    pub backward: PathSpec,
    /// MTU of both interfaces.
    pub mtu: u32,
    /// Seed of the loss and jitter draws (the same seed, the same pattern of draws).
    pub seed: u64,
}

impl Default for LinkSpec {
    /// [`PathSpec::default`] both ways, 1500-byte MTU.
    fn default() -> Self {
        Self {
            forward: PathSpec::default(),
            backward: PathSpec::default(),
            mtu: 1500,
            seed: 1,
        }
    }
}

impl LinkSpec {
    /// The same settings both ways with `rtt` split evenly between the directions.
    #[must_use]
    pub fn with_rtt(mut self, rtt: Duration) -> Self {
        self.forward.delay = rtt / 2;
        self.backward.delay = rtt - rtt / 2;
        self
    }

    /// The round-trip time the link adds.
    pub fn rtt(&self) -> Duration {
        self.forward.delay + self.backward.delay
    }
}

fn write_rate(f: &mut fmt::Formatter<'_>, prefix: &str, rate: Option<u64>) -> fmt::Result {
    match rate {
        Some(r) if r % 1_000_000_000 == 0 => write!(f, "{prefix}rate={}gbit", r / 1_000_000_000),
        Some(r) if r % 1_000_000 == 0 => write!(f, "{prefix}rate={}mbit", r / 1_000_000),
        Some(r) => write!(f, "{prefix}rate={r}bit"),
        None => write!(f, "{prefix}rate=unlimited"),
    }
}

/// The keys of `p` that differ from `base` (all of them when `base` is `None`), each after a
/// comma but the first when `first`.
fn write_path(
    f: &mut fmt::Formatter<'_>,
    prefix: &str,
    p: &PathSpec,
    base: Option<&PathSpec>,
) -> fmt::Result {
    if base.is_none_or(|b| b.rate_bps != p.rate_bps) {
        f.write_str(",")?;
        write_rate(f, prefix, p.rate_bps)?;
    }
    if base.is_none_or(|b| b.delay != p.delay) {
        write!(f, ",{prefix}delay={}us", p.delay.as_micros())?;
    }
    // Jitter and loss are left out when zero, so that a plain link reads as before.
    if base.map_or(!p.jitter.is_zero(), |b| b.jitter != p.jitter) {
        write!(f, ",{prefix}jitter={}us", p.jitter.as_micros())?;
    }
    if base.map_or(p.loss > 0.0, |b| b.loss != p.loss) {
        // The fraction, which reads back exactly (a percentage would be divided again).
        write!(f, ",{prefix}loss={}", p.loss)?;
    }
    if base.is_none_or(|b| b.queue_bytes != p.queue_bytes) {
        write!(f, ",{prefix}queue={}", p.queue_bytes)?;
    }
    Ok(())
}

impl fmt::Display for LinkSpec {
    /// The forward direction's keys (they set both directions), then `back.` keys where the
    /// backward direction differs, then the MTU (and the seed if not the default).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Written into a string first: `write_path` puts a comma before every key.
        let s = format!("{}", Shown(self));
        f.write_str(s.strip_prefix(',').unwrap_or(&s))
    }
}

struct Shown<'a>(&'a LinkSpec);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        write_path(f, "", &s.forward, None)?;
        write_path(f, "back.", &s.backward, Some(&s.forward))?;
        write!(f, ",mtu={}", s.mtu)?;
        if s.seed != LinkSpec::default().seed {
            write!(f, ",seed={}", s.seed)?;
        }
        Ok(())
    }
}

const KEYS: &str =
    "rate, delay, rtt, jitter, loss, queue, mtu, seed; fwd.KEY or back.KEY for one direction";

impl FromStr for LinkSpec {
    type Err = String;

    /// `rate=1gbit,delay=5ms,jitter=1ms,loss=0.1%,queue=1M,mtu=1500`, any subset (the rest
    /// from [`LinkSpec::default`]), applied in order. A plain key sets both directions;
    /// `fwd.KEY` (initiator to target) or `back.KEY` one; `rtt=50ms` sets each direction's
    /// delay to half of it. `gige` alone is the default. Rates take `bit`, `kbit`, `mbit`,
    /// `gbit` (powers of 1000) or `unlimited`; delays `us`, `ms`, `s`; loss a fraction or a
    /// percentage.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut spec = LinkSpec::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "gige" {
                continue;
            }
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: use KEY=VALUE ({KEYS})"))?;
            match k {
                "mtu" => {
                    spec.mtu = v
                        .parse()
                        .ok()
                        .filter(|m| (576..=65_535).contains(m))
                        .ok_or_else(|| format!("mtu {v:?}: a number from 576 to 65535"))?
                }
                "seed" => {
                    spec.seed = v
                        .parse()
                        .map_err(|_| format!("seed {v:?}: a whole number"))?
                }
                "rtt" => {
                    let rtt = parse_delay(v)?;
                    spec = spec.with_rtt(rtt);
                }
                _ => {
                    let (dirs, key): (&[bool], &str) = match k.split_once('.') {
                        Some(("fwd", key)) => (&[true], key),
                        Some(("back", key)) => (&[false], key),
                        Some(_) => return Err(format!("unknown link key {k:?} ({KEYS})")),
                        None => (&[true, false], k),
                    };
                    for &fwd in dirs {
                        let p = if fwd {
                            &mut spec.forward
                        } else {
                            &mut spec.backward
                        };
                        set_path_key(p, key, v).map_err(|e| {
                            e.unwrap_or_else(|| format!("unknown link key {k:?} ({KEYS})"))
                        })?;
                    }
                }
            }
        }
        for (name, p) in [("forward", &spec.forward), ("backward", &spec.backward)] {
            if p.queue_bytes < u64::from(spec.mtu) {
                return Err(format!(
                    "{name} queue {} is smaller than one packet of MTU {}",
                    p.queue_bytes, spec.mtu
                ));
            }
        }
        Ok(spec)
    }
}

/// Sets one direction's `key`; `Err(None)` for a key that is not a direction's.
fn set_path_key(p: &mut PathSpec, key: &str, v: &str) -> Result<(), Option<String>> {
    match key {
        "rate" => p.rate_bps = parse_rate(v)?,
        "delay" => p.delay = parse_delay(v)?,
        "jitter" => p.jitter = parse_delay(v)?,
        "loss" => p.loss = parse_loss(v)?,
        "queue" => p.queue_bytes = parse_byte_size(v).map_err(|e| format!("queue {v:?}: {e}"))?,
        _ => return Err(None),
    }
    Ok(())
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

fn parse_loss(v: &str) -> Result<f64, String> {
    let p = match v.strip_suffix('%') {
        Some(pct) => pct.parse::<f64>().map(|x| x / 100.0),
        None => v.parse::<f64>(),
    }
    .map_err(|_| format!("loss {v:?}: a fraction (0.001) or a percentage (0.1%)"))?;
    if !(0.0..=1.0).contains(&p) {
        return Err(format!("loss {v:?}: from 0 to 100%"));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let s: LinkSpec = "rate=100mbit,delay=5ms,queue=256K".parse().unwrap();
        assert_eq!(s.forward.rate_bps, Some(100_000_000));
        assert_eq!(s.backward.delay, Duration::from_millis(5));
        assert_eq!(s.forward.queue_bytes, 262_144);
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
                .backward
                .rate_bps,
            None
        );
    }

    #[test]
    fn each_direction_on_its_own() {
        let s: LinkSpec =
            "rtt=50ms,jitter=1ms,loss=0.1%,back.rate=100mbit,fwd.loss=0,mtu=9000,seed=7"
                .parse()
                .unwrap();
        assert_eq!(s.rtt(), Duration::from_millis(50));
        assert_eq!(s.forward.delay, Duration::from_millis(25));
        assert_eq!(s.forward.jitter, Duration::from_millis(1));
        assert_eq!((s.forward.loss, s.backward.loss), (0.0, 0.001));
        assert_eq!(
            (s.forward.rate_bps, s.backward.rate_bps),
            (Some(1_000_000_000), Some(100_000_000))
        );
        let text = s.to_string();
        assert_eq!(
            text,
            "rate=1gbit,delay=25000us,jitter=1000us,queue=1048576,back.rate=100mbit,\
             back.loss=0.001,mtu=9000,seed=7"
        );
        assert_eq!(text.parse::<LinkSpec>().unwrap(), s, "round trip");
        // An odd RTT keeps its last microsecond.
        let odd = LinkSpec::default().with_rtt(Duration::from_micros(3));
        assert_eq!(odd.rtt(), Duration::from_micros(3));
    }

    #[test]
    fn errors_name_the_problem() {
        for (bad, says) in [
            ("rate=fast", "bit"),
            ("delay=5", "us, ms or s"),
            ("speed=1gbit", "unknown link key"),
            ("side.rate=1gbit", "unknown link key"),
            ("fwd.mtu=1500", "unknown link key"),
            ("mtu=100", "576"),
            ("queue=1K", "smaller than one packet"),
            ("back.queue=1K", "backward queue"),
            ("loss=2", "0 to 100%"),
            ("loss=lots", "percentage"),
            ("seed=-1", "whole number"),
        ] {
            let e = bad.parse::<LinkSpec>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
