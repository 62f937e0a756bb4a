use std::time::{Duration, Instant};

use bytes::BytesMut;
use proptest::prelude::*;

use super::*;

fn datagrams(seg: &mut Segmenter, pdu: &[u8]) -> Vec<BytesMut> {
    seg.segment(pdu)
        .expect("segmentable")
        .map(|s| {
            let mut b = BytesMut::new();
            s.write_to(&mut b);
            assert!(b.len() <= seg.max_datagram());
            b
        })
        .collect()
}

fn roomy() -> ReassemblyLimits {
    ReassemblyLimits {
        max_pdu_len: 1 << 20,
        max_partial: 1024,
        max_buffered_bytes: 64 << 20,
        partial_timeout: Duration::from_secs(3600),
    }
}

#[test]
fn header_layout_is_as_documented() {
    let h = SegmentHeader {
        index: 2,
        count: 3,
        pdu_id: 0x0102_0304,
        total_len: 1000,
    };
    assert_eq!(
        h.to_bytes(),
        [1, 0, 0, 2, 0, 3, 0, 0, 1, 2, 3, 4, 0, 0, 0x03, 0xe8]
    );
    // stride ceil(1000/3) = 334: segments 334, 334, 332.
    assert_eq!(h.range(), 668..1000);
}

#[test]
fn a_pdu_is_cut_into_near_equal_segments() {
    let pdu: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    let mut seg = Segmenter::new(1472, 7);
    let dgs = datagrams(&mut seg, &pdu);
    assert_eq!(dgs.len(), 7); // ceil(10000 / 1456)
    let lens: Vec<usize> = dgs.iter().map(|d| d.len() - HEADER_LEN).collect();
    assert_eq!(lens, [1429, 1429, 1429, 1429, 1429, 1429, 1426]);
    let mut r = Reassembler::new(roomy());
    let now = Instant::now();
    let mut out = None;
    for d in dgs.iter().rev() {
        assert!(out.is_none());
        out = r.push(d, now).expect("well formed");
    }
    assert_eq!(out.as_deref(), Some(&pdu[..]));
    assert_eq!(r.buffered_bytes(), 0);
}

#[test]
fn malformed_datagrams_are_dropped_with_their_reason() {
    let mut r = Reassembler::new(roomy());
    let now = Instant::now();
    let good = SegmentHeader {
        index: 0,
        count: 2,
        pdu_id: 1,
        total_len: 100,
    };
    let with = |h: SegmentHeader, payload: usize| {
        let mut d = h.to_bytes().to_vec();
        d.extend(std::iter::repeat_n(0xaa, payload));
        d
    };
    assert!(matches!(
        r.push(&[1, 0, 0], now),
        Err(DatagramError::Truncated { len: 3 })
    ));
    let mut v2 = with(good, 50);
    v2[0] = 2;
    assert_eq!(r.push(&v2, now), Err(DatagramError::Version(2)));
    let mut reserved = with(good, 50);
    reserved[7] = 1;
    assert_eq!(r.push(&reserved, now), Err(DatagramError::Reserved));
    let huge = SegmentHeader {
        total_len: u32::MAX,
        ..good
    };
    assert!(matches!(
        r.push(&with(huge, 50), now),
        Err(DatagramError::TotalLength { .. })
    ));
    for (index, count) in [(0, 0), (2, 2), (0, 101), (0, 65_535)] {
        let h = SegmentHeader {
            index,
            count,
            ..good
        };
        assert!(
            matches!(r.push(&with(h, 1), now), Err(DatagramError::Count { .. })),
            "{index}/{count}"
        );
    }
    // total 5 in 4 segments: stride 2 leaves the last segment nothing.
    let empty_last = SegmentHeader {
        index: 0,
        count: 4,
        pdu_id: 9,
        total_len: 5,
    };
    assert!(matches!(
        r.push(&with(empty_last, 2), now),
        Err(DatagramError::Count { .. })
    ));
    assert_eq!(
        r.push(&with(good, 49), now),
        Err(DatagramError::SegmentLength {
            expected: 50,
            actual: 49
        })
    );
    assert_eq!(r.partial_count(), 0);
    assert_eq!(r.stats().malformed, 10);
    // A segment disagreeing with the partial PDU of its id discards both.
    assert_eq!(r.push(&with(good, 50), now), Ok(None));
    let other = SegmentHeader {
        index: 1,
        total_len: 102,
        ..good
    };
    assert_eq!(
        r.push(&with(other, 51), now),
        Err(DatagramError::Conflict { pdu_id: 1 })
    );
    assert_eq!(r.partial_count(), 0);
    assert_eq!(r.buffered_bytes(), 0);
}

