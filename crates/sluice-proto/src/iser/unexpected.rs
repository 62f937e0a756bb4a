//! MaxOutstandingUnexpectedPDUs (RFC 7145 section 6.3.4): how many "unexpected"
//! control-type PDUs a side has outstanding at its peer, so that it never has more than the
//! peer declared it can receive. [`UnexpectedWindow`] is the initiator's count,
//! [`TargetUnexpectedWindow`] the target's.
//!
//! Every control-type PDU arrives at the target in a Send, which consumes one of the
//! receive buffers the target posted (section 8). The target provisions those from what
//! iSCSI's own flow control bounds: non-immediate requests by the CmdSN window (MaxCmdSN),
//! their unsolicited data by FirstBurstLength, and NOP-Outs that answer its own pings. The
//! rest arrive unannounced, and those are the unexpected PDUs the key bounds:
//! - immediate requests (the I bit: SCSI Command, Task Management Function Request, Text
//!   Request, Logout Request, and a NOP-Out ping, whose ITT is set): outside the CmdSN
//!   window, each is outstanding until its response with the same ITT arrives (or a Reject
//!   quoting it, which replaces the response);
//! - a unidirectional NOP-Out (ITT and TTT reserved, always immediate): no reply comes, so
//!   it is outstanding until a PDU from the target on the same connection carries an
//!   ExpCmdSN above the NOP-Out's CmdSN: the target has then taken a later command, sent
//!   behind the NOP-Out on this connection, and with it the NOP-Out.
//!
//! The key's minimum, 2, is iSCSI's own guarantee (RFC 7143 section 4.2.2.1: a target takes
//! at least one immediate task management command and one other immediate command per
//! connection).
//!
//! Tasks that end without the response the count waits for:
//! - a Task Management Function ends tasks whose responses never come (RFC 7143 section
//!   4.2.3: the target answers the TMF, not the tasks it aborted). Which ones is the
//!   function's scope (`tmf_scope.rs`), the same rule the target's datamover and core apply: the
//!   Referenced Task Tag for ABORT TASK; the SCSI commands of its LUN for ABORT TASK SET,
//!   CLEAR TASK SET and LOGICAL UNIT RESET, and all SCSI commands for the target resets,
//!   in both cases only those with a CmdSN below the function's (section 11.5.1). When its
//!   response says the function completed (or, for ABORT TASK, that the task does not
//!   exist: its response came earlier, which released it, or will never come), the counted
//!   requests in its scope are released. The scope is applied then, to the requests
//!   outstanding then, by CmdSN: an immediate command sent just before an immediate
//!   function carries the function's own CmdSN and is not ended (the target answers it),
//!   and a request that reuses a released tag after the function is not in its scope. A
//!   refused function releases nothing: the tasks go on.
//! - a Logout Request is answered (released by its Logout Response); the connection then
//!   ends, and the window with it.
//! - an ITT used again by a new request: the earlier request's response can no longer be
//!   told apart (RFC 7143 section 11.1: an ITT is unique among tasks outstanding), so it is
//!   replaced, never counted twice.
//!
//! The record of task management requests awaiting their responses is bounded
//! ([`MAX_TMFS_IN_FLIGHT`]): a target that never answers them must not grow it without end.
//! When it is full the oldest is forgotten. Forgetting a function can only release less (its
//! response, if it still comes, then ends nothing here), never too early: the tasks it would
//! have ended stay counted, the safe side of the count, until their own responses or the
//! end of the connection.

use std::collections::{HashMap, VecDeque};

use super::tmf_scope::{TaskRef, TmfScope};
use crate::pdu::codes::TmfResponse;
use crate::pdu::Pdu;
use crate::seq::{Itt, Lun, SeqNum, Ttt};

