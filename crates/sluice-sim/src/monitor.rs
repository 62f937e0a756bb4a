//! Independent checks of the sequence numbers on the wire (RFC 7143 sections 4.2.2.1, 4.2.2.2,
//! 4.2.2.3), made on every PDU as a sender hands it to the network.

use std::collections::HashMap;

use sluice_proto::pdu::Pdu;
use sluice_proto::seq::{Itt, SeqNum, Ttt};

/// Checks of one connection.
#[derive(Debug, Default)]
pub(crate) struct LinkMonitor {
    /// StatSN the target's next status PDU on this connection must carry.
    next_stat_sn: Option<SeqNum>,
    exp_cmd_sn: Option<SeqNum>,
    max_cmd_sn: Option<SeqNum>,
    data_in_sn: HashMap<Itt, u32>,
    r2t_sn: HashMap<Itt, u32>,
    data_out_sn: HashMap<(Itt, Ttt), u32>,
    /// ErrorRecoveryLevel 1 or 2 on this connection: PDUs may be sent again (answers to
    /// SNACKs keep their StatSN, DataSN and R2TSN; retried commands their CmdSN; a retried
    /// command's unsolicited data starts its DataSNs over).
    recovery: bool,
    /// The ITT each recent StatSN was sent with, to check that a status sent again is the
    /// same one.
    sent_statuses: HashMap<u32, Itt>,
    /// Tasks moved to this connection by TASK REASSIGN (ErrorRecoveryLevel 2): their
    /// Data-In and R2Ts go on with the numbers of the connection they came from, so the first
    /// one here sets where this connection's count starts (RFC 7143 section 7.2.2).
    reassigned: std::collections::HashSet<Itt>,
    /// Tasks a TASK REASSIGN asked to move to this connection, ever (a repeated request
    /// changes nothing).
    reassign_requested: std::collections::HashSet<Itt>,
}

/// Checks across the connections of the session.
#[derive(Debug, Default)]
pub(crate) struct SessionMonitor {
    /// The highest MaxCmdSN the target has advertised on any connection.
    highest_max_cmd_sn: Option<SeqNum>,
    /// CmdSNs of the non-immediate commands sent so far, with their ITTs.
    cmd_sns: HashMap<u32, Itt>,
    lowest: Option<SeqNum>,
    highest: Option<SeqNum>,
    /// The highest ExpCmdSN the target has advertised: every CmdSN below it reached it.
    highest_exp_cmd_sn: Option<SeqNum>,
    /// The target answered a Logout Request that closes the session.
    session_logged_out: bool,
    /// ITTs of the session-closing Logout Requests sent.
    session_logouts: std::collections::HashSet<Itt>,
}

impl SessionMonitor {
    /// Non-immediate CmdSNs form one run without holes (every number used once).
    pub(crate) fn check_contiguous(&self) -> Result<(), String> {
        let (Some(lo), Some(mut hi)) = (self.lowest, self.highest) else {
            return Ok(());
        };
        if !self.session_logged_out {
            // The session ended without a logout answer (its last connection lost): the
            // commands it gave up on never reached the target, whose copy of the session
            // expires with them (RFC 7143 section 6.2). Only the CmdSNs the target has
            // acknowledged must form one run.
            match self.highest_exp_cmd_sn {
                Some(exp) if exp.gt(lo) => hi = SeqNum(exp.0.wrapping_sub(1)),
                _ => return Ok(()),
            }
        }
        let used = (0..=hi.distance_from(lo))
            .filter(|offset| self.cmd_sns.contains_key(&lo.0.wrapping_add(*offset)))
            .count();
        let span = u64::from(hi.distance_from(lo)) + 1;
        if span != used as u64 {
            let first_hole = (0..span as u32)
                .map(|offset| lo.0.wrapping_add(offset))
                .find(|sn| !self.cmd_sns.contains_key(sn));
            return Err(format!(
                "non-immediate CmdSNs {lo}..={hi} have holes: {used} numbers used of {span} \
                 (first missing: {first_hole:?})"
            ));
        }
        Ok(())
    }

    /// `cmd_sn` was used: the run of CmdSNs reaches it.
    fn widen(&mut self, cmd_sn: SeqNum) {
        if self.lowest.is_none_or(|l| cmd_sn.lt(l)) {
            self.lowest = Some(cmd_sn);
        }
        if self.highest.is_none_or(|h| cmd_sn.gt(h)) {
            self.highest = Some(cmd_sn);
        }
    }