#[test]
fn a_partial_pdu_expires_and_its_late_segment_starts_over() {
    let limits = ReassemblyLimits {
        partial_timeout: Duration::from_millis(100),
        ..roomy()
    };
    let mut r = Reassembler::new(limits);
    let t0 = Instant::now();
    let pdu = vec![5u8; 3000];
    let dgs = datagrams(&mut Segmenter::new(1472, 0), &pdu);
    assert_eq!(dgs.len(), 3);
    assert_eq!(r.push(&dgs[0], t0), Ok(None));
    assert_eq!(r.push(&dgs[1], t0), Ok(None));
    assert_eq!(r.poll_timeout(), Some(t0 + Duration::from_millis(100)));
    let late = t0 + Duration::from_millis(150);
    // The last segment arrives after the PDU was given up: it cannot complete it.
    assert_eq!(r.push(&dgs[2], late), Ok(None));
    assert_eq!(r.stats().expired, 1);
    assert_eq!(r.partial_count(), 1);
    assert_eq!(r.expire(late + Duration::from_millis(100)), 1);
    assert_eq!(r.buffered_bytes(), 0);
}

#[test]
fn the_budget_drops_the_oldest_partial_pdu() {
    let limits = ReassemblyLimits {
        max_partial: 2,
        ..roomy()
    };
    let mut r = Reassembler::new(limits);
    let now = Instant::now();
    let mut seg = Segmenter::new(1472, 0);
    let pdus: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 2000]).collect();
    let dgs: Vec<_> = pdus.iter().map(|p| datagrams(&mut seg, p)).collect();
    for d in &dgs {
        assert_eq!(r.push(&d[0], now), Ok(None));
    }
    assert_eq!(r.partial_count(), 2);
    assert_eq!(r.stats().evicted, 1);
    // The first PDU was evicted; the other two complete.
    assert_eq!(
        r.push(&dgs[1][1], now).unwrap().as_deref(),
        Some(&pdus[1][..])
    );
    assert_eq!(
        r.push(&dgs[2][1], now).unwrap().as_deref(),
        Some(&pdus[2][..])
    );
    assert_eq!(r.push(&dgs[0][1], now), Ok(None));
    // A PDU larger than the whole byte budget is refused outright.
    let mut tight = Reassembler::new(ReassemblyLimits {
        max_buffered_bytes: 1000,
        ..roomy()
    });
    assert!(matches!(
        tight.push(&dgs[0][0], now),
        Err(DatagramError::Budget { .. })
    ));
}