/// Opcodes of the requests the window counts (RFC 7143 section 11.1.1).
const COUNTED_OPCODES: [u8; 5] = [0x00, 0x01, TMF_REQUEST, 0x04, 0x06];
/// The Task Management Function Request's opcode.
const TMF_REQUEST: u8 = 0x02;
/// Task management requests the window keeps awaiting their responses, at most; beyond it
/// the oldest is forgotten (see the module's documentation). The CmdSN window and the
/// unexpected-PDU limit bound how many a well-behaved initiator has in flight far below this.
pub const MAX_TMFS_IN_FLIGHT: usize = 256;

/// An immediate request awaiting its response.
#[derive(Clone, Copy, Debug)]
struct Outstanding {
    /// The LUN of a SCSI command; `None` for the other requests, which are in no logical
    /// unit's task set.
    lun: Option<Lun>,
    /// The CmdSN it carried (immediate: not advanced past it).
    cmd_sn: SeqNum,
}

/// The initiator's unexpected PDUs outstanding at the target, against the target's limit.
#[derive(Clone, Debug, Default)]
pub struct UnexpectedWindow {
    /// The target's MaxOutstandingUnexpectedPDUs; 0: no limit.
    limit: u32,
    /// Immediate requests awaiting their response, by ITT.
    requests: HashMap<Itt, Outstanding>,
    /// CmdSNs of unidirectional NOP-Outs not yet acknowledged by ExpCmdSN.
    one_way_nops: Vec<SeqNum>,
    /// Task management requests sent and not yet answered, oldest first, with the tasks
    /// each ends; at most [`MAX_TMFS_IN_FLIGHT`].
    tmfs: VecDeque<(Itt, TmfScope)>,
}

impl UnexpectedWindow {
    /// A window for a target that declared `limit` (0: no limit).
    pub fn new(limit: u32) -> Self {
        UnexpectedWindow {
            limit,
            ..UnexpectedWindow::default()
        }
    }

    /// The limit the target declared (0: none).
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Unexpected PDUs outstanding now.
    pub fn outstanding(&self) -> usize {
        self.requests.len() + self.one_way_nops.len()
    }

    /// Task management requests on record awaiting their responses (at most
    /// [`MAX_TMFS_IN_FLIGHT`]).
    pub fn tmfs_in_flight(&self) -> usize {
        self.tmfs.len()
    }

    /// Takes the record of the task management request `itt`, if there is one.
    fn take_tmf(&mut self, itt: Itt) -> Option<TmfScope> {
        let at = self.tmfs.iter().position(|(i, _)| *i == itt)?;
        self.tmfs.remove(at).map(|(_, scope)| scope)
    }

    /// Whether `pdu`, sent to the target, is an unexpected PDU.
    pub fn counts(pdu: &Pdu) -> bool {
        match pdu {
            Pdu::ScsiCommand(p) => p.immediate,
            Pdu::TaskMgmtRequest(p) => p.immediate,
            Pdu::TextRequest(p) => p.immediate,
            Pdu::LogoutRequest(p) => p.immediate,
            // A NOP-Out answering the target's ping (TTT set) is one the target expects; a
            // ping sent without the I bit takes a CmdSN like any request (a one-way NOP-Out
            // always has the I bit, RFC 7143 section 11.18).
            Pdu::NopOut(p) => p.immediate && p.ttt == Ttt::RESERVED,
            _ => false,
        }
    }

    /// Whether one more unexpected PDU may be sent now.
    pub fn has_room(&self) -> bool {
        self.limit == 0 || self.outstanding() < self.limit as usize
    }

    /// Whether `pdu` may be sent now (an expected PDU always may).
    pub fn may_send(&self, pdu: &Pdu) -> bool {
        !Self::counts(pdu) || self.has_room()
    }

