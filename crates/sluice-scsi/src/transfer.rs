//! What the commands of thin provisioning, COMPARE AND WRITE, EXTENDED COPY, SANITIZE,
//! reservations and target port groups move, judged from the CDB alone (for
//! [`ScsiTarget::transfer`](crate::ScsiTarget::transfer)), and which commands may run long.

use crate::cdb::opcode as oc;
use crate::field::{be16, be32, u8_at};
use crate::Transfer;

/// The allocation length of a command that returns data: GET LBA STATUS and RECEIVE COPY
/// RESULTS.
pub(crate) fn allocation_length(cdb: &[u8]) -> Option<u64> {
    match (u8_at(cdb, 0), u8_at(cdb, 1) & 0x1F) {
        (oc::SERVICE_ACTION_IN_16, oc::SAI_GET_LBA_STATUS) | (oc::RECEIVE_COPY_RESULTS, _) => {
            Some(u64::from(be32(cdb, 10)))
        }
        _ => None,
    }
}

/// The parameter list a command sends: UNMAP, EXTENDED COPY, SANITIZE, PERSISTENT RESERVE
/// OUT, MAINTENANCE OUT (SET TARGET PORT GROUPS) and RESERVE(10) (whose third-party list is
/// refused, but its data arrives).
pub(crate) fn parameter_list(cdb: &[u8]) -> Option<Transfer> {
    let n = match u8_at(cdb, 0) {
        oc::UNMAP | oc::SANITIZE | oc::RESERVE_10 => u64::from(be16(cdb, 7)),
        oc::EXTENDED_COPY => u64::from(be32(cdb, 10)),
        oc::PERSISTENT_RESERVE_OUT => u64::from(be32(cdb, 5)),
        oc::MAINTENANCE_OUT => u64::from(be32(cdb, 6)),
        _ => return None,
    };
    Some(if n == 0 {
        Transfer::None
    } else {
        Transfer::ToDevice(n)
    })
}

/// The Data-Out of COMPARE AND WRITE (twice NUMBER OF LOGICAL BLOCKS blocks), WRITE SAME (one
/// block, none with NDOB) and WRITE ATOMIC(16), for a LU of `block_size`-byte blocks.
pub(crate) fn block_data(cdb: &[u8], block_size: u64) -> Option<Transfer> {
    let bytes = match u8_at(cdb, 0) {
        oc::COMPARE_AND_WRITE => 2 * u64::from(u8_at(cdb, 13)) * block_size,
        oc::WRITE_SAME_10 => block_size,
        oc::WRITE_SAME_16 if u8_at(cdb, 1) & 0x01 != 0 => 0,
        oc::WRITE_SAME_16 => block_size,
        oc::WRITE_ATOMIC_16 => u64::from(be16(cdb, 12)) * block_size,
        _ => return None,
    };
    Some(if bytes == 0 {
        Transfer::None
    } else {
        Transfer::ToDevice(bytes)
    })
}

/// Whether the command may run for as long as its data takes rather than for one transfer:
/// EXTENDED COPY, WRITE SAME and UNMAP (over up to a whole LU), and SANITIZE (whose IMMED=0
/// form waits for the whole sanitize). A transport runs these where they block no other
/// command, gives them an [`AbortSignal`](crate::AbortSignal), and passes them to
/// [`ScsiTarget::execute_with`](crate::ScsiTarget::execute_with). One byte compared: nothing
/// for READ and WRITE to pay.
pub fn runs_long(cdb: &[u8]) -> bool {
    matches!(
        u8_at(cdb, 0),
        oc::EXTENDED_COPY | oc::WRITE_SAME_10 | oc::WRITE_SAME_16 | oc::UNMAP | oc::SANITIZE
    )
}
