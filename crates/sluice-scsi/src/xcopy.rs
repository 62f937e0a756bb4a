//! EXTENDED COPY (LID1, SPC-4 6.4): the copy manager.
//!
//! The LU an EXTENDED COPY is sent to copies, segment after segment, from one LU of this
//! target to another (or within itself), without the data passing through the initiator.
//! The CSCD descriptors name the LUs by a designator of their Device Identification VPD
//! page; the target resolves it among its own LUs ([`ScsiTarget::lu_named_by`]). Data moves a
//! mebibyte at a time: read under the source LU's shared I/O lock, written under the
//! destination's, so a copy never holds either lock for long and never holds both (COMPARE AND
//! WRITE on either LU waits for one piece, not for the copy). A block range of zeros copied to a
//! thin LU is deallocated rather than written, so copying a thin LU keeps it thin.
//!
//! The copy manager reads the source and writes the destination for the I_T nexus that sent
//! the EXTENDED COPY, through that nexus's target port: each piece passes, inside the I/O
//! lock hold it is read or written under, the checks a READ or a WRITE from that nexus would
//! pass on that LU (target port group state, sanitize, medium, reservations, write
//! protection). So a copy reaches no data its initiator could not read or write itself, and,
//! like a write of its own, no piece that passed a reservation check is still being written
//! when a PERSISTENT RESERVE OUT changes the reservations (see
//! [`LogicalUnit`](crate::LogicalUnit)). SPC-4's model has the copy manager reach a copy
//! source or destination as an initiator of its own, and a refusal there (RESERVATION
//! CONFLICT included) end the EXTENDED COPY with COPY ABORTED (SPC-4 6.4.5, "Errors detected
//! during processing of segment descriptors"); the LU the command is sent to checks the
//! command itself as the SPC-4 reservations table says (EXTENDED COPY: a write).
//!
//! Errors in the parameter list end the command with ILLEGAL REQUEST before anything is
//! copied; errors while processing a segment (an unknown LU, a range past its end, a
//! write-protected, ejected, reserved or inaccessible source or destination, an I/O error)
//! end it with COPY ABORTED, the segments before it done. The transport may abort a copy
//! ([`crate::AbortSignal`]); it stops after the piece in hand, and its status (if held) says
//! it completed with an error.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use crate::copy_list::{self, Cscd, Segment};
use crate::copy_results::{CopyGuard, CopyProgress};
use crate::field::be32;
use crate::lu::{Cmd, CmdResult, LogicalUnit};
use crate::pr::Failure;
use crate::sense::{copy_aborted, SenseData};

/// Bytes copied per piece (read, then written). A power of two, so any two block sizes
/// divide it.
const PIECE_BYTES: u64 = 1 << 20;

/// EXTENDED COPY (LID1).
pub(crate) fn extended_copy(cmd: &mut Cmd<'_>) -> CmdResult {
    let param_len = be32(cmd.cdb, 10) as usize;
    // Only the longest list the copy manager accepts is worth copying out of the Data-Out;
    // `parse` reports a longer one from its header.
    let data = cmd
        .data_out
        .contiguous(param_len.min(copy_list::MAX_LIST_BYTES));
    let Some(list) = copy_list::parse(&data, param_len)? else {
        return Ok(());
    };
    let guard = CopyGuard::begin(cmd.lu, cmd.nexus, list.list_id, list.usage)?;
    let mut resolved: Vec<Option<Arc<LogicalUnit>>> = vec![None; list.cscds.len()];
    for segment in &list.segments {
        copy_segment(cmd, &list.cscds, &mut resolved, segment, &guard.progress)?;
        guard.progress.segments.fetch_add(1, Ordering::Relaxed);
    }
    guard.succeeded();
    Ok(())
}

/// Resolves the CSCD at `index` to an LU of this target.
fn resolve(
    cmd: &Cmd<'_>,
    cscds: &[Cscd],
    resolved: &mut [Option<Arc<LogicalUnit>>],
    index: u16,
) -> Result<Arc<LogicalUnit>, SenseData> {
    let i = usize::from(index);
    let (Some(cscd), Some(slot)) = (cscds.get(i), resolved.get_mut(i)) else {
        return Err(copy_aborted(0x08, 0x04)); // UNREACHABLE COPY TARGET
    };
    if let Some(lu) = slot {
        return Ok(Arc::clone(lu));
    }
    let lu = (cscd.association == 0)
        .then(|| {
            cmd.target
                .lu_named_by(cscd.code_set, cscd.designator_type, &cscd.designator)
        })
        .flatten()
        .ok_or_else(|| copy_aborted(0x08, 0x04))?;
    if cscd.block_len != lu.block_size() {
        // The initiator's idea of the block size is wrong: its LBAs would be too.
        return Err(copy_aborted(0x26, 0x00));
    }
    *slot = Some(Arc::clone(&lu));
    Ok(lu)
}

