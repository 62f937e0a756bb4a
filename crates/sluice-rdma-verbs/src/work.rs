//! Work requests and completions in verbs terms: sluice-rdma's [`SendWr`] and [`RecvWr`] as
//! what `ibv_post_send`/`ibv_post_recv` take, and `ibv_wc` status and opcode values as
//! [`WcStatus`] and [`WcOpcode`], so a datamover written against sluice-rdma's vocabulary
//! runs on either provider.

use sluice_rdma::{RecvWr, SendWr, WcOpcode, WcStatus};

use crate::access::{resolve, resolve_sink, RegionTable, VerbsSge};
use crate::error::VerbsError;

/// What a send work request does on the wire (`ibv_wr_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerbsOp {
    /// `IBV_WR_SEND`: into the peer's next posted receive.
    Send,
    /// `IBV_WR_RDMA_WRITE` to the peer's `remote_addr` through `rkey`.
    RdmaWrite {
        /// The peer's STag.
        rkey: u32,
        /// Address in the peer region's addressing.
        remote_addr: u64,
    },
    /// `IBV_WR_RDMA_READ` from the peer's `remote_addr` through `rkey`.
    RdmaRead {
        /// The peer's STag.
        rkey: u32,
        /// Address in the peer region's addressing.
        remote_addr: u64,
    },
}

/// One send work request ready to post: always signaled, so that each completes exactly
/// once in the completion queue, as sluice-rdma's do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerbsSendWr {
    /// The consumer's identifier.
    pub wr_id: u64,
    /// What it does.
    pub op: VerbsOp,
    /// The local buffer: the source of a Send or Write, the sink of a Read.
    pub sge: VerbsSge,
}

/// Translates a send work request. Send with Invalidate and local invalidate are refused:
/// sideway 0.4.3's work request builder has no `IBV_WR_SEND_WITH_INV` or
/// `IBV_WR_LOCAL_INV`, so a datamover on this provider advertises Send with Invalidate as not
/// supported in its iSER CM header (RFC 7145 section 9.1) and deregisters instead.
pub fn plan_send(regions: &impl RegionTable, wr: &SendWr) -> Result<VerbsSendWr, VerbsError> {
    match *wr {
        SendWr::Send {
            wr_id,
            sge,
            invalidate: None,
        } => Ok(VerbsSendWr {
            wr_id,
            op: VerbsOp::Send,
            sge: resolve(regions, sge)?,
        }),
        SendWr::Send {
            invalidate: Some(_),
            ..
        } => Err(VerbsError::Unsupported("Send with Invalidate")),
        SendWr::Write { wr_id, sge, remote } => Ok(VerbsSendWr {
            wr_id,
            op: VerbsOp::RdmaWrite {
                rkey: remote.stag.0,
                remote_addr: remote.va,
            },
            sge: resolve(regions, sge)?,
        }),
        SendWr::Read { wr_id, sge, remote } => Ok(VerbsSendWr {
            wr_id,
            op: VerbsOp::RdmaRead {
                rkey: remote.stag.0,
                remote_addr: remote.va,
            },
            sge: resolve_sink(regions, sge)?,
        }),
        SendWr::LocalInvalidate { .. } => Err(VerbsError::Unsupported("local invalidate")),
    }
}

/// Translates a receive work request: its buffer needs local write.
pub fn plan_recv(regions: &impl RegionTable, wr: &RecvWr) -> Result<(u64, VerbsSge), VerbsError> {
    Ok((wr.wr_id, resolve_sink(regions, wr.sge)?))
}

