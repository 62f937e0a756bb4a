//! Properties over random transfers and random mixes of good and bad work requests.

use proptest::prelude::*;

use super::*;

proptest! {
    /// Writes and reads of random ranges inside random regions move exactly those bytes:
    /// the destination range holds the source bytes, every other byte is untouched.
    #[test]
    fn transfers_move_exactly_the_addressed_bytes(
        region_len in 1u64..2048,
        zero_based in any::<bool>(),
        ops in proptest::collection::vec((any::<bool>(), any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<prop::sample::Index>()), 1..12),
        seed in any::<u8>(),
    ) {
        let mut p = Pair::new();
        let va = if zero_based { VaMode::ZeroBased } else { VaMode::Based(0xdead_0000) };
        let a = p.a.register(region_len, Access::LOCAL_WRITE, VaMode::ZeroBased).expect("a");
        let b = p.b.register(region_len, rw(), va).expect("b");
        let fill = |salt: u8| -> Vec<u8> { (0..region_len).map(|i| (i as u8).wrapping_mul(31) ^ salt).collect() };
        p.a.pd.fill(a.stag, 0, &fill(seed)).expect("fill a");
        p.b.pd.fill(b.stag, b.base_va, &fill(!seed)).expect("fill b");
        let mut model_a = fill(seed);
        let mut model_b = fill(!seed);
        for (i, (is_write, len, src, dst)) in ops.into_iter().enumerate() {
            let len = len.index(region_len as usize + 1) as u64;
            let src = src.index((region_len - len) as usize + 1) as u64;
            let dst = dst.index((region_len - len) as usize + 1) as u64;
            let wr_id = i as u64;
            if is_write {
                // A[src..] -> B[dst..]
                p.a.post_send(SendWr::Write { wr_id, sge: sge(&a, src, len as u32), remote: remote(&b, dst) }).expect("post");
                let (s, d) = (src as usize, dst as usize);
                let chunk = model_a[s..s + len as usize].to_vec();
                model_b[d..d + len as usize].copy_from_slice(&chunk);
            } else {
                // B[src..] -> A[dst..]
                p.a.post_send(SendWr::Read { wr_id, sge: sge(&a, dst, len as u32), remote: remote(&b, src) }).expect("post");
                let (s, d) = (src as usize, dst as usize);
                let chunk = model_b[s..s + len as usize].to_vec();
                model_a[d..d + len as usize].copy_from_slice(&chunk);
            }
            p.run();
            let done = Pair::completions(&mut p.a);
            prop_assert_eq!(done.len(), 1);
            prop_assert_eq!(done[0].status, WcStatus::Success);
            prop_assert_eq!(u64::from(done[0].byte_len), len);
        }
        prop_assert_eq!(p.a.pd.contents(a.stag, 0, region_len).expect("a"), &model_a[..]);
        prop_assert_eq!(p.b.pd.contents(b.stag, b.base_va, region_len).expect("b"), &model_b[..]);
    }

    /// Any access that leaves the region by at least one byte is refused and writes nothing.
    #[test]
    fn transfers_leaving_the_region_move_nothing(
        region_len in 1u64..512,
        start in 0u64..1024,
        len in 1u32..1024,
        is_write in any::<bool>(),
    ) {
        prop_assume!(start + u64::from(len) > region_len);
        let mut p = Pair::new();
        let a = p.a.register(1024, Access::LOCAL_WRITE, VaMode::ZeroBased).expect("a");
        let b = p.b.register(region_len, rw(), VaMode::Based(4096)).expect("b");
        p.a.pd.fill(a.stag, 0, &[0x11; 1024]).expect("fill");
        let wr = if is_write {
            SendWr::Write { wr_id: 7, sge: sge(&a, 0, len), remote: remote(&b, start) }
        } else {
            SendWr::Read { wr_id: 7, sge: sge(&a, 0, len), remote: remote(&b, start) }
        };
        p.a.post_send(wr).expect("post");
        p.run();
        let done = Pair::completions(&mut p.a);
        prop_assert_eq!(done[0].status, WcStatus::RemoteAccess);
        prop_assert!(p.b.pd.contents(b.stag, 4096, region_len).expect("b").iter().all(|&x| x == 0));
        prop_assert!(p.a.pd.contents(a.stag, 0, 1024).expect("a").iter().all(|&x| x == 0x11));
    }
}

