//! The rows as CSV and JSON, the two figures, and the Markdown section.

use std::fmt::Write as _;

use super::plan::{Scale, Transport};
use super::run::Row;
use crate::study::plot::{Chart, Series};

const COLUMNS: &str = "figure,transport,direction,edtl_bytes,loss,timeout_s,commands,ios,errors,\
mean_ms,p50_ms,p99_ms,max_ms,snacks,commands_retried,datagrams_forwarded,datagrams_dropped";

fn direction(r: &Row) -> &'static str {
    if r.point.read {
        "read"
    } else {
        "write"
    }
}

/// The rows as CSV, one per point.
pub(super) fn csv(rows: &[Row]) -> String {
    let mut out = format!("{COLUMNS}\n");
    for r in rows {
        let p = &r.point;
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{},{},{},{}",
            p.figure,
            p.transport.name(),
            direction(r),
            p.edtl,
            p.loss,
            p.timeout.as_secs_f64(),
            p.commands,
            r.ios,
            r.errors,
            r.mean_ms,
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            r.snacks,
            r.retried,
            r.forwarded,
            r.dropped
        );
    }
    out
}

/// The rows as a JSON array of objects with the CSV's columns.
pub(super) fn json(rows: &[Row]) -> String {
    let names: Vec<&str> = COLUMNS.split(',').collect();
    let mut out = String::from("[\n");
    for (i, line) in csv(rows).lines().skip(1).enumerate() {
        let cells: Vec<String> = line
            .split(',')
            .zip(&names)
            .map(|(v, k)| {
                let quoted = matches!(*k, "figure" | "transport" | "direction");
                if quoted {
                    format!("\"{k}\": \"{v}\"")
                } else {
                    format!("\"{k}\": {v}")
                }
            })
            .collect();
        let comma = if i + 1 < rows.len() { "," } else { "" };
        let _ = writeln!(out, "  {{{}}}{comma}", cells.join(", "));
    }
    out.push_str("]\n");
    out
}

/// A line per (label, filter): EDTL in KiB against the mean response time in ms, the bar
/// from the median to the 99th percentile.
fn series(name: String, rows: &[&Row]) -> Series {
    Series {
        name,
        points: rows
            .iter()
            .filter(|r| r.ios > 0)
            .map(|r| (f64::from(r.point.edtl) / 1024.0, r.mean_ms.max(1e-3)))
            .collect(),
        spread: rows
            .iter()
            .filter(|r| r.ios > 0)
            .map(|r| {
                (
                    f64::from(r.point.edtl) / 1024.0,
                    r.p50_ms.max(1e-3),
                    r.p99_ms.max(1e-3),
                )
            })
            .collect(),
        markers_only: false,
    }
}

/// `fig5_10_sockets.png` and `fig5_11_sockets.png`.
pub(super) fn figures(rows: &[Row]) -> Vec<(&'static str, Chart)> {
    let pick = |f: &dyn Fn(&Row) -> bool| -> Vec<&Row> { rows.iter().filter(|r| f(r)).collect() };
    let mut fig10 = Vec::new();
    for read in [false, true] {
        for t in [Transport::Tcp, Transport::Udp] {
            let rs = pick(&|r: &Row| {
                r.point.figure == "5.10" && r.point.transport == t && r.point.read == read
            });
            let dir = if read { "read" } else { "write" };
            fig10.push(series(
                format!("{} {dir}, no loss", t.name().to_uppercase()),
                &rs,
            ));
        }
    }
    let mut fig11 = Vec::new();
    for read in [false, true] {
        let dir = if read { "read" } else { "write" };
        let tcp = pick(&|r: &Row| {
            r.point.figure == "5.10" && r.point.transport == Transport::Tcp && r.point.read == read
        });
        fig11.push(series(format!("TCP {dir}, 1 s, no loss"), &tcp));
        let mut variants: Vec<(f64, u128)> = rows
            .iter()
            .filter(|r| r.point.figure == "5.11" && r.point.read == read)
            .map(|r| (r.point.loss, r.point.timeout.as_millis()))
            .collect();
        variants.dedup();
        variants.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        variants.dedup();
        for (loss, ms) in variants {
            let rs = pick(&|r: &Row| {
                r.point.figure == "5.11"
                    && r.point.read == read
                    && r.point.loss == loss
                    && r.point.timeout.as_millis() == ms
            });
            let secs = ms as f64 / 1000.0;
            fig11.push(series(
                format!("UDP {dir}, {secs} s, {}% loss", loss * 100.0),
                &rs,
            ));
        }
    }
    let chart = |title: &str, series| Chart {
        title: title.into(),
        x_label: "ExpectedDataTransferLength (KiB)".into(),
        y_label: "response time, mean (ms; bars: median to p99)".into(),
        log2_x: true,
        log10_y: true,
        series,
    };
    vec![
        (
            "fig5_10_sockets.png",
            chart(
                "Fig. 5.10: TCP vs UDP response time, loopback, no loss",
                fig10,
            ),
        ),
        (
            "fig5_11_sockets.png",
            chart(
                "Fig. 5.11: UDP with datagram loss, TransferContext 0.1 s vs 1 s",
                fig11,
            ),
        ),
    ]
}

