//! A scripted raw initiator for the target's integration tests.
//!
//! [`Peer`] speaks PDUs over any byte stream (an in-memory `tokio::io::duplex` served by
//! [`Target::serve_stream`], or a TCP connection to [`sluice_target::run`]): it logs in with the
//! `sluice-proto` initiator state machine (or with hand-built Login Requests), sends typed PDUs
//! or raw bytes, and decodes what comes back with a timeout. Nothing here hides a target
//! failure: every helper that expects an answer panics with the PDU it got instead.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_proto::framing::{encode, Digests, FrameError, Framer};
use sluice_proto::login::{
    ChapCredential, InitiatorChap, InitiatorConfig, InitiatorLogin, InitiatorOutcome, InitiatorStep,
};
use sluice_proto::pdu::codes::TmfFunction;
use sluice_proto::pdu::{
    Cdb, DataIn, DataOut, LoginRequest, LoginResponse, NopOut, Pdu, R2t, ScsiCommand, ScsiResponse,
    TaskAttr, TaskMgmtRequest, TaskMgmtResponse, MAX_DATA_SEGMENT_LEN,
};
use sluice_proto::seq::{Isid, Itt, Lun, SeqNum, Tsih, Ttt};
use sluice_proto::text::{encode_pairs, DigestKind, OperationalOffer};
use sluice_target::config::{
    Acl, Backend, Limits, LunDef, OperationalOffer as TargetOffer, TargetConfig, TargetDef,
};
use sluice_target::Target;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinHandle;

mod workers;
#[allow(unused_imports)] // used by the tests that run worker runtimes only
pub use workers::WorkerTarget;

pub const TARGET: &str = "iqn.2026-11.io.sluice:disk0";
pub const INITIATOR: &str = "iqn.2026-11.io.sluice.test:initiator";
/// Memory LUN 0: 4 MiB of 512-byte blocks.
pub const LUN_SIZE: u64 = 4 << 20;
pub const BLOCK: usize = 512;

/// "Must answer" waits: generous, so that a loaded machine does not make tests flaky.
pub const ANSWER: Duration = Duration::from_secs(10);
/// "Must NOT answer" waits: short, since they always run to the end.
pub const SILENCE: Duration = Duration::from_millis(500);

/// A target definition with one 4 MiB memory LUN and an open ACL.
pub fn target_def(iqn: &str) -> TargetDef {
    TargetDef {
        iqn: iqn.into(),
        alias: None,
        luns: vec![LunDef::new(
            0,
            Backend::Memory { size: LUN_SIZE },
            BLOCK as u32,
        )],
        acl: Acl::Open,
        chap: None,
    }
}

/// A configuration serving [`TARGET`] on 127.0.0.1:3260 (port 0 for `run`).
pub fn config() -> TargetConfig {
    TargetConfig {
        portals: vec!["127.0.0.1:3260".parse().unwrap()],
        portal_groups: Vec::new(),
        state_dir: None,
        targets: vec![target_def(TARGET)],
        discovery_auth: None,
        offer: TargetOffer::default(),
        limits: Limits::default(),
        keepalive: None,
        recovery: Default::default(),
        fault_hook: None,
        gateway: None,
        tcp_congestion: None,
    }
}

/// [`sluice_target::run`] with `config`, on this runtime: the first portal's address once it
/// listens, the sender that stops the target, and the server task.
pub async fn run_tcp(
    config: TargetConfig,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    JoinHandle<std::io::Result<()>>,
) {
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(sluice_target::run(
        config,
        move |a: &[SocketAddr]| {
            let _ = addr_tx.send(a[0]);
        },
        async move {
            let _ = stop_rx.await;
        },
    ));
    (addr_rx.await.unwrap(), stop_tx, server)
}

/// A target serving in-memory connections.
pub struct Harness {
    pub target: Arc<Target>,
}

impl Harness {
    pub fn new(config: TargetConfig) -> Self {
        Self {
            target: Arc::new(Target::new(config).expect("target configuration")),
        }
    }

