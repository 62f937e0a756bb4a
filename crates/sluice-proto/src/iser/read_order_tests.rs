//! The target's datamover when RDMA Read data arrives before the unsolicited Sends of the
//! same write: the core still takes every task's data once, at increasing offsets (RFC 7143
//! sections 13.18 and 13.19).

use std::collections::{HashMap, VecDeque};

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::{BufferAdvertisement, IserHeader, TargetDatamover, TargetOp};
use crate::iser::encode_send;
use crate::pdu::codes::{
    LogoutResponseCode, ScsiResponseCode, ScsiStatus, TmfFunction, TmfResponse,
};
use crate::pdu::{
    Cdb, DataOut, LogoutResponse, Pdu, R2t, ScsiCommand, ScsiResponse, TaskAttr, TaskMgmtRequest,
    TaskMgmtResponse,
};
use crate::seq::{Itt, Lun, SeqNum, Ttt};

/// The write buffer of task `itt` at the initiator: its base addresses the first solicited
/// byte (RFC 7145 section 9.2).
fn base(itt: u32) -> u64 {
    0x1000_0000 * u64::from(itt)
}

fn pattern(itt: u32, len: u32) -> Bytes {
    (0..len)
        .map(|i| (i.wrapping_mul(7).wrapping_add(itt) % 251) as u8)
        .collect::<Vec<_>>()
        .into()
}

fn send_bytes(header: IserHeader, pdu: &Pdu) -> Vec<u8> {
    let mut buf = BytesMut::new();
    encode_send(&header, pdu, &mut buf);
    buf.to_vec()
}

/// One write as the initiator's Sends carry it: the command with `immediate` bytes, then
/// (with `unsolicited_outs`) unsolicited Data-Out of `chunk` bytes up to `first_burst`.
struct Write {
    itt: u32,
    edtl: u32,
    data: Bytes,
    sends: Vec<Vec<u8>>,
    /// Bytes of the write that travel in Sends.
    unsolicited: u32,
}

fn write(
    itt: u32,
    cmd_sn: u32,
    edtl: u32,
    immediate: u32,
    unsolicited_outs: bool,
    first_burst: u32,
    chunk: u32,
) -> Write {
    let data = pattern(itt, edtl);
    let immediate = immediate.min(edtl);
    let unsolicited = if unsolicited_outs {
        first_burst.min(edtl).max(immediate)
    } else {
        immediate
    };
    let cmd = ScsiCommand {
        immediate: false,
        final_bit: !unsolicited_outs,
        read: false,
        write: true,
        attr: TaskAttr::Simple,
        lun: Lun(0),
        itt: Itt(itt),
        expected_data_transfer_length: edtl,
        cmd_sn: SeqNum::new(cmd_sn),
        exp_stat_sn: SeqNum::new(1),
        cdb: Cdb::new(&[0x8a; 16]),
        bidi_read_length: None,
        data: data.slice(..immediate as usize),
    };
    let header = IserHeader {
        write: (edtl > unsolicited).then_some(BufferAdvertisement {
            stag: itt,
            base_offset: base(itt),
        }),
        ..IserHeader::default()
    };
    let mut sends = vec![send_bytes(header, &Pdu::ScsiCommand(cmd))];
    let mut offset = immediate;
    let mut data_sn = 0;
    while offset < unsolicited {
        let end = (offset + chunk).min(unsolicited);
        let d = DataOut {
            final_bit: end == unsolicited,
            lun: Lun(0),
            itt: Itt(itt),
            ttt: Ttt::RESERVED,
            exp_stat_sn: SeqNum::new(1),
            data_sn,
            buffer_offset: offset,
            data: data.slice(offset as usize..end as usize),
        };
        sends.push(send_bytes(IserHeader::default(), &Pdu::DataOut(d)));
        offset = end;
        data_sn += 1;
    }
    Write {
        itt,
        edtl,
        data,
        sends,
        unsolicited,
    }
}

/// The R2Ts a core issues for the solicited part, `max_burst` at a time.
fn r2ts(w: &Write, max_burst: u32) -> Vec<R2t> {
    let mut out = Vec::new();
    let mut offset = w.unsolicited;
    while offset < w.edtl {
        let len = max_burst.min(w.edtl - offset);
        out.push(R2t {
            lun: Lun(0),
            itt: Itt(w.itt),
            ttt: Ttt(w.itt * 1000 + out.len() as u32),
            stat_sn: SeqNum::new(1),
            exp_cmd_sn: SeqNum::new(2),
            max_cmd_sn: SeqNum::new(64),
            r2t_sn: out.len() as u32,
            buffer_offset: offset,
            desired_data_transfer_length: len,
        });
        offset += len;
    }
    out
}