fn copy_segment(
    cmd: &Cmd<'_>,
    cscds: &[Cscd],
    resolved: &mut [Option<Arc<LogicalUnit>>],
    seg: &Segment,
    progress: &CopyProgress,
) -> CmdResult {
    let src = resolve(cmd, cscds, resolved, seg.source)?;
    let dst = resolve(cmd, cscds, resolved, seg.destination)?;
    let (src_bs, dst_bs) = (u64::from(src.block_size()), u64::from(dst.block_size()));
    let unit = if seg.destination_count {
        dst_bs
    } else {
        src_bs
    };
    let bytes = u64::from(seg.blocks) * unit;
    if !bytes.is_multiple_of(src_bs) || !bytes.is_multiple_of(dst_bs) {
        // A residue would need the CAT bit's handling of partial blocks, which block devices
        // of different block sizes cannot express.
        return Err(copy_aborted(0x26, 0x00));
    }
    if bytes == 0 {
        return Ok(());
    }
    let in_range = |lu: &LogicalUnit, lba: u64, blocks: u64| {
        let n = lu.num_blocks();
        lba <= n && blocks <= n - lba
    };
    if !in_range(&src, seg.source_lba, bytes / src_bs) {
        return Err(copy_aborted(0x0D, 0x03)); // COPY TARGET DEVICE DATA UNDERRUN
    }
    if !in_range(&dst, seg.destination_lba, bytes / dst_bs) {
        return Err(copy_aborted(0x0D, 0x02)); // COPY TARGET DEVICE DATA OVERRUN
    }
    let src_at = seg.source_lba * src_bs;
    let dst_at = seg.destination_lba * dst_bs;
    // Within one LU, a destination that starts inside the source is copied back to front,
    // so that no piece is read after it was overwritten.
    let backwards =
        Arc::ptr_eq(&src, &dst) && dst_at > src_at && dst_at < src_at.saturating_add(bytes);
    let fua = !dst.write_cache_enabled();
    let mut buf = Vec::new();
    let mut done = 0;
    while done < bytes {
        if cmd.aborted() {
            return Err(crate::abort::aborted());
        }
        let n = (bytes - done).min(PIECE_BYTES);
        let at = if backwards { bytes - done - n } else { done };
        let data = read_piece(cmd, &src, src_at + at, n, &mut buf)?;
        write_piece(cmd, &dst, dst_at + at, &data, fua && done + n == bytes)?;
        progress.bytes.fetch_add(n, Ordering::Relaxed);
        done += n;
    }
    Ok(())
}

/// What a piece was read into: the backend's own bytes, or the copy's buffer.
enum Piece<'a> {
    Shared(Bytes),
    Buffer(&'a [u8]),
}

impl std::ops::Deref for Piece<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Piece::Shared(b) => b,
            Piece::Buffer(b) => b,
        }
    }
}

fn read_piece<'b>(
    cmd: &Cmd<'_>,
    src: &LogicalUnit,
    at: u64,
    len: u64,
    buf: &'b mut Vec<u8>,
) -> Result<Piece<'b>, SenseData> {
    let _io = src.io_shared();
    src.admit_copy(cmd.nexus, cmd.fabric, false)
        .map_err(refused)?;
    // At most PIECE_BYTES.
    let len = len as usize;
    if let Some(r) = src.device().read_shared(at, len) {
        return r
            .map(Piece::Shared)
            .map_err(|e| as_copy_aborted(crate::lu::storage_sense(&e, false)));
    }
    buf.resize(len, 0);
    src.device()
        .read_at(at, buf)
        .map_err(|e| as_copy_aborted(crate::lu::storage_sense(&e, false)))?;
    Ok(Piece::Buffer(buf))
}

fn write_piece(cmd: &Cmd<'_>, dst: &LogicalUnit, at: u64, data: &[u8], fua: bool) -> CmdResult {
    let _io = dst.io_shared();
    dst.admit_copy(cmd.nexus, cmd.fabric, true)
        .map_err(refused)?;
    let result = if dst.thin() && data.iter().all(|&b| b == 0) {
        dst.device().discard(at, data.len() as u64).and_then(|()| {
            if fua {
                dst.device().flush()
            } else {
                Ok(())
            }
        })
    } else {
        dst.device().write_at(at, data, fua)
    };
    result.map_err(|e| as_copy_aborted(crate::lu::storage_sense(&e, true)))?;
    dst.wrote(data.len() as u64);
    Ok(())
}

/// The sense a copy source or destination gave, reported as COPY ABORTED with its
/// additional sense code.
fn as_copy_aborted(s: SenseData) -> SenseData {
    copy_aborted(s.asc, s.ascq)
}

/// Why a copy source or destination refused the copy manager, as COPY ABORTED: with the
/// additional sense code of the sense it gave, or, for RESERVATION CONFLICT (a status without
/// sense), COPY TARGET DEVICE NOT REACHABLE (0Dh/02h): the LU cannot be reached for this I_T
/// nexus while the reservation stands.
fn refused(f: Failure) -> SenseData {
    match f {
        Failure::Check(s) => as_copy_aborted(s),
        Failure::Conflict => copy_aborted(0x0D, 0x02),
    }
}

#[cfg(test)]
#[path = "xcopy_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "xcopy_access_tests.rs"]
mod access_tests;