    /// Commands sent (non-immediate).
    pub(crate) fn commands(&self) -> usize {
        self.cmd_sns.len()
    }
}

impl LinkMonitor {
    /// Allows what error recovery sends again (see `recovery`).
    pub(crate) fn set_recovery(&mut self, recovery: bool) {
        self.recovery = recovery;
    }

    /// A PDU the target sends on this connection; `depth` is the target's queue depth.
    pub(crate) fn target_sent(
        &mut self,
        pdu: &Pdu,
        depth: u32,
        session: &mut SessionMonitor,
    ) -> Result<(), String> {
        let numbers = match pdu {
            Pdu::LoginResponse(p) => Some((p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true)),
            Pdu::ScsiResponse(p) => Some((p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true)),
            Pdu::DataIn(p) => Some((p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, p.status_present)),
            Pdu::R2t(p) => Some((p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, false)),
            Pdu::NopIn(p) => Some((
                p.stat_sn,
                p.exp_cmd_sn,
                p.max_cmd_sn,
                p.itt != Itt::RESERVED,
            )),
            Pdu::TaskMgmtResponse(p) => Some((p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true)),
            Pdu::TextResponse(p) => Some((p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true)),
            Pdu::LogoutResponse(p) => Some((p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true)),
            Pdu::AsyncMessage(p) => Some((p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true)),
            Pdu::Reject(p) => Some((p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true)),
            _ => None,
        };
        let Some((stat_sn, exp, max, status)) = numbers else {
            return Err(format!("a target sent an initiator opcode: {pdu:?}"));
        };
        // Section 4.2.2.2: StatSN counts the status PDUs of a connection one by one; the
        // others carry the next value without taking it. (A Data-In without status carries
        // none.)
        let carries_stat_sn = !matches!(pdu, Pdu::DataIn(p) if !p.status_present);
        let resent =
            status && self.recovery && self.next_stat_sn.is_some_and(|next| stat_sn.lt(next));
        if resent {
            // Section 11.16: a status sent again keeps its StatSN and is the same status.
            match self.sent_statuses.get(&stat_sn.0) {
                Some(itt) if *itt == pdu.itt() => {}
                other => {
                    return Err(format!(
                        "StatSN {stat_sn} sent again for {}, first sent for {other:?}",
                        describe(pdu)
                    ))
                }
            }
        } else if carries_stat_sn {
            if status && self.recovery {
                self.sent_statuses.insert(stat_sn.0, pdu.itt());
            }
            match self.next_stat_sn {
                None if matches!(pdu, Pdu::LoginResponse(_)) => {}
                Some(next) if next == stat_sn => {}
                next => {
                    return Err(format!(
                        "StatSN {stat_sn} where {next:?} was due, on {}",
                        describe(pdu)
                    ))
                }
            }
            if status {
                self.next_stat_sn = Some(stat_sn.next());
            } else if self.next_stat_sn.is_none() {
                self.next_stat_sn = Some(stat_sn);
            }
        }
        // Section 4.2.2.1: MaxCmdSN >= ExpCmdSN - 1; neither goes backwards; the window is
        // never wider than the queue depth the target configured.
        let exp_minus_one = SeqNum(exp.0.wrapping_sub(1));
        if max.lt(exp_minus_one) {
            return Err(format!("MaxCmdSN {max} below ExpCmdSN {exp} - 1"));
        }
        let width = max.distance_from(exp_minus_one);
        if width > depth {
            return Err(format!(
                "window ExpCmdSN {exp}..=MaxCmdSN {max} is {width} wide, queue depth {depth}"
            ));
        }
        if let Some(prev) = self.exp_cmd_sn.filter(|p| exp.lt(*p)) {
            return Err(format!("ExpCmdSN went back from {prev} to {exp}"));
        }
        if let Some(prev) = self.max_cmd_sn.filter(|p| max.lt(*p)) {
            return Err(format!("MaxCmdSN went back from {prev} to {max}"));
        }
        self.exp_cmd_sn = Some(exp);
        self.max_cmd_sn = Some(max);
        if session.highest_max_cmd_sn.is_none_or(|h| max.gt(h)) {
            session.highest_max_cmd_sn = Some(max);
        }
        if session.highest_exp_cmd_sn.is_none_or(|h| exp.gt(h)) {
            session.highest_exp_cmd_sn = Some(exp);
        }
        if let Pdu::LogoutResponse(r) = pdu {
            if r.response == sluice_proto::pdu::codes::LogoutResponseCode::Closed
                && session.session_logouts.contains(&r.itt)
            {
                session.session_logged_out = true;
            }
        }
        match pdu {
            // Section 4.2.2.3: DataSN of a read's Data-In PDUs counts from 0; R2TSN likewise.
            Pdu::DataIn(d) => {
                let base = if self.reassigned.contains(&d.itt) {
                    d.data_sn
                } else {
                    0
                };
                let sn = self.data_in_sn.entry(d.itt).or_insert(base);
                if self.recovery && d.data_sn < *sn {
                    // Sent again (a Data SNACK), or cut anew from an acknowledged DataSN (an
                    // R-Data SNACK, section 11.16.3).
                } else if d.data_sn != *sn {
                    return Err(format!(
                        "Data-In DataSN {} for {:?}, expected {sn}",
                        d.data_sn, d.itt
                    ));
                } else {
                    *sn += 1;
                }
                if d.status_present && !self.recovery {
                    self.data_in_sn.remove(&d.itt);
                }
            }
            Pdu::R2t(r) => {
                let base = if self.reassigned.remove(&r.itt) {
                    r.r2t_sn
                } else {
                    0
                };
                let sn = self.r2t_sn.entry(r.itt).or_insert(base);
                if self.recovery && r.r2t_sn < *sn {
                    // An R2T sent again on an R2T SNACK keeps its R2TSN.
                } else if r.r2t_sn != *sn {
                    return Err(format!("R2TSN {} for {:?}, expected {sn}", r.r2t_sn, r.itt));
                } else {
                    *sn += 1;
                }
            }
            // Under recovery PDUs of the command may still be sent again after its status (a
            // SNACK), so its numbering is kept.
            Pdu::ScsiResponse(r) if !self.recovery => {
                self.data_in_sn.remove(&r.itt);
                self.r2t_sn.remove(&r.itt);
                self.data_out_sn.retain(|(itt, _), _| *itt != r.itt);
            }
            _ => {}
        }
        Ok(())
    }

