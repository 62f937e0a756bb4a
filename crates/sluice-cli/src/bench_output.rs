//! `sluice bench`'s final report: a text summary or a JSON document (`--json`).

use anyhow::Result;
use std::time::Duration;

use serde_json::{json, Value};
use sluice_lab::{Arrival, DirectionStats, LatencySummary, Report, RwMode, Workload};

use crate::client_common;

fn rw_name(rw: RwMode) -> &'static str {
    match rw {
        RwMode::Read => "read",
        RwMode::Write => "write",
        RwMode::RandRead => "randread",
        RwMode::RandWrite => "randwrite",
        RwMode::RandRw => "randrw",
    }
}

fn latency_json(l: &LatencySummary) -> Value {
    json!({
        "count": l.count,
        "min": l.min_us,
        "mean": l.mean_us,
        "p50": l.p50_us,
        "p90": l.p90_us,
        "p99": l.p99_us,
        "p99_9": l.p999_us,
        "max": l.max_us,
    })
}

fn direction_json(d: &DirectionStats, r: &Report) -> Value {
    let s = r.elapsed.as_secs_f64().max(1e-9);
    json!({
        "ios": d.ios,
        "bytes": d.bytes,
        "iops": d.ios as f64 / s,
        "mib_per_s": d.bytes as f64 / s / 1048576.0,
        "latency_us": latency_json(&d.latency),
    })
}

fn workload_json(w: &Workload) -> Value {
    let arrival = match w.arrival {
        Arrival::Closed => json!({"kind": "closed"}),
        Arrival::Fixed { rate } => json!({"kind": "fixed", "rate": rate}),
        Arrival::Poisson { rate } => json!({"kind": "poisson", "rate": rate}),
    };
    json!({
        "rw": rw_name(w.rw),
        "read_percent": w.read_percent,
        "sizes": w.sizes.entries().iter().map(|(s, p)| json!({"bytes": s, "p": p})).collect::<Vec<_>>(),
        "queue_depth": w.queue_depth,
        "time_s": w.time.map(|t| t.as_secs_f64()),
        "count": w.count,
        "arrival": arrival,
        "verify": w.verify,
        "offset": w.offset,
        "size": w.size,
        "trace": w.trace.is_some(),
        "speed": w.speed,
        "seed": w.seed,
    })
}

