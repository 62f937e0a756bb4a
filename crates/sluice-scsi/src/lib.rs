//! SCSI (SPC-4 / SBC-3) command emulation and CDB building, transport-agnostic.
//!
//! This crate knows nothing of iSCSI. A transport driver hands it CDBs and data buffers and
//! gets back a SCSI status and, for CHECK CONDITION, sense data.
//!
//! # Target side: the contract with the transport driver
//!
//! 1. Build one [`LogicalUnit`] per exported device from a [`LuConfig`], wrap each in an
//!    [`Arc`](std::sync::Arc), and make a [`ScsiTarget`] from the LUN map.
//! 2. Give every I_T nexus (for iSCSI: every session) a [`NexusId`] that is never reused
//!    while the target lives, and tell the target who is at its ends with
//!    [`ScsiTarget::nexus_established`]: the initiator port as a SCSI [`TransportId`] and
//!    the relative identifier of the target port (one of the [`TargetPorts`] the target was
//!    built with, [`ScsiTarget::with_ports`]). Persistent reservations remember I_T nexuses by
//!    these, and VPD page 83h and ALUA answer per target port.
//! 3. For each SCSI command:
//!    * call [`ScsiTarget::transfer`] with the raw 8-byte LUN field and the CDB to learn the
//!      direction and size the CDB implies. Use it for residual computation and for sizing;
//!      it is computed from untrusted input, so bound any buffer by your own limits (EDTL,
//!      MaxBurstLength) as well;
//!    * collect the Data-Out (only as many bytes as the initiator actually sent);
//!    * call [`ScsiTarget::execute`]. It clears `data_in` and appends the Data-In bytes,
//!      already truncated to the CDB's allocation length. Send at most EDTL of them and
//!      compute the residual from what the CDB asked for versus EDTL;
//!    * before sending the status, abort the tasks of every I_T nexus in
//!      [`CommandResult::abort_nexuses`] on the same LUN, this command's own task excepted
//!      (PREEMPT AND ABORT, SPC-4 5.12.11.2.5; the Control mode page's TAS bit is 0, so they
//!      end without a status);
//!    * send [`CommandResult::status`] and, if present, [`CommandResult::sense_bytes`] as
//!      the sense data (the format follows the Control mode page's D_SENSE bit: fixed 70h by
//!      default, descriptor 72h when D_SENSE=1).
//!
//!    `execute` is synchronous and may block inside the backend (file I/O): if
//!    [`BlockDevice::blocks`](sluice_storage::BlockDevice::blocks) is true for any LU, run
//!    it off the network reactor. It never panics, whatever the CDB and data.
//!
//!    A transport that knows the Data-Out length the initiator announced, or can abort a
//!    running command, calls [`ScsiTarget::execute_with`] instead ([`Delivery`]). Commands
//!    for which [`runs_long`] is true (EXTENDED COPY, WRITE SAME, UNMAP, SANITIZE) may run
//!    for as long as their data takes: run them where they block nothing else, with an
//!    [`AbortSignal`] raised when the task is aborted.
//!
//!    Writes whose Data-Out is shorter than the CDB's transfer length write only the whole
//!    blocks that arrived (the transport reports the residual); extra Data-Out is ignored.
//! 4. When a session ends (logout, connection loss, reinstatement), call
//!    [`ScsiTarget::nexus_gone`]: its PREVENT state, RESERVE reservation and pending unit
//!    attentions go (persistent reservations stay: they belong to the I_T nexus, not the
//!    session).
//! 5. For LOGICAL UNIT RESET, TARGET WARM RESET and TARGET COLD RESET task-management
//!    functions, call [`ScsiTarget::reset`] after aborting the affected tasks, then answer
//!    "Function complete".
//!
//! Unit attentions are kept per (nexus, LU). A nexus's first command to an LU finds
//! POWER ON, RESET, OR BUS DEVICE RESET OCCURRED (29h/00h) pending; INQUIRY, REPORT LUNS
//! and REQUEST SENSE are never blocked by a unit attention.
//!
//! A removable LU ([`LuConfig::removable`]) starts with its medium loaded; START STOP UNIT
//! ejects and loads it, PREVENT ALLOW MEDIUM REMOVAL (held per nexus, dropped by
//! `nexus_gone` and every reset) blocks both, and while it is ejected medium-access commands
//! fail with NOT READY / MEDIUM NOT PRESENT. ORWRITE, COMPARE AND WRITE and WRITE ATOMIC run
//! under the LU's exclusive I/O lock, so they are atomic with respect to every other block
//! command.
//!
//! [`LuOptions`] chooses what a LU offers beyond a fully provisioned disk: thin provisioning
//! (UNMAP, WRITE SAME with UNMAP, GET LBA STATUS that tells mapped from deallocated) and
//! SANITIZE. COMPARE AND WRITE, WRITE SAME, GET LBA STATUS and EXTENDED COPY (between LUs of
//! one [`ScsiTarget`]) are always there, WRITE ATOMIC where the device writes atomically.
//!
//! Persistent reservations (PERSISTENT RESERVE IN/OUT, every type, SPEC_I_PT, ALL_TG_PT,
//! APTPL through a [`sluice_storage::StateStore`] given to
//! [`LogicalUnit::attach_reservation_store`]) and RESERVE/RELEASE(6)/(10) gate every command
//! as SPC-4, SBC-3 and SBC-4 tabulate, EXTENDED COPY's reads and writes of other LUs
//! included; target port groups answer REPORT and SET TARGET PORT GROUPS and hold commands to
//! their access state (SPC-4 5.15).
//!
//! Commands this crate does not implement (FORMAT UNIT, WRITE LONG, …), and those a LU's
//! configuration leaves out, get ILLEGAL REQUEST / INVALID COMMAND OPERATION CODE, which
//! initiators and conformance suites read as "not implemented". [`ScsiTarget::transfer`]
//! answers [`Transfer::None`] for them; the driver must still accept and discard any
//! Data-Out the initiator sends.
//!
//! # Initiator side
//!
//! [`cdb`] builds CDBs and [`sense`] decodes sense data in either format.
//!
//! # Module map
//!
//! `opcodes` holds the one table of supported commands (dispatch, reserved-bit checks and
//! REPORT SUPPORTED OPERATION CODES all read it); `access` the one table of what each command
//! may do under reservations and ALUA states; `lu` the logical unit and dispatcher;
//! `inquiry`, `vpd`, `vpd_sbc`, `capacity`, `rw`, `verify`, `mode`, `report_luns`, `misc`,
//! `provisioning`, `write_same`, `compare_and_write`, `write_atomic`, `xcopy`,
//! `copy_results` and `sanitize` the commands; [`unmap_list`] and [`copy_list`] the parameter
//! lists of UNMAP and EXTENDED COPY; `pr` persistent and RESERVE/RELEASE reservations
//! (`pr/model.rs` the state, `pr/prout.rs` the service actions, `pr/params.rs` the parameter
//! lists, `pr/persist.rs` the APTPL file); `alua` target port group states, REPORT/SET TARGET
//! PORT GROUPS; `ports` target ports and I_T nexus identities; `transport_id` SCSI
//! TransportIDs; `unit_attention` the per-nexus queues; `field` the panic-free CDB readers.
#![forbid(unsafe_code)]

