//! Both session cores against each other at ErrorRecoveryLevel 1, PDU by PDU, with a link
//! that loses, corrupts or holds back chosen PDUs: the verification cases of Hussain's iSCSI
//! simulation study (section 4.8: the target's recovery R2T for lost Data-Out; the
//! initiator's SNACK for lost R2T, status and Data-In) and its Figure 4.6 walk-through, as
//! exact PDU sequences.

use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};

use crate::framing::FrameError;
use crate::initiator::{self, Command, CommandData, Completion, InitiatorSession, Policy};
use crate::params::{SessionParams, SessionType};
use crate::pdu::codes::{ScsiStatus, SnackType};
use crate::pdu::{Cdb, Pdu, TaskAttr, BHS_LEN};
use crate::seq::{Lun, SeqNum};
use crate::target::{
    self, ConnId, DataTransfer, ResetKind, ScsiCompletion, TargetSession, TargetSessionEnv,
};

const BLOCK: usize = 512;

/// A memory disk behind READ(10) and WRITE(10).
struct Disk {
    bytes: Vec<u8>,
}

impl TargetSessionEnv for Disk {
    fn transfer(&self, _lun: Lun, cdb: &Cdb) -> DataTransfer {
        let c: &[u8] = cdb;
        let len = u64::from(u16::from_be_bytes([c[7], c[8]])) * BLOCK as u64;
        match c[0] {
            0x28 => DataTransfer::FromDevice(len),
            0x2a => DataTransfer::ToDevice(len),
            _ => DataTransfer::None,
        }
    }

    fn lun_exists(&self, lun: Lun) -> bool {
        lun == Lun(0)
    }

    fn reset(&mut self, _kind: ResetKind) {}

    fn commands_cleared(&mut self, _lun: Lun) {}

    fn send_targets(&mut self, _conn: ConnId, _query: &str) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// What the link does with one PDU.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
enum Fate {
    Deliver,
    /// Lost (its header failed the digest and the framer skipped it).
    Drop,
    /// Its data segment fails the data digest at the receiver.
    CorruptData,
    /// Held back until `n` more PDUs went the same way.
    Hold(usize),
    /// Lost with the connection, which resets (ErrorRecoveryLevel 2 tests): the initiator
    /// logs in a replacement with the same CID, whose initiator takes segments of this size.
    Reset(u32),
}

/// Which way a PDU goes.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
enum Dir {
    ToTarget,
    ToInitiator,
}

type Filter = Box<dyn FnMut(Dir, &Pdu, u32) -> Fate>;

struct Pair {
    i: InitiatorSession,
    ic: initiator::ConnId,
    t: TargetSession,
    tc: ConnId,
    disk: Disk,
    now: Instant,
    filter: Filter,
    /// How many times a PDU with the same identity went each way (for the filter).
    seen: Vec<(Dir, String, u32)>,
    held: Vec<(Dir, usize, Pdu)>,
    /// Every PDU delivered, as `(direction, PDU)`.
    log: Vec<(Dir, Pdu)>,
    completions: Vec<Completion>,
    params: SessionParams,
    /// Connections reset so far.
    resets: u32,
}

fn params() -> SessionParams {
    SessionParams {
        error_recovery_level: 1,
        initial_r2t: true,
        immediate_data: false,
        initiator_max_recv_data_segment_length: 512,
        target_max_recv_data_segment_length: 512,
        max_burst_length: 2048,
        first_burst_length: 512,
        ..SessionParams::default()
    }
}

impl Pair {
    fn new(params: SessionParams, recovery: target::RecoveryConfig, filter: Filter) -> Self {
        let now = Instant::now();
        let (t, tc) = TargetSession::new(
            target::SessionConfig {
                session_type: SessionType::Normal,
                queue_depth: 16,
                max_write_bytes_per_connection: 1 << 20,
                keepalive: None,
                recovery,
            },
            target::ConnectionSetup {
                cid: 0,
                params,
                next_stat_sn: SeqNum(1000),
                exp_cmd_sn: SeqNum(1),
            },
            now,
        );
        let (i, ic) = InitiatorSession::new(
            initiator::SessionConfig {
                policy: Policy::RoundRobin,
                max_retries: 2,
                keepalive: None,
                recovery: initiator::RecoveryConfig {
                    retry_timeout: Duration::from_millis(100),
                    ..initiator::RecoveryConfig::default()
                },
            },
            initiator::ConnectionSetup {
                cid: 0,
                params,
                cmd_sn: SeqNum(1),
                exp_stat_sn: SeqNum(1000),
                exp_cmd_sn: SeqNum(1),
                max_cmd_sn: SeqNum(16),
            },
            now,
        );
        let disk = Disk {
            bytes: (0..64 * BLOCK).map(|i| (i % 253) as u8).collect(),
        };
        Self {
            i,
            ic,
            t,
            tc,
            disk,
            now,
            filter,
            seen: Vec::new(),
            held: Vec::new(),
            log: Vec::new(),
            completions: Vec::new(),
            params,
            resets: 0,
        }
    }

