//! What the simulated application does: reads and writes on random blocks, task management,
//! pings, text requests and the logout of one connection, and the check of every result.

use std::collections::BTreeMap;

use bytes::Bytes;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use sluice_proto::initiator::{
    Command, CommandData, CommandResult, Completion, ConnId, Failure, InitiatorSession, RequestId,
    TaskId,
};
use sluice_proto::pdu::codes::{ScsiStatus, TmfFunction, TmfResponse};
use sluice_proto::pdu::{Cdb, TaskAttr};
use sluice_proto::seq::Lun;

use crate::model::{block_data, Model, WriteFate, BLOCK};
use crate::net::log_uniform;

/// Blocks per simulated LUN.
pub(crate) const LUN_BLOCKS: u32 = 1024;

/// Sense key UNIT ATTENTION (SPC-4): reported before a command runs.
const UNIT_ATTENTION: u8 = 0x06;

#[derive(Debug)]
struct Op {
    lun: u16,
    lba: u32,
    blocks: u32,
    write: Option<u32>,
    /// A task management function was sent while it was outstanding, so it may be aborted.
    exposed: bool,
}

#[derive(Debug)]
enum Request {
    Tmf,
    Ping,
    Text { renegotiation: bool },
    Logout,
    SessionLogout,
}

/// Counts for the summary.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    /// Reads completed.
    pub reads: u64,
    /// Writes completed.
    pub writes: u64,
    /// Commands aborted by task management.
    pub aborted: u64,
    /// Commands that met a unit attention.
    pub unit_attentions: u64,
    /// Writes refused with TASK SET FULL (the target's write buffer was full).
    pub task_set_full: u64,
    /// Task management functions.
    pub tmfs: u64,
    /// Pings.
    pub pings: u64,
    /// Text exchanges.
    pub texts: u64,
    /// Connections logged out during the run.
    pub logouts: u64,
    /// Commands and requests that ended with a defined error because faults took a
    /// connection (or, at ErrorRecoveryLevel 0, a PDU) with them.
    pub lost_to_faults: u64,
    /// Commands that timed out (or ran out of retries) because the faults kept corrupting
    /// what recovery sent again.
    pub timed_out_by_faults: u64,
}

/// The workload and its bookkeeping.
#[derive(Debug)]
pub(crate) struct Workload {
    luns: u16,
    total: u32,
    issued: u32,
    pub(crate) queue_depth: usize,
    think_ns: u64,
    /// When the next operation may start.
    pub(crate) next_at: u64,
    weights: [u32; 6],
    // Ordered maps: a random pick among them must be the same in every run of a seed.
    ops: BTreeMap<TaskId, Op>,
    requests: BTreeMap<RequestId, Request>,
    next_write: u32,
    model: Model,
    pub(crate) counts: Counts,
    logout_sent: bool,
    pub(crate) logged_out: bool,
    /// Faults may end commands and requests with a defined error: a connection was lost
    /// (ErrorRecoveryLevel below 2), or a PDU at level 0.
    pub(crate) lossy: bool,
    /// Faults are injected: a command may time out where the link can no longer carry its
    /// PDUs whole (a bit error rate that hits nearly every large PDU).
    pub(crate) faulty: bool,
    /// A connection was lost (at any level): requests it carried (task management, pings,
    /// text, a connection's logout) may end with "connection lost". Commands may not at
    /// ErrorRecoveryLevel 2, where they are reassigned.
    pub(crate) connections_lost: bool,
}

impl Workload {
    pub(crate) fn new(rng: &mut ChaCha8Rng, luns: u16, total: u32) -> Self {
        Self {
            luns,
            total,
            issued: 0,
            queue_depth: rng.gen_range(1..=32),
            think_ns: if rng.gen_bool(0.5) {
                0
            } else {
                log_uniform(rng, 1_000, 5_000_000)
            },
            next_at: 0,
            // read, write, task management, ping, text, logout of a connection
            weights: [
                rng.gen_range(10..=60),
                rng.gen_range(10..=60),
                rng.gen_range(0..=6),
                rng.gen_range(0..=6),
                rng.gen_range(0..=4),
                rng.gen_range(0..=3),
            ],
            ops: BTreeMap::new(),
            requests: BTreeMap::new(),
            next_write: 1,
            model: Model::default(),
            counts: Counts::default(),
            logout_sent: false,
            logged_out: false,
            lossy: false,
            faulty: false,
            connections_lost: false,
        }
    }