    /// A new connection, served on its own task; the handle ends when the target closes it.
    pub fn connect(&self) -> (Peer, JoinHandle<()>) {
        self.connect_to("127.0.0.1:3260".parse().unwrap())
    }

    /// A new connection to the portal `local` (it arrives through that portal's group).
    pub fn connect_to(&self, local: SocketAddr) -> (Peer, JoinHandle<()>) {
        let (client, server) = tokio::io::duplex(1 << 20);
        let t = Arc::clone(&self.target);
        let peer: SocketAddr = "127.0.0.1:50000".parse().unwrap();
        let task = tokio::spawn(async move { t.serve_stream(server, peer, local).await });
        (Peer::new(client), task)
    }

    /// A connection logged in to [`TARGET`] with default parameters and the POWER ON unit
    /// attention already consumed.
    pub async fn logged_in(&self) -> (Peer, JoinHandle<()>) {
        self.logged_in_with(&LoginOpts::normal()).await
    }

    /// Like [`Harness::logged_in`] with other login options (e.g. another ISID, so that the
    /// login does not reinstate an existing session).
    pub async fn logged_in_with(&self, opts: &LoginOpts) -> (Peer, JoinHandle<()>) {
        let (mut p, task) = self.connect();
        p.login(opts).await.expect("login");
        p.clear_unit_attention().await;
        (p, task)
    }
}

/// How [`Peer::login`] logs in.
#[derive(Clone, Debug)]
pub struct LoginOpts {
    pub initiator: String,
    pub target: Option<String>,
    pub isid: Isid,
    /// 0 for a new session; a session's TSIH to add a connection to it.
    pub tsih: Tsih,
    pub cid: u16,
    pub chap: Option<(String, String)>,
    pub offer: OperationalOffer,
}

impl LoginOpts {
    pub fn normal() -> Self {
        Self {
            initiator: INITIATOR.into(),
            target: Some(TARGET.into()),
            isid: Isid([0x80, 0, 0, 0, 0, 1]),
            tsih: Tsih(0),
            cid: 0,
            chap: None,
            offer: OperationalOffer::default(),
        }
    }

    pub fn discovery() -> Self {
        Self {
            target: None,
            ..Self::normal()
        }
    }

    pub fn with_isid(mut self, n: u8) -> Self {
        self.isid = Isid([0x80, 0, 0, 0, 0x10, n]);
        self
    }

    /// A connection joining the session `tsih` with this CID (MC/S).
    pub fn joining(mut self, tsih: Tsih, cid: u16) -> Self {
        self.tsih = tsih;
        self.cid = cid;
        self
    }

    /// Offers this MaxConnections.
    pub fn with_max_connections(mut self, n: u16) -> Self {
        self.offer.max_connections = n;
        self
    }

    pub fn with_digests(mut self) -> Self {
        self.offer.header_digest = vec![DigestKind::Crc32c];
        self.offer.data_digest = vec![DigestKind::Crc32c];
        self
    }
}

/// Why [`Peer::recv`] returned no PDU.
#[derive(Debug)]
pub enum RecvError {
    Timeout,
    Closed,
    Io(std::io::Error),
    Frame(FrameError),
}

/// What a SCSI command ended with.
#[derive(Debug, Default)]
pub struct Completion {
    pub status: u8,
    pub overflow: bool,
    pub underflow: bool,
    pub residual: u32,
    pub data: Vec<u8>,
    pub sense: Vec<u8>,
}

impl Completion {
    /// (sense key, ASC, ASCQ) from fixed or descriptor format sense data.
    pub fn sense_code(&self) -> Option<(u8, u8, u8)> {
        let s = &self.sense;
        match s.first()? & 0x7f {
            0x70 | 0x71 => Some((s.get(2)? & 0x0f, *s.get(12)?, *s.get(13)?)),
            0x72 | 0x73 => Some((s.get(1)? & 0x0f, *s.get(2)?, *s.get(3)?)),
            _ => None,
        }
    }
}