    /// The connection resets: both ends see it gone, the initiator asks for a replacement
    /// (ErrorRecoveryLevel 2), and one is logged in with the same CID at once, its initiator
    /// taking `mrdsl`-byte segments.
    fn reset(&mut self, mrdsl: u32) {
        self.resets += 1;
        self.held.clear();
        self.t.handle_connection_closed(self.tc, &mut self.disk);
        self.i.handle_connection_closed(self.ic, self.now);
        let events: Vec<initiator::Event> = std::iter::from_fn(|| self.i.poll_event()).collect();
        assert!(
            events.contains(&initiator::Event::RecoverConnection { cid: 0 }),
            "{events:?}"
        );
        let params = SessionParams {
            initiator_max_recv_data_segment_length: mrdsl,
            ..self.params
        };
        let stat_sn = SeqNum(5000 * self.resets);
        let added = self.t.add_connection(
            target::ConnectionSetup {
                cid: 0,
                params,
                next_stat_sn: stat_sn,
                exp_cmd_sn: self.t.command_window().0,
            },
            self.now,
            &mut self.disk,
        );
        let (exp, max) = self.t.command_window();
        self.tc = added.conn();
        self.ic = self.i.add_connection(
            initiator::ConnectionSetup {
                cid: 0,
                params,
                cmd_sn: self.i.command_window().0,
                exp_stat_sn: stat_sn,
                exp_cmd_sn: exp,
                max_cmd_sn: max,
            },
            self.now,
        );
    }

