//! What a running target reports about itself ([`Target::status`](crate::Target::status)):
//! its portals, targets, LUs and sessions with their counters, as plain values. The CLI turns
//! them into `sluice ctl` listings, JSON and Prometheus metrics; docs/operations.md describes
//! each counter.

use std::net::SocketAddr;
use std::time::Duration;

use sluice_proto::params::SessionParams;
use sluice_proto::pdu::codes::ScsiStatus;
use sluice_proto::target::SessionStats;

use crate::config::{Acl, Backend, LuOptions};

/// Upper bounds of the command latency histogram's buckets, in nanoseconds: 10 µs to 10 s in
/// 1-2.5-5 steps (one more bucket counts what is slower).
pub const LATENCY_BOUNDS_NS: [u64; 19] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// What kind of command, by its operation code.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Op {
    /// READ (6), (10), (12), (16).
    Read,
    /// WRITE (6), (10), (12), (16) and WRITE AND VERIFY (10), (12), (16).
    Write,
    /// Everything else (INQUIRY, TEST UNIT READY, SYNCHRONIZE CACHE, ...).
    Other,
}

impl Op {
    /// Every kind, in index order.
    pub const ALL: [Op; 3] = [Op::Read, Op::Write, Op::Other];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Other => "other",
        }
    }

    /// The kind of a CDB (SBC-3 operation codes).
    #[inline]
    pub fn of_cdb(cdb: &[u8]) -> Op {
        match cdb.first() {
            Some(0x08 | 0x28 | 0xA8 | 0x88) => Op::Read,
            Some(0x0A | 0x2A | 0xAA | 0x8A | 0x2E | 0xAE | 0x8E) => Op::Write,
            _ => Op::Other,
        }
    }
}

/// A command's SCSI status, grouped (SAM-5 5.3).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum StatusKind {
    /// GOOD (and CONDITION MET).
    Good,
    /// CHECK CONDITION: the sense key says more.
    CheckCondition,
    /// BUSY.
    Busy,
    /// RESERVATION CONFLICT.
    ReservationConflict,
    /// TASK SET FULL.
    TaskSetFull,
    /// TASK ABORTED.
    TaskAborted,
    /// ACA ACTIVE and codes without a name.
    Other,
}

impl StatusKind {
    /// Every kind, in index order.
    pub const ALL: [StatusKind; 7] = [
        StatusKind::Good,
        StatusKind::CheckCondition,
        StatusKind::Busy,
        StatusKind::ReservationConflict,
        StatusKind::TaskSetFull,
        StatusKind::TaskAborted,
        StatusKind::Other,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            StatusKind::Good => "good",
            StatusKind::CheckCondition => "check_condition",
            StatusKind::Busy => "busy",
            StatusKind::ReservationConflict => "reservation_conflict",
            StatusKind::TaskSetFull => "task_set_full",
            StatusKind::TaskAborted => "task_aborted",
            StatusKind::Other => "other",
        }
    }

    /// The kind of a status.
    #[inline]
    pub fn of(status: ScsiStatus) -> StatusKind {
        match status {
            ScsiStatus::Good | ScsiStatus::ConditionMet => StatusKind::Good,
            ScsiStatus::CheckCondition => StatusKind::CheckCondition,
            ScsiStatus::Busy => StatusKind::Busy,
            ScsiStatus::ReservationConflict => StatusKind::ReservationConflict,
            ScsiStatus::TaskSetFull => StatusKind::TaskSetFull,
            ScsiStatus::TaskAborted => StatusKind::TaskAborted,
            _ => StatusKind::Other,
        }
    }
}

/// Sense key names (SPC-4 table 28) as label values, by key.
pub const SENSE_KEYS: [&str; 16] = [
    "no_sense",
    "recovered_error",
    "not_ready",
    "medium_error",
    "hardware_error",
    "illegal_request",
    "unit_attention",
    "data_protect",
    "blank_check",
    "vendor_specific",
    "copy_aborted",
    "aborted_command",
    "reserved",
    "volume_overflow",
    "miscompare",
    "completed",
];

/// SNACK types (RFC 7143 section 11.16.1) as label values, by type.
pub const SNACK_TYPES: [&str; 4] = ["data_r2t", "status", "data_ack", "r_data"];

/// Task management functions 1 to 8 (RFC 7143 section 11.5.1) as label values.
pub const TASK_MANAGEMENT_FUNCTIONS: [&str; 8] = [
    "abort_task",
    "abort_task_set",
    "clear_aca",
    "clear_task_set",
    "logical_unit_reset",
    "target_warm_reset",
    "target_cold_reset",
    "task_reassign",
];

