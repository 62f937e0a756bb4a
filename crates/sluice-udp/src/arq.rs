//! Stop-and-wait for login and text exchanges, which iSCSI's own recovery does not cover.
//!
//! During login (RFC 7143 section 6) nothing resends a lost Login PDU: over TCP nothing is
//! lost. Login and Text requests are answered one at a time, each answer one PDU (sections
//! 11.10, 11.12, 11.13; a long answer comes in pieces, each asked for by its own request), so
//! the UDP transport can make them reliable the way TFTP does: the initiator's side sends a
//! request again when no answer with its Initiator Task Tag comes within an interval
//! ([`InitiatorArq`]); the target's side recognises a request identical to the last one and
//! answers it with the answer it kept instead of passing it on twice ([`TargetArq`]). Text
//! requests of the full feature phase are also retried by the initiator's core at
//! ErrorRecoveryLevel 1; either repair is harmless to the other. Sans-IO: time is `now`.

use std::time::{Duration, Instant};

use bytes::Bytes;

/// What a frame is to the stop-and-wait.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Exchange {
    /// A Login or Text Request (opcodes 0x03, 0x04) with its Initiator Task Tag.
    Request(u32),
    /// A Login or Text Response (opcodes 0x23, 0x24) with its Initiator Task Tag.
    Answer(u32),
    /// Anything else.
    Other,
}

impl Exchange {
    /// Classifies an encoded PDU by its opcode (byte 0) and ITT (bytes 16-19, section 11.2.1).
    pub fn of(frame: &[u8]) -> Exchange {
        let (Some(&op), Some(itt)) = (frame.first(), frame.get(16..20)) else {
            return Exchange::Other;
        };
        let itt = u32::from_be_bytes([itt[0], itt[1], itt[2], itt[3]]);
        match op & 0x3f {
            0x03 | 0x04 => Exchange::Request(itt),
            0x23 | 0x24 => Exchange::Answer(itt),
            _ => Exchange::Other,
        }
    }
}

/// The request awaiting its answer.
#[derive(Debug)]
struct Pending {
    itt: u32,
    datagrams: Vec<Bytes>,
    due: Instant,
    resends: u32,
}

/// The initiator's side: resends an unanswered request; see the [module docs](self).
#[derive(Debug)]
pub struct InitiatorArq {
    pending: Option<Pending>,
    interval: Duration,
    max_resends: u32,
    resent: u64,
}

impl InitiatorArq {
    /// Resends after `interval` without an answer, at most `max_resends` times per request.
    pub fn new(interval: Duration, max_resends: u32) -> InitiatorArq {
        InitiatorArq {
            pending: None,
            interval,
            max_resends,
            resent: 0,
        }
    }

    /// A request went out at `now` as `datagrams`.
    pub fn handle_request_sent(&mut self, itt: u32, datagrams: Vec<Bytes>, now: Instant) {
        self.pending = Some(Pending {
            itt,
            datagrams,
            due: now + self.interval,
            resends: 0,
        });
    }

    /// An answer arrived; whether it answers the request awaiting one. Anything else is a
    /// second copy (the first answer was only late when the request went again), which the
    /// login state machine must not see twice.
    pub fn handle_answer(&mut self, itt: u32) -> bool {
        if self.pending.as_ref().is_some_and(|p| p.itt == itt) {
            self.pending = None;
            return true;
        }
        false
    }

    /// When [`InitiatorArq::poll_resend`] is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.pending.as_ref().map(|p| p.due)
    }

    /// The datagrams to send again at `now`, if the answer is overdue. After the last
    /// resend the request is given up (the login's own timeout then ends the attempt).
    pub fn poll_resend(&mut self, now: Instant) -> Option<Vec<Bytes>> {
        let p = self.pending.as_mut().filter(|p| now >= p.due)?;
        if p.resends >= self.max_resends {
            self.pending = None;
            return None;
        }
        p.resends += 1;
        p.due = now + self.interval;
        self.resent += 1;
        Some(p.datagrams.clone())
    }

    /// Requests sent again so far.
    pub fn resent(&self) -> u64 {
        self.resent
    }
}

