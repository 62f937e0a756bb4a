//! [`Status`] as JSON (the answer to a status request, and `sluice ctl ... --json`). CHAP
//! secrets are never part of it.

use serde_json::{json, Map, Value};
use sluice_target::config::{Acl, Backend};
use sluice_target::status::{
    ConnCounts, HistogramCounts, LoginCounts, LoginFailure, LuCounts, Op, SessionStatus, Status,
    StatusKind, LATENCY_BOUNDS_NS, SENSE_KEYS, SNACK_TYPES, TASK_MANAGEMENT_FUNCTIONS,
};

/// The whole status.
pub fn status(s: &Status) -> Value {
    json!({
        "portals": s.portals.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "connections": s.connections,
        "targets": s.targets.iter().map(|t| json!({
            "iqn": t.iqn,
            "alias": t.alias,
            "acl": acl(&t.acl),
            "chap_user": t.chap_user,
            "mutual_chap": t.mutual_chap,
            "logins": logins(&t.logins),
            "sessions": s.sessions.iter()
                .filter(|x| x.target.as_deref().is_some_and(|n| n.eq_ignore_ascii_case(&t.iqn)))
                .count(),
            "luns": t.luns.iter().map(|l| json!({
                "number": l.number,
                "backend": backend(&l.backend),
                "block_size": l.block_size,
                "blocks": l.blocks,
                "size": l.blocks.saturating_mul(u64::from(l.block_size)),
                "read_only": l.read_only,
                "removable": l.removable,
                "serial": l.serial,
                "provisioning": if l.options.thin { "thin" } else { "thick" },
                "soft_threshold": l.options.soft_threshold_percent,
                "sanitize": l.options.sanitize.is_some(),
                "sanitize_rate": l.options.sanitize.as_ref().and_then(|s| s.overwrite_bytes_per_s),
                "allocated_bytes": l.allocated_bytes,
                "counters": lu_counts(&l.counts),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "sessions": s.sessions.iter().map(session).collect::<Vec<_>>(),
        "discovery_logins": logins(&s.discovery_logins),
        "unknown_target_logins": logins(&s.unknown_target_logins),
    })
}

fn acl(a: &Acl) -> Value {
    match a {
        Acl::Open => json!("open"),
        Acl::Allow(names) => json!(names),
    }
}

/// A backend in the terms of the configuration file.
pub fn backend(b: &Backend) -> Value {
    match b {
        Backend::Memory { size } => json!({"kind": "memory", "size": size}),
        Backend::Null { size } => json!({"kind": "null", "size": size}),
        Backend::File {
            path,
            size,
            direct,
            huge_pages,
        } => json!({
            "kind": "file", "path": path, "size": size, "direct": direct, "huge_pages": huge_pages,
        }),
        Backend::Rbd { image } => json!({
            "kind": "rbd", "image": image.spec(), "ceph_conf": image.conf_file,
            "ceph_id": image.client_id, "ceph_keyring": image.keyring,
        }),
    }
}

fn logins(c: &LoginCounts) -> Value {
    let mut failed = Map::new();
    for f in LoginFailure::ALL {
        failed.insert(f.name().into(), json!(c.failed[f as usize]));
    }
    json!({
        "ok": c.ok,
        "failed": failed,
        "session_reinstatements": c.session_reinstatements,
        "connection_reinstatements": c.connection_reinstatements,
    })
}

fn by_op(values: impl Fn(Op) -> Value) -> Value {
    Value::Object(
        Op::ALL
            .iter()
            .map(|op| (op.name().to_string(), values(*op)))
            .collect(),
    )
}

fn by_status(counts: &[u64; StatusKind::ALL.len()]) -> Value {
    Value::Object(
        StatusKind::ALL
            .iter()
            .map(|k| (k.name().to_string(), json!(counts[*k as usize])))
            .collect(),
    )
}

fn named(names: &[&str], counts: &[u64]) -> Value {
    Value::Object(
        names
            .iter()
            .zip(counts)
            .map(|(n, c)| (n.to_string(), json!(c)))
            .collect(),
    )
}

fn histogram(h: &HistogramCounts) -> Value {
    let mut cumulative = 0;
    let buckets: Vec<Value> = LATENCY_BOUNDS_NS
        .iter()
        .map(|b| json!(*b as f64 / 1e9))
        .chain([json!("+Inf")])
        .zip(&h.buckets)
        .map(|(le, n)| {
            cumulative += n;
            json!({"le": le, "count": cumulative})
        })
        .collect();
    json!({"count": h.count(), "sum_seconds": h.sum_ns as f64 / 1e9, "buckets": buckets})
}

fn lu_counts(c: &LuCounts) -> Value {
    json!({
        "commands": by_op(|op| json!(c.commands[op as usize])),
        "read_bytes": c.read_bytes,
        "write_bytes": c.write_bytes,
        "latency": by_op(|op| histogram(&c.latency[op as usize])),
        "status": by_status(&c.status),
        "check_conditions": named(&SENSE_KEYS, &c.sense_keys),
    })
}

fn conn_counts(c: &ConnCounts) -> Value {
    json!({
        "pdus_received": c.pdus_received,
        "pdus_sent": c.pdus_sent,
        "commands": by_op(|op| json!(c.commands[op as usize])),
        "data_received_bytes": c.data_out_bytes,
        "data_sent_bytes": c.data_in_bytes,
        "r2ts": c.r2ts,
        "responses": by_status(&c.responses),
        "rejects_sent": c.rejects_sent,
        "header_digest_errors": c.header_digest_errors,
        "data_digest_errors": c.data_digest_errors,
        "framing_errors": c.framing_errors,
        "snacks": named(&SNACK_TYPES, &c.snacks),
        "task_management": named(&TASK_MANAGEMENT_FUNCTIONS, &c.task_management),
        "nop_outs": c.nop_outs,
    })
}

fn session(x: &SessionStatus) -> Value {
    let p = &x.params;
    json!({
        "id": x.id,
        "tsih": x.tsih,
        "isid": x.isid,
        "initiator": x.initiator,
        "target": x.target,
        "age_seconds": x.age.as_secs(),
        "tasks": x.tasks,
        "queue_depth_used": x.window_slots_held,
        "queue_depth": x.queue_depth,
        "negotiated": {
            "max_connections": p.max_connections,
            "initial_r2t": p.initial_r2t,
            "immediate_data": p.immediate_data,
            "max_burst_length": p.max_burst_length,
            "first_burst_length": p.first_burst_length,
            "default_time2wait": p.default_time2wait,
            "default_time2retain": p.default_time2retain,
            "max_outstanding_r2t": p.max_outstanding_r2t,
            "data_pdu_in_order": p.data_pdu_in_order,
            "data_sequence_in_order": p.data_sequence_in_order,
            "error_recovery_level": p.error_recovery_level,
        },
        "recovery": {
            "pdus_resent": x.recovery.pdus_resent,
            "sequence_timeouts": x.recovery.sequence_timeouts,
            "lost_data_out": x.recovery.lost_data_out,
            "tasks_aborted": x.recovery.tasks_aborted,
            "tasks_reassigned": x.recovery.tasks_reassigned,
            "connections_orphaned": x.recovery.connections_orphaned,
        },
        "connections": x.connections.iter().map(|c| json!({
            "cid": c.cid,
            "peer": c.peer.to_string(),
            "portal": c.local.to_string(),
            "header_digest": c.header_digest,
            "data_digest": c.data_digest,
            "initiator_max_recv_data_segment_length": c.initiator_max_recv_data_segment_length,
            "target_max_recv_data_segment_length": c.target_max_recv_data_segment_length,
            "counters": conn_counts(&c.counts),
        })).collect::<Vec<_>>(),
    })
}