pub mod cdb;
pub mod copy_list;
pub mod sense;
pub mod unmap_list;

pub use abort::AbortSignal;
pub use data_out::DataOut;
pub use options::{LuOptions, SanitizeOptions};
pub use transfer::runs_long;

mod abort;
mod access;
mod alua;
mod capacity;
mod compare_and_write;
mod copy_results;
mod data_out;
mod designator;
mod field;
mod inquiry;
mod lu;
mod misc;
mod mode;
mod opcodes;
mod options;
mod plan;
#[cfg(test)]
mod plan_tests;
mod ports;
mod pr;
mod provisioning;
mod report_luns;
mod rw;
mod sanitize;
mod target;
mod threshold;
mod transfer;
mod transport_id;
mod unit_attention;
mod verify;
mod vpd;
mod vpd_sbc;
mod write_atomic;
mod write_same;
mod xcopy;

#[cfg(test)]
mod testutil;

pub use alua::AluaController;
pub use lu::{LogicalUnit, LuConfig};
pub use plan::{IoPlan, Planned, PlannedIo};
pub use ports::{AccessState, NexusIdentity, PortGroup, TargetPort, TargetPorts};
pub use pr::{PrType, RestoreError, MAX_REGISTRATIONS};
pub use transport_id::{TransportId, TransportIdError, MAX_TRANSPORT_ID_BYTES};