/// What the initiator's RDMA Read Response carries for `op`.
fn read_data(writes: &HashMap<u32, Write>, op: &TargetOp) -> (u64, Bytes) {
    let TargetOp::Read { id, stag, va, len } = *op else {
        panic!("{op:?}")
    };
    let w = &writes[&stag];
    let at = (va - base(stag)) as usize + w.unsolicited as usize;
    (id, w.data.slice(at..at + len as usize))
}

/// A core with DataPDUInOrder and DataSequenceInOrder: every Data-Out of a task at the next
/// offset, or the test fails.
#[derive(Default)]
struct InOrderCore {
    got: HashMap<u32, Vec<u8>>,
}

impl InOrderCore {
    fn take(&mut self, pdu: Pdu) {
        match pdu {
            Pdu::ScsiCommand(c) => {
                assert!(self.got.insert(c.itt.0, c.data.to_vec()).is_none());
            }
            Pdu::DataOut(d) => {
                let got = self.got.get_mut(&d.itt.0).expect("data before its command");
                assert_eq!(
                    d.buffer_offset as usize,
                    got.len(),
                    "task {:#x}: Data-Out out of order",
                    d.itt.0
                );
                got.extend_from_slice(&d.data);
            }
            other => panic!("{other:?}"),
        }
    }

    /// A received Send, and what it released, as the driver hands them on.
    fn send(&mut self, tgt: &mut TargetDatamover, bytes: &[u8]) {
        let pdu = tgt.handle_send(bytes).unwrap();
        self.take(pdu);
        for pdu in tgt.take_released() {
            self.take(pdu);
        }
    }
}

fn post_r2ts(tgt: &mut TargetDatamover, w: &Write, max_burst: u32) -> Vec<TargetOp> {
    let mut ops = Vec::new();
    for r2t in r2ts(w, max_burst) {
        tgt.handle_core_pdu(Pdu::R2t(r2t), &mut ops).unwrap();
    }
    ops
}

const FIRST_BURST: u32 = 16_384;

fn one_write(itt: u32, immediate: u32, unsolicited_outs: bool) -> HashMap<u32, Write> {
    HashMap::from([(
        itt,
        write(
            itt,
            1,
            40_000,
            immediate,
            unsolicited_outs,
            FIRST_BURST,
            4096,
        ),
    )])
}

#[test]
fn read_data_before_the_unsolicited_sends_waits_for_them() {
    let writes = one_write(3, 4096, true);
    let w = &writes[&3];
    assert_eq!(
        w.sends.len(),
        4,
        "the command and three unsolicited Data-Out"
    );
    let mut tgt = TargetDatamover::new(16_384, 8192, false, FIRST_BURST);
    let mut core = InOrderCore::default();
    core.send(&mut tgt, &w.sends[0]);
    let ops = post_r2ts(&mut tgt, w, 16_384);
    assert_eq!(ops.len(), 2);
    // Both reads complete before any unsolicited Data-Out arrives: nothing for the core.
    for op in &ops {
        let (id, data) = read_data(&writes, op);
        assert!(tgt.handle_read_done(id, data).unwrap().is_empty());
    }
    assert_eq!(
        tgt.data_outs_held(),
        3,
        "reads of 16 KiB and 7,232 bytes in 8 KiB Data-Out"
    );
    assert_eq!(tgt.reads_reordered(), 2);
    // The first two Data-Out Sends release nothing; the third, completing the first burst,
    // releases everything behind it.
    for send in &w.sends[1..3] {
        core.send(&mut tgt, send);
        assert_eq!(tgt.data_outs_held(), 3);
    }
    core.send(&mut tgt, &w.sends[3]);
    assert_eq!(tgt.data_outs_held(), 0);
    assert_eq!(core.got[&3], w.data.to_vec());
}

#[test]
fn reads_after_the_unsolicited_sends_pass_straight_through() {
    let writes = one_write(4, 4096, true);
    let w = &writes[&4];
    let mut tgt = TargetDatamover::new(16_384, 8192, false, FIRST_BURST);
    let mut core = InOrderCore::default();
    for send in &w.sends {
        core.send(&mut tgt, send);
    }
    for op in post_r2ts(&mut tgt, w, 65_536) {
        let (id, data) = read_data(&writes, &op);
        let pdus = tgt.handle_read_done(id, data).unwrap();
        assert!(!pdus.is_empty());
        pdus.into_iter().for_each(|p| core.take(p));
    }
    assert_eq!(tgt.reads_reordered(), 0);
    assert_eq!(core.got[&4], w.data.to_vec());
}