    /// Notes a PDU sent to the target.
    pub fn sent(&mut self, pdu: &Pdu) {
        if let Pdu::TaskMgmtRequest(t) = pdu {
            // A reused ITT forgets the earlier function's record.
            self.take_tmf(t.itt);
            if let Some(scope) = TmfScope::of(t) {
                if self.tmfs.len() >= MAX_TMFS_IN_FLIGHT {
                    // Forgetting the oldest releases nothing (module documentation).
                    self.tmfs.pop_front();
                }
                self.tmfs.push_back((t.itt, scope));
            }
        }
        if !Self::counts(pdu) {
            return;
        }
        let (lun, cmd_sn) = match pdu {
            Pdu::NopOut(n) if n.itt == Itt::RESERVED => {
                self.one_way_nops.push(n.cmd_sn);
                return;
            }
            Pdu::ScsiCommand(p) => (Some(p.lun), p.cmd_sn),
            Pdu::TaskMgmtRequest(p) => (None, p.cmd_sn),
            Pdu::NopOut(p) => (None, p.cmd_sn),
            Pdu::TextRequest(p) => (None, p.cmd_sn),
            Pdu::LogoutRequest(p) => (None, p.cmd_sn),
            _ => return,
        };
        self.requests.insert(pdu.itt(), Outstanding { lun, cmd_sn });
    }

