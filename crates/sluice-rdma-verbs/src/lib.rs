//! A verbs RDMA provider for sluice's datamovers: real RNICs and soft-RoCE (rxe) through
//! libibverbs and librdmacm, by way of the `sideway` crate, behind the `verbs` feature.
//!
//! sluice-rdma's software provider and this one share a vocabulary (sluice-rdma's
//! [`Access`](sluice_rdma::Access), [`Sge`](sluice_rdma::Sge), [`SendWr`](sluice_rdma::SendWr),
//! [`RecvWr`](sluice_rdma::RecvWr), [`WorkCompletion`](sluice_rdma::WorkCompletion)), so an
//! iSER datamover written against it can run on either. This crate maps that vocabulary onto
//! verbs:
//!
//! - [`access`]: rights and addressing as `ibv_access_flags` (remote write without local
//!   write refused as `ibv_reg_mr` refuses it; ZBVA as `IBV_ACCESS_ZERO_BASED`), and a
//!   work request's scatter/gather entry resolved to lkey and process address inside its
//!   region, checked before anything is posted;
//! - [`work`]: Send, RDMA Write and RDMA Read as `ibv_wr_opcode`s (Send with Invalidate and
//!   local invalidate are refused: sideway 0.4.3 cannot post them), and `ibv_wc` statuses and
//!   opcodes back as sluice-rdma's;
//! - [`private_data`]: the iSER CM header (RFC 7145 section 9.1) within RDMA-CM's private
//!   data limits, and what a target answers to a request;
//! - `verbs` (with the feature): devices, protection domains, registered regions, a
//!   reliable-connected queue pair with send and receive completion queues, and RDMA-CM
//!   connect and listen.
//!
//! Everything but `verbs` is built and tested in every build; the feature needs cmake and
//! libclang to build sideway's bindings and libibverbs and librdmacm (Debian's
//! libibverbs-dev, librdmacm-dev) at run time. Without an RDMA device, opening one fails with
//! [`VerbsError::NoDevice`], whose message says how to set up soft-RoCE (docs/iser.md).
//!
//! `unsafe` is denied in the crate and allowed in two modules of the feature:
//! `verbs/memory.rs` (registering an allocation the region owns, and copies into and out of
//! it) and `verbs/queue.rs` (handing the device the address of a checked range of such a
//! region in a work request).

#![deny(unsafe_code)]

pub mod access;
mod error;
pub mod private_data;
pub mod work;

#[cfg(feature = "verbs")]
pub mod verbs;

pub use error::VerbsError;

#[cfg(all(test, feature = "verbs"))]
mod sideway_values {
    //! The verbs constants this crate writes down agree with the ones sideway binds from
    //! rdma-core's headers.
    use crate::access::*;
    use crate::work::{wc_opcode, wc_status};
    use sideway::ibverbs::completion::{
        WorkCompletionOperationType as Op, WorkCompletionStatus as St,
    };
    use sideway::ibverbs::AccessFlags;

    #[test]
    fn constants_match_rdma_core() {
        assert_eq!(
            AccessFlags::LocalWrite.bits() as u32,
            IBV_ACCESS_LOCAL_WRITE
        );
        assert_eq!(
            AccessFlags::RemoteWrite.bits() as u32,
            IBV_ACCESS_REMOTE_WRITE
        );
        assert_eq!(
            AccessFlags::RemoteRead.bits() as u32,
            IBV_ACCESS_REMOTE_READ
        );
        assert_eq!(AccessFlags::ZeroBased.bits() as u32, IBV_ACCESS_ZERO_BASED);
        for (ours, theirs) in [
            (wc_status::SUCCESS, St::Success),
            (wc_status::LOC_LEN_ERR, St::LocalLengthError),
            (wc_status::LOC_QP_OP_ERR, St::LocalQueuePairOperationError),
            (wc_status::LOC_PROT_ERR, St::LocalProtectionError),
            (wc_status::WR_FLUSH_ERR, St::WorkRequestFlushedError),
            (wc_status::BAD_RESP_ERR, St::BadResponseError),
            (wc_status::LOC_ACCESS_ERR, St::LocalAccessError),
            (wc_status::REM_INV_REQ_ERR, St::RemoteInvalidRequestError),
            (wc_status::REM_ACCESS_ERR, St::RemoteAccessError),
            (wc_status::REM_OP_ERR, St::RemoteOperationError),
            (wc_status::RETRY_EXC_ERR, St::RetryCounterExceededError),
            (
                wc_status::RNR_RETRY_EXC_ERR,
                St::ResponderNotReadyRetryCounterExceededError,
            ),
        ] {
            assert_eq!(ours, theirs as u32);
        }
        for (ours, theirs) in [
            (wc_opcode::SEND, Op::Send),
            (wc_opcode::RDMA_WRITE, Op::Write),
            (wc_opcode::RDMA_READ, Op::Read),
            (wc_opcode::LOCAL_INV, Op::LocalInvalidate),
            (wc_opcode::RECV, Op::Receive),
        ] {
            assert_eq!(ours, theirs as u32);
        }
    }
}
