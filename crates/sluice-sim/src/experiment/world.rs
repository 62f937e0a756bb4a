//! The experiment's world: one connection between the production session cores over the
//! modelled link, stepped from event to event.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sluice_proto::framing::{encode, Digests, Framer};
use sluice_proto::initiator::{
    self, Command, CommandData, Completion, InitiatorSession, Policy, TaskId,
};
use sluice_proto::pdu::{Cdb, Pdu, TaskAttr};
use sluice_proto::seq::{Itt, Lun, SeqNum};
use sluice_proto::target::{self, TargetSession};
use sluice_scsi::{LogicalUnit, ScsiTarget};
use sluice_storage::MemoryDevice;

use super::link::{LinkDir, Offer};
use super::tcp::{Receiver, Segment, Sender};
use super::{CommandTiming, Experiment, ExperimentError, Metrics, Outcome, TcpStats, Transport};
use crate::world::env::{clear_unit_attention, execute, lu_config, ScsiEnv};

/// IPv4 header bytes of each fragment; UDP adds 8 bytes to each datagram.
const IP_HEADER: usize = 20;
const UDP_HEADER: usize = 8;
/// Events after which a run is stuck.
const STEP_LIMIT: u64 = 200_000_000;

#[derive(Debug)]
enum Packet {
    Data(Segment),
    Ack(u64, Vec<(u64, u64)>),
    Fragment {
        datagram: u64,
        index: u32,
        count: u32,
        /// The PDU, carried by the last fragment.
        pdu: Option<Bytes>,
    },
}

/// One end: its TCP halves (or datagram reassembly) and its framer.
struct End {
    sender: Option<Sender>,
    receiver: Receiver,
    framer: Framer,
    rbuf: BytesMut,
    /// UDP: the datagram being reassembled and its intact fragments.
    reassembly: (u64, u32),
    next_datagram: u64,
}

impl End {
    fn new(transport: Transport, max_segment: u32, digests: Digests) -> Self {
        let mut framer = Framer::new(max_segment);
        framer.set_digests(digests);
        Self {
            sender: match transport {
                Transport::Tcp(cfg) => Some(Sender::new(cfg)),
                Transport::Udp => None,
            },
            receiver: Receiver::default(),
            framer,
            rbuf: BytesMut::new(),
            reassembly: (u64::MAX, 0),
            next_datagram: 0,
        }
    }
}

pub(super) struct ExpWorld<'a> {
    exp: &'a Experiment,
    rng: ChaCha8Rng,
    base: Instant,
    now: u64,
    events: u64,
    up: LinkDir<Packet>,
    down: LinkDir<Packet>,
    i_end: End,
    t_end: End,
    digests: Digests,
    scsi: ScsiTarget,
    isession: InitiatorSession,
    iconn: initiator::ConnId,
    tsession: TargetSession,
    tconn: target::ConnId,
    zeros: Bytes,
    next_io: usize,
    timings: Vec<CommandTiming>,
    tasks: HashMap<TaskId, usize>,
    /// Which command an ITT names now.
    itts: HashMap<Itt, usize>,
    /// Commands sent, in order: the n-th new ITT is the n-th submitted command.
    sent: usize,
    submitted: VecDeque<usize>,
    /// Statuses sent and not yet acknowledged: (StatSN, command).
    unacked_status: Vec<(SeqNum, usize)>,
    done: usize,
    /// Why the connection was given up, if it was.
    closed: Option<String>,
    /// ExpCmdSN and MaxCmdSN of the last target PDU that carried them.
    last_window_sent: Option<(SeqNum, SeqNum)>,
    pdus: u64,
    pdus_lost: u64,
}

