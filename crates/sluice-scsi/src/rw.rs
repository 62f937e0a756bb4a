//! READ and WRITE (6/10/12/16), plus the block-addressing helpers every medium-access
//! command shares (SBC-3 5.8–5.11, 5.30–5.33).
//!
//! Range checks are done in blocks and cannot overflow: a command is in range iff
//! `lba <= N && blocks <= N - lba` (so `lba == N` with 0 blocks is fine, SBC-3 4.5).

use crate::field::{be16, be32, be64, u8_at};
use crate::lu::{storage_sense, Cmd, CmdResult, LogicalUnit};
use crate::sense::{invalid_field_in_cdb, lba_out_of_range, SenseData};
use crate::MAX_TRANSFER_BYTES;

/// The addressing fields of a block command.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) struct BlockCdb {
    /// First logical block.
    pub(crate) lba: u64,
    /// Number of blocks (READ(6)/WRITE(6) 0 already turned into 256).
    pub(crate) blocks: u64,
    /// CDB byte of the transfer length field, for field pointers.
    pub(crate) len_byte: u16,
    /// Whether byte 1 carries the RDPROTECT/WRPROTECT/DPO/FUA flags (not in 6-byte CDBs).
    pub(crate) has_flags: bool,
}

/// Decodes the LBA and length of a block command from its CDB size group.
pub(crate) fn decode(cdb: &[u8]) -> Option<BlockCdb> {
    let op = u8_at(cdb, 0);
    let b = match op >> 5 {
        0 => {
            let lba = u64::from(u8_at(cdb, 1) & 0x1F) << 16 | u64::from(be16(cdb, 2));
            let n = u64::from(u8_at(cdb, 4));
            BlockCdb {
                lba,
                blocks: if n == 0 { 256 } else { n },
                len_byte: 4,
                has_flags: false,
            }
        }
        1 | 2 => BlockCdb {
            lba: u64::from(be32(cdb, 2)),
            blocks: u64::from(be16(cdb, 7)),
            len_byte: 7,
            has_flags: true,
        },
        4 => BlockCdb {
            lba: be64(cdb, 2),
            blocks: u64::from(be32(cdb, 10)),
            len_byte: 10,
            has_flags: true,
        },
        5 => BlockCdb {
            lba: u64::from(be32(cdb, 2)),
            blocks: u64::from(be32(cdb, 6)),
            len_byte: 6,
            has_flags: true,
        },
        _ => return None,
    };
    Some(b)
}

/// Transfer length in blocks of READ/WRITE/VERIFY/WRITE AND VERIFY CDBs, for
/// [`ScsiTarget::transfer`](crate::ScsiTarget::transfer).
pub(crate) fn transfer_blocks(cdb: &[u8]) -> Option<u64> {
    decode(cdb).map(|b| b.blocks)
}

/// LBA OUT OF RANGE unless `blocks` blocks from `lba` lie inside the LU.
pub(crate) fn check_range(lu: &LogicalUnit, lba: u64, blocks: u64) -> Result<(), SenseData> {
    let n = lu.num_blocks();
    if lba > n || blocks > n - lba {
        return Err(lba_out_of_range());
    }
    Ok(())
}

/// INVALID FIELD IN CDB for a non-zero RDPROTECT/WRPROTECT/VRPROTECT: the LU has no
/// protection information (PROTECT=0).
pub(crate) fn check_protect(cdb: &[u8], b: &BlockCdb) -> Result<(), SenseData> {
    if b.has_flags && u8_at(cdb, 1) & 0xE0 != 0 {
        return Err(invalid_field_in_cdb(1, Some(7)));
    }
    Ok(())
}

/// The byte length of `b`, refusing transfers above [`MAX_TRANSFER_BYTES`].
pub(crate) fn byte_len(lu: &LogicalUnit, b: &BlockCdb) -> Result<usize, SenseData> {
    let bytes = b.blocks.saturating_mul(u64::from(lu.block_size()));
    if bytes > MAX_TRANSFER_BYTES {
        return Err(invalid_field_in_cdb(b.len_byte, Some(7)));
    }
    // Bounded by MAX_TRANSFER_BYTES (32 MiB), so it fits in usize.
    Ok(bytes as usize)
}

/// Byte offset of `lba` (in range, so no overflow for a device whose size fits in u64).
pub(crate) fn offset(lu: &LogicalUnit, lba: u64) -> u64 {
    lba.saturating_mul(u64::from(lu.block_size()))
}

/// Whether the FUA bit is set.
pub(crate) fn fua(cdb: &[u8], b: &BlockCdb) -> bool {
    b.has_flags && u8_at(cdb, 1) & 0x08 != 0
}

