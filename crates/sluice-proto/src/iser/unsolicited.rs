//! Which part of a write travels in Sends over iSER (RFC 7145 section 7.3.4): the immediate
//! data in the SCSI Command's Send and, when the command's F bit is clear, unsolicited
//! Data-Out PDUs in Sends of their own, together min(FirstBurstLength, EDTL) bytes
//! (RFC 7143 sections 11.3.1 and 13.14; sluice's target refuses any other amount, section
//! 11.4.7.2). Only the rest is solicited, and the target fetches it with RDMA Reads from the
//! buffer the command's iSER header advertised (WSV), whose Write Base Offset addresses the
//! first solicited byte: the byte at buffer offset `unsolicited_len` of the command (section
//! 9.2, as Linux's iser initiator and isert target use it).

use crate::pdu::ScsiCommand;

/// Bytes of `cmd`'s data that travel in Sends under the negotiated `first_burst`
/// (FirstBurstLength): the immediate data when the F bit says no unsolicited Data-Out
/// follows, else min(FirstBurstLength, EDTL) (never less than the immediate data). 0 for a
/// command that writes nothing.
pub fn unsolicited_len(cmd: &ScsiCommand, first_burst: u32) -> u32 {
    if !cmd.write {
        return 0;
    }
    let edtl = cmd.expected_data_transfer_length;
    let immediate = u32::try_from(cmd.data.len()).unwrap_or(u32::MAX);
    if cmd.final_bit {
        immediate.min(edtl)
    } else {
        first_burst.min(edtl).max(immediate.min(edtl))
    }
}

/// The address of buffer offset `offset` of a write whose first `unsolicited` bytes
/// travelled in Sends, in a write buffer advertised at `base` (the first solicited byte):
/// `None` when the offset lies in the unsolicited part or the address wraps.
pub fn solicited_address(base: u64, unsolicited: u32, offset: u32) -> Option<u64> {
    let into = offset.checked_sub(unsolicited)?;
    base.checked_add(u64::from(into))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::pdu::{Cdb, TaskAttr};
    use crate::seq::{Itt, Lun, SeqNum};

    fn write(edtl: u32, immediate: usize, final_bit: bool) -> ScsiCommand {
        ScsiCommand {
            immediate: false,
            final_bit,
            read: false,
            write: true,
            attr: TaskAttr::Simple,
            lun: Lun(0),
            itt: Itt(1),
            expected_data_transfer_length: edtl,
            cmd_sn: SeqNum::new(1),
            exp_stat_sn: SeqNum::new(1),
            cdb: Cdb::new(&[0x8a; 16]),
            bidi_read_length: None,
            data: Bytes::from(vec![0; immediate]),
        }
    }

    #[test]
    fn with_the_f_bit_only_the_immediate_data_is_unsolicited() {
        // InitialR2T=Yes: whatever the first burst, the rest is solicited.
        assert_eq!(unsolicited_len(&write(1 << 20, 8192, true), 65536), 8192);
        assert_eq!(unsolicited_len(&write(1 << 20, 0, true), 65536), 0);
    }

    #[test]
    fn without_it_the_first_burst_is() {
        // InitialR2T=No: immediate data plus unsolicited Data-Out up to FirstBurstLength.
        assert_eq!(unsolicited_len(&write(1 << 20, 8192, false), 65536), 65536);
        assert_eq!(unsolicited_len(&write(1 << 20, 0, false), 65536), 65536);
        // A write shorter than the first burst is all unsolicited.
        assert_eq!(unsolicited_len(&write(4096, 0, false), 65536), 4096);
        // Immediate data never counts for less than it is, nor beyond the EDTL.
        assert_eq!(unsolicited_len(&write(4096, 8192, true), 65536), 4096);
        assert_eq!(unsolicited_len(&write(1 << 20, 16384, false), 8192), 16384);
    }

    #[test]
    fn reads_have_nothing_unsolicited() {
        let mut read = write(4096, 0, false);
        read.write = false;
        read.read = true;
        assert_eq!(unsolicited_len(&read, 65536), 0);
    }

    #[test]
    fn the_write_base_offset_addresses_the_first_solicited_byte() {
        assert_eq!(solicited_address(0x1000, 65536, 65536), Some(0x1000));
        assert_eq!(solicited_address(0x1000, 65536, 65536 + 512), Some(0x1200));
        assert_eq!(solicited_address(0x1000, 65536, 4096), None);
        assert_eq!(solicited_address(u64::MAX, 0, 1), None);
    }
}