    /// Whether every operation was issued and answered.
    pub(crate) fn done(&self) -> bool {
        self.issued >= self.total && self.ops.is_empty() && self.requests.is_empty()
    }

    /// Whether the workload wants to act at `now`.
    pub(crate) fn wants(&self, now: u64) -> bool {
        self.issued < self.total && now >= self.next_at && self.ops.len() < self.queue_depth
    }

    /// When the workload acts next, if it can without waiting for a completion.
    pub(crate) fn next_time(&self) -> Option<u64> {
        (self.issued < self.total && self.ops.len() < self.queue_depth).then_some(self.next_at)
    }

    /// Starts operations while the queue depth allows.
    pub(crate) fn act(
        &mut self,
        now: u64,
        at: std::time::Instant,
        s: &mut InitiatorSession,
        rng: &mut ChaCha8Rng,
    ) {
        while self.wants(now) {
            self.issued += 1;
            self.next_at = now
                + if self.think_ns == 0 {
                    0
                } else {
                    rng.gen_range(0..=self.think_ns)
                };
            let total: u32 = self.weights.iter().sum::<u32>().max(1);
            let mut pick = rng.gen_range(0..total);
            let mut kind = 0;
            for (i, w) in self.weights.iter().enumerate() {
                if pick < *w {
                    kind = i;
                    break;
                }
                pick -= w;
            }
            match kind {
                0 | 1 => self.command(kind == 1, at, s, rng),
                2 => self.tmf(at, s, rng),
                3 => {
                    let id = s.ping(at);
                    self.requests.insert(id, Request::Ping);
                }
                4 => {
                    let renegotiation = rng.gen_bool(0.3);
                    let pairs = if renegotiation {
                        vec![("MaxBurstLength".to_owned(), "512".to_owned())]
                    } else {
                        vec![("SendTargets".to_owned(), "All".to_owned())]
                    };
                    let id = s.text(&pairs);
                    self.requests.insert(id, Request::Text { renegotiation });
                }
                _ => {
                    let live: Vec<ConnId> = s.live_connections().collect();
                    if live.len() >= 2 {
                        let conn = live[rng.gen_range(0..live.len())];
                        let id = s.logout_connection(conn);
                        self.requests.insert(id, Request::Logout);
                    }
                }
            }
            if !self.wants(now) {
                break;
            }
        }
    }

    fn command(
        &mut self,
        write: bool,
        at: std::time::Instant,
        s: &mut InitiatorSession,
        rng: &mut ChaCha8Rng,
    ) {
        let lun = rng.gen_range(0..self.luns);
        let blocks = log_uniform(rng, 1, 256) as u32;
        let lba = rng.gen_range(0..=LUN_BLOCKS - blocks);
        if !self.model.take(lun, lba, blocks) {
            // Those blocks are busy: this operation does nothing (never two commands on one
            // block at once, so what a read sees is known).
            return;
        }
        let mut cdb = [0u8; 10];
        cdb[0] = if write { 0x2a } else { 0x28 };
        cdb[2..6].copy_from_slice(&lba.to_be_bytes());
        cdb[7..9].copy_from_slice(&(blocks as u16).to_be_bytes());
        let (data, id) = if write {
            let id = self.next_write;
            self.next_write += 1;
            let mut buf = Vec::with_capacity(blocks as usize * BLOCK);
            for b in lba..lba + blocks {
                block_data(id, lun, b, &mut buf);
            }
            (CommandData::Write(Bytes::from(buf)), Some(id))
        } else {
            (CommandData::Read(blocks * BLOCK as u32), None)
        };
        let task = s.submit(
            Command {
                lun: Lun::from_number(lun),
                cdb: Cdb::new(&cdb),
                data,
                attr: TaskAttr::Simple,
            },
            at,
        );
        self.ops.insert(
            task,
            Op {
                lun,
                lba,
                blocks,
                write: id,
                exposed: false,
            },
        );
    }

    fn tmf(&mut self, at: std::time::Instant, s: &mut InitiatorSession, rng: &mut ChaCha8Rng) {
        for op in self.ops.values_mut() {
            op.exposed = true;
        }
        let lun = Lun::from_number(rng.gen_range(0..self.luns));
        let (function, referenced) = match rng.gen_range(0..5) {
            0 | 1 => {
                let ids: Vec<TaskId> = self.ops.keys().copied().collect();
                let pick = (!ids.is_empty()).then(|| ids[rng.gen_range(0..ids.len())]);
                (TmfFunction::AbortTask, pick)
            }
            2 => (TmfFunction::AbortTaskSet, None),
            3 => (TmfFunction::ClearTaskSet, None),
            _ => (TmfFunction::LogicalUnitReset, None),
        };
        let id = s.task_management(function, lun, referenced, at);
        self.requests.insert(id, Request::Tmf);
    }

