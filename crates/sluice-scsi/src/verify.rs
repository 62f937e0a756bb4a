//! VERIFY (10/12/16) and WRITE AND VERIFY (10/12/16) (SBC-3 5.34–5.39).
//!
//! BYTCHK (byte 1 bits 2–1): 00b medium verification only, no Data-Out; 01b byte-by-byte
//! compare of the Data-Out with the medium; 11b (VERIFY only) one block of Data-Out compared
//! with every block in the range; 10b is reserved. A difference ends the command with
//! MISCOMPARE / MISCOMPARE DURING VERIFY OPERATION (1Dh/00h) and the INFORMATION field set to
//! the offset, in the Data-Out buffer, of the first byte that differs.

use crate::field::u8_at;
use crate::lu::{storage_sense, Cmd, CmdResult, LogicalUnit};
use crate::rw::{byte_len, check_protect, check_range, decode, offset, write_blocks};
use crate::sense::{
    invalid_field_in_cdb, invalid_opcode, param_list_length_error, SenseData, SenseKey,
};

/// Medium reads are done in pieces of this size.
const CHUNK_BYTES: usize = 1 << 20;

/// VERIFY(10/12/16).
pub(crate) fn verify(cmd: &mut Cmd<'_>) -> CmdResult {
    let b = decode(cmd.cdb).ok_or_else(invalid_opcode)?;
    check_protect(cmd.cdb, &b)?;
    let bytchk = (u8_at(cmd.cdb, 1) >> 1) & 0x03;
    if bytchk == 0b10 {
        return Err(invalid_field_in_cdb(1, Some(2)));
    }
    check_range(cmd.lu, b.lba, b.blocks)?;
    let bs = cmd.lu.block_size().max(1) as usize;
    match bytchk {
        0b00 => medium_verify(cmd.lu, b.lba, b.blocks),
        0b01 => {
            let len = byte_len(cmd.lu, &b)?;
            let data = cmd.data_out.contiguous(len);
            compare(cmd.lu, b.lba, &data[..data.len() / bs * bs])
        }
        _ => {
            if b.blocks == 0 {
                return Ok(());
            }
            let block = cmd.data_out.contiguous(bs);
            let Some(block) = block.get(..bs) else {
                return Err(param_list_length_error());
            };
            let mut buf = vec![0u8; bs];
            for i in 0..b.blocks {
                cmd.lu
                    .device()
                    .read_at(offset(cmd.lu, b.lba + i), &mut buf)
                    .map_err(|e| storage_sense(&e, false))?;
                if let Some(p) = first_difference(block, &buf) {
                    return Err(miscompare(p as u64));
                }
            }
            Ok(())
        }
    }
}

/// WRITE AND VERIFY(10/12/16): writes (durably), then reads back and compares.
pub(crate) fn write_and_verify(cmd: &mut Cmd<'_>) -> CmdResult {
    let b = decode(cmd.cdb).ok_or_else(invalid_opcode)?;
    check_protect(cmd.cdb, &b)?;
    if u8_at(cmd.cdb, 1) & 0x04 != 0 {
        return Err(invalid_field_in_cdb(1, Some(2)));
    }
    cmd.lu.writable()?;
    check_range(cmd.lu, b.lba, b.blocks)?;
    let len = byte_len(cmd.lu, &b)?;
    let bs = cmd.lu.block_size().max(1) as usize;
    let data = cmd.data_out.contiguous(len);
    let data = &data[..data.len() / bs * bs];
    write_blocks(cmd.lu, b.lba, &[data], true)?;
    compare(cmd.lu, b.lba, data)
}

/// Reads every block of the range, in pieces, to find unreadable ones.
fn medium_verify(lu: &LogicalUnit, lba: u64, blocks: u64) -> CmdResult {
    let bs = u64::from(lu.block_size().max(1));
    let per_chunk = (CHUNK_BYTES as u64 / bs).max(1);
    let mut buf = Vec::new();
    let mut done = 0;
    while done < blocks {
        let n = (blocks - done).min(per_chunk);
        buf.resize((n * bs) as usize, 0);
        lu.device()
            .read_at(offset(lu, lba + done), &mut buf)
            .map_err(|e| storage_sense(&e, false))?;
        done += n;
    }
    Ok(())
}