/// The Markdown section: the setup, the tables, and what to read in them.
pub(super) fn markdown(scale: Scale, rows: &[Row]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "## iSCSI over UDP against TCP (Figs. 5.10 and 5.11)\n");
    let _ = writeln!(
        md,
        "Preset `{}`. sluice's target in-process on 127.0.0.1, serving TCP and the experimental \
         UDP transport on one port; sluice's initiator, one command at a time (queue depth 1), \
         sequential reads or writes of one ExpectedDataTransferLength per point. Both transports \
         at ErrorRecoveryLevel 1 with MaxRecvDataSegmentLength 8192 both ways; UDP datagrams of \
         at most 1472 bytes. The study's TransferContext timeout is the initiator's retry period \
         and the target's sequence reception timeout, set together. Datagram loss comes from a \
         seeded relay dropping each datagram with the given probability either way; loopback TCP \
         loses nothing, so its rows are lossless. Response times in ms: mean, median, p99.\n",
        scale.name()
    );
    for figure in ["5.10", "5.11"] {
        let _ = writeln!(md, "### Fig. {figure}\n");
        let png = format!("fig{}_sockets.png", figure.replace('.', "_"));
        let _ = writeln!(md, "![Fig. {figure} over real sockets]({png})\n");
        let _ = writeln!(
            md,
            "| transport | dir | EDTL | loss | timeout | ios | mean | p50 | p99 | SNACKs | retried | dropped |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|");
        for r in rows.iter().filter(|r| r.point.figure == figure) {
            let p = &r.point;
            let _ = writeln!(
                md,
                "| {} | {} | {} KiB | {}% | {} s | {} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
                p.transport.name(),
                direction(r),
                p.edtl / 1024,
                p.loss * 100.0,
                p.timeout.as_secs_f64(),
                r.ios,
                r.mean_ms,
                r.p50_ms,
                r.p99_ms,
                r.snacks,
                r.retried,
                r.dropped
            );
        }
        md.push('\n');
    }
    let _ = writeln!(md, "{}", reading(rows));
    md
}

/// What the numbers say against the study, computed from them (medians without loss, where
/// one slow command should not speak for forty; means with loss, where the slow ones are the
/// point).
fn reading(rows: &[Row]) -> String {
    let avg = |f: &dyn Fn(&Row) -> bool, of: &dyn Fn(&Row) -> f64| -> Option<f64> {
        let v: Vec<f64> = rows.iter().filter(|r| f(r) && r.ios > 0).map(of).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let smallest = rows.iter().map(|r| r.point.edtl).min().unwrap_or(0);
    let largest = rows.iter().map(|r| r.point.edtl).max().unwrap_or(0);
    let at = |t: Transport, edtl: u32| {
        avg(
            &|r: &Row| r.point.figure == "5.10" && r.point.transport == t && r.point.edtl == edtl,
            &|r: &Row| r.p50_ms,
        )
    };
    let mut s = String::from("### Reading\n\n");
    for edtl in [smallest, largest] {
        if let (Some(tcp), Some(udp)) = (at(Transport::Tcp, edtl), at(Transport::Udp, edtl)) {
            let verdict = if udp < tcp {
                "faster, as the study found for short transfers"
            } else {
                "slower: the association copies each PDU through a loopback hop and sends it \
                 datagram by datagram, one system call each, where TCP's kernel path moves \
                 large segments"
            };
            let _ = writeln!(
                s,
                "- Without loss, at {} KiB, UDP's median response time (reads and writes \
                 averaged) is {:.2}x TCP's ({udp:.3} ms against {tcp:.3} ms): {verdict}.",
                edtl / 1024,
                udp / tcp
            );
        }
    }
    let lossy = |ms: u128| {
        avg(
            &|r: &Row| {
                r.point.figure == "5.11"
                    && r.point.edtl == largest
                    && r.point.timeout.as_millis() == ms
            },
            &|r: &Row| r.mean_ms,
        )
    };
    if let (Some(fast), Some(slow)) = (lossy(100), lossy(1000)) {
        let _ = writeln!(
            s,
            "- With loss, at {} KiB, the 0.1 s timeout gives a mean response time of {fast:.1} \
             ms and the 1 s timeout {slow:.1} ms ({:.1}x). As in the study's Fig. 5.11, \
             recovery waits for the timeout, so a transfer that loses a datagram costs about \
             one timeout, and once transfers span enough datagrams to lose one, the timeout, \
             not the link, sets UDP's response time.",
            largest / 1024,
            slow / fast
        );
    }
    s
}