    /// What is left, for a violation's message.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} of {} operations issued, commands {:?} and requests {:?} outstanding, logout sent {}, logged out {}",
            self.issued,
            self.total,
            self.ops.keys().collect::<Vec<_>>(),
            self.requests,
            self.logout_sent,
            self.logged_out
        )
    }

    /// Whether the session's logout went out.
    pub(crate) fn logout_sent(&self) -> bool {
        self.logout_sent
    }

    /// Logs the session out once the work is done.
    pub(crate) fn finish(&mut self, s: &mut InitiatorSession) {
        if !self.logout_sent {
            self.logout_sent = true;
            let id = s.logout();
            self.requests.insert(id, Request::SessionLogout);
        }
    }

    /// Checks one completion.
    pub(crate) fn complete(&mut self, c: Completion) -> Result<(), String> {
        match c {
            Completion::Command(id, result) => {
                let Some(op) = self.ops.remove(&id) else {
                    return Err(format!("{id:?} completed twice, or was never submitted"));
                };
                self.model.release(op.lun, op.lba, op.blocks);
                self.command_done(&op, result)
            }
            Completion::TaskMgmt(id, Err(e)) if self.request_excused(&e) => {
                self.take(id, |r| matches!(r, Request::Tmf))?;
                Ok(())
            }
            Completion::TaskMgmt(id, result) => {
                self.take(id, |r| matches!(r, Request::Tmf))?;
                self.counts.tmfs += 1;
                match result {
                    Ok(TmfResponse::FunctionComplete | TmfResponse::TaskDoesNotExist) => Ok(()),
                    other => Err(format!("task management ended {other:?}")),
                }
            }
            Completion::Ping(id, Err(e)) if self.request_excused(&e) => {
                self.take(id, |r| matches!(r, Request::Ping))?;
                Ok(())
            }
            Completion::Ping(id, result) => {
                self.take(id, |r| matches!(r, Request::Ping))?;
                self.counts.pings += 1;
                result.map(drop).map_err(|e| format!("ping failed: {e}"))
            }
            Completion::Text(id, Err(e)) if self.request_excused(&e) => {
                self.take(id, |r| matches!(r, Request::Text { .. }))?;
                Ok(())
            }
            Completion::Logout(id, Err(e)) if self.request_excused(&e) => {
                let r = self.take(id, |r| {
                    matches!(r, Request::Logout | Request::SessionLogout)
                })?;
                if matches!(r, Request::SessionLogout) {
                    // The session must still end: ask again.
                    self.logout_sent = false;
                }
                Ok(())
            }
            Completion::Text(id, result) => {
                let r = self.take(id, |r| matches!(r, Request::Text { .. }))?;
                self.counts.texts += 1;
                let pairs = result.map_err(|e| format!("text exchange failed: {e}"))?;
                let ok = match r {
                    Request::Text {
                        renegotiation: true,
                    } => pairs == [("MaxBurstLength".to_owned(), "Reject".to_owned())],
                    _ => pairs.iter().any(|(k, _)| k == "TargetName"),
                };
                if ok {
                    Ok(())
                } else {
                    Err(format!("unexpected text answer {pairs:?}"))
                }
            }
            Completion::Logout(id, result) => {
                let r = self.take(id, |r| {
                    matches!(r, Request::Logout | Request::SessionLogout)
                })?;
                result.map_err(|e| format!("logout failed: {e}"))?;
                match r {
                    Request::SessionLogout => self.logged_out = true,
                    _ => self.counts.logouts += 1,
                }
                Ok(())
            }
        }
    }

    /// Whether faults excuse this failure (and counts it): any failure once a connection was
    /// lost below ErrorRecoveryLevel 2 (or a PDU at level 0); a timeout, or running out of
    /// retries or of data to resend, whenever faults are injected (a link that corrupts
    /// nearly every large PDU defeats any recovery).
    /// [`Self::excused`], and besides a request that died with its connection.
    fn request_excused(&mut self, e: &Failure) -> bool {
        if self.connections_lost && *e == Failure::ConnectionLost {
            self.counts.lost_to_faults += 1;
            return true;
        }
        self.excused(e)
    }

    fn excused(&mut self, e: &Failure) -> bool {
        if self.lossy {
            self.counts.lost_to_faults += 1;
            return true;
        }
        let given_up = matches!(
            e,
            Failure::Timeout | Failure::TooManyRetries | Failure::Unrecoverable
        );
        if self.faulty && given_up {
            self.counts.timed_out_by_faults += 1;
            return true;
        }
        false
    }

    fn take(&mut self, id: RequestId, kind: impl Fn(&Request) -> bool) -> Result<Request, String> {
        match self.requests.remove(&id) {
            Some(r) if kind(&r) => Ok(r),
            Some(r) => Err(format!("{id:?} completed as the wrong kind ({r:?})")),
            None => Err(format!("{id:?} completed twice, or was never submitted")),
        }
    }

    fn command_done(
        &mut self,
        op: &Op,
        result: Result<CommandResult, Failure>,
    ) -> Result<(), String> {
        let r = match result {
            Ok(r) => r,
            Err(Failure::Aborted) if op.exposed => {
                self.counts.aborted += 1;
                if let Some(id) = op.write {
                    self.model
                        .write_ended(op.lun, op.lba, op.blocks, id, WriteFate::Unknown);
                }
                return Ok(());
            }
            Err(e) if self.excused(&e) => {
                if let Some(id) = op.write {
                    self.model
                        .write_ended(op.lun, op.lba, op.blocks, id, WriteFate::Unknown);
                }
                return Ok(());
            }
            Err(e) => return Err(format!("command on LUN {} failed: {e}", op.lun)),
        };
        // A command sent again (its connection or session failed) may have run the first time:
        // an answer that says this attempt did not run says nothing of the earlier one.
        let not_applied = if r.stats.attempts > 1 {
            WriteFate::Unknown
        } else {
            WriteFate::NotApplied
        };
        match r.status {
            ScsiStatus::Good => {}
            ScsiStatus::CheckCondition if sense_key(&r.sense) == Some(UNIT_ATTENTION) => {
                // A unit attention (the power-on one, or after a reset) is reported before the
                // command runs.
                self.counts.unit_attentions += 1;
                if let Some(id) = op.write {
                    self.model
                        .write_ended(op.lun, op.lba, op.blocks, id, not_applied);
                }
                return Ok(());
            }
            // At ErrorRecoveryLevel 0 a Data-Out lost to a digest error ends its write with
            // ABORTED COMMAND (RFC 7143 section 7.8 b).
            ScsiStatus::CheckCondition if self.lossy && sense_key(&r.sense) == Some(0x0b) => {
                self.counts.lost_to_faults += 1;
                if let Some(id) = op.write {
                    self.model
                        .write_ended(op.lun, op.lba, op.blocks, id, WriteFate::Unknown);
                }
                return Ok(());
            }
            // The target's write buffer was full (bounded buffering): the write did not run.
            ScsiStatus::TaskSetFull if op.write.is_some() => {
                self.counts.task_set_full += 1;
                if let Some(id) = op.write {
                    self.model
                        .write_ended(op.lun, op.lba, op.blocks, id, not_applied);
                }
                return Ok(());
            }
            other => {
                return Err(format!(
                    "command on LUN {} ended {other} with sense {:02x?}",
                    op.lun,
                    &r.sense[..]
                ))
            }
        }
        match op.write {
            Some(id) => {
                self.counts.writes += 1;
                self.model
                    .write_ended(op.lun, op.lba, op.blocks, id, WriteFate::Applied);
                Ok(())
            }
            None => {
                self.counts.reads += 1;
                let want = op.blocks as usize * BLOCK;
                if r.data.len() != want {
                    return Err(format!(
                        "read of {want} bytes returned {} (residual {:?})",
                        r.data.len(),
                        r.residual
                    ));
                }
                self.model.check_read(op.lun, op.lba, &r.data)
            }
        }
    }
}

/// The sense key of fixed or descriptor sense data.
fn sense_key(sense: &[u8]) -> Option<u8> {
    match sense.first()? & 0x7f {
        0x70 | 0x71 => sense.get(2).map(|k| k & 0x0f),
        0x72 | 0x73 => sense.get(1).map(|k| k & 0x0f),
        _ => None,
    }
}
