//! The tokio driver over real byte streams: an in-memory duplex and loopback TCP.

use std::time::{Duration, Instant};

use sluice_rdma::bench::{loopback, loopback_for, loopback_on, BenchOp};
use sluice_rdma::*;

fn rw() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ
}

fn pair() -> (SoftRdma, SoftRdma) {
    let (x, y) = tokio::io::duplex(8 << 10);
    (
        SoftRdma::spawn(x, QpConfig::default()),
        SoftRdma::spawn(y, QpConfig::default()),
    )
}

/// An RDMA Write of `len` bytes at `offset` in `local` to the same offset in `remote`.
fn write_at(
    wr_id: u64,
    local: &MemoryRegion,
    remote: &MemoryRegion,
    offset: u64,
    len: u32,
) -> SendWr {
    SendWr::Write {
        wr_id,
        sge: Sge {
            stag: local.stag,
            va: local.base_va + offset,
            len,
        },
        remote: RemoteAddr {
            stag: remote.stag,
            va: remote.base_va + offset,
        },
    }
}

async fn next(ep: &SoftRdma) -> WorkCompletion {
    tokio::time::timeout(Duration::from_secs(10), ep.next_completion())
        .await
        .expect("a completion within 10 s")
}

#[tokio::test]
async fn write_read_and_send_over_a_duplex_stream() {
    let (a, b) = pair();
    let local = a
        .register(1 << 20, Access::LOCAL_WRITE, VaMode::ZeroBased)
        .expect("local");
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    a.fill(local.stag, 0, &data).expect("fill");
    let region = b
        .register(1 << 20, rw(), VaMode::Based(0x4000_0000))
        .expect("region");
    let inbox = b
        .register(64, Access::LOCAL_WRITE, VaMode::ZeroBased)
        .expect("inbox");
    b.post_recv(RecvWr {
        wr_id: 100,
        sge: Sge {
            stag: inbox.stag,
            va: 0,
            len: 64,
        },
    })
    .expect("recv");

    // A 1 MiB RDMA Write (larger than the duplex buffer: the stream is really streamed).
    a.post_send(write_at(1, &local, &region, 0, 1 << 20))
        .expect("write");
    let wc = next(&a).await;
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (1, WcStatus::Success, 1 << 20)
    );
    assert_eq!(
        b.contents(region.stag, region.base_va, 1 << 20).expect("c"),
        data
    );

    // Read the second half back into the first half of the local buffer.
    a.post_send(SendWr::Read {
        wr_id: 2,
        sge: Sge {
            stag: local.stag,
            va: 0,
            len: 1 << 19,
        },
        remote: RemoteAddr {
            stag: region.stag,
            va: region.base_va + (1 << 19),
        },
    })
    .expect("read");
    let wc = next(&a).await;
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (2, WcOpcode::RdmaRead, WcStatus::Success)
    );
    assert_eq!(
        a.contents(local.stag, 0, 1 << 19).expect("c"),
        &data[1 << 19..]
    );

    // A Send with Invalidate closes the region to further RDMA.
    a.post_send(SendWr::Send {
        wr_id: 3,
        sge: Sge {
            stag: local.stag,
            va: 0,
            len: 5,
        },
        invalidate: Some(region.stag),
    })
    .expect("send");
    assert_eq!(next(&a).await.status, WcStatus::Success);
    let wc = next(&b).await;
    assert_eq!(
        (wc.wr_id, wc.byte_len, wc.invalidated),
        (100, 5, Some(region.stag))
    );
    a.post_send(SendWr::Read {
        wr_id: 4,
        sge: Sge {
            stag: local.stag,
            va: 0,
            len: 8,
        },
        remote: RemoteAddr {
            stag: region.stag,
            va: region.base_va,
        },
    })
    .expect("read");
    assert_eq!(next(&a).await.status, WcStatus::RemoteAccess);
    assert_eq!(next(&b).await.status, WcStatus::RemoteAccess);
    assert_eq!(a.state(), QpState::Error);
}

#[tokio::test]
async fn a_closed_peer_is_transport_lost_and_flushes_everything() {
    let (a, b) = pair();
    let local = a
        .register(64, Access::LOCAL_WRITE, VaMode::ZeroBased)
        .expect("local");
    a.post_recv(RecvWr {
        wr_id: 5,
        sge: Sge {
            stag: local.stag,
            va: 0,
            len: 64,
        },
    })
    .expect("recv");
    drop(b);
    let wc = next(&a).await;
    assert_eq!(
        (wc.opcode, wc.status),
        (WcOpcode::AsyncError, WcStatus::TransportLost)
    );
    let wc = next(&a).await;
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::Flushed));
}

#[tokio::test]
async fn writes_into_parts_of_a_region_land_at_their_offsets() {
    // Two 512 KiB RDMA Writes into the halves of a 1 MiB region (a read of two bursts), and
    // a small one into its middle: each is read from the stream straight into the region.
    let (a, b) = pair();
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 253) as u8).collect();
    let local = a
        .register(1 << 20, Access::LOCAL_WRITE, VaMode::ZeroBased)
        .expect("local");
    a.fill(local.stag, 0, &data).expect("fill");
    let region = b
        .register_cleared(vec![0xee; 1 << 20], rw(), VaMode::Based(0x7000_0000))
        .expect("region");
    let halves = [(1, 512 << 10, 512 << 10), (2, 0, 512 << 10), (3, 4096, 100)];
    for (wr_id, offset, len) in halves {
        a.post_send(write_at(wr_id, &local, &region, offset, len))
            .expect("write");
    }
    for wr_id in [1, 2, 3] {
        let wc = next(&a).await;
        assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::Success));
    }
    assert_eq!(
        b.contents(region.stag, region.base_va, 1 << 20).expect("c"),
        data
    );
}

