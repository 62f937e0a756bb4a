//! Logical block provisioning: UNMAP and GET LBA STATUS (SBC-4 4.7, 5.31, 5.7), and the
//! deallocation WRITE SAME and SANITIZE share.
//!
//! A thin LU ([`LuOptions::thin`](crate::LuOptions::thin)) hands deallocation to its device
//! ([`BlockDevice::discard`](sluice_storage::BlockDevice::discard)): deallocated blocks read
//! as zeros (LBPRZ=1) and GET LBA STATUS reports what the device says is mapped. A fully
//! provisioned LU has no UNMAP at all, and reports every block mapped.

use sluice_storage::Provisioning;

use crate::field::{be16, be32, be64, put_truncated, u8_at};
use crate::lu::{storage_sense, Cmd, CmdResult, LogicalUnit};
use crate::rw::{check_range, offset};
use crate::sense::{invalid_field_in_cdb, lba_out_of_range};
use crate::{unmap_list, AbortSignal};

/// Most LBA status descriptors one GET LBA STATUS returns, whatever its allocation length:
/// each may cost the backend a look (two `lseek` calls for a file), so the answer stays
/// small and quick. The initiator asks again from where the answer stopped (SBC-4 5.7).
pub(crate) const MAX_LBA_STATUS_DESCRIPTORS: usize = 512;

/// Largest piece handed to the device in one discard, so that a long deallocation notices
/// an abort between pieces: 1 GiB.
const DISCARD_PIECE_BYTES: u64 = 1 << 30;

/// UNMAP (SBC-4 5.31). Anchoring is not supported (ANC_SUP=0), so ANCHOR=1 is an invalid
/// field. Every range is checked before any is unmapped, so a list with one bad range
/// changes nothing.
pub(crate) fn unmap(cmd: &mut Cmd<'_>) -> CmdResult {
    if u8_at(cmd.cdb, 1) & 0x01 != 0 {
        return Err(invalid_field_in_cdb(1, Some(0)));
    }
    cmd.lu.writable()?;
    let param_len = usize::from(be16(cmd.cdb, 7));
    let data = cmd.data_out.contiguous(param_len);
    let ranges = unmap_list::parse(&data, param_len)?;
    for r in &ranges {
        check_range(cmd.lu, r.lba, u64::from(r.blocks))?;
    }
    for r in &ranges {
        deallocate(cmd.lu, r.lba, u64::from(r.blocks), cmd.abort)?;
    }
    // Below the soft threshold again: arm it.
    if let Some(t) = cmd.lu.threshold() {
        t.check(cmd.lu);
    }
    Ok(())
}

/// Deallocates `blocks` blocks from `lba` (in range) on a thin LU: whole deallocation units
/// are given back, the rest of the range is zeroed; it all reads zeros afterwards.
pub(crate) fn deallocate(
    lu: &LogicalUnit,
    lba: u64,
    blocks: u64,
    abort: Option<&AbortSignal>,
) -> CmdResult {
    let mut at = offset(lu, lba);
    let end = at + blocks.saturating_mul(u64::from(lu.block_size()));
    while at < end {
        if abort.is_some_and(AbortSignal::is_aborted) {
            return Err(crate::abort::aborted());
        }
        let n = (end - at).min(DISCARD_PIECE_BYTES);
        lu.device()
            .discard(at, n)
            .map_err(|e| storage_sense(&e, true))?;
        at += n;
    }
    Ok(())
}

/// GET LBA STATUS (SBC-4 5.7): descriptors of consecutive runs of mapped or deallocated
/// blocks, the first starting at the STARTING LOGICAL BLOCK ADDRESS, as many as the
/// allocation length holds (at least one, at most [`MAX_LBA_STATUS_DESCRIPTORS`]). A
/// starting LBA at or past the end is LBA OUT OF RANGE, compared in blocks (no byte offset is
/// computed that could wrap).
pub(crate) fn get_lba_status(cmd: &mut Cmd<'_>) -> CmdResult {
    let lu = cmd.lu;
    let start = be64(cmd.cdb, 2);
    let alloc = be32(cmd.cdb, 10) as usize;
    let n = lu.num_blocks();
    if start >= n {
        return Err(lba_out_of_range());
    }
    let wanted = (alloc.saturating_sub(8) / 16).clamp(1, MAX_LBA_STATUS_DESCRIPTORS);
    let mut d = vec![0u8; 8];
    let mut at = start;
    let mut count = 0;
    while at < n && count < wanted {
        let (state, blocks) = run_at(lu, at, n)?;
        let blocks = blocks.min(u64::from(u32::MAX));
        d.extend_from_slice(&at.to_be_bytes());
        // At most u32::MAX, checked above.
        d.extend_from_slice(&(blocks as u32).to_be_bytes());
        d.push(match state {
            Provisioning::Mapped => 0x00,
            Provisioning::Deallocated => 0x01,
        });
        d.extend_from_slice(&[0, 0, 0]);
        at += blocks;
        count += 1;
    }
    // PARAMETER DATA LENGTH: the bytes after the field itself. Bounded by the descriptor
    // limit, so it fits.
    let len = (d.len() - 4) as u32;
    d[0..4].copy_from_slice(&len.to_be_bytes());
    put_truncated(cmd.data_in, &d, alloc);
    Ok(())
}

/// The provisioning state of block `at` (below `n`) and how many blocks from it share it.
fn run_at(lu: &LogicalUnit, at: u64, n: u64) -> Result<(Provisioning, u64), crate::SenseData> {
    if !lu.thin() {
        return Ok((Provisioning::Mapped, n - at));
    }
    let bs = u64::from(lu.block_size());
    let e = lu
        .device()
        .provisioning(at * bs, (n - at) * bs)
        .map_err(|e| storage_sense(&e, false))?;
    // A run shorter than a block (a backend that allocates in smaller units than the LU's
    // blocks): part of the block holds data, so the block is mapped.
    match e.len / bs {
        0 => Ok((Provisioning::Mapped, 1)),
        blocks => Ok((e.state, blocks)),
    }
}

#[cfg(test)]
#[path = "provisioning_tests.rs"]
mod tests;