/// `ibv_wc_status` values (libibverbs `verbs.h`).
pub mod wc_status {
    /// `IBV_WC_SUCCESS`.
    pub const SUCCESS: u32 = 0;
    /// `IBV_WC_LOC_LEN_ERR`.
    pub const LOC_LEN_ERR: u32 = 1;
    /// `IBV_WC_LOC_QP_OP_ERR`.
    pub const LOC_QP_OP_ERR: u32 = 2;
    /// `IBV_WC_LOC_PROT_ERR`.
    pub const LOC_PROT_ERR: u32 = 4;
    /// `IBV_WC_WR_FLUSH_ERR`.
    pub const WR_FLUSH_ERR: u32 = 5;
    /// `IBV_WC_BAD_RESP_ERR`.
    pub const BAD_RESP_ERR: u32 = 7;
    /// `IBV_WC_LOC_ACCESS_ERR`.
    pub const LOC_ACCESS_ERR: u32 = 8;
    /// `IBV_WC_REM_INV_REQ_ERR`.
    pub const REM_INV_REQ_ERR: u32 = 9;
    /// `IBV_WC_REM_ACCESS_ERR`.
    pub const REM_ACCESS_ERR: u32 = 10;
    /// `IBV_WC_REM_OP_ERR`.
    pub const REM_OP_ERR: u32 = 11;
    /// `IBV_WC_RETRY_EXC_ERR`.
    pub const RETRY_EXC_ERR: u32 = 12;
    /// `IBV_WC_RNR_RETRY_EXC_ERR`.
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
}

/// `ibv_wc_opcode` values.
pub mod wc_opcode {
    /// `IBV_WC_SEND`.
    pub const SEND: u32 = 0;
    /// `IBV_WC_RDMA_WRITE`.
    pub const RDMA_WRITE: u32 = 1;
    /// `IBV_WC_RDMA_READ`.
    pub const RDMA_READ: u32 = 2;
    /// `IBV_WC_LOCAL_INV`.
    pub const LOCAL_INV: u32 = 6;
    /// `IBV_WC_RECV`.
    pub const RECV: u32 = 128;
}

/// A completion's status as sluice-rdma names it. Statuses with no counterpart there (a
/// transport retry count exceeded, a bad response, the reliable-datagram and tag-matching
/// errors) are the connection failing underneath: [`WcStatus::TransportLost`].
pub fn completion_status(status: u32) -> WcStatus {
    match status {
        wc_status::SUCCESS => WcStatus::Success,
        wc_status::LOC_LEN_ERR => WcStatus::LocalLength,
        wc_status::LOC_PROT_ERR | wc_status::LOC_ACCESS_ERR => WcStatus::LocalProtection,
        wc_status::WR_FLUSH_ERR => WcStatus::Flushed,
        wc_status::REM_INV_REQ_ERR => WcStatus::RemoteInvalidRequest,
        wc_status::REM_ACCESS_ERR => WcStatus::RemoteAccess,
        wc_status::REM_OP_ERR => WcStatus::RemoteOperation,
        wc_status::RNR_RETRY_EXC_ERR => WcStatus::ReceiverNotReady,
        wc_status::LOC_QP_OP_ERR => WcStatus::Protocol,
        _ => WcStatus::TransportLost,
    }
}

