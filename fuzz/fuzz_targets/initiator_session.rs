#![no_main]
//! `InitiatorSession` (the initiator's full feature phase, sans IO) driven by an arbitrary
//! sequence of operations decoded from the fuzz bytes: the application's submissions (reads,
//! writes and commands without data, task management, pings, text, logouts of the session or
//! of one connection), the driver's connection events (connections added, lost, closed after
//! the session asked, frame errors, time passing, session reinstatement when asked, giving up
//! with `fail_all`), and PDUs from the target.
//!
//! Target PDUs have a 48-byte header from the input, framed with their data segment and decoded
//! by a framer limited to the initiator's MaxRecvDataSegmentLength (a refused PDU becomes a
//! frame error, as in the driver). Fix-up bits give them the ITT of a command or request the
//! initiator sent, the connection's next StatSN, a plausible CmdSN window, and coherent
//! Data-In offsets, R2T ranges and response codes; Data-In payloads are also received in
//! place (`start_placement`, `handle_placed`), possibly finished after other operations.
//!
//! Checks: nothing panics; every PDU the session sends is an initiator opcode, encodes and
//! decodes back to itself within the target's MaxRecvDataSegmentLength, and carries a CmdSN
//! above the previous command's on its connection (RFC 7143 section 4.2.2.1); a read never
//! returns more than its Expected Data Transfer Length; every TaskId and RequestId completes
//! at most once; each operation sends a bounded number of PDUs. At the end, after
//! `fail_all(Failure::ConnectionLost)`, every id has completed exactly once and nothing is in
//! flight, waiting or pending.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_proto::framing::FrameError;
use sluice_proto::initiator::{
    Command, CommandData, Completion, ConnId, ConnectionSetup, Event, Failure, InitiatorSession,
    Policy, RequestId, SessionConfig, TaskId,
};
use sluice_proto::pdu::codes::{ScsiStatus, TmfFunction};
use sluice_proto::pdu::{Cdb, DataIn, Pdu, TaskAttr};
use sluice_proto::seq::{Itt, Lun, SeqNum, Ttt};
use sluice_proto::task::initiator::Placement;

#[path = "session_common.rs"]
mod common;
use common::{brief, frame, round_trip, zeros, Reader, ZEROS};

/// Live connections at most (the MaxConnections the leading login settled).
const MAX_LIVE: usize = 4;
/// Connections the session may hold at once, closing ones included.
const MAX_CONNS: usize = 8;
/// Remembered commands and requests (the most recent ones).
const RECENT: usize = 32;
/// Data a command moves at most.
const MAX_DATA: usize = 65536;

/// What the target side knows of one connection.
struct Conn {
    id: ConnId,
    cid: u16,
    /// The next StatSN the target sends on it.
    stat_sn: SeqNum,
    /// The last non-immediate CmdSN it carried.
    cmd_sn: Option<SeqNum>,
    close_asked: bool,
    /// Reported closed (or forgotten by reinstatement).
    gone: bool,
}

impl Conn {
    /// A connection just logged in, whose first StatSN is `stat_sn`.
    fn new(id: ConnId, cid: u16, stat_sn: SeqNum) -> Self {
        Self {
            id,
            cid,
            stat_sn,
            cmd_sn: None,
            close_asked: false,
            gone: false,
        }
    }
}

/// A command or request the initiator sent, as the target saw it.
struct Sent {
    conn: ConnId,
    itt: Itt,
    kind: Kind,
}

enum Kind {
    Read {
        edtl: u32,
        offset: u32,
        data_sn: u32,
    },
    Write {
        edtl: u32,
        offset: u32,
        r2t_sn: u32,
    },
    NoData,
    /// Any other request: its opcode.
    Request(u8),
}

