//! Running a SCSI command and turning its result into Data-In PDUs and a SCSI Response, with
//! the residuals of RFC 7143 section 11.4.5.

use bytes::{Bytes, BytesMut};
use sluice_proto::pdu::codes::ScsiStatus;
use sluice_proto::pdu::{Cdb, Pdu, ScsiCommand};
use sluice_proto::seq::{Itt, Lun};
use sluice_proto::task::target_read::DataInSequence;
use sluice_proto::task::target_write::{TargetWrite, WriteData};
use sluice_proto::task::{scsi_response, Residual};
use sluice_scsi::{CommandResult, DataOut, ScsiTarget, Transfer};

use crate::ffp::FullFeature;

/// A command ready to run: everything `execute` needs, owned, so it can move to a worker
/// thread for blocking backends.
#[derive(Debug)]
pub(crate) struct Execution {
    pub itt: Itt,
    pub lun: Lun,
    cdb: Cdb,
    /// The Data-Out as it arrived (the PDUs' segments when in order: no copy).
    data_out: WriteData,
    /// The initiator's Expected Data Transfer Length.
    edtl: u32,
    /// R bit: the initiator expects Data-In.
    read: bool,
    /// What the CDB would move.
    transfer: Transfer,
}

impl Execution {
    pub(crate) fn new(cmd: &ScsiCommand, transfer: Transfer, data_out: WriteData) -> Self {
        Self {
            itt: cmd.itt,
            lun: cmd.lun,
            cdb: cmd.cdb.clone(),
            data_out,
            edtl: cmd.expected_data_transfer_length,
            read: cmd.read,
            transfer,
        }
    }

    /// How many bytes of Data-In the initiator expects (0 for commands without a read).
    pub(crate) fn data_in_len(&self) -> usize {
        if self.read {
            self.edtl as usize
        } else {
            0
        }
    }

    /// Runs the command against the SCSI layer; `buf` is a recycled Data-In buffer.
    pub(crate) fn run(
        self,
        scsi: &ScsiTarget,
        nexus: u64,
        mut buf: BytesMut,
    ) -> (Outcome, BytesMut) {
        let mut shared = None;
        let result = scsi.execute_shared(
            nexus,
            self.lun.0,
            &self.cdb,
            DataOut::Segments(self.data_out.segments()),
            &mut buf,
            &mut shared,
        );
        // A zero-copy read hands over the backend's bytes; everything else was built in the
        // recycled buffer, split off here (the buffer keeps its spare capacity for the next).
        let data = match shared {
            Some(b) => b,
            None => buf.split().freeze(),
        };
        (
            Outcome {
                exec: self,
                result,
                data,
            },
            buf,
        )
    }
}

/// A finished command.
#[derive(Debug)]
pub(crate) struct Outcome {
    exec: Execution,
    result: CommandResult,
    data: Bytes,
}

impl FullFeature<'_> {
    /// Sends what a finished command owes the initiator.
    pub(crate) fn send_result(
        &mut self,
        outcome: Outcome,
        buf: BytesMut,
        write: Option<TargetWrite>,
    ) {
        self.recycle_data_in(buf);
        let Outcome { exec, result, data } = outcome;
        // sluice-scsi knows nothing of iSCSI: its SAM status byte becomes the transport's here.
        let status = ScsiStatus::from(result.status);
        let sense = result.sense_bytes().unwrap_or_default();
        if let Some(task) = write {
            // Writes: the residual compares what the CDB wanted with the EDTL (section
            // 11.4.5.1), which the write task already knows; ExpDataSN counts its R2Ts.
            let rsp = task.response(status, &sense);
            self.send(Pdu::ScsiResponse(rsp));
            return;
        }
        if exec.read {
            let mut seq = DataInSequence::new(exec.itt, data, exec.edtl, status, &self.params);
            for pdu in &mut seq {
                self.send(Pdu::DataIn(pdu));
            }
            if seq.needs_response() {
                let rsp = seq.response(&sense);
                self.send(Pdu::ScsiResponse(rsp));
            }
            return;
        }
        // No data phase on the wire. If the CDB wanted data, the shortfall is an overflow
        // (e.g. WRITE with EDTL 0: residual = the CDB's transfer length).
        let residual = match exec.transfer {
            Transfer::ToDevice(n) | Transfer::FromDevice(n) if status == ScsiStatus::Good => {
                Residual::from_lengths(exec.edtl, u32::try_from(n).unwrap_or(u32::MAX))
            }
            _ => Residual::None,
        };
        let rsp = scsi_response(exec.itt, status, residual, 0, &sense);
        self.send(Pdu::ScsiResponse(rsp));
    }
}
