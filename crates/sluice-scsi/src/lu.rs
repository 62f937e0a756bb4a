//! A logical unit: its configuration, its interior state and the command dispatcher.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::{Bytes, BytesMut};
use sluice_storage::{BlockDevice, StorageError};

use crate::access::{self, Access};
use crate::alua::{self, AluaStates};
use crate::copy_results::CopyRecords;
use crate::mode::ModePages;
use crate::opcodes::{self, CommandInfo, IoLock, Op};
use crate::ports::{Fabric, TargetPorts};
use crate::pr::{self, Failure, Reservations, RestoreError};
use crate::sanitize::SanitizeState;
use crate::sense::{self, SenseData, SenseFormat, SenseKey};
use crate::threshold::SoftThreshold;
use crate::unit_attention::{self as ua, UnitAttentions};
use crate::{capacity, inquiry, misc, mode, report_luns, rw, verify, vpd};
use crate::{
    compare_and_write, copy_results, provisioning, sanitize, write_atomic, write_same, xcopy,
};
use crate::{AbortSignal, CommandResult, DataOut, LuOptions, NexusId, ScsiTarget};

/// How a logical unit presents itself. Strings are sent as printable ASCII (other characters
/// become `_`), space-padded or truncated to the field width given.
#[derive(Clone)]
pub struct LuConfig {
    /// The backing store.
    pub device: Arc<dyn BlockDevice>,
    /// Refuse every write with DATA PROTECT / WRITE PROTECTED (also applied when
    /// [`BlockDevice::read_only`] says so) and set the WP bit in MODE SENSE.
    pub read_only: bool,
    /// T10 VENDOR IDENTIFICATION, 8 characters.
    pub vendor: String,
    /// PRODUCT IDENTIFICATION, 16 characters.
    pub product: String,
    /// PRODUCT REVISION LEVEL, 4 characters.
    pub revision: String,
    /// PRODUCT SERIAL NUMBER (VPD 80h), at most 252 characters.
    pub serial: String,
    /// The LU's NAA identifier (VPD 83h), unique per LU. If its top nibble is 6 it is sent as
    /// the first 8 bytes of a 16-byte NAA IEEE Registered Extended designator (extension 0);
    /// otherwise as an 8-byte NAA IEEE Registered designator with the top nibble forced to 5.
    /// The target port designators of VPD 83h come from the target's
    /// [`TargetPorts`](crate::TargetPorts), per I_T nexus.
    pub naa_id: u64,
    /// Default of the WCE bit (caching mode page). With WCE=0 every write is FUA.
    pub write_cache: bool,
    /// Report a removable medium (RMB=1 in standard INQUIRY). START STOP UNIT with LOEJ=1
    /// then ejects and loads it (refused with MEDIUM REMOVAL PREVENTED while any I_T nexus
    /// holds a PREVENT), and while it is ejected every medium-access command fails with NOT
    /// READY / MEDIUM NOT PRESENT. The LU starts with the medium loaded.
    pub removable: bool,
    /// Thin provisioning and SANITIZE ([`LuOptions`]).
    pub options: LuOptions,
}

impl fmt::Debug for LuConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LuConfig")
            .field("device", &self.device)
            .field("read_only", &self.read_only)
            .field("removable", &self.removable)
            .field("options", &self.options)
            .field("vendor", &self.vendor)
            .field("product", &self.product)
            .field("serial", &self.serial)
            .field("naa_id", &format_args!("{:#018x}", self.naa_id))
            .finish_non_exhaustive()
    }
}