impl<'a> ExpWorld<'a> {
    pub(super) fn new(exp: &'a Experiment) -> Result<Self, ExperimentError> {
        let p = exp.params;
        if let Some(bad) = exp
            .workload
            .iter()
            .find(|io| io.bytes % 512 != 0 || io.bytes == 0)
        {
            return Err(ExperimentError(format!(
                "command of {} bytes: not a positive multiple of the 512-byte block",
                bad.bytes
            )));
        }
        let largest = exp.workload.iter().map(|io| io.bytes).max().unwrap_or(512);
        let largest_write = exp
            .workload
            .iter()
            .filter(|io| io.write)
            .map(|io| io.bytes)
            .max()
            .unwrap_or(0);
        let blocks = u64::from(largest / 512).max(2048);
        let device = Arc::new(MemoryDevice::new(512, blocks));
        let scsi = ScsiTarget::new(vec![(0, Arc::new(LogicalUnit::new(lu_config(0, device))))]);
        clear_unit_attention(&scsi, Lun::from_number(0).0);
        let base = Instant::now();
        let depth = exp.queue_depth.max(1);
        let i_config = initiator::SessionConfig {
            policy: Policy::RoundRobin,
            max_retries: 3,
            keepalive: None,
            recovery: initiator::RecoveryConfig {
                retry_timeout: exp.timeouts.transfer_context,
                max_command_retries: 64,
                command_timeout: Some(exp.timeouts.command),
            },
        };
        let (isession, iconn) = InitiatorSession::new(
            i_config,
            initiator::ConnectionSetup {
                cid: 0,
                params: p,
                cmd_sn: SeqNum(1),
                exp_stat_sn: SeqNum(1),
                exp_cmd_sn: SeqNum(1),
                max_cmd_sn: SeqNum(depth),
            },
            base,
        );
        let t_config = target::SessionConfig {
            session_type: sluice_proto::params::SessionType::Normal,
            queue_depth: depth,
            max_write_bytes_per_connection: usize::MAX / 2,
            keepalive: None,
            recovery: target::RecoveryConfig {
                sequence_timeout: exp.timeouts.transfer_context,
                max_retained_bytes: 1 << 40,
                ..target::RecoveryConfig::default()
            },
        };
        let (tsession, tconn) = TargetSession::new(
            t_config,
            target::ConnectionSetup {
                cid: 0,
                params: p,
                next_stat_sn: SeqNum(1),
                exp_cmd_sn: SeqNum(1),
            },
            base,
        );
        let digests = Digests::negotiated(&p);
        Ok(Self {
            exp,
            rng: ChaCha8Rng::seed_from_u64(exp.seed),
            base,
            now: 0,
            events: 0,
            up: LinkDir::new(exp.link),
            down: LinkDir::new(exp.link),
            i_end: End::new(
                exp.transport,
                p.initiator_max_recv_data_segment_length,
                digests,
            ),
            t_end: End::new(
                exp.transport,
                p.target_max_recv_data_segment_length,
                digests,
            ),
            digests,
            scsi,
            isession,
            iconn,
            tsession,
            tconn,
            zeros: Bytes::from(vec![0u8; largest_write as usize]),
            next_io: 0,
            timings: Vec::with_capacity(exp.workload.len()),
            tasks: HashMap::new(),
            itts: HashMap::new(),
            sent: 0,
            submitted: VecDeque::new(),
            unacked_status: Vec::new(),
            done: 0,
            closed: None,
            last_window_sent: None,
            pdus: 0,
            pdus_lost: 0,
        })
    }

    fn at(&self) -> Instant {
        self.base + Duration::from_nanos(self.now)
    }

