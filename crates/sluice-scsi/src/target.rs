//! The LUN map, LUN addressing and the entry points the transport driver calls.

use std::sync::{Arc, RwLock};

use bytes::{Bytes, BytesMut};

use crate::cdb::opcode as oc;
use crate::field::{be16, be32, u8_at};
use crate::lu::{Call, LogicalUnit};
use crate::ports::{Fabric, NexusIdentity, TargetPorts};
use crate::unit_attention as ua;
use crate::{inquiry, misc, opcodes, report_luns, sense, Planned};
use crate::{CommandResult, DataOut, Delivery, NexusId, ResetKind, Transfer};

/// Largest transfer one READ/WRITE/VERIFY may move: 32 MiB. Reported in VPD B0h as MAXIMUM
/// TRANSFER LENGTH (in blocks); longer commands get INVALID FIELD IN CDB, so a CDB can never
/// make `execute` allocate more than this.
pub const MAX_TRANSFER_BYTES: u64 = 32 << 20;

/// The REPORT LUNS well-known logical unit's LUN field (SPC-4 8.2): C101h.
const REPORT_LUNS_WLUN: u64 = 0xC101_0000_0000_0000;

/// What an 8-byte SAM LUN field addresses.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum LunAddress {
    /// An ordinary LUN (peripheral or flat space addressing, single level), 0..=16383.
    Lun(u16),
    /// The REPORT LUNS well-known logical unit.
    ReportLunsWellKnown,
    /// Any other address (multi-level, extended, unknown well-known LUs).
    Unsupported,
}

/// Decodes a raw 8-byte SAM LUN field (as it appears big-endian in the iSCSI BHS).
pub fn decode_lun(raw: u64) -> LunAddress {
    if raw == REPORT_LUNS_WLUN {
        return LunAddress::ReportLunsWellKnown;
    }
    let [b0, b1, rest @ ..] = raw.to_be_bytes();
    if rest != [0; 6] {
        return LunAddress::Unsupported;
    }
    match b0 >> 6 {
        // Peripheral device addressing with bus identifier 0.
        0b00 if b0 == 0 => LunAddress::Lun(u16::from(b1)),
        // Flat space addressing.
        0b01 => LunAddress::Lun(u16::from_be_bytes([b0 & 0x3F, b1])),
        _ => LunAddress::Unsupported,
    }
}

/// Encodes a LUN the way REPORT LUNS reports it: peripheral addressing below 256, flat space
/// addressing above (LUNs above 16383 cannot be addressed and are masked).
pub fn encode_lun(lun: u16) -> u64 {
    let lun = lun & 0x3FFF;
    let [hi, lo] = lun.to_be_bytes();
    let b0 = if lun < 256 { 0 } else { 0x40 | hi };
    u64::from_be_bytes([b0, lo, 0, 0, 0, 0, 0, 0])
}

/// A SCSI target device: the map from LUN to [`LogicalUnit`], and the target ports it is
/// reached through.
#[derive(Debug)]
pub struct ScsiTarget {
    luns: RwLock<Vec<(u16, Arc<LogicalUnit>)>>,
    fabric: Fabric,
}

impl ScsiTarget {
    /// Creates a target with one unnamed target port ([`TargetPorts::single`]). LUNs above
    /// 16383 cannot be addressed and are dropped; for duplicate LUNs the first entry wins.
    pub fn new(luns: Vec<(u16, Arc<LogicalUnit>)>) -> Self {
        Self::with_ports(luns, TargetPorts::single())
    }

    /// Creates a target reached through `ports` (several for multipath); each LU's target
    /// port groups start in the states `ports` gives.
    pub fn with_ports(luns: Vec<(u16, Arc<LogicalUnit>)>, ports: TargetPorts) -> Self {
        let fabric = Fabric::new(ports);
        let luns = clean_map(luns);
        for (_, lu) in &luns {
            lu.attach_ports(&fabric.ports);
        }
        Self {
            luns: RwLock::new(luns),
            fabric,
        }
    }

    /// The ports the target is reached through.
    pub fn ports(&self) -> &TargetPorts {
        &self.fabric.ports
    }

    /// The ports and the identities of the I_T nexuses (for the commands' checks).
    pub(crate) fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// The described I_T nexuses that one of `holders` names (an initiator port, or every
    /// port of an initiator device, through one relative target port): those another
    /// process's PREEMPT AND ABORT preempted.
    pub fn nexuses_of(&self, holders: &[crate::parameter_lists::Holder]) -> Vec<NexusId> {
        self.fabric.nexuses_where(|id| {
            holders
                .iter()
                .any(|h| h.port == id.target_port && h.initiator.covers(&id.initiator))
        })
    }