/// A direct-access (SBC) logical unit. `Send + Sync`; commands may run concurrently from
/// several threads. Mode pages, unit attentions, PREVENT and medium state sit behind one
/// mutex that is never held across device I/O.
///
/// Block I/O commands also take the LU's I/O lock: READ, WRITE, VERIFY, WRITE AND VERIFY,
/// WRITE SAME and UNMAP shared; ORWRITE, COMPARE AND WRITE and WRITE ATOMIC exclusive, so
/// their read-modify-write (or their whole write) is atomic with respect to every other
/// command that touches the medium, from any I_T nexus. EXTENDED COPY takes the shared lock
/// of its source and of its destination in turn, one piece at a time.
///
/// The same lock orders those commands against reservations and sanitize operations: a
/// command decides whether it may touch the medium (sanitize state, medium present,
/// reservations) inside the hold its I/O runs under, and PERSISTENT RESERVE OUT, RESERVE and
/// the start of a SANITIZE hold the lock exclusively. So no command that passed those checks
/// is still running when a reservation, a preemption or a sanitize takes effect, and none
/// that runs afterwards passed them before.
#[derive(Debug)]
pub struct LogicalUnit {
    cfg: LuConfig,
    state: Mutex<LuState>,
    /// The I/O lock, in an `Arc` so that a planned operation (`plan.rs`) can keep a shared
    /// hold until its device I/O completes.
    pub(crate) io: Arc<RwLock<()>>,
    reservations: Reservations,
    alua: AluaStates,
    /// The Control mode page's SWP bit, mirrored out of `state` so that a write checks it
    /// without taking the state lock.
    software_write_protect: AtomicBool,
    /// Thin provisioning is on (configured, and the device deallocates).
    thin: bool,
    /// The soft threshold of a thin LU, when configured.
    threshold: Option<SoftThreshold>,
}

/// Interior state of a logical unit.
#[derive(Debug)]
pub(crate) struct LuState {
    pub(crate) mode: ModePages,
    pub(crate) ua: UnitAttentions,
    pub(crate) prevent: HashSet<NexusId>,
    /// Whether the medium is loaded (always true unless the LU is removable).
    pub(crate) medium_present: bool,
    /// EXTENDED COPY operations this LU manages, held for RECEIVE COPY RESULTS.
    pub(crate) copies: CopyRecords,
    /// A sanitize operation running, or failed.
    pub(crate) sanitize: SanitizeState,
}

/// What a handler sees of one command.
pub(crate) struct Cmd<'a> {
    pub(crate) lu: &'a LogicalUnit,
    pub(crate) nexus: NexusId,
    pub(crate) cdb: &'a [u8],
    pub(crate) data_out: DataOut<'a>,
    pub(crate) data_in: &'a mut BytesMut,
    /// Data-In served without a copy (a READ from a backend with
    /// [`BlockDevice::read_shared`]); when set, `data_in` is empty.
    pub(crate) shared_in: &'a mut Option<Bytes>,
    /// The target's LUN inventory (for REPORT LUNS).
    pub(crate) luns: &'a [u16],
    /// The target's ports and the identities of its I_T nexuses.
    pub(crate) fabric: &'a Fabric,
    /// I_T nexuses whose tasks on this LU the transport must abort before it sends this
    /// command's status (set by PREEMPT AND ABORT).
    pub(crate) aborts: Vec<NexusId>,
    /// The target the LU belongs to (EXTENDED COPY finds other LUs through it).
    pub(crate) target: &'a ScsiTarget,
    /// Raised when the transport aborts the command ([`AbortSignal`]); only long-running
    /// commands get one.
    pub(crate) abort: Option<&'a AbortSignal>,
    /// The Data-Out length the initiator announced (iSCSI: the Expected Data Transfer Length
    /// of a write), when the transport knows it; `data_out` holds at most what the CDB asks
    /// for. Commands whose Data-Out must be exact (COMPARE AND WRITE, WRITE SAME) check it.
    pub(crate) data_out_len: Option<u64>,
}

impl Cmd<'_> {
    /// Whether the transport asked this command to stop.
    pub(crate) fn aborted(&self) -> bool {
        self.abort.is_some_and(AbortSignal::is_aborted)
    }

    /// The Data-Out length the initiator sent or announced: the announced length when known,
    /// else what arrived.
    pub(crate) fn data_out_sent(&self) -> u64 {
        self.data_out_len
            .unwrap_or_else(|| self.data_out.len() as u64)
    }
}

/// One call into [`LogicalUnit::execute`]: the command and how the transport delivered it.
pub(crate) struct Call<'a> {
    pub(crate) nexus: NexusId,
    pub(crate) cdb: &'a [u8],
    pub(crate) data_out: DataOut<'a>,
    pub(crate) data_out_len: Option<u64>,
    pub(crate) abort: Option<&'a AbortSignal>,
}

/// Handler result: `Err` becomes CHECK CONDITION with that sense.
pub(crate) type CmdResult = Result<(), SenseData>;

