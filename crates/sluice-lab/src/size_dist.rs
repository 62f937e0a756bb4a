//! Command sizes: one fixed size, or a probability mass function over sizes (equation 4.1 of
//! Sajid Hussain, "Performance Evaluation of iSCSI for IP Storage and Transport Protocols",
//! PhD dissertation, University of Manitoba, 2004: `8k:0.1,16k:0.2,32k:0.3,64k:0.4`), sampled
//! by inverting its CDF.

use rand::Rng;

use crate::error::LabError;

/// How far the probabilities of a pmf may sum away from 1.
const PMF_TOLERANCE: f64 = 1e-6;

/// The size of each command, in bytes.
#[derive(Clone, Debug, PartialEq)]
pub enum SizeDist {
    /// Every command moves this many bytes.
    Fixed(u32),
    /// Sizes with probabilities (summing to 1), kept with their cumulative probabilities.
    Pmf {
        /// The sizes, in the order given.
        sizes: Vec<u32>,
        /// `cdf[i]` = P(size index <= i); the last entry is 1.
        cdf: Vec<f64>,
    },
}

impl SizeDist {
    /// Parses `4k` (a fixed size) or `SIZE:P,SIZE:P,...` (a pmf). Sizes take binary suffixes
    /// `k`, `m`, `g` (with optional `b`/`ib`); probabilities must be positive and sum to 1.
    pub fn parse(text: &str) -> Result<Self, LabError> {
        let err = |why: String| LabError::SizeDist {
            text: text.to_owned(),
            why,
        };
        if !text.contains(':') {
            return parse_u32_size(text).map(SizeDist::Fixed).map_err(err);
        }
        let mut sizes = Vec::new();
        let mut cdf = Vec::new();
        let mut total = 0.0;
        for part in text.split(',') {
            let (size, p) = part
                .split_once(':')
                .ok_or_else(|| err(format!("{part:?} is not SIZE:PROBABILITY")))?;
            let size = parse_u32_size(size).map_err(err)?;
            let p: f64 = p
                .trim()
                .parse()
                .map_err(|_| err(format!("{p:?} is not a probability")))?;
            if !(p > 0.0 && p <= 1.0) {
                return Err(err(format!("probability {p} is not in (0, 1]")));
            }
            if sizes.contains(&size) {
                return Err(err(format!("size {size} appears twice")));
            }
            total += p;
            sizes.push(size);
            cdf.push(total);
        }
        if (total - 1.0).abs() > PMF_TOLERANCE {
            return Err(err(format!("probabilities sum to {total}, not 1")));
        }
        if let Some(last) = cdf.last_mut() {
            *last = 1.0;
        }
        Ok(SizeDist::Pmf { sizes, cdf })
    }

    /// Draws one size.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u32 {
        match self {
            SizeDist::Fixed(n) => *n,
            SizeDist::Pmf { sizes, cdf } => {
                let u: f64 = rng.gen();
                let i = cdf.partition_point(|&c| c <= u).min(sizes.len() - 1);
                sizes[i]
            }
        }
    }

    /// The sizes and their probabilities.
    pub fn entries(&self) -> Vec<(u32, f64)> {
        match self {
            SizeDist::Fixed(n) => vec![(*n, 1.0)],
            SizeDist::Pmf { sizes, cdf } => {
                let mut prev = 0.0;
                sizes
                    .iter()
                    .zip(cdf)
                    .map(|(&s, &c)| {
                        // Undo the float noise of summing and subtracting.
                        let p = ((c - prev) * 1e9).round() / 1e9;
                        prev = c;
                        (s, p)
                    })
                    .collect()
            }
        }
    }

    /// The largest size.
    pub fn max(&self) -> u32 {
        self.entries().iter().map(|e| e.0).max().unwrap_or(0)
    }

    /// The expected size in bytes.
    pub fn mean(&self) -> f64 {
        self.entries().iter().map(|&(s, p)| f64::from(s) * p).sum()
    }
}

/// Parses a byte count with an optional binary suffix: `4096`, `4k`, `1M`, `64KiB`, `1g`.
pub fn parse_byte_size(text: &str) -> Result<u64, String> {
    let s = text.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a size (e.g. 4096, 4k, 1M)"))?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(format!("{text:?}: unknown unit {unit:?}")),
    };
    n.checked_shl(shift)
        .filter(|v| v >> shift == n)
        .ok_or_else(|| format!("{text:?} is too large"))
}

fn parse_u32_size(text: &str) -> Result<u32, String> {
    let n = parse_byte_size(text)?;
    match u32::try_from(n) {
        Ok(0) => Err(format!("{text:?}: a command size must not be 0")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{text:?}: a command moves at most 4 GiB - 1")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn fixed_sizes() {
        assert_eq!(SizeDist::parse("4k").unwrap(), SizeDist::Fixed(4096));
        assert_eq!(SizeDist::parse("1M").unwrap(), SizeDist::Fixed(1 << 20));
        assert_eq!(SizeDist::parse("512").unwrap(), SizeDist::Fixed(512));
        assert_eq!(SizeDist::parse("64KiB").unwrap().max(), 65536);
    }

    #[test]
    fn hussain_size_pmf() {
        let d = SizeDist::parse("8k:0.1,16k:0.2,32k:0.3,64k:0.4").unwrap();
        let e = d.entries();
        assert_eq!(
            e.iter().map(|x| x.0).collect::<Vec<_>>(),
            [8192, 16384, 32768, 65536]
        );
        for ((_, p), want) in e.iter().zip([0.1, 0.2, 0.3, 0.4]) {
            assert!((p - want).abs() < 1e-9);
        }
        assert_eq!(d.max(), 65536);
        // 0.1*8 + 0.2*16 + 0.3*32 + 0.4*64 = 39.2 KiB
        assert!((d.mean() - 39.2 * 1024.0).abs() < 1e-6);
    }

    #[test]
    fn pmf_sampling_matches_probabilities() {
        let d = SizeDist::parse("8k:0.1,16k:0.2,32k:0.3,64k:0.4").unwrap();
        let mut rng = SmallRng::seed_from_u64(4);
        let n = 200_000;
        let mut counts = [0u32; 4];
        for _ in 0..n {
            let s = d.sample(&mut rng);
            counts[(s / 8192).trailing_zeros() as usize] += 1;
        }
        for (c, p) in counts.iter().zip([0.1, 0.2, 0.3, 0.4]) {
            let freq = f64::from(*c) / f64::from(n);
            // Standard error is at most sqrt(0.25 / n) ~ 0.0011; allow 5 of them.
            assert!((freq - p).abs() < 0.006, "{counts:?}");
        }
    }

    #[test]
    fn bad_distributions() {
        for bad in [
            "",
            "0",
            "4q",
            "8k:0.5,16k:0.4",
            "8k:0.5,8k:0.5",
            "8k:1.5",
            "8k:-0.1,16k:1.1",
            "8k:x",
            "8k:0.5,16k",
            "8g",
        ] {
            let e = SizeDist::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("size distribution"), "{bad}: {e}");
        }
    }
}