    /// A PDU the initiator sends on this connection.
    pub(crate) fn initiator_sent(
        &mut self,
        pdu: &Pdu,
        session: &mut SessionMonitor,
    ) -> Result<(), String> {
        if let Pdu::LogoutRequest(p) = pdu {
            if p.reason == sluice_proto::pdu::codes::LogoutReason::CloseSession {
                session.session_logouts.insert(p.itt);
            }
        }
        let (exp_stat_sn, cmd) = match pdu {
            Pdu::ScsiCommand(p) => (p.exp_stat_sn, Some((p.cmd_sn, p.immediate))),
            Pdu::NopOut(p) => (p.exp_stat_sn, Some((p.cmd_sn, p.immediate))),
            Pdu::TaskMgmtRequest(p) => (p.exp_stat_sn, Some((p.cmd_sn, p.immediate))),
            Pdu::TextRequest(p) => (p.exp_stat_sn, Some((p.cmd_sn, p.immediate))),
            Pdu::LogoutRequest(p) => (p.exp_stat_sn, Some((p.cmd_sn, p.immediate))),
            Pdu::DataOut(p) => (p.exp_stat_sn, None),
            Pdu::SnackRequest(p) => (p.exp_stat_sn, None),
            Pdu::LoginRequest(_) => return Ok(()),
            other => return Err(format!("an initiator sent a target opcode: {other:?}")),
        };
        // Section 4.2.2.2: ExpStatSN acknowledges statuses received; none not yet sent.
        if let Some(next) = self.next_stat_sn {
            if exp_stat_sn.gt(next) {
                return Err(format!(
                    "ExpStatSN {exp_stat_sn} acknowledges more than the target sent (next {next})"
                ));
            }
        }
        if let Some((cmd_sn, false)) = cmd {
            // Section 4.2.2.1: a non-immediate command takes a CmdSN of its own, inside the
            // window the target advertised.
            match session.cmd_sns.insert(cmd_sn.0, pdu.itt()) {
                None => {}
                // Section 7.2.1: a retried command carries its original ITT and CmdSN.
                Some(itt) if self.recovery && itt == pdu.itt() => {}
                Some(_) => {
                    return Err(format!("CmdSN {cmd_sn} used twice ({})", describe(pdu)));
                }
            }
            match session.highest_max_cmd_sn {
                Some(max) if cmd_sn.le(max) => {}
                max => {
                    return Err(format!(
                        "CmdSN {cmd_sn} sent beyond the target's window (MaxCmdSN {max:?})"
                    ))
                }
            }
            session.widen(cmd_sn);
        }
        if let Pdu::TaskMgmtRequest(t) = pdu {
            if t.function == sluice_proto::pdu::codes::TmfFunction::AbortTask
                && t.ref_cmd_sn.lt(t.cmd_sn)
                && self.recovery
            {
                // Section 7.11: an ABORT TASK whose command never reached the target makes
                // the target "consider the original command with that RefCmdSN as received":
                // it fills that CmdSN (a command given up before it was ever sent).
                session
                    .cmd_sns
                    .entry(t.ref_cmd_sn.0)
                    .or_insert(t.referenced_task_tag);
                session.widen(t.ref_cmd_sn);
            }
            // Only the first TASK REASSIGN of a task on this connection moves its numbering
            // here: the initiator sends it again when the answer is slow or lost, and the
            // target, which already took the task over, goes on where it was ("Reassigned here
            // already"), so the count must too.
            if t.function == sluice_proto::pdu::codes::TmfFunction::TaskReassign
                && self.reassign_requested.insert(t.referenced_task_tag)
            {
                let itt = t.referenced_task_tag;
                self.reassigned.insert(itt);
                self.data_in_sn.remove(&itt);
                self.r2t_sn.remove(&itt);
            }
        }
        if let Pdu::DataOut(d) = pdu {
            // Section 4.2.2.3: the Data-Out PDUs of each sequence (unsolicited, or one R2T)
            // number from 0.
            let sn = self.data_out_sn.entry((d.itt, d.ttt)).or_insert(0);
            if self.recovery && d.data_sn == 0 && d.ttt == Ttt::RESERVED {
                // A retried command's unsolicited data starts over.
                *sn = 0;
            }
            if d.data_sn != *sn {
                return Err(format!(
                    "Data-Out DataSN {} for {:?} TTT {:?}, expected {sn}",
                    d.data_sn, d.itt, d.ttt
                ));
            }
            *sn += 1;
            if d.final_bit {
                self.data_out_sn.remove(&(d.itt, d.ttt));
            }
        }
        Ok(())
    }
}

