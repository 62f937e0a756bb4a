//! SCSI commands as the library takes them, and how they ended.

use std::time::Duration;

use bytes::Bytes;
use sluice_proto::pdu::codes::ScsiStatus;
use sluice_proto::pdu::TaskAttr;
use sluice_proto::task::Residual;
use sluice_scsi::SenseData;

use crate::error::{Error, ScsiFailure};

/// Which way a command's data flows.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum DataDirection {
    /// No data.
    None,
    /// Data from the target: the Expected Data Transfer Length.
    Read(u32),
    /// Data to the target (its length is the EDTL).
    Write(Bytes),
}

/// Any SCSI command: a CDB (up to 16 bytes in the BHS, longer ones in an Extended CDB AHS),
/// the LUN and the data.
///
/// ```
/// use sluice_initiator::Command;
/// let read = Command::read(0, &sluice_scsi::cdb::read16(2048, 8, false), 8 * 512);
/// assert_eq!(read.cdb[0], 0x88);
/// ```
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Command {
    /// LUN number (encoded per SAM on the wire).
    pub lun: u16,
    /// The CDB.
    pub cdb: Bytes,
    /// Data direction and length.
    pub data: DataDirection,
    /// Task attribute (SIMPLE by default).
    pub attr: TaskAttr,
}

impl Command {
    /// A command without data.
    pub fn none(lun: u16, cdb: &[u8]) -> Self {
        Self::new(lun, cdb, DataDirection::None)
    }

    /// A command reading up to `len` bytes.
    pub fn read(lun: u16, cdb: &[u8], len: u32) -> Self {
        Self::new(lun, cdb, DataDirection::Read(len))
    }

    /// A command writing `data`.
    pub fn write(lun: u16, cdb: &[u8], data: impl Into<Bytes>) -> Self {
        Self::new(lun, cdb, DataDirection::Write(data.into()))
    }

    fn new(lun: u16, cdb: &[u8], data: DataDirection) -> Self {
        Self {
            lun,
            cdb: Bytes::copy_from_slice(cdb),
            data,
            attr: TaskAttr::Simple,
        }
    }

    /// The Expected Data Transfer Length.
    pub fn edtl(&self) -> u32 {
        match &self.data {
            DataDirection::None => 0,
            DataDirection::Read(n) => *n,
            DataDirection::Write(d) => u32::try_from(d.len()).unwrap_or(u32::MAX),
        }
    }
}

/// How many PDUs one command moved (the lab checks these against the RFC rules).
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct CommandStats {
    /// Bytes of immediate data in the SCSI Command PDU.
    pub immediate_bytes: u32,
    /// Data-Out PDUs sent.
    pub data_out: u32,
    /// R2Ts received.
    pub r2t: u32,
    /// Data-In PDUs received.
    pub data_in: u32,
    /// Data-carrying PDUs per write sequence: the first entry is the unsolicited sequence
    /// (the command PDU if it carried immediate data, plus the unsolicited Data-Outs), then
    /// one entry per R2T. Empty for reads.
    pub sequences: Vec<u32>,
    /// Whether the status came in the last Data-In (phase collapse, section 11.7.3).
    pub phase_collapse: bool,
    /// Times the command was sent (more than 1 after a reconnect).
    pub attempts: u32,
}

/// How a command ended.
#[derive(Clone, Debug)]
pub struct CommandOutcome {
    /// SCSI status.
    pub status: ScsiStatus,
    /// Raw sense data (empty if none).
    pub sense_bytes: Bytes,
    /// Decoded sense data.
    pub sense: Option<SenseData>,
    /// Residual (section 11.4.5.1).
    pub residual: Residual,
    /// Data read (EDTL minus any underflow); empty for writes.
    pub data: Bytes,
    /// PDU counts.
    pub stats: CommandStats,
    /// Submission to completion.
    pub latency: Duration,
}

impl CommandOutcome {
    /// Whether the status is GOOD.
    pub fn is_good(&self) -> bool {
        self.status == ScsiStatus::Good
    }

    /// `Ok(self)` if GOOD, else [`Error::Scsi`] with the decoded sense.
    pub fn check(self) -> Result<Self, Error> {
        if self.is_good() {
            Ok(self)
        } else {
            Err(Error::Scsi(ScsiFailure {
                status: self.status,
                sense: self.sense,
            }))
        }
    }
}
