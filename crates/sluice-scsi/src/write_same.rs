//! WRITE SAME(10) and WRITE SAME(16) (SBC-4 5.49, 5.50).
//!
//! One block of Data-Out (none with NDOB=1, which means a block of zeros) is written to every
//! block of the range. With UNMAP=1 on a thin LU the range is deallocated instead, whatever
//! the block holds: SBC-4 (table "ANCHOR bit, UNMAP bit, and ANC_SUP bit relationships") asks
//! a thin LU to deallocate each LBA, and the blocks then read zeros (LBPRZ=1), as initiators
//! that unmap through WRITE SAME expect. ANCHOR=1 is refused (ANC_SUP=0), and UNMAP=1 on a
//! fully provisioned LU too (LBPWS=LBPWS10=0), so what VPD B2h says and what the LU does
//! agree. A NUMBER OF LOGICAL BLOCKS of 0 means "to the
//! end of the LU" (WSNZ=0), within MAXIMUM WRITE SAME LENGTH.

use crate::field::{be16, be32, be64, u8_at};
use crate::lu::{storage_sense, Cmd, CmdResult, LogicalUnit};
use crate::provisioning::deallocate;
use crate::rw::{check_range, offset};
use crate::sense::{invalid_field_in_cdb, lba_out_of_range, param_list_length_error};

/// MAXIMUM WRITE SAME LENGTH, in bytes: one WRITE SAME writes (or deallocates) at most
/// 1 GiB, a few seconds even on a disk, well inside the 30 s command timeout initiators use
/// (and REPORT SUPPORTED OPERATION CODES recommends).
pub(crate) const MAX_WRITE_SAME_BYTES: u64 = 1 << 30;

/// Bytes of the pattern buffer written at a time (and between looks at an abort).
const PATTERN_PIECE_BYTES: usize = 1 << 20;

/// MAXIMUM WRITE SAME LENGTH in blocks of `block_size` bytes.
pub(crate) fn max_blocks(block_size: u32) -> u64 {
    MAX_WRITE_SAME_BYTES / u64::from(block_size.max(1))
}

/// WRITE SAME(10/16).
pub(crate) fn write_same(cmd: &mut Cmd<'_>) -> CmdResult {
    let lu = cmd.lu;
    let sixteen = u8_at(cmd.cdb, 0) == crate::cdb::opcode::WRITE_SAME_16;
    let flags = u8_at(cmd.cdb, 1);
    let (lba, nlb, len_byte) = if sixteen {
        (be64(cmd.cdb, 2), u64::from(be32(cmd.cdb, 10)), 10)
    } else {
        (u64::from(be32(cmd.cdb, 2)), u64::from(be16(cmd.cdb, 7)), 7)
    };
    if flags & 0xE0 != 0 {
        // WRPROTECT: the LU has no protection information.
        return Err(invalid_field_in_cdb(1, Some(7)));
    }
    let unmap = flags & 0x08 != 0;
    let ndob = sixteen && flags & 0x01 != 0;
    if flags & 0x10 != 0 {
        // ANCHOR: anchored blocks are not supported (ANC_SUP=0).
        return Err(invalid_field_in_cdb(1, Some(4)));
    }
    if unmap && !lu.thin() {
        return Err(invalid_field_in_cdb(1, Some(3)));
    }
    lu.writable()?;
    let bs = lu.block_size().max(1) as usize;
    // Exactly one block of Data-Out, or none with NDOB.
    let expected = if ndob { 0 } else { bs as u64 };
    if cmd.data_out_sent() != expected || (!ndob && cmd.data_out.len() < bs) {
        return Err(param_list_length_error());
    }
    let n = lu.num_blocks();
    let blocks = match nlb {
        0 if lba > n => return Err(lba_out_of_range()),
        0 => n - lba,
        _ => nlb,
    };
    check_range(lu, lba, blocks)?;
    if blocks > max_blocks(lu.block_size()) {
        return Err(invalid_field_in_cdb(len_byte, Some(7)));
    }
    let block = if ndob {
        vec![0u8; bs]
    } else {
        cmd.data_out.contiguous(bs).into_owned()
    };
    if unmap {
        return deallocate(lu, lba, blocks, cmd.abort);
    }
    let zeros = block.iter().all(|&b| b == 0);
    let fua = !lu.write_cache_enabled();
    if zeros && !lu.thin() {
        // A fully provisioned LU reports every block mapped whatever the device does, so it
        // may zero the cheap way (the memory device drops whole chunks).
        let len = blocks.saturating_mul(bs as u64);
        return lu
            .device()
            .write_zeroes(offset(lu, lba), len, fua)
            .map_err(|e| storage_sense(&e, true));
    }
    write_pattern(cmd, lu, lba, blocks, &block, fua)
}

/// Writes `block` to each of `blocks` blocks from `lba`, a piece at a time.
fn write_pattern(
    cmd: &Cmd<'_>,
    lu: &LogicalUnit,
    lba: u64,
    blocks: u64,
    block: &[u8],
    fua: bool,
) -> CmdResult {
    let bs = block.len() as u64;
    let per_piece = (PATTERN_PIECE_BYTES as u64 / bs).max(1);
    // At most PATTERN_PIECE_BYTES (or one block), so it fits in usize.
    let piece: Vec<u8> = block
        .iter()
        .copied()
        .cycle()
        .take((per_piece.min(blocks) * bs) as usize)
        .collect();
    let mut done = 0;
    while done < blocks {
        if cmd.aborted() {
            return Err(crate::abort::aborted());
        }
        let n = (blocks - done).min(per_piece);
        let last = done + n == blocks;
        // The piece is the block repeated: a backend that repeats a block itself (RBD's
        // write-same) sends one block, not the piece.
        lu.device()
            .write_repeated(
                offset(lu, lba + done),
                &piece[..(n * bs) as usize],
                bs as usize,
                fua && last,
            )
            .map_err(|e| storage_sense(&e, true))?;
        lu.wrote(n * bs);
        done += n;
    }
    Ok(())
}

#[cfg(test)]
#[path = "write_same_tests.rs"]
mod tests;