/// A PDU named for messages.
pub(crate) fn describe(pdu: &Pdu) -> String {
    format!("opcode {:#04x} ITT {:#x}", pdu.opcode(), pdu.itt().0)
}

#[cfg(test)]
mod tests {
    //! Each check must fire on the mistake it exists for, or a passing simulation proves
    //! nothing.

    use bytes::Bytes;
    use sluice_proto::pdu::codes::{ScsiResponseCode, ScsiStatus};
    use sluice_proto::pdu::{Cdb, DataIn, DataOut, R2t, ScsiCommand, ScsiResponse, TaskAttr};
    use sluice_proto::seq::Lun;

    use super::*;

    const DEPTH: u32 = 8;

    fn response(itt: u32, stat_sn: u32, exp: u32, max: u32) -> Pdu {
        Pdu::ScsiResponse(ScsiResponse {
            bidi_overflow: false,
            bidi_underflow: false,
            overflow: false,
            underflow: false,
            response: ScsiResponseCode::Completed,
            status: ScsiStatus::Good,
            itt: Itt(itt),
            snack_tag: 0,
            stat_sn: SeqNum(stat_sn),
            exp_cmd_sn: SeqNum(exp),
            max_cmd_sn: SeqNum(max),
            exp_data_sn: 0,
            bidi_residual: 0,
            residual: 0,
            data: Bytes::new(),
        })
    }

    fn data_in(itt: u32, data_sn: u32, status: Option<u32>, exp: u32, max: u32) -> Pdu {
        Pdu::DataIn(DataIn {
            final_bit: status.is_some(),
            ack: false,
            overflow: false,
            underflow: false,
            status_present: status.is_some(),
            status: ScsiStatus::Good,
            lun: Lun(0),
            itt: Itt(itt),
            ttt: Ttt::RESERVED,
            stat_sn: SeqNum(status.unwrap_or(0)),
            exp_cmd_sn: SeqNum(exp),
            max_cmd_sn: SeqNum(max),
            data_sn,
            buffer_offset: data_sn * 512,
            residual: 0,
            data: Bytes::from(vec![0; 512]),
        })
    }

    fn r2t(itt: u32, r2t_sn: u32, stat_sn: u32) -> Pdu {
        Pdu::R2t(R2t {
            lun: Lun(0),
            itt: Itt(itt),
            ttt: Ttt(r2t_sn),
            stat_sn: SeqNum(stat_sn),
            exp_cmd_sn: SeqNum(1),
            max_cmd_sn: SeqNum(8),
            r2t_sn,
            buffer_offset: r2t_sn * 512,
            desired_data_transfer_length: 512,
        })
    }

