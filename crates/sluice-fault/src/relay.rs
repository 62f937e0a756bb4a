//! One proxied connection without the sockets: [`Relay`] cuts each direction's byte stream
//! into frames, follows the login to learn the digests, and puts every frame through the
//! injector. A driver feeds it the bytes it reads and forwards what it returns.

use bytes::BytesMut;
use sluice_proto::framing::Digests;

use crate::cutter::{CutError, FrameCutter};
use crate::digests::{DigestTracker, TrackError};
use crate::event::FaultCounters;
use crate::injector::{Decision, FaultInjector};
use crate::plan::{Direction, FaultPlan};

/// One frame to forward (`decision.copies` times, possibly none), already faulted.
#[derive(Debug)]
pub struct Relayed {
    /// The frame as it goes on: corruption applied.
    pub frame: BytesMut,
    /// What to do with it.
    pub decision: Decision,
}

/// Why a relay cannot go on; the connection should be closed.
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// The byte stream cannot be framed within the limit.
    #[error("{direction}: {error}")]
    Cut {
        /// The stream.
        direction: Direction,
        /// Why.
        error: CutError,
    },
    /// A login PDU could not be read, so the digests after login are unknown.
    #[error("{direction}: {error}")]
    Login {
        /// The stream.
        direction: Direction,
        /// Why.
        error: TrackError,
    },
}

/// The sans-IO core of one proxied connection; see the [module docs](self).
#[derive(Debug)]
pub struct Relay {
    cutter: FrameCutter,
    tracker: DigestTracker,
    injector: FaultInjector,
}

impl Relay {
    /// Connection number `connection` of a run with `plan` and `seed`, cutting with any
    /// data segment length the wire allows.
    pub fn new(plan: FaultPlan, seed: u64, connection: u64) -> Relay {
        Relay::with_cutter(
            FaultInjector::new(plan, seed, connection),
            FrameCutter::default(),
        )
    }

    /// A relay around an injector, with a cutter of a chosen limit.
    pub fn with_cutter(injector: FaultInjector, cutter: FrameCutter) -> Relay {
        Relay {
            cutter,
            tracker: DigestTracker::new(),
            injector,
        }
    }

    /// Takes the next whole frame going `direction` off the front of `buf`, learns from it
    /// and faults it. `Ok(None)`: more bytes are needed. After an error `buf` is untouched.
    pub fn next_frame(
        &mut self,
        direction: Direction,
        buf: &mut BytesMut,
    ) -> Result<Option<Relayed>, RelayError> {
        let digests = self.tracker.digests();
        let Some(mut frame) = self
            .cutter
            .cut(buf, digests)
            .map_err(|error| RelayError::Cut { direction, error })?
        else {
            return Ok(None);
        };
        // Learn from the frame as it arrived, before any fault touches it.
        self.tracker
            .observe(&frame)
            .map_err(|error| RelayError::Login { direction, error })?;
        let decision = self.injector.inject(direction, &mut frame, digests);
        Ok(Some(Relayed { frame, decision }))
    }

    /// Bytes still missing before the frame at the front of `buf` is whole: how much to read
    /// at least.
    pub fn bytes_needed(&self, buf: &[u8]) -> usize {
        self.cutter.bytes_needed(buf, self.tracker.digests())
    }

    /// The largest frame the relay waits for under the digests now in force: the bound on a
    /// direction's receive buffer.
    pub fn max_frame_len(&self) -> usize {
        self.cutter.max_frame_len(self.tracker.digests())
    }

    /// The digests in force (none until login completes).
    pub fn digests(&self) -> Digests {
        self.tracker.digests()
    }

    /// What one direction saw and did so far.
    pub fn counters(&self, direction: Direction) -> &FaultCounters {
        self.injector.counters(direction)
    }