impl LogicalUnit {
    /// Creates a logical unit with default mode pages and no nexus known yet.
    pub fn new(cfg: LuConfig) -> Self {
        let mode = ModePages::new(cfg.write_cache);
        let thin = cfg.options.thin && cfg.device.deallocates();
        let threshold = cfg
            .options
            .soft_threshold_percent
            .filter(|_| thin && cfg.device.allocated_bytes().is_some())
            .map(SoftThreshold::new);
        Self {
            cfg,
            state: Mutex::new(LuState {
                mode,
                ua: UnitAttentions::default(),
                prevent: HashSet::new(),
                medium_present: true,
                copies: CopyRecords::default(),
                sanitize: SanitizeState::default(),
            }),
            io: Arc::new(RwLock::new(())),
            reservations: Reservations::default(),
            alua: AluaStates::default(),
            software_write_protect: AtomicBool::new(false),
            thin,
            threshold,
        }
    }

    /// Keeps persistent reservation state in `store` when APTPL asks for it (SPC-4 5.12.5)
    /// and restores what the store holds (the registrations and reservation saved with
    /// APTPL=1 before a restart). Call once, before the first command; without a store,
    /// REPORT CAPABILITIES reports PTPL_C=0 and APTPL=1 is refused.
    pub fn attach_reservation_store(
        &self,
        store: Arc<dyn sluice_storage::StateStore>,
    ) -> Result<(), RestoreError> {
        self.reservations.attach_store(store)
    }

    /// Takes the target port groups (and their initial access states) of the target this LU
    /// belongs to.
    pub(crate) fn attach_ports(&self, ports: &TargetPorts) {
        self.alua.attach(ports);
    }

    /// Sets the asymmetric access states of the groups named, from outside a command (the
    /// gateway coordination that follows which gateway owns the logical unit), and raises
    /// ASYMMETRIC ACCESS STATE CHANGED for every I_T nexus when one changed (SPC-4
    /// 5.15.2.3). Returns whether one changed.
    pub fn set_access_states(&self, states: &[(u16, crate::ports::AccessState)]) -> bool {
        let changed = self.alua.set(states, false);
        if changed {
            self.state()
                .ua
                .establish_others(None, crate::unit_attention::ASYMMETRIC_ACCESS_STATE_CHANGED);
        }
        changed
    }

    /// The asymmetric access state of group `group` for this logical unit.
    pub fn access_state(&self, group: u16) -> crate::ports::AccessState {
        self.alua.state(group)
    }

    /// Hands SET TARGET PORT GROUPS to `controller`: the states are then set only through
    /// [`set_access_states`](Self::set_access_states).
    pub fn set_alua_controller(&self, controller: Arc<dyn crate::alua::AluaController>) {
        self.alua.set_controller(controller);
    }

    pub(crate) fn reservations(&self) -> &Reservations {
        &self.reservations
    }

    pub(crate) fn alua(&self) -> &AluaStates {
        &self.alua
    }

    /// The configuration it was created with.
    pub fn config(&self) -> &LuConfig {
        &self.cfg
    }