    fn command(itt: u32, cmd_sn: u32, immediate: bool, exp_stat_sn: u32) -> Pdu {
        Pdu::ScsiCommand(ScsiCommand {
            immediate,
            final_bit: true,
            read: true,
            write: false,
            attr: TaskAttr::Simple,
            lun: Lun(0),
            itt: Itt(itt),
            expected_data_transfer_length: 512,
            cmd_sn: SeqNum(cmd_sn),
            exp_stat_sn: SeqNum(exp_stat_sn),
            cdb: Cdb::from([0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0]),
            bidi_read_length: None,
            data: Bytes::new(),
        })
    }

    fn data_out(itt: u32, ttt: Ttt, data_sn: u32, final_bit: bool) -> Pdu {
        Pdu::DataOut(DataOut {
            final_bit,
            lun: Lun(0),
            itt: Itt(itt),
            ttt,
            exp_stat_sn: SeqNum(0),
            data_sn,
            buffer_offset: data_sn * 512,
            data: Bytes::from(vec![0; 512]),
        })
    }

    /// A link past its login, on which StatSN 100 is due.
    fn logged_in(stat_sn: u32) -> (LinkMonitor, SessionMonitor) {
        let link = LinkMonitor {
            next_stat_sn: Some(SeqNum(stat_sn)),
            ..LinkMonitor::default()
        };
        (link, SessionMonitor::default())
    }

    /// A link whose target has sent one status (StatSN 100) advertising CmdSN 1..=8.
    fn opened() -> (LinkMonitor, SessionMonitor) {
        let (mut link, mut session) = logged_in(100);
        link.target_sent(&response(0x99, 100, 1, 8), DEPTH, &mut session)
            .unwrap();
        (link, session)
    }

    #[test]
    fn a_well_behaved_exchange_passes() {
        let (mut link, mut s) = opened();
        for n in 1..=3 {
            link.initiator_sent(&command(n, n, false, 101), &mut s)
                .unwrap();
        }
        link.initiator_sent(&command(9, 4, true, 101), &mut s)
            .unwrap();
        link.target_sent(&data_in(1, 0, None, 4, 11), DEPTH, &mut s)
            .unwrap();
        link.target_sent(&data_in(1, 1, Some(101), 4, 11), DEPTH, &mut s)
            .unwrap();
        link.target_sent(&response(2, 102, 4, 11), DEPTH, &mut s)
            .unwrap();
        link.initiator_sent(&command(4, 4, false, 103), &mut s)
            .unwrap();
        s.check_contiguous().unwrap();
        assert_eq!(s.commands(), 4);
    }

    #[test]
    fn stat_sn_must_count_one_by_one() {
        let (mut link, mut s) = opened();
        let e = link
            .target_sent(&response(1, 102, 1, 8), DEPTH, &mut s)
            .unwrap_err();
        assert!(e.contains("StatSN 102"), "{e}");
        let (mut link, mut s) = opened();
        let e = link
            .target_sent(&response(1, 100, 1, 8), DEPTH, &mut s)
            .unwrap_err();
        assert!(e.contains("StatSN 100"), "{e}");
    }

    #[test]
    fn the_command_window_is_checked() {
        let (mut link, mut s) = opened();
        let e = link
            .target_sent(&response(1, 101, 5, 3), DEPTH, &mut s)
            .unwrap_err();
        assert!(e.contains("below ExpCmdSN"), "{e}");
        let (mut link, mut s) = opened();
        let e = link
            .target_sent(&response(1, 101, 1, 9), DEPTH, &mut s)
            .unwrap_err();
        assert!(e.contains("9 wide, queue depth 8"), "{e}");
        let (mut link, mut s) = opened();
        link.target_sent(&response(1, 101, 3, 10), DEPTH, &mut s)
            .unwrap();
        let e = link
            .target_sent(&response(2, 102, 2, 9), DEPTH, &mut s)
            .unwrap_err();
        assert!(e.contains("ExpCmdSN went back"), "{e}");
        let (mut link, mut s) = opened();
        link.target_sent(&response(1, 101, 1, 8), DEPTH, &mut s)
            .unwrap();
        let e = link
            .target_sent(&response(2, 102, 1, 7), DEPTH, &mut s)
            .unwrap_err();
        assert!(e.contains("MaxCmdSN went back"), "{e}");
    }

