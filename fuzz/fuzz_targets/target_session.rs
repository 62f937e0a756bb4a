#![no_main]
//! `TargetSession` (the target's full feature phase, sans IO) driven by an arbitrary sequence
//! of operations decoded from the fuzz bytes, as a driver and an initiator could produce them:
//!
//! - PDUs from the initiator on one of the session's connections (or one already gone): a
//!   48-byte header from the input, framed with its AHS and data segment and decoded by a
//!   framer limited to the target's MaxRecvDataSegmentLength, so every opcode and field value
//!   is reachable and a refused PDU becomes a frame error as in the driver. Fix-up bits give
//!   commands the CmdSN the window expects (or one near it), ITTs and TTTs the session knows,
//!   an ExpStatSN acknowledging what was sent, and READ(10)/WRITE(10)/TEST UNIT READY CDBs;
//! - Data-Out answering the R2Ts the session sent;
//! - connections added (CIDs reused: connection reinstatement), closed by the driver after
//!   the session asked, or lost at any time; frame errors;
//! - completions of the SCSI work the session handed out, with any status, sense and amount
//!   of data, possibly after the task's connection is gone;
//! - time passing (keepalive, the logout grace period), shutdown requests, dropped
//!   connections, `close_all`.
//!
//! After every operation each connection's PDUs are drained and checked: a target opcode,
//! encoding and decoding back to the same PDU within the initiator's
//! MaxRecvDataSegmentLength, StatSN in order (RFC 7143 section 4.2.2.2), ExpCmdSN and MaxCmdSN
//! never going back and the window never wider than the queue depth (section 4.2.2.1), and a
//! bounded number of them. The session must hold no more window slots, held commands or tasks
//! than its queue depth allows. At the end every connection closes and every piece of pending
//! work completes: the session must be over with no task and no window slot left.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_proto::framing::FrameError;
use sluice_proto::params::SessionType;
use sluice_proto::pdu::codes::ScsiStatus;
use sluice_proto::pdu::{Cdb, DataOut, Pdu};
use sluice_proto::seq::{Itt, Lun, SeqNum, Ttt};
use sluice_proto::target::{
    CloseReason, ConnId, ConnectionSetup, DataTransfer, Event, KeepaliveConfig, ResetKind,
    ScsiCompletion, ScsiWork, SessionConfig, TargetSession, TargetSessionEnv,
};

#[path = "session_common.rs"]
mod common;
use common::{frame, round_trip, zeros, Reader};

const BLOCK: u64 = 512;
/// Live connections at most (the MaxConnections the leading login settled).
const MAX_LIVE: usize = 4;
/// Connections the session may hold at once, closing ones included.
const MAX_CONNS: usize = 8;
/// Remembered R2Ts, ITTs and CmdSNs (the most recent ones).
const RECENT: usize = 32;
/// SCSI data a completion carries at most.
const MAX_COMPLETION_DATA: usize = 65536;

/// The SCSI layer as the session sees it: READ(10)/WRITE(10) lengths, LUNs 0 and 1.
struct Env;

impl TargetSessionEnv for Env {
    fn transfer(&self, _lun: Lun, cdb: &Cdb) -> DataTransfer {
        let c = cdb.as_bytes();
        let blocks = u64::from(u16::from_be_bytes([c[7], c[8]]));
        match c[0] {
            0x28 => DataTransfer::FromDevice(blocks * BLOCK),
            0x2a => DataTransfer::ToDevice(blocks * BLOCK),
            _ => DataTransfer::None,
        }
    }

    fn lun_exists(&self, lun: Lun) -> bool {
        lun.number().is_some_and(|n| n < 2)
    }

    /// LUN 1 keeps nothing written (a null LUN): its writes drop their data as it arrives.
    fn keeps_data_out(&self, lun: Lun, _cdb: &Cdb) -> bool {
        lun.number() != Some(1)
    }

    fn reset(&mut self, _kind: ResetKind) {}

    fn commands_cleared(&mut self, _lun: Lun) {}