    /// The backing device.
    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.cfg.device
    }

    /// Whether writes are refused (configuration, device, or the Control mode page's SWP
    /// bit).
    pub fn read_only(&self) -> bool {
        self.writable().is_err()
    }

    /// Whether the LU is thin-provisioned (LBPME=1).
    pub fn thin(&self) -> bool {
        self.thin
    }

    /// The soft threshold, on a thin LU that has one.
    pub(crate) fn threshold(&self) -> Option<&SoftThreshold> {
        self.threshold.as_ref()
    }

    /// `bytes` were written: a thin LU with a soft threshold counts them towards its next
    /// look at the allocation.
    pub(crate) fn wrote(&self, bytes: u64) {
        if let Some(t) = &self.threshold {
            t.wrote(self, bytes);
        }
    }

    /// `Ok` if writes are allowed; otherwise the DATA PROTECT sense a write ends with: WRITE
    /// PROTECTED (27h/00h) for a read-only LU or device, LOGICAL UNIT SOFTWARE WRITE
    /// PROTECTED (27h/02h) while the SWP bit is set (SPC-4 7.5.8).
    pub(crate) fn writable(&self) -> Result<(), SenseData> {
        if self.cfg.read_only || self.cfg.device.read_only() {
            return Err(sense::write_protected());
        }
        if self.software_write_protect.load(Ordering::Relaxed) {
            return Err(SenseData::new(SenseKey::DATA_PROTECT, 0x27, 0x02));
        }
        Ok(())
    }

    /// Keeps the SWP mirror in step with the mode pages (after MODE SELECT or a reset).
    pub(crate) fn mode_changed(&self, mode: &ModePages) {
        self.software_write_protect
            .store(mode.swp(), Ordering::Relaxed);
    }

    /// Whether this LU accepts the command of table entry `info` (commands that depend on
    /// its configuration: UNMAP on thin LUs, WRITE ATOMIC where the device writes
    /// atomically, SANITIZE where allowed). Others are answered as unsupported opcodes.
    pub(crate) fn supports(&self, info: &CommandInfo) -> bool {
        match info.op {
            Op::Unmap => self.thin,
            Op::WriteAtomic => self.cfg.device.atomic_writes(),
            Op::Sanitize => {
                self.cfg.options.sanitize.is_some()
                    && (info.service_action != Some(sanitize::BLOCK_ERASE) || self.thin)
            }
            _ => true,
        }
    }

    /// Tells every I_T nexus that READ CAPACITY data changed (UNIT ATTENTION 2Ah/09h), e.g.
    /// after the backing device was resized.
    pub fn notify_capacity_changed(&self) {
        self.state().ua.establish_others(None, ua::CAPACITY_CHANGED);
    }

    /// Whether any I_T nexus holds a PREVENT MEDIUM REMOVAL.
    pub fn removal_prevented(&self) -> bool {
        !self.state().prevent.is_empty()
    }

    /// Whether the LU reports a removable medium.
    pub fn removable(&self) -> bool {
        self.cfg.removable
    }

    /// Whether the medium is loaded (always true for a non-removable LU).
    pub fn medium_present(&self) -> bool {
        self.state().medium_present
    }

    /// Shared hold on the LU's I/O lock (ordinary reads and writes).
    pub(crate) fn io_shared(&self) -> RwLockReadGuard<'_, ()> {
        self.io.read()
    }

    /// Exclusive hold on the LU's I/O lock (read-modify-write commands).
    pub(crate) fn io_exclusive(&self) -> RwLockWriteGuard<'_, ()> {
        self.io.write()
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, LuState> {
        // A panic while holding the lock cannot leave the state inconsistent in a way that
        // matters more than refusing service, so a poisoned lock is simply taken over.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn block_size(&self) -> u32 {
        self.cfg.device.block_size()
    }

    pub(crate) fn num_blocks(&self) -> u64 {
        self.cfg.device.num_blocks()
    }

    /// The sense format the Control mode page's D_SENSE bit selects.
    pub(crate) fn sense_format(&self) -> SenseFormat {
        if self.state().mode.d_sense() {
            SenseFormat::Descriptor
        } else {
            SenseFormat::Fixed
        }
    }

    /// Writes through (FUA) unless the write cache is enabled.
    pub(crate) fn write_cache_enabled(&self) -> bool {
        self.state().mode.wce()
    }

    pub(crate) fn nexus_gone(&self, nexus: NexusId) {
        {
            let mut st = self.state();
            st.ua.forget(nexus);
            st.prevent.remove(&nexus);
            st.copies.forget(nexus);
        }
        self.reservations.nexus_gone(nexus);
    }

    /// Queues the unit attention `code` for `nexus` only.
    pub(crate) fn establish(&self, nexus: NexusId, code: (u8, u8)) {
        self.state().ua.establish(nexus, code);
    }

    /// LOGICAL UNIT RESET (or the per-LU part of a target reset): drops every PREVENT and
    /// RESERVE reservation (persistent reservations stay, SPC-4 5.12.1), restores default mode
    /// pages and queues `code` for every known nexus.
    pub(crate) fn reset(&self, code: (u8, u8)) {
        self.reset_here(code);
        self.reservations.reset();
        if let Some(c) = self.alua.controller() {
            c.logical_unit_reset();
        }
    }

    /// Another process exporting this logical unit (a gateway of the same RBD image) reset
    /// it: the same reset here, BUS DEVICE RESET FUNCTION OCCURRED (29h/03h) for every I_T
    /// nexus, and this process's hold on a RESERVE reservation forgotten (the other process
    /// already released it in the shared state). Touches no shared store, so it may run on
    /// the thread that delivers the other process's message.
    pub fn reset_by_peer(&self) {
        self.reset_here(crate::unit_attention::BUS_DEVICE_RESET);
        self.reservations.reset_local();
    }

    /// The part of a reset every process exporting the logical unit does alike.
    fn reset_here(&self, code: (u8, u8)) {
        {
            let mut st = self.state();
            st.prevent.clear();
            st.mode = ModePages::new(self.cfg.write_cache);
            self.mode_changed(&st.mode);
            st.ua.establish_others(None, code);
        }
    }

    /// Runs one command.
    pub(crate) fn execute(
        &self,
        call: Call<'_>,
        data_in: &mut BytesMut,
        shared_in: &mut Option<Bytes>,
        luns: &[u16],
        target: &ScsiTarget,
    ) -> CommandResult {
        let Call {
            nexus,
            cdb,
            data_out,
            data_out_len,
            abort,
        } = call;
        self.catch_up(cdb, target.fabric());
        if let Some(attention) = self.unit_attention_for(nexus, cdb) {
            return attention;
        }
        let mut cmd = Cmd {
            lu: self,
            nexus,
            cdb,
            data_out,
            data_in,
            shared_in,
            luns,
            fabric: target.fabric(),
            aborts: Vec::new(),
            target,
            abort,
            data_out_len,
        };
        let result = opcodes::lookup_for(cdb, |info| self.supports(info))
            .and_then(|info| opcodes::validate(info, cdb).map(|()| info.op))
            .map_err(Failure::Check)
            .and_then(|op| {
                // What the command may do under reservations and ALUA states: looked up only
                // when one of them restricts anything.
                let access = || access::classify(cdb).unwrap_or(access::UNLISTED);
                // ALUA (SPC-4 5.15.2.4): one relaxed load unless some group is not active.
                if self.alua.restricted() {
                    let group = cmd.fabric.port_of(nexus).map_or(0, |p| p.group);
                    let state = self.alua.state(group);
                    alua::check(state, access())?;
                    if access().pr == crate::access::PrClass::Restricted {
                        self.alua.admit_change(group, state)?;
                    }
                }
                // Whether the LU can run the command now (sanitize, medium) and whether the
                // reservations let this I_T nexus run it are decided inside the I/O lock hold
                // the command runs under (see the type's documentation).
                let admit = |cmd: &Cmd<'_>| -> Result<(), Failure> {
                    self.ready_for(op)?;
                    self.gate(nexus, cmd.fabric, access)
                };
                match op.io_lock() {
                    IoLock::None => admit(&cmd).and_then(|()| dispatch(op, &mut cmd)),
                    IoLock::Shared => {
                        let _io = self.io_shared();
                        admit(&cmd).and_then(|()| dispatch(op, &mut cmd))
                    }
                    IoLock::Exclusive => {
                        let _io = self.io_exclusive();
                        admit(&cmd).and_then(|()| dispatch(op, &mut cmd))
                    }
                }
            });
        let aborts = std::mem::take(&mut cmd.aborts);
        match result {
            Ok(()) => CommandResult {
                abort_nexuses: aborts,
                ..CommandResult::good()
            },
            Err(Failure::Conflict) => {
                cmd.data_in.clear();
                *cmd.shared_in = None;
                CommandResult::reservation_conflict()
            }
            Err(Failure::Check(sense)) => {
                cmd.data_in.clear();
                *cmd.shared_in = None;
                CommandResult::check_condition(sense.with_format(self.sense_format()))
            }
        }
    }
}

