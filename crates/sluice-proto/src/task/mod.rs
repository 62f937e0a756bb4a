//! Per-task data transfer bookkeeping (RFC 7143 sections 4.2.5, 11.3-11.8), both roles.
//!
//! Everything here works on typed PDU values ([`crate::pdu`]); it never sees bytes on the wire,
//! a socket or the clock. The modules:
//! - [`target_write`]: a target collecting immediate, unsolicited and solicited (R2T) write data
//!   straight into one preallocated buffer.
//! - [`target_read`]: a target cutting read data into Data-In PDUs (an iterator over slices of
//!   one `Bytes`, no copy), with phase collapse and residuals.
//! - [`initiator`]: the initiator side of both: ITT allocation, the Data-Out PDUs to send for
//!   a write (immediate, unsolicited, per R2T) and Data-In reassembly for a read.
//!
//! Errors caused by the peer are [`TaskError`]s; each one says what to tell the peer
//! ([`PeerAction`]). After an error the task is dead: the driver ends it as the action says.
//!
//! StatSN, ExpCmdSN and MaxCmdSN of the PDUs built here are left zero: the connection stamps
//! them at send time.

pub mod initiator;
pub mod target_read;
pub mod target_write;

mod coverage;
#[cfg(test)]
mod sim_tests;

use bytes::{BufMut, Bytes, BytesMut};

use crate::pdu::codes::{RejectReason, ScsiResponseCode, ScsiStatus};
use crate::pdu::ScsiResponse;
use crate::seq::{Itt, Ttt};

/// What the connection does about a [`TaskError`].
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum PeerAction {
    /// Send a Reject PDU with this reason (section 11.17.1) and end the task.
    Reject(RejectReason),
    /// End the command with CHECK CONDITION, sense key ABORTED COMMAND (0x0b) and this
    /// ASC/ASCQ (RFC 7143 section 11.4.7.2).
    CheckCondition {
        /// Additional sense code.
        asc: u8,
        /// Additional sense code qualifier.
        ascq: u8,
    },
    /// Close the connection: at ErrorRecoveryLevel 0 the only recovery is session recovery
    /// (section 7), e.g. for a sequence error implying a lost PDU (section 7.9).
    Close,
}

/// A peer broke a data-transfer rule. Each variant fixes the [`PeerAction`].
#[derive(Clone, Copy, Debug, Eq, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TaskError {
    /// A PDU for another task was routed here, or a LUN was not echoed.
    #[error("PDU field does not match the task (ITT {0:?})")]
    WrongTask(Itt),
    /// The command is not a write (W bit clear) but carries or announces data.
    #[error("data for a command without the W bit")]
    NotAWrite,
    /// Data-Out with a TTT that no outstanding R2T carries.
    #[error("unknown target transfer tag {0:?}")]
    UnknownTtt(Ttt),
    /// Immediate data while ImmediateData=No, or unsolicited Data-Out while InitialR2T=Yes
    /// or after the command said F=1 (section 11.4.7.2 "Unexpected unsolicited data").
    #[error("unexpected unsolicited data")]
    UnexpectedUnsolicited,
    /// The unsolicited data was not exactly min(FirstBurstLength, EDTL), or immediate data was
    /// longer than FirstBurstLength (section 11.4.7.2 "Incorrect amount of data").
    #[error("incorrect amount of unsolicited data")]
    IncorrectUnsolicitedAmount,
    /// A data segment longer than the receiver's MaxRecvDataSegmentLength (section 13.12).
    #[error("data segment of {len} bytes exceeds MaxRecvDataSegmentLength {max}")]
    SegmentTooLong {
        /// Segment length.
        len: u32,
        /// The declared maximum.
        max: u32,
    },
    /// Data past the Expected Data Transfer Length.
    #[error("data at {offset}+{len} beyond the expected data transfer length {edtl}")]
    BeyondEdtl {
        /// Buffer offset.
        offset: u32,
        /// Segment length.
        len: u32,
        /// EDTL.
        edtl: u32,
    },
    /// Data outside the burst (R2T or unsolicited sequence) it claims to belong to, or a
    /// burst that ended (F bit) before or after its length.
    #[error("data does not fit its burst")]
    BurstMismatch,
    /// Data that partly overlaps data already received (section 13.18: overlays forbidden).
    #[error("overlapping data at offset {0}")]
    Overlap(u32),
    /// DataSN/R2TSN out of sequence, or a buffer offset not continuing the previous one while
    /// DataPDUInOrder=Yes (section 7.9: implies a lost PDU).
    #[error("sequence error: expected {expected}, got {got}")]
    Sequence {
        /// The expected number or offset.
        expected: u32,
        /// What arrived.
        got: u32,
    },
    /// Data for a later sequence before an earlier one ended while DataSequenceInOrder=Yes.
    #[error("data sequence out of order")]
    SequenceOrder,
    /// An R2T that is invalid (zero length, longer than MaxBurstLength, past EDTL).
    #[error("invalid R2T")]
    InvalidR2t,
    /// Status and data disagree (residual or DataSN count inconsistent with the data).
    #[error("status inconsistent with the data received")]
    Inconsistent,
    /// A PDU for a task that already completed.
    #[error("PDU after the task completed")]
    AfterCompletion,
}

