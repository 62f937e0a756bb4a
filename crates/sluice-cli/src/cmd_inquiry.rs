//! `sluice inq` and `sluice readcap`.

use anyhow::{Context, Result};
use serde::Serialize;
use sluice_initiator::scsi::{decode_vpd, vpd_name};

use crate::client_args::{InqArgs, UrlArgs};
use crate::client_common::{connect, human, lun_url, print_json, runtime, CapacityJson};

#[derive(Serialize)]
struct InqJson {
    standard: Option<StandardJson>,
    vpd: Vec<VpdJson>,
}

#[derive(Serialize)]
struct StandardJson {
    qualifier: u8,
    device_type: u8,
    device_type_name: &'static str,
    removable: bool,
    version: u8,
    vendor: String,
    product: String,
    revision: String,
}

#[derive(Serialize)]
struct VpdJson {
    page: u8,
    name: &'static str,
    fields: Vec<(String, String)>,
}

/// `sluice inq URL [--page N]`.
pub fn run_inq(args: &InqArgs) -> Result<()> {
    let (url, lun) = lun_url(&args.url)?;
    let rt = runtime()?;
    let out = rt.block_on(async {
        let s = connect(&url, &args.conn).await?;
        let mut out = InqJson {
            standard: None,
            vpd: Vec::new(),
        };
        let pages = match args.page {
            Some(p) => vec![p],
            None => {
                let i = s.inquiry(lun).await.context("standard INQUIRY")?;
                out.standard = Some(StandardJson {
                    qualifier: i.qualifier,
                    device_type: i.device_type,
                    device_type_name: i.device_type_name(),
                    removable: i.removable,
                    version: i.version,
                    vendor: i.vendor,
                    product: i.product,
                    revision: i.revision,
                });
                // A target without VPD support answers ILLEGAL REQUEST: show what there is.
                match s.vpd(lun, 0x00).await {
                    Ok(list) => list.to_vec(),
                    Err(_) => Vec::new(),
                }
            }
        };
        for page in pages {
            let body = s
                .vpd(lun, page)
                .await
                .with_context(|| format!("INQUIRY VPD page {page:#04x}"))?;
            out.vpd.push(VpdJson {
                page,
                name: vpd_name(page),
                fields: decode_vpd(page, &body),
            });
        }
        let _ = s.logout().await;
        anyhow::Ok(out)
    })?;
    if args.conn.json {
        return print_json(&out);
    }
    if let Some(i) = &out.standard {
        outln!("Standard INQUIRY:");
        outln!("  peripheral qualifier: {}", i.qualifier);
        outln!(
            "  device type: {:#04x} ({})",
            i.device_type,
            i.device_type_name
        );
        outln!("  removable: {}", i.removable);
        outln!("  version: {:#04x}", i.version);
        outln!("  vendor: {}", i.vendor);
        outln!("  product: {}", i.product);
        outln!("  revision: {}", i.revision);
    }
    for p in &out.vpd {
        outln!("VPD page {:#04x} ({}):", p.page, p.name);
        for (k, v) in &p.fields {
            outln!("  {k}: {v}");
        }
    }
    Ok(())
}

/// `sluice readcap URL`.
pub fn run_readcap(args: &UrlArgs) -> Result<()> {
    let (url, lun) = lun_url(&args.url)?;
    let cap = runtime()?.block_on(async {
        let s = connect(&url, &args.conn).await?;
        let cap = s.read_capacity(lun).await.context("READ CAPACITY")?;
        let _ = s.logout().await;
        anyhow::Ok(cap)
    })?;
    if args.conn.json {
        return print_json(&CapacityJson::from(cap));
    }
    outln!("Last LBA: {}", cap.last_lba);
    outln!("Block size: {}", cap.block_size);
    outln!("Blocks: {}", cap.blocks());
    outln!("Size: {} bytes ({})", cap.bytes(), human(cap.bytes()));
    outln!("Thin provisioned: {}", cap.thin_provisioned);
    Ok(())
}
