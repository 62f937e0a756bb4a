//! `sluice xcopy`: copies a LUN (or its first bytes) to another LUN of the same target with
//! EXTENDED COPY (SPC-4 6.4): the target moves the data itself, none of it crosses the
//! network. Prints the rate and what the session sent and received, which shows it.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use serde::Serialize;
use sluice_initiator::{Command, Session};
use sluice_scsi::cdb::{self, BlockCopy};

use crate::client_args::XcopyArgs;
use crate::client_common::{connect, human, lun_url, print_json, runtime};

/// Bytes one EXTENDED COPY is asked to move: a few seconds of work at most, well inside the
/// 30 s command timeout initiators use, whatever the backing store.
const BYTES_PER_COMMAND: u64 = 1 << 30;
/// Most blocks one segment descriptor can name.
const SEGMENT_BLOCKS: u64 = u16::MAX as u64;

#[derive(Serialize)]
struct XcopyJson {
    bytes: u64,
    commands: u64,
    seconds: f64,
    mib_per_second: f64,
    /// Bytes the session sent and received while copying: PDUs and parameter lists only.
    session_bytes_sent: u64,
    session_bytes_received: u64,
}

/// `sluice xcopy --from URL --to URL [--length SIZE]`.
pub fn run_xcopy(args: &XcopyArgs) -> Result<()> {
    let summary = runtime()?.block_on(copy(args))?;
    if args.conn.json {
        return print_json(&summary);
    }
    outln!(
        "{} bytes ({}) copied in {:.3} s by {} EXTENDED COPY command(s), {:.1} MiB/s",
        summary.bytes,
        human(summary.bytes),
        summary.seconds,
        summary.commands,
        summary.mib_per_second
    );
    outln!(
        "the session sent {} and received {} bytes meanwhile (no data crossed the network)",
        summary.session_bytes_sent,
        summary.session_bytes_received
    );
    Ok(())
}

/// The LU's NAA designator (Device Identification VPD page), which names it in the copy.
async fn naa(s: &Session, lun: u16) -> Result<Vec<u8>> {
    let page = s
        .vpd(lun, 0x83)
        .await
        .context("Device Identification VPD page")?;
    let mut at = 0;
    while at + 4 <= page.len() {
        let len = usize::from(page[at + 3]);
        let association = (page[at + 1] >> 4) & 0x03;
        if association == 0 && page[at + 1] & 0x0F == 0x03 && len <= 20 {
            return page
                .get(at + 4..at + 4 + len)
                .map(<[u8]>::to_vec)
                .context("truncated designator");
        }
        at += 4 + len;
    }
    bail!("LUN {lun} reports no NAA designator: EXTENDED COPY cannot name it")
}

async fn copy(args: &XcopyArgs) -> Result<XcopyJson> {
    let (from, src_lun) = lun_url(&args.from)?;
    let (to, dst_lun) = lun_url(&args.to)?;
    if (&from.host, from.port, &from.target) != (&to.host, to.port, &to.target) {
        bail!("--from and --to must be LUNs of the same target (EXTENDED COPY runs inside it)");
    }
    let s = connect(&from, &args.conn).await?;
    let src = s.read_capacity(src_lun).await.context("source capacity")?;
    let dst = s
        .read_capacity(dst_lun)
        .await
        .context("destination capacity")?;
    if src.block_size != dst.block_size {
        bail!(
            "the LUNs' block sizes differ ({} and {})",
            src.block_size,
            dst.block_size
        );
    }
    let bs = u64::from(src.block_size);
    let length = args.length.unwrap_or(src.bytes());
    if length > src.bytes() || length > dst.bytes() || !length.is_multiple_of(bs) {
        bail!(
            "--length {length} must be a multiple of the block size {bs} and fit both LUNs \
             ({} and {} bytes)",
            src.bytes(),
            dst.bytes()
        );
    }
    let luns = [
        (1, 3, naa(&s, src_lun).await?, src.block_size),
        (1, 3, naa(&s, dst_lun).await?, dst.block_size),
    ];
    let luns: Vec<(u8, u8, &[u8], u32)> = luns
        .iter()
        .map(|(c, t, id, b)| (*c, *t, &id[..], *b))
        .collect();
    let before = s.counters();
    let started = Instant::now();
    let (mut done, mut commands) = (0u64, 0u64);
    while done < length {
        let n = (length - done).min(BYTES_PER_COMMAND);
        let first = done / bs;
        let copies: Vec<BlockCopy> = (0..n / bs)
            .step_by(SEGMENT_BLOCKS as usize)
            .map(|i| BlockCopy {
                source: 0,
                destination: 1,
                blocks: (n / bs - i).min(SEGMENT_BLOCKS) as u16,
                source_lba: first + i,
                destination_lba: first + i,
            })
            .collect();
        // LIST ID USAGE 11b: no status is held, so the identifier need not be unique.
        let list = cdb::copy_list(0, false, &luns, &copies);
        let c = cdb::extended_copy(list.len() as u32);
        s.execute_good(Command::write(src_lun, &c, Bytes::from(list)))
            .await
            .with_context(|| format!("EXTENDED COPY of bytes {done}..{}", done + n))?;
        done += n;
        commands += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    let after = s.counters();
    s.logout().await.ok();
    Ok(XcopyJson {
        bytes: length,
        commands,
        seconds,
        mib_per_second: length as f64 / (1 << 20) as f64 / seconds.max(1e-9),
        session_bytes_sent: after.bytes_sent - before.bytes_sent,
        session_bytes_received: after.bytes_received - before.bytes_received,
    })
}