impl LogicalUnit {
    /// Before `cdb` from `nexus` is checked for unit attentions: the unit attentions another
    /// gateway's PERSISTENT RESERVE OUT raised for this process's I_T nexuses are queued
    /// (one atomic load unless the shared reservation state changed). INQUIRY and REPORT
    /// LUNS, which no unit attention blocks, never wait for the shared store.
    #[inline(always)]
    pub(crate) fn catch_up(&self, cdb: &[u8], fabric: &crate::ports::Fabric) {
        let opcode = cdb.first().copied().unwrap_or(0xFF);
        if !matches!(
            opcode,
            crate::cdb::opcode::INQUIRY | crate::cdb::opcode::REPORT_LUNS
        ) {
            self.reservations.catch_up(self, fabric);
        }
    }

    /// Registers `nexus` and, unless the command is one a pending unit attention does not
    /// block, takes the oldest one queued for it: the CHECK CONDITION the command ends with.
    // Always inlined into `execute`, where it was written before `plan` shared it.
    #[inline(always)]
    pub(crate) fn unit_attention_for(&self, nexus: NexusId, cdb: &[u8]) -> Option<CommandResult> {
        let opcode = cdb.first().copied().unwrap_or(0xFF);
        let mut st = self.state();
        st.ua.register(nexus);
        // SAM-5 5.14: INQUIRY, REPORT LUNS and REQUEST SENSE are not blocked by a pending
        // unit attention (REQUEST SENSE reports it instead).
        let exempt = matches!(
            opcode,
            crate::cdb::opcode::INQUIRY
                | crate::cdb::opcode::REPORT_LUNS
                | crate::cdb::opcode::REQUEST_SENSE
        );
        if exempt {
            return None;
        }
        let (asc, ascq) = st.ua.take(nexus)?;
        let fmt = if st.mode.d_sense() {
            SenseFormat::Descriptor
        } else {
            SenseFormat::Fixed
        };
        Some(CommandResult::check_condition(
            sense::unit_attention(asc, ascq).with_format(fmt),
        ))
    }