/// What a READ(6/10/12/16) reads once its CDB passed the checks: the byte offset and length,
/// `None` for a transfer of 0 blocks.
#[inline]
pub(crate) fn read_extent(lu: &LogicalUnit, cdb: &[u8]) -> Result<Option<(u64, usize)>, SenseData> {
    let b = decode(cdb).ok_or_else(crate::sense::invalid_opcode)?;
    check_protect(cdb, &b)?;
    check_range(lu, b.lba, b.blocks)?;
    let len = byte_len(lu, &b)?;
    if len == 0 {
        return Ok(None);
    }
    Ok(Some((offset(lu, b.lba), len)))
}

/// READ(6/10/12/16).
pub(crate) fn read(cmd: &mut Cmd<'_>) -> CmdResult {
    let Some((at, len)) = read_extent(cmd.lu, cmd.cdb)? else {
        return Ok(());
    };
    let device = cmd.lu.device();
    // Zero copy when the backend can (mapped tmpfs file); otherwise read straight into the
    // Data-In buffer's spare room (no zero-fill first).
    if let Some(r) = device.read_shared(at, len) {
        *cmd.shared_in = Some(r.map_err(|e| storage_sense(&e, false))?);
        return Ok(());
    }
    device
        .read_append(at, len, cmd.data_in)
        .map_err(|e| storage_sense(&e, false))
}

/// WRITE(6/10/12/16). Writes only the whole blocks present in the Data-Out; with FUA, or
/// with the write cache disabled (WCE=0), the write is durable before GOOD.
pub(crate) fn write(cmd: &mut Cmd<'_>) -> CmdResult {
    let w = write_extent(cmd.lu, cmd.cdb)?;
    write_blocks(cmd.lu, w.lba, &cmd.data_out.slices(w.len), w.fua)
}

/// What a WRITE(6/10/12/16) may write once its CDB passed the checks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WriteExtent {
    /// First logical block.
    pub(crate) lba: u64,
    /// The CDB's transfer length in bytes (the Data-Out may bring less).
    pub(crate) len: usize,
    /// Durable before GOOD: FUA, or the write cache disabled (WCE=0).
    pub(crate) fua: bool,
}

/// The checks of WRITE(6/10/12/16) (protection field, write protection, range, transfer
/// length) and what it writes.
#[inline]
pub(crate) fn write_extent(lu: &LogicalUnit, cdb: &[u8]) -> Result<WriteExtent, SenseData> {
    let b = decode(cdb).ok_or_else(crate::sense::invalid_opcode)?;
    check_protect(cdb, &b)?;
    lu.writable()?;
    check_range(lu, b.lba, b.blocks)?;
    let len = byte_len(lu, &b)?;
    let fua = fua(cdb, &b) || !lu.write_cache_enabled();
    Ok(WriteExtent {
        lba: b.lba,
        len,
        fua,
    })
}

/// ORWRITE(16) (SBC-3 5.8), without a BMOP field: every whole block of the Data-Out is
/// ORed into the blocks on the medium. The read, OR and write run under the LU's exclusive
/// I/O lock (taken by the dispatcher), so no other block command sees or interleaves with a
/// half-done ORWRITE. DPO is accepted and ignored; FUA (or WCE=0) makes the write durable
/// before GOOD.
pub(crate) fn orwrite(cmd: &mut Cmd<'_>) -> CmdResult {
    let b = decode(cmd.cdb).ok_or_else(crate::sense::invalid_opcode)?;
    check_protect(cmd.cdb, &b)?;
    cmd.lu.writable()?;
    check_range(cmd.lu, b.lba, b.blocks)?;
    let len = byte_len(cmd.lu, &b)?;
    let fua = fua(cmd.cdb, &b) || !cmd.lu.write_cache_enabled();
    let bs = cmd.lu.block_size().max(1) as usize;
    let data = cmd.data_out.contiguous(len);
    let data = &data[..data.len() / bs * bs];
    if data.is_empty() {
        return Ok(());
    }
    let mut merged = vec![0u8; data.len()];
    let at = offset(cmd.lu, b.lba);
    cmd.lu
        .device()
        .read_at(at, &mut merged)
        .map_err(|e| storage_sense(&e, false))?;
    for (m, d) in merged.iter_mut().zip(data) {
        *m |= *d;
    }
    write_blocks(cmd.lu, b.lba, &[&merged], fua)
}

