//! A logical unit: its configuration, its interior state and the command dispatcher.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::{Bytes, BytesMut};
use sluice_storage::{BlockDevice, StorageError};

use crate::alua::{self, AluaStates};
use crate::mode::ModePages;
use crate::opcodes::{self, IoLock, Op};
use crate::ports::{Fabric, TargetPorts};
use crate::pr::{self, Failure, Reservations, RestoreError};
use crate::sense::{self, SenseData, SenseFormat, SenseKey};
use crate::unit_attention::{self as ua, UnitAttentions};
use crate::{access, capacity, inquiry, misc, mode, report_luns, rw, verify, vpd};
use crate::{CommandResult, DataOut, NexusId};

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
}

impl fmt::Debug for LuConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LuConfig")
            .field("device", &self.device)
            .field("read_only", &self.read_only)
            .field("removable", &self.removable)
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
/// Block I/O commands also take the LU's I/O lock: READ, WRITE, VERIFY and WRITE AND VERIFY
/// shared, ORWRITE exclusive, so ORWRITE's read-modify-write is atomic with respect to
/// every other command that touches the medium. PERSISTENT RESERVE OUT and RESERVE take it
/// exclusively too, so no command that passed the reservation gate is still running when a
/// reservation or preemption takes effect.
#[derive(Debug)]
pub struct LogicalUnit {
    cfg: LuConfig,
    state: Mutex<LuState>,
    io: RwLock<()>,
    reservations: Reservations,
    alua: AluaStates,
}

/// Interior state of a logical unit.
#[derive(Debug)]
pub(crate) struct LuState {
    pub(crate) mode: ModePages,
    pub(crate) ua: UnitAttentions,
    pub(crate) prevent: HashSet<NexusId>,
    /// Whether the medium is loaded (always true unless the LU is removable).
    pub(crate) medium_present: bool,
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
}

/// Handler result: `Err` becomes CHECK CONDITION with that sense.
pub(crate) type CmdResult = Result<(), SenseData>;

impl LogicalUnit {
    /// Creates a logical unit with default mode pages and no nexus known yet.
    pub fn new(cfg: LuConfig) -> Self {
        let mode = ModePages::new(cfg.write_cache);
        Self {
            cfg,
            state: Mutex::new(LuState {
                mode,
                ua: UnitAttentions::default(),
                prevent: HashSet::new(),
                medium_present: true,
            }),
            io: RwLock::new(()),
            reservations: Reservations::default(),
            alua: AluaStates::default(),
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

    /// Whether writes are refused (configuration or device).
    pub fn read_only(&self) -> bool {
        self.cfg.read_only || self.cfg.device.read_only()
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
        self.io.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Exclusive hold on the LU's I/O lock (read-modify-write commands).
    pub(crate) fn io_exclusive(&self) -> RwLockWriteGuard<'_, ()> {
        self.io.write().unwrap_or_else(|e| e.into_inner())
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
        {
            let mut st = self.state();
            st.prevent.clear();
            st.mode = ModePages::new(self.cfg.write_cache);
            st.ua.establish_others(None, code);
        }
        self.reservations.reset();
    }

    /// Runs one command for `nexus`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn execute(
        &self,
        nexus: NexusId,
        cdb: &[u8],
        data_out: DataOut<'_>,
        data_in: &mut BytesMut,
        shared_in: &mut Option<Bytes>,
        luns: &[u16],
        fabric: &Fabric,
    ) -> CommandResult {
        let opcode = cdb.first().copied().unwrap_or(0xFF);
        {
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
            if !exempt {
                if let Some((asc, ascq)) = st.ua.take(nexus) {
                    let fmt = if st.mode.d_sense() {
                        SenseFormat::Descriptor
                    } else {
                        SenseFormat::Fixed
                    };
                    return CommandResult::check_condition(
                        sense::unit_attention(asc, ascq).with_format(fmt),
                    );
                }
            }
        }
        let mut cmd = Cmd {
            lu: self,
            nexus,
            cdb,
            data_out,
            data_in,
            shared_in,
            luns,
            fabric,
            aborts: Vec::new(),
        };
        let result = opcodes::lookup(cdb)
            .and_then(|info| opcodes::validate(info, cdb).map(|()| info.op))
            .map_err(Failure::Check)
            .and_then(|op| {
                // What the command may do under reservations and ALUA states: looked up only
                // when one of them restricts anything.
                let access = || access::classify(cdb).unwrap_or(access::UNLISTED);
                // ALUA (SPC-4 5.15.2.4): one relaxed load unless some group is not active.
                if self.alua.restricted() {
                    let group = fabric.port_of(nexus).map_or(0, |p| p.group);
                    alua::check(self.alua.state(group), access())?;
                }
                if op.needs_medium() && !self.medium_present() {
                    return Err(sense::medium_not_present().into());
                }
                // The reservation gate runs inside the I/O lock (see `pr`): one atomic load
                // unless the LU is reserved.
                let gate = |cmd: &Cmd<'_>| {
                    if self.reservations.active() {
                        self.reservations.gate(nexus, cmd.fabric, access())
                    } else {
                        Ok(())
                    }
                };
                match op.io_lock() {
                    IoLock::None => gate(&cmd).and_then(|()| dispatch(op, &mut cmd)),
                    IoLock::Shared => {
                        let _io = self.io_shared();
                        gate(&cmd).and_then(|()| dispatch(op, &mut cmd))
                    }
                    IoLock::Exclusive => {
                        let _io = self.io_exclusive();
                        gate(&cmd).and_then(|()| dispatch(op, &mut cmd))
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
        Op::ReportSupportedOpcodes => opcodes::report_supported_opcodes(cmd.cdb, cmd.data_in),
        Op::ReportTargetPortGroups => alua::report_target_port_groups(cmd),
        Op::SetTargetPortGroups => alua::set_target_port_groups(cmd),
        // RESERVATION CONFLICT is a status, not sense: these answer with a `Failure`.
        Op::PersistentReserveIn => return pr::persistent_reserve_in(cmd),
        Op::PersistentReserveOut => return pr::persistent_reserve_out(cmd),
        Op::Reserve => return pr::reserve(cmd),
        Op::Release => return pr::release(cmd),
    };
    result.map_err(Failure::Check)
}

use crate::field::u8_at;

/// Maps a storage error to sense: out of range → LBA OUT OF RANGE; read-only → WRITE
/// PROTECTED; other I/O errors → MEDIUM ERROR (UNRECOVERED READ ERROR or WRITE ERROR).
pub(crate) fn storage_sense(e: &StorageError, writing: bool) -> SenseData {
    match e {
        StorageError::OutOfRange { .. } => sense::lba_out_of_range(),
        StorageError::Io(io) if io.kind() == std::io::ErrorKind::ReadOnlyFilesystem => {
            sense::write_protected()
        }
        _ if writing => SenseData::new(SenseKey::MEDIUM_ERROR, 0x0C, 0x00),
        _ => SenseData::new(SenseKey::MEDIUM_ERROR, 0x11, 0x00),
    }
}