    /// Notes a PDU received from the target on this connection: what it answers, or
    /// acknowledges, is no longer outstanding.
    pub fn received(&mut self, pdu: &Pdu) {
        if let Some(exp) = exp_cmd_sn(pdu) {
            self.one_way_nops.retain(|sn| !exp.gt(*sn));
        }
        match pdu {
            Pdu::ScsiResponse(_)
            | Pdu::TextResponse(_)
            | Pdu::LogoutResponse(_)
            | Pdu::NopIn(_) => {
                // A target's own ping carries the reserved ITT, never one on record.
                self.requests.remove(&pdu.itt());
            }
            Pdu::TaskMgmtResponse(r) => {
                self.requests.remove(&r.itt);
                if let Some(scope) = self.take_tmf(r.itt) {
                    let ended = r.response == TmfResponse::FunctionComplete
                        || (matches!(scope, TmfScope::Task(_))
                            && r.response == TmfResponse::TaskDoesNotExist);
                    if ended {
                        self.requests.retain(|itt, o| {
                            !scope.covers(TaskRef {
                                itt: *itt,
                                lun: o.lun,
                                cmd_sn: o.cmd_sn,
                            })
                        });
                    }
                }
            }
            Pdu::Reject(r) => {
                // The rejected PDU's header follows (RFC 7143 section 11.17.1): an immediate
                // request rejected gets no other answer.
                if let Some(h) = r.data.get(..20) {
                    let opcode = h[0] & 0x3f;
                    let immediate = h[0] & 0x40 != 0;
                    let itt = Itt(u32::from_be_bytes([h[16], h[17], h[18], h[19]]));
                    if immediate && COUNTED_OPCODES.contains(&opcode) {
                        self.requests.remove(&itt);
                    }
                    // A rejected TMF ends nothing.
                    if opcode == TMF_REQUEST {
                        self.take_tmf(itt);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The target's unexpected PDUs outstanding at the initiator, against the initiator's
/// declared MaxOutstandingUnexpectedPDUs (RFC 7145 section 6.3.4). The initiator provisions
/// receives for the answers to its own requests; what the target sends unasked is
/// unexpected:
/// - a NOP-In ping (TTT set), outstanding until the NOP-Out that echoes its TTT;
/// - a NOP-In that asks for nothing (ITT and TTT reserved) and an Asynchronous Message,
///   outstanding until a PDU from the initiator on the same connection acknowledges its
///   StatSN (ExpStatSN above it; a one-way NOP-In does not advance StatSN, so that is the
///   status after it).
#[derive(Clone, Debug, Default)]
pub struct TargetUnexpectedWindow {
    /// The initiator's MaxOutstandingUnexpectedPDUs; 0: no limit.
    limit: u32,
    /// TTTs of pings awaiting their echo.
    pings: Vec<Ttt>,
    /// StatSNs of one-way NOP-Ins and Asynchronous Messages not yet acknowledged.
    unacknowledged: Vec<SeqNum>,
}

impl TargetUnexpectedWindow {
    /// A window for an initiator that declared `limit` (0: no limit).
    pub fn new(limit: u32) -> Self {
        TargetUnexpectedWindow {
            limit,
            ..TargetUnexpectedWindow::default()
        }
    }

    /// Unexpected PDUs outstanding now.
    pub fn outstanding(&self) -> usize {
        self.pings.len() + self.unacknowledged.len()
    }

    /// Whether `pdu`, sent to the initiator, is an unexpected PDU.
    pub fn counts(pdu: &Pdu) -> bool {
        match pdu {
            // A NOP-In with the ITT set answers the initiator's ping.
            Pdu::NopIn(n) => n.itt == Itt::RESERVED,
            Pdu::AsyncMessage(_) => true,
            _ => false,
        }
    }

    /// Whether `pdu` may be sent now (an expected PDU always may).
    pub fn may_send(&self, pdu: &Pdu) -> bool {
        !Self::counts(pdu) || self.limit == 0 || self.outstanding() < self.limit as usize
    }

    /// Notes a PDU sent to the initiator.
    pub fn sent(&mut self, pdu: &Pdu) {
        match pdu {
            Pdu::NopIn(n) if n.itt == Itt::RESERVED && n.ttt != Ttt::RESERVED => {
                self.pings.retain(|t| *t != n.ttt);
                self.pings.push(n.ttt);
            }
            Pdu::NopIn(n) if n.itt == Itt::RESERVED => self.unacknowledged.push(n.stat_sn),
            Pdu::AsyncMessage(a) => self.unacknowledged.push(a.stat_sn),
            _ => {}
        }
    }

    /// Notes a PDU received from the initiator on this connection.
    pub fn received(&mut self, pdu: &Pdu) {
        if let Pdu::NopOut(n) = pdu {
            if n.ttt != Ttt::RESERVED {
                self.pings.retain(|t| *t != n.ttt);
            }
        }
        if let Some(exp) = exp_stat_sn(pdu) {
            self.unacknowledged.retain(|sn| !exp.gt(*sn));
        }
    }
}

/// The ExpStatSN a PDU from the initiator carries, if it carries one.
fn exp_stat_sn(pdu: &Pdu) -> Option<SeqNum> {
    Some(match pdu {
        Pdu::ScsiCommand(p) => p.exp_stat_sn,
        Pdu::NopOut(p) => p.exp_stat_sn,
        Pdu::TaskMgmtRequest(p) => p.exp_stat_sn,
        Pdu::TextRequest(p) => p.exp_stat_sn,
        Pdu::LogoutRequest(p) => p.exp_stat_sn,
        Pdu::DataOut(p) => p.exp_stat_sn,
        _ => return None,
    })
}

/// The ExpCmdSN a PDU from the target carries, if it carries one.
fn exp_cmd_sn(pdu: &Pdu) -> Option<SeqNum> {
    Some(match pdu {
        Pdu::ScsiResponse(p) => p.exp_cmd_sn,
        Pdu::NopIn(p) => p.exp_cmd_sn,
        Pdu::TaskMgmtResponse(p) => p.exp_cmd_sn,
        Pdu::TextResponse(p) => p.exp_cmd_sn,
        Pdu::LogoutResponse(p) => p.exp_cmd_sn,
        Pdu::AsyncMessage(p) => p.exp_cmd_sn,
        Pdu::Reject(p) => p.exp_cmd_sn,
        Pdu::R2t(p) => p.exp_cmd_sn,
        Pdu::DataIn(p) => p.exp_cmd_sn,
        _ => return None,
    })
}

#[cfg(test)]
#[path = "unexpected_tests.rs"]
mod tests;
