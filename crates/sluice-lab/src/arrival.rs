//! When commands arrive: as fast as completions allow (closed loop), at a fixed rate, or as a
//! Poisson process (exponentially distributed inter-arrival times, equations 4.3 and 4.4 of
//! Sajid Hussain, "Performance Evaluation of iSCSI for IP Storage and Transport Protocols",
//! PhD dissertation, University of Manitoba, 2004).

use std::time::Duration;

use rand::Rng;

/// The arrival process of commands.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arrival {
    /// Each worker issues its next command when the previous one completes.
    Closed,
    /// `rate` commands per second, evenly spaced.
    Fixed {
        /// Commands per second.
        rate: f64,
    },
    /// A Poisson process of `rate` commands per second: inter-arrival times are exponential
    /// with mean `1 / rate`.
    Poisson {
        /// Commands per second.
        rate: f64,
    },
}

impl Arrival {
    /// The process each of `n` independent workers follows so that together they make `self`:
    /// the rate is divided by `n` (the superposition of `n` Poisson processes of rate
    /// `rate / n` is a Poisson process of rate `rate`).
    pub fn split(self, n: usize) -> Self {
        let n = n.max(1) as f64;
        match self {
            Arrival::Closed => Arrival::Closed,
            Arrival::Fixed { rate } => Arrival::Fixed { rate: rate / n },
            Arrival::Poisson { rate } => Arrival::Poisson { rate: rate / n },
        }
    }

    /// The time until the next arrival, or `None` for a closed loop.
    pub fn next_gap<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<Duration> {
        match *self {
            Arrival::Closed => None,
            Arrival::Fixed { rate } => Some(Duration::from_secs_f64(1.0 / rate)),
            Arrival::Poisson { rate } => Some(Duration::from_secs_f64(exponential(rng, rate))),
        }
    }

    /// The mean inter-arrival time, or `None` for a closed loop.
    pub fn mean_gap(&self) -> Option<Duration> {
        match *self {
            Arrival::Closed => None,
            Arrival::Fixed { rate } | Arrival::Poisson { rate } => {
                Some(Duration::from_secs_f64(1.0 / rate))
            }
        }
    }
}

/// A sample of the exponential distribution with rate `lambda` (mean `1 / lambda`), by
/// inversion of its CDF `F(x) = 1 - e^(-lambda x)`.
pub fn exponential<R: Rng + ?Sized>(rng: &mut R, lambda: f64) -> f64 {
    // gen::<f64>() is in [0, 1): 1 - u is in (0, 1], so ln is finite.
    let u: f64 = rng.gen();
    -(1.0 - u).ln() / lambda
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn stats(a: Arrival, n: usize, seed: u64) -> (f64, f64) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let xs: Vec<f64> = (0..n)
            .map(|_| a.next_gap(&mut rng).unwrap().as_secs_f64())
            .collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        (mean, var.sqrt())
    }

    #[test]
    fn poisson_inter_arrival_mean_and_spread() {
        // Over several seeds and rates: the sample mean is within 4 standard errors of 1/rate,
        // and the standard deviation equals the mean (a property of the exponential).
        for (seed, rate) in [(1, 1000.0), (2, 50_000.0), (3, 7.0), (4, 250.0)] {
            let n = 100_000;
            let (mean, sd) = stats(Arrival::Poisson { rate }, n, seed);
            let want = 1.0 / rate;
            let se = want / (n as f64).sqrt();
            assert!((mean - want).abs() < 4.0 * se, "rate {rate}: mean {mean}");
            assert!(
                (sd / mean - 1.0).abs() < 0.03,
                "rate {rate}: sd {sd} mean {mean}"
            );
        }
    }

    #[test]
    fn exponential_memoryless_tail() {
        // P(X > 1/lambda) = e^-1 for an exponential.
        let mut rng = SmallRng::seed_from_u64(9);
        let n = 100_000;
        let over = (0..n).filter(|_| exponential(&mut rng, 2.0) > 0.5).count();
        let p = over as f64 / n as f64;
        assert!((p - (-1f64).exp()).abs() < 0.01, "{p}");
    }

    #[test]
    fn fixed_and_split() {
        let a = Arrival::Fixed { rate: 1000.0 };
        let mut rng = SmallRng::seed_from_u64(0);
        assert_eq!(a.next_gap(&mut rng), Some(Duration::from_millis(1)));
        assert_eq!(a.split(4).mean_gap(), Some(Duration::from_millis(4)));
        assert_eq!(
            Arrival::Poisson { rate: 100.0 }.split(2),
            Arrival::Poisson { rate: 50.0 }
        );
        assert_eq!(Arrival::Closed.next_gap(&mut rng), None);
    }
}