/// One operation of the bookkeeping property below.
#[derive(Clone, Debug)]
enum Op {
    Write {
        offset: u64,
        len: u32,
        good_key: bool,
    },
    Read {
        offset: u64,
        len: u32,
        good_key: bool,
    },
    Send {
        len: u32,
        invalidate: bool,
    },
    Recv {
        len: u32,
    },
    InvalidateRemote,
    Run,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u64..600, 0u32..600, proptest::bool::weighted(0.9)).prop_map(
            |(offset, len, good_key)| Op::Write {
                offset,
                len,
                good_key
            }
        ),
        (0u64..600, 0u32..600, proptest::bool::weighted(0.9)).prop_map(
            |(offset, len, good_key)| Op::Read {
                offset,
                len,
                good_key
            }
        ),
        (0u32..80, proptest::bool::weighted(0.1))
            .prop_map(|(len, invalidate)| Op::Send { len, invalidate }),
        (0u32..80).prop_map(|len| Op::Recv { len }),
        Just(Op::InvalidateRemote),
        Just(Op::Run),
    ]
}

proptest! {
    /// Whatever mix of good and bad work requests two endpoints see, every posted work
    /// request completes exactly once, send work requests in posting order, and a queue
    /// pair that reported an error is in the error state.
    #[test]
    fn every_work_request_completes_exactly_once_and_in_order(ops in proptest::collection::vec(op(), 1..40)) {
        let mut p = Pair::new();
        let local = p.a.register(1024, Access::LOCAL_WRITE, VaMode::ZeroBased).expect("local");
        let target = p.b.register(512, rw(), VaMode::Based(0x9000)).expect("target");
        let inbox = p.b.register(1024, Access::LOCAL_WRITE, VaMode::ZeroBased).expect("inbox");
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        let mut a_done = Vec::new();
        let mut b_done = Vec::new();
        for (i, op) in ops.into_iter().enumerate() {
            let wr_id = i as u64 + 1;
            let key = |good: bool| if good { target.stag } else { STag(target.stag.0 ^ 0x100) };
            match op {
                Op::Write { offset, len, good_key } => {
                    p.a.post_send(SendWr::Write { wr_id, sge: sge(&local, 0, len), remote: RemoteAddr { stag: key(good_key), va: target.base_va + offset } }).expect("post");
                    sends.push(wr_id);
                }
                Op::Read { offset, len, good_key } => {
                    p.a.post_send(SendWr::Read { wr_id, sge: sge(&local, 0, len), remote: RemoteAddr { stag: key(good_key), va: target.base_va + offset } }).expect("post");
                    sends.push(wr_id);
                }
                Op::Send { len, invalidate } => {
                    p.a.post_send(SendWr::Send { wr_id, sge: sge(&local, 0, len), invalidate: invalidate.then_some(target.stag) }).expect("post");
                    sends.push(wr_id);
                }
                Op::Recv { len } => {
                    p.b.post_recv(RecvWr { wr_id, sge: sge(&inbox, 0, len) }).expect("post");
                    recvs.push(wr_id);
                }
                Op::InvalidateRemote => {
                    p.b.post_send(SendWr::LocalInvalidate { wr_id, stag: target.stag }).expect("post");
                    recvs.push(wr_id);
                }
                Op::Run => p.run(),
            }
            a_done.extend(Pair::completions(&mut p.a));
            b_done.extend(Pair::completions(&mut p.b));
        }
        p.run();
        a_done.extend(Pair::completions(&mut p.a));
        b_done.extend(Pair::completions(&mut p.b));
        for (ep, done) in [(&p.a, &a_done), (&p.b, &b_done)] {
            if done.iter().any(|c| c.status != WcStatus::Success) {
                prop_assert_eq!(ep.state(), QpState::Error);
            }
        }
        // Whatever is still outstanding is flushed when the connection goes.
        p.a.handle_transport_lost();
        p.b.handle_transport_lost();
        a_done.extend(Pair::completions(&mut p.a));
        b_done.extend(Pair::completions(&mut p.b));
        let a_ids: Vec<u64> = a_done.iter().filter(|c| c.opcode != WcOpcode::AsyncError).map(|c| c.wr_id).collect();
        prop_assert_eq!(&a_ids, &sends, "A's send queue completes each once, in order");
        let mut b_ids: Vec<u64> = b_done.iter().filter(|c| c.opcode != WcOpcode::AsyncError).map(|c| c.wr_id).collect();
        b_ids.sort_unstable();
        prop_assert_eq!(&b_ids, &recvs, "B's work requests complete each once");
    }
}
