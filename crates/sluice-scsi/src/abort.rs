//! Aborting a command while it runs.
//!
//! Most commands finish in microseconds, and the transport simply drops the answer of one it
//! aborted. A few run for as long as their data takes (EXTENDED COPY, WRITE SAME and UNMAP
//! over a whole LU, the wait of a SANITIZE with IMMED=0): the transport hands those an
//! [`AbortSignal`] ([`ScsiTarget::execute_long`](crate::ScsiTarget::execute_long)) and raises
//! it on ABORT TASK, a task-set function, a reset or the loss of the I_T nexus (SAM-5 7.2,
//! 7.3); the command checks it between pieces of work and stops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A flag the transport raises to stop a running command. Clones share the flag.
#[derive(Clone, Debug, Default)]
pub struct AbortSignal(Arc<AtomicBool>);

impl AbortSignal {
    /// A signal not raised yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the command to stop.
    pub fn abort(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether [`abort`](Self::abort) was called.
    pub fn is_aborted(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// ABORTED COMMAND / NO ADDITIONAL SENSE INFORMATION: what an aborted command ends with, if
/// its answer is sent at all (the transport normally drops it).
pub(crate) fn aborted() -> crate::SenseData {
    crate::SenseData::new(crate::SenseKey::ABORTED_COMMAND, 0x00, 0x00)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_flag() {
        let a = AbortSignal::new();
        let b = a.clone();
        assert!(!b.is_aborted());
        a.abort();
        assert!(b.is_aborted());
    }
}
