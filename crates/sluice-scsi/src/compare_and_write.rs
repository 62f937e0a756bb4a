//! COMPARE AND WRITE (SBC-4 5.3).
//!
//! The Data-Out holds NUMBER OF LOGICAL BLOCKS blocks to compare with the medium, then as
//! many to write. The read, the comparison and the write run under the LU's exclusive I/O
//! lock (taken by the dispatcher), and every command that writes the medium holds that lock
//! at least shared, from whichever I_T nexus, connection or thread it comes: no write can
//! land between the comparison and the write, and no read sees half of it. On a mismatch
//! nothing is written and the command ends with MISCOMPARE / MISCOMPARE DURING VERIFY
//! OPERATION, the INFORMATION field holding the offset of the first byte that differs.
//! A backend whose store other clients share (an RBD image several gateways export) does the
//! comparison and the write as one operation of the store
//! (`BlockDevice::compare_and_write`), so that no other client's write lands in between.

use crate::field::u8_at;
use crate::lu::{storage_sense, Cmd, CmdResult};
use crate::rw::{check_protect, check_range, fua, offset, write_blocks, BlockCdb};
use crate::sense::{invalid_field_in_cdb, miscompare};

/// MAXIMUM COMPARE AND WRITE LENGTH (Block Limits VPD): the most blocks one COMPARE AND
/// WRITE may cover, which is every length its one-byte NUMBER OF LOGICAL BLOCKS field can
/// express. (0 in the VPD page would mean "not supported", and some initiators, libiscsi
/// among them, read it as 256, which the field cannot carry.) Even at 4 KiB blocks the
/// exclusive lock is held for one 1 MiB read, compare and write.
pub(crate) const MAX_BLOCKS: u8 = u8::MAX;

/// COMPARE AND WRITE.
pub(crate) fn compare_and_write(cmd: &mut Cmd<'_>) -> CmdResult {
    let lu = cmd.lu;
    let lba = crate::field::be64(cmd.cdb, 2);
    let nlb = u8_at(cmd.cdb, 13);
    let b = BlockCdb {
        lba,
        blocks: u64::from(nlb),
        len_byte: 13,
        has_flags: true,
    };
    check_protect(cmd.cdb, &b)?;
    lu.writable()?;
    check_range(lu, lba, b.blocks)?;
    let bs = lu.block_size().max(1) as usize;
    let half = usize::from(nlb) * bs;
    // The Data-Out must be exactly the two halves: a transfer of another length is an
    // initiator's mistake, and guessing which blocks it meant would write the wrong ones.
    if cmd.data_out_sent() != 2 * half as u64 || cmd.data_out.len() < 2 * half {
        return Err(invalid_field_in_cdb(13, Some(7)));
    }
    if nlb == 0 {
        return Ok(());
    }
    let data = cmd.data_out.contiguous(2 * half);
    let (expected, new) = data.split_at(half);
    let fua = fua(cmd.cdb, &b) || !lu.write_cache_enabled();
    // A store shared by several clients (RBD) compares and writes itself, atomically for
    // all of them; this LU's lock only keeps its own initiators apart.
    if let Some(done) = lu
        .device()
        .compare_and_write(offset(lu, lba), expected, new, fua)
    {
        return match done.map_err(|e| storage_sense(&e, true))? {
            None => {
                lu.wrote(half as u64);
                Ok(())
            }
            Some(at) => Err(miscompare(at)),
        };
    }
    let mut medium = vec![0u8; half];
    lu.device()
        .read_at(offset(lu, lba), &mut medium)
        .map_err(|e| storage_sense(&e, false))?;
    if let Some(at) = expected.iter().zip(&medium).position(|(e, m)| e != m) {
        return Err(miscompare(at as u64));
    }
    write_blocks(lu, lba, &[new], fua)
}

#[cfg(test)]
#[path = "compare_and_write_tests.rs"]
mod tests;
