//! Text Requests in full feature phase (RFC 7143 sections 11.10, 11.11, 13.3) and Logout
//! (section 11.14).

use std::collections::VecDeque;

use bytes::Bytes;
use sluice_proto::login::LOGIN_SEGMENT_MAX;
use sluice_proto::pdu::codes::{LogoutReason, LogoutResponseCode, RejectReason};
use sluice_proto::pdu::{LogoutRequest, LogoutResponse, Pdu, TextRequest, TextResponse};
use sluice_proto::seq::{Itt, SeqNum, Ttt};
use sluice_proto::text::{encode_pairs, parse_pairs, split_text, TextAssembler, TextLimits};
use tracing::debug;

use crate::discovery::{send_targets, Query};
use crate::ffp::{End, Flow, FullFeature};

/// A text exchange in progress: request text still arriving (C bit), or response text still
/// to be fetched by the initiator (section 11.11.4: "the target ... sets the TTT to a value
/// other than 0xffffffff" while more follows).
#[derive(Debug, Default)]
pub(crate) struct TextState {
    assembler: Option<(Itt, TextAssembler)>,
    outgoing: Option<Outgoing>,
    next_ttt: u32,
}

/// Response text the initiator still has to fetch: (ITT, TTT, remaining chunks with C bits).
type Outgoing = (Itt, Ttt, VecDeque<(Bytes, bool)>);

impl FullFeature<'_> {
    pub(crate) fn handle_text(&mut self, req: TextRequest) -> Flow {
        // Continuation of a long response: an empty request echoing our TTT.
        if req.ttt != Ttt::RESERVED {
            let matches = matches!(&self.text.outgoing, Some((itt, ttt, _)) if *itt == req.itt && *ttt == req.ttt);
            if matches {
                self.send_next_text_chunk(req.itt);
            } else {
                self.reject_pdu(RejectReason::InvalidPduField, &Pdu::TextRequest(req));
            }
            return Flow::Continue;
        }
        // A new request abandons any unfinished one (section 11.10.4).
        self.text.outgoing = None;
        let (itt, mut asm) = match self.text.assembler.take() {
            Some((itt, asm)) if itt == req.itt => (itt, asm),
            _ => (req.itt, TextAssembler::new(TextLimits::LOGIN.max_total_len)),
        };
        let text = match asm.push(&req.data, req.cont) {
            Ok(Some(text)) => text,
            Ok(None) => {
                // Section 6.2: acknowledge each continued request with an empty response.
                self.text.assembler = Some((itt, asm));
                self.text.next_ttt = self.text.next_ttt.wrapping_add(1) & 0x7fff_ffff;
                let ttt = Ttt(self.text.next_ttt);
                self.send_text(itt, ttt, Bytes::new(), false, false);
                return Flow::Continue;
            }
            Err(e) => {
                debug!(error = %e, "text request refused");
                self.reject_pdu(RejectReason::ProtocolError, &Pdu::TextRequest(req));
                return Flow::Continue;
            }
        };
        let pairs = match parse_pairs(&text, &TextLimits::LOGIN) {
            Ok(p) => p,
            Err(e) => {
                debug!(error = %e, "malformed text");
                self.reject_pdu(RejectReason::ProtocolError, &Pdu::TextRequest(req));
                return Flow::Continue;
            }
        };
        let mut answer: Vec<(String, String)> = Vec::new();
        for (key, value) in &pairs {
            if key == "SendTargets" {
                let query = Query::parse(value);
                answer.extend(send_targets(
                    &self.ctx.config,
                    &query,
                    &self.initiator,
                    self.target_name.as_deref(),
                    self.local,
                ));
            } else if key.starts_with("X-") || key.starts_with("X#") {
                answer.push((key.clone(), "NotUnderstood".into()));
            } else if sluice_proto::text::lookup(key).is_some() {
                // Renegotiating operational keys in full feature phase is not supported; the
                // initiator keeps the values the login settled.
                answer.push((key.clone(), "Reject".into()));
            } else {
                answer.push((key.clone(), "NotUnderstood".into()));
            }
        }
        let body = encode_pairs(&answer);
        // Section 11.11: each response segment within the initiator's MaxRecvDataSegmentLength
        // and at most 8192 bytes (interop rule 7: open-iscsi refuses longer text PDUs).
        let max =
            (self.params.initiator_max_recv_data_segment_length as usize).min(LOGIN_SEGMENT_MAX);
        let chunks: VecDeque<(Bytes, bool)> = split_text(&body, max).into();
        self.text.next_ttt = self.text.next_ttt.wrapping_add(1) & 0x7fff_ffff;
        let ttt = Ttt(self.text.next_ttt);
        self.text.outgoing = Some((itt, ttt, chunks));
        self.send_next_text_chunk(itt);
        Flow::Continue
    }

    fn send_next_text_chunk(&mut self, itt: Itt) {
        let Some((_, ttt, chunks)) = self.text.outgoing.as_mut() else {
            return;
        };
        let ttt = *ttt;
        let (data, more) = chunks.pop_front().unwrap_or_default();
        let last = chunks.is_empty();
        if last {
            self.text.outgoing = None;
        }
        // The final response has F=1 and TTT 0xffffffff (interop rule 15).
        let final_ttt = if last { Ttt::RESERVED } else { ttt };
        self.send_text(itt, final_ttt, data, last, more && !last);
    }

    fn send_text(&mut self, itt: Itt, ttt: Ttt, data: Bytes, final_bit: bool, cont: bool) {
        let rsp = TextResponse {
            final_bit,
            cont,
            lun: Default::default(),
            itt,
            ttt,
            stat_sn: SeqNum(0),
            exp_cmd_sn: SeqNum(0),
            max_cmd_sn: SeqNum(0),
            data,
        };
        self.send(Pdu::TextResponse(rsp));
    }

    /// Logout (section 11.14): answer, then close. ErrorRecoveryLevel 0 has no connection
    /// recovery, so reason 2 is refused.
    pub(crate) fn handle_logout(&mut self, req: LogoutRequest) -> Flow {
        let response = match req.reason {
            LogoutReason::CloseSession => LogoutResponseCode::Closed,
            LogoutReason::CloseConnection if req.cid == self.cid => LogoutResponseCode::Closed,
            LogoutReason::CloseConnection => LogoutResponseCode::CidNotFound,
            _ => LogoutResponseCode::RecoveryNotSupported,
        };
        let rsp = LogoutResponse {
            response,
            itt: req.itt,
            stat_sn: SeqNum(0),
            exp_cmd_sn: SeqNum(0),
            max_cmd_sn: SeqNum(0),
            time2wait: 0,
            time2retain: 0,
        };
        self.send(Pdu::LogoutResponse(rsp));
        if response == LogoutResponseCode::Closed {
            Flow::Stop(End::Logout)
        } else {
            Flow::Continue
        }
    }
}