/// A completion's opcode as sluice-rdma names it; `None` for operations it never posts
/// (atomics, memory window binds, tag matching). A failed completion's opcode is undefined
/// in verbs, so the caller takes it from the work request it posted.
pub fn completion_opcode(opcode: u32) -> Option<WcOpcode> {
    Some(match opcode {
        wc_opcode::SEND => WcOpcode::Send,
        wc_opcode::RDMA_WRITE => WcOpcode::RdmaWrite,
        wc_opcode::RDMA_READ => WcOpcode::RdmaRead,
        wc_opcode::LOCAL_INV => WcOpcode::LocalInvalidate,
        wc_opcode::RECV => WcOpcode::Recv,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{RegionEntry, IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ};
    use sluice_rdma::{RemoteAddr, STag, Sge};

    struct One(RegionEntry);

    impl RegionTable for One {
        fn region(&self, stag: STag) -> Option<RegionEntry> {
            (stag.0 == self.0.lkey).then_some(self.0)
        }
    }

    fn table(access: u32) -> One {
        One(RegionEntry {
            lkey: 7,
            rkey: 8,
            addr: 0x1000,
            base_va: 0,
            len: 4096,
            access,
        })
    }

    const SGE: Sge = Sge {
        stag: STag(7),
        va: 16,
        len: 32,
    };
    const REMOTE: RemoteAddr = RemoteAddr {
        stag: STag(0x99),
        va: 0x2000,
    };

    #[test]
    fn send_write_and_read_map_to_verbs_opcodes() {
        let t = table(IBV_ACCESS_LOCAL_WRITE);
        let local = VerbsSge {
            addr: 0x1010,
            length: 32,
            lkey: 7,
        };
        let send = SendWr::Send {
            wr_id: 1,
            sge: SGE,
            invalidate: None,
        };
        assert_eq!(
            plan_send(&t, &send),
            Ok(VerbsSendWr {
                wr_id: 1,
                op: VerbsOp::Send,
                sge: local
            })
        );
        let write = SendWr::Write {
            wr_id: 2,
            sge: SGE,
            remote: REMOTE,
        };
        assert_eq!(
            plan_send(&t, &write).map(|w| w.op),
            Ok(VerbsOp::RdmaWrite {
                rkey: 0x99,
                remote_addr: 0x2000
            })
        );
        let read = SendWr::Read {
            wr_id: 3,
            sge: SGE,
            remote: REMOTE,
        };
        assert_eq!(
            plan_send(&t, &read).map(|w| (w.wr_id, w.op, w.sge)),
            Ok((
                3,
                VerbsOp::RdmaRead {
                    rkey: 0x99,
                    remote_addr: 0x2000
                },
                local
            ))
        );
        assert_eq!(
            plan_recv(&t, &RecvWr { wr_id: 4, sge: SGE }),
            Ok((4, local))
        );
    }

    #[test]
    fn what_cannot_be_posted_is_refused_before_posting() {
        let t = table(IBV_ACCESS_REMOTE_READ);
        let read = SendWr::Read {
            wr_id: 3,
            sge: SGE,
            remote: REMOTE,
        };
        assert_eq!(plan_send(&t, &read), Err(VerbsError::NoLocalWrite(STag(7))));
        assert_eq!(
            plan_recv(&t, &RecvWr { wr_id: 4, sge: SGE }),
            Err(VerbsError::NoLocalWrite(STag(7)))
        );
        let inv = SendWr::Send {
            wr_id: 1,
            sge: SGE,
            invalidate: Some(STag(5)),
        };
        assert_eq!(
            plan_send(&t, &inv),
            Err(VerbsError::Unsupported("Send with Invalidate"))
        );
        assert_eq!(
            plan_send(
                &t,
                &SendWr::LocalInvalidate {
                    wr_id: 9,
                    stag: STag(7)
                }
            ),
            Err(VerbsError::Unsupported("local invalidate"))
        );
    }

    #[test]
    fn completions_map_to_sluice_rdma_statuses() {
        assert_eq!(completion_status(wc_status::SUCCESS), WcStatus::Success);
        assert_eq!(
            completion_status(wc_status::REM_ACCESS_ERR),
            WcStatus::RemoteAccess
        );
        assert_eq!(
            completion_status(wc_status::WR_FLUSH_ERR),
            WcStatus::Flushed
        );
        assert_eq!(
            completion_status(wc_status::RNR_RETRY_EXC_ERR),
            WcStatus::ReceiverNotReady
        );
        assert_eq!(
            completion_status(wc_status::RETRY_EXC_ERR),
            WcStatus::TransportLost
        );
        assert_eq!(completion_status(999), WcStatus::TransportLost);
        assert_eq!(completion_opcode(wc_opcode::RECV), Some(WcOpcode::Recv));
        assert_eq!(
            completion_opcode(wc_opcode::RDMA_READ),
            Some(WcOpcode::RdmaRead)
        );
        assert_eq!(completion_opcode(3), None);
    }
}
