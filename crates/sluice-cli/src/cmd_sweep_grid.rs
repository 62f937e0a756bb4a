//! `sluice lab sweep --grid FILE`: a plan from a TOML file. Each `[[experiment]]` names its
//! id and lists values per key; its points are every combination (keys left out keep RFC
//! 7143's defaults):
//!
//! ```toml
//! bytes_per_run = "64M"   # default 500M
//! runs = 3                # default 10
//!
//! [[experiment]]
//! id = "mrdsl-read"       # a known id gets that experiment's figures
//! direction = "read"
//! mrdsl = ["512", "8K", "128K"]   # both directions; or initiator_mrdsl / target_mrdsl
//! bursts = "128K"                 # MaxBurstLength = FirstBurstLength; or each alone
//! ```

use anyhow::{bail, Context as _, Result};
use sluice_lab::sweep::plan::Experiment;
use sluice_lab::sweep::{Direction, Plan, Point};
use sluice_proto::initiator::Policy;
use toml::Value;

use crate::size::parse_size;

/// Keys an experiment may list, in the order combinations vary (last fastest).
const KEYS: [&str; 22] = [
    "direction",
    "mrdsl",
    "initiator_mrdsl",
    "target_mrdsl",
    "bursts",
    "max_burst",
    "first_burst",
    "immediate_data",
    "initial_r2t",
    "max_outstanding_r2t",
    "data_pdu_in_order",
    "data_sequence_in_order",
    "phase_collapse",
    "header_digest",
    "data_digest",
    "outstanding",
    "command_bytes",
    "sectors",
    "luns",
    "connections",
    "policy",
    "id",
];

/// Reads a grid file.
pub fn load(path: &std::path::Path) -> Result<Plan> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text).with_context(|| format!("{}", path.display()))
}

/// Parses a grid file's text.
pub fn parse(text: &str) -> Result<Plan> {
    let doc: toml::Table = text.parse()?;
    let mut plan = Plan {
        name: "grid".into(),
        experiments: Vec::new(),
        bytes_per_run: 500 << 20,
        runs: 10,
    };
    for (k, v) in &doc {
        match k.as_str() {
            "bytes_per_run" => plan.bytes_per_run = size(v).context("bytes_per_run")?,
            "runs" => {
                plan.runs = v
                    .as_integer()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| *n >= 1)
                    .context("runs: a positive integer")?
            }
            "experiment" => {}
            _ => bail!("unknown key {k:?} (bytes_per_run, runs, [[experiment]])"),
        }
    }
    let exps = doc
        .get("experiment")
        .and_then(Value::as_array)
        .context("no [[experiment]] tables")?;
    for (i, e) in exps.iter().enumerate() {
        let t = e
            .as_table()
            .with_context(|| format!("experiment {}", i + 1))?;
        plan.experiments
            .push(experiment(t).with_context(|| format!("experiment {}", i + 1))?);
    }
    if plan.bytes_per_run == 0 {
        bail!("bytes_per_run must be positive");
    }
    Ok(plan)
}

fn experiment(t: &toml::Table) -> Result<Experiment> {
    for k in t.keys() {
        if !KEYS.contains(&k.as_str()) {
            bail!("unknown key {k:?}; keys: {}", KEYS.join(", "));
        }
    }
    let id = t
        .get("id")
        .and_then(Value::as_str)
        .context("id = \"...\" is required")?;
    // The id lives as long as the plan: leaked once per experiment of a grid file.
    let id: &'static str = Box::leak(id.to_owned().into_boxed_str());
    let mut points = vec![Point::default()];
    for key in KEYS.iter().filter(|k| **k != "id") {
        let Some(v) = t.get(*key) else { continue };
        let values: Vec<&Value> = match v {
            Value::Array(a) if a.is_empty() => bail!("{key}: an empty list"),
            Value::Array(a) => a.iter().collect(),
            other => vec![other],
        };
        let mut next = Vec::new();
        for p in &points {
            for v in &values {
                let mut q = p.clone();
                set(&mut q, key, v).with_context(|| format!("{key} = {v}"))?;
                next.push(q);
            }
        }
        points = next;
    }
    for p in &points {
        p.validate().map_err(anyhow::Error::msg)?;
    }
    Ok(Experiment {
        id,
        title: id,
        points,
    })
}