    /// The injector.
    pub fn injector(&self) -> &FaultInjector {
        &self.injector
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use sluice_proto::framing::encode;
    use sluice_proto::login::LoginStatus;
    use sluice_proto::pdu::{LoginResponse, NopOut, Pdu, Stage};
    use sluice_proto::seq::{Isid, Itt, Lun, SeqNum, Tsih, Ttt};
    use sluice_proto::text::encode_pairs;

    use super::*;
    use crate::plan::{Rate, Rules};

    fn final_login_response(digests: &str) -> Pdu {
        Pdu::LoginResponse(LoginResponse {
            transit: true,
            cont: false,
            csg: Stage::Operational.code(),
            nsg: Stage::FullFeature.code(),
            version_max: 0,
            version_active: 0,
            isid: Isid([0x80, 0, 0, 0, 0, 1]),
            tsih: Tsih(1),
            itt: Itt(1),
            stat_sn: SeqNum(0),
            exp_cmd_sn: SeqNum(1),
            max_cmd_sn: SeqNum(1),
            status: LoginStatus::SUCCESS,
            data: encode_pairs(&[("HeaderDigest", digests), ("DataDigest", digests)]),
        })
    }

    fn nop_out() -> Pdu {
        Pdu::NopOut(NopOut {
            immediate: true,
            lun: Lun(0),
            itt: Itt(9),
            ttt: Ttt::RESERVED,
            cmd_sn: SeqNum(1),
            exp_stat_sn: SeqNum(1),
            data: Bytes::from_static(b"ping"),
        })
    }

    #[test]
    fn digests_switch_on_after_the_final_login_response_and_frame_what_follows() {
        let plan = FaultPlan::symmetric(Rules {
            corrupt_data: Rate::ONE,
            ..Rules::default()
        });
        let mut relay = Relay::new(plan, 1, 0);
        // The initiator offered both digests (the tracker needs the offer to read an answer).
        let mut offer = BytesMut::new();
        encode(
            &Pdu::LoginRequest(sluice_proto::pdu::LoginRequest {
                transit: true,
                cont: false,
                csg: Stage::Operational.code(),
                nsg: Stage::FullFeature.code(),
                version_max: 0,
                version_min: 0,
                isid: Isid([0x80, 0, 0, 0, 0, 1]),
                tsih: Tsih(0),
                itt: Itt(1),
                cid: 0,
                cmd_sn: SeqNum(1),
                exp_stat_sn: SeqNum(0),
                data: encode_pairs(&[("HeaderDigest", "CRC32C"), ("DataDigest", "CRC32C")]),
            }),
            Digests::NONE,
            &mut offer,
        );
        let out = relay
            .next_frame(Direction::ToTarget, &mut offer)
            .unwrap()
            .unwrap();
        assert!(out.decision.is_pass(), "login is exempt");

        let mut stream = BytesMut::new();
        encode(&final_login_response("CRC32C"), Digests::NONE, &mut stream);
        let login_len = stream.len();
        encode(&nop_out(), Digests::BOTH, &mut stream);
        // Cut one byte at a time: the second frame must be cut with the digests on.
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        for b in stream.iter() {
            buf.extend_from_slice(&[*b]);
            if let Some(r) = relay.next_frame(Direction::ToInitiator, &mut buf).unwrap() {
                frames.push(r);
            }
        }
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].frame.len(), login_len);
        assert_eq!(relay.digests(), Digests::BOTH);
        assert!(frames[1].decision.corrupted());
        let c = relay.counters(Direction::ToInitiator);
        assert_eq!((c.pdus, c.corrupt_data), (2, 1));
        assert_eq!(relay.bytes_needed(&[]), 48);
    }

    #[test]
    fn an_unframeable_stream_is_an_error() {
        let mut relay = Relay::with_cutter(
            FaultInjector::new(FaultPlan::default(), 0, 0),
            FrameCutter::new(16),
        );
        let mut buf = BytesMut::new();
        encode(&nop_out(), Digests::NONE, &mut buf);
        buf[7] = 200;
        let err = relay.next_frame(Direction::ToTarget, &mut buf).unwrap_err();
        assert!(
            err.to_string().starts_with("i->t: DataSegmentLength 200"),
            "{err}"
        );
    }
}
