//! The experiments: every figure's numbers, as rows.

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::framer::{self, FramerCounts, Payload};
use super::heavy::{count_heavy, HeavyWeights};
use super::markov::alias_curve;
use super::montecarlo::{self, wilson};
use super::plan::Plan;
use super::poly::{Generator, CRC16, CRC20, CRC3, CRC32C, CRC32_IEEE, CRC8};
use super::rows::AliasRow;
use super::tcp::{self, TcpAlias};
use super::weights::{choose, reduced_alias, LowWeights};

/// The bit error rates of the study's figure 6.7.
pub const FIG_6_7_BERS: [f64; 5] = [1e-4, 1e-5, 1e-6, 1e-7, 1e-8];
/// The bit error rate of figure 6.8.
pub const FIG_6_8_BER: f64 = 1e-7;
/// The bit error rate of figure 6.9 (the study's "approximately 1.5e-5").
pub const FIG_6_9_BER: f64 = 1.5e-5;
/// The bit error rates of the 3-bit example's curves.
pub const CRC3_BERS: [f64; 4] = [0.5, 0.1, 0.01, 0.001];
/// Bit error rates of the 32-bit figure.
pub const CRC32_BERS: [f64; 3] = [1e-4, 1e-5, 1e-7];
/// TCP segment sizes of figure 6.9, bytes (checksum word included).
pub const TCP_SIZES: [u64; 10] = [64, 128, 256, 512, 1024, 1500, 2048, 4096, 8192, 9000];
/// The iSCSI data segment of the framer measurement, bytes (the study's 8 KB iSCSI frame).
pub const FRAMER_DATA: usize = 8192;

/// Everything a run computed.
#[derive(Clone, Debug, Default)]
pub struct Results {
    /// Every row.
    pub rows: Vec<AliasRow>,
    /// The TCP estimates, one per segment size.
    pub tcp: Vec<TcpAlias>,
    /// The framer measurement, per payload and stratum.
    pub framer: Vec<(Payload, FramerCounts)>,
    /// Codewords of weight 5 and 6 of the 32-bit CRCs at one short length.
    pub heavy: Vec<(&'static str, HeavyWeights)>,
}

impl Results {
    /// The rows of one figure, one checker and one method.
    pub fn select<'a>(
        &'a self,
        figure: &'a str,
        checker: &'a str,
        method: &'a str,
    ) -> impl Iterator<Item = &'a AliasRow> + 'a {
        self.rows
            .iter()
            .filter(move |r| r.figure == figure && r.checker == checker && r.method == method)
    }
}

fn chain_rows(figure: &str, g: &Generator, p: f64, lengths: &[usize]) -> Vec<AliasRow> {
    alias_curve(g, p, lengths)
        .into_iter()
        .zip(lengths)
        .map(|(v, &l)| AliasRow::exact(figure, g.name, "markov", p, l as u64, v))
        .collect()
}

fn reduced_rows(
    figure: &str,
    g: &Generator,
    lw: &LowWeights,
    p: f64,
    lengths: &[usize],
    heavy: Option<&HeavyWeights>,
) -> Vec<AliasRow> {
    let method = if heavy.is_some() {
        "reduced-w6"
    } else {
        "reduced"
    };
    lengths
        .iter()
        .filter_map(|&l| {
            let r = reduced_alias(g, lw, l, p, heavy)?;
            let mut row = AliasRow::exact(figure, g.name, method, p, l as u64, r.estimate);
            row.low = r.low;
            row.high = r.high;
            Some(row)
        })
        .collect()
}