/// A scripted initiator on one connection.
pub struct Peer {
    rd: Box<dyn AsyncRead + Send + Unpin>,
    wr: Box<dyn AsyncWrite + Send + Unpin>,
    buf: BytesMut,
    framer: Framer,
    pub digests: Digests,
    next_itt: u32,
    pub cmd_sn: SeqNum,
    pub exp_stat_sn: SeqNum,
    pub outcome: Option<InitiatorOutcome>,
}

impl Peer {
    pub fn new<S: AsyncRead + AsyncWrite + Send + 'static>(stream: S) -> Self {
        let (rd, wr) = tokio::io::split(stream);
        Self {
            rd: Box::new(rd),
            wr: Box::new(wr),
            buf: BytesMut::new(),
            framer: Framer::new(MAX_DATA_SEGMENT_LEN),
            digests: Digests::NONE,
            next_itt: 0x100,
            cmd_sn: SeqNum(1),
            exp_stat_sn: SeqNum(0),
            outcome: None,
        }
    }

    pub async fn tcp(addr: SocketAddr) -> Self {
        Self::new(tokio::net::TcpStream::connect(addr).await.expect("connect"))
    }

    pub fn itt(&mut self) -> Itt {
        self.next_itt += 1;
        Itt(self.next_itt)
    }

    /// CmdSN for a non-immediate command (advances).
    pub fn next_cmd_sn(&mut self) -> SeqNum {
        let sn = self.cmd_sn;
        self.cmd_sn = sn.next();
        sn
    }

    pub async fn send(&mut self, pdu: &Pdu) {
        let mut out = BytesMut::new();
        encode(pdu, self.digests, &mut out);
        self.send_raw(&out).await;
    }

    /// Writes bytes; a target that already closed is not an error here (tests check that
    /// separately).
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        let _ = self.wr.write_all(bytes).await;
        let _ = self.wr.flush().await;
    }

    /// Encodes a PDU with the connection's digests, for tests that corrupt it.
    pub fn encode(&self, pdu: &Pdu) -> BytesMut {
        let mut out = BytesMut::new();
        encode(pdu, self.digests, &mut out);
        out
    }

    /// The next PDU, within `wait`.
    pub async fn recv(&mut self, wait: Duration) -> Result<Pdu, RecvError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match self.framer.decode(&mut self.buf) {
                Ok(Some(pdu)) => {
                    self.track(&pdu);
                    return Ok(pdu);
                }
                Ok(None) => {}
                Err(e) => return Err(RecvError::Frame(e)),
            }
            self.buf.reserve(64 * 1024);
            match tokio::time::timeout_at(deadline, self.rd.read_buf(&mut self.buf)).await {
                Err(_) => return Err(RecvError::Timeout),
                Ok(Ok(0)) => return Err(RecvError::Closed),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(RecvError::Io(e)),
            }
        }
    }

    fn track(&mut self, pdu: &Pdu) {
        let stat_sn = match pdu {
            Pdu::ScsiResponse(p) => Some(p.stat_sn),
            Pdu::DataIn(p) if p.status_present => Some(p.stat_sn),
            Pdu::TaskMgmtResponse(p) => Some(p.stat_sn),
            Pdu::TextResponse(p) => Some(p.stat_sn),
            Pdu::LogoutResponse(p) => Some(p.stat_sn),
            Pdu::Reject(p) => Some(p.stat_sn),
            Pdu::AsyncMessage(p) => Some(p.stat_sn),
            Pdu::NopIn(p) if p.itt != Itt::RESERVED => Some(p.stat_sn),
            _ => None,
        };
        if let Some(sn) = stat_sn {
            self.exp_stat_sn = sn.next();
        }
    }

    /// The next PDU; panics on timeout or close.
    pub async fn expect(&mut self) -> Pdu {
        match self.recv(ANSWER).await {
            Ok(p) => p,
            Err(e) => panic!("expected a PDU, got {e:?}"),
        }
    }

    /// Asserts nothing arrives within [`SILENCE`] (and the connection stays open).
    pub async fn expect_silence(&mut self) {
        match self.recv(SILENCE).await {
            Err(RecvError::Timeout) => {}
            other => panic!("expected silence, got {other:?}"),
        }
    }

    /// Asserts the target closes the connection within `wait`, skipping PDUs sent before.
    /// Returns the PDUs skipped.
    pub async fn expect_closed_within(&mut self, wait: Duration) -> Vec<Pdu> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut skipped = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.recv(left).await {
                Ok(p) => skipped.push(p),
                Err(RecvError::Closed) | Err(RecvError::Io(_)) => return skipped,
                Err(e) => panic!("expected the connection to close, got {e:?} after {skipped:?}"),
            }
        }
    }

    pub async fn expect_closed(&mut self) -> Vec<Pdu> {
        self.expect_closed_within(ANSWER).await
    }

    /// Logs in with the initiator state machine; returns the target's refusal on failure.
    pub async fn login(&mut self, opts: &LoginOpts) -> Result<InitiatorOutcome, LoginResponse> {
        let cfg = InitiatorConfig {
            initiator_name: opts.initiator.clone(),
            initiator_alias: None,
            target_name: opts.target.clone(),
            isid: opts.isid,
            tsih: opts.tsih,
            cid: opts.cid,
            chap: opts.chap.as_ref().map(|(user, secret)| InitiatorChap {
                credential: ChapCredential {
                    user: user.clone(),
                    secret: secret.as_bytes().to_vec(),
                },
                algorithms: vec![sluice_proto::chap::ChapAlgorithm::Md5],
                mutual: None,
            }),
            offer: opts.offer.clone(),
        };
        let itt = self.itt();
        let mut login = InitiatorLogin::new(cfg, itt, self.cmd_sn, self.exp_stat_sn);
        let mut req = login.start().expect("login start");
        loop {
            self.send(&Pdu::LoginRequest(req)).await;
            let rsp = match self.expect().await {
                Pdu::LoginResponse(r) => r,
                other => panic!("expected a Login Response, got {other:?}"),
            };
            match login.handle_response(&rsp, &mut |b: &mut [u8]| b.fill(7)) {
                InitiatorStep::Send(next) => req = next,
                InitiatorStep::Complete(outcome) => {
                    self.exp_stat_sn = outcome.exp_stat_sn;
                    self.cmd_sn = outcome.exp_cmd_sn;
                    self.digests = Digests::negotiated(&outcome.params);
                    self.framer.set_digests(self.digests);
                    self.outcome = Some((*outcome).clone());
                    return Ok(*outcome);
                }
                InitiatorStep::Failed(_) if rsp.status.class != 0 => return Err(rsp),
                other => panic!("login went wrong: {other:?} after {rsp:?}"),
            }
        }
    }

    /// Sends one hand-built Login Request (CSG=1, NSG=3, T=1) and returns the response.
    pub async fn raw_login(&mut self, pairs: &[(&str, &str)], version_min: u8) -> LoginResponse {
        let req = LoginRequest {
            transit: true,
            cont: false,
            csg: 1,
            nsg: 3,
            version_max: version_min,
            version_min,
            isid: Isid([0x80, 0, 0, 0, 0, 9]),
            tsih: Tsih(0),
            itt: self.itt(),
            cid: 0,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            data: encode_pairs(pairs),
        };
        self.send(&Pdu::LoginRequest(req)).await;
        match self.expect().await {
            Pdu::LoginResponse(r) => r,
            other => panic!("expected a Login Response, got {other:?}"),
        }
    }

    /// Sends TEST UNIT READY until GOOD (the first command of a nexus reports POWER ON).
    pub async fn clear_unit_attention(&mut self) {
        for _ in 0..4 {
            if self.command(&tur(), 0).await.status == 0 {
                return;
            }
        }
        panic!("unit attention never cleared");
    }

    /// A SCSI command PDU with the next ITT and CmdSN.
    pub fn scsi_command(&mut self, cdb: &[u8], read: bool, write: bool, edtl: u32) -> ScsiCommand {
        let mut c = [0u8; 16];
        c[..cdb.len()].copy_from_slice(cdb);
        ScsiCommand {
            immediate: false,
            final_bit: true,
            read,
            write,
            attr: TaskAttr::Simple,
            lun: Lun(0),
            itt: self.itt(),
            expected_data_transfer_length: edtl,
            cmd_sn: self.next_cmd_sn(),
            exp_stat_sn: self.exp_stat_sn,
            cdb: Cdb::new(&c),
            bidi_read_length: None,
            data: Bytes::new(),
        }
    }

    /// Sends `count` READ(10)s of `blocks` blocks each, back to back from `first_lba`, in a
    /// single write, and checks that every one completes GOOD with all its data.
    pub async fn read_batch(&mut self, first_lba: u32, count: u32, blocks: u16) {
        let len = u32::from(blocks) * BLOCK as u32;
        let cmds: Vec<ScsiCommand> = (0..count)
            .map(|i| {
                let lba = first_lba + i * u32::from(blocks);
                self.scsi_command(&read10(lba, blocks), true, false, len)
            })
            .collect();
        for itt in self.send_batch(cmds).await {
            let c = self.completion(itt).await;
            assert_eq!(c.status, 0, "{c:?}");
            assert_eq!(c.data.len(), len as usize);
        }
    }

    /// Like [`Peer::read_batch`] with WRITE(10)s, each carrying its data as immediate data.
    pub async fn write_batch(&mut self, first_lba: u32, count: u32, blocks: u16) {
        let data = Bytes::from(vec![0x5a; usize::from(blocks) * BLOCK]);
        let cmds: Vec<ScsiCommand> = (0..count)
            .map(|i| {
                let lba = first_lba + i * u32::from(blocks);
                let mut cmd =
                    self.scsi_command(&write10(lba, blocks), false, true, data.len() as u32);
                cmd.data = data.clone();
                cmd
            })
            .collect();
        for itt in self.send_batch(cmds).await {
            let c = self.completion(itt).await;
            assert_eq!(c.status, 0, "{c:?}");
        }
    }

    /// Sends these commands in one write; returns their ITTs in order.
    async fn send_batch(&mut self, cmds: Vec<ScsiCommand>) -> Vec<Itt> {
        let mut out = BytesMut::new();
        let itts = cmds.iter().map(|c| c.itt).collect();
        for cmd in cmds {
            encode(&Pdu::ScsiCommand(cmd), self.digests, &mut out);
        }
        self.send_raw(&out).await;
        itts
    }

    /// Runs a command without data out (reads and the like) and collects its completion.
    pub async fn command(&mut self, cdb: &[u8], edtl: u32) -> Completion {
        let cmd = self.scsi_command(cdb, edtl > 0, false, edtl);
        let itt = cmd.itt;
        self.send(&Pdu::ScsiCommand(cmd)).await;
        self.completion(itt).await
    }

    /// READ(10) of `blocks` blocks at `lba` with the matching EDTL; asserts GOOD.
    pub async fn read(&mut self, lba: u32, blocks: u16) -> Vec<u8> {
        let c = self
            .command(&read10(lba, blocks), u32::from(blocks) * BLOCK as u32)
            .await;
        assert_eq!(c.status, 0, "READ failed: {c:?}");
        c.data
    }

    /// WRITE(10) with immediate data (InitialR2T=No, ImmediateData=Yes, small writes).
    pub async fn write_immediate(&mut self, lba: u32, data: &[u8]) -> Completion {
        let blocks = (data.len() / BLOCK) as u16;
        let mut cmd = self.scsi_command(&write10(lba, blocks), false, true, data.len() as u32);
        cmd.data = Bytes::copy_from_slice(data);
        let itt = cmd.itt;
        self.send(&Pdu::ScsiCommand(cmd)).await;
        self.completion(itt).await
    }

    /// Collects Data-In and status for `itt`; panics on anything else.
    pub async fn completion(&mut self, itt: Itt) -> Completion {
        let mut c = Completion::default();
        loop {
            match self.expect().await {
                Pdu::DataIn(d) if d.itt == itt => {
                    place(&mut c.data, &d);
                    if d.status_present {
                        c.status = d.status.code();
                        c.overflow = d.overflow;
                        c.underflow = d.underflow;
                        c.residual = d.residual;
                        return c;
                    }
                }
                Pdu::ScsiResponse(r) if r.itt == itt => {
                    fill_from_response(&mut c, &r);
                    return c;
                }
                other => panic!("expected Data-In or status for {itt:?}, got {other:?}"),
            }
        }
    }

    /// The next R2T; panics on anything else.
    pub async fn expect_r2t(&mut self) -> R2t {
        match self.expect().await {
            Pdu::R2t(r) => r,
            other => panic!("expected an R2T, got {other:?}"),
        }
    }

    pub async fn nop_ping(&mut self, data: &[u8]) -> Itt {
        let itt = self.itt();
        let nop = NopOut {
            immediate: true,
            lun: Lun(0),
            itt,
            ttt: Ttt::RESERVED,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            data: Bytes::copy_from_slice(data),
        };
        self.send(&Pdu::NopOut(nop)).await;
        itt
    }

    /// A NOP-Out ping that must be answered with the same ITT and data.
    pub async fn assert_alive(&mut self) {
        let itt = self.nop_ping(b"alive?").await;
        loop {
            match self.expect().await {
                Pdu::NopIn(n) if n.itt == itt => {
                    assert_eq!(&n.data[..], b"alive?");
                    return;
                }
                // A keepalive ping may come first.
                Pdu::NopIn(n) if n.itt == Itt::RESERVED => {}
                other => panic!("expected the NOP-In answer, got {other:?}"),
            }
        }
    }

    pub fn data_out(&self, r2t: &R2t, data_sn: u32, offset: u32, data: &[u8], last: bool) -> Pdu {
        Pdu::DataOut(DataOut {
            final_bit: last,
            lun: r2t.lun,
            itt: r2t.itt,
            ttt: r2t.ttt,
            exp_stat_sn: self.exp_stat_sn,
            data_sn,
            buffer_offset: offset,
            data: Bytes::copy_from_slice(data),
        })
    }

    /// A task management request (immediate, current CmdSN).
    pub fn tmf(
        &mut self,
        function: TmfFunction,
        referenced: Itt,
        ref_cmd_sn: SeqNum,
    ) -> TaskMgmtRequest {
        TaskMgmtRequest {
            immediate: true,
            function,
            lun: Lun(0),
            itt: self.itt(),
            referenced_task_tag: referenced,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            ref_cmd_sn,
            exp_data_sn: 0,
        }
    }

    pub async fn expect_tmf_response(&mut self) -> TaskMgmtResponse {
        match self.expect().await {
            Pdu::TaskMgmtResponse(r) => r,
            other => panic!("expected a TMF response, got {other:?}"),
        }
    }
}

