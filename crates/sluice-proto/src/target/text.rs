//! Text Requests in full feature phase (RFC 7143 sections 11.10, 11.11, 13.3): SendTargets,
//! long answers fetched with continuation requests, and operational keys (which a session in
//! full feature phase does not renegotiate).

use std::collections::VecDeque;

use bytes::Bytes;

use super::{ConnId, TargetSession, TargetSessionEnv};
use crate::login::LOGIN_SEGMENT_MAX;
use crate::pdu::codes::RejectReason;
use crate::pdu::{Pdu, TextRequest, TextResponse};
use crate::seq::{Itt, SeqNum, Ttt};
use crate::text::keys::{self, KeyId, NOT_UNDERSTOOD, REJECT};
use crate::text::{encode_pairs, parse_pairs, split_text, TextAssembler, TextLimits};

/// A connection's text exchange in progress: request text still arriving (C bit), or response
/// text still to be fetched by the initiator (section 11.11.4: "the target ... sets the TTT to
/// a value other than 0xffffffff" while more follows).
#[derive(Debug, Default)]
pub(super) struct TextState {
    assembler: Option<(Itt, TextAssembler)>,
    outgoing: Option<Outgoing>,
    next_ttt: u32,
}

/// Response text the initiator still has to fetch: (ITT, TTT, remaining chunks with C bits).
type Outgoing = (Itt, Ttt, VecDeque<(Bytes, bool)>);

impl TextState {
    /// A fresh TTT for a text exchange: below 2^31, never the reserved value.
    fn next_ttt(&mut self) -> Ttt {
        self.next_ttt = self.next_ttt.wrapping_add(1) & 0x7fff_ffff;
        Ttt(self.next_ttt)
    }
}

impl TargetSession {
    pub(super) fn handle_text(
        &mut self,
        conn: ConnId,
        req: TextRequest,
        env: &mut dyn TargetSessionEnv,
    ) {
        let Some(c) = self.find_mut(conn) else {
            return;
        };
        // Continuation of a long response: an empty request echoing our TTT.
        if req.ttt != Ttt::RESERVED {
            let ours = matches!(&c.text.outgoing, Some((itt, ttt, _)) if *itt == req.itt && *ttt == req.ttt);
            if ours {
                self.send_next_text_chunk(conn, req.itt);
            } else {
                self.reject_pdu(conn, RejectReason::InvalidPduField, &Pdu::TextRequest(req));
            }
            return;
        }
        // A new request abandons any unfinished one (section 11.10.4).
        c.text.outgoing = None;
        let (itt, mut asm) = match c.text.assembler.take() {
            Some((itt, asm)) if itt == req.itt => (itt, asm),
            _ => (req.itt, TextAssembler::new(TextLimits::LOGIN.max_total_len)),
        };
        let text = match asm.push(&req.data, req.cont) {
            Ok(Some(text)) => text,
            Ok(None) => {
                // Section 6.2: acknowledge each continued request with an empty response.
                c.text.assembler = Some((itt, asm));
                let ttt = c.text.next_ttt();
                self.send_text(conn, itt, ttt, Bytes::new(), false, false);
                return;
            }
            Err(_) => {
                self.reject_pdu(conn, RejectReason::ProtocolError, &Pdu::TextRequest(req));
                return;
            }
        };
        let Ok(pairs) = parse_pairs(&text, &TextLimits::LOGIN) else {
            self.reject_pdu(conn, RejectReason::ProtocolError, &Pdu::TextRequest(req));
            return;
        };
        let mut answer: Vec<(String, String)> = Vec::new();
        for (key, value) in &pairs {
            let def = keys::lookup(key);
            if def.is_some_and(|d| d.id == KeyId::SendTargets) {
                answer.extend(env.send_targets(conn, value));
            } else if keys::is_extension(key) {
                answer.push((key.clone(), NOT_UNDERSTOOD.into()));
            } else if def.is_some() {
                // Renegotiating operational keys in full feature phase is not supported; the
                // initiator keeps the values the login settled.
                answer.push((key.clone(), REJECT.into()));
            } else {
                answer.push((key.clone(), NOT_UNDERSTOOD.into()));
            }
        }
        let body = encode_pairs(&answer);
        let Some(c) = self.find_mut(conn) else {
            return;
        };
        // Section 11.11: each response segment within the initiator's MaxRecvDataSegmentLength
        // and at most 8192 bytes (open-iscsi receives text into an 8192-byte buffer).
        let max = (c.params.initiator_max_recv_data_segment_length as usize).min(LOGIN_SEGMENT_MAX);
        let chunks: VecDeque<(Bytes, bool)> = split_text(&body, max).into();
        let ttt = c.text.next_ttt();
        c.text.outgoing = Some((itt, ttt, chunks));
        self.send_next_text_chunk(conn, itt);
    }

    fn send_next_text_chunk(&mut self, conn: ConnId, itt: Itt) {
        let Some(c) = self.find_mut(conn) else {
            return;
        };
        let Some((_, ttt, chunks)) = c.text.outgoing.as_mut() else {
            return;
        };
        let ttt = *ttt;
        let (data, more) = chunks.pop_front().unwrap_or_default();
        let last = chunks.is_empty();
        if last {
            c.text.outgoing = None;
        }
        // The final response has F=1 and TTT 0xffffffff (section 11.11.4).
        let final_ttt = if last { Ttt::RESERVED } else { ttt };
        self.send_text(conn, itt, final_ttt, data, last, more && !last);
    }

    fn send_text(
        &mut self,
        conn: ConnId,
        itt: Itt,
        ttt: Ttt,
        data: Bytes,
        final_bit: bool,
        cont: bool,
    ) {
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
        self.queue_to(conn, Pdu::TextResponse(rsp));
    }
}
