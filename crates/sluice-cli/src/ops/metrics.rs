//! The Prometheus metrics of `sluice target`, in the OpenMetrics text format
//! (`prometheus-client`): collected at each scrape from [`Target::status`] and `/proc`, so a
//! session that ended leaves no series behind. docs/operations.md lists every family and the
//! bound on its label values.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use sluice_target::status::{
    ConnCounts, LoginCounts, LoginFailure, Op, SessionStatus, Status, StatusKind,
    LATENCY_BOUNDS_NS, SENSE_KEYS, SNACK_TYPES, TASK_MANAGEMENT_FUNCTIONS,
};
use sluice_target::Target;

use super::process::ProcessStats;

/// Label values of one series.
type Labels = Vec<(&'static str, String)>;

/// Picks one counter of a session.
type SessionCounter = fn(&SessionStatus) -> u64;

/// The two text formats `/metrics` speaks.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Format {
    /// OpenMetrics 1.0 (what Prometheus asks for first).
    OpenMetrics,
    /// The Prometheus text format 0.0.4 (for clients that do not ask for OpenMetrics, and
    /// for `promtool check metrics`, which reads only this one).
    Prometheus,
}

impl Format {
    /// The format an `Accept` header asks for.
    pub fn negotiate(accept: Option<&str>) -> Self {
        if accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }

    /// Its content type.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// Everything `/metrics` serves, encoded now.
pub fn scrape(target: &Arc<Target>, format: Format) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(TargetCollector(Arc::clone(target))));
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = match format {
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
        Format::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
        }
    };
    out
}

#[derive(Debug)]
struct TargetCollector(Arc<Target>);

impl Collector for TargetCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let status = self.0.status();
        lu_families(&mut e, &status)?;
        target_families(&mut e, &status)?;
        session_families(&mut e, &status.sessions)?;
        connection_families(&mut e, &status.sessions)?;
        if let Some(p) = ProcessStats::read() {
            process_families(&mut e, &p)?;
        }
        Ok(())
    }
}

/// One family: its series as (labels, value).
fn family<V: Copy>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    kind: MetricType,
    series: impl IntoIterator<Item = (Labels, V)>,
    write: impl Fn(&mut prometheus_client::encoding::MetricEncoder, V) -> std::fmt::Result,
) -> std::fmt::Result {
    let mut series = series.into_iter().peekable();
    if series.peek().is_none() {
        return Ok(());
    }
    let mut m = e.encode_descriptor(name, help, unit.as_ref(), kind)?;
    for (labels, value) in series {
        let mut f = m.encode_family(&labels)?;
        write(&mut f, value)?;
    }
    Ok(())
}

fn counters(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    series: impl IntoIterator<Item = (Labels, u64)>,
) -> std::fmt::Result {
    family(e, name, help, unit, MetricType::Counter, series, |f, v| {
        f.encode_counter::<NoLabelSet, u64, u64>(&v, None)
    })
}

fn gauges(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    series: impl IntoIterator<Item = (Labels, i64)>,
) -> std::fmt::Result {
    family(e, name, help, unit, MetricType::Gauge, series, |f, v| {
        f.encode_gauge(&v)
    })
}

fn float_gauges(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    kind: MetricType,
    series: impl IntoIterator<Item = (Labels, f64)>,
) -> std::fmt::Result {
    family(e, name, help, unit, kind, series, |f, v| match kind {
        MetricType::Counter => f.encode_counter::<NoLabelSet, f64, u64>(&v, None),
        _ => f.encode_gauge(&v),
    })
}