/// The 3-bit example, figures 6.7 and 6.8, the 32-bit CRCs and the cross-checks.
pub fn crc_figures(plan: &Plan, progress: &dyn Fn(&str), out: &mut Results) {
    let short: Vec<usize> = (1..=64).collect();
    for p in CRC3_BERS {
        out.rows.extend(chain_rows("fig6_6", &CRC3, p, &short));
    }
    let lengths = Plan::lengths(plan.chain_bits);
    for &p in &plan.bers {
        progress(&format!(
            "crc-alias: 16-bit Markov chain at BER {p:e}, up to {} bits",
            plan.chain_bits
        ));
        out.rows.extend(chain_rows("fig6_7", &CRC16, p, &lengths));
    }
    progress("crc-alias: 8-bit Markov chain");
    out.rows
        .extend(chain_rows("fig6_8", &CRC8, FIG_6_8_BER, &lengths));
    if plan.chain20_bits > 0 {
        progress(&format!(
            "crc-alias: 20-bit Markov chain, up to {} bits",
            plan.chain20_bits
        ));
        out.rows.extend(chain_rows(
            "fig6_8",
            &CRC20,
            FIG_6_8_BER,
            &Plan::lengths(plan.chain20_bits),
        ));
    }
    let reduced = Plan::lengths(plan.reduced_bits);
    for g in [CRC32_IEEE, CRC32C] {
        progress(&format!(
            "crc-alias: low-weight codewords of {}, up to {} bits",
            g.name, plan.reduced_bits
        ));
        let lw = LowWeights::count(&g, plan.reduced_bits, plan.reduced_bits);
        out.rows
            .extend(reduced_rows("fig6_8", &g, &lw, FIG_6_8_BER, &reduced, None));
        for p in CRC32_BERS {
            out.rows
                .extend(reduced_rows("crc32", &g, &lw, p, &reduced, None));
        }
        if plan.heavy_bits > 0 {
            progress(&format!(
                "crc-alias: 5- and 6-bit codewords of {} at {} bits",
                g.name, plan.heavy_bits
            ));
            let lw = LowWeights::count(&g, plan.heavy_bits, plan.heavy_bits);
            if let Some(h) = count_heavy(&g, &lw, plan.heavy_bits) {
                for p in CRC32_BERS {
                    out.rows
                        .extend(reduced_rows("crc32", &g, &lw, p, &[h.len], Some(&h)));
                }
                out.heavy.push((g.name, h));
            }
        }
    }
    crosschecks(plan, progress, &lengths, out);
}

/// The reduced model against the chain (8 and 16 bits), and plain Monte Carlo against both.
fn crosschecks(plan: &Plan, progress: &dyn Fn(&str), lengths: &[usize], out: &mut Results) {
    progress("crc-alias: cross-checks (reduced model, Monte Carlo)");
    let reduced: Vec<usize> = lengths
        .iter()
        .copied()
        .filter(|&l| l <= plan.reduced_bits)
        .collect();
    for (g, bers) in [(CRC8, [1e-3, 1e-5]), (CRC16, [1e-4, 1e-6])] {
        let lw = LowWeights::count(&g, plan.reduced_bits, plan.reduced_bits);
        for p in bers {
            out.rows.extend(chain_rows("crosscheck", &g, p, &reduced));
            out.rows
                .extend(reduced_rows("crosscheck", &g, &lw, p, &reduced, None));
        }
    }
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    for p in [1e-2, 1e-3] {
        for len in [64usize, 256, 1024] {
            let (errored, aliased) = montecarlo::bsc(&CRC8, p, len, plan.mc_packets, &mut rng);
            let (lo, hi) = wilson(aliased, errored);
            out.rows.push(AliasRow {
                low: lo,
                high: hi,
                trials: errored,
                events: aliased,
                ..AliasRow::exact(
                    "crosscheck",
                    CRC8.name,
                    "montecarlo",
                    p,
                    len as u64,
                    aliased as f64 / errored.max(1) as f64,
                )
            });
            out.rows.extend(chain_rows("crosscheck", &CRC8, p, &[len]));
        }
    }
    if plan.mc_patterns > 0 {
        // Weight-4 patterns of a 16-bit code at 1024 bits: simulated share against A_4/C(N,4).
        let len = 1024;
        let lw = LowWeights::count(&CRC16, len, len);
        let exact = lw.codewords(4, len).unwrap_or(0) as f64 / choose(len as u64, 4);
        let hits = montecarlo::weight(&CRC16, len, 4, plan.mc_patterns, &mut rng);
        let (lo, hi) = wilson(hits, plan.mc_patterns);
        let base = AliasRow {
            quantity: "share of 4-bit patterns aliasing".into(),
            flips: 4,
            ..AliasRow::exact(
                "crosscheck",
                CRC16.name,
                "exact-count",
                0.0,
                len as u64,
                exact,
            )
        };
        out.rows.push(AliasRow {
            method: "montecarlo".into(),
            value: hits as f64 / plan.mc_patterns as f64,
            low: lo,
            high: hi,
            trials: plan.mc_patterns,
            events: hits,
            ..base.clone()
        });
        out.rows.push(base);
    }
}