/// Why a login was refused or lost.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum LoginFailure {
    /// CHAP failed (0201h).
    Authentication,
    /// The ACL refused the initiator (0202h).
    Authorization,
    /// No such target (0203h, 0204h).
    NotFound,
    /// The session already has MaxConnections (0206h).
    TooManyConnections,
    /// The session named cannot be joined (0208h to 020Ah).
    Session,
    /// Other initiator errors: bad keys or stages, unsupported version (02xxh).
    InitiatorError,
    /// Target errors: out of resources, sessions at the limit (03xxh).
    TargetError,
    /// The login did not finish within the login timeout.
    Timeout,
    /// The connection closed, or sent something other than a Login Request, mid-login.
    Aborted,
}

impl LoginFailure {
    /// Every kind, in index order.
    pub const ALL: [LoginFailure; 9] = [
        LoginFailure::Authentication,
        LoginFailure::Authorization,
        LoginFailure::NotFound,
        LoginFailure::TooManyConnections,
        LoginFailure::Session,
        LoginFailure::InitiatorError,
        LoginFailure::TargetError,
        LoginFailure::Timeout,
        LoginFailure::Aborted,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            LoginFailure::Authentication => "authentication",
            LoginFailure::Authorization => "authorization",
            LoginFailure::NotFound => "not_found",
            LoginFailure::TooManyConnections => "too_many_connections",
            LoginFailure::Session => "session",
            LoginFailure::InitiatorError => "initiator_error",
            LoginFailure::TargetError => "target_error",
            LoginFailure::Timeout => "timeout",
            LoginFailure::Aborted => "aborted",
        }
    }
}

/// A latency histogram's counts.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct HistogramCounts {
    /// Commands per bucket (not cumulative): `buckets[i]` took at most
    /// `LATENCY_BOUNDS_NS[i]` and more than the bound before; the last, more than every bound.
    pub buckets: [u64; LATENCY_BOUNDS_NS.len() + 1],
    /// Sum of the latencies, in nanoseconds.
    pub sum_ns: u64,
}

impl HistogramCounts {
    /// Commands counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    fn add(&mut self, other: &Self) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.sum_ns += other.sum_ns;
    }
}

/// Commands a logical unit ran: counted when the SCSI layer finished them.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct LuCounts {
    /// Commands by [`Op`].
    pub commands: [u64; Op::ALL.len()],
    /// Latency from the SCSI Command PDU's arrival to the SCSI layer's result, by [`Op`].
    pub latency: [HistogramCounts; Op::ALL.len()],
    /// Data-In bytes READ commands returned (to the initiator).
    pub read_bytes: u64,
    /// Data-Out bytes WRITE commands handed to the SCSI layer (from the initiator).
    pub write_bytes: u64,
    /// Commands by [`StatusKind`].
    pub status: [u64; StatusKind::ALL.len()],
    /// CHECK CONDITIONs by sense key ([`SENSE_KEYS`]).
    pub sense_keys: [u64; 16],
}

impl LuCounts {
    /// Adds `other` to these counts.
    pub fn add(&mut self, other: &Self) {
        for i in 0..Op::ALL.len() {
            self.commands[i] += other.commands[i];
            self.latency[i].add(&other.latency[i]);
        }
        self.read_bytes += other.read_bytes;
        self.write_bytes += other.write_bytes;
        for (a, b) in self.status.iter_mut().zip(&other.status) {
            *a += b;
        }
        for (a, b) in self.sense_keys.iter_mut().zip(&other.sense_keys) {
            *a += b;
        }
    }
}

/// What one connection received and sent in full feature phase.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct ConnCounts {
    /// PDUs received.
    pub pdus_received: u64,
    /// PDUs sent.
    pub pdus_sent: u64,
    /// SCSI Command PDUs received, by [`Op`].
    pub commands: [u64; Op::ALL.len()],
    /// Write data received (immediate and Data-Out), bytes.
    pub data_out_bytes: u64,
    /// Data-In sent, bytes.
    pub data_in_bytes: u64,
    /// R2Ts sent.
    pub r2ts: u64,
    /// Statuses sent (SCSI Responses and Data-In with status), by [`StatusKind`].
    pub responses: [u64; StatusKind::ALL.len()],
    /// Reject PDUs sent.
    pub rejects_sent: u64,
    /// PDUs whose header digest failed.
    pub header_digest_errors: u64,
    /// PDUs whose data digest failed.
    pub data_digest_errors: u64,
    /// Other PDUs the framer refused (unknown opcode, malformed, too long).
    pub framing_errors: u64,
    /// SNACK Requests received, by type ([`SNACK_TYPES`]).
    pub snacks: [u64; 4],
    /// Task management requests received, by function ([`TASK_MANAGEMENT_FUNCTIONS`]).
    pub task_management: [u64; 8],
    /// NOP-Outs received.
    pub nop_outs: u64,
}

/// Logins and reinstatements.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct LoginCounts {
    /// Logins that reached full feature phase.
    pub ok: u64,
    /// Logins that did not, by [`LoginFailure`].
    pub failed: [u64; LoginFailure::ALL.len()],
    /// Logins that replaced a session of the same initiator and ISID (RFC 7143 section
    /// 6.3.5).
    pub session_reinstatements: u64,
    /// Logins that replaced a connection with the same CID (RFC 7143 section 6.3.4).
    pub connection_reinstatements: u64,
}