/// The report as a JSON value.
pub fn report_json(w: &Workload, r: &Report) -> Value {
    let p = &r.pdus;
    let secs = r.elapsed.as_secs_f64();
    json!({
        "workload": workload_json(w),
        "sessions": r.sessions,
        "queue_depth": r.queue_depth,
        "elapsed_s": secs,
        "ios": r.ios(),
        "bytes": r.bytes(),
        "iops": r.iops(),
        "mib_per_s": r.mib_per_s(),
        "mb_per_s": r.mb_per_s(),
        "read": direction_json(&r.read, r),
        "write": direction_json(&r.write, r),
        "latency_us": latency_json(&r.latency),
        "errors": r.errors,
        "busy_retries": r.busy_retries,
        "first_error": r.first_error,
        "verify": r.verify.as_ref().map(|v| json!({
            "checked": v.checked,
            "bytes": v.bytes,
            "errors": v.errors,
            "first_error": v.first_error,
            "final_checked": v.final_checked,
            "final_errors": v.final_errors,
            "final_first_error": v.final_first_error,
        })),
        "negotiated": r.negotiated.map(|n| json!({
            "header_digest": n.header_digest,
            "data_digest": n.data_digest,
            "max_connections": n.max_connections,
            "initial_r2t": n.initial_r2t,
            "immediate_data": n.immediate_data,
            "initiator_max_recv_data_segment_length": n.initiator_max_recv_data_segment_length,
            "target_max_recv_data_segment_length": n.target_max_recv_data_segment_length,
            "max_burst_length": n.max_burst_length,
            "first_burst_length": n.first_burst_length,
            "default_time2wait": n.default_time2wait,
            "default_time2retain": n.default_time2retain,
            "max_outstanding_r2t": n.max_outstanding_r2t,
            "data_pdu_in_order": n.data_pdu_in_order,
            "data_sequence_in_order": n.data_sequence_in_order,
            "error_recovery_level": n.error_recovery_level,
        })),
        "recovery": {
            "header_digest_errors": p.recovery.header_digest_errors,
            "data_digest_errors": p.recovery.data_digest_errors,
            "rejects": p.recovery.rejects,
            "snacks": p.recovery.snacks,
            "commands_retried": p.recovery.commands_retried,
            "reconnects": p.recovery.reconnects,
            "connection_recoveries": p.recovery.connection_recoveries,
            "reassigned": p.recovery.reassigned,
        },
        "pdus": {
            "commands": p.commands,
            "scsi_command": p.scsi_command,
            "scsi_response": p.scsi_response,
            "data_in": p.data_in,
            "data_out": p.data_out,
            "r2t": p.r2t,
            "nop_out": p.nop_out,
            "nop_in": p.nop_in,
            "sent": p.sent,
            "received": p.received,
            "bytes_sent": p.bytes_sent,
            "bytes_received": p.bytes_received,
            "per_command": {
                "data_in": p.per_command(p.data_in),
                "data_out": p.per_command(p.data_out),
                "r2t": p.per_command(p.r2t),
                "scsi_response": p.per_command(p.scsi_response),
                "sent": p.per_command(p.sent),
                "received": p.per_command(p.received),
            },
        },
        "cpu": {
            "user_s": r.cpu.user.as_secs_f64(),
            "system_s": r.cpu.system.as_secs_f64(),
            "us_per_io": r.cpu_us_per_io(),
            "utilization": if secs > 0.0 { r.cpu.total().as_secs_f64() / secs } else { 0.0 },
        },
        "trace_records": r.trace_records,
        "connections": r.connections.iter().map(|c| json!({
            "session": c.session,
            "cid": c.cid,
            "commands": c.commands,
            "luns": c.by_lun.iter().map(|(lun, n)| json!({"lun": lun, "commands": n})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "connection_logouts": r.logouts.iter().map(|l| json!({
            "session": l.session,
            "cid": l.cid,
            "at_s": l.at.as_secs_f64(),
            "ok": l.result.is_ok(),
            "error": l.result.as_ref().err(),
        })).collect::<Vec<_>>(),
        "paths": r.paths.iter().map(|p| json!({
            "portal": p.portal,
            "up": p.up,
            "alua_state": p.state.map(|s| s.name()),
            "target_port_group": p.port_group,
            "relative_target_port": p.relative_port,
            "commands": p.commands,
            "bytes": p.bytes,
            "errors": p.errors,
            "retries": p.retries,
            "failovers": p.failovers,
            "reconnects": p.reconnects,
            "last_error": p.last_error,
        })).collect::<Vec<_>>(),
        "failover_times_s": r.failover_times.iter().map(Duration::as_secs_f64).collect::<Vec<_>>(),
        "longest_pause_s": r.longest_pause.map(|d| d.as_secs_f64()),
    })
}

/// Prints the report as pretty JSON.
///
/// `transport` is `tcp`, `udp` or `iser`; over iSER, `iser` adds what the initiator's
/// datamover counted (see [`iser_json`]).
pub fn print_json(
    w: &Workload,
    r: &Report,
    transport: &str,
    iser: Option<&sluice_proto::iser::InitiatorMoverStats>,
) -> Result<()> {
    let mut doc = report_json(w, r);
    if let Value::Object(map) = &mut doc {
        map.insert("transport".into(), transport.into());
        map.insert("iser".into(), iser.map_or(Value::Null, iser_json));
    }
    client_common::print_json(&doc)
}

/// Over iSER: the Sends each way and the buffers the initiator advertised. The target's
/// RDMA Writes (read data) land in the advertised read buffers and its RDMA Reads (write
/// data) fetch from the advertised write buffers, so the initiator counts them as buffers
/// and bytes; the target's metrics count the operations themselves.
pub fn iser_json(s: &sluice_proto::iser::InitiatorMoverStats) -> Value {
    json!({
        "sends": s.sends,
        "sends_received": s.sends_received,
        "rdma_write_buffers": s.read_buffers,
        "rdma_write_bytes": s.placed_bytes,
        "rdma_read_buffers": s.write_buffers,
        "rdma_read_bytes": s.readable_bytes,
        "unsolicited_bytes": s.unsolicited_bytes,
        "unsolicited_data_outs": s.unsolicited_data_outs,
        "held_back": s.held_back,
        "peak_unexpected": s.peak_unexpected,
    })
}

fn latency_line(name: &str, l: &LatencySummary) -> String {
    format!(
        "  {name:<6} lat (us): min {:.0}  mean {:.1}  p50 {:.0}  p90 {:.0}  p99 {:.0}  p99.9 {:.0}  max {:.0}",
        l.min_us, l.mean_us, l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us
    )
}

/// Prints a fio-like text summary.
pub fn print_text(w: &Workload, r: &Report) {
    let sizes: Vec<String> = w
        .sizes
        .entries()
        .iter()
        .map(|(s, p)| {
            if w.sizes.entries().len() == 1 {
                format!("{s}")
            } else {
                format!("{s}:{p}")
            }
        })
        .collect();
    let what = if let Some(n) = r.trace_records {
        format!("trace replay ({n} records, speed {})", w.speed)
    } else {
        format!("{} bs={}", rw_name(w.rw), sizes.join(","))
    };
    if r.paths.is_empty() {
        outln!(
            "sluice bench: {what}, {} session(s) x qd {}, {:.2} s",
            r.sessions,
            r.queue_depth,
            r.elapsed.as_secs_f64()
        );
    } else {
        outln!(
            "sluice bench: {what}, multipath over {} paths x qd {}, {:.2} s",
            r.paths.len(),
            r.queue_depth,
            r.elapsed.as_secs_f64()
        );
    }
    outln!(
        "  total: {} ios, {:.0} IOPS, {:.2} MiB/s ({:.2} MB/s), {} errors",
        r.ios(),
        r.iops(),
        r.mib_per_s(),
        r.mb_per_s(),
        r.errors
    );
    if r.busy_retries > 0 {
        outln!(
            "  busy:  {} commands sent again after BUSY or TASK SET FULL (the target could not take them then)",
            r.busy_retries
        );
    }
    for (name, d) in [("read", &r.read), ("write", &r.write)] {
        if d.ios > 0 {
            let s = r.elapsed.as_secs_f64().max(1e-9);
            outln!(
                "  {name:<6} {} ios, {:.0} IOPS, {:.2} MiB/s",
                d.ios,
                d.ios as f64 / s,
                d.bytes as f64 / s / 1048576.0
            );
            outln!("{}", latency_line(name, &d.latency));
        }
    }
    outln!("{}", latency_line("all", &r.latency));
    let p = &r.pdus;
    // A multipath run's sessions come and go with its paths: no PDU totals.
    if r.paths.is_empty() {
        outln!(
            "  pdus: {} sent, {} received; per command: Data-In {:.2}, Data-Out {:.2}, R2T {:.2}",
            p.sent,
            p.received,
            p.per_command(p.data_in),
            p.per_command(p.data_out),
            p.per_command(p.r2t)
        );
    }
    let rc = &p.recovery;
    if rc.any() {
        outln!(
            "  recovery: digest errors {} header, {} data; {} rejects, {} SNACKs, {} commands \
             retried; {} sessions reinstated, {} connections recovered, {} tasks reassigned",
            rc.header_digest_errors,
            rc.data_digest_errors,
            rc.rejects,
            rc.snacks,
            rc.commands_retried,
            rc.reconnects,
            rc.connection_recoveries,
            rc.reassigned
        );
    }
    outln!(
        "  cpu: user {:.2} s, system {:.2} s, {:.1} us per I/O",
        r.cpu.user.as_secs_f64(),
        r.cpu.system.as_secs_f64(),
        r.cpu_us_per_io()
    );
    if let Some(v) = &r.verify {
        outln!(
            "  verify: {} read-backs, {} bytes, {} mismatches; after the run {} acknowledged \
             writes read back, {} lost",
            v.checked,
            v.bytes,
            v.errors,
            v.final_checked,
            v.final_errors
        );
    }
    if r.connections.iter().any(|c| c.cid != 0) {
        for c in &r.connections {
            let luns: Vec<String> = c
                .by_lun
                .iter()
                .map(|(lun, n)| format!("LUN {lun}: {n}"))
                .collect();
            outln!(
                "  session {} connection {}: {} commands ({})",
                c.session + 1,
                c.cid,
                c.commands,
                luns.join(", ")
            );
        }
    }
    for l in &r.logouts {
        match &l.result {
            Ok(()) => outln!(
                "  session {} connection {} logged out at {:.2} s",
                l.session + 1,
                l.cid,
                l.at.as_secs_f64()
            ),
            Err(e) => outln!(
                "  session {} connection {}: logout at {:.2} s failed: {e}",
                l.session + 1,
                l.cid,
                l.at.as_secs_f64()
            ),
        }
    }
    print_paths(r);
    if let Some(e) = &r.first_error {
        outln!("  first error: {e}");
    }
}

/// The paths of a multipath run, one line each, and the failovers.
fn print_paths(r: &Report) {
    for p in &r.paths {
        let group = p
            .port_group
            .map_or_else(String::new, |g| format!(" group {g}"));
        outln!(
            "  path {}{group}: {} {}, {} commands, {:.2} MiB, {} errors, {} retries, {} failovers, {} reconnects",
            p.portal,
            if p.up { "up" } else { "down" },
            p.state.map_or("state unknown", |s| s.name()),
            p.commands,
            p.bytes as f64 / 1048576.0,
            p.errors,
            p.retries,
            p.failovers,
            p.reconnects
        );
    }
    if let Some(pause) = r.longest_pause {
        outln!(
            "  longest pause between two completions: {:.3} s",
            pause.as_secs_f64()
        );
    }
    for (i, t) in r.failover_times.iter().enumerate() {
        outln!(
            "  failover {}: I/O resumed on another path {:.3} s after the path failed",
            i + 1,
            t.as_secs_f64()
        );
    }
}

/// Over iSER: what crossed the wire. The PDU line above counts what the session core saw;
/// over iSER its Data-In, R2T and solicited Data-Out PDUs never leave the host (the target
/// RDMA-Writes read data into the buffers advertised and RDMA-Reads write data out of them;
/// the target's metrics count those operations, `sluice_iser_operations`); immediate data
/// and unsolicited Data-Out travel in Sends.
pub fn print_iser(r: &Report, s: &sluice_proto::iser::InitiatorMoverStats) {
    let per = |n: u64| n as f64 / (r.pdus.commands.max(1) as f64);
    outln!(
        "  iser: {} Sends sent, {} received ({:.2} and {:.2} per command); {} read buffers \
         advertised, {:.1} MiB placed by RDMA Write; {} write buffers advertised, {:.1} MiB \
         for RDMA Read; {:.1} MiB of write data in Sends ({} unsolicited Data-Out); no Data-In, \
         R2T or solicited Data-Out PDU on the wire",
        s.sends,
        s.sends_received,
        per(s.sends),
        per(s.sends_received),
        s.read_buffers,
        s.placed_bytes as f64 / 1048576.0,
        s.write_buffers,
        s.readable_bytes as f64 / 1048576.0,
        s.unsolicited_bytes as f64 / 1048576.0,
        s.unsolicited_data_outs,
    );
}
