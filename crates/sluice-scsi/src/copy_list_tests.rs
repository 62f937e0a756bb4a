use super::*;
use crate::cdb::{copy_list, BlockCopy};

const NAA: &[u8] = &[0x60, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0, 0];

fn one_copy(n: usize) -> Vec<BlockCopy> {
    (0..n)
        .map(|i| BlockCopy {
            source: 0,
            destination: 1,
            blocks: 8,
            source_lba: i as u64,
            destination_lba: 1000 + i as u64,
        })
        .collect()
}

fn luns(n: usize) -> Vec<(u8, u8, &'static [u8], u32)> {
    vec![(1, 3, NAA, 512); n]
}

fn asc(r: Result<Option<CopyList>, SenseData>) -> (u8, u8, u8) {
    let s = r.unwrap_err();
    (s.key.0, s.asc, s.ascq)
}

#[test]
fn a_built_list_parses_back() {
    let l = copy_list(7, true, &luns(2), &one_copy(3));
    let c = parse(&l, l.len()).unwrap().unwrap();
    assert_eq!(c.list_id, 7);
    assert_eq!(c.usage, ListIdUsage::Hold);
    assert_eq!(c.cscds.len(), 2);
    assert_eq!(c.cscds[0].designator, NAA);
    assert_eq!((c.cscds[0].code_set, c.cscds[0].designator_type), (1, 3));
    assert_eq!(c.cscds[1].block_len, 512);
    assert_eq!(c.segments.len(), 3);
    assert_eq!(c.segments[2].source_lba, 2);
    assert_eq!(c.segments[2].destination_lba, 1002);
    assert_eq!(c.segments[2].destination, 1);
    let l = copy_list(7, false, &luns(1), &[]);
    assert_eq!(
        parse(&l, l.len()).unwrap().unwrap().usage,
        ListIdUsage::None
    );
    // Zero length asks for nothing.
    assert_eq!(parse(&[], 0).unwrap(), None);
}

#[test]
fn lengths_are_checked_before_anything_is_read() {
    let l = copy_list(1, true, &luns(1), &one_copy(1));
    // Cut into the CSCD and into the segment, by the CDB or by what arrived.
    for cut in [15, 16 + 31, 16 + 32 + 27] {
        assert_eq!(asc(parse(&l, cut)), (5, 0x1A, 0));
        assert_eq!(asc(parse(&l[..cut], l.len())), (5, 0x1A, 0));
    }
    // Descriptor lists longer than MAXIMUM DESCRIPTOR LIST LENGTH: judged before counting.
    let mut big = copy_list(1, true, &luns(9), &[]);
    let seg_len = MAX_DESCRIPTOR_LIST_BYTES;
    big[8..12].copy_from_slice(&seg_len.to_be_bytes());
    assert_eq!(asc(parse(&big, big.len())), (5, 0x1A, 0));
    let mut huge = l.clone();
    huge[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(asc(parse(&huge, usize::MAX)), (5, 0x1A, 0));
    // Inline data and LIST ID USAGE 01b.
    let mut inline = l.clone();
    inline[15] = 1;
    assert_eq!(asc(parse(&inline, l.len())), (5, 0x26, 0));
    let mut usage = l.clone();
    usage[1] = 0x08;
    assert_eq!(asc(parse(&usage, l.len())), (5, 0x26, 0));
}

#[test]
fn counts_and_types_are_limited() {
    let too_many_cscds = copy_list(
        1,
        true,
        &luns(MAX_CSCD_DESCRIPTORS as usize + 1),
        &one_copy(1),
    );
    assert_eq!(
        asc(parse(&too_many_cscds, too_many_cscds.len())),
        (5, 0x26, 0x06)
    );
    let too_many_segments = copy_list(
        1,
        true,
        &luns(1),
        &one_copy(MAX_SEGMENT_DESCRIPTORS as usize + 1),
    );
    assert_eq!(
        asc(parse(&too_many_segments, too_many_segments.len())),
        (5, 0x26, 0x08)
    );
    let most = copy_list(
        1,
        true,
        &luns(MAX_CSCD_DESCRIPTORS as usize),
        &one_copy(MAX_SEGMENT_DESCRIPTORS as usize),
    );
    assert_eq!(most.len(), MAX_LIST_BYTES);
    assert!(parse(&most, most.len()).is_ok());
    let mut fc = copy_list(1, true, &luns(1), &one_copy(1));
    fc[16] = 0xE0;
    assert_eq!(asc(parse(&fc, fc.len())), (5, 0x26, 0x07));
    let mut stream = copy_list(1, true, &luns(1), &one_copy(1));
    stream[48] = 0x03;
    assert_eq!(asc(parse(&stream, stream.len())), (5, 0x26, 0x09));
    // Malformed descriptors point at the field.
    let mut tape = copy_list(1, true, &luns(1), &one_copy(1));
    tape[17] = 0x01;
    assert_eq!(
        parse(&tape, tape.len()).unwrap_err().field_pointer(),
        Some((false, 17, Some(4)))
    );
    let mut long = copy_list(1, true, &luns(1), &one_copy(1));
    long[23] = 21;
    assert_eq!(
        parse(&long, long.len()).unwrap_err().field_pointer(),
        Some((false, 23, Some(7)))
    );
    let mut len = copy_list(1, true, &luns(1), &one_copy(1));
    len[51] = 0x20;
    assert_eq!(
        parse(&len, len.len()).unwrap_err().field_pointer(),
        Some((false, 50, Some(7)))
    );
    // LU ID TYPE and NUL are ignored (obsolete in SPC-4).
    let mut lu_id = copy_list(1, true, &luns(1), &one_copy(1));
    lu_id[17] = 0x80 | 0x20;
    assert!(parse(&lu_id, lu_id.len()).is_ok());
}

proptest::proptest! {
    #[test]
    fn never_panics_and_stays_within_the_limits(
        data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4096),
        param_len in proptest::prelude::any::<u32>(),
    ) {
        if let Ok(Some(c)) = parse(&data, param_len as usize) {
            proptest::prop_assert!(c.cscds.len() <= usize::from(MAX_CSCD_DESCRIPTORS));
            proptest::prop_assert!(c.segments.len() <= usize::from(MAX_SEGMENT_DESCRIPTORS));
            proptest::prop_assert!(c.cscds.iter().all(|d| d.designator.len() <= 20));
        }
    }

    #[test]
    fn valid_lists_with_random_fields_parse(
        ids in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..=20), 1..8),
        segs in proptest::collection::vec((proptest::prelude::any::<u16>(), proptest::prelude::any::<u64>(), proptest::prelude::any::<u64>()), 0..40),
    ) {
        let luns: Vec<(u8, u8, &[u8], u32)> = ids.iter().map(|i| (1, 3, &i[..], 4096)).collect();
        let copies: Vec<BlockCopy> = segs.iter().map(|&(blocks, s, d)| BlockCopy {
            source: 0, destination: (ids.len() - 1) as u16, blocks, source_lba: s, destination_lba: d,
        }).collect();
        let l = copy_list(3, true, &luns, &copies);
        let c = parse(&l, l.len()).unwrap().unwrap();
        proptest::prop_assert_eq!(c.cscds.len(), ids.len());
        proptest::prop_assert_eq!(c.segments.len(), segs.len());
        for (p, s) in c.segments.iter().zip(&segs) {
            proptest::prop_assert_eq!((p.blocks, p.source_lba, p.destination_lba), *s);
        }
    }
}
