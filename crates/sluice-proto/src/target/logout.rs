//! Logout in a target session (RFC 7143 sections 11.14, 11.15): of the whole session, or of
//! one connection, named by its CID and possibly sent on another connection.

use super::{CloseReason, ConnId, TargetSession, TargetSessionEnv};
use crate::pdu::codes::{LogoutReason, LogoutResponseCode, RejectReason};
use crate::pdu::{LogoutRequest, LogoutResponse, Pdu};
use crate::seq::SeqNum;

impl TargetSession {
    pub(super) fn handle_logout(
        &mut self,
        conn: ConnId,
        req: LogoutRequest,
        env: &mut dyn TargetSessionEnv,
    ) {
        let closing: Vec<ConnId> = match req.reason {
            // "close the session. All commands associated with the session (if any) are
            // terminated": every connection closes once its queue is sent.
            LogoutReason::CloseSession => {
                // Tasks of failed connections that were waiting for reassignment end with the
                // session (ErrorRecoveryLevel 2).
                self.discard_orphans(env);
                self.live_connections().collect()
            }
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
            // "remove the connection for recovery. The connection is closed, and all commands
            // associated with it, if any, are to be prepared for a new allegiance." Needs
            // ErrorRecoveryLevel 2 (section 7.1.5); the connection named may be this one, a
            // live one, or one whose transport is already gone ("only a logical 'closing' of
            // the iSCSI connection for the CID is implied", section 11.14).
            LogoutReason::RemoveForRecovery => {
                if !self.recovers_connections() {
                    self.logout_respond(conn, &req, LogoutResponseCode::RecoveryNotSupported);
                    return;
                }
                let named = self.live_by_cid(req.cid);
                if !self.logout_for_recovery(req.cid) {
                    self.logout_respond(conn, &req, LogoutResponseCode::CidNotFound);
                    return;
                }
                self.logout_respond(conn, &req, LogoutResponseCode::Closed);
                if let Some(named) = named {
                    self.close_connection(named, CloseReason::RemovedForRecovery);
                }
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
        // Section 11.15.3/11.15.4: after a successful logout for recovery at ErrorRecoveryLevel
        // 2, how long to wait before reassigning, and how long the tasks are kept after that.
        let (time2wait, time2retain) = if response == LogoutResponseCode::Closed
            && req.reason == LogoutReason::RemoveForRecovery
        {
            (
                self.params.default_time2wait,
                self.params.default_time2retain,
            )
        } else {
            (0, 0)
        };
        let rsp = LogoutResponse {
            response,
            itt: req.itt,
            stat_sn: SeqNum(0),
            exp_cmd_sn: SeqNum(0),
            max_cmd_sn: SeqNum(0),
            time2wait,
            time2retain,
        };
        self.queue_to(conn, Pdu::LogoutResponse(rsp));
    }
}