#[tokio::test]
async fn a_stream_ending_inside_a_large_payload_is_transport_lost() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // `a` writes 1 MiB into `b`'s region, but only the first 200 KiB of its byte stream
    // reach `b`: the payload is read straight into a buffer of its own, and a stream that
    // ends inside it must end the queue pair, not leave the reader waiting or place a part.
    let (x, relay_in) = tokio::io::duplex(8 << 10);
    let (relay_out, y) = tokio::io::duplex(8 << 10);
    let a = SoftRdma::spawn(x, QpConfig::default());
    let b = SoftRdma::spawn(y, QpConfig::default());
    tokio::spawn(async move {
        let (mut from_a, mut to_a) = tokio::io::split(relay_in);
        let (mut from_b, mut to_b) = tokio::io::split(relay_out);
        // `b`'s side of the handshake passes whole.
        let back = tokio::spawn(async move {
            let _ = tokio::io::copy(&mut from_b, &mut to_a).await;
        });
        let mut chunk = vec![0; 4096];
        let mut left = 200usize << 10;
        while left > 0 {
            let n = from_a.read(&mut chunk[..left.min(4096)]).await.unwrap_or(0);
            if n == 0 || to_b.write_all(&chunk[..n]).await.is_err() {
                break;
            }
            left -= n;
        }
        // Dropping both directions closes `b`'s stream mid-payload.
        back.abort();
    });
    let local = a
        .register(1 << 20, Access::LOCAL_WRITE, VaMode::ZeroBased)
        .expect("local");
    a.fill(local.stag, 0, &vec![0xab; 1 << 20]).expect("fill");
    let region = b
        .register(1 << 20, rw(), VaMode::Based(0x4000_0000))
        .expect("region");
    a.post_send(write_at(1, &local, &region, 0, 1 << 20))
        .expect("write");
    let wc = next(&b).await;
    assert_eq!(
        (wc.opcode, wc.status),
        (WcOpcode::AsyncError, WcStatus::TransportLost)
    );
    assert!(
        b.contents(region.stag, region.base_va, 1 << 20)
            .expect("contents")
            .iter()
            .all(|&x| x == 0),
        "nothing of the cut payload was placed"
    );
}

#[tokio::test]
async fn a_delayed_frame_arrives_late_and_intact() {
    let (x, y) = tokio::io::duplex(8 << 10);
    let delay = Duration::from_millis(200);
    let a = SoftRdma::spawn_with_faults(
        x,
        QpConfig::default(),
        FaultPlan::rule(Some(FrameKind::Write), 0, FaultAction::Delay(delay)),
    );
    let b = SoftRdma::spawn(y, QpConfig::default());
    let local = a
        .register(16, Access::LOCAL_WRITE, VaMode::ZeroBased)
        .expect("local");
    a.fill(local.stag, 0, b"sixteen bytes!!!").expect("fill");
    let region = b.register(16, rw(), VaMode::ZeroBased).expect("region");
    let start = Instant::now();
    a.post_send(write_at(1, &local, &region, 0, 16))
        .expect("write");
    assert_eq!(next(&a).await.status, WcStatus::Success);
    assert!(start.elapsed() >= delay, "the frame was held back");
    assert_eq!(
        b.contents(region.stag, 0, 16).expect("c"),
        b"sixteen bytes!!!"
    );
}

#[tokio::test]
async fn the_loopback_benchmark_moves_every_byte() {
    for op in [BenchOp::Write, BenchOp::Read] {
        let r = loopback(op, 1 << 20, 64 << 10, 4).await.expect("bench");
        assert_eq!(r.bytes, 1 << 20);
        assert!(r.mbit_per_s() > 0.0);
    }
}

#[test]
fn the_loopback_benchmark_runs_its_responder_on_another_runtime() {
    let responder = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-responder")
        .enable_all()
        .build()
        .expect("responder runtime");
    let requester = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("requester runtime");
    for op in [BenchOp::Write, BenchOp::Read] {
        let r = requester
            .block_on(loopback_on(
                op,
                1 << 20,
                64 << 10,
                4,
                Some(responder.handle()),
            ))
            .expect("bench");
        assert_eq!(r.bytes, 1 << 20);
    }
}

#[tokio::test]
async fn the_timed_loopback_benchmark_counts_what_completed() {
    for op in [BenchOp::Write, BenchOp::Read] {
        let r = loopback_for(op, Duration::from_millis(50), 64 << 10, 4, None)
            .await
            .expect("bench");
        // Whole messages only, and every one posted before the deadline completed.
        assert!(r.bytes >= 64 << 10, "{r:?}");
        assert_eq!(r.bytes % (64 << 10), 0, "{r:?}");
        assert!(r.elapsed >= Duration::from_millis(50), "{r:?}");
    }
}