    fn ns(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    fn err(&self, what: impl std::fmt::Display) -> ExperimentError {
        ExperimentError(format!("at {:.6} s: {what}", self.now as f64 / 1e9))
    }

    pub(super) fn run(mut self) -> Result<Outcome, ExperimentError> {
        let wall = Instant::now();
        while self.done < self.exp.workload.len() {
            self.events += 1;
            if self.events > STEP_LIMIT || self.now > self.exp.time_limit_ns {
                return Err(self.err(format!(
                    "no end after {} events: {} of {} commands done; {}",
                    self.events,
                    self.done,
                    self.exp.workload.len(),
                    self.describe()
                )));
            }
            let Some(next) = self.next_time() else {
                return Err(self.err(format!(
                    "nothing left to happen with {} of {} commands done",
                    self.done,
                    self.exp.workload.len()
                )));
            };
            self.now = self.now.max(next);
            self.step()?;
            if let Some(why) = &self.closed {
                return Err(self.err(format!(
                    "connection given up with {} of {} commands done: {why}",
                    self.done,
                    self.exp.workload.len()
                )));
            }
        }
        Ok(self.outcome(wall.elapsed()))
    }

    /// The state of both sessions and both TCP senders, for a run that did not end.
    fn describe(&self) -> String {
        let tcp = |e: &End| {
            e.sender
                .as_ref()
                .map_or_else(|| "udp".to_owned(), Sender::describe)
        };
        format!(
            "initiator: window (CmdSN, ExpCmdSN, MaxCmdSN) {:?}, {} in flight, {} waiting, \
             requests {}, tcp {}; target: window (ExpCmdSN, MaxCmdSN) {:?}, {} tasks, last \
             (ExpCmdSN, MaxCmdSN) it sent {:?}, tcp {}",
            self.isession.command_window(),
            self.isession.in_flight(),
            self.isession.waiting(),
            self.isession.describe_requests(),
            tcp(&self.i_end),
            self.tsession.command_window(),
            self.tsession.task_count(),
            self.last_window_sent,
            tcp(&self.t_end)
        )
    }

    fn next_time(&self) -> Option<u64> {
        [
            self.up.next_arrival(),
            self.down.next_arrival(),
            self.i_end.sender.as_ref().and_then(Sender::next_timeout),
            self.t_end.sender.as_ref().and_then(Sender::next_timeout),
            self.isession.poll_timeout().map(|t| self.ns(t)),
            self.tsession.poll_timeout().map(|t| self.ns(t)),
            self.exp.workload.get(self.next_io).map(|io| io.at_ns),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn step(&mut self) -> Result<(), ExperimentError> {
        let now = self.now;
        while let Some(p) = self.up.take_due(now) {
            if !p.corrupted {
                self.arrive(true, p.packet)?;
            }
        }
        while let Some(p) = self.down.take_due(now) {
            if !p.corrupted {
                self.arrive(false, p.packet)?;
            }
        }
        for to_target in [true, false] {
            let end = if to_target {
                &mut self.i_end
            } else {
                &mut self.t_end
            };
            if let Some(s) = end.sender.as_mut() {
                let mut out = Vec::new();
                s.on_timeout(now, &mut out);
                self.offer_segments(to_target, out);
            }
        }
        let at = self.at();
        if self.tsession.poll_timeout().is_some_and(|t| t <= at) {
            let mut env = ScsiEnv { scsi: &self.scsi };
            self.tsession.handle_timeout(at, &mut env);
        }
        if self.isession.poll_timeout().is_some_and(|t| t <= at) {
            self.isession.handle_timeout(at);
        }
        while let Some(io) = self.exp.workload.get(self.next_io).copied() {
            if io.at_ns > now {
                break;
            }
            self.submit(self.next_io, io);
            self.next_io += 1;
        }
        self.pump()
    }

    fn submit(&mut self, index: usize, io: super::Io) {
        let blocks = io.bytes / 512;
        let mut cdb = [0u8; 16];
        cdb[0] = if io.write { 0x8a } else { 0x88 };
        cdb[10..14].copy_from_slice(&blocks.to_be_bytes());
        let data = if io.write {
            CommandData::Write(self.zeros.slice(..io.bytes as usize))
        } else {
            CommandData::Read(io.bytes)
        };
        let task = self.isession.submit(
            Command {
                lun: Lun::from_number(0),
                cdb: Cdb::new(&cdb),
                data,
                attr: TaskAttr::Simple,
            },
            self.at(),
        );
        self.tasks.insert(task, index);
        self.submitted.push_back(index);
        self.timings.push(CommandTiming {
            io,
            t1: self.now,
            t2: None,
            t3: None,
            t4: None,
            t5: None,
            failure: None,
            attempts: 0,
        });
    }

    /// A packet arrived intact at the target (`to_target`) or the initiator.
    fn arrive(&mut self, to_target: bool, packet: Packet) -> Result<(), ExperimentError> {
        match packet {
            Packet::Data(seg) => {
                let end = if to_target {
                    &mut self.t_end
                } else {
                    &mut self.i_end
                };
                let mut delivered = Vec::new();
                let ack = end.receiver.on_segment(seg, &mut delivered);
                let sack = match self.exp.transport {
                    Transport::Tcp(c) if c.sack => end.receiver.sack_blocks(),
                    _ => Vec::new(),
                };
                // Each SACK block is 8 bytes of TCP options.
                let header = self.tcp_header() + 8 * sack.len();
                let reverse = if to_target {
                    &mut self.down
                } else {
                    &mut self.up
                };
                reverse.offer(self.now, header, Packet::Ack(ack, sack), &mut self.rng);
                for b in delivered {
                    self.bytes_in(to_target, &b)?;
                }
            }
            Packet::Ack(ack, sack) => {
                let end = if to_target {
                    &mut self.t_end
                } else {
                    &mut self.i_end
                };
                let mut out = Vec::new();
                if let Some(s) = end.sender.as_mut() {
                    s.on_ack(self.now, ack, &sack, &mut out);
                }
                // The target's sender is acknowledged by packets going to the target.
                self.offer_segments(!to_target, out);
            }
            Packet::Fragment {
                datagram,
                index,
                count,
                pdu,
            } => {
                let end = if to_target {
                    &mut self.t_end
                } else {
                    &mut self.i_end
                };
                if end.reassembly.0 != datagram {
                    end.reassembly = (datagram, 0);
                }
                end.reassembly.1 += 1;
                if index + 1 == count && end.reassembly.1 == count {
                    if let Some(b) = pdu {
                        self.bytes_in(to_target, &b)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn tcp_header(&self) -> usize {
        match self.exp.transport {
            Transport::Tcp(c) => c.header_bytes,
            Transport::Udp => IP_HEADER + UDP_HEADER,
        }
    }

    /// Bytes of the stream (or one whole datagram) for the target or the initiator.
    fn bytes_in(&mut self, to_target: bool, b: &[u8]) -> Result<(), ExperimentError> {
        let end = if to_target {
            &mut self.t_end
        } else {
            &mut self.i_end
        };
        end.rbuf.extend_from_slice(b);
        loop {
            let end = if to_target {
                &mut self.t_end
            } else {
                &mut self.i_end
            };
            let pdu = match end.framer.decode(&mut end.rbuf) {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => return Err(self.err(format!("framing error: {e}"))),
            };
            if to_target {
                self.target_pdu(pdu);
            } else {
                self.isession.handle_pdu(self.iconn, pdu, self.at());
            }
        }
        if matches!(self.exp.transport, Transport::Udp) {
            let end = if to_target { &self.t_end } else { &self.i_end };
            if !end.rbuf.is_empty() {
                return Err(self.err("a datagram held more than one PDU"));
            }
        }
        Ok(())
    }

    fn target_pdu(&mut self, pdu: Pdu) {
        let exp_stat_sn = match &pdu {
            Pdu::ScsiCommand(c) => {
                if let Some(&n) = self.itts.get(&c.itt) {
                    let t = &mut self.timings[n];
                    t.t3.get_or_insert(self.now);
                }
                Some(c.exp_stat_sn)
            }
            Pdu::DataOut(d) => Some(d.exp_stat_sn),
            Pdu::NopOut(n) => Some(n.exp_stat_sn),
            _ => None,
        };
        if let Some(e) = exp_stat_sn {
            let now = self.now;
            let timings = &mut self.timings;
            self.unacked_status.retain(|(sn, n)| {
                if e.gt(*sn) {
                    timings[*n].t5.get_or_insert(now);
                    false
                } else {
                    true
                }
            });
        }
        let mut env = ScsiEnv { scsi: &self.scsi };
        self.tsession.handle_pdu(
            self.tconn,
            pdu,
            self.base + Duration::from_nanos(self.now),
            &mut env,
        );
    }

    fn pump(&mut self) -> Result<(), ExperimentError> {
        loop {
            let mut moved = false;
            while let Some(work) = self.tsession.poll_work() {
                moved = true;
                let done = execute(&self.scsi, &work);
                let mut env = ScsiEnv { scsi: &self.scsi };
                self.tsession.handle_completion(work.ticket, done, &mut env);
            }
            let mut out = BytesMut::new();
            let mut pdus = Vec::new();
            while let Some(pdu) = self.tsession.poll_transmit(self.tconn) {
                moved = true;
                self.target_sent(&pdu);
                pdus.push(pdu);
            }
            self.transmit(false, &pdus, &mut out);
            pdus.clear();
            while let Some(pdu) = self.isession.poll_transmit(self.iconn) {
                moved = true;
                self.initiator_sent(&pdu)?;
                pdus.push(pdu);
            }
            self.transmit(true, &pdus, &mut out);
            while let Some(c) = self.isession.poll_completion() {
                moved = true;
                if let Completion::Command(task, result) = c {
                    let Some(n) = self.tasks.remove(&task) else {
                        return Err(self.err("completion of an unknown command"));
                    };
                    let t = &mut self.timings[n];
                    t.t4 = Some(self.now);
                    if let Err(f) = &result {
                        t.failure = Some(f.to_string());
                    } else if let Ok(r) = &result {
                        if r.status != sluice_proto::pdu::codes::ScsiStatus::Good {
                            t.failure = Some(format!("SCSI status {}", r.status));
                        }
                    }
                    self.done += 1;
                }
            }
            // One connection and no reconnection here: a session core that gives the
            // connection up (or asks for reinstatement) ends the run, with its reason.
            while let Some(e) = self.isession.poll_event() {
                moved = true;
                self.closed
                    .get_or_insert_with(|| format!("the initiator's session core: {e:?}"));
            }
            while let Some(e) = self.tsession.poll_event(self.tconn) {
                moved = true;
                self.closed
                    .get_or_insert_with(|| format!("the target's session core: {e:?}"));
            }
            if !moved {
                return Ok(());
            }
        }
    }

    fn initiator_sent(&mut self, pdu: &Pdu) -> Result<(), ExperimentError> {
        if let Pdu::ScsiCommand(c) = pdu {
            let known = self
                .itts
                .get(&c.itt)
                .copied()
                .filter(|&n| self.timings[n].t4.is_none());
            let n = match known {
                Some(n) => n,
                None => {
                    let Some(n) = self.submitted.pop_front() else {
                        return Err(self.err("a SCSI Command PDU nobody submitted"));
                    };
                    self.sent += 1;
                    if self.timings[n].io.bytes != c.expected_data_transfer_length {
                        return Err(self.err("commands left out of submission order"));
                    }
                    self.itts.insert(c.itt, n);
                    n
                }
            };
            let t = &mut self.timings[n];
            t.t2.get_or_insert(self.now);
            t.attempts += 1;
        }
        Ok(())
    }

    fn target_sent(&mut self, pdu: &Pdu) {
        self.last_window_sent = match pdu {
            Pdu::ScsiResponse(r) => Some((r.exp_cmd_sn, r.max_cmd_sn)),
            Pdu::DataIn(d) => Some((d.exp_cmd_sn, d.max_cmd_sn)),
            Pdu::R2t(r) => Some((r.exp_cmd_sn, r.max_cmd_sn)),
            Pdu::NopIn(n) => Some((n.exp_cmd_sn, n.max_cmd_sn)),
            _ => self.last_window_sent,
        };
        let status = match pdu {
            Pdu::ScsiResponse(r) => Some((r.itt, r.stat_sn)),
            Pdu::DataIn(d) if d.status_present => Some((d.itt, d.stat_sn)),
            _ => None,
        };
        if let Some((itt, sn)) = status {
            if let Some(&n) = self.itts.get(&itt) {
                if !self.unacked_status.iter().any(|(_, m)| *m == n) {
                    self.unacked_status.push((sn, n));
                }
            }
        }
    }

    /// Sends PDUs from the initiator (`to_target`) or the target.
    fn transmit(&mut self, to_target: bool, pdus: &[Pdu], out: &mut BytesMut) {
        if pdus.is_empty() {
            return;
        }
        self.pdus += pdus.len() as u64;
        match self.exp.transport {
            Transport::Tcp(_) => {
                out.clear();
                for pdu in pdus {
                    encode(pdu, self.digests, out);
                }
                let end = if to_target {
                    &mut self.i_end
                } else {
                    &mut self.t_end
                };
                let mut segs = Vec::new();
                if let Some(s) = end.sender.as_mut() {
                    s.write(out.split().freeze());
                    s.poll(self.now, &mut segs);
                }
                self.offer_segments(to_target, segs);
            }
            Transport::Udp => {
                for pdu in pdus {
                    out.clear();
                    encode(pdu, self.digests, out);
                    self.send_datagram(to_target, Bytes::copy_from_slice(out));
                }
            }
        }
    }

    fn offer_segments(&mut self, to_target: bool, segs: Vec<Segment>) {
        let header = self.tcp_header();
        let link = if to_target {
            &mut self.up
        } else {
            &mut self.down
        };
        for seg in segs {
            let bytes = seg.data.len() + header;
            link.offer(self.now, bytes, Packet::Data(seg), &mut self.rng);
        }
    }

    /// One PDU in one UDP datagram, cut into IP fragments of at most the MTU.
    fn send_datagram(&mut self, to_target: bool, pdu: Bytes) {
        let per_fragment = (self.exp.link.mtu - IP_HEADER).max(8);
        let total = pdu.len() + UDP_HEADER;
        let count = total.div_ceil(per_fragment) as u32;
        let end = if to_target {
            &mut self.i_end
        } else {
            &mut self.t_end
        };
        let datagram = end.next_datagram;
        end.next_datagram += 1;
        let link = if to_target {
            &mut self.up
        } else {
            &mut self.down
        };
        let mut left = total;
        let mut lost = false;
        let mut pdu = Some(pdu);
        for index in 0..count {
            let payload = left.min(per_fragment);
            left -= payload;
            let last = index + 1 == count;
            let fragment = Packet::Fragment {
                datagram,
                index,
                count,
                pdu: if last { pdu.take() } else { None },
            };
            lost |= link.offer(self.now, payload + IP_HEADER, fragment, &mut self.rng)
                == Offer::Dropped;
        }
        if lost {
            self.pdus_lost += 1;
        }
    }

    fn outcome(self, wall: Duration) -> Outcome {
        let first = self.exp.workload.first().map_or(0, |io| io.at_ns);
        let last = self
            .timings
            .iter()
            .filter_map(|t| t.t4)
            .max()
            .unwrap_or(first);
        let interval_s = (last.saturating_sub(first)) as f64 / 1e9;
        let good: Vec<&CommandTiming> = self
            .timings
            .iter()
            .filter(|t| t.failure.is_none())
            .collect();
        let bytes: f64 = good.iter().map(|t| f64::from(t.io.bytes)).sum();
        let per_s = |x: f64| {
            if interval_s > 0.0 {
                x / interval_s
            } else {
                0.0
            }
        };
        let data_throughput = per_s(bytes);
        let metrics = Metrics {
            interval_s,
            command_throughput: per_s(good.len() as f64),
            data_throughput,
            utilisation: data_throughput * 8.0 / self.exp.link.bits_per_sec as f64,
            arrival_rate: per_s(self.timings.len() as f64),
        };
        let stats = |e: &End| e.sender.as_ref().map_or(TcpStats::default(), |s| s.stats);
        Outcome {
            metrics,
            up: self.up.stats,
            down: self.down.stats,
            initiator_tcp: stats(&self.i_end),
            target_tcp: stats(&self.t_end),
            pdus: self.pdus,
            pdus_lost: self.pdus_lost,
            virtual_ns: self.now,
            events: self.events,
            wall,
            commands: self.timings,
        }
    }
}