    /// Describes the two ends of `nexus` (call when the transport establishes it, before its
    /// first command): persistent reservations, VPD page 83h and ALUA use them. A nexus never
    /// described counts as its own initiator port on the first target port.
    pub fn nexus_established(&self, nexus: NexusId, identity: NexusIdentity) {
        self.fabric.attach(nexus, identity);
    }

    /// Replaces the LUN map, establishing REPORTED LUNS DATA HAS CHANGED (3Fh/0Eh) on every
    /// LU of the new map for every nexus that LU knows.
    pub fn replace_luns(&self, luns: Vec<(u16, Arc<LogicalUnit>)>) {
        let luns = clean_map(luns);
        for (_, lu) in &luns {
            lu.attach_ports(&self.fabric.ports);
            lu.state()
                .ua
                .establish_others(None, ua::REPORTED_LUNS_CHANGED);
        }
        *self.luns.write().unwrap_or_else(|e| e.into_inner()) = luns;
    }

    /// The logical unit at `lun`, if any.
    pub fn lu(&self, lun: u16) -> Option<Arc<LogicalUnit>> {
        self.map()
            .iter()
            .find(|(l, _)| *l == lun)
            .map(|(_, lu)| Arc::clone(lu))
    }

    /// The logical unit of this target that a designator with this CODE SET, DESIGNATOR
    /// TYPE and value names (its NAA or T10 vendor ID designator, as the Device
    /// Identification VPD page reports them): how EXTENDED COPY finds the LUs it copies
    /// between. Only this target's LUs are candidates, so a copy reaches nothing its
    /// initiator could not address itself.
    pub fn lu_named_by(
        &self,
        code_set: u8,
        designator_type: u8,
        designator: &[u8],
    ) -> Option<Arc<LogicalUnit>> {
        self.map()
            .iter()
            .find(|(_, lu)| {
                crate::designator::names(lu.config(), code_set, designator_type, designator)
            })
            .map(|(_, lu)| Arc::clone(lu))
    }

    /// The LUNs in the map, in map order.
    pub fn lun_numbers(&self) -> Vec<u16> {
        self.map().iter().map(|(l, _)| *l).collect()
    }

