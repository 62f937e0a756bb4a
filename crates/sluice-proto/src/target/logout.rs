//! Logout in a target session (RFC 7143 sections 11.14, 11.15): of the whole session, or of
//! one connection, named by its CID and possibly sent on another connection.

use super::{CloseReason, ConnId, TargetSession};
use crate::pdu::codes::{logout_reason, logout_response, reject};
use crate::pdu::{LogoutRequest, LogoutResponse, Pdu};
use crate::seq::SeqNum;

impl TargetSession {
    pub(super) fn handle_logout(&mut self, conn: ConnId, req: LogoutRequest) {
        let closing: Vec<ConnId> = match req.reason & 0x7f {
            // "close the session. All commands associated with the session (if any) are
            // terminated": every connection closes once its queue is sent.
            logout_reason::CLOSE_SESSION => self.live_connections().collect(),
            // "close the connection. All commands associated with the connection (if any) are
            // terminated." The request may arrive on another connection of the session
            // (section 11.14.3).
            logout_reason::CLOSE_CONNECTION => {
                if let Some(named) = self.live_by_cid(req.cid) {
                    vec![named]
                } else {
                    self.logout_respond(conn, &req, logout_response::CID_NOT_FOUND);
                    return;
                }
            }
            // "remove the connection for recovery": connection recovery needs
            // ErrorRecoveryLevel 2 (section 7.1.5).
            logout_reason::REMOVE_FOR_RECOVERY => {
                self.logout_respond(conn, &req, logout_response::RECOVERY_NOT_SUPPORTED);
                return;
            }
            _ => {
                // Reserved reason codes (section 11.14.1).
                self.reject_pdu(conn, reject::INVALID_PDU_FIELD, &Pdu::LogoutRequest(req));
                return;
            }
        };
        self.logout_respond(conn, &req, logout_response::CLOSED);
        for c in closing {
            self.close_connection(c, CloseReason::Logout);
        }
    }

    fn logout_respond(&mut self, conn: ConnId, req: &LogoutRequest, response: u8) {
        let rsp = LogoutResponse {
            response,
            itt: req.itt,
            stat_sn: SeqNum(0),
            exp_cmd_sn: SeqNum(0),
            max_cmd_sn: SeqNum(0),
            time2wait: 0,
            time2retain: 0,
        };
        self.queue_to(conn, Pdu::LogoutResponse(rsp));
    }
}
