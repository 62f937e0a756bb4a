//! The PNG figures, drawn from the rows.

use std::path::{Path, PathBuf};

use super::plot::{draw, Line, Style};
use super::poly::{Generator, CRC16, CRC20, CRC3, CRC32C, CRC32_IEEE, CRC8};
use super::study::{Results, CRC32_BERS, CRC3_BERS, FIG_6_7_BERS, FIG_6_8_BER, FIG_6_9_BER};

/// File names of the figures, in report order.
pub const FILES: [&str; 5] = [
    "fig6_6_crc3_markov.png",
    "fig6_7_crc16_ber.png",
    "fig6_8_crc_widths.png",
    "crc32_reduced.png",
    "fig6_9_tcp_checksum.png",
];

fn curve(res: &Results, figure: &str, g: &str, method: &str, ber: f64) -> Vec<(f64, f64)> {
    res.select(figure, g, method)
        .filter(|r| r.ber == ber)
        .map(|r| (r.bits as f64, r.value))
        .collect()
}

fn asymptote(g: &Generator, xs: &[(f64, f64)]) -> Line {
    let a = (-f64::from(g.degree)).exp2();
    let pts = match (xs.first(), xs.last()) {
        (Some(f), Some(l)) => vec![(f.0, a), (l.0, a)],
        _ => Vec::new(),
    };
    Line::new(format!("2^-{}", g.degree), pts, Style::Dashed)
}

/// Draws every figure into `dir`; returns the files written.
pub fn draw_all(res: &Results, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let path = |i: usize| dir.join(FILES[i]);
    let bits = "packet length (bits)";
    let prob = "P(aliasing | packet in error)";
    let mut out = Vec::new();

    // 6.6: the 3-bit chain.
    let mut lines: Vec<Line> = CRC3_BERS
        .iter()
        .map(|&p| {
            Line::new(
                format!("BER {p}"),
                curve(res, "fig6_6", CRC3.name, "markov", p),
                Style::Line,
            )
        })
        .collect();
    let all = curve(res, "fig6_6", CRC3.name, "markov", CRC3_BERS[0]);
    lines.push(asymptote(&CRC3, &all));
    draw(
        &path(0),
        "3-bit CRC x^3+x+1: Markov chain of equation 6.1",
        bits,
        prob,
        &lines,
    )?;
    out.push(path(0));

    // 6.7: the 16-bit chain at five bit error rates.
    let mut lines: Vec<Line> = FIG_6_7_BERS
        .iter()
        .map(|&p| {
            Line::new(
                format!("BER {p:e}"),
                curve(res, "fig6_7", CRC16.name, "markov", p),
                Style::Line,
            )
        })
        .filter(|l| !l.points.is_empty())
        .collect();
    let all = curve(res, "fig6_7", CRC16.name, "markov", FIG_6_7_BERS[0]);
    lines.push(asymptote(&CRC16, &all));
    lines.push(Line::new(
        "study's text: 0.002 at 64 B, ~5 x 2^-16 at 12,000 bits",
        vec![(512.0, 0.002), (12_000.0, 5.0 / 65_536.0)],
        Style::Markers,
    ));
    draw(
        &path(1),
        "16-bit maximal-length CRC (x^16+x^5+x^3+x^2+1), Markov chain",
        bits,
        prob,
        &lines,
    )?;
    out.push(path(1));

    // 6.8: widths at 1e-7.
    let mut lines = Vec::new();
    for (g, method) in [
        (CRC8, "markov"),
        (CRC16, "markov"),
        (CRC20, "markov"),
        (CRC32_IEEE, "reduced"),
        (CRC32C, "reduced"),
    ] {
        let fig = if g == CRC16 { "fig6_7" } else { "fig6_8" };
        let pts = curve(res, fig, g.name, method, FIG_6_8_BER);
        if !pts.is_empty() {
            lines.push(Line::new(
                format!("{} ({method})", g.name),
                pts,
                Style::Line,
            ));
        }
    }
    draw(&path(2), "CRC widths at BER 1e-7", bits, prob, &lines)?;
    out.push(path(2));

    // The 32-bit CRCs by the reduced model, with bounds.
    let mut lines = Vec::new();
    for g in [CRC32_IEEE, CRC32C] {
        for &p in &CRC32_BERS {
            lines.push(Line::new(
                format!("{} BER {p:e}", g.name),
                curve(res, "crc32", g.name, "reduced", p),
                if g == CRC32C {
                    Style::Line
                } else {
                    Style::Dashed
                },
            ));
        }
    }
    for g in [CRC32_IEEE, CRC32C] {
        let pts: Vec<(f64, f64)> = res
            .select("crc32", g.name, "reduced-w6")
            .map(|r| (r.bits as f64, r.value))
            .collect();
        if !pts.is_empty() {
            lines.push(Line::new(
                format!("{} at 64 B, weights <= 6 exact", g.name),
                pts,
                Style::Markers,
            ));
        }
    }
    let all = curve(res, "crc32", CRC32C.name, "reduced", CRC32_BERS[0]);
    lines.push(asymptote(&CRC32C, &all));
    draw(
        &path(3),
        "32-bit CRCs: reduced model (exact weights <= 4)",
        bits,
        prob,
        &lines,
    )?;
    out.push(path(3));

    // 6.9: the TCP checksum.
    let rows: Vec<_> = res.select("fig6_9", "tcp-checksum", "stratified").collect();
    let mut sim = Line::new(
        "stratified simulation, 95 % CI",
        rows.iter()
            .map(|r| (r.bits as f64 / 8.0, r.value))
            .collect(),
        Style::Markers,
    );
    sim.bars = rows
        .iter()
        .map(|r| (r.bits as f64 / 8.0, r.low, r.high))
        .collect();
    let two = Line::new(
        "2-bit errors only, closed form",
        res.select("fig6_9", "tcp-checksum", "closed-form-2-bit")
            .map(|r| (r.bits as f64 / 8.0, r.value))
            .collect(),
        Style::Line,
    );
    let study = Line::new(
        "study: 0.0027 at 1500 B",
        vec![(1500.0, 0.0027)],
        Style::Markers,
    );
    draw(
        &path(4),
        &format!("TCP checksum at BER {FIG_6_9_BER:e}"),
        "TCP segment size (bytes)",
        "P(checksum aliasing | segment in error)",
        &[sim, two, study],
    )?;
    out.push(path(4));
    Ok(out)
}