#[test]
fn every_encodable_pdu_fits_the_segment_count() {
    let biggest = crate::framing::max_frame_len(
        crate::pdu::MAX_DATA_SEGMENT_LEN,
        crate::framing::Digests {
            header: true,
            data: true,
        },
    );
    let pdu = vec![0u8; biggest];
    let mut seg = Segmenter::new(MIN_DATAGRAM_LEN, 0);
    let n = seg.segment(&pdu).expect("fits").count();
    assert!(n <= usize::from(u16::MAX));
    assert!(Segmenter::new(0, 0).segment(&[]).is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Every PDU comes back whole, whatever the order its datagrams arrive in.
    #[test]
    fn round_trip_in_any_order(
        lens in prop::collection::vec(1usize..20_000, 1..8),
        max_datagram in MIN_DATAGRAM_LEN..9_000,
        first_id in any::<u32>(),
        order_seed in any::<u64>(),
    ) {
        let pdus: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 31 + j * 7) as u8).collect())
            .collect();
        let mut seg = Segmenter::new(max_datagram, first_id);
        let mut all: Vec<BytesMut> = pdus.iter().flat_map(|p| datagrams(&mut seg, p)).collect();
        shuffle(&mut all, order_seed);
        let mut r = Reassembler::new(roomy());
        let now = Instant::now();
        let mut got: Vec<Vec<u8>> = Vec::new();
        for d in &all {
            if let Some(p) = r.push(d, now).expect("well formed") {
                got.push(p.to_vec());
            }
        }
        let mut want = pdus.clone();
        want.sort();
        got.sort();
        prop_assert_eq!(got, want);
        prop_assert_eq!(r.buffered_bytes(), 0);
    }

    /// Whatever is lost, duplicated or reordered, every PDU delivered is one that was sent,
    /// and every PDU none of whose datagrams was lost is delivered.
    #[test]
    fn loss_never_yields_a_wrong_pdu(
        lens in prop::collection::vec(1usize..6_000, 1..12),
        max_datagram in MIN_DATAGRAM_LEN..2_000,
        fate in prop::collection::vec(0u8..10, 200),
        order_seed in any::<u64>(),
    ) {
        let pdus: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 13 + j) as u8 ^ (n as u8)).collect())
            .collect();
        let mut seg = Segmenter::new(max_datagram, 0);
        let mut sent = Vec::new();
        let mut intact = vec![true; pdus.len()];
        let mut k = 0;
        for (i, p) in pdus.iter().enumerate() {
            for d in datagrams(&mut seg, p) {
                let f = fate[k % fate.len()];
                k += 1;
                match f {
                    0 | 1 => intact[i] = false, // lost
                    2 => { sent.push(d.clone()); sent.push(d); } // duplicated
                    _ => sent.push(d),
                }
            }
        }
        shuffle(&mut sent, order_seed);
        let mut r = Reassembler::new(roomy());
        let now = Instant::now();
        let mut got = Vec::new();
        for d in &sent {
            if let Some(p) = r.push(d, now).expect("well formed") {
                prop_assert!(pdus.contains(&p.to_vec()), "a PDU nobody sent");
                got.push(p.to_vec());
            }
        }
        for (i, p) in pdus.iter().enumerate() {
            if intact[i] {
                prop_assert!(got.contains(p), "intact PDU {} not delivered", i);
            }
        }
    }

    /// Arbitrary bytes never panic and never exceed the budget.
    #[test]
    fn garbage_is_bounded(
        dgs in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..64),
        headers in prop::collection::vec((any::<u16>(), 1u16..8, 0u32..4, 1u32..4000), 0..64),
    ) {
        let limits = ReassemblyLimits {
            max_pdu_len: 4096,
            max_partial: 4,
            max_buffered_bytes: 10_000,
            partial_timeout: Duration::from_secs(1),
        };
        let mut r = Reassembler::new(limits);
        let now = Instant::now();
        for d in &dgs {
            let _ = r.push(d, now);
            prop_assert!(r.buffered_bytes() <= limits.max_buffered_bytes);
        }
        for &(index, count, pdu_id, total_len) in &headers {
            let h = SegmentHeader { index: index % count, count, pdu_id, total_len };
            let mut d = h.to_bytes().to_vec();
            let len = if h.count as u32 <= total_len { h.range().len() } else { 1 };
            d.extend(std::iter::repeat_n(7u8, len));
            let _ = r.push(&d, now);
            prop_assert!(r.buffered_bytes() <= limits.max_buffered_bytes);
            prop_assert!(r.partial_count() <= limits.max_partial);
        }
    }
}

/// A seeded Fisher-Yates shuffle (splitmix64), so a failing case replays.
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        v.swap(i, (z % (i as u64 + 1)) as usize);
    }
}
