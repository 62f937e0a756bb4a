//! `--trace`: one line per PDU on standard error.

use sluice_proto::pdu::Pdu;

/// A fault the injector applied, after the PDU it hit.
pub(super) fn trace_fault(on: bool, now: u64, cid: u16, event: &sluice_fault::FaultEvent) {
    if on {
        eprintln!("{now:>12} cid {cid} FAULT {event}");
    }
}

pub(super) fn trace(on: bool, now: u64, cid: u16, dir: &str, pdu: &Pdu) {
    if on {
        eprintln!("{now:>12} cid {cid} {dir} {}", trace_line(pdu));
    }
}

/// One line per PDU for `--trace`: the fields that matter when reading a run.
fn trace_line(pdu: &Pdu) -> String {
    match pdu {
        Pdu::ScsiCommand(p) => {
            format!(
            "SCSI Command itt {:#x} cmd_sn {} imm {} R{} W{} F{} edtl {} data {} exp_stat_sn {}",
            p.itt.0, p.cmd_sn, p.immediate, p.read as u8, p.write as u8, p.final_bit as u8,
            p.expected_data_transfer_length, p.data.len(), p.exp_stat_sn
        )
        }
        Pdu::DataOut(p) => format!(
            "Data-Out itt {:#x} ttt {:#x} data_sn {} offset {} len {} F{}",
            p.itt.0,
            p.ttt.0,
            p.data_sn,
            p.buffer_offset,
            p.data.len(),
            p.final_bit as u8
        ),
        Pdu::DataIn(p) => format!(
            "Data-In itt {:#x} data_sn {} offset {} len {} S{} F{} stat_sn {} exp {} max {}",
            p.itt.0,
            p.data_sn,
            p.buffer_offset,
            p.data.len(),
            p.status_present as u8,
            p.final_bit as u8,
            p.stat_sn,
            p.exp_cmd_sn,
            p.max_cmd_sn
        ),
        Pdu::R2t(p) => format!(
            "R2T itt {:#x} ttt {:#x} r2t_sn {} offset {} len {} exp {} max {}",
            p.itt.0,
            p.ttt.0,
            p.r2t_sn,
            p.buffer_offset,
            p.desired_data_transfer_length,
            p.exp_cmd_sn,
            p.max_cmd_sn
        ),
        Pdu::ScsiResponse(p) => format!(
            "SCSI Response itt {:#x} status {} stat_sn {} exp {} max {}",
            p.itt.0, p.status, p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn
        ),
        Pdu::Reject(p) => format!(
            "Reject {} stat_sn {} of {:02x?}",
            p.reason,
            p.stat_sn,
            &p.data[..p.data.len().min(48)]
        ),
        other => format!("{other:?}"),
    }
}