/// A running target process.
#[derive(Clone, Debug)]
pub struct Status {
    /// The addresses listened on, as bound.
    pub portals: Vec<SocketAddr>,
    /// Every target.
    pub targets: Vec<TargetStatus>,
    /// Every session, normal and discovery.
    pub sessions: Vec<SessionStatus>,
    /// Discovery logins.
    pub discovery_logins: LoginCounts,
    /// Logins naming a target that does not exist (no per-name series: the names come from
    /// the wire).
    pub unknown_target_logins: LoginCounts,
    /// TCP connections open (logged in or not).
    pub connections: usize,
    /// What the iSER listeners' connections did.
    pub iser: IserStatus,
}

/// The iSER datamovers' totals (`sluice target --iser`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IserStatus {
    /// Connections that switched to RDMA mode.
    pub rdma_connections: u64,
    /// Connections that logged in without RDMAExtensions and stayed iSCSI over TCP.
    pub tcp_connections: u64,
    /// Connections ended by an iSER or RDMA error.
    pub errors: u64,
    /// Sends posted (control-type PDUs).
    pub sends: u64,
    /// Sends received.
    pub sends_received: u64,
    /// RDMA Writes posted, each in place of a Data-In PDU.
    pub rdma_writes: u64,
    /// Bytes they carried.
    pub rdma_write_bytes: u64,
    /// RDMA Reads posted, each in place of an R2T and its Data-Out PDUs.
    pub rdma_reads: u64,
    /// Bytes they fetched.
    pub rdma_read_bytes: u64,
    /// Unsolicited Data-Out PDUs received, each in a Send (InitialR2T=No).
    pub unsolicited_data_outs: u64,
    /// Write data received in Sends: immediate data and unsolicited Data-Out.
    pub unsolicited_bytes: u64,
}

/// One target.
#[derive(Clone, Debug)]
pub struct TargetStatus {
    /// Its name.
    pub iqn: String,
    /// Its alias.
    pub alias: Option<String>,
    /// Who may log in.
    pub acl: Acl,
    /// `None`, or the CHAP user name initiators log in with (secrets are never reported).
    pub chap_user: Option<String>,
    /// Whether mutual CHAP is configured.
    pub mutual_chap: bool,
    /// Its logical units.
    pub luns: Vec<LunStatus>,
    /// Logins to it.
    pub logins: LoginCounts,
}

/// One logical unit.
#[derive(Clone, Debug)]
pub struct LunStatus {
    /// LUN number.
    pub number: u16,
    /// Its backend, as configured.
    pub backend: Backend,
    /// Logical block size.
    pub block_size: u32,
    /// Blocks it has now (what READ CAPACITY reports).
    pub blocks: u64,
    /// Writes refused.
    pub read_only: bool,
    /// Removable medium.
    pub removable: bool,
    /// Unit serial number (VPD 80h).
    pub serial: String,
    /// Thin provisioning, its soft threshold, SANITIZE.
    pub options: LuOptions,
    /// Bytes of backing store allocated to it, when the backend can tell (thin LUs: memory
    /// chunks held, a file's allocated blocks).
    pub allocated_bytes: Option<u64>,
    /// Commands run on it since it was added.
    pub counts: LuCounts,
}

/// One session.
#[derive(Clone, Debug)]
pub struct SessionStatus {
    /// An id unique for the life of the process (never reused, unlike the TSIH).
    pub id: u64,
    /// Target Session Identifying Handle.
    pub tsih: u16,
    /// Initiator Session ID, 12 hex digits.
    pub isid: String,
    /// InitiatorName.
    pub initiator: String,
    /// The target's name; `None` for a discovery session.
    pub target: Option<String>,
    /// How long it has existed.
    pub age: Duration,
    /// What the leading login negotiated.
    pub params: SessionParams,
    /// Commands in its task table (delivered and not yet answered, or kept for recovery).
    pub tasks: usize,
    /// Slots of the CmdSN window held by commands in progress (its queue depth in use).
    pub window_slots_held: u32,
    /// The queue depth it was given (CmdSN window).
    pub queue_depth: u32,
    /// Recovery and task management counters.
    pub recovery: SessionStats,
    /// Its connections.
    pub connections: Vec<ConnectionStatus>,
}

/// One connection of a session.
#[derive(Clone, Debug)]
pub struct ConnectionStatus {
    /// Connection ID.
    pub cid: u16,
    /// The initiator's address.
    pub peer: SocketAddr,
    /// The portal it arrived on.
    pub local: SocketAddr,
    /// HeaderDigest=CRC32C.
    pub header_digest: bool,
    /// DataDigest=CRC32C.
    pub data_digest: bool,
    /// Largest data segment the initiator receives.
    pub initiator_max_recv_data_segment_length: u32,
    /// Largest data segment the target receives.
    pub target_max_recv_data_segment_length: u32,
    /// Its PDU counters.
    pub counts: ConnCounts,
}
