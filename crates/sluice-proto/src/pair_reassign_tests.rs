//! Both session cores at ErrorRecoveryLevel 2: the connection resets in the middle of a read,
//! of a write, before the target saw the command, and after it answered; the initiator logs in
//! a replacement with the same CID and moves the command there with TASK REASSIGN (RFC 7143
//! sections 6.3.4, 7.1.4.3, 7.2.2, 11.5.1): the same cases as the section 4.8 ones above,
//! with the counterpart for a connection loss.

use super::*;
use crate::pdu::codes::{TmfFunction, TmfResponse};

fn erl2() -> SessionParams {
    SessionParams {
        error_recovery_level: 2,
        ..params()
    }
}

/// The TASK REASSIGN requests sent, as `(referenced ITT, ExpDataSN)`, and the answers.
fn reassignments(p: &Pair) -> (Vec<(u32, u32)>, Vec<TmfResponse>) {
    let asked = p
        .log
        .iter()
        .filter_map(|(_, pdu)| match pdu {
            Pdu::TaskMgmtRequest(t) if t.function == TmfFunction::TaskReassign => {
                Some((t.referenced_task_tag.0, t.exp_data_sn))
            }
            _ => None,
        })
        .collect();
    let answers = p
        .log
        .iter()
        .filter_map(|(_, pdu)| match pdu {
            Pdu::TaskMgmtResponse(r) => Some(r.response),
            _ => None,
        })
        .collect();
    (asked, answers)
}

#[test]
fn a_connection_reset_mid_read_is_recovered_by_task_reassign_resegmented() {
    let filter: Filter = Box::new(|dir, pdu, n| {
        if dir == Dir::ToInitiator && n == 1 && is_data_in(pdu, 4) {
            Fate::Reset(1024)
        } else {
            Fate::Deliver
        }
    });
    let mut p = Pair::new(erl2(), target::RecoveryConfig::default(), filter);
    p.i.submit(read(0, 12), p.now);
    p.run();
    let result = p.result();
    assert_eq!(&result.data[..], &p.disk.bytes[..12 * BLOCK]);
    assert_eq!(result.stats.attempts, 1, "reassigned, not issued again");
    let (asked, answers) = reassignments(&p);
    assert_eq!(asked, vec![(1, 4)], "DataSN 0-3 arrived: resume from 4");
    assert_eq!(answers, vec![TmfResponse::FunctionComplete]);
    // After the reassignment: DataSN 4 on, cut to the new connection's 1024 bytes.
    let after: Vec<(u32, u32, usize)> = p
        .log
        .iter()
        .skip_while(|(_, pdu)| !matches!(pdu, Pdu::TaskMgmtResponse(_)))
        .filter_map(|(_, pdu)| match pdu {
            Pdu::DataIn(d) => Some((d.data_sn, d.buffer_offset, d.data.len())),
            _ => None,
        })
        .collect();
    assert_eq!(
        after,
        vec![
            (4, 2048, 1024),
            (5, 3072, 1024),
            (6, 4096, 1024),
            (7, 5120, 1024)
        ]
    );
    assert_eq!(p.i.stats().reassigned, 1);
}

#[test]
fn a_connection_reset_mid_write_is_recovered_by_task_reassign_with_new_r2ts() {
    let mut reset = false;
    let filter: Filter = Box::new(move |dir, pdu, _| match pdu {
        // The second burst's third Data-Out is lost with the connection.
        Pdu::DataOut(d) if dir == Dir::ToTarget && !reset && d.buffer_offset == 3072 => {
            reset = true;
            Fate::Reset(512)
        }
        _ => Fate::Deliver,
    });
    let mut p = Pair::new(erl2(), target::RecoveryConfig::default(), filter);
    let data = pattern(8 * BLOCK, 7);
    p.i.submit(write(2, data.clone()), p.now);
    p.run();
    let result = p.result();
    assert_eq!(result.stats.attempts, 1);
    assert_eq!(&p.disk.bytes[2 * BLOCK..10 * BLOCK], &data[..]);
    let (asked, answers) = reassignments(&p);
    assert_eq!(asked, vec![(1, 0)]);
    assert_eq!(answers, vec![TmfResponse::FunctionComplete]);
    let r2ts: Vec<(u32, u32, u32)> = p
        .log
        .iter()
        .filter_map(|(_, pdu)| match pdu {
            Pdu::R2t(r) => Some((r.r2t_sn, r.buffer_offset, r.desired_data_transfer_length)),
            _ => None,
        })
        .collect();
    assert_eq!(
        r2ts,
        vec![(0, 0, 2048), (1, 2048, 2048), (2, 3072, 1024)],
        "after the reassignment, one new R2T for what the second burst still missed"
    );
}

#[test]
fn a_command_lost_with_its_connection_is_sent_again_with_its_cmd_sn() {
    let filter: Filter = Box::new(|dir, pdu, n| match pdu {
        Pdu::ScsiCommand(_) if dir == Dir::ToTarget && n == 1 => Fate::Reset(512),
        _ => Fate::Deliver,
    });
    let mut p = Pair::new(erl2(), target::RecoveryConfig::default(), filter);
    p.i.submit(read(3, 2), p.now);
    p.run();
    assert_eq!(&p.result().data[..], &p.disk.bytes[3 * BLOCK..5 * BLOCK]);
    let (_, answers) = reassignments(&p);
    assert_eq!(answers, vec![TmfResponse::TaskDoesNotExist]);
    let commands: Vec<(u32, u32)> = p
        .log
        .iter()
        .filter_map(|(_, pdu)| match pdu {
            Pdu::ScsiCommand(c) => Some((c.itt.0, c.cmd_sn.0)),
            _ => None,
        })
        .collect();
    assert_eq!(
        commands,
        vec![(1, 1)],
        "delivered once: the retry, same ITT and CmdSN"
    );
}

#[test]
fn a_status_lost_with_its_connection_comes_again_on_the_new_one() {
    let filter: Filter = Box::new(|dir, pdu, n| match pdu {
        Pdu::ScsiResponse(_) if dir == Dir::ToInitiator && n == 1 => Fate::Reset(512),
        _ => Fate::Deliver,
    });
    let mut p = Pair::new(erl2(), target::RecoveryConfig::default(), filter);
    let data = pattern(4 * BLOCK, 5);
    p.i.submit(write(0, data.clone()), p.now);
    p.run();
    p.result();
    assert_eq!(&p.disk.bytes[..4 * BLOCK], &data[..]);
    let statuses: Vec<SeqNum> = p
        .log
        .iter()
        .filter_map(|(_, pdu)| match pdu {
            Pdu::ScsiResponse(r) => Some(r.stat_sn),
            _ => None,
        })
        .collect();
    assert_eq!(
        statuses,
        vec![SeqNum(5001)],
        "a StatSN of the new connection"
    );
    // The write ran once.
    assert_eq!(p.t.task_count(), 1, "kept until acknowledged");
}