impl TaskError {
    /// What to tell the peer.
    pub fn action(self) -> PeerAction {
        match self {
            Self::WrongTask(_) | Self::UnknownTtt(_) | Self::NotAWrite | Self::InvalidR2t => {
                PeerAction::Reject(RejectReason::InvalidPduField)
            }
            // Section 11.4.7.2 table: ABORTED COMMAND, ASC 0x0c, ASCQ 0x0c / 0x0d.
            Self::UnexpectedUnsolicited => PeerAction::CheckCondition {
                asc: 0x0c,
                ascq: 0x0c,
            },
            Self::IncorrectUnsolicitedAmount => PeerAction::CheckCondition {
                asc: 0x0c,
                ascq: 0x0d,
            },
            Self::BeyondEdtl { .. }
            | Self::BurstMismatch
            | Self::Overlap(_)
            | Self::SequenceOrder
            | Self::AfterCompletion => PeerAction::Reject(RejectReason::ProtocolError),
            // Section 7.9: a DataSN or offset out of sequence implies a lost PDU. Without
            // SNACK (ErrorRecoveryLevel 0) the task cannot be completed, but the byte stream is
            // still in step, so only the task fails: ABORTED COMMAND, DATA PHASE ERROR
            // (SPC-4 4Bh/00h). Closing the connection would also do, but it punishes every
            // other task on it and makes initiators re-login.
            Self::Sequence { .. } => PeerAction::CheckCondition {
                asc: 0x4b,
                ascq: 0x00,
            },
            Self::SegmentTooLong { .. } | Self::Inconsistent => PeerAction::Close,
        }
    }
}

/// Residual of a command (RFC 7143 section 11.4.5.1).
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub enum Residual {
    /// Exactly EDTL bytes were transferred.
    #[default]
    None,
    /// U bit: fewer bytes than EDTL; the count is EDTL minus the bytes transferred.
    Underflow(u32),
    /// O bit: the SCSI layer wanted more than EDTL; the count is the bytes not transferred.
    Overflow(u32),
}

impl Residual {
    /// The residual of a command with `edtl` whose SCSI layer wanted to move `wanted` bytes.
    ///
    /// Section 11.4.1: "bit O ... Residual Overflow. In this case, the Residual Count
    /// indicates the number of bytes that were not transferred because the initiator's
    /// Expected Data Transfer Length was not sufficient"; "bit U ... Residual Underflow. In
    /// this case, the Residual Count indicates the number of bytes not transferred out of the
    /// number of bytes expected to be transferred."
    pub fn from_lengths(edtl: u32, wanted: u32) -> Self {
        match wanted.cmp(&edtl) {
            std::cmp::Ordering::Equal => Self::None,
            std::cmp::Ordering::Less => Self::Underflow(edtl - wanted),
            std::cmp::Ordering::Greater => Self::Overflow(wanted - edtl),
        }
    }

    /// Decodes the O/U bits and Residual Count of a response (both set is invalid: `None`).
    pub fn from_flags(overflow: bool, underflow: bool, count: u32) -> Option<Self> {
        match (overflow, underflow) {
            (false, false) => Some(Self::None),
            (true, false) => Some(Self::Overflow(count)),
            (false, true) => Some(Self::Underflow(count)),
            (true, true) => None,
        }
    }

    /// `(O, U, Residual Count)` as carried in a SCSI Response or a Data-In with S=1.
    pub fn to_flags(self) -> (bool, bool, u32) {
        match self {
            Self::None => (false, false, 0),
            Self::Overflow(n) => (true, false, n),
            Self::Underflow(n) => (false, true, n),
        }
    }
}

