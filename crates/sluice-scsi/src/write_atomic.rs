//! WRITE ATOMIC(16) (SBC-4 5.48, 4.29).
//!
//! Offered only where the device writes all or nothing
//! ([`BlockDevice::atomic_writes`](sluice_storage::BlockDevice::atomic_writes)); elsewhere the
//! opcode is unsupported and the Block Limits VPD page's atomic fields are zero. The write
//! runs under the LU's exclusive I/O lock, so no other command sees part of it. Any alignment
//! and granularity are accepted (ATOMIC ALIGNMENT and ATOMIC TRANSFER LENGTH GRANULARITY 0),
//! up to MAXIMUM ATOMIC TRANSFER LENGTH (the MAXIMUM TRANSFER LENGTH). ATOMIC BOUNDARY is not
//! supported (MAXIMUM ATOMIC BOUNDARY SIZE 0), so that field is reserved.

use crate::field::{be16, be64};
use crate::lu::{Cmd, CmdResult};
use crate::rw::{byte_len, check_protect, check_range, fua, write_blocks, BlockCdb};

/// WRITE ATOMIC(16).
pub(crate) fn write_atomic(cmd: &mut Cmd<'_>) -> CmdResult {
    let lu = cmd.lu;
    let b = BlockCdb {
        lba: be64(cmd.cdb, 2),
        blocks: u64::from(be16(cmd.cdb, 12)),
        len_byte: 12,
        has_flags: true,
    };
    check_protect(cmd.cdb, &b)?;
    lu.writable()?;
    check_range(lu, b.lba, b.blocks)?;
    // Refuses more than MAXIMUM TRANSFER LENGTH, which is the maximum atomic length.
    let len = byte_len(lu, &b)?;
    let fua = fua(cmd.cdb, &b) || !lu.write_cache_enabled();
    let data = cmd.data_out.contiguous(len);
    write_blocks(lu, b.lba, &[&data], fua)
}