/// Writes the whole blocks of `data` at `lba`.
/// Writes the whole blocks at the start of `data` (back-to-back slices) from `lba`.
pub(crate) fn write_blocks(lu: &LogicalUnit, lba: u64, data: &[&[u8]], fua: bool) -> CmdResult {
    let bs = lu.block_size().max(1) as usize;
    let total: usize = data.iter().map(|s| s.len()).sum();
    let n = total / bs * bs;
    if n == 0 {
        return Ok(());
    }
    let at = offset(lu, lba);
    let result = match data {
        [one] => lu.device().write_at(at, &one[..n], fua),
        _ if n == total => lu.device().write_vectored_at(at, data, fua),
        _ => {
            // A partial last block is not written: cut the slices at `n`.
            let mut left = n;
            let cut: Vec<&[u8]> = data
                .iter()
                .map(|s| {
                    let take = left.min(s.len());
                    left -= take;
                    &s[..take]
                })
                .filter(|s| !s.is_empty())
                .collect();
            lu.device().write_vectored_at(at, &cut, fua)
        }
    };
    result.map_err(|e| storage_sense(&e, true))?;
    lu.wrote(n as u64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use crate::cdb;
    use crate::testutil::*;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn write_then_read_every_size() {
        for bs in [512u32, 4096] {
            let t = Harness::new(bs, 64);
            let bsz = bs as usize;
            let data = pattern(3 * bsz, 1);
            t.ok(&cdb::write10(5, 3, false), &data);
            assert_eq!(t.ok(&cdb::read10(5, 3, false), &[]), data);
            assert_eq!(t.ok(&cdb::read16(5, 3, false), &[]), data);
            assert_eq!(t.ok(&[0xA8, 0, 0, 0, 0, 5, 0, 0, 0, 3, 0, 0], &[]), data);
            assert_eq!(t.ok(&[0x08, 0, 0, 5, 3, 0], &[]), data);
            let data2 = pattern(2 * bsz, 9);
            t.ok(&cdb::write16(62, 2, true), &data2);
            t.ok(&[0xAA, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0], &data2);
            t.ok(&[0x0A, 0, 0, 10, 2, 0], &data2);
            assert_eq!(t.ok(&cdb::read10(62, 2, false), &[]), data2);
            assert_eq!(t.ok(&cdb::read10(10, 2, false), &[]), data2);
            assert_eq!(t.ok(&cdb::read10(0, 2, false), &[]), data2);
        }
    }

    #[test]
    fn read6_zero_means_256_blocks() {
        let t = Harness::new(512, 300);
        assert_eq!(t.ok(&[0x08, 0, 0, 0, 0, 0], &[]).len(), 256 * 512);
        let s = t.check(&[0x08, 0, 0, 45, 0, 0], &[]);
        assert_illegal(&s, 0x21, 0);
    }

    #[test]
    fn zero_blocks_is_not_an_error_but_lba_is_checked() {
        let t = Harness::new(512, 100);
        assert!(t.ok(&cdb::read10(0, 0, false), &[]).is_empty());
        t.ok(&cdb::write10(100, 0, false), &[]);
        for lba in [101u64, 1 << 31, u64::from(u32::MAX)] {
            assert_illegal(&t.check(&cdb::read10(lba as u32, 0, false), &[]), 0x21, 0);
            assert_illegal(&t.check(&cdb::write10(lba as u32, 0, false), &[]), 0x21, 0);
        }
        for lba in [101u64, 1 << 63, u64::MAX] {
            assert_illegal(&t.check(&cdb::read16(lba, 0, false), &[]), 0x21, 0);
        }
    }

    #[test]
    fn beyond_end_of_lu_without_overflow() {
        let t = Harness::new(512, 100);
        for i in 1..=20u32 {
            let s = t.check(&cdb::read10(100 + 1 - i, (i + 1) as u16, false), &[]);
            assert_illegal(&s, 0x21, 0);
        }
        for lba in [1u64 << 63, 1 << 55, 1 << 54, u64::MAX] {
            for n in [1u32, 2, 256] {
                assert_illegal(&t.check(&cdb::read16(lba, n, false), &[]), 0x21, 0);
                let s = t.check(&cdb::write16(lba, n, false), &vec![0; 512 * n as usize]);
                assert_illegal(&s, 0x21, 0);
            }
        }
        t.ok(&cdb::read10(99, 1, false), &[]);
        assert_illegal(&t.check(&cdb::read10(99, 2, false), &[]), 0x21, 0);
    }

    #[test]
    fn protect_fields_are_rejected() {
        let t = Harness::new(512, 100);
        for p in 1..8u8 {
            let mut c = cdb::read10(0, 1, false);
            c[1] = p << 5;
            assert_ifc(&t.check(&c, &[]), true, 1, Some(7));
            let mut c = cdb::write16(0, 1, false);
            c[1] = p << 5;
            assert_ifc(&t.check(&c, &[0; 512]), true, 1, Some(7));
            let mut c = [0xAAu8, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0];
            c[1] = p << 5;
            assert_ifc(&t.check(&c, &[0; 512]), true, 1, Some(7));
        }
    }

    #[test]
    fn dpo_fua_accepted_and_fua_is_durable() {
        let t = Harness::new(512, 100);
        for flags in [0x10u8, 0x08, 0x18] {
            let mut c = cdb::read10(0, 1, false);
            c[1] = flags;
            t.ok(&c, &[]);
            let mut c = cdb::write10(0, 1, false);
            c[1] = flags;
            t.ok(&c, &[0; 512]);
        }
        assert_eq!(t.dev.fua_writes.load(Ordering::Relaxed), 2);
        t.ok(&cdb::write10(0, 1, false), &[0; 512]);
        assert_eq!(t.dev.fua_writes.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn short_data_out_writes_only_whole_blocks() {
        let t = Harness::new(512, 100);
        t.ok(&cdb::write10(0, 2, false), &[b'a'; 1024]);
        t.ok(&cdb::write10(0, 2, false), &[b'b'; 512]);
        let d = t.ok(&cdb::read10(0, 2, false), &[]);
        assert!(d[..512].iter().all(|b| *b == b'b'));
        assert!(d[512..].iter().all(|b| *b == b'a'));
        t.ok(&cdb::write10(0, 1, false), &[b'c'; 200]);
        t.ok(&cdb::write10(0, 1, false), &[b'd'; 2048]);
        let d = t.ok(&cdb::read10(0, 2, false), &[]);
        assert!(d[..512].iter().all(|b| *b == b'd'));
        assert!(d[512..].iter().all(|b| *b == b'a'));
    }

    #[test]
    fn segmented_data_out_writes_whole_blocks_in_order() {
        let t = Harness::new(512, 100);
        let data = pattern(3 * 512, 4);
        // Three PDU-sized pieces not on block boundaries, the last block incomplete.
        let segs: Vec<bytes::Bytes> = [&data[..700], &data[700..1100], &data[1100..1400]]
            .iter()
            .map(|s| bytes::Bytes::copy_from_slice(s))
            .collect();
        let mut din = bytes::BytesMut::new();
        let mut shared = None;
        let r = t.target.execute_shared(
            t.nexus,
            t.lun,
            &cdb::write10(4, 3, false),
            crate::DataOut::Segments(&segs),
            &mut din,
            &mut shared,
        );
        assert_eq!(r.status, crate::status::GOOD);
        let d = t.ok(&cdb::read10(4, 3, false), &[]);
        assert_eq!(&d[..1024], &data[..1024]);
        assert!(
            d[1024..].iter().all(|b| *b == 0),
            "the partial block is not written"
        );
    }

    #[test]
    fn read_only_lu_refuses_writes() {
        let t = Harness::read_only(512, 100);
        let s = t.check(&cdb::write10(0, 1, false), &[0; 512]);
        assert_eq!((s.key.0, s.asc, s.ascq), (7, 0x27, 0));
        t.ok(&cdb::read10(0, 1, false), &[]);
        let t = Harness::new(512, 100);
        t.dev.ro.store(true, Ordering::Relaxed);
        let s = t.check(&cdb::write16(0, 1, false), &[0; 512]);
        assert_eq!(s.key.0, 7);
    }

    #[test]
    fn orwrite_ors_into_the_medium() {
        for bs in [512u32, 4096] {
            let t = Harness::new(bs, 300);
            let b = bs as usize;
            for (lba, n) in [(0u64, 1u32), (0, 256), (300 - 7, 7), (299, 1)] {
                let len = n as usize * b;
                t.ok(&cdb::write16(lba, n, false), &vec![0; len]);
                t.ok(&cdb::orwrite16(lba, n, false), &vec![0xA5; len]);
                assert_eq!(t.ok(&cdb::read16(lba, n, false), &[]), vec![0xA5; len]);
                t.ok(&cdb::orwrite16(lba, n, false), &vec![0x5A; len]);
                assert_eq!(t.ok(&cdb::read16(lba, n, false), &[]), vec![0xFF; len]);
            }
            // A pattern: bytes that differ per position are ORed position by position.
            let old = pattern(2 * b, 3);
            let new = pattern(2 * b, 77);
            t.ok(&cdb::write16(9, 4, false), &vec![0; 4 * b]);
            t.ok(&cdb::write16(10, 2, false), &old);
            t.ok(&cdb::orwrite16(10, 2, false), &new);
            let want: Vec<u8> = old.iter().zip(&new).map(|(a, c)| a | c).collect();
            assert_eq!(t.ok(&cdb::read16(10, 2, false), &[]), want);
            // Neighbours are untouched.
            assert_eq!(t.ok(&cdb::read16(12, 1, false), &[]), vec![0; b]);
            assert_eq!(t.ok(&cdb::read16(9, 1, false), &[]), vec![0; b]);
        }
    }

    #[test]
    fn orwrite_ranges_zero_blocks_and_short_data() {
        let t = Harness::new(512, 100);
        t.ok(&cdb::orwrite16(0, 0, false), &[]);
        t.ok(&cdb::orwrite16(100, 0, false), &[]);
        for lba in [101u64, 1 << 63, u64::MAX] {
            for n in [0u32, 1, 256] {
                let s = t.check(&cdb::orwrite16(lba, n, false), &vec![0; 512 * n as usize]);
                assert_illegal(&s, 0x21, 0);
            }
        }
        for i in 2..=20u32 {
            let s = t.check(&cdb::orwrite16(99, i, false), &vec![1; 512 * i as usize]);
            assert_illegal(&s, 0x21, 0);
        }
        assert_eq!(t.ok(&cdb::read10(99, 1, false), &[]), vec![0; 512]);
        // Only the whole blocks that arrived are merged.
        t.ok(&cdb::orwrite16(0, 2, false), &[0x11; 700]);
        let d = t.ok(&cdb::read10(0, 2, false), &[]);
        assert!(d[..512].iter().all(|b| *b == 0x11));
        assert!(d[512..].iter().all(|b| *b == 0));
    }

    #[test]
    fn orwrite_flags_protect_and_write_protect() {
        let t = Harness::new(512, 100);
        for p in 1..8u8 {
            let mut c = cdb::orwrite16(0, 1, false);
            c[1] = p << 5;
            assert_ifc(&t.check(&c, &[0; 512]), true, 1, Some(7));
        }
        for flags in [0x10u8, 0x08, 0x18, 0x02] {
            let mut c = cdb::orwrite16(0, 1, false);
            c[1] = flags;
            t.ok(&c, &[0; 512]);
        }
        assert_eq!(t.dev.fua_writes.load(Ordering::Relaxed), 2);
        let mut c = cdb::orwrite16(0, 1, false);
        c[14] = 0x1F; // GROUP NUMBER
        t.ok(&c, &[0; 512]);
        c[14] = 0x20;
        assert_ifc(&t.check(&c, &[0; 512]), true, 14, Some(5));
        let t = Harness::read_only(512, 100);
        let s = t.check(&cdb::orwrite16(0, 1, false), &[0xFF; 512]);
        assert_eq!((s.key.0, s.asc, s.ascq), (7, 0x27, 0));
        assert_eq!(t.ok(&cdb::read10(0, 1, false), &[]), vec![0; 512]);
        let t = Harness::new(512, 100);
        t.dev.fail.store(true, Ordering::Relaxed);
        let s = t.check(&cdb::orwrite16(0, 1, false), &[1; 512]);
        assert_eq!((s.key.0, s.asc), (3, 0x11));
    }

    #[test]
    fn orwrite_is_atomic_under_concurrent_threads() {
        // Eight nexuses each OR their own bit into the same blocks at once. Any read-modify-write
        // that interleaved with another would lose a bit.
        let t = Harness::new(512, 64);
        for round in 0..40u64 {
            let lba = round % 8;
            t.ok(&cdb::write16(lba, 4, false), &[0; 2048]);
            std::thread::scope(|s| {
                for bit in 0..8u8 {
                    let h = t.nexus(100 + u64::from(bit));
                    s.spawn(move || {
                        let _ = h.run(&[0; 6], &[]); // consume the power-on unit attention
                        for _ in 0..4 {
                            h.ok(&cdb::orwrite16(lba, 4, false), &[1 << bit; 2048]);
                        }
                    });
                }
            });
            assert_eq!(t.ok(&cdb::read16(lba, 4, false), &[]), vec![0xFF; 2048]);
            for bit in 0..8u64 {
                t.target.nexus_gone(100 + bit);
            }
        }
    }

    #[test]
    fn io_errors_become_medium_errors() {
        let t = Harness::new(512, 100);
        t.dev.fail.store(true, Ordering::Relaxed);
        let s = t.check(&cdb::read10(0, 1, false), &[]);
        assert_eq!((s.key.0, s.asc), (3, 0x11));
        let s = t.check(&cdb::write10(0, 1, false), &[0; 512]);
        assert_eq!((s.key.0, s.asc), (3, 0x0C));
    }
}
