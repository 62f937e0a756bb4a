//! Logout in a target session (RFC 7143 sections 11.14, 11.15): of the whole session, or of
//! one connection, named by its CID and possibly sent on another connection.

use super::{CloseReason, ConnId, TargetSession};
use crate::pdu::codes::{LogoutReason, LogoutResponseCode, RejectReason};
use crate::pdu::{LogoutRequest, LogoutResponse, Pdu};
use crate::seq::SeqNum;

impl TargetSession {
    pub(super) fn handle_logout(&mut self, conn: ConnId, req: LogoutRequest) {
        let closing: Vec<ConnId> = match req.reason {
            // "close the session. All commands associated with the session (if any) are
            // terminated": every connection closes once its queue is sent.
            LogoutReason::CloseSession => self.live_connections().collect(),
            // "close the connection. All commands associated with the connection (if any) are
            // terminated." The request may arrive on another connection of the session
            // (section 11.14.3).
            LogoutReason::CloseConnection => {
                if let Some(named) = self.live_by_cid(req.cid) {
                    vec![named]
                } else {
                    self.logout_respond(conn, &req, LogoutResponseCode::CidNotFound);
                    return;
                }
            }
            // "remove the connection for recovery": connection recovery needs
            // ErrorRecoveryLevel 2 (section 7.1.5).
            LogoutReason::RemoveForRecovery => {
                self.logout_respond(conn, &req, LogoutResponseCode::RecoveryNotSupported);
                return;
            }
            _ => {
                // Reserved reason codes (section 11.14.1).
                self.reject_pdu(
                    conn,
                    RejectReason::InvalidPduField,
                    &Pdu::LogoutRequest(req),
                );
                return;
            }
        };
        self.logout_respond(conn, &req, LogoutResponseCode::Closed);
        for c in closing {
            self.close_connection(c, CloseReason::Logout);
        }
    }

    fn logout_respond(&mut self, conn: ConnId, req: &LogoutRequest, response: LogoutResponseCode) {
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