/// InitialR2T=Yes with ImmediateData: the command's Send carries all the unsolicited data,
/// so a read completion never waits.
#[test]
fn with_immediate_data_only_nothing_waits() {
    let writes = one_write(5, 8192, false);
    let w = &writes[&5];
    assert_eq!(w.sends.len(), 1);
    let mut tgt = TargetDatamover::new(16_384, 8192, false, FIRST_BURST);
    let mut core = InOrderCore::default();
    core.send(&mut tgt, &w.sends[0]);
    for op in post_r2ts(&mut tgt, w, 65_536) {
        let (id, data) = read_data(&writes, &op);
        let pdus = tgt.handle_read_done(id, data).unwrap();
        assert_eq!(pdus.len(), 4);
        pdus.into_iter().for_each(|p| core.take(p));
    }
    assert_eq!(tgt.data_outs_held(), 0);
    assert_eq!(core.got[&5], w.data.to_vec());
}

/// An unsolicited burst the initiator ends early with the F bit (the core refuses the
/// amount, RFC 7143 section 13.14): no more Sends will come, so the held data goes to the
/// core, which judges it, rather than waiting for ever.
#[test]
fn an_unsolicited_burst_ended_early_releases_what_waits() {
    let writes = one_write(6, 0, true);
    let w = &writes[&6];
    let mut tgt = TargetDatamover::new(16_384, 8192, false, FIRST_BURST);
    core_send_pdu(&mut tgt, &w.sends[0]);
    let ops = post_r2ts(&mut tgt, w, 65_536);
    let (id, data) = read_data(&writes, &ops[0]);
    assert!(tgt.handle_read_done(id, data).unwrap().is_empty());
    let mut short = DataOut {
        final_bit: true,
        lun: Lun(0),
        itt: Itt(6),
        ttt: Ttt::RESERVED,
        exp_stat_sn: SeqNum::new(1),
        data_sn: 0,
        buffer_offset: 0,
        data: w.data.slice(..4096),
    };
    tgt.handle_send(&send_bytes(
        IserHeader::default(),
        &Pdu::DataOut(short.clone()),
    ))
    .unwrap();
    let released = tgt.take_released();
    assert_eq!(released.len(), 3);
    // A later Send of the task releases nothing twice.
    short.final_bit = false;
    tgt.handle_send(&send_bytes(IserHeader::default(), &Pdu::DataOut(short)))
        .unwrap();
    assert!(tgt.take_released().is_empty());
}

fn core_send_pdu(tgt: &mut TargetDatamover, bytes: &[u8]) -> Pdu {
    let pdu = tgt.handle_send(bytes).unwrap();
    assert!(tgt.take_released().is_empty());
    pdu
}

fn abort(itt: u32, referenced: u32) -> Vec<u8> {
    let req = TaskMgmtRequest {
        immediate: true,
        function: TmfFunction::AbortTask,
        lun: Lun(0),
        itt: Itt(itt),
        referenced_task_tag: Itt(referenced),
        cmd_sn: SeqNum::new(2),
        exp_stat_sn: SeqNum::new(1),
        ref_cmd_sn: SeqNum::new(1),
        exp_data_sn: 0,
    };
    send_bytes(IserHeader::default(), &Pdu::TaskMgmtRequest(req))
}

fn tmf_answer(itt: u32, response: TmfResponse) -> Pdu {
    Pdu::TaskMgmtResponse(TaskMgmtResponse {
        response,
        itt: Itt(itt),
        stat_sn: SeqNum::new(1),
        exp_cmd_sn: SeqNum::new(2),
        max_cmd_sn: SeqNum::new(64),
    })
}

/// A write whose two reads completed before its unsolicited Sends: the target datamover and
/// the Sends still to come.
fn held_write(itt: u32) -> (TargetDatamover, Vec<Vec<u8>>) {
    let writes = one_write(itt, 0, true);
    let w = &writes[&itt];
    let mut tgt = TargetDatamover::new(16_384, 8192, false, FIRST_BURST);
    core_send_pdu(&mut tgt, &w.sends[0]);
    for op in post_r2ts(&mut tgt, w, 16_384) {
        let (id, data) = read_data(&writes, &op);
        assert!(tgt.handle_read_done(id, data).unwrap().is_empty());
    }
    assert_eq!(tgt.data_outs_held(), 3);
    (tgt, w.sends[1..].to_vec())
}

