//! One row per run: the configuration, what the login negotiated, what moved, the theory,
//! what TCP_INFO said about the connection, the write decomposition, and the link.

use crate::study::table::{clean, Cells, Row, Value};

/// The negotiated values that decide a write's round trips (RFC 7143 section 13).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Negotiated {
    /// ImmediateData.
    pub immediate_data: bool,
    /// InitialR2T.
    pub initial_r2t: bool,
    /// FirstBurstLength.
    pub first_burst: u32,
    /// MaxBurstLength.
    pub max_burst: u32,
    /// The target's MaxRecvDataSegmentLength (the largest Data-Out).
    pub target_mrdsl: u32,
    /// MaxOutstandingR2T.
    pub max_outstanding_r2t: u16,
}

/// One run of the WAN study.
#[derive(Clone, Debug, PartialEq)]
pub struct WanRun {
    /// Experiment id (`fig7`, ...).
    pub experiment: String,
    /// The configuration's label.
    pub config: String,
    /// The configuration's key (resume).
    pub config_key: String,
    /// `sluice`, `libiscsi` or `socket`.
    pub initiator: String,
    /// iSCSI parameter preset.
    pub params: String,
    /// Congestion control (`default`: the system's, named in the report).
    pub cc: String,
    /// Send-buffer policy (`kernel`, `grow`, or bytes).
    pub sndbuf_policy: String,
    /// Commands in flight.
    pub queue_depth: u32,
    /// Bytes per command.
    pub block_bytes: u32,
    /// Connections.
    pub connections: u16,
    /// Configured round trip, ms.
    pub rtt_ms: f64,
    /// Link rate, bits/s (0: unlimited).
    pub rate_bps: u64,
    /// MTU.
    pub mtu: u32,
    /// Run index within the point.
    pub run: u32,
    /// What the login negotiated (iSCSI runs of sluice's initiator).
    pub negotiated: Option<Negotiated>,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Seconds measured.
    pub seconds: f64,
    /// The theoretical line at this point, MiB/s.
    pub theory_mib_s: f64,
    /// Monitor: samples, their 99th-percentile gap (us), busy, rwnd- and
    /// send-buffer-limited seconds, retransmitted segments, largest cwnd, send queue and
    /// send buffer (bytes), mean smoothed and final minimum RTT (ms).
    pub tcp: Option<crate::wan::monitor::TcpSummary>,
    /// The write decomposition (sluice, one command at a time).
    pub decomposition: Option<crate::wan::decompose::Decomposition>,
    /// Packets the link's queue dropped, and lost at random, during the run.
    pub link_dropped: u64,
    /// Packets lost at random.
    pub link_lost: u64,
    /// The forwarder's 99th-percentile lateness initiator to target, us.
    pub lateness_p99_us: u64,
    /// Failed commands.
    pub errors: u64,
}

impl WanRun {
    /// Throughput, MiB/s.
    pub fn mib_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / f64::from(1 << 20)
        } else {
            0.0
        }
    }

    /// Measured over theory.
    pub fn of_theory(&self) -> f64 {
        if self.theory_mib_s > 0.0 {
            self.mib_s() / self.theory_mib_s
        } else {
            0.0
        }
    }

    /// The resume key.
    pub fn key(&self) -> String {
        run_key(&self.experiment, &self.config_key, self.rtt_ms, self.run)
    }

    /// A row with every column filled, for the CSV header.
    pub fn example() -> Self {
        Self {
            experiment: String::new(),
            config: String::new(),
            config_key: String::new(),
            initiator: String::new(),
            params: String::new(),
            cc: String::new(),
            sndbuf_policy: String::new(),
            queue_depth: 0,
            block_bytes: 0,
            connections: 0,
            rtt_ms: 0.0,
            rate_bps: 0,
            mtu: 0,
            run: 0,
            negotiated: None,
            bytes: 0,
            seconds: 0.0,
            theory_mib_s: 0.0,
            tcp: None,
            decomposition: None,
            link_dropped: 0,
            link_lost: 0,
            lateness_p99_us: 0,
            errors: 0,
        }
    }
}

/// The resume key of one run.
pub fn run_key(experiment: &str, config_key: &str, rtt_ms: f64, run: u32) -> String {
    format!("{experiment}|{config_key}|{rtt_ms}|{run}")
}

fn opt<T>(v: Option<T>, f: impl FnOnce(T) -> Value) -> Value {
    v.map_or(Value::Missing, f)
}