fn gauge_of(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

fn lu_families(e: &mut DescriptorEncoder, s: &Status) -> std::fmt::Result {
    let luns: Vec<(Labels, &sluice_target::status::LunStatus)> = s
        .targets
        .iter()
        .flat_map(|t| {
            t.luns.iter().map(move |l| {
                (
                    vec![("target", t.iqn.clone()), ("lun", l.number.to_string())],
                    l,
                )
            })
        })
        .collect();
    let with = |labels: &Labels, extra: (&'static str, &str)| {
        let mut l = labels.clone();
        l.push((extra.0, extra.1.to_string()));
        l
    };
    counters(
        e,
        "sluice_lu_commands",
        "SCSI commands the logical unit ran, by operation",
        None,
        luns.iter().flat_map(|(labels, l)| {
            Op::ALL.iter().map(move |op| {
                (
                    with(labels, ("op", op.name())),
                    l.counts.commands[*op as usize],
                )
            })
        }),
    )?;
    counters(
        e,
        "sluice_lu_read",
        "Bytes READ commands returned",
        Some(Unit::Bytes),
        luns.iter()
            .map(|(labels, l)| (labels.clone(), l.counts.read_bytes)),
    )?;
    counters(
        e,
        "sluice_lu_written",
        "Bytes WRITE commands wrote",
        Some(Unit::Bytes),
        luns.iter()
            .map(|(labels, l)| (labels.clone(), l.counts.write_bytes)),
    )?;
    {
        let mut m = e.encode_descriptor(
            "sluice_lu_command_latency",
            "Time from a SCSI Command PDU's arrival to the logical unit's result, by operation",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for (labels, l) in &luns {
            for op in Op::ALL {
                let h = &l.counts.latency[op as usize];
                let buckets: Vec<(f64, u64)> = LATENCY_BOUNDS_NS
                    .iter()
                    .map(|ns| *ns as f64 / 1e9)
                    .chain([f64::INFINITY])
                    .zip(h.buckets.iter().copied())
                    .collect();
                m.encode_family(&with(labels, ("op", op.name())))?
                    .encode_histogram::<NoLabelSet>(
                        h.sum_ns as f64 / 1e9,
                        h.count(),
                        &buckets,
                        None,
                    )?;
            }
        }
    }
    counters(
        e,
        "sluice_lu_status",
        "SCSI statuses of the logical unit's commands",
        None,
        luns.iter().flat_map(|(labels, l)| {
            StatusKind::ALL.iter().map(move |k| {
                (
                    with(labels, ("status", k.name())),
                    l.counts.status[*k as usize],
                )
            })
        }),
    )?;
    counters(
        e,
        "sluice_lu_check_conditions",
        "CHECK CONDITION statuses by sense key (keys never seen are left out)",
        None,
        luns.iter().flat_map(|(labels, l)| {
            SENSE_KEYS
                .iter()
                .zip(l.counts.sense_keys)
                .filter(|(_, n)| *n > 0)
                .map(move |(key, n)| (with(labels, ("sense_key", key)), n))
        }),
    )?;
    gauges(
        e,
        "sluice_lu_capacity",
        "Size of the logical unit (what READ CAPACITY reports)",
        Some(Unit::Bytes),
        luns.iter().map(|(labels, l)| {
            (
                labels.clone(),
                gauge_of(l.blocks.saturating_mul(u64::from(l.block_size))),
            )
        }),
    )
}

fn login_series(target: &str, c: &LoginCounts) -> Vec<(Labels, u64)> {
    let labels = |outcome: &str| {
        vec![
            ("target", target.to_string()),
            ("outcome", outcome.to_string()),
        ]
    };
    let mut out = vec![(labels("ok"), c.ok)];
    out.extend(
        LoginFailure::ALL
            .iter()
            .map(|f| (labels(f.name()), c.failed[*f as usize])),
    );
    out
}

fn target_families(e: &mut DescriptorEncoder, s: &Status) -> std::fmt::Result {
    let mut logins: Vec<(Labels, u64)> = Vec::new();
    for t in &s.targets {
        logins.extend(login_series(&t.iqn, &t.logins));
    }
    logins.extend(login_series("discovery", &s.discovery_logins));
    logins.extend(login_series("unknown", &s.unknown_target_logins));
    counters(
        e,
        "sluice_logins",
        "Logins by target (\"discovery\", or \"unknown\" for names no target has) and outcome",
        None,
        logins,
    )?;
    let i = &s.iser;
    let op = |name: &str| vec![("op", name.to_string())];
    counters(
        e,
        "sluice_iser_operations",
        "iSER datamover operations: Sends posted and received (control-type PDUs; of those \
         received, unsolicited_data_out carried unsolicited Data-Out), RDMA Writes (in place of \
         Data-In PDUs) and RDMA Reads (in place of R2T and Data-Out PDUs)",
        None,
        vec![
            (op("send"), i.sends),
            (op("send_received"), i.sends_received),
            (op("unsolicited_data_out"), i.unsolicited_data_outs),
            (op("rdma_write"), i.rdma_writes),
            (op("rdma_read"), i.rdma_reads),
        ],
    )?;
    counters(
        e,
        "sluice_iser_data",
        "Bytes moved by the iSER datamover's RDMA Writes (read data) and RDMA Reads (solicited \
         write data), and write data received in Sends (unsolicited: immediate data and \
         unsolicited Data-Out)",
        Some(Unit::Bytes),
        vec![
            (op("rdma_write"), i.rdma_write_bytes),
            (op("rdma_read"), i.rdma_read_bytes),
            (op("unsolicited"), i.unsolicited_bytes),
        ],
    )?;
    let mode = |name: &str| vec![("mode", name.to_string())];
    counters(
        e,
        "sluice_iser_connections",
        "Connections to the iSER listeners: switched to RDMA mode, stayed iSCSI over TCP \
         (no RDMAExtensions), or ended by an iSER or RDMA error",
        None,
        vec![
            (mode("rdma"), i.rdma_connections),
            (mode("tcp"), i.tcp_connections),
            (mode("error"), i.errors),
        ],
    )?;
    let reinstated = |pick: fn(&LoginCounts) -> u64| {
        s.targets
            .iter()
            .map(move |t| (vec![("target", t.iqn.clone())], pick(&t.logins)))
    };
    counters(
        e,
        "sluice_session_reinstatements",
        "Logins that replaced a session of the same initiator and ISID",
        None,
        reinstated(|c| c.session_reinstatements),
    )?;
    counters(
        e,
        "sluice_connection_reinstatements",
        "Logins that replaced a connection of a session with the same CID",
        None,
        reinstated(|c| c.connection_reinstatements),
    )?;
    let count = |pick: fn(&SessionStatus) -> usize| {
        let mut per: Vec<(Labels, i64)> = s
            .targets
            .iter()
            .map(|t| {
                let n: usize = s
                    .sessions
                    .iter()
                    .filter(|x| {
                        x.target
                            .as_deref()
                            .is_some_and(|n| n.eq_ignore_ascii_case(&t.iqn))
                    })
                    .map(pick)
                    .sum();
                (vec![("target", t.iqn.clone())], gauge_of(n))
            })
            .collect();
        let discovery: usize = s
            .sessions
            .iter()
            .filter(|x| x.target.is_none())
            .map(pick)
            .sum();
        per.push((
            vec![("target", "discovery".to_string())],
            gauge_of(discovery),
        ));
        per
    };
    gauges(
        e,
        "sluice_sessions",
        "Sessions in full feature phase, by target",
        None,
        count(|_| 1),
    )?;
    gauges(
        e,
        "sluice_connections",
        "Connections of sessions in full feature phase, by target",
        None,
        count(|x| x.connections.len()),
    )?;
    gauges(
        e,
        "sluice_tcp_connections",
        "TCP connections open, logged in or not",
        None,
        [(Vec::new(), gauge_of(s.connections))],
    )?;
    gauges(
        e,
        "sluice_portal_listening",
        "Addresses listened on (1 each)",
        None,
        s.portals
            .iter()
            .map(|p| (vec![("portal", p.to_string())], 1)),
    )
}

fn session_labels(x: &SessionStatus) -> Labels {
    vec![
        (
            "target",
            x.target.clone().unwrap_or_else(|| "discovery".into()),
        ),
        ("initiator", x.initiator.clone()),
        ("session", x.id.to_string()),
    ]
}

fn session_families(e: &mut DescriptorEncoder, sessions: &[SessionStatus]) -> std::fmt::Result {
    let gauge = |pick: fn(&SessionStatus) -> i64| {
        sessions
            .iter()
            .map(move |x| (session_labels(x), pick(x)))
            .collect::<Vec<_>>()
    };
    gauges(
        e,
        "sluice_session_tasks",
        "Commands in the session's task table (delivered, not yet answered or kept for recovery)",
        None,
        gauge(|x| gauge_of(x.tasks)),
    )?;
    gauges(
        e,
        "sluice_session_queue_depth_used",
        "CmdSN window slots held by commands in progress",
        None,
        gauge(|x| i64::from(x.window_slots_held)),
    )?;
    gauges(
        e,
        "sluice_session_queue_depth",
        "CmdSN window the session was given",
        None,
        gauge(|x| i64::from(x.queue_depth)),
    )?;
    gauges(
        e,
        "sluice_session_error_recovery_level",
        "ErrorRecoveryLevel the session negotiated",
        None,
        gauge(|x| i64::from(x.params.error_recovery_level)),
    )?;
    let counter = |pick: fn(&SessionStatus) -> u64| {
        sessions
            .iter()
            .map(move |x| (session_labels(x), pick(x)))
            .collect::<Vec<_>>()
    };
    let families: [(&str, &str, SessionCounter); 6] = [
        (
            "sluice_session_pdus_resent",
            "PDUs sent again for SNACKs",
            |x| x.recovery.pdus_resent,
        ),
        (
            "sluice_session_sequence_timeouts",
            "Writes whose Data-Out did not come in time, asked for again with recovery R2Ts",
            |x| x.recovery.sequence_timeouts,
        ),
        (
            "sluice_session_lost_data_out",
            "Data-Out PDUs lost to data digest errors, asked for again with recovery R2Ts",
            |x| x.recovery.lost_data_out,
        ),
        (
            "sluice_session_tasks_aborted",
            "Tasks ended by task management",
            |x| x.recovery.tasks_aborted,
        ),
        (
            "sluice_session_tasks_reassigned",
            "Tasks moved to another connection by TASK REASSIGN",
            |x| x.recovery.tasks_reassigned,
        ),
        (
            "sluice_session_connections_orphaned",
            "Connections that failed with tasks kept for reassignment",
            |x| x.recovery.connections_orphaned,
        ),
    ];
    for (name, help, pick) in families {
        counters(e, name, help, None, counter(pick))?;
    }
    Ok(())
}

fn connection_families(e: &mut DescriptorEncoder, sessions: &[SessionStatus]) -> std::fmt::Result {
    let conns: Vec<(Labels, &ConnCounts)> = sessions
        .iter()
        .flat_map(|x| {
            x.connections.iter().map(move |c| {
                let mut l = session_labels(x);
                l.push(("cid", c.cid.to_string()));
                (l, &c.counts)
            })
        })
        .collect();
    let with = |labels: &Labels, extra: (&'static str, &str)| {
        let mut l = labels.clone();
        l.push((extra.0, extra.1.to_string()));
        l
    };
    counters(
        e,
        "sluice_connection_pdus",
        "PDUs in full feature phase, by direction",
        None,
        conns.iter().flat_map(|(l, c)| {
            [
                (with(l, ("direction", "received")), c.pdus_received),
                (with(l, ("direction", "sent")), c.pdus_sent),
            ]
        }),
    )?;
    counters(
        e,
        "sluice_connection_commands",
        "SCSI Command PDUs received, by operation",
        None,
        conns.iter().flat_map(|(l, c)| {
            Op::ALL
                .iter()
                .map(move |op| (with(l, ("op", op.name())), c.commands[*op as usize]))
        }),
    )?;
    counters(
        e,
        "sluice_connection_data",
        "Data bytes: write data received (immediate and Data-Out), Data-In sent",
        Some(Unit::Bytes),
        conns.iter().flat_map(|(l, c)| {
            [
                (with(l, ("direction", "received")), c.data_out_bytes),
                (with(l, ("direction", "sent")), c.data_in_bytes),
            ]
        }),
    )?;
    counters(
        e,
        "sluice_connection_r2ts",
        "R2Ts sent",
        None,
        conns.iter().map(|(l, c)| (l.clone(), c.r2ts)),
    )?;
    counters(
        e,
        "sluice_connection_responses",
        "Statuses sent, by SCSI status",
        None,
        conns.iter().flat_map(|(l, c)| {
            StatusKind::ALL
                .iter()
                .map(move |k| (with(l, ("status", k.name())), c.responses[*k as usize]))
        }),
    )?;
    counters(
        e,
        "sluice_connection_errors",
        "PDUs refused: header or data digest mismatches, framing errors; Rejects sent",
        None,
        conns.iter().flat_map(|(l, c)| {
            [
                (with(l, ("kind", "header_digest")), c.header_digest_errors),
                (with(l, ("kind", "data_digest")), c.data_digest_errors),
                (with(l, ("kind", "framing")), c.framing_errors),
                (with(l, ("kind", "reject_sent")), c.rejects_sent),
            ]
        }),
    )?;
    counters(
        e,
        "sluice_connection_snacks",
        "SNACK Requests received, by type",
        None,
        conns.iter().flat_map(|(l, c)| {
            SNACK_TYPES
                .iter()
                .zip(c.snacks)
                .map(move |(t, n)| (with(l, ("type", t)), n))
        }),
    )?;
    counters(
        e,
        "sluice_connection_task_management",
        "Task management requests received, by function",
        None,
        conns.iter().flat_map(|(l, c)| {
            TASK_MANAGEMENT_FUNCTIONS
                .iter()
                .zip(c.task_management)
                .map(move |(f, n)| (with(l, ("function", f)), n))
        }),
    )?;
    counters(
        e,
        "sluice_connection_nop_outs",
        "NOP-Out PDUs received",
        None,
        conns.iter().map(|(l, c)| (l.clone(), c.nop_outs)),
    )
}

fn process_families(e: &mut DescriptorEncoder, p: &ProcessStats) -> std::fmt::Result {
    float_gauges(
        e,
        "process_cpu",
        "User and system CPU time spent",
        Some(Unit::Seconds),
        MetricType::Counter,
        [(Vec::new(), p.cpu_seconds)],
    )?;
    gauges(
        e,
        "process_resident_memory",
        "Resident memory size",
        Some(Unit::Bytes),
        [(Vec::new(), gauge_of(p.resident_bytes))],
    )?;
    gauges(
        e,
        "process_virtual_memory",
        "Virtual memory size",
        Some(Unit::Bytes),
        [(Vec::new(), gauge_of(p.virtual_bytes))],
    )?;
    gauges(
        e,
        "process_open_fds",
        "Open file descriptors",
        None,
        [(Vec::new(), gauge_of(p.open_fds))],
    )?;
    if let Some(max) = p.max_fds {
        gauges(
            e,
            "process_max_fds",
            "Limit on open file descriptors",
            None,
            [(Vec::new(), gauge_of(max))],
        )?;
    }
    gauges(
        e,
        "process_threads",
        "Threads",
        None,
        [(Vec::new(), gauge_of(p.threads))],
    )?;
    float_gauges(
        e,
        "process_start_time",
        "Start time of the process since the Unix epoch",
        Some(Unit::Seconds),
        MetricType::Gauge,
        [(Vec::new(), p.start_time_seconds)],
    )
}