    #[test]
    fn the_windows_width_is_serial_arithmetic_across_the_wrap() {
        let (mut link, mut s) = logged_in(0);
        link.target_sent(&response(1, 0, u32::MAX - 2, 4), DEPTH, &mut s)
            .unwrap();
        link.initiator_sent(&command(1, u32::MAX - 2, false, 1), &mut s)
            .unwrap();
        link.initiator_sent(&command(2, 4, false, 1), &mut s)
            .unwrap();
        let e = link
            .initiator_sent(&command(3, 5, false, 1), &mut s)
            .unwrap_err();
        assert!(e.contains("beyond the target's window"), "{e}");
        s.session_logged_out = true;
        let e = s.check_contiguous().unwrap_err();
        assert!(e.contains("holes: 2 numbers used of 8"), "{e}");
    }

    #[test]
    fn cmd_sns_are_used_once_and_without_holes() {
        let (mut link, mut s) = opened();
        link.initiator_sent(&command(1, 1, false, 101), &mut s)
            .unwrap();
        let e = link
            .initiator_sent(&command(2, 1, false, 101), &mut s)
            .unwrap_err();
        assert!(e.contains("CmdSN 1 used twice"), "{e}");
        // An immediate command may carry a CmdSN already taken: it does not advance it.
        link.initiator_sent(&command(3, 2, true, 101), &mut s)
            .unwrap();
        link.initiator_sent(&command(4, 3, false, 101), &mut s)
            .unwrap();
        s.session_logged_out = true;
        let e = s.check_contiguous().unwrap_err();
        assert!(e.contains("holes"), "{e}");
    }

    #[test]
    fn without_a_logout_answer_only_acknowledged_cmd_sns_must_be_contiguous() {
        let (mut link, mut s) = opened();
        link.initiator_sent(&command(1, 1, false, 101), &mut s)
            .unwrap();
        link.initiator_sent(&command(2, 3, false, 101), &mut s)
            .unwrap();
        // CmdSN 2 was given up on when the last connection went: the target never saw it.
        link.target_sent(&response(1, 101, 2, 9), DEPTH, &mut s)
            .unwrap();
        s.check_contiguous().unwrap();
        // A target whose ExpCmdSN passed the hole acknowledged a CmdSN never sent.
        link.target_sent(&response(2, 102, 4, 11), DEPTH, &mut s)
            .unwrap();
        let e = s.check_contiguous().unwrap_err();
        assert!(e.contains("first missing: Some(2)"), "{e}");
    }

    #[test]
    fn exp_stat_sn_cannot_acknowledge_a_status_not_sent() {
        let (mut link, mut s) = opened();
        link.initiator_sent(&command(1, 1, false, 101), &mut s)
            .unwrap();
        let e = link
            .initiator_sent(&command(2, 2, false, 102), &mut s)
            .unwrap_err();
        assert!(e.contains("ExpStatSN 102"), "{e}");
    }

    #[test]
    fn data_and_r2t_sequence_numbers_count_from_zero() {
        let (mut link, mut s) = opened();
        let e = link
            .target_sent(&data_in(1, 1, None, 1, 8), DEPTH, &mut s)
            .unwrap_err();
        assert!(e.contains("DataSN 1"), "{e}");
        let (mut link, mut s) = opened();
        link.target_sent(&r2t(1, 0, 101), DEPTH, &mut s).unwrap();
        let e = link
            .target_sent(&r2t(1, 2, 101), DEPTH, &mut s)
            .unwrap_err();
        assert!(e.contains("R2TSN 2"), "{e}");
        let (mut link, mut s) = opened();
        link.initiator_sent(&data_out(1, Ttt(7), 0, false), &mut s)
            .unwrap();
        let e = link
            .initiator_sent(&data_out(1, Ttt(7), 0, true), &mut s)
            .unwrap_err();
        assert!(e.contains("Data-Out DataSN 0"), "{e}");
        // A new sequence (another R2T's TTT) numbers from 0 again.
        link.initiator_sent(&data_out(1, Ttt(8), 0, true), &mut s)
            .unwrap();
    }

    #[test]
    fn opcodes_belong_to_their_side() {
        let (mut link, mut s) = opened();
        assert!(link
            .initiator_sent(&response(1, 101, 1, 8), &mut s)
            .is_err());
        assert!(link
            .target_sent(&command(1, 1, false, 101), DEPTH, &mut s)
            .is_err());
    }
}