impl Row for WanRun {
    fn fields(&self) -> Vec<(&'static str, Value)> {
        let n = self.negotiated;
        let t = self.tcp;
        let d = self.decomposition;
        let text = |s: &str| Value::Text(clean(s));
        vec![
            ("experiment", text(&self.experiment)),
            ("config", text(&self.config)),
            ("config_key", text(&self.config_key)),
            ("initiator", text(&self.initiator)),
            ("params", text(&self.params)),
            ("cc", text(&self.cc)),
            ("sndbuf_policy", text(&self.sndbuf_policy)),
            ("queue_depth", Value::UInt(self.queue_depth.into())),
            ("block_bytes", Value::UInt(self.block_bytes.into())),
            ("connections", Value::UInt(self.connections.into())),
            ("rtt_ms", Value::Float(self.rtt_ms)),
            ("rate_bps", Value::UInt(self.rate_bps)),
            ("mtu", Value::UInt(self.mtu.into())),
            ("run", Value::UInt(self.run.into())),
            (
                "neg_immediate_data",
                opt(n, |n| Value::Bool(n.immediate_data)),
            ),
            ("neg_initial_r2t", opt(n, |n| Value::Bool(n.initial_r2t))),
            (
                "neg_first_burst",
                opt(n, |n| Value::UInt(n.first_burst.into())),
            ),
            ("neg_max_burst", opt(n, |n| Value::UInt(n.max_burst.into()))),
            (
                "neg_target_mrdsl",
                opt(n, |n| Value::UInt(n.target_mrdsl.into())),
            ),
            (
                "neg_max_outstanding_r2t",
                opt(n, |n| Value::UInt(n.max_outstanding_r2t.into())),
            ),
            ("bytes", Value::UInt(self.bytes)),
            ("seconds", Value::Float(self.seconds)),
            ("mib_s", Value::Float(self.mib_s())),
            ("theory_mib_s", Value::Float(self.theory_mib_s)),
            ("of_theory", Value::Float(self.of_theory())),
            ("samples", opt(t, |t| Value::UInt(t.samples as u64))),
            ("sample_gap_p99_us", opt(t, |t| Value::UInt(t.gap_p99_us))),
            ("busy_s", opt(t, |t| Value::Float(t.busy_s))),
            ("rwnd_limited_s", opt(t, |t| Value::Float(t.rwnd_limited_s))),
            (
                "sndbuf_limited_s",
                opt(t, |t| Value::Float(t.sndbuf_limited_s)),
            ),
            ("retrans", opt(t, |t| Value::UInt(t.retrans))),
            ("max_cwnd_bytes", opt(t, |t| Value::UInt(t.max_cwnd_bytes))),
            ("max_queued_bytes", opt(t, |t| Value::UInt(t.max_queued))),
            ("max_sndbuf_bytes", opt(t, |t| Value::UInt(t.max_sndbuf))),
            ("mean_srtt_ms", opt(t, |t| Value::Float(t.mean_srtt_ms))),
            ("min_rtt_ms", opt(t, |t| Value::Float(t.min_rtt_ms))),
            (
                "writes_decomposed",
                opt(d, |d| Value::UInt(d.writes as u64)),
            ),
            ("ta_ms", opt(d, |d| Value::Float(d.ta_ms))),
            ("tb_ms", opt(d, |d| Value::Float(d.tb_ms))),
            ("tc_ms", opt(d, |d| Value::Float(d.tc_ms))),
            ("link_dropped", Value::UInt(self.link_dropped)),
            ("link_lost", Value::UInt(self.link_lost)),
            ("lateness_p99_us", Value::UInt(self.lateness_p99_us)),
            ("errors", Value::UInt(self.errors)),
        ]
    }