    fn send_targets(&mut self, _conn: ConnId, query: &str) -> Vec<(String, String)> {
        // "All" gets an answer longer than one Text Response (continuations).
        let count = if query == "All" { 300 } else { 1 };
        (0..count)
            .flat_map(|i| {
                [
                    ("TargetName".into(), format!("iqn.2026-11.io.sluice:t{i}")),
                    ("TargetAddress".into(), "127.0.0.1:3260,1".into()),
                ]
            })
            .collect()
    }
}

/// What the initiator side knows of one connection.
struct Conn {
    id: ConnId,
    cid: u16,
    /// StatSN the next status on it must carry.
    stat_sn: SeqNum,
    /// ExpCmdSN and MaxCmdSN last seen on it.
    window: Option<(SeqNum, SeqNum)>,
    /// The session asked the driver to close it.
    close_asked: bool,
    /// Reported closed: the session has forgotten it.
    gone: bool,
    /// TTT of the last NOP-In that wants an answer.
    ping_ttt: Option<Ttt>,
    /// ITT and TTT of the last Text Response with more to fetch.
    text: Option<(Itt, Ttt)>,
}

impl Conn {
    /// A connection just added, whose first status carries `stat_sn`.
    fn new(id: ConnId, cid: u16, stat_sn: SeqNum) -> Self {
        Self {
            id,
            cid,
            stat_sn,
            window: None,
            close_asked: false,
            gone: false,
            ping_ttt: None,
            text: None,
        }
    }
}

/// An R2T not fully answered yet.
struct Solicited {
    conn: ConnId,
    itt: Itt,
    ttt: Ttt,
    lun: Lun,
    offset: u32,
    left: u32,
    data_sn: u32,
}

struct Fuzz<'a> {
    r: Reader<'a>,
    s: TargetSession,
    env: Env,
    now: Instant,
    depth: u32,
    discovery: bool,
    conns: Vec<Conn>,
    /// SCSI work taken from the session and not yet completed.
    pending: Vec<ScsiWork>,
    r2ts: VecDeque<Solicited>,
    itts: VecDeque<Itt>,
    cmd_sns: VecDeque<SeqNum>,
    /// The last write sent with unsolicited data to come: connection, ITT, offset, DataSN.
    unsolicited: Option<(ConnId, Itt, Lun, u32, u32)>,
    /// The CmdSN an in-order initiator sends next.
    next_cmd_sn: SeqNum,
    next_itt: u32,
    /// PDUs one operation may make the session send at most.
    out_bound: usize,
}

fn push_recent<T>(list: &mut VecDeque<T>, item: T) {
    if list.len() == RECENT {
        list.pop_front();
    }
    list.push_back(item);
}