#[test]
fn an_aborted_task_drops_what_it_held() {
    let (mut tgt, rest) = held_write(7);
    let mut ops = Vec::new();
    // An ABORT TASK the core refuses leaves the task, and what it holds, alone.
    core_send_pdu(&mut tgt, &abort(50, 7));
    tgt.handle_core_pdu(tmf_answer(50, TmfResponse::FunctionRejected), &mut ops)
        .unwrap();
    assert_eq!(tgt.data_outs_held(), 3);
    // One that completes ends it: the held data is dropped, and the unsolicited Sends that
    // still arrive (already in flight) release nothing.
    core_send_pdu(&mut tgt, &abort(51, 7));
    tgt.handle_core_pdu(tmf_answer(51, TmfResponse::FunctionComplete), &mut ops)
        .unwrap();
    assert_eq!(tgt.data_outs_held(), 0);
    for send in &rest {
        core_send_pdu(&mut tgt, send);
    }
    // The held reads no longer count against the bound of outstanding reads.
    assert_eq!(tgt.reads_held(), 0);
}

#[test]
fn a_task_set_function_drops_only_the_tasks_before_it() {
    let (mut tgt, _) = held_write(8);
    // A later command on the same LUN (CmdSN 5, after the function's 2) keeps its data.
    let later = write(9, 5, 40_000, 0, true, FIRST_BURST, 4096);
    core_send_pdu(&mut tgt, &later.sends[0]);
    let writes = HashMap::from([(9, later)]);
    for op in post_r2ts(&mut tgt, &writes[&9], 65_536) {
        let (id, data) = read_data(&writes, &op);
        assert!(tgt.handle_read_done(id, data).unwrap().is_empty());
    }
    assert_eq!(tgt.data_outs_held(), 6);
    let mut req = TaskMgmtRequest {
        immediate: true,
        function: TmfFunction::LogicalUnitReset,
        lun: Lun(0),
        itt: Itt(60),
        referenced_task_tag: Itt::RESERVED,
        cmd_sn: SeqNum::new(2),
        exp_stat_sn: SeqNum::new(1),
        ref_cmd_sn: SeqNum::new(0),
        exp_data_sn: 0,
    };
    core_send_pdu(
        &mut tgt,
        &send_bytes(IserHeader::default(), &Pdu::TaskMgmtRequest(req.clone())),
    );
    let mut ops = Vec::new();
    tgt.handle_core_pdu(tmf_answer(60, TmfResponse::FunctionComplete), &mut ops)
        .unwrap();
    assert_eq!(tgt.data_outs_held(), 3, "task 9 keeps its data");
    // A target reset issued after both takes the rest.
    req.function = TmfFunction::TargetWarmReset;
    req.itt = Itt(61);
    req.cmd_sn = SeqNum::new(6);
    core_send_pdu(
        &mut tgt,
        &send_bytes(IserHeader::default(), &Pdu::TaskMgmtRequest(req)),
    );
    tgt.handle_core_pdu(tmf_answer(61, TmfResponse::FunctionComplete), &mut ops)
        .unwrap();
    assert_eq!(tgt.data_outs_held(), 0);
}

#[test]
fn a_response_or_a_logout_drops_what_a_task_held() {
    let (mut tgt, _) = held_write(10);
    let mut ops = Vec::new();
    let rsp = ScsiResponse {
        bidi_overflow: false,
        bidi_underflow: false,
        overflow: false,
        underflow: false,
        response: ScsiResponseCode::Completed,
        status: ScsiStatus::CheckCondition,
        itt: Itt(10),
        snack_tag: 0,
        stat_sn: SeqNum::new(1),
        exp_cmd_sn: SeqNum::new(2),
        max_cmd_sn: SeqNum::new(64),
        exp_data_sn: 0,
        bidi_residual: 0,
        residual: 0,
        data: Bytes::new(),
    };
    tgt.handle_core_pdu(Pdu::ScsiResponse(rsp), &mut ops)
        .unwrap();
    assert_eq!(tgt.data_outs_held(), 0);

    let (mut tgt, _) = held_write(11);
    let logout = LogoutResponse {
        response: LogoutResponseCode::Closed,
        itt: Itt(70),
        stat_sn: SeqNum::new(1),
        exp_cmd_sn: SeqNum::new(2),
        max_cmd_sn: SeqNum::new(64),
        time2wait: 0,
        time2retain: 0,
    };
    tgt.handle_core_pdu(Pdu::LogoutResponse(logout), &mut ops)
        .unwrap();
    assert_eq!(tgt.data_outs_held(), 0);
    assert_eq!(tgt.reads_held(), 0);
}

