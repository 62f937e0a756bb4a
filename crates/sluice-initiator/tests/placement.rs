//! Large Data-In payloads received straight into the read's buffer: the data, digests, PDU
//! counts and the trace hook must be exactly what the buffered path gives, for every
//! combination that turns placement on or off (digests, segment sizes, in-order or not),
//! with many reads in flight at once.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use common::{config, TestTarget, IQN};
use sluice_initiator::{Command, ConnectOptions, Direction, Session};
use sluice_proto::pdu::Pdu;

const BLOCK: u32 = 512;
/// Read sizes and how many are in flight at once: whole 256 KiB segments, a read ending in a
/// short segment, and reads below the placement threshold's reach.
const SIZES: [(usize, usize); 3] = [(1 << 20, 8), (768 * 1024 + 512, 3), (40_960, 16)];

fn pattern(len: usize, seed: u64) -> Bytes {
    common::noise(len, seed).into()
}

/// Reads `data` back at `lba` in pieces of `size` bytes, `depth` at a time.
async fn read_back(s: &Session, data: &Bytes, size: usize, depth: usize) {
    let mut pieces = Vec::new();
    for (i, chunk) in data.chunks(size).enumerate() {
        let s = s.clone();
        let lba = (i * size) as u64 / u64::from(BLOCK);
        let len = chunk.len() as u32;
        pieces.push(tokio::spawn(async move {
            s.execute(Command::read(
                0,
                &sluice_scsi::cdb::read16(lba, len / BLOCK, false),
                len,
            ))
            .await
        }));
        if pieces.len() == depth {
            check(pieces.remove(0).await.unwrap(), data, size, i + 1 - depth);
        }
    }
    let first = data.len().div_ceil(size) - pieces.len();
    for (k, p) in pieces.into_iter().enumerate() {
        check(p.await.unwrap(), data, size, first + k);
    }
}

fn check(
    out: Result<sluice_initiator::CommandOutcome, sluice_initiator::Error>,
    data: &Bytes,
    size: usize,
    i: usize,
) {
    let out = out.unwrap().check().unwrap();
    let want = &data[i * size..((i + 1) * size).min(data.len())];
    assert!(out.data == want, "read {i} of {size} bytes differs");
}

#[tokio::test]
async fn placed_reads_match_what_was_written() {
    let data = pattern(3 << 20, 7);
    for in_order in [true, false] {
        for digests in [false, true] {
            for mrdsl in [262_144u32, 65_536, 8192] {
                let mut cfg = config();
                cfg.offer.data_pdu_in_order = in_order;
                cfg.offer.data_sequence_in_order = in_order;
                let t = TestTarget::start(cfg);
                let mut opts = ConnectOptions::default();
                opts.set_digests(digests, digests);
                opts.apply("MaxRecvDataSegmentLength", &mrdsl.to_string())
                    .unwrap();
                if !in_order {
                    opts.apply("DataPDUInOrder", "No").unwrap();
                    opts.apply("DataSequenceInOrder", "No").unwrap();
                }
                // The trace hook sees every Data-In whole, placed or not.
                let traced = Arc::new(AtomicU64::new(0));
                let seen = Arc::clone(&traced);
                opts.trace = Some(Arc::new(move |dir, pdu| {
                    if let (Direction::Received, Pdu::DataIn(d)) = (dir, pdu) {
                        seen.fetch_add(d.data.len() as u64, Ordering::Relaxed);
                    }
                }));
                let s = Session::connect(&t.portal(), IQN, opts).await.unwrap();
                let p = s.params();
                assert_eq!(p.initiator_max_recv_data_segment_length, mrdsl);
                assert_eq!(p.data_pdu_in_order, in_order);
                s.write(0, 0, data.clone(), BLOCK).await.unwrap();
                let before = s.counters();
                let what = format!("in_order={in_order} digests={digests} mrdsl={mrdsl}");
                let (mut reads, mut pdus) = (0, 0);
                for (size, depth) in SIZES {
                    read_back(&s, &data, size, depth).await;
                    for chunk in data.chunks(size) {
                        reads += 1;
                        pdus += chunk.len().div_ceil(mrdsl as usize) as u64;
                    }
                }
                let after = s.counters();
                let bytes = (SIZES.len() * data.len()) as u64;
                assert_eq!(after.commands - before.commands, reads, "{what}");
                // Section 13.12: segments of at most our MaxRecvDataSegmentLength.
                assert_eq!(after.data_in() - before.data_in(), pdus, "{what}");
                assert_eq!(after.read_bytes - before.read_bytes, bytes, "{what}");
                assert_eq!(after.data_digest_errors, 0);
                let traced = traced.load(Ordering::Relaxed);
                assert_eq!(traced, bytes, "{what}: traced payload bytes");
                s.logout().await.unwrap();
            }
        }
    }
}