/// How many PDUs of each kind a task moved, for the lab's PDU-count checks.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct TaskCounters {
    /// Bytes of immediate data carried by the command PDU.
    pub immediate_bytes: u32,
    /// Data-Out PDUs (unsolicited and solicited).
    pub data_out: u32,
    /// R2T PDUs.
    pub r2t: u32,
    /// Data-In PDUs.
    pub data_in: u32,
    /// Data PDUs fully covering data already received, ignored.
    pub duplicates: u32,
    /// Recovery R2Ts: R2Ts asking again for Data-Out that was lost (RFC 7143 section 11.8),
    /// counted in `r2t` too.
    pub recovery_r2t: u32,
    /// Data PDUs lost (a digest error, or a DataSN or offset gap), as far as seen.
    pub lost: u32,
}

/// A source of fresh Target Transfer Tags, owned by the connection or session.
pub trait TttAllocator {
    /// A tag not in use by any outstanding R2T and never [`Ttt::RESERVED`].
    fn allocate(&mut self) -> Ttt;
}

/// A [`TttAllocator`] counting up and skipping the reserved value.
#[derive(Clone, Debug, Default)]
pub struct SequentialTtts {
    next: u32,
}

impl SequentialTtts {
    /// Starts counting at `first` (which is skipped if reserved).
    pub fn starting_at(first: u32) -> Self {
        Self { next: first }
    }
}

impl TttAllocator for SequentialTtts {
    fn allocate(&mut self) -> Ttt {
        if self.next == Ttt::RESERVED.0 {
            self.next = 0;
        }
        let ttt = Ttt(self.next);
        self.next = self.next.wrapping_add(1);
        ttt
    }
}

/// Builds a SCSI Response with "Command Completed at Target" (RFC 7143 section 11.4).
///
/// `exp_data_sn` is the number of Data-In PDUs the target sent for the command, 0 when it sent
/// none (section 11.4.8). `sense` is raw sense data; it is prefixed with its 2-byte SenseLength
/// (section 11.4.7.1). StatSN, ExpCmdSN and MaxCmdSN are left zero for the connection to fill.
pub fn scsi_response(
    itt: Itt,
    status: ScsiStatus,
    residual: Residual,
    exp_data_sn: u32,
    sense: &[u8],
) -> ScsiResponse {
    let (overflow, underflow, count) = residual.to_flags();
    let data = if sense.is_empty() {
        Bytes::new()
    } else {
        let len = u16::try_from(sense.len()).unwrap_or(u16::MAX);
        let mut buf = BytesMut::with_capacity(2 + usize::from(len));
        buf.put_u16(len);
        buf.put_slice(&sense[..usize::from(len)]);
        buf.freeze()
    };
    ScsiResponse {
        bidi_overflow: false,
        bidi_underflow: false,
        overflow,
        underflow,
        response: ScsiResponseCode::Completed,
        status,
        itt,
        snack_tag: 0,
        stat_sn: Default::default(),
        exp_cmd_sn: Default::default(),
        max_cmd_sn: Default::default(),
        exp_data_sn,
        bidi_residual: 0,
        residual: count,
        data,
    }
}

/// Fixed-format sense data (SPC-4 4.5.3) for a [`PeerAction::CheckCondition`]: sense key
/// ABORTED COMMAND with the given ASC/ASCQ.
pub fn aborted_command_sense(asc: u8, ascq: u8) -> [u8; 18] {
    let mut sense = [0u8; 18];
    sense[0] = 0x70;
    sense[2] = 0x0b;
    sense[7] = 10;
    sense[12] = asc;
    sense[13] = ascq;
    sense
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn residuals_follow_section_11_4_5_1() {
        assert_eq!(Residual::from_lengths(4096, 4096), Residual::None);
        assert_eq!(
            Residual::from_lengths(4096, 1024),
            Residual::Underflow(3072)
        );
        assert_eq!(Residual::from_lengths(512, 4096), Residual::Overflow(3584));
        assert_eq!(Residual::Underflow(7).to_flags(), (false, true, 7));
        assert_eq!(Residual::from_flags(true, true, 1), None);
    }

    #[test]
    fn sequential_ttts_skip_reserved() {
        let mut ttts = SequentialTtts::starting_at(u32::MAX - 1);
        assert_eq!(ttts.allocate(), Ttt(u32::MAX - 1));
        assert_eq!(ttts.allocate(), Ttt(0));
    }

    #[test]
    fn response_prefixes_sense_length() {
        let rsp = scsi_response(
            Itt(3),
            ScsiStatus::CheckCondition,
            Residual::None,
            2,
            &[1, 2, 3],
        );
        assert_eq!(&rsp.data[..], &[0, 3, 1, 2, 3]);
        assert_eq!(rsp.exp_data_sn, 2);
        let action = TaskError::IncorrectUnsolicitedAmount.action();
        assert_eq!(
            action,
            PeerAction::CheckCondition {
                asc: 0x0c,
                ascq: 0x0d
            }
        );
    }
}
