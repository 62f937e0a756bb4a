//! The Markdown report: each figure beside what the study says of it, with the numbers.

use std::fmt::Write as _;

use super::framer::FramerCounts;
use super::markov::{Entry, TransitionMatrix};
use super::poly::{Generator, CRC16, CRC20, CRC3, CRC32C, CRC32_IEEE, CRC8};
use super::study::{Results, CRC32_BERS, FIG_6_7_BERS, FIG_6_8_BER, FIG_6_9_BER};

/// Study title, as cited.
pub const STUDY: &str = "Sajid Hussain, \"Performance Evaluation of iSCSI for IP Storage and \
                         Transport Protocols\" (PhD dissertation, University of Manitoba, 2004), \
                         chapter 6, \"CRC Errors and iSCSI\"";

fn value(res: &Results, fig: &str, g: &str, method: &str, ber: f64, bits: u64) -> Option<f64> {
    res.select(fig, g, method)
        .find(|r| r.ber == ber && r.bits == bits)
        .map(|r| r.value)
}

fn sci(v: Option<f64>) -> String {
    v.map_or_else(
        || "-".into(),
        |v| {
            if v == 0.0 {
                "0".into()
            } else {
                format!("{v:.3e}")
            }
        },
    )
}

fn ratio(v: Option<f64>, g: &Generator) -> String {
    v.map_or_else(
        || "-".into(),
        |v| format!("{:.3}", v * f64::from(g.degree).exp2()),
    )
}

fn matrix_table(out: &mut String) {
    let Some(m) = TransitionMatrix::study_numbering(&CRC3) else {
        return;
    };
    out.push_str(
        "| to \\ from | 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7 |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for (i, row) in m.m.iter().enumerate() {
        let cells: Vec<&str> = row
            .iter()
            .map(|e| match e {
                Entry::Zero => "0",
                Entry::P => "p",
                Entry::OneMinusP => "1-p",
            })
            .collect();
        let _ = writeln!(
            out,
            "| {i} (reg {:03b}) | {} |",
            m.register[i],
            cells.join(" | ")
        );
    }
}