/// Compares `data` with the medium from `lba`.
fn compare(lu: &LogicalUnit, lba: u64, data: &[u8]) -> CmdResult {
    let bs = lu.block_size().max(1) as usize;
    let chunk = (CHUNK_BYTES / bs).max(1) * bs;
    let mut buf = vec![0u8; chunk.min(data.len())];
    for (i, piece) in data.chunks(chunk).enumerate() {
        let at = i * chunk;
        let medium = &mut buf[..piece.len()];
        lu.device()
            .read_at(offset(lu, lba) + at as u64, medium)
            .map_err(|e| storage_sense(&e, false))?;
        if let Some(p) = first_difference(piece, medium) {
            return Err(miscompare((at + p) as u64));
        }
    }
    Ok(())
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

fn miscompare(offset: u64) -> SenseData {
    SenseData::new(SenseKey::MISCOMPARE, 0x1D, 0x00).with_information(offset)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use crate::cdb;
    use crate::testutil::*;

    fn verify_cdb(op: u8, lba: u64, blocks: u32, byte1: u8) -> Vec<u8> {
        match op {
            0x2E | 0x2F => {
                let mut c = cdb::read10(lba as u32, blocks as u16, false).to_vec();
                c[0] = op;
                c[1] = byte1;
                c
            }
            0xAE | 0xAF => {
                let mut c = vec![op, byte1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
                c[2..6].copy_from_slice(&(lba as u32).to_be_bytes());
                c[6..10].copy_from_slice(&blocks.to_be_bytes());
                c
            }
            _ => {
                let mut c = cdb::read16(lba, blocks, false).to_vec();
                c[0] = op;
                c[1] = byte1;
                c
            }
        }
    }

    #[test]
    fn verify_compare_good_and_miscompare() {
        for (op, bs) in [(0x2F, 512u32), (0xAF, 512), (0x8F, 4096)] {
            let t = Harness::new(bs, 32);
            let data: Vec<u8> = (0..3 * bs as usize).map(|i| (i % 251) as u8).collect();
            t.ok(&cdb::write10(4, 3, false), &data);
            t.ok(&verify_cdb(op, 4, 3, 0x02), &data);
            let mut bad = data.clone();
            bad[bs as usize + 7] ^= 0xFF;
            let s = t.check(&verify_cdb(op, 4, 3, 0x02), &bad);
            assert_eq!((s.key.0, s.asc, s.ascq), (0x0E, 0x1D, 0));
            assert_eq!(s.information, Some(u64::from(bs) + 7));
            // BYTCHK=0: no compare, so the mismatching data does not matter.
            t.ok(&verify_cdb(op, 4, 3, 0x00), &[]);
            // DPO is accepted.
            t.ok(&verify_cdb(op, 4, 3, 0x12), &data);
        }
    }

    #[test]
    fn verify_bytchk_11_compares_one_block_against_each() {
        let t = Harness::new(512, 16);
        t.ok(&cdb::write10(0, 4, false), &[7u8; 2048]);
        t.ok(&verify_cdb(0x2F, 0, 4, 0x06), &[7u8; 512]);
        let s = t.check(&verify_cdb(0x2F, 0, 5, 0x06), &[7u8; 512]);
        assert_eq!((s.asc, s.information), (0x1D, Some(0)));
        assert_ifc(
            &t.check(&verify_cdb(0x2F, 0, 1, 0x04), &[]),
            true,
            1,
            Some(2),
        );
    }

    #[test]
    fn verify_range_and_protect() {
        let t = Harness::new(512, 100);
        for lba in [101u64, 1 << 31, u64::from(u32::MAX)] {
            let s = t.check(&verify_cdb(0x2F, lba, 0, 0x02), &[]);
            assert_illegal(&s, 0x21, 0);
        }
        for lba in [101u64, 1 << 63, u64::MAX] {
            assert_illegal(
                &t.check(&verify_cdb(0x8F, lba, 1, 0x02), &[0; 512]),
                0x21,
                0,
            );
        }
        assert_illegal(
            &t.check(&verify_cdb(0x2F, 99, 2, 0x02), &[0; 1024]),
            0x21,
            0,
        );
        for p in 1..8u8 {
            let s = t.check(&verify_cdb(0x2F, 0, 1, (p << 5) | 0x02), &[0; 512]);
            assert_ifc(&s, true, 1, Some(7));
        }
    }

    #[test]
    fn write_and_verify() {
        for op in [0x2Eu8, 0xAE, 0x8E] {
            let t = Harness::new(512, 64);
            let data = vec![0x5A; 1024];
            t.ok(&verify_cdb(op, 10, 2, 0x02), &data);
            assert_eq!(t.ok(&cdb::read10(10, 2, false), &[]), data);
            t.ok(&verify_cdb(op, 20, 1, 0x00), &data[..512]);
            t.ok(&verify_cdb(op, 0, 0, 0x02), &[]);
            t.ok(&verify_cdb(op, 0, 1, 0x12), &data[..512]);
            assert_illegal(&t.check(&verify_cdb(op, 64, 1, 2), &data[..512]), 0x21, 0);
            assert_illegal(&t.check(&verify_cdb(op, 65, 0, 0), &[]), 0x21, 0);
            for p in 1..8u8 {
                let s = t.check(&verify_cdb(op, 0, 1, p << 5), &data[..512]);
                assert_ifc(&s, true, 1, Some(7));
            }
            assert_ifc(
                &t.check(&verify_cdb(op, 0, 1, 0x06), &data[..512]),
                true,
                1,
                Some(2),
            );
        }
        let t = Harness::read_only(512, 64);
        let s = t.check(&verify_cdb(0x2E, 0, 1, 2), &[0; 512]);
        assert_eq!((s.key.0, s.asc), (7, 0x27));
    }

    #[test]
    fn verify_reports_unreadable_medium() {
        let t = Harness::new(512, 64);
        t.dev.fail.store(true, Ordering::Relaxed);
        let s = t.check(&verify_cdb(0x2F, 0, 4, 0), &[]);
        assert_eq!((s.key.0, s.asc), (3, 0x11));
    }

    #[test]
    fn miscompare_in_descriptor_format_carries_information() {
        let t = Harness::new(512, 64);
        // Control mode page with D_SENSE=1 through MODE SELECT(6).
        let mut page = vec![0, 0, 0, 0, 0x0A, 0x0A, 0x06, 0x10, 0, 0, 0, 0, 0, 0, 0, 0];
        page[0] = 0;
        t.ok(&[0x15, 0x10, 0, 0, page.len() as u8, 0], &page);
        let (r, _) = t.run(&verify_cdb(0x2F, 0, 1, 2), &[1; 512]);
        let b = r.sense_bytes().unwrap();
        assert_eq!(b[0], 0x72);
        let s = crate::SenseData::parse(&b).unwrap();
        assert_eq!(s.information, Some(0));
    }
}
