//! One test per rule: bounds, keys, rights, invalidation, receiver not ready, lengths,
//! read depths, sequence numbers, faults.

use bytes::BytesMut;

use super::*;
use crate::wire::{Message, TerminateCause};

#[test]
fn an_rdma_write_inside_the_region_places_the_bytes() {
    let (mut p, local, target) = setup(rw());
    write_at(&mut p, &local, remote(&target, 4096 - 100));
    assert_eq!(
        Pair::completions(&mut p.a),
        [wc(7, WcOpcode::RdmaWrite, WcStatus::Success, 100)]
    );
    assert!(Pair::completions(&mut p.b).is_empty());
    let placed =
        p.b.pd
            .contents(target.stag, target.base_va + 3996, 100)
            .expect("contents");
    assert_eq!(placed, p.a.pd.contents(local.stag, 0, 100).expect("source"));
}

#[test]
fn an_rdma_write_past_the_end_is_a_remote_access_error() {
    let (mut p, local, target) = setup(rw());
    write_at(&mut p, &local, remote(&target, 4096 - 99));
    assert_remote_access_error(&mut p, &target, WcOpcode::RdmaWrite);
}

#[test]
fn an_rdma_write_below_the_base_is_a_remote_access_error() {
    let (mut p, local, target) = setup(rw());
    write_at(&mut p, &local, remote(&target, u64::MAX)); // base - 1
    assert_remote_access_error(&mut p, &target, WcOpcode::RdmaWrite);
}

#[test]
fn an_rdma_write_with_a_wrong_key_is_a_remote_access_error() {
    let (mut p, local, target) = setup(rw());
    let wrong = RemoteAddr {
        stag: STag::new(target.stag.index(), target.stag.key() ^ 0x5a),
        va: target.base_va,
    };
    write_at(&mut p, &local, wrong);
    assert_remote_access_error(&mut p, &target, WcOpcode::RdmaWrite);
}

#[test]
fn an_rdma_write_without_remote_write_is_a_remote_access_error() {
    let (mut p, local, target) = setup(Access::LOCAL_WRITE | Access::REMOTE_READ);
    write_at(&mut p, &local, remote(&target, 0));
    assert_remote_access_error(&mut p, &target, WcOpcode::RdmaWrite);
}