/// The report.
#[must_use]
pub fn markdown(res: &Results, scale: &str, pngs: &[String]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "## CRC and TCP checksum aliasing (scale: {scale})\n");
    let _ = writeln!(
        o,
        "Reproduces {STUDY}: a Markov model of an n-bit CRC register under independent bit \
         errors, the probability that a packet in error passes the check (aliases) against \
         packet length, and the TCP checksum's aliasing; then measures sluice's framer. \
         Polynomials: {}, {}, {}, {}, {}, {}.\n",
        CRC3.name, CRC8.name, CRC16.name, CRC20.name, CRC32_IEEE.name, CRC32C.name
    );
    for p in pngs {
        let _ = writeln!(o, "![{p}]({p})");
    }
    o.push_str("\n### Figures 6.2-6.6: the 3-bit example\n\n");
    o.push_str(
        "The study's equation 6.1 is the transition matrix of the generator x^3 + x + 1 with \
         state k >= 1 holding x^(k-1) mod g (the cycle order); sluice builds it from the \
         polynomial and a unit test compares it entry by entry with the printed matrix:\n\n",
    );
    matrix_table(&mut o);
    let _ = writeln!(
        o,
        "\nIt is doubly stochastic; every state tends to 1/8. The probability of aliasing \
         given an error is exact (integer counts of error patterns per weight, checked against \
         enumeration of every pattern). At BER 0.5 it is 1/8 from 3 bits on; at BER 0.1 it is \
         {} at 8 bits and {} at 64; at BER 0.001 it is {} at 8 bits: short packets alias less \
         than the asymptote, not more.\n",
        sci(value(res, "fig6_6", CRC3.name, "markov", 0.1, 8)),
        sci(value(res, "fig6_6", CRC3.name, "markov", 0.1, 64)),
        sci(value(res, "fig6_6", CRC3.name, "markov", 0.001, 8)),
    );

    o.push_str("### Figure 6.7: a 16-bit maximal-length CRC, BER 1e-4 to 1e-8\n\n");
    o.push_str(
        "The study: the curves for all five BERs lie on top of each other; 64-byte frames \
         alias with probability about 0.002; at 12,000 bits aliasing is still about 5 times \
         2^-16; at 8 KB it is within 1 % of 2^-16. Measured (ratio = P x 2^16):\n\n\
         | BER | 64 B | ratio | 1500 B | ratio | 8 KiB | ratio |\n|---|---|---|---|---|---|---|\n",
    );
    for p in FIG_6_7_BERS {
        let a = value(res, "fig6_7", CRC16.name, "markov", p, 512);
        let b = value(res, "fig6_7", CRC16.name, "markov", p, 12_000);
        let c = value(res, "fig6_7", CRC16.name, "markov", p, 65_536);
        let _ = writeln!(
            o,
            "| {p:e} | {} | {} | {} | {} | {} | {} |",
            sci(a),
            ratio(a, &CRC16),
            sci(b),
            ratio(b, &CRC16),
            sci(c),
            ratio(c, &CRC16)
        );
    }
    o.push_str(
        "\nWith independent bit errors a maximal-length 16-bit code detects every 1- and \
         2-bit error in packets shorter than 65,535 bits, so aliasing needs at least d >= 3 \
         errors (d the smallest codeword weight at that length) and its probability given an \
         error scales as (L p)^(d-1) at small L p: the curves separate by d-1 decades per \
         decade of BER and approach 2^-16 from below.\n\n",
    );

    let _ = writeln!(
        o,
        "### Figure 6.8: 8, 16, 20 (and 32) bits at BER {FIG_6_8_BER:e}\n"
    );
    o.push_str("| CRC | method | 64 B | 1500 B | 2 KiB |\n|---|---|---|---|---|\n");
    for (g, fig, method) in [
        (CRC8, "fig6_8", "markov"),
        (CRC16, "fig6_7", "markov"),
        (CRC20, "fig6_8", "markov"),
        (CRC32_IEEE, "fig6_8", "reduced"),
        (CRC32C, "fig6_8", "reduced"),
    ] {
        let v = |b| sci(value(res, fig, g.name, method, FIG_6_8_BER, b));
        let _ = writeln!(
            o,
            "| {} | {method} | {} | {} | {} |",
            g.name,
            v(512),
            v(12_000),
            v(16_384)
        );
    }
    let r20 = |b| {
        let a = value(res, "fig6_8", CRC20.name, "markov", FIG_6_8_BER, b)?;
        let c = value(res, "fig6_7", CRC16.name, "markov", FIG_6_8_BER, b)?;
        Some(a / c)
    };
    let _ = writeln!(
        o,
        "\nThe study found the 20-bit curve almost identical to the 16-bit one. Here the \
         20-bit CRC aliases {} times as often as the 16-bit one at 64 B and {} times at 1500 B \
         (both far below their asymptotes): which code aliases more at a given length depends \
         on its low-weight codewords (a 16-bit code has none of weight 3 or 4 in 64 bytes if \
         its generator is well chosen), not only on its width.\n",
        sci(r20(512)),
        sci(r20(12_000)),
    );
    o.push_str("### 32-bit CRCs: IEEE 802.3 (the study's) and CRC-32C (iSCSI's digest)\n\n");
    o.push_str(
        "2^32 states rule the chain out. The reduced model conditions on the number of \
         errors: P(alias | error) = sum_w P(W=w | W>=1) A_w(N)/C(N,w), with the binomial \
         weights exact, A_1..A_4 counted exactly from the residues x^i mod g, and the share \
         2^-n for 5 or more errors (lower bound: 0; upper bound: 1). It agrees with the chain \
         for 8 and 16 bits (cross-checks below).\n\n\
         In brackets, the share of the estimate that the exact weights account for: \
         near 1 the value is exact to the binomial tail; near 0 it rests on the 2^-n share of \
         heavier patterns, which the cross-checks show is off by up to an order of magnitude \
         on packets only a few times longer than the CRC.\n\n\
         | CRC | BER | 64 B | 1500 B | longest |\n|---|---|---|---|---|\n",
    );
    for g in [CRC32_IEEE, CRC32C] {
        for p in CRC32_BERS {
            let rows: Vec<_> = res
                .select("crc32", g.name, "reduced")
                .filter(|r| r.ber == p)
                .collect();
            let cell = |bits: Option<u64>| {
                bits.and_then(|b| rows.iter().find(|r| r.bits == b))
                    .map_or_else(
                        || "-".to_string(),
                        |r| format!("{} ({:.2})", sci(Some(r.value)), r.low / r.value),
                    )
            };
            let last = rows.last().map(|r| r.bits);
            let _ = writeln!(
                o,
                "| {} | {p:e} | {} | {} | {} bits: {} |",
                g.name,
                cell(Some(512)),
                cell(Some(12_000)),
                last.unwrap_or(0),
                cell(last),
            );
        }
    }
    for (name, h) in &res.heavy {
        let _ = writeln!(
            o,
            "\n{name} at {} bits: A_5 = {}, A_6 = {} (counted exactly); with weights up to 6 \
             exact: {}.",
            h.len,
            h.a5,
            h.a6,
            CRC32_BERS
                .iter()
                .map(|&p| {
                    let r = res.select("crc32", name, "reduced-w6").find(|r| r.ber == p);
                    format!(
                        "{} at BER {p:e} (exact share {:.2})",
                        sci(r.map(|r| r.value)),
                        r.map_or(0.0, |r| r.low / r.value)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    o.push_str("\n### Cross-checks\n\n| check | CRC | BER | bits | value | against | value |\n|---|---|---|---|---|---|---|\n");
    for r in res
        .rows
        .iter()
        .filter(|r| r.figure == "crosscheck" && r.method == "reduced")
    {
        let chain = value(res, "crosscheck", &r.checker, "markov", r.ber, r.bits);
        let _ = writeln!(
            o,
            "| reduced model | {} | {:e} | {} | {} | Markov chain | {} |",
            r.checker,
            r.ber,
            r.bits,
            sci(Some(r.value)),
            sci(chain)
        );
    }
    for r in res
        .rows
        .iter()
        .filter(|r| r.figure == "crosscheck" && r.method == "montecarlo")
    {
        let (against, v) = if r.flips == 4 {
            (
                "exact count A_4/C(N,4)",
                value(res, "crosscheck", &r.checker, "exact-count", r.ber, r.bits),
            )
        } else {
            (
                "Markov chain",
                value(res, "crosscheck", &r.checker, "markov", r.ber, r.bits),
            )
        };
        let _ = writeln!(
            o,
            "| Monte Carlo ({} / {}), 95 % CI [{}, {}] | {} | {:e} | {} | {} | {against} | {} |",
            r.events,
            r.trials,
            sci(Some(r.low)),
            sci(Some(r.high)),
            r.checker,
            r.ber,
            r.bits,
            sci(Some(r.value)),
            sci(v)
        );
    }

    let _ = writeln!(
        o,
        "\n### Figure 6.9: the TCP checksum at BER {FIG_6_9_BER:e}\n"
    );
    o.push_str(
        "The study: about 0.0027 at 1500 bytes (45 aliased of 16,743 packets in error), \
         rising with segment size. Here: stratified simulation (conditioning on the number of \
         bit errors, exact binomial weights, uniform data), 95 % CI.\n\n\
         | segment | P(alias | error) | 95 % CI | 2-bit closed form | strata | plain-MC segments for the same variance |\n|---|---|---|---|---|---|---|\n",
    );
    for t in &res.tcp {
        let two = value(
            res,
            "fig6_9",
            "tcp-checksum",
            "closed-form-2-bit",
            t.ber,
            t.bytes * 8,
        );
        let _ = writeln!(
            o,
            "| {} B | {} | [{}, {}] | {} | {} | {:.2e} |",
            t.bytes,
            sci(Some(t.estimate)),
            sci(Some(t.low)),
            sci(Some(t.high)),
            sci(two),
            t.strata.len(),
            t.plain_equivalent
        );
    }
    o.push_str(
        "\nTwo flips pass exactly when they hit the same bit column of two different 16-bit \
         words in opposite directions, probability about 1/32 for uniform data; the share of \
         2-error packets among packets in error grows with length, so the aliasing does too.\n\n",
    );

    o.push_str("### sluice's framer: corrupted Data-In PDUs (8 KiB data, CRC32C header and data digests, 1448-byte segments)\n\n");
    o.push_str(
        "| data | flips | corruptions | passed TCP | share [95 % CI] | predicted | of those, caught by CRC32C (header / data) | undetected by both | all corruptions caught by CRC32C |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for (payload, c) in &res.framer {
        framer_line(&mut o, payload.name(), c);
    }
    o.push_str(
        "\nThe checksum prediction for 2 flips is exact for the bytes sent; for 3 and 4 flips \
         it is the uniform-data share. CRC32C is predicted to catch every one (odd weights \
         through its x+1 factor; 2 errors need a span of 2^31-1 bits; 4-bit codewords are \
         about one pattern in 2^32).\n",
    );
    o
}

fn framer_line(o: &mut String, data: &str, c: &FramerCounts) {
    let (lo, hi) = super::montecarlo::wilson(c.tcp_passed, c.trials);
    let (_, undet_hi) = super::montecarlo::wilson(c.undetected, c.trials);
    let _ = writeln!(
        o,
        "| {data} | {} | {} | {} | {:.4e} [{:.4e}, {:.4e}] | {:.4e} | {} ({} / {}) | {} (95 % upper {:.1e}) | {} |",
        c.w,
        c.trials,
        c.tcp_passed,
        c.tcp_passed as f64 / c.trials as f64,
        lo,
        hi,
        c.tcp_predicted,
        c.header_caught + c.data_caught,
        c.header_caught,
        c.data_caught,
        c.undetected,
        undet_hi,
        c.digest_caught_all
    );
}