/// One arrival order: the Sends in the order the initiator posted them, each task's RDMA
/// Reads posted when its command reached the core and completing in posting order, the two
/// streams interleaved as `picks` says (true: the next Send, false: the next completion).
fn run(writes: &[Write], max_burst: u32, core_max_recv: u32, picks: &[bool]) {
    let by_itt: HashMap<u32, &Write> = writes.iter().map(|w| (w.itt, w)).collect();
    let mut sends: VecDeque<&Vec<u8>> = writes.iter().flat_map(|w| w.sends.iter()).collect();
    let mut reads: VecDeque<TargetOp> = VecDeque::new();
    let mut tgt = TargetDatamover::new(16_384, core_max_recv, false, FIRST_BURST);
    let mut core = InOrderCore::default();
    let mut picks = picks.iter().copied().cycle();
    while !sends.is_empty() || !reads.is_empty() {
        let take_send = reads.is_empty() || (!sends.is_empty() && picks.next().unwrap_or(true));
        if take_send {
            let bytes = sends.pop_front().unwrap();
            let pdu = tgt.handle_send(bytes).unwrap();
            let command = match &pdu {
                Pdu::ScsiCommand(c) => Some(c.itt.0),
                _ => None,
            };
            core.take(pdu);
            for pdu in tgt.take_released() {
                core.take(pdu);
            }
            if let Some(itt) = command {
                reads.extend(post_r2ts(&mut tgt, by_itt[&itt], max_burst));
            }
        } else {
            let op = reads.pop_front().unwrap();
            let TargetOp::Read { id, stag, va, len } = op else {
                panic!("{op:?}")
            };
            let w = by_itt[&stag];
            let at = (va - base(stag)) as usize + w.unsolicited as usize;
            let data = w.data.slice(at..at + len as usize);
            for pdu in tgt.handle_read_done(id, data).unwrap() {
                core.take(pdu);
            }
        }
    }
    for w in writes {
        assert_eq!(core.got[&w.itt], w.data.to_vec(), "task {}", w.itt);
    }
    assert_eq!(tgt.data_outs_held(), 0);
    assert_eq!(tgt.reads_held(), 0);
}

proptest! {
    #[test]
    fn every_byte_reaches_the_core_once_in_order_whatever_the_arrival_order(
        tasks in proptest::collection::vec(
            (1u32..60_000, 0u32..20_000, any::<bool>(), prop_oneof![Just(512u32), Just(4096), Just(8192)]),
            1..4,
        ),
        max_burst in prop_oneof![Just(4096u32), Just(16_384), Just(65_536)],
        core_max_recv in prop_oneof![Just(512u32), Just(8192)],
        picks in proptest::collection::vec(any::<bool>(), 1..64),
    ) {
        let writes: Vec<Write> = tasks
            .iter()
            .enumerate()
            .map(|(i, &(edtl, immediate, outs, chunk))| {
                let i = i as u32 + 1;
                write(i, i, edtl, immediate.min(8192), outs, FIRST_BURST, chunk)
            })
            .collect();
        run(&writes, max_burst, core_max_recv, &picks);
    }
}

/// Reads held waiting for Sends count against the bound of outstanding reads: the core
/// asking for more is refused rather than held without limit.
#[test]
fn held_reads_count_against_the_bound_of_outstanding_reads() {
    let mut tgt = TargetDatamover::new(16_384, 8192, false, FIRST_BURST);
    let edtl = 16_384 + (super::target_mover::MAX_PENDING_READS as u32 + 1) * 512;
    let w = write(12, 1, edtl, 0, true, FIRST_BURST, 8192);
    core_send_pdu(&mut tgt, &w.sends[0]);
    let mut ops = Vec::new();
    let all = r2ts(&w, 512);
    let (first, rest) = all.split_at(1);
    tgt.handle_core_pdu(Pdu::R2t(first[0].clone()), &mut ops)
        .unwrap();
    let TargetOp::Read { id, len, .. } = ops.pop().unwrap() else {
        panic!()
    };
    assert!(tgt
        .handle_read_done(id, w.data.slice(16_384..16_384 + len as usize))
        .unwrap()
        .is_empty());
    let mut refused = None;
    for r2t in rest {
        if let Err(e) = tgt.handle_core_pdu(Pdu::R2t(r2t.clone()), &mut ops) {
            refused = Some(e);
            break;
        }
    }
    assert_eq!(ops.len(), super::target_mover::MAX_PENDING_READS - 1);
    assert_eq!(
        refused,
        Some(super::MoverError::TooMany(
            super::target_mover::MAX_PENDING_READS
        ))
    );
}