fn size(v: &Value) -> Result<u64> {
    match v {
        Value::Integer(n) => u64::try_from(*n).context("a size cannot be negative"),
        Value::String(s) => Ok(parse_size(s)?),
        _ => bail!("a size: an integer or a string such as \"8K\""),
    }
}

fn size32(v: &Value) -> Result<u32> {
    u32::try_from(size(v)?).context("too large")
}

fn int<T: TryFrom<i64>>(v: &Value) -> Result<T> {
    v.as_integer()
        .and_then(|n| T::try_from(n).ok())
        .context("an integer in range")
}

fn flag(v: &Value) -> Result<bool> {
    v.as_bool().context("true or false")
}

fn set(p: &mut Point, key: &str, v: &Value) -> Result<()> {
    match key {
        "direction" => {
            p.direction = v
                .as_str()
                .and_then(Direction::from_name)
                .context("\"read\" or \"write\"")?
        }
        "mrdsl" => *p = p.clone().mrdsl(size32(v)?),
        "initiator_mrdsl" => p.initiator_mrdsl = size32(v)?,
        "target_mrdsl" => p.target_mrdsl = size32(v)?,
        "bursts" => *p = p.clone().bursts(size32(v)?),
        "max_burst" => p.max_burst = size32(v)?,
        "first_burst" => p.first_burst = size32(v)?,
        "immediate_data" => p.immediate_data = flag(v)?,
        "initial_r2t" => p.initial_r2t = flag(v)?,
        "max_outstanding_r2t" => p.max_outstanding_r2t = int(v)?,
        "data_pdu_in_order" => p.data_pdu_in_order = flag(v)?,
        "data_sequence_in_order" => p.data_sequence_in_order = flag(v)?,
        "phase_collapse" => p.phase_collapse = flag(v)?,
        "header_digest" => p.header_digest = flag(v)?,
        "data_digest" => p.data_digest = flag(v)?,
        "outstanding" => p.outstanding = int(v)?,
        "command_bytes" => p.command_bytes = size32(v)?,
        "sectors" => p.command_bytes = int::<u32>(v)?.checked_mul(512).context("too large")?,
        "luns" => p.luns = int(v)?,
        "connections" => p.connections = int(v)?,
        "policy" => {
            p.policy = v
                .as_str()
                .and_then(Policy::from_name)
                .context("round-robin, lu-affinity, least-commands or least-bytes")?
        }
        _ => unreachable!("keys are checked first"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_combination_of_the_lists() {
        let plan = parse(
            r#"
            bytes_per_run = "16M"
            runs = 2
            [[experiment]]
            id = "mine"
            direction = ["read", "write"]
            mrdsl = ["512", 8192]
            bursts = "64K"
            header_digest = [false, true]
            "#,
        )
        .unwrap();
        assert_eq!((plan.bytes_per_run, plan.runs), (16 << 20, 2));
        let pts = &plan.experiments[0].points;
        assert_eq!(pts.len(), 8);
        assert!(pts
            .iter()
            .all(|p| p.max_burst == 65_536 && p.first_burst == 65_536));
        assert_eq!(pts[0].initiator_mrdsl, 512);
        assert!(!pts[0].header_digest && pts[1].header_digest);
        assert_eq!(pts[7].direction, Direction::Write);
    }

    #[test]
    fn errors_name_the_key() {
        let e = parse("[[experiment]]\nid = \"x\"\nmrdsl = \"1G\"\n").unwrap_err();
        assert!(
            format!("{e:#}").contains("MaxRecvDataSegmentLength"),
            "{e:#}"
        );
        let e = parse("[[experiment]]\nid = \"x\"\nmax_brust = 1\n").unwrap_err();
        assert!(format!("{e:#}").contains("max_brust"), "{e:#}");
        let e = parse("[[experiment]]\nid = \"x\"\nmax_burst = 4096\nfirst_burst = 8192\n")
            .unwrap_err();
        assert!(format!("{e:#}").contains("13.14"), "{e:#}");
        assert!(parse("runs = 0\n[[experiment]]\nid = \"x\"\n").is_err());
    }
}
