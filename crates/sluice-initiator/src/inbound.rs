//! PDUs from the target in full feature phase: sequence numbers, then dispatch to the task,
//! ping, task-management or asynchronous-event handling.

use sluice_proto::pdu::codes::AsyncEvent;
use sluice_proto::pdu::{DataIn, NopOut, Pdu};
use sluice_proto::seq::{Itt, SeqNum, Ttt};

use crate::driver::Driver;
use crate::error::Error;
use crate::tasks::Progress;

impl Driver {
    /// Handles one PDU other than a Logout Response. An error ends the connection.
    pub(crate) fn handle_ffp_pdu(&mut self, pdu: Pdu) -> Result<(), Error> {
        self.track_sequence_numbers(&pdu);
        match pdu {
            Pdu::ScsiResponse(rsp) => {
                let progress = match self.tasks.get_mut(&rsp.itt) {
                    Some(t) => t.handle_response(&rsp),
                    None => {
                        unknown(rsp.itt);
                        return Ok(());
                    }
                };
                self.progress(rsp.itt, progress);
            }
            Pdu::DataIn(d) => {
                let progress = match self.tasks.get_mut(&d.itt) {
                    Some(t) => t.handle_data_in(&d),
                    None => {
                        unknown(d.itt);
                        return Ok(());
                    }
                };
                self.progress(d.itt, progress);
            }
            Pdu::R2t(r2t) => {
                let mut out = Vec::new();
                let progress = match self.tasks.get_mut(&r2t.itt) {
                    Some(t) => t.handle_r2t(&r2t, &mut out),
                    None => {
                        unknown(r2t.itt);
                        return Ok(());
                    }
                };
                for d in out {
                    self.send_stamped(Pdu::DataOut(d));
                }
                self.progress(r2t.itt, progress);
            }
            Pdu::NopIn(nop) => {
                // Section 11.19: a NOP-In with a real TTT asks for a NOP-Out echoing it, with
                // the reserved ITT (section 11.18.1).
                if nop.ttt != Ttt::RESERVED {
                    let answer = Pdu::NopOut(NopOut {
                        immediate: true,
                        lun: nop.lun,
                        itt: Itt::RESERVED,
                        ttt: nop.ttt,
                        cmd_sn: self.window.immediate(),
                        exp_stat_sn: self.exp_stat_sn,
                        data: nop.data.clone(),
                    });
                    self.send_stamped(answer);
                }
                if nop.itt != Itt::RESERVED {
                    self.answer_ping(nop.itt);
                }
            }
            Pdu::TaskMgmtResponse(r) => self.answer_tmf(r.itt, r.response),
            Pdu::AsyncMessage(m) => {
                self.counters.lock().async_messages += 1;
                tracing::debug!(event = m.async_event.code(), "asynchronous message");
                match m.async_event {
                    // Section 11.9.1: the target requests a logout; we log out and then log
                    // in again so that the session's users see no failure.
                    AsyncEvent::LogoutRequested => self.logout(None),
                    // The target will drop the connection(s): recover now.
                    AsyncEvent::DropConnection | AsyncEvent::DropAllConnections => {
                        return Err(Error::Protocol(format!(
                            "target announced it drops the connection (async event {})",
                            m.async_event.code()
                        )))
                    }
                    // SCSI asynchronous event (sense in the data), renegotiation request
                    // (declined: nothing to renegotiate), vendor specific, unknown.
                    _ => {}
                }
            }
            Pdu::Reject(r) => {
                self.counters.lock().rejects += 1;
                // Section 11.17: the data segment is the rejected PDU's header; its ITT is
                // at bytes 16..20.
                let itt = r
                    .data
                    .get(16..20)
                    .map(|b| Itt(u32::from_be_bytes([b[0], b[1], b[2], b[3]])));
                if let Some(itt) = itt.filter(|i| self.tasks.contains_key(i)) {
                    self.complete(itt, Err(Error::Rejected(r.reason)));
                } else {
                    tracing::warn!(reason = r.reason.code(), "target rejected a PDU");
                }
            }
            Pdu::TextResponse(_) => tracing::debug!("unexpected Text Response ignored"),
            other => {
                return Err(Error::Protocol(format!(
                    "opcode {:#04x} is not valid from a target in full feature phase",
                    other.opcode()
                )))
            }
        }
        Ok(())
    }

    pub(crate) fn progress(&mut self, itt: Itt, progress: Progress) {
        if let Progress::Done(result) = progress {
            self.complete(itt, result);
        }
    }

    /// StatSN and the command window of a Data-In received in place (its payload went
    /// straight to the read's buffer).
    pub(crate) fn track_data_in(&mut self, p: &DataIn) {
        self.track(p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, p.status_present);
    }

    /// StatSN and the command window (sections 4.2.2.1 and 4.2.2.2).
    fn track_sequence_numbers(&mut self, pdu: &Pdu) {
        let (stat_sn, exp, max, advances) = match pdu {
            Pdu::ScsiResponse(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true),
            Pdu::DataIn(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, p.status_present),
            Pdu::R2t(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, false),
            // A NOP-In with the reserved ITT carries the next StatSN without advancing it.
            Pdu::NopIn(p) => (
                p.stat_sn,
                p.exp_cmd_sn,
                p.max_cmd_sn,
                p.itt != Itt::RESERVED,
            ),
            Pdu::TaskMgmtResponse(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true),
            Pdu::TextResponse(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true),
            Pdu::AsyncMessage(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true),
            Pdu::Reject(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true),
            Pdu::LogoutResponse(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true),
            _ => return,
        };
        self.track(stat_sn, exp, max, advances);
    }

    fn track(&mut self, stat_sn: SeqNum, exp: SeqNum, max: SeqNum, advances: bool) {
        self.window.update(exp, max);
        if advances {
            let next: SeqNum = stat_sn.next();
            if next.gt(self.exp_stat_sn) {
                self.exp_stat_sn = next;
            }
        }
    }
}

fn unknown(itt: Itt) {
    tracing::debug!(?itt, "PDU for an unknown task ignored");
}