#[test]
fn an_rdma_read_without_remote_read_is_a_remote_access_error() {
    let (mut p, local, target) = setup(Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    p.a.post_send(SendWr::Read {
        wr_id: 7,
        sge: sge(&local, 0, 64),
        remote: remote(&target, 0),
    })
    .expect("post");
    p.run();
    assert_remote_access_error(&mut p, &target, WcOpcode::RdmaRead);
}

#[test]
fn an_rdma_write_through_an_invalidated_stag_is_a_remote_access_error() {
    let (mut p, local, target) = setup(rw());
    p.b.post_send(SendWr::LocalInvalidate {
        wr_id: 1,
        stag: target.stag,
    })
    .expect("invalidate");
    assert_eq!(
        Pair::completions(&mut p.b),
        [wc(1, WcOpcode::LocalInvalidate, WcStatus::Success, 0)]
    );
    write_at(&mut p, &local, remote(&target, 0));
    assert_remote_access_error(&mut p, &target, WcOpcode::RdmaWrite);
}

#[test]
fn an_rdma_write_through_a_deregistered_stag_is_a_remote_access_error() {
    let (mut p, local, target) = setup(rw());
    p.b.pd.deregister(target.stag).expect("deregister");
    write_at(&mut p, &local, remote(&target, 0));
    assert_eq!(
        Pair::completions(&mut p.a),
        [wc(7, WcOpcode::RdmaWrite, WcStatus::RemoteAccess, 0)]
    );
    assert_eq!(
        Pair::completions(&mut p.b),
        [async_error(WcStatus::RemoteAccess)]
    );
}

#[test]
fn a_read_after_invalidate_is_refused_but_the_one_before_succeeds() {
    let (mut p, local, target) = setup(rw());
    p.b.pd
        .fill(target.stag, target.base_va, &[0xab; 64])
        .expect("fill");
    p.a.post_send(SendWr::Read {
        wr_id: 1,
        sge: sge(&local, 0, 64),
        remote: remote(&target, 0),
    })
    .expect("post");
    p.run();
    assert_eq!(
        Pair::completions(&mut p.a),
        [wc(1, WcOpcode::RdmaRead, WcStatus::Success, 64)]
    );
    assert_eq!(
        &*p.a.pd.contents(local.stag, 0, 64).expect("c"),
        &[0xab; 64]
    );
    p.b.post_send(SendWr::LocalInvalidate {
        wr_id: 2,
        stag: target.stag,
    })
    .expect("invalidate");
    p.a.post_send(SendWr::Read {
        wr_id: 7,
        sge: sge(&local, 0, 64),
        remote: remote(&target, 0),
    })
    .expect("post");
    p.run();
    assert_eq!(
        Pair::completions(&mut p.a),
        [wc(7, WcOpcode::RdmaRead, WcStatus::RemoteAccess, 0)]
    );
    assert_eq!(
        Pair::completions(&mut p.b),
        [
            wc(2, WcOpcode::LocalInvalidate, WcStatus::Success, 0),
            async_error(WcStatus::RemoteAccess)
        ]
    );
}

#[test]
fn send_with_invalidate_delivers_and_invalidates_the_receivers_stag() {
    let (mut p, local, target) = setup(rw());
    let inbox =
        p.b.register(256, Access::LOCAL_WRITE, VaMode::ZeroBased)
            .expect("inbox");
    p.b.post_recv(RecvWr {
        wr_id: 9,
        sge: sge(&inbox, 0, 256),
    })
    .expect("recv");
    p.a.post_send(SendWr::Send {
        wr_id: 1,
        sge: sge(&local, 0, 48),
        invalidate: Some(target.stag),
    })
    .expect("send");
    p.run();
    assert_eq!(
        Pair::completions(&mut p.a),
        [wc(1, WcOpcode::Send, WcStatus::Success, 48)]
    );
    let mut want = wc(9, WcOpcode::Recv, WcStatus::Success, 48);
    want.invalidated = Some(target.stag);
    assert_eq!(Pair::completions(&mut p.b), [want]);
    assert_eq!(
        p.b.pd.contents(inbox.stag, 0, 48).expect("c"),
        p.a.pd.contents(local.stag, 0, 48).expect("c")
    );
    assert_eq!(
        p.b.pd.describe(target.stag).map(|(_, valid)| valid),
        Some(false)
    );
    // The invalidated region is closed to the peer from now on.
    write_at(&mut p, &local, remote(&target, 0));
    assert_remote_access_error(&mut p, &target, WcOpcode::RdmaWrite);
}

#[test]
fn send_with_invalidate_of_an_unknown_stag_delivers_nothing() {
    let (mut p, local, target) = setup(rw());
    let inbox =
        p.b.register(256, Access::LOCAL_WRITE, VaMode::ZeroBased)
            .expect("inbox");
    p.b.post_recv(RecvWr {
        wr_id: 9,
        sge: sge(&inbox, 0, 256),
    })
    .expect("recv");
    p.a.post_send(SendWr::Send {
        wr_id: 7,
        sge: sge(&local, 0, 48),
        invalidate: Some(STag(target.stag.0 ^ 1)),
    })
    .expect("send");
    p.run();
    assert_eq!(
        Pair::completions(&mut p.a),
        [wc(7, WcOpcode::Send, WcStatus::RemoteAccess, 0)]
    );
    assert_eq!(
        Pair::completions(&mut p.b),
        [
            async_error(WcStatus::RemoteAccess),
            wc(9, WcOpcode::Recv, WcStatus::Flushed, 0)
        ]
    );
    assert!(p
        .b
        .pd
        .contents(inbox.stag, 0, 256)
        .expect("c")
        .iter()
        .all(|&b| b == 0));
    assert_eq!(
        p.b.pd.describe(target.stag).map(|(_, valid)| valid),
        Some(true)
    );
}

#[test]
fn a_send_without_a_posted_receive_is_receiver_not_ready_on_both_sides() {
    let (mut p, local, _) = setup(rw());
    p.a.post_send(SendWr::Send {
        wr_id: 7,
        sge: sge(&local, 0, 48),
        invalidate: None,
    })
    .expect("send");
    p.a.post_send(SendWr::Send {
        wr_id: 8,
        sge: sge(&local, 0, 48),
        invalidate: None,
    })
    .expect("send");
    p.run();
    assert_eq!(
        Pair::completions(&mut p.a),
        [
            wc(7, WcOpcode::Send, WcStatus::ReceiverNotReady, 0),
            wc(8, WcOpcode::Send, WcStatus::Flushed, 0)
        ]
    );
    assert_eq!(
        Pair::completions(&mut p.b),
        [async_error(WcStatus::ReceiveQueueEmpty)]
    );
    assert_eq!(p.a.state(), QpState::Error);
    assert_eq!(p.b.state(), QpState::Error);
}

#[test]
fn a_send_longer_than_the_receive_buffer_is_a_length_error() {
    let (mut p, local, _) = setup(rw());
    let inbox =
        p.b.register(256, Access::LOCAL_WRITE, VaMode::ZeroBased)
            .expect("inbox");
    p.b.post_recv(RecvWr {
        wr_id: 9,
        sge: sge(&inbox, 0, 16),
    })
    .expect("recv");
    p.a.post_send(SendWr::Send {
        wr_id: 7,
        sge: sge(&local, 0, 17),
        invalidate: None,
    })
    .expect("send");
    p.run();
    assert_eq!(
        Pair::completions(&mut p.a),
        [wc(7, WcOpcode::Send, WcStatus::RemoteInvalidRequest, 0)]
    );
    assert_eq!(
        Pair::completions(&mut p.b),
        [wc(9, WcOpcode::Recv, WcStatus::LocalLength, 17)]
    );
}

#[test]
fn a_receive_into_a_buffer_without_local_write_is_a_local_protection_error() {
    let (mut p, local, _) = setup(rw());
    let inbox =
        p.b.register(256, Access::REMOTE_READ, VaMode::ZeroBased)
            .expect("inbox");
    p.b.post_recv(RecvWr {
        wr_id: 9,
        sge: sge(&inbox, 0, 256),
    })
    .expect("recv");
    p.a.post_send(SendWr::Send {
        wr_id: 7,
        sge: sge(&local, 0, 8),
        invalidate: None,
    })
    .expect("send");
    p.run();
    assert_eq!(
        Pair::completions(&mut p.b),
        [wc(9, WcOpcode::Recv, WcStatus::LocalProtection, 0)]
    );
    assert_eq!(
        Pair::completions(&mut p.a),
        [wc(7, WcOpcode::Send, WcStatus::RemoteOperation, 0)]
    );
}

#[test]
fn bad_local_stags_fail_the_work_request_and_flush_the_rest() {
    let (mut p, local, target) = setup(rw());
    p.a.post_send(SendWr::Write {
        wr_id: 1,
        sge: Sge {
            stag: STag(local.stag.0 ^ 1),
            va: 0,
            len: 8,
        },
        remote: remote(&target, 0),
    })
    .expect("post");
    p.a.post_send(SendWr::Write {
        wr_id: 2,
        sge: sge(&local, 0, 8),
        remote: remote(&target, 0),
    })
    .expect("post");
    p.run();
    assert_eq!(
        Pair::completions(&mut p.a),
        [
            wc(1, WcOpcode::RdmaWrite, WcStatus::LocalProtection, 0),
            wc(2, WcOpcode::RdmaWrite, WcStatus::Flushed, 0)
        ]
    );
    assert_eq!(
        Pair::completions(&mut p.b),
        [async_error(WcStatus::RemoteOperation)]
    );
    // A post to a queue pair in the error state completes, flushed.
    p.a.post_recv(RecvWr {
        wr_id: 3,
        sge: sge(&local, 0, 8),
    })
    .expect("post");
    assert_eq!(
        Pair::completions(&mut p.a),
        [wc(3, WcOpcode::Recv, WcStatus::Flushed, 0)]
    );
}

#[test]
fn an_rdma_read_sink_needs_local_write() {
    let mut p = Pair::new();
    let sink =
        p.a.register(64, Access::NONE, VaMode::ZeroBased)
            .expect("sink");
    let src = p.b.register(64, rw(), VaMode::ZeroBased).expect("src");
    p.a.post_send(SendWr::Read {
        wr_id: 1,
        sge: sge(&sink, 0, 64),
        remote: remote(&src, 0),
    })
    .expect("post");
    p.run();
    assert_eq!(
        Pair::completions(&mut p.a),
        [wc(1, WcOpcode::RdmaRead, WcStatus::LocalProtection, 0)]
    );
}

#[test]
fn outstanding_reads_never_exceed_ord_or_the_peers_ird() {
    for (ord, ird) in [(2, 8), (8, 3)] {
        let mut p = Pair::with(
            QpConfig {
                ord,
                ..QpConfig::default()
            },
            QpConfig {
                ird,
                ..QpConfig::default()
            },
        );
        let sink =
            p.a.register(4096, Access::LOCAL_WRITE, VaMode::ZeroBased)
                .expect("sink");
        let src = p.b.register(4096, rw(), VaMode::ZeroBased).expect("src");
        for i in 0..10 {
            p.a.post_send(SendWr::Read {
                wr_id: i,
                sge: sge(&sink, i * 64, 64),
                remote: remote(&src, i * 64),
            })
            .expect("post");
        }
        let mut requests = 0;
        while let Some(out) = p.a.poll_transmit() {
            requests += usize::from(out.head[0] == 0x05);
        }
        assert_eq!(requests, usize::from(ord.min(ird)), "ord {ord} ird {ird}");
        // Those frames were lost on purpose; a fresh pair shows the stalled Reads all finish.
        let mut p = Pair::with(
            QpConfig {
                ord,
                ..QpConfig::default()
            },
            QpConfig {
                ird,
                ..QpConfig::default()
            },
        );
        let sink =
            p.a.register(4096, Access::LOCAL_WRITE, VaMode::ZeroBased)
                .expect("sink");
        let src = p.b.register(4096, rw(), VaMode::ZeroBased).expect("src");
        for i in 0..10 {
            p.a.post_send(SendWr::Read {
                wr_id: i,
                sge: sge(&sink, i * 64, 64),
                remote: remote(&src, i * 64),
            })
            .expect("post");
        }
        p.run();
        let done: Vec<_> = Pair::completions(&mut p.a)
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
        let want: Vec<_> = (0..10).map(|i| (i, WcStatus::Success)).collect();
        assert_eq!(done, want);
    }
}

#[test]
fn a_peer_that_exceeds_the_ird_is_terminated() {
    let mut b = Endpoint::new(QpConfig {
        ird: 2,
        ..QpConfig::default()
    });
    let src = b.register(4096, rw(), VaMode::ZeroBased).expect("src");
    let mut stream = BytesMut::new();
    let mut frames = vec![Message::Connect {
        version: 1,
        ird: 4,
        max_payload: 4096,
    }];
    for msn in 0..3 {
        frames.push(Message::ReadRequest {
            msn,
            stag: src.stag,
            va: 0,
            len: 16,
        });
    }
    for f in frames {
        stream.extend_from_slice(&f.encode());
    }
    b.handle_bytes(&mut stream);
    assert_eq!(b.state(), QpState::Error);
    assert_eq!(
        b.poll_completion(),
        Some(async_error(WcStatus::RemoteInvalidRequest))
    );
    let terminate: Vec<_> = std::iter::from_fn(|| b.poll_transmit()).collect();
    let mut last = BytesMut::from(&terminate.last().expect("a terminate").head[..]);
    assert_eq!(
        crate::wire::Decoder::new(0).decode(&mut last),
        Ok(Some(Message::Terminate {
            msn: Some(2),
            cause: TerminateCause::InvalidRequest
        }))
    );
}

#[test]
fn out_of_sequence_requests_and_acks_for_unsent_requests_are_protocol_errors() {
    let frames = [
        Message::Write {
            msn: 1,
            stag: STag(0x100),
            va: 0,
            payload: bytes::Bytes::new(),
        },
        Message::Ack { msn: 0 },
        Message::ReadResponse {
            msn: 0,
            payload: bytes::Bytes::new(),
        },
    ];
    for frame in frames {
        let mut ep = Endpoint::new(QpConfig::default());
        let mut stream = BytesMut::new();
        stream.extend_from_slice(
            &Message::Connect {
                version: 1,
                ird: 1,
                max_payload: 64,
            }
            .encode(),
        );
        stream.extend_from_slice(&frame.encode());
        ep.handle_bytes(&mut stream);
        assert_eq!(
            ep.poll_completion(),
            Some(async_error(WcStatus::Protocol)),
            "{frame:?}"
        );
    }
}

#[test]
fn a_corrupted_frame_stops_both_sides() {
    let (mut p, local, target) = setup(rw());
    p.a.set_faults(FaultPlan::rule(
        Some(FrameKind::Write),
        0,
        FaultAction::Corrupt {
            offset: 0,
            xor: 0xf0,
        },
    ));
    write_at(&mut p, &local, remote(&target, 0));
    assert_eq!(
        Pair::completions(&mut p.b),
        [async_error(WcStatus::Protocol)]
    );
    assert_eq!(
        Pair::completions(&mut p.a),
        [
            async_error(WcStatus::Protocol),
            wc(7, WcOpcode::RdmaWrite, WcStatus::Flushed, 0)
        ]
    );
}

#[test]
fn a_corrupted_stag_is_caught_by_the_responders_check() {
    let (mut p, local, target) = setup(rw());
    // Byte 12 is the STag's first byte (8-byte frame header, 4-byte MSN).
    p.a.set_faults(FaultPlan::rule(
        Some(FrameKind::Write),
        0,
        FaultAction::Corrupt {
            offset: 12,
            xor: 0x01,
        },
    ));
    write_at(&mut p, &local, remote(&target, 0));
    assert_remote_access_error(&mut p, &target, WcOpcode::RdmaWrite);
}

#[test]
fn a_dropped_write_is_noticed_by_the_next_requests_sequence_number() {
    let (mut p, local, target) = setup(rw());
    p.a.set_faults(FaultPlan::rule(
        Some(FrameKind::Write),
        0,
        FaultAction::Drop,
    ));
    write_at(&mut p, &local, remote(&target, 0));
    // Lost without a trace: no completion yet (the layer above needs its own timeout).
    assert!(Pair::completions(&mut p.a).is_empty());
    p.a.post_send(SendWr::Write {
        wr_id: 8,
        sge: sge(&local, 0, 8),
        remote: remote(&target, 0),
    })
    .expect("post");
    p.run();
    assert_eq!(
        Pair::completions(&mut p.b),
        [async_error(WcStatus::Protocol)]
    );
    assert_eq!(
        Pair::completions(&mut p.a),
        [
            async_error(WcStatus::Protocol),
            wc(7, WcOpcode::RdmaWrite, WcStatus::Flushed, 0),
            wc(8, WcOpcode::RdmaWrite, WcStatus::Flushed, 0)
        ]
    );
}

#[test]
fn an_injected_registration_failure_fails_one_registration() {
    let mut ep = Endpoint::new(QpConfig::default());
    ep.set_faults(FaultPlan::failing_registrations(1));
    assert_eq!(
        ep.register(8, Access::NONE, VaMode::ZeroBased),
        Err(RegisterError::Injected)
    );
    assert!(ep.register(8, Access::NONE, VaMode::ZeroBased).is_ok());
}

#[test]
fn a_full_send_queue_refuses_the_post() {
    let mut ep = Endpoint::new(QpConfig {
        send_queue_depth: 2,
        ..QpConfig::default()
    });
    let mr = ep.register(8, Access::NONE, VaMode::ZeroBased).expect("mr");
    let wr = |wr_id| SendWr::Write {
        wr_id,
        sge: sge(&mr, 0, 8),
        remote: remote(&mr, 0),
    };
    assert_eq!(ep.post_send(wr(1)), Ok(()));
    assert_eq!(ep.post_send(wr(2)), Ok(()));
    assert_eq!(ep.post_send(wr(3)), Err(PostError::QueueFull));
}

#[test]
fn completions_keep_posting_order_across_reads_and_writes() {
    let (mut p, local, target) = setup(rw());
    p.a.post_send(SendWr::Read {
        wr_id: 1,
        sge: sge(&local, 0, 64),
        remote: remote(&target, 0),
    })
    .expect("post");
    p.a.post_send(SendWr::Write {
        wr_id: 2,
        sge: sge(&local, 64, 64),
        remote: remote(&target, 64),
    })
    .expect("post");
    p.a.post_send(SendWr::LocalInvalidate {
        wr_id: 3,
        stag: local.stag,
    })
    .expect("post");
    p.run();
    let ids: Vec<_> = Pair::completions(&mut p.a)
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        ids,
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
}

/// Requests deferred past the next Read Response: B reads A's memory and sees the data
/// before the two Sends A posted earlier, which still arrive in their own order.
#[test]
fn deferred_sends_arrive_after_the_next_read_response_in_order() {
    let (mut p, local, _) = setup(rw());
    let readable =
        p.a.register(
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_READ,
            VaMode::ZeroBased,
        )
        .expect("readable");
    p.a.pd.fill(readable.stag, 0, &[0x5a; 64]).expect("fill");
    let inbox =
        p.b.register(512, Access::LOCAL_WRITE, VaMode::ZeroBased)
            .expect("inbox");
    let sink =
        p.b.register(64, Access::LOCAL_WRITE, VaMode::ZeroBased)
            .expect("sink");
    for (wr_id, offset) in [(20, 0), (21, 256)] {
        p.b.post_recv(RecvWr {
            wr_id,
            sge: sge(&inbox, offset, 256),
        })
        .expect("recv");
    }
    p.a.set_faults(FaultPlan::rule(
        Some(FrameKind::Send),
        0,
        FaultAction::DeferPastReadResponse,
    ));
    for (wr_id, len) in [(1, 40), (2, 48)] {
        p.a.post_send(SendWr::Send {
            wr_id,
            sge: sge(&local, 0, len),
            invalidate: None,
        })
        .expect("send");
    }
    p.run();
    assert!(Pair::completions(&mut p.b).is_empty(), "the Sends wait");
    p.b.post_send(SendWr::Read {
        wr_id: 30,
        sge: sge(&sink, 0, 64),
        remote: remote(&readable, 0),
    })
    .expect("read");
    p.run();
    assert_eq!(
        Pair::completions(&mut p.b),
        [
            wc(30, WcOpcode::RdmaRead, WcStatus::Success, 64),
            wc(20, WcOpcode::Recv, WcStatus::Success, 40),
            wc(21, WcOpcode::Recv, WcStatus::Success, 48),
        ]
    );
    assert_eq!(
        Pair::completions(&mut p.a),
        [
            wc(1, WcOpcode::Send, WcStatus::Success, 40),
            wc(2, WcOpcode::Send, WcStatus::Success, 48),
        ]
    );
    assert_eq!(p.b.state(), QpState::Ready);
    // Later Sends go at once.
    p.b.post_recv(RecvWr {
        wr_id: 22,
        sge: sge(&inbox, 0, 256),
    })
    .expect("recv");
    p.a.post_send(SendWr::Send {
        wr_id: 3,
        sge: sge(&local, 0, 8),
        invalidate: None,
    })
    .expect("send");
    p.run();
    assert_eq!(
        Pair::completions(&mut p.b),
        [wc(22, WcOpcode::Recv, WcStatus::Success, 8)]
    );
}

/// A: a 4 KiB local sink. B: 300 bytes gathered from three chunks of 100 at 0x20_0000.
fn setup_gathered() -> (Pair, MemoryRegion, MemoryRegion, Vec<u8>) {
    let mut p = Pair::new();
    let local =
        p.a.register(4096, Access::LOCAL_WRITE, VaMode::ZeroBased)
            .expect("register local");
    let data: Vec<u8> = (0..300u32).map(|i| (i * 11 + 5) as u8).collect();
    let chunks = data
        .chunks(100)
        .map(bytes::Bytes::copy_from_slice)
        .collect();
    let gathered =
        p.b.register_gathered(chunks, Access::REMOTE_READ, VaMode::Based(0x20_0000))
            .expect("register gathered");
    (p, local, gathered, data)
}

#[test]
fn rdma_reads_of_a_gathered_region_return_its_chunks_in_order() {
    let (mut p, local, gathered, data) = setup_gathered();
    // One read inside a chunk, one across all three.
    for (wr_id, offset, len) in [(1u64, 110u64, 80u32), (2, 50, 250)] {
        p.a.post_send(SendWr::Read {
            wr_id,
            sge: sge(&local, 0, len),
            remote: remote(&gathered, offset),
        })
        .expect("post");
        p.run();
        assert_eq!(
            Pair::completions(&mut p.a),
            [wc(wr_id, WcOpcode::RdmaRead, WcStatus::Success, len)]
        );
        let at = offset as usize;
        assert_eq!(
            &*p.a.pd.contents(local.stag, 0, u64::from(len)).expect("c"),
            &data[at..at + len as usize]
        );
    }
}

#[test]
fn an_rdma_read_past_a_gathered_regions_end_is_a_remote_access_error() {
    let (mut p, local, gathered, _) = setup_gathered();
    p.a.post_send(SendWr::Read {
        wr_id: 7,
        sge: sge(&local, 0, 101),
        remote: remote(&gathered, 200),
    })
    .expect("post");
    p.run();
    assert_eq!(
        Pair::completions(&mut p.a),
        [wc(7, WcOpcode::RdmaRead, WcStatus::RemoteAccess, 0)]
    );
    assert_eq!(
        Pair::completions(&mut p.b),
        [async_error(WcStatus::RemoteAccess)]
    );
}

#[test]
fn an_rdma_write_into_a_gathered_region_is_a_remote_access_error() {
    let (mut p, local, gathered, data) = setup_gathered();
    write_at(&mut p, &local, remote(&gathered, 0));
    assert_eq!(
        Pair::completions(&mut p.a),
        [wc(7, WcOpcode::RdmaWrite, WcStatus::RemoteAccess, 0)]
    );
    assert_eq!(
        &*p.b
            .pd
            .contents(gathered.stag, gathered.base_va, 300)
            .expect("c"),
        &data[..]
    );
}