    fn from_cells(c: &Cells<'_>) -> Result<Self, String> {
        let negotiated = if c.text("neg_first_burst")?.is_empty() {
            None
        } else {
            Some(Negotiated {
                immediate_data: c.flag("neg_immediate_data")?,
                initial_r2t: c.flag("neg_initial_r2t")?,
                first_burst: c.small("neg_first_burst")?,
                max_burst: c.small("neg_max_burst")?,
                target_mrdsl: c.small("neg_target_mrdsl")?,
                max_outstanding_r2t: c.small("neg_max_outstanding_r2t")?,
            })
        };
        let tcp = if c.text("samples")?.is_empty() {
            None
        } else {
            Some(crate::wan::monitor::TcpSummary {
                samples: c.small("samples")?,
                gap_p99_us: c.uint("sample_gap_p99_us")?,
                busy_s: c.float("busy_s")?,
                rwnd_limited_s: c.float("rwnd_limited_s")?,
                sndbuf_limited_s: c.float("sndbuf_limited_s")?,
                retrans: c.uint("retrans")?,
                max_cwnd_bytes: c.uint("max_cwnd_bytes")?,
                max_queued: c.uint("max_queued_bytes")?,
                max_sndbuf: c.uint("max_sndbuf_bytes")?,
                mean_srtt_ms: c.float("mean_srtt_ms")?,
                min_rtt_ms: c.float("min_rtt_ms")?,
            })
        };
        let decomposition = if c.text("ta_ms")?.is_empty() {
            None
        } else {
            Some(crate::wan::decompose::Decomposition {
                writes: c.small("writes_decomposed")?,
                ta_ms: c.float("ta_ms")?,
                tb_ms: c.float("tb_ms")?,
                tc_ms: c.float("tc_ms")?,
            })
        };
        Ok(Self {
            experiment: c.text("experiment")?.to_owned(),
            config: c.text("config")?.to_owned(),
            config_key: c.text("config_key")?.to_owned(),
            initiator: c.text("initiator")?.to_owned(),
            params: c.text("params")?.to_owned(),
            cc: c.text("cc")?.to_owned(),
            sndbuf_policy: c.text("sndbuf_policy")?.to_owned(),
            queue_depth: c.small("queue_depth")?,
            block_bytes: c.small("block_bytes")?,
            connections: c.small("connections")?,
            rtt_ms: c.float("rtt_ms")?,
            rate_bps: c.uint("rate_bps")?,
            mtu: c.small("mtu")?,
            run: c.small("run")?,
            negotiated,
            bytes: c.uint("bytes")?,
            seconds: c.float("seconds")?,
            theory_mib_s: c.float("theory_mib_s")?,
            tcp,
            decomposition,
            link_dropped: c.uint("link_dropped")?,
            link_lost: c.uint("link_lost")?,
            lateness_p99_us: c.uint("lateness_p99_us")?,
            errors: c.uint("errors")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::table::{csv_header, csv_row, parse_csv};
    use crate::wan::decompose::Decomposition;
    use crate::wan::monitor::TcpSummary;

    #[test]
    fn rows_round_trip_through_csv() {
        let a = WanRun {
            experiment: "fig7".into(),
            config: "iSCSI, study".into(),
            config_key: "sluice params=study".into(),
            initiator: "sluice".into(),
            params: "study".into(),
            cc: "cubic".into(),
            sndbuf_policy: "kernel".into(),
            queue_depth: 1,
            block_bytes: 4 << 20,
            connections: 1,
            rtt_ms: 20.0,
            rate_bps: 1_000_000_000,
            mtu: 9000,
            run: 0,
            negotiated: Some(Negotiated {
                immediate_data: true,
                initial_r2t: false,
                first_burst: 1 << 20,
                max_burst: 1 << 20,
                target_mrdsl: 1 << 20,
                max_outstanding_r2t: 1,
            }),
            bytes: 100 << 20,
            seconds: 2.0,
            theory_mib_s: 80.0,
            tcp: Some(TcpSummary {
                samples: 4000,
                gap_p99_us: 600,
                busy_s: 1.9,
                rwnd_limited_s: 0.0,
                sndbuf_limited_s: 1.2,
                retrans: 0,
                max_cwnd_bytes: 6 << 20,
                max_queued: 4 << 20,
                max_sndbuf: 4 << 20,
                mean_srtt_ms: 21.5,
                min_rtt_ms: 20.1,
            }),
            decomposition: Some(Decomposition {
                writes: 12,
                ta_ms: 40.0,
                tb_ms: 0.5,
                tc_ms: 0.1,
            }),
            link_dropped: 0,
            link_lost: 0,
            lateness_p99_us: 90,
            errors: 0,
        };
        let socket = WanRun {
            experiment: "fig5".into(),
            negotiated: None,
            decomposition: None,
            ..a.clone()
        };
        let text = format!(
            "{}\n{}\n{}\n",
            csv_header(&WanRun::example()),
            csv_row(&a),
            csv_row(&socket)
        );
        let back: Vec<WanRun> = parse_csv(&text).unwrap();
        assert_eq!(back[0].config, "iSCSI  study");
        assert_eq!(back[0].negotiated, a.negotiated);
        assert_eq!(back[0].tcp, a.tcp);
        assert_eq!(back[1].negotiated, None);
        assert_eq!(back[1].decomposition, None);
        assert_eq!(a.mib_s(), 50.0);
        assert_eq!(a.of_theory(), 0.625);
        assert_ne!(a.key(), socket.key());
    }
}
