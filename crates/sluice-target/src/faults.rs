//! The fault test hook's place in the driver (`TargetConfig::fault_hook`): one connection's
//! [`DriverFaults`], shared by the reader (faults on receive) and the outbox (faults on
//! send), which live on the same task.

use std::sync::{Arc, Mutex, MutexGuard};

use sluice_fault::DriverFaults;

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