    /// Whether the LU can run `op` now: a sanitize in progress stops everything but the
    /// commands SBC-4 4.11.2 lets through (NOT READY / SANITIZE IN PROGRESS), a failed one
    /// stops medium access (MEDIUM ERROR / SANITIZE COMMAND FAILED), and an ejected medium
    /// stops medium access (NOT READY / MEDIUM NOT PRESENT). One look at the state, and none
    /// for commands that touch neither.
    pub(crate) fn ready_for(&self, op: Op) -> CmdResult {
        let sanitize_gated = !op.allowed_while_sanitizing();
        if !op.needs_medium() && !sanitize_gated {
            return Ok(());
        }
        let mut st = self.state();
        if sanitize_gated {
            st.sanitize.check(op)?;
        }
        if op.needs_medium() && !st.medium_present {
            return Err(sense::medium_not_present());
        }
        Ok(())
    }

    /// Whether the reservations let `nexus` run a command of treatment `access` (see
    /// [`access`]): one atomic load unless the LU is reserved. A command that touches the
    /// medium asks with the I/O lock held, in the hold its I/O runs under.
    pub(crate) fn gate(
        &self,
        nexus: NexusId,
        fabric: &Fabric,
        access: impl FnOnce() -> Access,
    ) -> Result<(), Failure> {
        if self.reservations.active() {
            self.reservations.gate(nexus, fabric, access())
        } else {
            Ok(())
        }
    }

    /// For EXTENDED COPY, with this LU's I/O lock held: whether the copy manager may read
    /// (`write` false) or write this LU's medium now for the I_T nexus `nexus` that sent the
    /// copy, as a READ or WRITE that nexus sent itself would be: the state of its target port
    /// group, a sanitize, the medium, the reservations and write protection.
    pub(crate) fn admit_copy(
        &self,
        nexus: NexusId,
        fabric: &Fabric,
        write: bool,
    ) -> Result<(), Failure> {
        let access = if write {
            access::MEDIUM_WRITE
        } else {
            access::MEDIUM_READ
        };
        if self.alua.restricted() {
            let group = fabric.port_of(nexus).map_or(0, |p| p.group);
            let state = self.alua.state(group);
            alua::check(state, access)?;
            if write {
                self.alua.admit_change(group, state)?;
            }
        }
        self.ready_for(if write { Op::Write } else { Op::Read })?;
        self.gate(nexus, fabric, || access)?;
        if write {
            self.writable()?;
        }
        Ok(())
    }
}

