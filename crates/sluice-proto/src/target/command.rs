//! Admission of commands by CmdSN across all connections of the session (RFC 7143 section
//! 4.2.2.1) and dispatch of every PDU an initiator may send in full feature phase.

use bytes::{Bytes, BytesMut};

use super::{ConnId, TargetSession, TargetSessionEnv};
use crate::params::SessionType;
use crate::pdu::codes::RejectReason;
use crate::pdu::{DataOut, NopIn, NopOut, Pdu, Reject};
use crate::seq::{Itt, SeqNum, Ttt};
use crate::window::{Admission, Slot};

/// A command waiting in the window for an earlier CmdSN, with the connection it came on and
/// the unsolicited Data-Out that arrived after it (with several connections a command can wait
/// while its connection goes on sending its data).
#[derive(Debug)]
pub(super) struct Held {
    pub(super) conn: ConnId,
    pub(super) pdu: Pdu,
    pub(super) data_out: Vec<DataOut>,
    /// Bytes in `data_out`: at most FirstBurstLength (section 13.14), so what waits is bounded
    /// by the window's depth times FirstBurstLength.
    pub(super) data_out_bytes: u32,
}

impl TargetSession {
    /// Routes one received PDU.
    pub(super) fn dispatch(&mut self, conn: ConnId, pdu: Pdu, env: &mut dyn TargetSessionEnv) {
        if self.config.session_type == SessionType::Discovery
            && !matches!(
                pdu,
                Pdu::TextRequest(_) | Pdu::LogoutRequest(_) | Pdu::NopOut(_)
            )
        {
            // RFC 7143 section 13.21: a discovery session carries only Text and Logout (and
            // NOP for liveness).
            self.reject_pdu(conn, RejectReason::ProtocolError, &pdu);
            return;
        }
        match pdu {
            Pdu::DataOut(d) => self.handle_data_out(conn, d),
            Pdu::SnackRequest(snack) => self.handle_snack(conn, snack),
            Pdu::ScsiCommand(_)
            | Pdu::NopOut(_)
            | Pdu::TaskMgmtRequest(_)
            | Pdu::TextRequest(_)
            | Pdu::LogoutRequest(_) => self.admit(conn, pdu, env),
            // Target-to-initiator opcodes, or a Login Request after login (section 4.2.4).
            other => self.reject_pdu(conn, RejectReason::ProtocolError, &other),
        }
    }

    /// Orders a command by CmdSN; runs it now, holds it for a gap, or ignores it.
    fn admit(&mut self, conn: ConnId, pdu: Pdu, env: &mut dyn TargetSessionEnv) {
        let Some((cmd_sn, immediate)) = command_numbering(&pdu) else {
            return;
        };
        let held = Held {
            conn,
            pdu,
            data_out: Vec::new(),
            data_out_bytes: 0,
        };
        match self.window.handle_command(cmd_sn, immediate, held) {
            Admission::Deliver(held, slot) => self.deliver(held, slot, env),
            // Section 4.2.2.1: commands are delivered in order across all connections of the
            // session; this one waits for those before it (at most the window's depth).
            Admission::Held => {}
            // Section 4.2.2.1: "the target MUST silently ignore any non-immediate command
            // outside of this range or non-immediate duplicates within the range".
            Admission::Ignored(_, _) => {}
        }
    }

