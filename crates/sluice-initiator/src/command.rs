//! SCSI commands as the library takes them, and how they ended.

use std::time::Duration;

use bytes::Bytes;
pub use sluice_proto::initiator::CommandStats;
use sluice_proto::initiator::{CommandData, CommandResult};
use sluice_proto::pdu::codes::ScsiStatus;
use sluice_proto::pdu::{Cdb, TaskAttr};
use sluice_proto::seq::Lun;
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

    /// The command as the session core takes it.
    pub(crate) fn into_core(self) -> sluice_proto::initiator::Command {
        sluice_proto::initiator::Command {
            lun: Lun::from_number(self.lun),
            cdb: Cdb::new(&self.cdb),
            data: match self.data {
                DataDirection::None => CommandData::None,
                DataDirection::Read(n) => CommandData::Read(n),
                DataDirection::Write(d) => CommandData::Write(d),
            },
            attr: self.attr,
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
    /// The core's result, with its sense data decoded.
    pub(crate) fn from_result(r: CommandResult) -> Self {
        let sense = (!r.sense.is_empty())
            .then(|| SenseData::parse(&r.sense).ok())
            .flatten();
        Self {
            status: r.status,
            sense_bytes: r.sense,
            sense,
            residual: r.residual,
            data: r.data,
            stats: r.stats,
            latency: r.latency,
        }
    }

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