fn dispatch(op: Op, cmd: &mut Cmd<'_>) -> Result<(), Failure> {
    let result = match op {
        Op::TestUnitReady => Ok(()),
        Op::RequestSense => misc::request_sense(cmd),
        Op::Read => rw::read(cmd),
        Op::Write => rw::write(cmd),
        Op::OrWrite => rw::orwrite(cmd),
        Op::ReadDefectData => misc::read_defect_data(cmd),
        Op::Inquiry => {
            if u8_at(cmd.cdb, 1) & 0x01 != 0 {
                vpd::inquiry_vpd(cmd)
            } else {
                inquiry::standard(
                    cmd.cdb,
                    cmd.data_in,
                    Some(cmd.lu.config()),
                    inquiry::DIRECT_ACCESS,
                )
            }
        }
        Op::ModeSelect => mode::mode_select(cmd),
        Op::ModeSense => mode::mode_sense(cmd),
        Op::StartStopUnit => misc::start_stop_unit(cmd),
        Op::PreventAllow => misc::prevent_allow(cmd),
        Op::ReadCapacity10 => capacity::read_capacity10(cmd),
        Op::ReadCapacity16 => capacity::read_capacity16(cmd),
        Op::WriteAndVerify => verify::write_and_verify(cmd),
        Op::Verify => verify::verify(cmd),
        Op::PreFetch => misc::pre_fetch(cmd),
        Op::SynchronizeCache => misc::synchronize_cache(cmd),
        Op::ReportLuns => {
            let r = report_luns::report_luns(cmd.cdb, cmd.luns, cmd.data_in);
            if r.is_ok() {
                // SPC-4 6.33: REPORT LUNS clears a pending REPORTED LUNS DATA HAS CHANGED.
                cmd.lu
                    .state()
                    .ua
                    .clear(cmd.nexus, ua::REPORTED_LUNS_CHANGED);
            }
            r
        }
        Op::ReportSupportedOpcodes => {
            let lu = cmd.lu;
            opcodes::report_supported_opcodes(cmd.cdb, cmd.data_in, |info| lu.supports(info))
        }
        Op::WriteSame => write_same::write_same(cmd),
        Op::Unmap => provisioning::unmap(cmd),
        Op::GetLbaStatus => provisioning::get_lba_status(cmd),
        Op::CompareAndWrite => compare_and_write::compare_and_write(cmd),
        Op::WriteAtomic => write_atomic::write_atomic(cmd),
        Op::ExtendedCopy => xcopy::extended_copy(cmd),
        Op::ReceiveCopyResults => copy_results::receive_copy_results(cmd),
        Op::ReportTargetPortGroups => alua::report_target_port_groups(cmd),
        Op::SetTargetPortGroups => alua::set_target_port_groups(cmd),
        // RESERVATION CONFLICT is a status, not sense: these answer with a `Failure`.
        Op::PersistentReserveIn => return pr::persistent_reserve_in(cmd),
        Op::PersistentReserveOut => return pr::persistent_reserve_out(cmd),
        Op::Reserve => return pr::reserve(cmd),
        Op::Release => return pr::release(cmd),
        // SANITIZE passes the checks again in its own exclusive hold of the I/O lock.
        Op::Sanitize => return sanitize::sanitize(cmd),
    };
    result.map_err(Failure::Check)
}

use crate::field::u8_at;

/// Maps a storage error to sense: out of range → LBA OUT OF RANGE; read-only → WRITE
/// PROTECTED; a full backing store → SPACE ALLOCATION FAILED WRITE PROTECT; other I/O errors
/// → MEDIUM ERROR (UNRECOVERED READ ERROR or WRITE ERROR).
pub(crate) fn storage_sense(e: &StorageError, writing: bool) -> SenseData {
    match e {
        StorageError::OutOfRange { .. } => sense::lba_out_of_range(),
        StorageError::Io(io) if io.kind() == std::io::ErrorKind::ReadOnlyFilesystem => {
            sense::write_protected()
        }
        // SBC-4 4.7.3.6: a write that needs space the backing store no longer has.
        StorageError::Io(io) if io.kind() == std::io::ErrorKind::StorageFull => {
            sense::space_allocation_failed()
        }
        _ if writing => SenseData::new(SenseKey::MEDIUM_ERROR, 0x0C, 0x00),
        _ => SenseData::new(SenseKey::MEDIUM_ERROR, 0x11, 0x00),
    }
}