    fn map(&self) -> std::sync::RwLockReadGuard<'_, Vec<(u16, Arc<LogicalUnit>)>> {
        self.luns.read().unwrap_or_else(|e| e.into_inner())
    }

    fn resolve(&self, lun: u64) -> Resolved {
        match decode_lun(lun) {
            LunAddress::Lun(n) => self.lu(n).map_or(Resolved::Missing, Resolved::Lu),
            LunAddress::ReportLunsWellKnown => Resolved::Wlun,
            LunAddress::Unsupported => Resolved::Missing,
        }
    }

    /// Whether executing this command reads its Data-Out. Only a WRITE(6/10/12/16) to a LU
    /// whose device keeps nothing written ([`BlockDevice::keeps_writes`]) and runs on the
    /// synchronous path does not: its transport may drop the data as it arrives and deliver
    /// [`DataOut::Unkept`] of the same length (a null LUN then holds no write data while a
    /// large write waits for the rest of it).
    ///
    /// [`BlockDevice::keeps_writes`]: sluice_storage::BlockDevice::keeps_writes
    pub fn keeps_data_out(&self, lun: u64, cdb: &[u8]) -> bool {
        if !matches!(
            u8_at(cdb, 0),
            oc::WRITE_6 | oc::WRITE_10 | oc::WRITE_12 | oc::WRITE_16
        ) {
            return true;
        }
        match self.resolve(lun) {
            Resolved::Lu(lu) => lu.device().keeps_writes() || lu.device().submits(),
            Resolved::Wlun | Resolved::Missing => true,
        }
    }

    /// What the command will move, judged from the CDB alone (for residuals and sizing).
    ///
    /// Block-based commands addressed to a LUN that does not exist report
    /// [`Transfer::None`] (they fail with LOGICAL UNIT NOT SUPPORTED anyway).
    pub fn transfer(&self, lun: u64, cdb: &[u8]) -> Transfer {
        let op = u8_at(cdb, 0);
        let alloc = match op {
            oc::INQUIRY => Some(u64::from(be16(cdb, 3))),
            oc::REQUEST_SENSE | oc::MODE_SENSE_6 => Some(u64::from(u8_at(cdb, 4))),
            oc::MODE_SENSE_10 => Some(u64::from(be16(cdb, 7))),
            oc::READ_CAPACITY_10 => Some(8),
            oc::SERVICE_ACTION_IN_16 if u8_at(cdb, 1) & 0x1F == oc::SAI_READ_CAPACITY_16 => {
                Some(u64::from(be32(cdb, 10)))
            }
            oc::REPORT_LUNS => Some(u64::from(be32(cdb, 6))),
            oc::READ_DEFECT_DATA_10 => Some(u64::from(be16(cdb, 7))),
            oc::READ_DEFECT_DATA_12 => Some(u64::from(be32(cdb, 6))),
            oc::MAINTENANCE_IN if u8_at(cdb, 1) & 0x1F == oc::MI_REPORT_SUPPORTED_OPCODES => {
                Some(u64::from(be32(cdb, 6)))
            }
            oc::MAINTENANCE_IN if u8_at(cdb, 1) & 0x1F == oc::MI_REPORT_TARGET_PORT_GROUPS => {
                Some(u64::from(be32(cdb, 6)))
            }
            oc::PERSISTENT_RESERVE_IN => Some(u64::from(be16(cdb, 7))),
            oc::MODE_SELECT_6 => return Transfer::ToDevice(u64::from(u8_at(cdb, 4))),
            oc::MODE_SELECT_10 => return Transfer::ToDevice(u64::from(be16(cdb, 7))),
            _ => crate::transfer::allocation_length(cdb),
        };
        if let Some(t) = crate::transfer::parameter_list(cdb) {
            return t;
        }
        if let Some(n) = alloc {
            return if n == 0 {
                Transfer::None
            } else {
                Transfer::FromDevice(n)
            };
        }
        let Resolved::Lu(lu) = self.resolve(lun) else {
            return Transfer::None;
        };
        let bs = u64::from(lu.device().block_size());
        if let Some(t) = crate::transfer::block_data(cdb, bs) {
            return t;
        }
        let Some(blocks) = crate::rw::transfer_blocks(cdb) else {
            return Transfer::None;
        };
        let bytes = blocks.saturating_mul(bs);
        let out = match op {
            oc::READ_6 | oc::READ_10 | oc::READ_12 | oc::READ_16 => Transfer::FromDevice(bytes),
            oc::WRITE_6 | oc::WRITE_10 | oc::WRITE_12 | oc::WRITE_16 => Transfer::ToDevice(bytes),
            oc::WRITE_VERIFY_10 | oc::WRITE_VERIFY_12 | oc::WRITE_VERIFY_16 | oc::ORWRITE_16 => {
                Transfer::ToDevice(bytes)
            }
            oc::VERIFY_10 | oc::VERIFY_12 | oc::VERIFY_16 => match (u8_at(cdb, 1) >> 1) & 0x03 {
                0b01 => Transfer::ToDevice(bytes),
                0b11 if blocks > 0 => Transfer::ToDevice(bs),
                _ => Transfer::None,
            },
            _ => Transfer::None,
        };
        match out {
            Transfer::ToDevice(0) | Transfer::FromDevice(0) => Transfer::None,
            other => other,
        }
    }

    /// Runs one command synchronously and returns its status and sense.
    ///
    /// `lun` is the raw 8-byte SAM LUN field. `data_out` holds the Data-Out actually
    /// received. `data_in` is cleared, then receives the Data-In (already truncated to the
    /// allocation length; empty on CHECK CONDITION).
    pub fn execute(
        &self,
        nexus: NexusId,
        lun: u64,
        cdb: &[u8],
        data_out: &[u8],
        data_in: &mut BytesMut,
    ) -> CommandResult {
        let mut shared = None;
        let result = self.execute_shared(nexus, lun, cdb, data_out.into(), data_in, &mut shared);
        if let Some(b) = shared {
            data_in.extend_from_slice(&b);
        }
        result
    }

    /// [`execute`](Self::execute), except that a read the backend can serve without copying
    /// ([`BlockDevice::read_shared`](sluice_storage::BlockDevice::read_shared)) leaves its
    /// data in `shared` (then `data_in` stays empty): the caller sends those bytes as they
    /// are. `shared` is set to `None` first. `data_out` may be the Data-Out PDUs' segments as
    /// they arrived ([`DataOut::Segments`]): a WRITE hands them to the device without gluing
    /// them together.
    pub fn execute_shared(
        &self,
        nexus: NexusId,
        lun: u64,
        cdb: &[u8],
        data_out: DataOut<'_>,
        data_in: &mut BytesMut,
        shared: &mut Option<Bytes>,
    ) -> CommandResult {
        let call = Call {
            nexus,
            cdb,
            data_out,
            data_out_len: None,
            abort: None,
        };
        self.run(lun, call, data_in, shared)
    }

    /// [`execute_shared`](Self::execute_shared) for a transport that knows more about the
    /// command ([`Delivery`]): the Data-Out length the initiator announced, so that commands
    /// whose Data-Out must be exact (COMPARE AND WRITE, WRITE SAME) refuse a longer one, and
    /// an [`AbortSignal`](crate::AbortSignal) that stops a long-running command ([`runs_long`](crate::runs_long))
    /// between pieces of its work.
    pub fn execute_with(
        &self,
        nexus: NexusId,
        lun: u64,
        cdb: &[u8],
        delivery: Delivery<'_>,
        data_in: &mut BytesMut,
        shared: &mut Option<Bytes>,
    ) -> CommandResult {
        let call = Call {
            nexus,
            cdb,
            data_out: delivery.data_out,
            data_out_len: delivery.data_out_len,
            abort: delivery.abort,
        };
        self.run(lun, call, data_in, shared)
    }

    /// Plans a READ, WRITE or SYNCHRONIZE CACHE to `lun` from `nexus` for the transport to
    /// carry out on the device itself (asynchronously), `data_out_bytes` of Data-Out having
    /// arrived: every check [`execute_with`](Self::execute_with) makes is made here, with the
    /// same outcome, and the device I/O is left to the caller ([`Planned`]). Any other
    /// command, or one to a LU whose I/O lock is held exclusively, comes back as
    /// [`Planned::Execute`] untouched. Never blocks on another command.
    pub fn plan(&self, nexus: NexusId, lun: u64, cdb: &[u8], data_out_bytes: usize) -> Planned {
        match self.resolve(lun) {
            Resolved::Lu(lu) => crate::plan::plan(&lu, nexus, cdb, data_out_bytes, self.fabric()),
            Resolved::Wlun | Resolved::Missing => Planned::Execute,
        }
    }

    fn run(
        &self,
        lun: u64,
        call: Call<'_>,
        data_in: &mut BytesMut,
        shared: &mut Option<Bytes>,
    ) -> CommandResult {
        let cdb = call.cdb;
        data_in.clear();
        *shared = None;
        if matches!(call.data_out, DataOut::Unkept(_)) && self.keeps_data_out(lun, cdb) {
            // Dropped data for a command that reads it: the LU changed since the transport
            // asked (removed and added again), or a transport bug. Never write zeros in its
            // place; the initiator may retry an aborted command.
            return CommandResult::check_condition(sense::SenseData::new(
                sense::SenseKey::ABORTED_COMMAND,
                0x44,
                0x00,
            ));
        }
        // The LUN inventory is only read by REPORT LUNS, but handed to every command: keep it
        // on the stack for the usual few LUNs (no allocation per command).
        let mut small = [0u16; 16];
        let big: Vec<u16>;
        let luns: &[u16] = {
            let map = self.map();
            if map.len() <= small.len() {
                for (slot, (l, _)) in small.iter_mut().zip(map.iter()) {
                    *slot = *l;
                }
                &small[..map.len()]
            } else {
                big = map.iter().map(|(l, _)| *l).collect();
                &big
            }
        };
        let result = match self.resolve(lun) {
            Resolved::Lu(lu) => return lu.execute(call, data_in, shared, luns, self),
            Resolved::Wlun => self.execute_wlun(cdb, data_in, luns),
            Resolved::Missing => self.execute_missing(cdb, data_in, luns),
        };
        match result {
            Ok(()) => CommandResult::good(),
            Err(sense) => {
                data_in.clear();
                CommandResult::check_condition(sense)
            }
        }
    }

    /// Commands addressed to the REPORT LUNS well-known LU (SPC-4 8.2): INQUIRY (standard
    /// data only), REPORT LUNS, REQUEST SENSE and TEST UNIT READY.
    fn execute_wlun(
        &self,
        cdb: &[u8],
        out: &mut BytesMut,
        luns: &[u16],
    ) -> Result<(), sense::SenseData> {
        let info = opcodes::lookup(cdb)?;
        match info.opcode {
            oc::INQUIRY | oc::REPORT_LUNS | oc::REQUEST_SENSE | oc::TEST_UNIT_READY => {}
            _ => return Err(sense::invalid_opcode()),
        }
        opcodes::validate(info, cdb)?;
        match info.opcode {
            oc::INQUIRY if u8_at(cdb, 1) & 0x01 != 0 => {
                Err(sense::invalid_field_in_cdb(1, Some(0)))
            }
            oc::INQUIRY => {
                let cfg = self.map().first().map(|(_, lu)| lu.config().clone());
                inquiry::standard(cdb, out, cfg.as_ref(), inquiry::WELL_KNOWN_LU)
            }
            oc::REPORT_LUNS => report_luns::report_luns(cdb, luns, out),
            oc::REQUEST_SENSE => misc::request_sense_data(cdb, out, None),
            _ => Ok(()),
        }
    }

    /// Commands addressed to a LUN that does not exist (SPC-4 4.6.4 / 6.6.2): INQUIRY
    /// answers peripheral qualifier 011b, REPORT LUNS works, REQUEST SENSE returns LOGICAL UNIT
    /// NOT SUPPORTED as its data, everything else fails with it.
    fn execute_missing(
        &self,
        cdb: &[u8],
        out: &mut BytesMut,
        luns: &[u16],
    ) -> Result<(), sense::SenseData> {
        let op = u8_at(cdb, 0);
        if !matches!(op, oc::INQUIRY | oc::REPORT_LUNS | oc::REQUEST_SENSE) {
            return Err(sense::lun_not_supported());
        }
        let info = opcodes::lookup(cdb)?;
        opcodes::validate(info, cdb)?;
        match op {
            oc::INQUIRY if u8_at(cdb, 1) & 0x01 != 0 => Err(sense::lun_not_supported()),
            oc::INQUIRY => {
                let cfg = self.map().first().map(|(_, lu)| lu.config().clone());
                inquiry::standard(cdb, out, cfg.as_ref(), inquiry::NO_LU)
            }
            oc::REPORT_LUNS => report_luns::report_luns(cdb, luns, out),
            _ => misc::request_sense_data(cdb, out, Some(sense::lun_not_supported())),
        }
    }

    /// The session of `nexus` ended: drops its PREVENT state, RESERVE reservations and pending
    /// unit attentions on every LU, and forgets its identity. A later command with the same id
    /// counts as a new nexus.
    pub fn nexus_gone(&self, nexus: NexusId) {
        self.fabric.detach(nexus);
        for (_, lu) in self.map().iter() {
            lu.nexus_gone(nexus);
        }
    }

    /// The transport terminated commands of `nexus` on `lun` without their status reaching
    /// the initiator (iSCSI connection recovery that never happened, RFC 7143 section
    /// 11.14.5): the next command of that I_T_L nexus gets the unit attention COMMANDS
    /// CLEARED BY ISCSI PROTOCOL EVENT (47h/7Fh). A LUN that does not exist is ignored.
    pub fn commands_cleared(&self, nexus: NexusId, lun: u64) {
        if let Resolved::Lu(lu) = self.resolve(lun) {
            lu.establish(nexus, ua::COMMANDS_CLEARED_BY_ISCSI);
        }
    }

    /// Performs the SCSI side of a reset task-management function; returns false if a
    /// LOGICAL UNIT RESET named a LUN that does not exist (nothing was done).
    ///
    /// Every reset releases all PREVENT MEDIUM REMOVAL state and RESERVE reservations (never
    /// persistent ones) and restores default mode pages
    /// on the LUs it covers, and queues a unit attention for **every** I_T nexus, `by`
    /// included (SAM-5 requires the requester to see it too): BUS DEVICE RESET FUNCTION
    /// OCCURRED (29h/03h) after a LOGICAL UNIT or TARGET WARM RESET, POWER ON OCCURRED
    /// (29h/01h) after a TARGET COLD RESET. `by` is accepted for the driver's bookkeeping.
    pub fn reset(&self, kind: ResetKind, by: NexusId) -> bool {
        let _ = by;
        match kind {
            ResetKind::LogicalUnit(lun) => match self.resolve(lun) {
                Resolved::Lu(lu) => {
                    lu.reset(ua::BUS_DEVICE_RESET);
                    true
                }
                Resolved::Wlun => true,
                Resolved::Missing => false,
            },
            ResetKind::TargetWarm | ResetKind::TargetCold => {
                let code = if kind == ResetKind::TargetCold {
                    ua::POWER_ON
                } else {
                    ua::BUS_DEVICE_RESET
                };
                for (_, lu) in self.map().iter() {
                    lu.reset(code);
                }
                true
            }
        }
    }
}

enum Resolved {
    Lu(Arc<LogicalUnit>),
    Wlun,
    Missing,
}

fn clean_map(luns: Vec<(u16, Arc<LogicalUnit>)>) -> Vec<(u16, Arc<LogicalUnit>)> {
    let mut out: Vec<(u16, Arc<LogicalUnit>)> = Vec::with_capacity(luns.len());
    for (l, lu) in luns {
        if l <= 0x3FFF && !out.iter().any(|(m, _)| *m == l) {
            out.push((l, lu));
        }
    }
    out
}

#[cfg(test)]
#[path = "target_tests.rs"]
mod tests;
