//! What a session's recovery and task management did, counted where only the core can tell:
//! PDUs sent again, sequence timeouts, tasks aborted or reassigned, connections kept for
//! recovery. Plain integers updated under the session's lock the driver holds anyway; a
//! driver reads them with [`TargetSession::stats`](super::TargetSession::stats) (the target's
//! metrics do, at scrape time).

/// Counters of one session since it was created. They only grow.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct SessionStats {
    /// PDUs queued again at the initiator's request (Data/R2T, status and R-Data SNACKs,
    /// RFC 7143 section 11.16).
    pub pdus_resent: u64,
    /// Writes whose Data-Out did not arrive within the sequence reception timeout, each
    /// answered with recovery R2Ts (section 7.1.4.1).
    pub sequence_timeouts: u64,
    /// Data-Out PDUs lost to a data digest error, asked for again with a recovery R2T
    /// (section 7.8).
    pub lost_data_out: u64,
    /// Tasks ended by task management (ABORT TASK, ABORT TASK SET, CLEAR TASK SET, resets;
    /// section 11.5.1).
    pub tasks_aborted: u64,
    /// Tasks moved to another connection by TASK REASSIGN (section 7.2.2).
    pub tasks_reassigned: u64,
    /// Connections that failed with tasks kept for reassignment (ErrorRecoveryLevel 2,
    /// section 7.1.4.3).
    pub connections_orphaned: u64,
}
