//! The verbs rules, checked on two sans-IO endpoints wired back to back.

use bytes::BytesMut;

use crate::*;

mod enforcement;
mod properties;

/// Two endpoints and the frames between them.
struct Pair {
    a: Endpoint,
    b: Endpoint,
}

fn deliver(from: &mut Endpoint, to: &mut Endpoint) -> usize {
    let mut n = 0;
    while let Some(out) = from.poll_transmit() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&out.head);
        buf.extend_from_slice(&out.payload);
        to.handle_bytes(&mut buf);
        n += 1;
    }
    n
}

impl Pair {
    fn new() -> Self {
        Self::with(QpConfig::default(), QpConfig::default())
    }

    fn with(a: QpConfig, b: QpConfig) -> Self {
        let mut p = Pair {
            a: Endpoint::new(a),
            b: Endpoint::new(b),
        };
        p.run();
        assert_eq!(p.a.state(), QpState::Ready);
        assert_eq!(p.b.state(), QpState::Ready);
        p
    }

    /// Moves frames both ways until neither side has anything to send.
    fn run(&mut self) {
        while deliver(&mut self.a, &mut self.b) + deliver(&mut self.b, &mut self.a) > 0 {}
    }

    fn completions(ep: &mut Endpoint) -> Vec<WorkCompletion> {
        std::iter::from_fn(|| ep.poll_completion()).collect()
    }
}

fn rw() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ
}

fn sge(mr: &MemoryRegion, offset: u64, len: u32) -> Sge {
    Sge {
        stag: mr.stag,
        va: mr.base_va + offset,
        len,
    }
}

fn remote(mr: &MemoryRegion, offset: u64) -> RemoteAddr {
    RemoteAddr {
        stag: mr.stag,
        va: mr.base_va.wrapping_add(offset),
    }
}

fn wc(wr_id: u64, opcode: WcOpcode, status: WcStatus, byte_len: u32) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        opcode,
        status,
        byte_len,
        invalidated: None,
    }
}

fn async_error(status: WcStatus) -> WorkCompletion {
    wc(0, WcOpcode::AsyncError, status, 0)
}

/// A: a 4 KiB local buffer filled with a pattern. B: a 4 KiB region with `access` at a
/// non-zero base.
fn setup(access: Access) -> (Pair, MemoryRegion, MemoryRegion) {
    let mut p = Pair::new();
    let local =
        p.a.register(4096, Access::LOCAL_WRITE, VaMode::ZeroBased)
            .expect("register local");
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    p.a.pd.fill(local.stag, 0, &pattern).expect("fill");
    let target =
        p.b.register(4096, access, VaMode::Based(0x10_0000))
            .expect("register target");
    (p, local, target)
}

/// Posts one RDMA Write of 100 bytes at `offset` of B's region and runs the pair.
fn write_at(p: &mut Pair, local: &MemoryRegion, to: RemoteAddr) {
    p.a.post_send(SendWr::Write {
        wr_id: 7,
        sge: sge(local, 0, 100),
        remote: to,
    })
    .expect("post");
    p.run();
}

/// The responder's region is untouched and both sides report the remote access error.
fn assert_remote_access_error(p: &mut Pair, target: &MemoryRegion, opcode: WcOpcode) {
    assert_eq!(
        Pair::completions(&mut p.a),
        [wc(7, opcode, WcStatus::RemoteAccess, 0)]
    );
    assert_eq!(
        Pair::completions(&mut p.b),
        [async_error(WcStatus::RemoteAccess)]
    );
    assert_eq!(p.a.state(), QpState::Error);
    assert_eq!(p.b.state(), QpState::Error);
    let untouched =
        p.b.pd
            .contents(target.stag, target.base_va, 4096)
            .expect("contents");
    assert!(untouched.iter().all(|&b| b == 0), "no byte was written");
}
