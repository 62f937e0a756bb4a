//! READ CAPACITY(10) and READ CAPACITY(16) (SBC-3 5.15, 5.16).

use crate::field::{be32, be64, put_truncated, u8_at};
use crate::lu::{Cmd, CmdResult};
use crate::sense::invalid_field_in_cdb;

/// READ CAPACITY(10): last LBA (FFFFFFFFh when it does not fit) and block length.
pub(crate) fn read_capacity10(cmd: &mut Cmd<'_>) -> CmdResult {
    // SBC-3: with PMI=0 the (obsolete) LOGICAL BLOCK ADDRESS field must be zero.
    if u8_at(cmd.cdb, 8) & 0x01 == 0 && be32(cmd.cdb, 2) != 0 {
        return Err(invalid_field_in_cdb(2, Some(7)));
    }
    let last = cmd.lu.num_blocks().saturating_sub(1);
    let last = u32::try_from(last).unwrap_or(u32::MAX);
    let mut d = [0u8; 8];
    d[..4].copy_from_slice(&last.to_be_bytes());
    d[4..].copy_from_slice(&cmd.lu.block_size().to_be_bytes());
    cmd.data_in.extend_from_slice(&d);
    Ok(())
}

/// READ CAPACITY(16): 32 bytes, truncated to the allocation length (0 is not an error).
pub(crate) fn read_capacity16(cmd: &mut Cmd<'_>) -> CmdResult {
    if u8_at(cmd.cdb, 14) & 0x01 == 0 && be64(cmd.cdb, 2) != 0 {
        return Err(invalid_field_in_cdb(2, Some(7)));
    }
    let alloc = be32(cmd.cdb, 10) as usize;
    let mut d = [0u8; 32];
    d[..8].copy_from_slice(&cmd.lu.num_blocks().saturating_sub(1).to_be_bytes());
    d[8..12].copy_from_slice(&cmd.lu.block_size().to_be_bytes());
    // Byte 12: P_TYPE / PROT_EN = 0 (no protection information).
    // Byte 13: P_I_EXPONENT = 0; LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT: the device's
    // physical block (a file system block, a memory page) over the logical block.
    let per_physical = cmd.lu.device().physical_block_size() / cmd.lu.block_size().max(1);
    d[13] = (per_physical.max(1).trailing_zeros() as u8).min(0x0F);
    // Byte 14: LBPME and LBPRZ for a thin LU (deallocated blocks read zeros); LOWEST ALIGNED
    // LBA 0.
    if cmd.lu.thin() {
        d[14] = 0x80 | 0x40;
    }
    put_truncated(cmd.data_in, &d, alloc);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::cdb;
    use crate::field::{be32, be64};
    use crate::testutil::*;

    #[test]
    fn capacity10_and_16() {
        let t = Harness::new(4096, 1000);
        let d = t.ok(&cdb::read_capacity10(), &[]);
        assert_eq!((be32(&d, 0), be32(&d, 4)), (999, 4096));
        let d = t.ok(&cdb::read_capacity16(32), &[]);
        assert_eq!(d.len(), 32);
        assert_eq!(be64(&d, 0), 999);
        assert_eq!(be32(&d, 8), 4096);
        assert_eq!(d[12], 0, "no protection information");
        assert_eq!(
            d[13], 3,
            "the device's physical blocks are 8 logical blocks"
        );
        assert!(d[14..].iter().all(|b| *b == 0), "fully provisioned");
    }

    #[test]
    fn capacity16_allocation_lengths() {
        let t = Harness::new(512, 10);
        for n in 0..=40u32 {
            assert_eq!(
                t.ok(&cdb::read_capacity16(n), &[]).len(),
                n.min(32) as usize
            );
        }
    }

    #[test]
    fn lba_without_pmi_is_invalid() {
        let t = Harness::new(512, 10);
        let mut c = cdb::read_capacity10();
        c[5] = 1;
        assert_ifc(&t.check(&c, &[]), true, 2, Some(7));
        c[8] = 1;
        t.ok(&c, &[]);
    }

    #[test]
    fn huge_device_reports_ffffffff() {
        // A device claiming more blocks than READ CAPACITY(10) can express.
        #[derive(Debug)]
        struct Huge;
        impl sluice_storage::BlockDevice for Huge {
            fn block_size(&self) -> u32 {
                512
            }
            fn num_blocks(&self) -> u64 {
                1 << 33
            }
            fn blocks(&self) -> bool {
                false
            }
            fn read_at(&self, _: u64, b: &mut [u8]) -> Result<(), sluice_storage::StorageError> {
                b.fill(0);
                Ok(())
            }
            fn write_at(
                &self,
                _: u64,
                _: &[u8],
                _: bool,
            ) -> Result<(), sluice_storage::StorageError> {
                Ok(())
            }
            fn flush(&self) -> Result<(), sluice_storage::StorageError> {
                Ok(())
            }
        }
        let dev = std::sync::Arc::new(VecDevice::new(512, 1));
        let mut cfg = config(dev, false);
        cfg.device = std::sync::Arc::new(Huge);
        let lu = std::sync::Arc::new(crate::LogicalUnit::new(cfg));
        let target = crate::ScsiTarget::new(vec![(0, lu)]);
        let mut din = bytes::BytesMut::new();
        target.execute(1, 0, &[0; 6], &[], &mut din);
        let r = target.execute(1, 0, &cdb::read_capacity10(), &[], &mut din);
        assert!(r.is_good());
        assert_eq!(be32(&din, 0), u32::MAX);
        target.execute(1, 0, &cdb::read_capacity16(32), &[], &mut din);
        assert_eq!(be64(&din, 0), (1 << 33) - 1);
        // A READ(16) of 2^32-1 blocks is refused by the transfer limit, not allocated.
        let r = target.execute(1, 0, &cdb::read16(0, u32::MAX, false), &[], &mut din);
        assert_eq!(r.sense.unwrap().asc, 0x24);
        let r = target.execute(1, 0, &cdb::read16(0, 65536, false), &[], &mut din);
        assert!(r.is_good());
        assert_eq!(din.len(), 32 << 20);
        let r = target.execute(1, 0, &cdb::read16(0, 65537, false), &[], &mut din);
        assert_ifc(&r.sense.unwrap(), true, 10, Some(7));
    }
}