/// What the target's side makes of a request.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum Verdict {
    /// A new request: pass it on.
    Forward,
    /// A repeat of a request already answered: send these datagrams (the answer) again.
    Resend(Vec<Bytes>),
    /// A repeat of a request not answered yet: drop it.
    Drop,
}

/// The target's side: answers repeated requests from the kept answer; see the
/// [module docs](self).
#[derive(Debug, Default)]
pub struct TargetArq {
    last_request: Option<(u32, Bytes)>,
    answer: Option<Vec<Bytes>>,
}

impl TargetArq {
    /// Nothing seen yet.
    pub fn new() -> TargetArq {
        TargetArq::default()
    }

    /// A request (`frame`, whole) arrived.
    pub fn handle_request(&mut self, itt: u32, frame: &[u8]) -> Verdict {
        if let Some((_, last)) = &self.last_request {
            if last.as_ref() == frame {
                return match &self.answer {
                    Some(a) => Verdict::Resend(a.clone()),
                    None => Verdict::Drop,
                };
            }
        }
        self.last_request = Some((itt, Bytes::copy_from_slice(frame)));
        self.answer = None;
        Verdict::Forward
    }

    /// An answer went out as `datagrams`.
    pub fn handle_answer_sent(&mut self, itt: u32, datagrams: Vec<Bytes>) {
        if self.last_request.as_ref().is_some_and(|(i, _)| *i == itt) {
            self.answer = Some(datagrams);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(op: u8, itt: u32, fill: u8) -> Vec<u8> {
        let mut f = vec![fill; 48];
        f[0] = op;
        f[16..20].copy_from_slice(&itt.to_be_bytes());
        f
    }

    #[test]
    fn frames_are_classified_by_opcode() {
        assert_eq!(Exchange::of(&frame(0x43, 7, 0)), Exchange::Request(7));
        assert_eq!(Exchange::of(&frame(0x04, 8, 0)), Exchange::Request(8));
        assert_eq!(Exchange::of(&frame(0x23, 7, 0)), Exchange::Answer(7));
        assert_eq!(Exchange::of(&frame(0x24, 9, 0)), Exchange::Answer(9));
        assert_eq!(Exchange::of(&frame(0x01, 9, 0)), Exchange::Other);
        assert_eq!(Exchange::of(&[0x03; 10]), Exchange::Other);
    }

    #[test]
    fn the_initiator_resends_until_answered_or_out_of_tries() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut a = InitiatorArq::new(ms(100), 2);
        a.handle_request_sent(5, vec![Bytes::from_static(b"req")], t0);
        assert_eq!(a.poll_resend(t0 + ms(99)), None);
        assert_eq!(a.poll_resend(t0 + ms(100)).unwrap().len(), 1);
        assert_eq!(a.poll_timeout(), Some(t0 + ms(200)));
        assert!(!a.handle_answer(6), "another task's answer");
        assert!(a.poll_resend(t0 + ms(200)).is_some());
        assert_eq!(a.poll_resend(t0 + ms(300)), None, "two resends at most");
        assert_eq!(a.poll_timeout(), None);
        a.handle_request_sent(5, vec![], t0);
        assert!(a.handle_answer(5));
        assert!(!a.handle_answer(5), "a second copy");
        assert_eq!(a.poll_timeout(), None);
        assert_eq!(a.resent(), 2);
    }

    #[test]
    fn the_target_answers_a_repeat_from_what_it_kept() {
        let mut t = TargetArq::new();
        let req = frame(0x43, 1, 1);
        assert_eq!(t.handle_request(1, &req), Verdict::Forward);
        assert_eq!(t.handle_request(1, &req), Verdict::Drop, "not answered yet");
        t.handle_answer_sent(1, vec![Bytes::from_static(b"rsp")]);
        assert_eq!(
            t.handle_request(1, &req),
            Verdict::Resend(vec![Bytes::from_static(b"rsp")])
        );
        // The next step of the login is new.
        assert_eq!(t.handle_request(1, &frame(0x43, 1, 2)), Verdict::Forward);
        t.handle_answer_sent(2, vec![Bytes::from_static(b"other")]);
        assert_eq!(t.handle_request(1, &frame(0x43, 1, 2)), Verdict::Drop);
    }
}