    /// Runs a command that is due, then the data that waited with it. `slot` is its place in
    /// the window (`None` for immediate commands); whoever ends the command gives it back.
    pub(super) fn deliver(
        &mut self,
        held: Held,
        slot: Option<Slot>,
        env: &mut dyn TargetSessionEnv,
    ) {
        let Held {
            conn,
            pdu,
            data_out,
            ..
        } = held;
        if self
            .find(conn)
            .is_none_or(|c| c.state != super::connection::ConnState::Live)
        {
            // Its connection failed or is closing while the command waited for a gap (ERL 0):
            // nobody to answer; the window moves past it.
            self.release_slot(slot);
            return;
        }
        match pdu {
            Pdu::ScsiCommand(cmd) => {
                self.handle_scsi_command(conn, cmd, slot, env);
                for d in data_out {
                    self.handle_data_out(conn, d);
                }
            }
            Pdu::NopOut(n) => {
                self.handle_nop_out(conn, n);
                self.release_slot(slot);
            }
            Pdu::TaskMgmtRequest(t) => self.handle_tmf(conn, t, slot, env),
            Pdu::TextRequest(t) => {
                self.handle_text(conn, t, env);
                self.release_slot(slot);
            }
            Pdu::LogoutRequest(l) => {
                self.handle_logout(conn, l, env);
                self.release_slot(slot);
            }
            other => {
                self.reject_pdu(conn, RejectReason::ProtocolError, &other);
                self.release_slot(slot);
            }
        }
    }

    pub(super) fn release_slot(&mut self, slot: Option<Slot>) {
        let Some(slot) = slot else {
            return;
        };
        if self.params.error_recovery_level > 0 && self.retention_full() {
            // Kept until the initiator acknowledges what was sent (see `retention_full`).
            self.deferred_slots.push(slot);
            self.ping_retention_holders();
            return;
        }
        self.window.release(slot);
    }

    fn handle_nop_out(&mut self, conn: ConnId, n: NopOut) {
        if n.ttt != Ttt::RESERVED {
            // The answer to our NOP-In ping (RFC 7143 section 11.18.2); receiving it already
            // counted as a sign of life and acknowledged StatSNs.
            return;
        }
        if n.itt == Itt::RESERVED {
            // A NOP-Out that wants no answer (section 11.18.1).
            return;
        }
        // Section 11.19: the NOP-In answer echoes the ITT and the ping data. Section 11.18.5:
        // "The length of the reflected data is limited to MaxRecvDataSegmentLength", the
        // initiator's (ours may be larger, so its ping may carry more than it can receive).
        let Some(max) = self
            .find(conn)
            .map(|c| c.params.initiator_max_recv_data_segment_length as usize)
        else {
            return;
        };
        let mut data = n.data;
        data.truncate(max);
        let nop = NopIn {
            lun: n.lun,
            itt: n.itt,
            ttt: Ttt::RESERVED,
            stat_sn: SeqNum(0),
            exp_cmd_sn: SeqNum(0),
            max_cmd_sn: SeqNum(0),
            data,
        };
        self.queue_to(conn, Pdu::NopIn(nop));
    }

    /// Rejects a PDU, quoting its header (RFC 7143 section 11.17).
    pub(super) fn reject_pdu(&mut self, conn: ConnId, reason: RejectReason, pdu: &Pdu) {
        // The header only: the rejected PDU's data is not copied.
        let mut header = BytesMut::new();
        pdu.emit_header(&mut header);
        header.truncate(crate::pdu::BHS_LEN);
        self.send_reject(conn, reason, header.freeze());
    }

    pub(super) fn send_reject(&mut self, conn: ConnId, reason: RejectReason, header: Bytes) {
        let r = Reject {
            reason,
            stat_sn: SeqNum(0),
            exp_cmd_sn: SeqNum(0),
            max_cmd_sn: SeqNum(0),
            data_sn: 0,
            data: header,
        };
        self.queue_to(conn, Pdu::Reject(r));
    }
}

/// CmdSN and the I bit of a command PDU.
fn command_numbering(pdu: &Pdu) -> Option<(SeqNum, bool)> {
    Some(match pdu {
        Pdu::ScsiCommand(p) => (p.cmd_sn, p.immediate),
        Pdu::NopOut(p) => (p.cmd_sn, p.immediate),
        Pdu::TaskMgmtRequest(p) => (p.cmd_sn, p.immediate),
        Pdu::TextRequest(p) => (p.cmd_sn, p.immediate),
        Pdu::LogoutRequest(p) => (p.cmd_sn, p.immediate),
        _ => return None,
    })
}
