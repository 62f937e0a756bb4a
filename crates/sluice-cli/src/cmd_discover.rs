//! `sluice discover` and `sluice ls`.

use anyhow::{Context, Result};
use serde::Serialize;
use sluice_initiator::{discover, DiscoveredTarget, IscsiUrl, Session};

use crate::client_args::{DiscoverArgs, LsArgs};
use crate::client_common::{human, options, print_json, runtime, CapacityJson};

#[derive(Serialize)]
struct TargetJson {
    name: String,
    addresses: Vec<String>,
}

/// `sluice discover HOST[:PORT]`.
pub fn run_discover(args: &DiscoverArgs) -> Result<()> {
    let url = IscsiUrl::parse_portal_or_url(&args.portal)?;
    let opts = options(&url, &args.conn)?;
    let targets = runtime()?
        .block_on(discover(&url.portal(), &opts))
        .with_context(|| format!("discovery at {}", url.portal()))?;
    if args.conn.json {
        let list: Vec<TargetJson> = targets.into_iter().map(to_json).collect();
        return print_json(&list);
    }
    for t in targets {
        if t.addresses.is_empty() {
            outln!("{} {}", url.portal(), t.name);
        }
        for a in &t.addresses {
            outln!("{a} {}", t.name);
        }
    }
    Ok(())
}

fn to_json(t: DiscoveredTarget) -> TargetJson {
    TargetJson {
        name: t.name,
        addresses: t.addresses,
    }
}

#[derive(Serialize)]
struct LsTarget {
    name: String,
    portal: String,
    luns: Vec<LsLun>,
}

#[derive(Serialize)]
struct LsLun {
    lun: u16,
    device_type: u8,
    device_type_name: &'static str,
    vendor: String,
    product: String,
    capacity: Option<CapacityJson>,
}

/// `sluice ls URL|HOST`: targets (all found by discovery, or the URL's one), their LUNs and
/// capacities.
pub fn run_ls(args: &LsArgs) -> Result<()> {
    let url = IscsiUrl::parse_portal_or_url(&args.url)?;
    let opts = options(&url, &args.conn)?;
    let rt = runtime()?;
    let names: Vec<(String, String)> = match &url.target {
        Some(t) => vec![(t.clone(), format!("{},1", url.portal()))],
        None => rt
            .block_on(discover(&url.portal(), &opts))
            .with_context(|| format!("discovery at {}", url.portal()))?
            .into_iter()
            .map(|t| {
                let addr = t.addresses.first().cloned().unwrap_or_else(|| url.portal());
                (t.name, addr)
            })
            .collect(),
    };
    let mut out = Vec::new();
    for (name, address) in names {
        // Log in at the portal that was asked: SendTargets may list addresses that are
        // not reachable from here (e.g. 0.0.0.0 or another network).
        let session = rt
            .block_on(Session::connect(&url.portal(), &name, opts.clone()))
            .with_context(|| format!("target {name}"))?;
        let luns = rt.block_on(list_luns(&session))?;
        let _ = rt.block_on(session.logout());
        out.push(LsTarget {
            name,
            portal: address,
            luns,
        });
    }
    if args.conn.json {
        return print_json(&out);
    }
    for t in out {
        outln!("Target:{} Portal:{}", t.name, t.portal);
        for l in t.luns {
            let size = l
                .capacity
                .as_ref()
                .map(|c| {
                    format!(
                        " (Size:{}, {} x {} bytes)",
                        human(c.bytes),
                        c.blocks,
                        c.block_size
                    )
                })
                .unwrap_or_default();
            outln!(
                "Lun:{:<4} Type:{} {} {}{size}",
                l.lun,
                l.device_type_name,
                l.vendor,
                l.product
            );
        }
    }
    Ok(())
}

async fn list_luns(s: &Session) -> Result<Vec<LsLun>> {
    let mut luns = Vec::new();
    for lun in s.report_luns().await.context("REPORT LUNS")? {
        let inq = s
            .inquiry(lun)
            .await
            .with_context(|| format!("INQUIRY of LUN {lun}"))?;
        let capacity = if inq.device_type == 0 {
            Some(
                s.read_capacity(lun)
                    .await
                    .with_context(|| format!("READ CAPACITY of LUN {lun}"))?
                    .into(),
            )
        } else {
            None
        };
        luns.push(LsLun {
            lun,
            device_type: inq.device_type,
            device_type_name: inq.device_type_name(),
            vendor: inq.vendor.clone(),
            product: inq.product.clone(),
            capacity,
        });
    }
    Ok(luns)
}