/// Parsers of the parameter lists this crate reads, public for fuzzing; each bounds every
/// length and count it reads by the list it is given.
pub mod parameter_lists {
    pub use crate::alua::{parse_set_target_port_groups, StpgDescriptor, MAX_STPG_LIST_BYTES};
    pub use crate::pr::events::{EventLog, PrEvent, MAX_EVENT_LINES, MAX_LOGGED_COMMANDS};
    pub use crate::pr::params::{
        parse_prout_parameters, ProutParameters, ServiceAction, MAX_PROUT_LIST_BYTES,
    };
    pub use crate::pr::persist::{
        decode as decode_reservation_state, decode_shared as decode_shared_reservation_state,
        encode as encode_reservation_state, encode_shared as encode_shared_reservation_state,
        DecodeError, SharedState,
    };
    pub use crate::pr::{Holder, PrState, Registration, Reservation};
}
pub use sense::{asc_description, SenseData, SenseFormat, SenseKey, SenseParseError};
pub use target::{decode_lun, encode_lun, LunAddress, ScsiTarget, MAX_TRANSFER_BYTES};

/// Opaque identifier of an I_T nexus, assigned by the transport (one per iSCSI session).
pub type NexusId = u64;

/// SCSI status codes (SAM-5 5.3).
pub mod status {
    /// GOOD.
    pub const GOOD: u8 = 0x00;
    /// CHECK CONDITION: sense data describes the error.
    pub const CHECK_CONDITION: u8 = 0x02;
    /// CONDITION MET.
    pub const CONDITION_MET: u8 = 0x04;
    /// BUSY.
    pub const BUSY: u8 = 0x08;
    /// RESERVATION CONFLICT.
    pub const RESERVATION_CONFLICT: u8 = 0x18;
    /// TASK SET FULL.
    pub const TASK_SET_FULL: u8 = 0x28;
    /// ACA ACTIVE.
    pub const ACA_ACTIVE: u8 = 0x30;
    /// TASK ABORTED.
    pub const TASK_ABORTED: u8 = 0x40;
}

/// What a command moves, judged from the CDB alone.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Transfer {
    /// No data phase (or a command this crate does not implement).
    None,
    /// The initiator sends this many bytes (Data-Out).
    ToDevice(u64),
    /// The target returns at most this many bytes (Data-In): the allocation length, or
    /// blocks × block size for reads.
    FromDevice(u64),
}

/// A command's Data-Out and what else the transport knows of it, for
/// [`ScsiTarget::execute_with`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Delivery<'a> {
    /// The Data-Out received.
    pub data_out: DataOut<'a>,
    /// The Data-Out length the initiator announced, when the transport knows it (iSCSI: the
    /// Expected Data Transfer Length of a write). `data_out` then holds at most what
    /// [`ScsiTarget::transfer`] asked for; a longer announced length makes COMPARE AND WRITE
    /// and WRITE SAME fail, as SBC-4 wants their Data-Out exact.
    pub data_out_len: Option<u64>,
    /// Raised by the transport to stop the command (ABORT TASK, a task-set function, a
    /// reset, the loss of the I_T nexus); long-running commands look at it between pieces of
    /// their work.
    pub abort: Option<&'a AbortSignal>,
}

/// The outcome of one command.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct CommandResult {
    /// SCSI status ([`status`]).
    pub status: u8,
    /// Sense data, present with CHECK CONDITION.
    pub sense: Option<SenseData>,
    /// I_T nexuses whose tasks on this command's LUN the transport must abort before it
    /// sends this status, this command's own task excepted (PREEMPT AND ABORT, SPC-4
    /// 5.12.11.2.5). Empty for every other command.
    pub abort_nexuses: Vec<NexusId>,
}

impl CommandResult {
    /// GOOD, no sense.
    pub fn good() -> Self {
        Self {
            status: status::GOOD,
            sense: None,
            abort_nexuses: Vec::new(),
        }
    }

    /// CHECK CONDITION with `sense`.
    pub fn check_condition(sense: SenseData) -> Self {
        Self {
            status: status::CHECK_CONDITION,
            sense: Some(sense),
            abort_nexuses: Vec::new(),
        }
    }

    /// RESERVATION CONFLICT (no sense).
    pub fn reservation_conflict() -> Self {
        Self {
            status: status::RESERVATION_CONFLICT,
            sense: None,
            abort_nexuses: Vec::new(),
        }
    }

    /// Whether the status is GOOD.
    pub fn is_good(&self) -> bool {
        self.status == status::GOOD
    }

    /// The encoded sense data to send, in the format the sense carries.
    pub fn sense_bytes(&self) -> Option<Vec<u8>> {
        self.sense.as_ref().map(SenseData::to_bytes)
    }
}

/// A reset task-management function.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum ResetKind {
    /// LOGICAL UNIT RESET of the LU addressed by this raw 8-byte LUN field.
    LogicalUnit(u64),
    /// TARGET WARM RESET: every LU is reset.
    TargetWarm,
    /// TARGET COLD RESET: every LU is reset as after power-on.
    TargetCold,
}