struct Fuzz<'a> {
    r: Reader<'a>,
    s: InitiatorSession,
    now: Instant,
    conns: Vec<Conn>,
    /// Submitted ids and how often each completed; reads with their EDTL.
    tasks: BTreeMap<TaskId, (u32, Option<u32>)>,
    requests: BTreeMap<RequestId, u32>,
    sent: VecDeque<Sent>,
    /// The highest non-immediate CmdSN sent.
    last_cmd_sn: Option<SeqNum>,
    reinstate_asked: bool,
    ended: bool,
    /// A Data-In payload being received in place: its connection, header and buffer.
    placement: Option<(ConnId, DataIn, Placement)>,
    /// PDUs one operation may make the session send at most.
    out_bound: usize,
}

impl Fuzz<'_> {
    fn step(&mut self) {
        match self.r.byte() % 16 {
            0..=5 => self.target_pdu(),
            6 => self.submit(),
            7 => self.task_management(),
            8 => self.ping_or_text(),
            9 => self.logout(),
            10 => self.add_connection(),
            11 => self.advance_time(),
            12 => self.connection_closed(),
            13 => {
                let c = self.pick();
                let error = self.frame_error();
                self.frame_error_on(self.conns[c].id, &error);
            }
            14 => self.placed_data_in(),
            _ => self.recover(),
        }
    }

    /// One of the connections: mostly one the session still has, sometimes any.
    fn pick(&mut self) -> usize {
        let gone: Vec<bool> = self.conns.iter().map(|c| c.gone).collect();
        self.r.pick(&gone)
    }

    fn params_of(&self, conn: ConnId) -> sluice_proto::params::SessionParams {
        self.s.connection_params(conn).copied().unwrap_or_default()
    }

    fn submit(&mut self) {
        let kind = self.r.byte();
        const LENGTHS: [usize; 8] = [512, 1024, 4096, 8192, 16384, MAX_DATA, 1, 1000];
        let len = LENGTHS[usize::from(kind >> 2) % LENGTHS.len()];
        let blocks = len.div_ceil(512) as u16;
        let [b0, b1] = blocks.to_be_bytes();
        let (op, data) = match kind & 3 {
            0 => (0x28, CommandData::Read(len as u32)),
            1 => (0x2a, CommandData::Write(zeros(len))),
            2 => (0x00, CommandData::None),
            _ => {
                if kind & 0x80 != 0 {
                    (0x28, CommandData::Read(0))
                } else {
                    (0x2a, CommandData::Write(Bytes::new()))
                }
            }
        };
        let read = match &data {
            CommandData::Read(n) => Some(*n),
            _ => None,
        };
        let command = Command {
            lun: Lun::from_number(u16::from(kind >> 6)),
            cdb: Cdb::new(&[op, 0, 0, 0, 0, 0, 0, b0, b1, 0]),
            data,
            attr: TaskAttr::from_code(self.r.byte()),
        };
        let id = self.s.submit(command, self.now);
        assert!(
            self.tasks.insert(id, (0, read)).is_none(),
            "a TaskId given twice"
        );
    }

    fn new_request(&mut self, id: RequestId) {
        assert!(
            self.requests.insert(id, 0).is_none(),
            "a RequestId given twice"
        );
    }

    fn task_management(&mut self) {
        let function = TmfFunction::from(self.r.byte() % 10);
        let lun = Lun::from_number(u16::from(self.r.byte() % 4));
        let b = usize::from(self.r.byte());
        let referenced = if b & 1 == 1 && !self.tasks.is_empty() {
            self.tasks.keys().nth((b >> 1) % self.tasks.len()).copied()
        } else {
            None
        };
        let id = self.s.task_management(function, lun, referenced, self.now);
        self.new_request(id);
    }

    fn ping_or_text(&mut self) {
        let b = self.r.byte();
        if b & 1 == 0 {
            let id = self.s.ping(self.now);
            self.new_request(id);
            return;
        }
        const PAIRS: [(&str, &str); 6] = [
            ("SendTargets", "All"),
            ("SendTargets", ""),
            ("MaxBurstLength", "4096"),
            ("X-com.example.foo", "1"),
            ("Key", "a value = with an equals sign"),
            ("", ""),
        ];
        let mut pairs: Vec<(String, String)> = (0..(b >> 1) % 4)
            .map(|_| {
                let (k, v) = PAIRS[usize::from(self.r.byte()) % PAIRS.len()];
                (k.to_string(), v.to_string())
            })
            .collect();
        if b & 0x80 != 0 {
            // Longer than one Text Request may be.
            pairs.push(("X-long".into(), "v".repeat(9000)));
        }
        let id = self.s.text(&pairs);
        self.new_request(id);
    }

    fn logout(&mut self) {
        let b = self.r.byte();
        let id = if b & 1 == 0 {
            self.s.logout()
        } else {
            let c = self.pick();
            self.s.logout_connection(self.conns[c].id)
        };
        self.new_request(id);
    }

    fn setup(&mut self, cid: u16) -> ConnectionSetup {
        let params = self.r.params();
        let exp_stat_sn = SeqNum(self.r.u32());
        let (cmd_sn, _, _) = self.s.command_window();
        let window = u32::from(self.r.byte() % 33);
        ConnectionSetup {
            cid,
            params,
            cmd_sn,
            exp_stat_sn,
            exp_cmd_sn: cmd_sn,
            max_cmd_sn: cmd_sn.add(window).add(u32::MAX),
        }
    }

    fn add_connection(&mut self) {
        let cid = u16::from(self.r.byte() % 6);
        let setup = self.setup(cid);
        let live = self.s.live_connections().count();
        if self.ended
            || self.reinstate_asked
            || live >= MAX_LIVE
            || self.s.connections().count() >= MAX_CONNS
        {
            return;
        }
        let id = self.s.add_connection(setup, self.now);
        self.conns.push(Conn::new(id, cid, setup.exp_stat_sn));
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
        self.s.handle_timeout(self.now);
    }

    /// A transport is gone: one the session asked to close, or any.
    fn connection_closed(&mut self) {
        let asked =
            (0..self.conns.len()).find(|&i| self.conns[i].close_asked && !self.conns[i].gone);
        let c = match asked {
            Some(c) if self.r.byte() & 1 == 0 => c,
            _ => self.pick(),
        };
        let conn = self.conns[c].id;
        self.conns[c].gone = true;
        self.drop_placement_of(conn);
        self.s.handle_connection_closed(conn, self.now);
    }

    /// The driver's connection task ended with a payload half received: the buffer goes.
    fn drop_placement_of(&mut self, conn: ConnId) {
        if self.placement.as_ref().is_some_and(|p| p.0 == conn) {
            self.placement = None;
        }
    }

    /// After `Event::Reinstate`: log in again (or give up).
    fn recover(&mut self) {
        let b = self.r.byte();
        if !self.reinstate_asked || self.ended {
            return;
        }
        self.placement = None;
        if b & 1 != 0 {
            // The driver reports the old transports closed first.
            for c in 0..self.conns.len() {
                if !self.conns[c].gone {
                    self.conns[c].gone = true;
                    self.s.handle_connection_closed(self.conns[c].id, self.now);
                }
            }
        }
        if b & 6 == 6 {
            self.s.fail_all(Failure::ConnectionLost);
            return;
        }
        let cid = u16::from(b >> 4) % 6;
        let mut setup = self.setup(cid);
        // A new session: its CmdSN starts where the login says.
        setup.cmd_sn = SeqNum(self.r.u32());
        setup.exp_cmd_sn = setup.cmd_sn;
        setup.max_cmd_sn = setup.cmd_sn.add(u32::from(b >> 4) + 1);
        for c in &mut self.conns {
            c.gone = true;
        }
        self.reinstate_asked = false;
        self.last_cmd_sn = None;
        let id = self.s.reinstate(setup, self.now);
        self.conns.push(Conn::new(id, cid, setup.exp_stat_sn));
    }

    /// A command or request sent on `conn` (any connection when `None`), preferring one for
    /// which the target would send this opcode.
    fn sent_for(&mut self, conn: Option<ConnId>, opcode: u8) -> Option<usize> {
        let b = usize::from(self.r.byte());
        let fits = |s: &Sent| match (&s.kind, opcode) {
            (Kind::Read { .. }, 0x25) => true,
            (Kind::Write { .. }, 0x31) => true,
            (Kind::Read { .. } | Kind::Write { .. } | Kind::NoData, 0x21) => true,
            (Kind::Request(op), _) => op | 0x20 == opcode,
            _ => false,
        };
        let on = |s: &Sent| conn.is_none_or(|c| s.conn == c);
        let good: Vec<usize> = (0..self.sent.len())
            .filter(|&i| on(&self.sent[i]) && fits(&self.sent[i]))
            .collect();
        if !good.is_empty() && b & 1 == 0 {
            return Some(good[(b >> 1) % good.len()]);
        }
        let any: Vec<usize> = (0..self.sent.len())
            .filter(|&i| on(&self.sent[i]))
            .collect();
        (!any.is_empty()).then(|| any[(b >> 1) % any.len()])
    }

    /// A PDU from the target.
    fn target_pdu(&mut self) {
        let c = self.pick();
        let conn = self.conns[c].id;
        if self.placement.as_ref().is_some_and(|p| p.0 == conn) {
            // The stream carries the rest of the payload before the next PDU.
            self.finish_placement();
        }
        let fix = self.r.byte();
        let shape = self.r.byte();
        let mut h = self.r.header();
        if fix & 0x80 != 0 {
            const OPCODES: [u8; 12] = [
                0x20, 0x21, 0x21, 0x22, 0x24, 0x25, 0x25, 0x26, 0x31, 0x31, 0x32, 0x3f,
            ];
            h[0] = OPCODES[usize::from(h[0]) % OPCODES.len()];
        }
        let opcode = h[0] & 0x3f;
        let mut data = None;
        let chosen = match (fix >> 3) & 3 {
            1 => self.sent_for(Some(conn), opcode),
            2 => self.sent_for(None, opcode),
            3 => {
                h[16..20].copy_from_slice(&Itt::RESERVED.0.to_be_bytes());
                None
            }
            _ => None,
        };
        if let Some(i) = chosen {
            h[16..20].copy_from_slice(&self.sent[i].itt.0.to_be_bytes());
        }
        let max_segment = self.params_of(conn).initiator_max_recv_data_segment_length;
        if shape & 0x10 != 0 {
            match opcode {
                0x25 => {
                    if let Some(i) = chosen {
                        if let Some((header, len)) = self.data_in(i, shape, max_segment) {
                            h[1] = header.0;
                            h[3] = 0;
                            h[36..40].copy_from_slice(&header.1.to_be_bytes());
                            h[40..44].copy_from_slice(&header.2.to_be_bytes());
                            h[44..48].fill(0);
                            data = Some(vec![0; len as usize]);
                        }
                    }
                }
                0x31 => {
                    // Section 11.8.4: at most MaxBurstLength, within the EDTL.
                    let max_burst = self.s.params().max_burst_length;
                    if let Some(Kind::Write {
                        edtl,
                        offset,
                        r2t_sn,
                    }) = chosen.map(|i| &mut self.sent[i].kind)
                    {
                        let start = if shape & 0x20 != 0 { *offset } else { 0 };
                        let len = (u32::from(shape >> 6) + 1) * 4096;
                        let len = len.min(max_burst).min(edtl.saturating_sub(start));
                        h[36..40].copy_from_slice(&r2t_sn.to_be_bytes());
                        h[40..44].copy_from_slice(&start.to_be_bytes());
                        h[44..48].copy_from_slice(&len.to_be_bytes());
                        *offset = start + len;
                        *r2t_sn += 1;
                    }
                }
                0x21 => {
                    // F, a "completed" response, GOOD or CHECK CONDITION, no residual;
                    // ExpDataSN the Data-In count.
                    h[1] = 0x80;
                    h[2] = 0;
                    h[3] = if shape & 0x20 != 0 { 0x02 } else { 0x00 };
                    let data_sn = match chosen.map(|i| &self.sent[i].kind) {
                        Some(Kind::Read { data_sn, .. }) => *data_sn,
                        _ => 0,
                    };
                    h[36..40].copy_from_slice(&data_sn.to_be_bytes());
                    h[40..48].fill(0);
                    data = Some(Vec::new());
                }
                0x22 => h[2] = (shape >> 5) % 7,
                0x24 => {
                    h[1] = if shape & 0x20 != 0 { 0x80 } else { 0x40 };
                    if shape & 0x20 != 0 {
                        h[20..24].copy_from_slice(&Ttt::RESERVED.0.to_be_bytes());
                    }
                    data = Some(self.r.text());
                }
                0x26 => h[2] = (shape >> 5) % 4,
                0x20 => {
                    if chosen.is_none() {
                        // A ping from the target.
                        h[16..20].copy_from_slice(&Itt::RESERVED.0.to_be_bytes());
                        h[20..24].copy_from_slice(&u32::from(shape).to_be_bytes());
                    } else {
                        h[20..24].copy_from_slice(&Ttt::RESERVED.0.to_be_bytes());
                    }
                }
                0x32 => {
                    h[36] = (shape >> 5) % 5;
                    let cid = self.conns[usize::from(shape) % self.conns.len()].cid;
                    h[38..40].copy_from_slice(&cid.to_be_bytes());
                }
                0x3f => {
                    // The quoted header names the request.
                    let mut quoted = self.r.header();
                    quoted[16..20].copy_from_slice(&h[16..20]);
                    data = Some(quoted.to_vec());
                }
                _ => {}
            }
        }
        if fix & 0x02 != 0 {
            // The connection's next StatSN, and it advances when the PDU carries status.
            let sn = self.conns[c].stat_sn;
            h[24..28].copy_from_slice(&sn.0.to_be_bytes());
            let itt = Itt(u32::from_be_bytes([h[16], h[17], h[18], h[19]]));
            let advances = match opcode {
                0x21 | 0x22 | 0x24 | 0x26 | 0x32 | 0x3f => true,
                0x25 => h[1] & 0x01 != 0,
                0x20 => itt != Itt::RESERVED,
                _ => false,
            };
            if advances {
                self.conns[c].stat_sn = sn.next();
            }
        }
        if fix & 0x04 != 0 {
            // ExpCmdSN: every command sent received (or not the last one); MaxCmdSN: a window
            // of 0 to 32 commands.
            let (next, _, _) = self.s.command_window();
            let exp = if fix & 0x40 != 0 {
                self.last_cmd_sn.unwrap_or(next)
            } else {
                next
            };
            let window = u32::from(self.r.byte() % 33);
            h[28..32].copy_from_slice(&exp.0.to_be_bytes());
            h[32..36].copy_from_slice(&exp.add(window).add(u32::MAX).0.to_be_bytes());
        }
        let data = data.unwrap_or_else(|| self.r.data());
        match frame(h, &[], &data, max_segment) {
            Ok(pdu) => self.s.handle_pdu(conn, pdu, self.now),
            Err(e) => self.frame_error_on(conn, &e),
        }
    }

    /// A frame error on `conn`, as the driver reports it: a placement in progress there
    /// fails with it.
    fn frame_error_on(&mut self, conn: ConnId, error: &FrameError) {
        match self.placement.take() {
            Some((c, header, placement)) if c == conn => {
                self.s
                    .handle_placement_failed(conn, &header, placement, error, self.now);
            }
            other => {
                self.placement = other;
                self.s.handle_frame_error(conn, error, self.now);
            }
        }
    }

    /// A frame error as the framer could report it.
    fn frame_error(&mut self) -> FrameError {
        match self.r.byte() % 3 {
            0 => FrameError::HeaderDigestSkipped {
                skipped: usize::from(self.r.byte()) * 4,
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
            _ => FrameError::HeaderDigest {
                received: self.r.u32(),
                computed: self.r.u32(),
            },
        }
    }

    /// The next Data-In of read `i`: flags, DataSN, Buffer Offset and payload length, or
    /// `None` when `i` is not a read.
    fn data_in(&mut self, i: usize, shape: u8, max_segment: u32) -> Option<((u8, u32, u32), u32)> {
        let Kind::Read {
            edtl,
            offset,
            data_sn,
        } = &mut self.sent[i].kind
        else {
            return None;
        };
        let want = if shape & 0x20 != 0 {
            u32::MAX
        } else {
            (u32::from(shape >> 6) + 1) * 512
        };
        let len = want.min(*edtl - (*offset).min(*edtl)).min(max_segment);
        let last = *offset + len >= *edtl;
        // F on the last; S (status GOOD, no residual) on the last when asked.
        let flags = if last {
            0x80 | u8::from(shape & 0x80 != 0)
        } else {
            0
        };
        let header = (flags, *data_sn, *offset);
        *offset += len;
        *data_sn += 1;
        Some((header, len))
    }

    /// A Data-In whose payload is received in place (or the one being received finishes).
    fn placed_data_in(&mut self) {
        if self.placement.is_some() {
            self.finish_placement();
            return;
        }
        let c = self.pick();
        let conn = self.conns[c].id;
        let shape = self.r.byte();
        let Some(i) = self.sent_for(Some(conn), 0x25) else {
            return;
        };
        let max_segment = self.params_of(conn).initiator_max_recv_data_segment_length;
        let itt = self.sent[i].itt;
        let Some(((flags, data_sn, offset), len)) = self.data_in(i, shape, max_segment) else {
            return;
        };
        let status_present = flags & 1 != 0;
        let stat_sn = self.conns[c].stat_sn;
        if status_present {
            self.conns[c].stat_sn = stat_sn.next();
        }
        let (_, exp, max) = self.s.command_window();
        let header = DataIn {
            final_bit: flags & 0x80 != 0,
            ack: false,
            overflow: false,
            underflow: false,
            status_present,
            status: ScsiStatus::Good,
            lun: Lun(0),
            itt,
            ttt: Ttt::RESERVED,
            stat_sn,
            exp_cmd_sn: exp,
            max_cmd_sn: max,
            data_sn,
            buffer_offset: offset,
            residual: 0,
            data: Bytes::new(),
        };
        match self.s.start_placement(conn, &header, len) {
            Some(mut placement) => {
                let n = len as usize;
                assert_eq!(placement.append(&ZEROS[..n]), n, "a placement took less");
                assert_eq!(placement.remaining(), 0);
                self.placement = Some((conn, header, placement));
                if shape & 0x08 == 0 {
                    self.finish_placement();
                }
            }
            // Not placeable: the whole PDU goes the usual way.
            None => {
                let pdu = Pdu::DataIn(DataIn {
                    data: zeros(len as usize),
                    ..header
                });
                self.s.handle_pdu(conn, pdu, self.now);
            }
        }
    }

    fn finish_placement(&mut self) {
        if let Some((conn, header, placement)) = self.placement.take() {
            self.s.handle_placed(conn, &header, placement, self.now);
        }
    }

    /// Takes everything the session has for its driver and checks it.
    fn drain(&mut self) {
        let mut out = 0;
        let ids: Vec<ConnId> = self.s.connections().collect();
        for id in ids {
            while let Some(pdu) = self.s.poll_transmit(id) {
                out += 1;
                self.check_sent(id, &pdu);
            }
        }
        assert!(
            out <= self.out_bound,
            "{out} PDUs out of one operation (bound {})",
            self.out_bound
        );
        while let Some(completion) = self.s.poll_completion() {
            self.check_completion(completion);
        }
        while let Some(event) = self.s.poll_event() {
            match event {
                Event::Close(conn, _) => {
                    if let Some(c) = self.conns.iter_mut().find(|c| c.id == conn) {
                        c.close_asked = true;
                    }
                }
                Event::Reinstate => self.reinstate_asked = true,
                // A replacement connection would be logged in; the harness opens none.
                Event::RecoverConnection { .. } => {}
                Event::Ended => self.ended = true,
            }
        }
    }

    fn check_sent(&mut self, id: ConnId, pdu: &Pdu) {
        assert!(
            pdu.opcode() < 0x20 && !matches!(pdu, Pdu::LoginRequest(_)),
            "an initiator in full feature phase sent {}",
            brief(pdu)
        );
        let params = self.params_of(id);
        // In RDMA mode a Data-Out answering an R2T goes to the datamover, never onto the wire
        // (RFC 7145 section 7.3): one per R2T, bounded by the R2T's length and so by
        // MaxBurstLength (the core refuses longer R2Ts), not by MaxRecvDataSegmentLength.
        let peer_max_segment = match pdu {
            Pdu::DataOut(d) if params.solicited_data_by_rdma && d.ttt != Ttt::RESERVED => params
                .max_burst_length
                .max(params.target_max_recv_data_segment_length),
            _ => params.target_max_recv_data_segment_length,
        };
        round_trip(pdu, &params, peer_max_segment);
        let Some(c) = self.conns.iter_mut().find(|c| c.id == id) else {
            panic!("a PDU on a connection that never was");
        };
        let kind = match pdu {
            Pdu::ScsiCommand(cmd) => {
                if !cmd.immediate {
                    // RFC 7143 section 4.2.2.1: CmdSN grows by one per non-immediate command
                    // of the session, so on one connection it only grows, "except for commands
                    // that are retransmitted due to digest error recovery" (a retry carries
                    // its original CmdSN, section 7.2.1).
                    let retry = params.error_recovery_level > 0
                        && c.cmd_sn.is_some_and(|last| !cmd.cmd_sn.gt(last));
                    if let (Some(last), false) = (c.cmd_sn, retry) {
                        assert!(cmd.cmd_sn.gt(last), "CmdSN did not grow on a connection");
                    }
                    if !retry {
                        c.cmd_sn = Some(cmd.cmd_sn);
                        self.last_cmd_sn = Some(cmd.cmd_sn);
                    }
                }
                let edtl = cmd.expected_data_transfer_length;
                if cmd.read {
                    Kind::Read {
                        edtl,
                        offset: 0,
                        data_sn: 0,
                    }
                } else if cmd.write {
                    Kind::Write {
                        edtl,
                        offset: cmd.data.len() as u32,
                        r2t_sn: 0,
                    }
                } else {
                    Kind::NoData
                }
            }
            Pdu::NopOut(p) if p.itt != Itt::RESERVED => Kind::Request(0x00),
            Pdu::TaskMgmtRequest(_) => Kind::Request(0x02),
            Pdu::TextRequest(_) => Kind::Request(0x04),
            Pdu::LogoutRequest(_) => Kind::Request(0x06),
            Pdu::DataOut(d) if d.ttt == Ttt::RESERVED => {
                // Unsolicited data: R2Ts ask for what follows it.
                let end = d.buffer_offset + d.data.len() as u32;
                for s in &mut self.sent {
                    if let (true, Kind::Write { offset, .. }) = (s.itt == d.itt, &mut s.kind) {
                        *offset = (*offset).max(end);
                    }
                }
                return;
            }
            _ => return,
        };
        if self.sent.len() == RECENT {
            self.sent.pop_front();
        }
        self.sent.push_back(Sent {
            conn: id,
            itt: pdu.itt(),
            kind,
        });
    }

    fn check_completion(&mut self, completion: Completion) {
        let request = match completion {
            Completion::Command(id, result) => {
                let Some((done, read)) = self.tasks.get_mut(&id) else {
                    panic!("a completion for {id:?}, never submitted");
                };
                *done += 1;
                assert_eq!(*done, 1, "{id:?} completed twice");
                if let (Ok(result), Some(edtl)) = (&result, read) {
                    assert!(
                        result.data.len() <= *edtl as usize,
                        "a read returned more than its EDTL"
                    );
                }
                return;
            }
            Completion::TaskMgmt(id, _)
            | Completion::Ping(id, _)
            | Completion::Text(id, _)
            | Completion::Logout(id, _) => id,
        };
        let Some(done) = self.requests.get_mut(&request) else {
            panic!("a completion for {request:?}, never asked for");
        };
        *done += 1;
        assert_eq!(*done, 1, "{request:?} completed twice");
    }

    /// The driver gives up: everything completes exactly once and nothing is left.
    fn finish(mut self) {
        self.placement = None;
        self.s.fail_all(Failure::ConnectionLost);
        self.drain();
        for (id, (done, _)) in &self.tasks {
            assert_eq!(*done, 1, "{id:?} never completed");
        }
        for (id, done) in &self.requests {
            assert_eq!(*done, 1, "{id:?} never completed");
        }
        assert_eq!(self.s.in_flight(), 0);
        assert_eq!(self.s.waiting(), 0);
        assert_eq!(self.s.requests_pending(), 0);
    }
}

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    let mut r = Reader(input);
    let mode = r.byte();
    let config = SessionConfig {
        policy: Policy::ALL[usize::from(mode) % Policy::ALL.len()],
        max_retries: u32::from(mode >> 2) % 4,
        keepalive: (mode & 0x10 != 0).then(|| {
            (
                Duration::from_secs(1 + u64::from(r.byte() % 30)),
                Duration::from_secs(1 + u64::from(r.byte() % 10)),
            )
        }),
        recovery: sluice_proto::initiator::RecoveryConfig {
            retry_timeout: Duration::from_millis(1 + u64::from(r.byte())),
            max_command_retries: u32::from(r.byte() % 4),
            command_timeout: (mode & 0x40 != 0)
                .then(|| Duration::from_millis(1 + u64::from(r.byte()) * 10)),
        },
    };
    let params = r.params();
    // Often close to the wrap of the 32-bit serial numbers.
    let cmd_sn = if mode & 0x20 != 0 {
        SeqNum(0u32.wrapping_sub(u32::from(r.byte() % 16)))
    } else {
        SeqNum(r.u32())
    };
    let exp_stat_sn = SeqNum(r.u32());
    let window = u32::from(r.byte() % 33);
    let cid = u16::from(r.byte() % 6);
    let leading = ConnectionSetup {
        cid,
        params,
        cmd_sn,
        exp_stat_sn,
        exp_cmd_sn: cmd_sn,
        max_cmd_sn: cmd_sn.add(window).add(u32::MAX),
    };
    let now = Instant::now();
    let (s, first) = InitiatorSession::new(config, leading, now);
    // Per operation: a command and its unsolicited Data-Out, or the Data-Out answering an
    // R2T, at most MAX_DATA / 512 + 1 PDUs; every input byte can carry at most one command.
    let out_bound = 64 + input.len() * (MAX_DATA / 512 + 2);
    let mut f = Fuzz {
        r,
        s,
        now,
        conns: vec![Conn::new(first, cid, exp_stat_sn)],
        tasks: BTreeMap::new(),
        requests: BTreeMap::new(),
        sent: VecDeque::new(),
        last_cmd_sn: None,
        reinstate_asked: false,
        ended: false,
        placement: None,
        out_bound,
    };
    f.drain();
    while !f.r.is_empty() {
        f.step();
        f.drain();
    }
    f.finish();
});