fn place(buf: &mut Vec<u8>, d: &DataIn) {
    let off = d.buffer_offset as usize;
    if buf.len() < off + d.data.len() {
        buf.resize(off + d.data.len(), 0);
    }
    buf[off..off + d.data.len()].copy_from_slice(&d.data);
}

fn fill_from_response(c: &mut Completion, r: &ScsiResponse) {
    c.status = r.status.code();
    c.overflow = r.overflow;
    c.underflow = r.underflow;
    c.residual = r.residual;
    if r.data.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([r.data[0], r.data[1]]));
        c.sense = r.data[2..(2 + len).min(r.data.len())].to_vec();
    }
}

pub fn tur() -> [u8; 6] {
    [0; 6]
}

pub fn read10(lba: u32, blocks: u16) -> [u8; 10] {
    let l = lba.to_be_bytes();
    let n = blocks.to_be_bytes();
    [0x28, 0, l[0], l[1], l[2], l[3], 0, n[0], n[1], 0]
}

pub fn write10(lba: u32, blocks: u16) -> [u8; 10] {
    let l = lba.to_be_bytes();
    let n = blocks.to_be_bytes();
    [0x2a, 0, l[0], l[1], l[2], l[3], 0, n[0], n[1], 0]
}

/// Recognisable block contents.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Resident set size of this process in KiB, from /proc/self/status.
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}
