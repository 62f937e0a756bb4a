//! The paper's Table 2 ("Suggested iSCSI parameter settings") beside what this system
//! measured for each row.

use super::models::{bytes_label, effect, equation3, Effect, IMPORTANT};
use super::point::{Direction, Point};
use super::summary::Summary;

/// One row: the paper's answer and ours.
#[derive(Clone, Debug)]
pub struct Row {
    /// The parameter.
    pub parameter: &'static str,
    /// The paper's best value.
    pub paper_best: &'static str,
    /// RFC 7143's default (as the paper lists it).
    pub default: &'static str,
    /// The paper's importance for reads.
    pub paper_reads: &'static str,
    /// The paper's importance for writes.
    pub paper_writes: &'static str,
    /// Measured effect on reads (`None`: not measured or not applicable).
    pub reads: Option<Effect>,
    /// Measured effect on writes.
    pub writes: Option<Effect>,
    /// Our best value, as text.
    pub best: String,
}

/// How a measured spread reads in the paper's words.
pub fn importance(e: Option<&Effect>) -> String {
    match e {
        None => "not measured".into(),
        Some(e) if important(e) => format!("Important ({:.0} %)", e.spread * 100.0),
        Some(e) if e.spread >= IMPORTANT => {
            format!("Not important ({:.0} %, within noise)", e.spread * 100.0)
        }
        Some(e) => format!("Not important ({:.0} %)", e.spread * 100.0),
    }
}

/// Important: a spread of at least [`IMPORTANT`] that stands out of the runs' noise.
fn important(e: &Effect) -> bool {
    e.spread >= IMPORTANT && e.significant
}

/// Whether the paper's word and the measured spread agree: `None` when the paper gave no
/// verdict (not relevant, or further testing required).
pub fn agrees(paper: &str, e: Option<&Effect>) -> Option<bool> {
    let important = important(e?);
    match paper {
        "Important" => Some(important),
        "Not important" => Some(!important),
        _ => None,
    }
}

type Value = fn(&Point) -> (f64, String);
type Clear = fn(&mut Point);

fn measure(
    s: &[Summary],
    imp: &str,
    experiment: &str,
    dir: Direction,
    value: Value,
    clear: Clear,
    categorical: bool,
) -> Option<Effect> {
    let group = move |p: &Point| {
        let mut q = p.clone();
        clear(&mut q);
        q.key()
    };
    effect(s, imp, experiment, dir, &value, &group, categorical)
}

fn yes_no(b: bool) -> (f64, String) {
    (f64::from(u8::from(b)), if b { "Yes" } else { "No" }.into())
}

