//! The fault test hook's place in the driver (`TargetConfig::fault_hook`): one connection's
//! [`DriverFaults`], shared by the reader (faults on receive) and the outbox (faults on
//! send), which live on the same task.
//!
//! Over TCP the hook sees the byte stream's frames. An iSER connection in RDMA mode has no
//! byte stream at the connection task: its PDUs pass to and from the datamover task as
//! values, and those are what the hook faults ([`on_send_pdu`], [`on_receive_pdu`]): drops,
//! duplicates and resets apply to the PDUs the core exchanges with the datamover, as they
//! would to its PDUs on a TCP connection. Corruption cannot apply: RDMA mode has no digests
//! (RFC 7145 section 5.1), so a flipped bit could not be noticed, and the hook leaves such
//! PDUs alone and counts them skipped, as on a TCP connection without digests.

use std::sync::{Arc, Mutex, MutexGuard};

use sluice_fault::DriverFaults;
use sluice_proto::pdu::Pdu;

/// One connection's hook.
pub(crate) type SharedFaults = Arc<Mutex<DriverFaults>>;

fn lock(f: &SharedFaults) -> MutexGuard<'_, DriverFaults> {
    f.lock().unwrap_or_else(|p| p.into_inner())
}

/// See [`DriverFaults::on_send`].
pub(crate) fn on_send(f: &SharedFaults, frame: &mut [u8]) -> u8 {
    lock(f).on_send(frame)
}

/// See [`DriverFaults::on_receive`].
pub(crate) fn on_receive(f: &SharedFaults, buf: &mut bytes::BytesMut, from: usize) {
    lock(f).on_receive(buf, from);
}

/// See [`DriverFaults::reset_due`].
pub(crate) fn reset_due(f: &SharedFaults) -> bool {
    lock(f).reset_due()
}

/// RDMA mode: faults one PDU the core hands to the datamover; how many copies of it to pass
/// on (0, 1 or 2).
pub(crate) fn on_send_pdu(f: &SharedFaults, pdu: &Pdu) -> u8 {
    lock(f).on_send_pdu(pdu)
}

/// RDMA mode: faults one PDU the datamover hands to the core; how many copies of it the core
/// gets (0, 1 or 2).
pub(crate) fn on_receive_pdu(f: &SharedFaults, pdu: &Pdu) -> u8 {
    lock(f).on_receive_pdu(pdu)
}