/// Figure 6.9: the TCP checksum, stratified simulation and the 2-bit closed form.
pub fn tcp_figure(plan: &Plan, progress: &dyn Fn(&str), out: &mut Results) {
    progress("crc-alias: TCP checksum, stratified by number of bit errors");
    for bytes in TCP_SIZES {
        let r = tcp::estimate(bytes, FIG_6_9_BER, plan.tcp_trials, 1e-4, 0x7c9);
        let bits = bytes * 8;
        let trials = r.strata.iter().map(|s| s.trials).sum();
        let events = r.strata.iter().map(|s| s.passed).sum();
        out.rows.push(AliasRow {
            low: r.low,
            high: r.high,
            trials,
            events,
            ..AliasRow::exact(
                "fig6_9",
                "tcp-checksum",
                "stratified",
                FIG_6_9_BER,
                bits,
                r.estimate,
            )
        });
        let (head, _) = super::binomial::conditional_weights(bits, FIG_6_9_BER, 2);
        let two = head[1] * tcp::two_flip_pass_share(bytes / 2);
        out.rows.push(AliasRow::exact(
            "fig6_9",
            "tcp-checksum",
            "closed-form-2-bit",
            FIG_6_9_BER,
            bits,
            two,
        ));
        out.tcp.push(r);
    }
}

/// The measurement with sluice's framer.
pub fn framer_measurement(plan: &Plan, progress: &dyn Fn(&str), out: &mut Results) {
    for payload in [Payload::Random, Payload::Pattern] {
        for (i, w) in [2usize, 3, 4].into_iter().enumerate() {
            progress(&format!(
                "crc-alias: sluice framer, {} data, {w}-bit corruptions x {}",
                payload.name(),
                plan.framer_trials[i]
            ));
            // Uniform-data prediction for w flips in one 1448-byte segment.
            let g_uniform = match w {
                2 => tcp::two_flip_pass_share((framer::MSS / 2) as u64),
                _ => {
                    let mut rng = SmallRng::seed_from_u64(0x3a + w as u64);
                    let n = plan.framer_trials[i];
                    let passed =
                        tcp::simulate_stratum(&mut rng, framer::MSS * 8, w, n, &mut Vec::new());
                    passed as f64 / n as f64
                }
            };
            let c = framer::measure(
                FRAMER_DATA,
                payload,
                w,
                plan.framer_trials[i],
                g_uniform,
                0xf4 + w as u64,
            );
            let bits = (framer::MSS * 8) as u64;
            let checker = format!("sluice framer ({} data)", payload.name());
            let (lo, hi) = wilson(c.tcp_passed, c.trials);
            let base = AliasRow {
                flips: w as u64,
                ..AliasRow::exact("framer", &checker, "measured", 0.0, bits, 0.0)
            };
            out.rows.push(AliasRow {
                quantity: "tcp-pass-share".into(),
                value: c.tcp_passed as f64 / c.trials as f64,
                low: lo,
                high: hi,
                trials: c.trials,
                events: c.tcp_passed,
                ..base.clone()
            });
            out.rows.push(AliasRow {
                quantity: "tcp-pass-share".into(),
                method: "predicted".into(),
                value: c.tcp_predicted,
                low: c.tcp_predicted,
                high: c.tcp_predicted,
                ..base.clone()
            });
            let caught = c.header_caught + c.data_caught;
            let (lo, hi) = wilson(caught, c.tcp_passed);
            out.rows.push(AliasRow {
                quantity: "crc32c-catch-share-of-tcp-passed".into(),
                value: caught as f64 / c.tcp_passed.max(1) as f64,
                low: lo,
                high: hi,
                trials: c.tcp_passed,
                events: caught,
                ..base.clone()
            });
            let (lo, hi) = wilson(c.digest_caught_all, c.trials);
            out.rows.push(AliasRow {
                quantity: "crc32c-catch-share-all".into(),
                value: c.digest_caught_all as f64 / c.trials as f64,
                low: lo,
                high: hi,
                trials: c.trials,
                events: c.digest_caught_all,
                ..base.clone()
            });
            let (lo, hi) = wilson(c.undetected, c.trials);
            out.rows.push(AliasRow {
                quantity: "undetected-by-both-share".into(),
                value: c.undetected as f64 / c.trials as f64,
                low: lo,
                high: hi,
                trials: c.trials,
                events: c.undetected,
                ..base
            });
            out.framer.push((payload, c));
        }
    }
}