impl Fuzz<'_> {
    fn step(&mut self) {
        match self.r.byte() % 16 {
            0..=7 => self.pdu(),
            8 => self.add_connection(),
            9 => self.complete(),
            10 => self.advance_time(),
            11 => self.transport_lost(),
            12 => self.answer_r2t(),
            13 => self.frame_error(),
            14 => self.session_control(),
            _ => self.close_asked(),
        }
    }

    /// One of the connections: mostly one the session still has, sometimes any.
    fn pick(&mut self) -> usize {
        let gone: Vec<bool> = self.conns.iter().map(|c| c.gone).collect();
        self.r.pick(&gone)
    }

    fn target_max_segment(&self, conn: ConnId) -> u32 {
        self.s
            .connection_params(conn)
            .map_or(8192, |p| p.target_max_recv_data_segment_length)
    }

    /// A PDU from the initiator.
    fn pdu(&mut self) {
        let c = self.pick();
        let conn = self.conns[c].id;
        let fix = self.r.byte();
        let shape = self.r.byte();
        let mut h = self.r.header();
        if fix & 0x80 != 0 {
            // An initiator opcode (SCSI Command twice as often).
            const OPCODES: [u8; 8] = [0x00, 0x01, 0x01, 0x02, 0x04, 0x05, 0x06, 0x10];
            h[0] = (h[0] & 0x40) | OPCODES[usize::from(h[0]) % OPCODES.len()];
        }
        let opcode = h[0] & 0x3f;
        let immediate = h[0] & 0x40 != 0;
        let mut data = None;
        match (fix >> 3) & 3 {
            1 => {
                self.next_itt = self.next_itt.wrapping_add(1);
                h[16..20].copy_from_slice(&self.next_itt.to_be_bytes());
            }
            2 => {
                if let Some(itt) = self.known_itt() {
                    h[16..20].copy_from_slice(&itt.0.to_be_bytes());
                }
            }
            3 => h[16..20].copy_from_slice(&Itt::RESERVED.0.to_be_bytes()),
            _ => {}
        }
        match opcode {
            0x01 => data = self.shape_command(&mut h, shape, conn),
            0x00 if shape & 0x10 != 0 => {
                // The answer to a ping: ITT reserved, its TTT echoed.
                if let Some(ttt) = self.conns[c].ping_ttt.take() {
                    h[16..20].copy_from_slice(&Itt::RESERVED.0.to_be_bytes());
                    h[20..24].copy_from_slice(&ttt.0.to_be_bytes());
                }
            }
            0x02 if shape & 0x10 != 0 => {
                // A function naming a task the session may know, and its CmdSN.
                if let Some(itt) = self.known_itt() {
                    h[20..24].copy_from_slice(&itt.0.to_be_bytes());
                }
                if let Some(&sn) = self.cmd_sns.get(usize::from(shape >> 5)) {
                    h[32..36].copy_from_slice(&sn.0.to_be_bytes());
                }
                h[1] = 0x80 | ((h[1] & 0x7f) % 9);
            }
            0x04 => {
                if shape & 0x10 != 0 {
                    // Fetching the rest of a long answer.
                    if let Some((itt, ttt)) = self.conns[c].text.take() {
                        h[16..20].copy_from_slice(&itt.0.to_be_bytes());
                        h[20..24].copy_from_slice(&ttt.0.to_be_bytes());
                        data = Some(Vec::new());
                    }
                } else {
                    h[20..24].copy_from_slice(&Ttt::RESERVED.0.to_be_bytes());
                }
                if shape & 0x20 != 0 && data.is_none() {
                    data = Some(self.r.text());
                }
            }
            0x05 if shape & 0x10 != 0 => {
                // Unsolicited data for the last write.
                if let Some((w_conn, itt, lun, offset, data_sn)) = self.unsolicited {
                    if w_conn == conn {
                        h[8..16].copy_from_slice(&lun.0.to_be_bytes());
                        h[16..20].copy_from_slice(&itt.0.to_be_bytes());
                        h[20..24].copy_from_slice(&Ttt::RESERVED.0.to_be_bytes());
                        h[36..40].copy_from_slice(&data_sn.to_be_bytes());
                        h[40..44].copy_from_slice(&offset.to_be_bytes());
                        let len = 512 * u32::from(shape >> 6);
                        let first = self.s.params().first_burst_length;
                        let len = len.min(first.saturating_sub(offset));
                        h[1] = if shape & 0x20 != 0 { 0x80 } else { 0 };
                        self.unsolicited = Some((w_conn, itt, lun, offset + len, data_sn + 1));
                        data = Some(vec![0; len as usize]);
                    }
                }
            }
            0x06 if shape & 0x10 != 0 => {
                // Logout of a connection by CID (any of the session's), reason 0..2.
                let cid = self.conns[usize::from(shape >> 5) % self.conns.len()].cid;
                h[20..22].copy_from_slice(&cid.to_be_bytes());
                h[1] = 0x80 | ((h[1] & 0x7f) % 3);
            }
            _ => {}
        }
        if matches!(opcode, 0x00 | 0x01 | 0x02 | 0x04 | 0x06) {
            let (exp, _) = self.s.command_window();
            let sn = match (fix >> 1) & 3 {
                1 => {
                    let sn = self.next_cmd_sn;
                    if !immediate {
                        self.next_cmd_sn = sn.next();
                    }
                    Some(sn)
                }
                2 => Some(exp.add(u32::from(shape >> 6))),
                3 => self.cmd_sns.back().copied(),
                _ => None,
            };
            if let Some(sn) = sn {
                h[24..28].copy_from_slice(&sn.0.to_be_bytes());
            }
        }
        if fix & 0x20 != 0 {
            // ExpStatSN: every status so far was received.
            let sn = self.conns[c].stat_sn;
            h[28..32].copy_from_slice(&sn.0.to_be_bytes());
        }
        let ahs = if fix & 0x40 != 0 {
            let mut ahs = vec![0u8; usize::from(self.r.byte() % 5) * 4];
            self.r.fill(&mut ahs);
            ahs
        } else {
            Vec::new()
        };
        let data = data.unwrap_or_else(|| self.r.data());
        match frame(h, &ahs, &data, self.target_max_segment(conn)) {
            Ok(pdu) => {
                self.note_sent(conn, &pdu);
                self.s.handle_pdu(conn, pdu, self.now, &mut self.env);
            }
            Err(e) => self.s.handle_frame_error(conn, &e, self.now, &mut self.env),
        }
    }

    /// Makes the SCSI Command header a READ(10), WRITE(10) or TEST UNIT READY now and then,
    /// with a consistent Expected Data Transfer Length; returns immediate data for a write.
    fn shape_command(&mut self, h: &mut [u8; 48], shape: u8, conn: ConnId) -> Option<Vec<u8>> {
        let blocks = u16::from((shape >> 2) & 7);
        let edtl = u32::from(blocks) * BLOCK as u32;
        let attr = h[1] & 7;
        let mut data = None;
        match shape & 3 {
            1 => {
                h[1] = 0x80 | 0x40 | attr;
                h[32..48].fill(0);
                h[32] = 0x28;
                h[39..41].copy_from_slice(&blocks.to_be_bytes());
                h[20..24].copy_from_slice(&edtl.to_be_bytes());
            }
            2 => {
                h[32..48].fill(0);
                h[32] = 0x2a;
                h[39..41].copy_from_slice(&blocks.to_be_bytes());
                h[20..24].copy_from_slice(&edtl.to_be_bytes());
                let params = *self.s.params();
                let unsolicited = !params.initial_r2t && shape & 0x20 == 0;
                let immediate = if params.immediate_data && shape & 0x80 != 0 {
                    edtl.min(params.first_burst_length)
                        .min(self.target_max_segment(conn))
                } else {
                    0
                };
                let f = !unsolicited || immediate == edtl;
                h[1] = if f { 0x80 } else { 0 } | 0x20 | attr;
                data = Some(vec![0u8; immediate as usize]);
                if !f {
                    let itt = Itt(u32::from_be_bytes([h[16], h[17], h[18], h[19]]));
                    let lun = Lun(u64::from_be_bytes(h[8..16].try_into().unwrap_or([0; 8])));
                    self.unsolicited = Some((conn, itt, lun, immediate, 0));
                }
            }
            3 => {
                h[1] = 0x80 | attr;
                h[32..48].fill(0);
                h[20..24].fill(0);
            }
            _ => {}
        }
        if shape & 0x40 != 0 {
            let lun = Lun::from_number(u16::from(shape >> 4) & 3);
            h[8..16].copy_from_slice(&lun.0.to_be_bytes());
            if let Some((_, _, l, _, _)) = self.unsolicited.as_mut() {
                if shape & 3 == 2 {
                    *l = lun;
                }
            }
        }
        data
    }

    /// The ITT of a command sent lately (its task may be running, ended or gone).
    fn known_itt(&mut self) -> Option<Itt> {
        let b = usize::from(self.r.byte());
        (!self.itts.is_empty()).then(|| self.itts[b % self.itts.len()])
    }

    /// Remembers what an initiator PDU carried, for later fix-ups.
    fn note_sent(&mut self, conn: ConnId, pdu: &Pdu) {
        if let Pdu::ScsiCommand(c) = pdu {
            push_recent(&mut self.itts, c.itt);
            push_recent(&mut self.cmd_sns, c.cmd_sn);
            if let Some(u) = self.unsolicited.as_mut() {
                if u.0 == conn && u.1 == c.itt && !c.write {
                    self.unsolicited = None;
                }
            }
        }
    }

    /// Data-Out for an R2T the session sent.
    fn answer_r2t(&mut self) {
        let b = self.r.byte();
        if self.r2ts.is_empty() {
            return;
        }
        let i = usize::from(b) % self.r2ts.len();
        let max = self.target_max_segment(self.r2ts[i].conn);
        let Some(sol) = self.r2ts.get_mut(i) else {
            return;
        };
        let len = sol.left.min(max);
        let last = len == sol.left;
        let exp_stat_sn = self
            .conns
            .iter()
            .find(|c| c.id == sol.conn)
            .map_or(SeqNum(0), |c| c.stat_sn);
        let pdu = Pdu::DataOut(DataOut {
            final_bit: last,
            lun: sol.lun,
            itt: sol.itt,
            ttt: sol.ttt,
            exp_stat_sn,
            data_sn: sol.data_sn,
            buffer_offset: sol.offset,
            data: zeros(len as usize),
        });
        let conn = sol.conn;
        sol.offset += len;
        sol.left -= len;
        sol.data_sn += 1;
        if last {
            self.r2ts.remove(i);
        }
        self.s.handle_pdu(conn, pdu, self.now, &mut self.env);
    }

    fn add_connection(&mut self) {
        let cid = u16::from(self.r.byte() % 6);
        let params = self.r.params();
        let stat_sn = SeqNum(self.r.u32());
        let live = self.s.live_connections().count();
        let replaces = self
            .s
            .live_connections()
            .any(|c| self.s.cid(c) == Some(cid));
        if self.discovery
            || (live >= MAX_LIVE && !replaces)
            || self.s.connections().count() >= MAX_CONNS
        {
            return;
        }
        let setup = ConnectionSetup {
            cid,
            params,
            next_stat_sn: stat_sn,
            exp_cmd_sn: self.s.command_window().0,
        };
        let added = self.s.add_connection(setup, self.now, &mut self.env);
        self.conns.push(Conn::new(added.conn(), cid, stat_sn));
    }

    /// The result of one piece of SCSI work.
    fn complete(&mut self) {
        let b = self.r.byte();
        if self.pending.is_empty() {
            return;
        }
        let work = self
            .pending
            .swap_remove(usize::from(b) % self.pending.len());
        let how = self.r.byte();
        let status = match how & 7 {
            0..=3 => ScsiStatus::Good,
            4 => ScsiStatus::CheckCondition,
            5 => ScsiStatus::Busy,
            6 => ScsiStatus::TaskSetFull,
            _ => ScsiStatus::from(self.r.byte()),
        };
        let mut sense = vec![0u8; usize::from(self.r.byte() % 40)];
        self.r.fill(&mut sense);
        let wanted = work.data_in_len as usize;
        let len = match (how >> 3) & 3 {
            0 => wanted,
            1 => wanted / 2,
            2 => wanted + 512,
            _ => usize::from(self.r.byte()) * 256,
        };
        let completion = ScsiCompletion {
            status,
            sense: Bytes::from(sense),
            data: zeros(len.min(MAX_COMPLETION_DATA)),
        };
        self.s
            .handle_completion(work.ticket, completion, &mut self.env);
    }

    fn advance_time(&mut self) {
        let b = self.r.byte();
        if b & 3 == 0 {
            if let Some(t) = self.s.poll_timeout() {
                self.now = self.now.max(t);
            }
        } else {
            self.now += Duration::from_millis(u64::from(b) * u64::from(b) * 10);
        }
        self.s.handle_timeout(self.now, &mut self.env);
    }

    /// The transport of a connection is gone (closed by the peer, or by the driver).
    fn transport_lost(&mut self) {
        let c = self.pick();
        self.close(c);
    }

    /// The driver closes a connection the session asked it to close.
    fn close_asked(&mut self) {
        if let Some(c) = (0..self.conns.len()).find(|&i| {
            let c = &self.conns[i];
            c.close_asked && !c.gone
        }) {
            self.close(c);
        }
    }

    fn close(&mut self, c: usize) {
        let conn = self.conns[c].id;
        self.conns[c].gone = true;
        self.r2ts.retain(|s| s.conn != conn);
        if self.unsolicited.is_some_and(|u| u.0 == conn) {
            self.unsolicited = None;
        }
        self.s.handle_connection_closed(conn, &mut self.env);
    }

    fn frame_error(&mut self) {
        let c = self.pick();
        let conn = self.conns[c].id;
        let error = match self.r.byte() % 4 {
            3 => FrameError::HeaderDigestSkipped {
                skipped: usize::from(self.r.byte()) * 4,
            },
            0 => FrameError::HeaderDigest {
                received: self.r.u32(),
                computed: self.r.u32(),
            },
            1 => {
                let header = self.r.header();
                FrameError::DataDigest {
                    opcode: header[0] & 0x3f,
                    itt: Itt(u32::from_be_bytes([
                        header[16], header[17], header[18], header[19],
                    ])),
                    header,
                }
            }
            _ => FrameError::SegmentTooLong {
                len: self.r.u32() & 0x00ff_ffff,
                max: self.target_max_segment(conn),
            },
        };
        self.s
            .handle_frame_error(conn, &error, self.now, &mut self.env);
    }

    fn session_control(&mut self) {
        match self.r.byte() % 3 {
            0 => {
                let grace = Duration::from_secs(u64::from(self.r.byte() % 30));
                self.s.request_logout(self.now, grace);
            }
            1 => {
                let c = self.pick();
                let time2wait = u16::from(self.r.byte());
                self.s.drop_connection(self.conns[c].id, time2wait);
            }
            _ => {
                const REASONS: [CloseReason; 3] = [
                    CloseReason::SessionReinstated,
                    CloseReason::ColdReset,
                    CloseReason::Shutdown,
                ];
                let reason = REASONS[usize::from(self.r.byte()) % REASONS.len()];
                self.s.close_all(reason);
            }
        }
    }

    /// Takes everything the session has for its driver and checks it.
    fn drain(&mut self) {
        let mut sent = 0;
        let ids: Vec<ConnId> = self.s.connections().collect();
        for id in ids {
            while let Some(pdu) = self.s.poll_transmit(id) {
                sent += 1;
                self.check_sent(id, &pdu);
            }
            while let Some(event) = self.s.poll_event(id) {
                if let Event::Close(_) = event {
                    if let Some(c) = self.conns.iter_mut().find(|c| c.id == id) {
                        c.close_asked = true;
                    }
                }
            }
        }
        assert!(
            sent <= self.out_bound,
            "{sent} PDUs out of one operation (bound {})",
            self.out_bound
        );
        while let Some(work) = self.s.poll_work() {
            assert!(
                self.conns.iter().any(|c| c.id == work.conn),
                "work for a connection that never was"
            );
            self.pending.push(work);
        }
        let depth = self.depth as usize;
        assert!(self.s.window_slots_held() <= self.depth);
        assert!(self.s.commands_held() <= depth);
        assert!(self.s.task_count() <= depth + depth.clamp(16, 1024));
        assert!(
            self.pending.len() <= self.s.task_count(),
            "work pending for a task the session forgot"
        );
    }

    /// The checks of one PDU sent on `id`.
    fn check_sent(&mut self, id: ConnId, pdu: &Pdu) {
        assert!(pdu.opcode() >= 0x20, "a target sent {pdu:?}");
        let params = *self
            .s
            .connection_params(id)
            .expect("a connection that sends has parameters");
        round_trip(pdu, &params, params.initiator_max_recv_data_segment_length);
        let depth = self.depth;
        let Some(c) = self.conns.iter_mut().find(|c| c.id == id) else {
            panic!("a PDU on a connection that never was");
        };
        // RFC 7143 section 4.2.2.2: StatSN counts every status-carrying PDU of the
        // connection; R2T and a NOP-In with the reserved ITT carry the next one.
        let (stat_sn, advances, exp, max) = match pdu {
            Pdu::ScsiResponse(p) => (Some(p.stat_sn), true, p.exp_cmd_sn, p.max_cmd_sn),
            Pdu::TaskMgmtResponse(p) => (Some(p.stat_sn), true, p.exp_cmd_sn, p.max_cmd_sn),
            Pdu::TextResponse(p) => (Some(p.stat_sn), true, p.exp_cmd_sn, p.max_cmd_sn),
            Pdu::LogoutResponse(p) => (Some(p.stat_sn), true, p.exp_cmd_sn, p.max_cmd_sn),
            Pdu::AsyncMessage(p) => (Some(p.stat_sn), true, p.exp_cmd_sn, p.max_cmd_sn),
            Pdu::Reject(p) => (Some(p.stat_sn), true, p.exp_cmd_sn, p.max_cmd_sn),
            Pdu::DataIn(p) => (
                p.status_present.then_some(p.stat_sn),
                p.status_present,
                p.exp_cmd_sn,
                p.max_cmd_sn,
            ),
            Pdu::NopIn(p) => (
                Some(p.stat_sn),
                p.itt != Itt::RESERVED,
                p.exp_cmd_sn,
                p.max_cmd_sn,
            ),
            Pdu::R2t(p) => (Some(p.stat_sn), false, p.exp_cmd_sn, p.max_cmd_sn),
            other => panic!("a target sent {other:?}"),
        };
        // Under error recovery a status sent again (a Status or Data SNACK, an R-Data SNACK's
        // Response) keeps the StatSN it was first sent with (section 11.16).
        let resent = params.error_recovery_level > 0
            && advances
            && stat_sn.is_some_and(|sn| sn.lt(c.stat_sn));
        if !resent {
            if let Some(sn) = stat_sn {
                assert_eq!(sn, c.stat_sn, "StatSN out of order in {pdu:?}");
            }
            if advances {
                c.stat_sn = c.stat_sn.next();
            }
        }
        // Section 4.2.2.1: MaxCmdSN - ExpCmdSN + 1 places, never more than the queue depth;
        // neither number goes back.
        assert!(
            max.next().distance_from(exp) <= depth,
            "window [{exp:?}, {max:?}] wider than the queue depth {depth}"
        );
        if let Some((last_exp, last_max)) = c.window {
            assert!(exp.ge(last_exp), "ExpCmdSN went back");
            assert!(max.ge(last_max), "MaxCmdSN went back");
        }
        c.window = Some((exp, max));
        match pdu {
            Pdu::R2t(r2t) => {
                if self.r2ts.len() == RECENT {
                    self.r2ts.pop_front();
                }
                self.r2ts.push_back(Solicited {
                    conn: id,
                    itt: r2t.itt,
                    ttt: r2t.ttt,
                    lun: r2t.lun,
                    offset: r2t.buffer_offset,
                    left: r2t.desired_data_transfer_length,
                    data_sn: 0,
                });
            }
            Pdu::NopIn(p) if p.ttt != Ttt::RESERVED => c.ping_ttt = Some(p.ttt),
            Pdu::TextResponse(p) if p.ttt != Ttt::RESERVED => c.text = Some((p.itt, p.ttt)),
            _ => {}
        }
    }

    /// Every connection closes, every piece of work completes: nothing may be left.
    fn finish(mut self) {
        self.s.close_all(CloseReason::Shutdown);
        self.drain();
        for c in 0..self.conns.len() {
            if !self.conns[c].gone {
                self.close(c);
            }
        }
        self.drain();
        while let Some(work) = self.pending.pop() {
            let completion = ScsiCompletion {
                status: ScsiStatus::Good,
                sense: Bytes::new(),
                data: zeros((work.data_in_len as usize).min(MAX_COMPLETION_DATA)),
            };
            self.s
                .handle_completion(work.ticket, completion, &mut self.env);
            self.drain();
        }
        // At ErrorRecoveryLevel 2 a lost connection's tasks wait for a replacement until
        // DefaultTime2Wait + DefaultTime2Retain (RFC 7143 section 6.2): let that time pass.
        for _ in 0..8 {
            if self.s.is_ended() {
                break;
            }
            let Some(t) = self.s.poll_timeout() else {
                break;
            };
            self.now = self.now.max(t);
            self.s.handle_timeout(self.now, &mut self.env);
            self.drain();
        }
        assert!(self.s.is_ended(), "connections left after all closed");
        assert_eq!(self.s.task_count(), 0, "tasks left in an ended session");
        assert_eq!(
            self.s.window_slots_held(),
            0,
            "window slots held in an ended session"
        );
    }
}

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    let mut r = Reader(input);
    let mode = r.byte();
    let depth = u32::from(r.byte()) + 1;
    let keepalive = (mode & 1 != 0).then(|| KeepaliveConfig {
        interval: Duration::from_secs(1 + u64::from(r.byte() % 30)),
        timeout: Duration::from_secs(1 + u64::from(r.byte() % 10)),
    });
    let discovery = mode & 6 == 6;
    let max_write_bytes = [512, 8192, 65536, 1 << 20][usize::from(mode >> 3) & 3];
    let config = SessionConfig {
        session_type: if discovery {
            SessionType::Discovery
        } else {
            SessionType::Normal
        },
        queue_depth: depth,
        max_write_bytes_per_connection: max_write_bytes,
        keepalive,
        recovery: sluice_proto::target::RecoveryConfig {
            data_ack_every: (mode & 0x40 != 0).then(|| u32::from(r.byte() % 8) + 1),
            sequence_timeout: Duration::from_millis(1 + u64::from(r.byte())),
            max_retained_statuses: 1 + usize::from(r.byte()),
            // From a few blocks (the window held shut often) to the default.
            max_retained_bytes: if mode & 0x10 != 0 {
                512 << (r.byte() % 12)
            } else {
                sluice_proto::target::RecoveryConfig::default().max_retained_bytes
            },
        },
    };
    let params = r.params();
    let stat_sn = SeqNum(r.u32());
    // Often close to the wrap of the 32-bit serial numbers.
    let cmd_sn = if mode & 0x20 != 0 {
        SeqNum(0u32.wrapping_sub(u32::from(r.byte() % 16)))
    } else {
        SeqNum(r.u32())
    };
    let cid = u16::from(r.byte() % 6);
    let now = Instant::now();
    let leading = ConnectionSetup {
        cid,
        params,
        next_stat_sn: stat_sn,
        exp_cmd_sn: cmd_sn,
    };
    let (s, first) = TargetSession::new(config, leading, now);
    // R2Ts one operation may bring: per command, MaxOutstandingR2T of them but never more than
    // its buffered write needs; every input byte can carry at most one command.
    let r2ts = (max_write_bytes / params.max_burst_length as usize + 1)
        .min(usize::from(params.max_outstanding_r2t))
        + 1;
    let out_bound = 64 + input.len() * (8 + r2ts) + 2 * MAX_COMPLETION_DATA / 512;
    let mut f = Fuzz {
        r,
        s,
        env: Env,
        now,
        depth,
        discovery,
        conns: vec![Conn::new(first, cid, stat_sn)],
        pending: Vec::new(),
        r2ts: VecDeque::new(),
        itts: VecDeque::new(),
        cmd_sns: VecDeque::new(),
        unsolicited: None,
        next_cmd_sn: cmd_sn,
        next_itt: 0,
        out_bound,
    };
    f.drain();
    while !f.r.is_empty() {
        f.step();
        f.drain();
    }
    f.finish();
});