/// Every row of Table 2 for `implementation`.
pub fn rows(s: &[Summary], imp: &str) -> Vec<Row> {
    use Direction::{Read, Write};
    let m = |e, d, v, c| measure(s, imp, e, d, v, c, false);
    let mc = |e, d, v, c| measure(s, imp, e, d, v, c, true);
    let best = |e: &Option<Effect>| e.as_ref().map(|e| e.best.clone()).unwrap_or_default();
    let both = |r: &Option<Effect>, w: &Option<Effect>| match (r, w) {
        (Some(r), Some(w)) if r.best == w.best => r.best.clone(),
        (Some(r), Some(w)) => format!("reads {}, writes {}", r.best, w.best),
        (Some(r), None) => r.best.clone(),
        (None, Some(w)) => w.best.clone(),
        (None, None) => String::new(),
    };
    let mut out = Vec::new();
    let mut push = |parameter, paper_best, default, paper_reads, paper_writes, reads, writes, b| {
        out.push(Row {
            parameter,
            paper_best,
            default,
            paper_reads,
            paper_writes,
            reads,
            writes,
            best: b,
        });
    };
    let mrdsl_r = m(
        "mrdsl-read",
        Read,
        |p| (p.initiator_mrdsl.into(), bytes_label(p.initiator_mrdsl)),
        |p| {
            p.initiator_mrdsl = 0;
            p.target_mrdsl = 0;
        },
    );
    let mrdsl_w = m(
        "burst-write",
        Write,
        |p| (p.target_mrdsl.into(), bytes_label(p.target_mrdsl)),
        |p| {
            p.target_mrdsl = 0;
            p.initiator_mrdsl = 0;
        },
    );
    let b = both(&mrdsl_r, &mrdsl_w);
    push(
        "MaxRecvDataSegmentLength",
        ">= 8KB",
        "8KB",
        "Important",
        "Important",
        mrdsl_r,
        mrdsl_w,
        b,
    );
    let mbl_r = m(
        "burst-read",
        Read,
        |p| (p.max_burst.into(), bytes_label(p.max_burst)),
        |p| {
            p.max_burst = 0;
            p.first_burst = 0;
        },
    );
    let mbl_w = m(
        "burst-write",
        Write,
        |p| (p.max_burst.into(), bytes_label(p.max_burst)),
        |p| {
            p.max_burst = 0;
            p.first_burst = 0;
        },
    );
    let b = both(&mbl_r, &mbl_w);
    push(
        "MaxBurstLength",
        ">= 32KB",
        "256KB",
        "Not important",
        "Important",
        mbl_r,
        mbl_w,
        b,
    );
    let fbl = m(
        "first-burst",
        Write,
        |p| (p.first_burst.into(), bytes_label(p.first_burst)),
        |p| {
            p.first_burst = 0;
        },
    );
    let b = best(&fbl);
    push(
        "FirstBurstLength",
        ">= 32KB",
        "64KB",
        "Not relevant",
        "Important",
        None,
        fbl,
        b,
    );
    let imm = mc(
        "write-model",
        Write,
        |p| yes_no(p.immediate_data),
        |p| p.immediate_data = false,
    );
    let b = best(&imm);
    push(
        "ImmediateData",
        "Yes",
        "Yes",
        "Not relevant",
        "Important",
        None,
        imm,
        b,
    );
    let ir2t = mc(
        "write-model",
        Write,
        |p| yes_no(p.initial_r2t),
        |p| p.initial_r2t = false,
    );
    let b = best(&ir2t);
    push(
        "InitialR2T",
        "No",
        "Yes",
        "Not relevant",
        "Important",
        None,
        ir2t,
        b,
    );
    let mor2t = m(
        "outstanding-r2t",
        Write,
        |p| {
            (
                p.max_outstanding_r2t.into(),
                p.max_outstanding_r2t.to_string(),
            )
        },
        |p| p.max_outstanding_r2t = 0,
    );
    let b = match equation3(s, imp).1 {
        Some(c) => format!(">= ({c:.0}/MRDSL in KB)"),
        None => best(&mor2t),
    };
    push(
        "MaxOutstandingR2T",
        ">= (64/MRDSL)",
        "1",
        "Not relevant",
        "Important",
        None,
        mor2t,
        b,
    );
    let oc = |d| {
        m(
            "outstanding-commands",
            d,
            |p| (p.outstanding.into(), p.outstanding.to_string()),
            |p| {
                p.outstanding = 0;
            },
        )
    };
    let (r, w) = (oc(Read), oc(Write));
    let b = both(&r, &w);
    push(
        "Outstanding commands",
        ">= 64",
        "-",
        "Important",
        "Important",
        r,
        w,
        b,
    );
    let conns = |d| {
        m(
            "lus-connections",
            d,
            |p| (p.connections.into(), p.connections.to_string()),
            |p| {
                p.connections = 0;
                p.policy = sluice_proto::initiator::Policy::RoundRobin;
            },
        )
    };
    let (r, w) = (conns(Read), conns(Write));
    let b = both(&r, &w);
    push(
        "MaxConnections",
        "Does not matter",
        "1",
        "Needs further testing",
        "Needs further testing",
        r,
        w,
        b,
    );
    let sectors = |d| {
        m(
            "sectors",
            d,
            |p| (p.sectors().into(), p.sectors().to_string()),
            |p| {
                p.command_bytes = 0;
                p.initiator_mrdsl = 0;
                p.target_mrdsl = 0;
                p.max_burst = 0;
                p.first_burst = 0;
            },
        )
    };
    let (r, w) = (sectors(Read), sectors(Write));
    let b = both(&r, &w);
    push(
        "Num sectors/command",
        "1024",
        "-",
        "Important",
        "Important",
        r,
        w,
        b,
    );
    let digest: Value = |p| {
        let n = u8::from(p.header_digest) + 2 * u8::from(p.data_digest);
        let name = ["Off", "header only", "data only", "both"][usize::from(n)];
        (f64::from(n), name.into())
    };
    let dg = |d| {
        mc("digests", d, digest, |p| {
            p.header_digest = false;
            p.data_digest = false;
        })
    };
    let (r, w) = (dg(Read), dg(Write));
    let b = both(&r, &w);
    push("Digest", "Off", "Off", "Important", "Important", r, w, b);
    let pc = mc(
        "phase-collapse",
        Read,
        |p| yes_no(p.phase_collapse),
        |p| p.phase_collapse = false,
    );
    let b = best(&pc);
    push(
        "Phase collapse",
        "Does not matter",
        "-",
        "Not important",
        "Not relevant",
        pc,
        None,
        b,
    );
    let luns = |d| {
        m(
            "lus-connections",
            d,
            |p| (p.luns.into(), p.luns.to_string()),
            |p| p.luns = 0,
        )
    };
    let (r, w) = (luns(Read), luns(Write));
    let b = both(&r, &w);
    push(
        "Number of LUNs on one connection",
        "Does not matter",
        "-",
        "Not important",
        "Not important",
        r,
        w,
        b,
    );
    let pol = |d| {
        mc(
            "lus-connections",
            d,
            |p| {
                let n = p.policy.name();
                (f64::from(u8::from(n != "round-robin")), n.to_owned())
            },
            |p| p.policy = sluice_proto::initiator::Policy::RoundRobin,
        )
    };
    let (r, w) = (pol(Read), pol(Write));
    let b = both(&r, &w);
    push(
        "Scheduling policy (RR, LUNA)",
        "Does not matter",
        "-",
        "Not important",
        "Not important",
        r,
        w,
        b,
    );
    let pdu = |d| {
        mc(
            "order",
            d,
            |p| yes_no(p.data_pdu_in_order),
            |p| p.data_pdu_in_order = false,
        )
    };
    let (r, w) = (pdu(Read), pdu(Write));
    let b = both(&r, &w);
    push(
        "DataPDUInOrder",
        "Does not matter",
        "Yes",
        "Further testing required",
        "Further testing required",
        r,
        w,
        b,
    );
    let seq = |d| {
        mc(
            "order",
            d,
            |p| yes_no(p.data_sequence_in_order),
            |p| p.data_sequence_in_order = false,
        )
    };
    let (r, w) = (seq(Read), seq(Write));
    let b = both(&r, &w);
    push(
        "DataSequenceInOrder",
        "Does not matter",
        "Yes",
        "Further testing required",
        "Further testing required",
        r,
        w,
        b,
    );
    out
}