    /// Moves PDUs, runs SCSI work and fires timers until every command completed (or the
    /// virtual clock ran for a minute).
    fn run(&mut self) {
        let limit = self.now + Duration::from_secs(60);
        while self.now < limit {
            if self.pump() {
                continue;
            }
            if self.i.in_flight() == 0 && self.i.waiting() == 0 {
                return;
            }
            let next = [self.i.poll_timeout(), self.t.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(self.now + Duration::from_millis(10));
            self.now = next.max(self.now);
            self.i.handle_timeout(self.now);
            self.t.handle_timeout(self.now, &mut self.disk);
        }
        panic!("no end: {:?} in flight", self.i.in_flight());
    }

    /// One round of everything that can move; whether anything did.
    fn pump(&mut self) -> bool {
        let mut moved = false;
        while let Some(work) = self.t.poll_work() {
            moved = true;
            let done = execute(&mut self.disk, &work);
            self.t.handle_completion(work.ticket, done, &mut self.disk);
        }
        while let Some(pdu) = self.i.poll_transmit(self.ic) {
            moved = true;
            self.carry(Dir::ToTarget, pdu);
        }
        while let Some(pdu) = self.t.poll_transmit(self.tc) {
            moved = true;
            self.carry(Dir::ToInitiator, pdu);
        }
        while let Some(c) = self.i.poll_completion() {
            moved = true;
            self.completions.push(c);
        }
        moved
    }

    fn carry(&mut self, dir: Dir, pdu: Pdu) {
        let key = identity(&pdu);
        let count = match self
            .seen
            .iter_mut()
            .find(|(d, k, _)| *d == dir && *k == key)
        {
            Some(entry) => {
                entry.2 += 1;
                entry.2
            }
            None => {
                self.seen.push((dir, key, 1));
                1
            }
        };
        let fate = (self.filter)(dir, &pdu, count);
        match fate {
            Fate::Deliver => self.deliver(dir, pdu),
            Fate::Drop => {}
            Fate::Reset(mrdsl) => {
                self.reset(mrdsl);
                return;
            }
            Fate::Hold(n) => {
                // Counted from the next PDU on.
                self.release_held(dir);
                self.held.push((dir, n, pdu));
                return;
            }
            Fate::CorruptData => {
                let error = FrameError::DataDigest {
                    opcode: pdu.opcode(),
                    itt: pdu.itt(),
                    header: header_of(&pdu),
                };
                match dir {
                    Dir::ToTarget => {
                        self.t
                            .handle_frame_error(self.tc, &error, self.now, &mut self.disk)
                    }
                    Dir::ToInitiator => {
                        assert!(self.i.handle_frame_error(self.ic, &error, self.now));
                    }
                }
            }
        }
        self.release_held(dir);
    }

    fn release_held(&mut self, dir: Dir) {
        let mut due = Vec::new();
        for h in self.held.iter_mut().filter(|h| h.0 == dir) {
            h.1 = h.1.saturating_sub(1);
        }
        let mut i = 0;
        while i < self.held.len() {
            if self.held[i].0 == dir && self.held[i].1 == 0 {
                due.push(self.held.remove(i).2);
            } else {
                i += 1;
            }
        }
        for pdu in due {
            self.deliver(dir, pdu);
        }
    }

    fn deliver(&mut self, dir: Dir, pdu: Pdu) {
        self.log.push((dir, pdu.clone()));
        match dir {
            Dir::ToTarget => self.t.handle_pdu(self.tc, pdu, self.now, &mut self.disk),
            Dir::ToInitiator => self.i.handle_pdu(self.ic, pdu, self.now),
        }
    }

    /// The SNACKs the initiator sent, as `(type, BegRun, RunLength)`.
    fn snacks(&self) -> Vec<(SnackType, u32, u32)> {
        self.log
            .iter()
            .filter_map(|(d, p)| match (d, p) {
                (Dir::ToTarget, Pdu::SnackRequest(s)) => {
                    Some((s.snack_type, s.beg_run, s.run_length))
                }
                _ => None,
            })
            .collect()
    }

    fn result(&self) -> initiator::CommandResult {
        match self.completions.as_slice() {
            [Completion::Command(_, Ok(r))] => r.clone(),
            other => panic!("expected one good completion, got {other:?}"),
        }
    }
}

/// What identifies a PDU for the filter: kind, ITT and its sequence number.
fn identity(pdu: &Pdu) -> String {
    match pdu {
        Pdu::DataIn(d) => format!("datain {:?} {}", d.itt, d.data_sn),
        Pdu::DataOut(d) => format!("dataout {:?} {:?} {}", d.itt, d.ttt, d.data_sn),
        Pdu::R2t(r) => format!("r2t {:?} {}", r.itt, r.r2t_sn),
        other => format!("{:#x} {:?}", other.opcode(), other.itt()),
    }
}

fn header_of(pdu: &Pdu) -> [u8; BHS_LEN] {
    let mut h = BytesMut::new();
    pdu.emit_header(&mut h);
    let mut out = [0u8; BHS_LEN];
    out.copy_from_slice(&h[..BHS_LEN]);
    out
}

fn execute(disk: &mut Disk, work: &target::ScsiWork) -> ScsiCompletion {
    let c: &[u8] = &work.cdb;
    let lba = u32::from_be_bytes([c[2], c[3], c[4], c[5]]) as usize * BLOCK;
    let len = usize::from(u16::from_be_bytes([c[7], c[8]])) * BLOCK;
    let data = match c[0] {
        0x28 => Bytes::copy_from_slice(&disk.bytes[lba..lba + len]),
        _ => {
            let mut at = lba;
            for s in work.data_out.segments() {
                disk.bytes[at..at + s.len()].copy_from_slice(s);
                at += s.len();
            }
            Bytes::new()
        }
    };
    ScsiCompletion {
        status: ScsiStatus::Good,
        sense: Bytes::new(),
        data,
    }
}

fn read(lba: u32, blocks: u16) -> Command {
    let mut cdb = [0u8; 10];
    cdb[0] = 0x28;
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    cdb[7..9].copy_from_slice(&blocks.to_be_bytes());
    Command {
        lun: Lun(0),
        cdb: Cdb::new(&cdb),
        data: CommandData::Read(u32::from(blocks) * BLOCK as u32),
        attr: TaskAttr::Simple,
    }
}

fn write(lba: u32, data: Bytes) -> Command {
    let mut cdb = [0u8; 10];
    cdb[0] = 0x2a;
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    cdb[7..9].copy_from_slice(&((data.len() / BLOCK) as u16).to_be_bytes());
    Command {
        lun: Lun(0),
        cdb: Cdb::new(&cdb),
        data: CommandData::Write(data),
        attr: TaskAttr::Simple,
    }
}

fn pattern(len: usize, seed: u8) -> Bytes {
    let mut b = BytesMut::with_capacity(len);
    for i in 0..len {
        b.put_u8((i as u8).wrapping_mul(31).wrapping_add(seed));
    }
    b.freeze()
}

fn is_data_in(pdu: &Pdu, sn: u32) -> bool {
    matches!(pdu, Pdu::DataIn(d) if d.data_sn == sn)
}

/// Hussain's Figure 4.6 with both production cores: the target asks for a DataACK every 4
/// Data-In PDUs; DataSN 6-8, 13 and 15 are lost, 14 arrives late (after 16), and the resent
/// 13 only after the resent 15, so that the initiator sees exactly the table's order (0-5, 9,
/// 10-12, 16, 14, 6, 7, 8, 15, 13). It answers with DataACK 4, SNACK 6-8, SNACK 13-15 and
/// DataACK 17, at the same points as the table.
#[test]
fn figure_4_6_with_both_cores() {
    let recovery = target::RecoveryConfig {
        data_ack_every: Some(4),
        ..target::RecoveryConfig::default()
    };
    let filter: Filter = Box::new(|dir, pdu, n| {
        if dir != Dir::ToInitiator {
            return Fate::Deliver;
        }
        let lost_first = [6, 7, 8, 13, 15].iter().any(|&s| is_data_in(pdu, s));
        match n {
            1 if lost_first => Fate::Drop,
            // 14 arrives after 16 (two PDUs later).
            1 if is_data_in(pdu, 14) => Fate::Hold(2),
            // The resent 14 is a duplicate; the resent 13 waits until the resent 15 passed.
            2 if is_data_in(pdu, 13) => Fate::Hold(2),
            _ => Fate::Deliver,
        }
    });
    let mut p = Pair::new(params(), recovery, filter);
    let id = p.i.submit(read(0, 17), p.now);
    p.run();
    let _ = id;
    let order: Vec<u32> = p
        .log
        .iter()
        .filter_map(|(d, pdu)| match (d, pdu) {
            (Dir::ToInitiator, Pdu::DataIn(x)) => Some(x.data_sn),
            _ => None,
        })
        .collect();
    assert_eq!(
        order,
        vec![0, 1, 2, 3, 4, 5, 9, 10, 11, 12, 16, 14, 6, 7, 8, 14, 15, 13]
    );
    assert_eq!(
        p.snacks(),
        vec![
            (SnackType::DataAck, 4, 0),
            (SnackType::DataR2t, 6, 3),
            (SnackType::DataR2t, 13, 3),
            (SnackType::DataAck, 17, 0),
        ]
    );
    assert_eq!(&p.result().data[..], &p.disk.bytes[..17 * BLOCK]);
}

/// Section 4.8, the target's recovery R2T: a Data-Out lost (twice, once to a data digest
/// error) is asked for again, and the write lands whole.
#[test]
fn lost_data_out_is_recovered_by_the_targets_recovery_r2t() {
    let filter: Filter = Box::new(|dir, pdu, n| match pdu {
        Pdu::DataOut(d) if dir == Dir::ToTarget && d.data_sn == 1 && n == 1 => {
            if d.buffer_offset == 512 {
                Fate::Drop
            } else {
                Fate::CorruptData
            }
        }
        _ => Fate::Deliver,
    });
    let mut p = Pair::new(params(), target::RecoveryConfig::default(), filter);
    let data = pattern(8 * BLOCK, 3);
    p.i.submit(write(4, data.clone()), p.now);
    p.run();
    p.result();
    assert_eq!(&p.disk.bytes[4 * BLOCK..12 * BLOCK], &data[..]);
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
        vec![(0, 0, 2048), (1, 512, 512), (2, 2048, 2048), (3, 2560, 512)],
        "each burst's lost PDU asked for by the next R2TSN"
    );
}

/// Section 4.8, the initiator's SNACK for a lost R2T: with two R2Ts outstanding, R2TSN 0 is
/// lost; R2TSN 1 shows the gap, and the R2T SNACK brings it back.
#[test]
fn a_lost_r2t_is_asked_for_with_an_r2t_snack() {
    let p = SessionParams {
        max_outstanding_r2t: 2,
        data_sequence_in_order: false,
        ..params()
    };
    let filter: Filter = Box::new(|dir, pdu, n| match pdu {
        Pdu::R2t(r) if dir == Dir::ToInitiator && r.r2t_sn == 0 && n == 1 => Fate::Drop,
        _ => Fate::Deliver,
    });
    let mut pair = Pair::new(p, target::RecoveryConfig::default(), filter);
    let data = pattern(8 * BLOCK, 9);
    pair.i.submit(write(0, data.clone()), pair.now);
    pair.run();
    pair.result();
    assert_eq!(&pair.disk.bytes[..8 * BLOCK], &data[..]);
    assert_eq!(pair.snacks(), vec![(SnackType::DataR2t, 0, 1)]);
}

/// Section 4.8, the initiator's SNACK for a lost status: the SCSI Response of a write is lost;
/// the initiator's retry timer probes with a NOP-Out, the NOP-In shows the StatSN gap, and a
/// Status SNACK brings the response back.
#[test]
fn a_lost_status_is_found_by_a_probe_and_asked_for_with_a_status_snack() {
    let filter: Filter = Box::new(|dir, pdu, n| match pdu {
        Pdu::ScsiResponse(_) if dir == Dir::ToInitiator && n == 1 => Fate::Drop,
        _ => Fate::Deliver,
    });
    let mut p = Pair::new(params(), target::RecoveryConfig::default(), filter);
    p.i.submit(write(0, pattern(BLOCK, 1)), p.now);
    p.run();
    p.result();
    assert_eq!(p.snacks(), vec![(SnackType::Status, 1000, 1)]);
    assert!(p
        .log
        .iter()
        .any(|(d, pdu)| *d == Dir::ToTarget && matches!(pdu, Pdu::NopOut(_))));
}

/// Section 4.8, the initiator's SNACK for lost Data-In, here its data digest failing: the
/// PDU's header still names it, and a Data SNACK asks for it at once.
#[test]
fn a_data_in_with_a_bad_data_digest_is_asked_for_at_once() {
    let filter: Filter = Box::new(|dir, pdu, n| {
        if dir == Dir::ToInitiator && n == 1 && is_data_in(pdu, 2) {
            Fate::CorruptData
        } else {
            Fate::Deliver
        }
    });
    let mut p = Pair::new(params(), target::RecoveryConfig::default(), filter);
    p.i.submit(read(8, 6), p.now);
    p.run();
    assert_eq!(&p.result().data[..], &p.disk.bytes[8 * BLOCK..14 * BLOCK]);
    assert_eq!(p.snacks(), vec![(SnackType::DataR2t, 2, 1)]);
}

/// The status rides in the last Data-In, which is lost together with the PDU before it: no
/// gap is visible until the probe's NOP-In shows the missing StatSN; the Status SNACK brings
/// the status-carrying PDU back, and its DataSN shows the other hole.
#[test]
fn a_lost_tail_of_a_read_is_recovered_through_the_status() {
    let filter: Filter = Box::new(|dir, pdu, n| {
        let tail = is_data_in(pdu, 4) || is_data_in(pdu, 5);
        if dir == Dir::ToInitiator && n == 1 && tail {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let mut p = Pair::new(params(), target::RecoveryConfig::default(), filter);
    p.i.submit(read(0, 6), p.now);
    p.run();
    assert_eq!(&p.result().data[..], &p.disk.bytes[..6 * BLOCK]);
    assert_eq!(
        p.snacks(),
        vec![(SnackType::Status, 1000, 1), (SnackType::DataR2t, 4, 1)]
    );
}

#[path = "pair_reassign_tests.rs"]
mod reassign;

/// A read's one Data-In, which carries its status and with it the only acknowledgement of its
/// CmdSN, is lost. The initiator cannot tell the command from a lost one and retries it; the
/// target ignores the retry as a duplicate CmdSN (section 4.2.2.1). The probe sent with the
/// retry brings ExpCmdSN and the next StatSN back: the command is known received, the status
/// missing, and a Status SNACK brings the Data-In back. (Without the probe, every retry was
/// ignored until the command failed with too many retries.)
#[test]
fn a_lost_lone_data_in_with_status_is_recovered_after_an_ignored_retry() {
    let filter: Filter = Box::new(|dir, pdu, n| {
        if dir == Dir::ToInitiator && n == 1 && is_data_in(pdu, 0) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let mut p = Pair::new(params(), target::RecoveryConfig::default(), filter);
    p.i.submit(read(3, 1), p.now);
    p.run();
    assert_eq!(&p.result().data[..], &p.disk.bytes[3 * BLOCK..4 * BLOCK]);
    assert!(p
        .log
        .iter()
        .any(|(d, pdu)| *d == Dir::ToTarget && matches!(pdu, Pdu::NopOut(_))));
    assert_eq!(p.snacks(), vec![(SnackType::Status, 1000, 1)]);
}
