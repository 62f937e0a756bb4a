//! The one table of supported commands.
//!
//! The dispatcher looks every CDB up here ([`lookup`]), checks its length and reserved bits
//! against the CDB USAGE DATA mask ([`validate`]), then runs the handler named by [`Op`].
//! REPORT SUPPORTED OPERATION CODES ([`report_supported_opcodes`]) answers from the same
//! table, so what is reported and what is accepted cannot drift apart.

use bytes::BytesMut;

use crate::cdb::opcode as oc;
use crate::field::{be16, be32, put_truncated, u8_at};
use crate::sense::{invalid_field_in_cdb, invalid_opcode, top_bit, SenseData};

/// Which handler runs a command.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) enum Op {
    TestUnitReady,
    RequestSense,
    Read,
    Write,
    Inquiry,
    ModeSelect,
    ModeSense,
    StartStopUnit,
    PreventAllow,
    ReadCapacity10,
    ReadCapacity16,
    WriteAndVerify,
    Verify,
    PreFetch,
    SynchronizeCache,
    ReportLuns,
    ReportSupportedOpcodes,
    OrWrite,
    ReadDefectData,
    WriteSame,
    Unmap,
    GetLbaStatus,
    CompareAndWrite,
    WriteAtomic,
    ExtendedCopy,
    ReceiveCopyResults,
    Sanitize,
    PersistentReserveIn,
    PersistentReserveOut,
    Reserve,
    Release,
    ReportTargetPortGroups,
    SetTargetPortGroups,
}

/// How a command holds the LU's I/O lock (see [`LogicalUnit`](crate::LogicalUnit)).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) enum IoLock {
    /// Not taken.
    None,
    /// Shared with other block I/O.
    Shared,
    /// Alone: a read-modify-write.
    Exclusive,
}

impl Op {
    /// Whether the command accesses the medium, so fails with NOT READY / MEDIUM NOT PRESENT
    /// while a removable medium is ejected. INQUIRY, REQUEST SENSE, REPORT LUNS, REPORT
    /// SUPPORTED OPERATION CODES, MODE SENSE/SELECT, START STOP UNIT and PREVENT ALLOW
    /// MEDIUM REMOVAL work without a medium.
    pub(crate) fn needs_medium(self) -> bool {
        match self {
            Op::TestUnitReady
            | Op::Read
            | Op::Write
            | Op::ReadCapacity10
            | Op::ReadCapacity16
            | Op::WriteAndVerify
            | Op::Verify
            | Op::PreFetch
            | Op::SynchronizeCache
            | Op::OrWrite
            | Op::ReadDefectData
            | Op::WriteSame
            | Op::Unmap
            | Op::GetLbaStatus
            | Op::CompareAndWrite
            | Op::WriteAtomic
            | Op::ExtendedCopy
            | Op::Sanitize => true,
            Op::RequestSense
            | Op::Inquiry
            | Op::ModeSelect
            | Op::ModeSense
            | Op::StartStopUnit
            | Op::PreventAllow
            | Op::ReportLuns
            | Op::ReportSupportedOpcodes
            | Op::ReceiveCopyResults
            | Op::PersistentReserveIn
            | Op::PersistentReserveOut
            | Op::Reserve
            | Op::Release
            | Op::ReportTargetPortGroups
            | Op::SetTargetPortGroups => false,
        }
    }

    /// Whether the command runs while a sanitize operation is in progress (SBC-4 4.11.2):
    /// INQUIRY, REQUEST SENSE (which reports the progress), REPORT LUNS and REPORT SUPPORTED
    /// OPERATION CODES. Everything else ends with NOT READY / SANITIZE IN PROGRESS.
    pub(crate) fn allowed_while_sanitizing(self) -> bool {
        matches!(
            self,
            Op::Inquiry | Op::RequestSense | Op::ReportLuns | Op::ReportSupportedOpcodes
        )
    }

    /// The I/O lock the command runs under.
    pub(crate) fn io_lock(self) -> IoLock {
        match self {
            Op::Read
            | Op::Write
            | Op::WriteAndVerify
            | Op::Verify
            | Op::WriteSame
            | Op::Unmap
            | Op::GetLbaStatus => IoLock::Shared,
            // Reserving and preempting wait for the commands that passed the reservation gate
            // (see `LogicalUnit`). SANITIZE takes the lock itself, and EXTENDED COPY the locks
            // of the LUs it copies between, a piece at a time.
            Op::OrWrite
            | Op::CompareAndWrite
            | Op::WriteAtomic
            | Op::PersistentReserveOut
            | Op::Reserve => IoLock::Exclusive,
            _ => IoLock::None,
        }
    }
}

/// One supported command.
#[derive(Debug)]
pub(crate) struct CommandInfo {
    /// Operation code.
    pub(crate) opcode: u8,
    /// Service action, for opcodes that have them (9Eh, A3h).
    pub(crate) service_action: Option<u8>,
    /// Handler.
    pub(crate) op: Op,
    /// CDB USAGE DATA (SPC-4 6.35.3): byte 0 the opcode, then a 1 for every bit the device
    /// server evaluates. Its length is the CDB length. Bits outside it must be zero.
    pub(crate) usage: &'static [u8],
}

const C: u8 = 0x07; // control byte: NACA, and the obsolete FLAG/LINK bits (checked separately)

macro_rules! cmd {
    ($op:expr, $sa:expr, $h:ident, [$($u:expr),* $(,)?]) => {
        CommandInfo { opcode: $op, service_action: $sa, op: Op::$h, usage: &[$op, $($u),*] }
    };
    ($op:expr, $sa:expr, $h:ident, $usage:ident) => {
        CommandInfo { opcode: $op, service_action: $sa, op: Op::$h, usage: $usage }
    };
}

/// PERSISTENT RESERVE IN: service action, allocation length.
const PRIN: &[u8] = &[
    oc::PERSISTENT_RESERVE_IN,
    0x1F,
    0,
    0,
    0,
    0,
    0,
    0xFF,
    0xFF,
    C,
];
/// PERSISTENT RESERVE OUT: service action, SCOPE and TYPE, parameter list length.
const PROUT: &[u8] = &[
    oc::PERSISTENT_RESERVE_OUT,
    0x1F,
    0xFF,
    0,
    0,
    0xFF,
    0xFF,
    0xFF,
    0xFF,
    C,
];

/// Every supported command, by opcode then service action.
pub(crate) static COMMANDS: &[CommandInfo] = &[
    cmd!(oc::TEST_UNIT_READY, None, TestUnitReady, [0, 0, 0, 0, C]),
    cmd!(oc::REQUEST_SENSE, None, RequestSense, [0x01, 0, 0, 0xFF, C]),
    cmd!(oc::READ_6, None, Read, [0x1F, 0xFF, 0xFF, 0xFF, C]),
    cmd!(oc::WRITE_6, None, Write, [0x1F, 0xFF, 0xFF, 0xFF, C]),
    cmd!(oc::INQUIRY, None, Inquiry, [0x01, 0xFF, 0xFF, 0xFF, C]),
    cmd!(oc::MODE_SELECT_6, None, ModeSelect, [0x11, 0, 0, 0xFF, C]),
    // RESERVE(6) and RELEASE(6): third-party reservations and extents are not supported.
    cmd!(oc::RESERVE_6, None, Reserve, [0, 0, 0, 0, C]),
    cmd!(oc::RELEASE_6, None, Release, [0, 0, 0, 0, C]),
    cmd!(
        oc::MODE_SENSE_6,
        None,
        ModeSense,
        [0x08, 0xFF, 0xFF, 0xFF, C]
    ),
    cmd!(
        oc::START_STOP_UNIT,
        None,
        StartStopUnit,
        [0x01, 0, 0x0F, 0xF7, C]
    ),
    cmd!(oc::PREVENT_ALLOW, None, PreventAllow, [0, 0, 0, 0x03, C]),
    cmd!(
        oc::READ_CAPACITY_10,
        None,
        ReadCapacity10,
        [0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0x01, C]
    ),
    cmd!(
        oc::READ_10,
        None,
        Read,
        [0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C]
    ),
    cmd!(
        oc::WRITE_10,
        None,
        Write,
        [0xFA, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C]
    ),
    cmd!(
        oc::WRITE_VERIFY_10,
        None,
        WriteAndVerify,
        [0xF6, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C]
    ),
    cmd!(
        oc::VERIFY_10,
        None,
        Verify,
        [0xF6, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C]
    ),
    cmd!(
        oc::PRE_FETCH_10,
        None,
        PreFetch,
        [0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C]
    ),
    cmd!(
        oc::SYNCHRONIZE_CACHE_10,
        None,
        SynchronizeCache,
        [0x06, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C]
    ),
    cmd!(
        oc::READ_DEFECT_DATA_10,
        None,
        ReadDefectData,
        [0, 0x1F, 0, 0, 0, 0, 0xFF, 0xFF, C]
    ),
    cmd!(
        oc::WRITE_SAME_10,
        None,
        WriteSame,
        [0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C]
    ),
    cmd!(
        oc::UNMAP,
        None,
        Unmap,
        [0x01, 0, 0, 0, 0, 0x1F, 0xFF, 0xFF, C]
    ),
    cmd!(
        oc::SANITIZE,
        Some(crate::sanitize::OVERWRITE),
        Sanitize,
        [0xBF, 0, 0, 0, 0, 0, 0xFF, 0xFF, C]
    ),
    cmd!(
        oc::SANITIZE,
        Some(crate::sanitize::BLOCK_ERASE),
        Sanitize,
        [0xBF, 0, 0, 0, 0, 0, 0xFF, 0xFF, C]
    ),
    cmd!(
        oc::SANITIZE,
        Some(crate::sanitize::EXIT_FAILURE_MODE),
        Sanitize,
        [0xBF, 0, 0, 0, 0, 0, 0xFF, 0xFF, C]
    ),
    cmd!(
        oc::MODE_SELECT_10,
        None,
        ModeSelect,
        [0x11, 0, 0, 0, 0, 0, 0xFF, 0xFF, C]
    ),
    cmd!(oc::RESERVE_10, None, Reserve, [0, 0, 0, 0, 0, 0, 0, 0, C]),
    cmd!(oc::RELEASE_10, None, Release, [0, 0, 0, 0, 0, 0, 0, 0, C]),
    cmd!(
        oc::MODE_SENSE_10,
        None,
        ModeSense,
        [0x18, 0xFF, 0xFF, 0, 0, 0, 0xFF, 0xFF, C]
    ),
    // PERSISTENT RESERVE IN: READ KEYS, READ RESERVATION, REPORT CAPABILITIES, READ FULL
    // STATUS.
    cmd!(
        oc::PERSISTENT_RESERVE_IN,
        Some(0x00),
        PersistentReserveIn,
        PRIN
    ),
    cmd!(
        oc::PERSISTENT_RESERVE_IN,
        Some(0x01),
        PersistentReserveIn,
        PRIN
    ),
    cmd!(
        oc::PERSISTENT_RESERVE_IN,
        Some(0x02),
        PersistentReserveIn,
        PRIN
    ),
    cmd!(
        oc::PERSISTENT_RESERVE_IN,
        Some(0x03),
        PersistentReserveIn,
        PRIN
    ),
    // PERSISTENT RESERVE OUT: REGISTER, RESERVE, RELEASE, CLEAR, PREEMPT, PREEMPT AND ABORT,
    // REGISTER AND IGNORE EXISTING KEY, REGISTER AND MOVE.
    cmd!(
        oc::PERSISTENT_RESERVE_OUT,
        Some(0x00),
        PersistentReserveOut,
        PROUT
    ),
    cmd!(
        oc::PERSISTENT_RESERVE_OUT,
        Some(0x01),
        PersistentReserveOut,
        PROUT
    ),
    cmd!(
        oc::PERSISTENT_RESERVE_OUT,
        Some(0x02),
        PersistentReserveOut,
        PROUT
    ),
    cmd!(
        oc::PERSISTENT_RESERVE_OUT,
        Some(0x03),
        PersistentReserveOut,
        PROUT
    ),
    cmd!(
        oc::PERSISTENT_RESERVE_OUT,
        Some(0x04),
        PersistentReserveOut,
        PROUT
    ),
    cmd!(
        oc::PERSISTENT_RESERVE_OUT,
        Some(0x05),
        PersistentReserveOut,
        PROUT
    ),
    cmd!(
        oc::PERSISTENT_RESERVE_OUT,
        Some(0x06),
        PersistentReserveOut,
        PROUT
    ),
    cmd!(
        oc::PERSISTENT_RESERVE_OUT,
        Some(0x07),
        PersistentReserveOut,
        PROUT
    ),
    cmd!(
        oc::EXTENDED_COPY,
        Some(oc::EC_LID1),
        ExtendedCopy,
        [0x1F, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, C]
    ),
    cmd!(
        oc::RECEIVE_COPY_RESULTS,
        Some(oc::RCR_COPY_STATUS),
        ReceiveCopyResults,
        [0x1F, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, C]
    ),
    cmd!(
        oc::RECEIVE_COPY_RESULTS,
        Some(oc::RCR_OPERATING_PARAMETERS),
        ReceiveCopyResults,
        [0x1F, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, C]
    ),
    cmd!(
        oc::READ_16,
        None,
        Read,
        [0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, C]
    ),
    cmd!(
        oc::COMPARE_AND_WRITE,
        None,
        CompareAndWrite,
        [0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0xFF, 0x1F, C]
    ),
    cmd!(
        oc::WRITE_16,
        None,
        Write,
        [0xFA, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, C]
    ),
    cmd!(
        oc::ORWRITE_16,
        None,
        OrWrite,
        [0xFA, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, C]
    ),
    cmd!(
        oc::WRITE_VERIFY_16,
        None,
        WriteAndVerify,
        [0xF6, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, C]
    ),
    cmd!(
        oc::VERIFY_16,
        None,
        Verify,
        [0xF6, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, C]
    ),
    cmd!(
        oc::PRE_FETCH_16,
        None,
        PreFetch,
        [0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, C]
    ),
    cmd!(
        oc::SYNCHRONIZE_CACHE_16,
        None,
        SynchronizeCache,
        [0x06, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, C]
    ),
    cmd!(
        oc::WRITE_SAME_16,
        None,
        WriteSame,
        [0xF9, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, C]
    ),
    cmd!(
        oc::WRITE_ATOMIC_16,
        None,
        WriteAtomic,
        [0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0xFF, 0xFF, 0x1F, C]
    ),
    cmd!(
        oc::SERVICE_ACTION_IN_16,
        Some(oc::SAI_READ_CAPACITY_16),
        ReadCapacity16,
        [0x1F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, C]
    ),
    cmd!(
        oc::SERVICE_ACTION_IN_16,
        Some(oc::SAI_GET_LBA_STATUS),
        GetLbaStatus,
        [0x1F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, C]
    ),
    cmd!(
        oc::REPORT_LUNS,
        None,
        ReportLuns,
        [0, 0xFF, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, C]
    ),
    cmd!(
        oc::MAINTENANCE_IN,
        Some(oc::MI_REPORT_TARGET_PORT_GROUPS),
        ReportTargetPortGroups,
        // Byte 1: PARAMETER DATA FORMAT 000b or 001b, and the service action.
        [0x3F, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, C]
    ),
    cmd!(
        oc::MAINTENANCE_IN,
        Some(oc::MI_REPORT_SUPPORTED_OPCODES),
        ReportSupportedOpcodes,
        [0x1F, 0x87, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, C]
    ),
    cmd!(
        oc::MAINTENANCE_OUT,
        Some(oc::MO_SET_TARGET_PORT_GROUPS),
        SetTargetPortGroups,
        [0x1F, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, C]
    ),
    cmd!(
        oc::READ_12,
        None,
        Read,
        [0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, C]
    ),
    cmd!(
        oc::WRITE_12,
        None,
        Write,
        [0xFA, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, C]
    ),
    cmd!(
        oc::WRITE_VERIFY_12,
        None,
        WriteAndVerify,
        [0xF6, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, C]
    ),
    cmd!(
        oc::VERIFY_12,
        None,
        Verify,
        [0xF6, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, C]
    ),
    cmd!(
        oc::READ_DEFECT_DATA_12,
        None,
        ReadDefectData,
        [0x1F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, C]
    ),
];

/// Opcodes whose CDB carries a SERVICE ACTION field in byte 1 (whether or not any of their
/// service actions is supported here).
const SA_OPCODES: &[u8] = &[
    0x48, 0x5E, 0x5F, 0x7F, 0x83, 0x84, 0x9E, 0x9F, 0xA3, 0xA4, 0xA9, 0xAB,
];

fn has_service_actions(opcode: u8) -> bool {
    SA_OPCODES.contains(&opcode)
}

/// Finds the table entry for a CDB.
///
/// An unsupported opcode gets ILLEGAL REQUEST / INVALID COMMAND OPERATION CODE. An unsupported
/// service action of SERVICE ACTION IN(16) or MAINTENANCE IN gets INVALID FIELD IN CDB with
/// the field pointer at byte 1, which initiators (libiscsi among them) read as "not
/// implemented" too. Other service-action opcodes have no supported service action at all,
/// so they are answered as unsupported opcodes.
pub(crate) fn lookup(cdb: &[u8]) -> Result<&'static CommandInfo, SenseData> {
    lookup_for(cdb, |_| true)
}

/// [`lookup`] among the entries `supported` accepts (what one logical unit implements).
pub(crate) fn lookup_for(
    cdb: &[u8],
    supported: impl Fn(&CommandInfo) -> bool,
) -> Result<&'static CommandInfo, SenseData> {
    let opcode = *cdb.first().ok_or_else(invalid_opcode)?;
    let sa = u8_at(cdb, 1) & 0x1F;
    let mut opcode_known = false;
    for c in COMMANDS {
        if c.opcode != opcode || !supported(c) {
            continue;
        }
        opcode_known = true;
        if c.service_action.is_none_or(|s| s == sa) {
            return Ok(c);
        }
    }
    if opcode_known {
        Err(invalid_field_in_cdb(1, None))
    } else {
        Err(invalid_opcode())
    }
}

/// Checks the CDB length, the control byte and every bit the usage mask marks reserved.
pub(crate) fn validate(info: &CommandInfo, cdb: &[u8]) -> Result<(), SenseData> {
    let len = info.usage.len();
    let Some(cdb) = cdb.get(..len) else {
        return Err(invalid_field_in_cdb(0, None));
    };
    let last = len - 1;
    for (i, (&b, &mask)) in cdb.iter().zip(info.usage).enumerate().take(last).skip(1) {
        let bad = b & !mask;
        if bad != 0 {
            // `i` < 16, so it fits in u16.
            return Err(invalid_field_in_cdb(i as u16, top_bit(bad)));
        }
    }
    let control = cdb[last];
    // SAM-5: NACA=1 is only valid where ACA is supported (NORMACA=0 in INQUIRY); the LINK and
    // FLAG bits are obsolete and must be zero.
    if control & 0x07 != 0 {
        return Err(invalid_field_in_cdb(last as u16, top_bit(control & 0x07)));
    }
    Ok(())
}

/// Recommended command timeout reported in command timeouts descriptors, in seconds.
const RECOMMENDED_TIMEOUT_S: u32 = 30;

/// REPORT SUPPORTED OPERATION CODES (MAINTENANCE IN / 0Ch, SPC-4 6.35).
pub(crate) fn report_supported_opcodes(
    cdb: &[u8],
    out: &mut BytesMut,
    supported: impl Fn(&CommandInfo) -> bool,
) -> Result<(), SenseData> {
    let rctd = u8_at(cdb, 2) & 0x80 != 0;
    let options = u8_at(cdb, 2) & 0x07;
    let req_op = u8_at(cdb, 3);
    let req_sa = be16(cdb, 4);
    let alloc = be32(cdb, 6) as usize;
    let mut buf = Vec::new();
    match options {
        0 => {
            buf.extend_from_slice(&[0; 4]);
            for c in COMMANDS.iter().filter(|c| supported(c)) {
                buf.push(c.opcode);
                buf.push(0);
                buf.extend_from_slice(&u16::from(c.service_action.unwrap_or(0)).to_be_bytes());
                buf.push(0);
                let mut flags = 0;
                if rctd {
                    flags |= 0x02;
                }
                if c.service_action.is_some() {
                    flags |= 0x01;
                }
                buf.push(flags);
                buf.extend_from_slice(&(c.usage.len() as u16).to_be_bytes());
                if rctd {
                    buf.extend_from_slice(&timeouts_descriptor());
                }
            }
            let len = (buf.len() - 4) as u32;
            buf[0..4].copy_from_slice(&len.to_be_bytes());
        }
        1..=3 => {
            let sa_based = has_service_actions(req_op);
            let use_sa = match options {
                1 if sa_based => return Err(invalid_field_in_cdb(3, None)),
                2 if !sa_based => return Err(invalid_field_in_cdb(3, None)),
                1 => false,
                2 => true,
                _ => sa_based,
            };
            let found = COMMANDS.iter().filter(|c| supported(c)).find(|c| {
                c.opcode == req_op && (!use_sa || c.service_action.map(u16::from) == Some(req_sa))
            });
            let mut flags = 0x01; // SUPPORT 001b: not supported
            if found.is_some() {
                flags = 0x03; // SUPPORT 011b: supported, standard
            }
            if rctd {
                flags |= 0x80;
            }
            buf.extend_from_slice(&[0, flags]);
            match found {
                Some(c) => {
                    buf.extend_from_slice(&(c.usage.len() as u16).to_be_bytes());
                    buf.extend_from_slice(c.usage);
                }
                None => buf.extend_from_slice(&[0, 0]),
            }
            if rctd {
                buf.extend_from_slice(&timeouts_descriptor());
            }
        }
        _ => return Err(invalid_field_in_cdb(2, Some(2))),
    }
    put_truncated(out, &buf, alloc);
    Ok(())
}

fn timeouts_descriptor() -> [u8; 12] {
    let mut d = [0u8; 12];
    d[1] = 0x0A;
    d[8..12].copy_from_slice(&RECOMMENDED_TIMEOUT_S.to_be_bytes());
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_well_formed() {
        for w in COMMANDS.windows(2) {
            let a = (w[0].opcode, w[0].service_action);
            let b = (w[1].opcode, w[1].service_action);
            assert!(a < b, "{a:?} !< {b:?}");
        }
        for c in COMMANDS {
            assert_eq!(c.usage[0], c.opcode);
            assert!(
                matches!(c.usage.len(), 6 | 10 | 12 | 16),
                "{:02x}",
                c.opcode
            );
            assert_eq!(*c.usage.last().unwrap(), C);
            assert_eq!(c.service_action.is_some(), has_service_actions(c.opcode));
        }
    }

    #[test]
    fn lookup_unsupported() {
        let s = lookup(&[0x04]).unwrap_err();
        assert_eq!((s.asc, s.ascq), (0x20, 0x00));
        let s = lookup(&[0x9E, 0x13]).unwrap_err();
        assert_eq!((s.asc, s.ascq), (0x24, 0x00));
        assert_eq!(s.field_pointer(), Some((true, 1, None)));
        assert!(lookup(&[]).is_err());
        assert_eq!(lookup(&[0x9E, 0x10]).unwrap().op, Op::ReadCapacity16);
    }

    #[test]
    fn validate_points_at_reserved_bits_and_control() {
        let info = lookup(&[0x28]).unwrap();
        let mut cdb = [0u8; 10];
        cdb[0] = 0x28;
        assert!(validate(info, &cdb).is_ok());
        cdb[6] = 0x20;
        let s = validate(info, &cdb).unwrap_err();
        assert_eq!(s.field_pointer(), Some((true, 6, Some(5))));
        cdb[6] = 0;
        cdb[9] = 0x04;
        let s = validate(info, &cdb).unwrap_err();
        assert_eq!(s.field_pointer(), Some((true, 9, Some(2))));
        cdb[9] = 0xC0; // vendor-specific bits are ignored
        assert!(validate(info, &cdb).is_ok());
        assert!(validate(info, &cdb[..6]).is_err());
    }

    fn rsoc(options: u8, rctd: bool, op: u8, sa: u16, alloc: u32) -> Result<Vec<u8>, SenseData> {
        let mut cdb = [0u8; 12];
        cdb[0] = 0xA3;
        cdb[1] = 0x0C;
        cdb[2] = options | if rctd { 0x80 } else { 0 };
        cdb[3] = op;
        cdb[4..6].copy_from_slice(&sa.to_be_bytes());
        cdb[6..10].copy_from_slice(&alloc.to_be_bytes());
        let mut out = BytesMut::new();
        report_supported_opcodes(&cdb, &mut out, |_| true).map(|()| out.to_vec())
    }

    #[test]
    fn rsoc_all_with_and_without_timeouts() {
        let d = rsoc(0, false, 0, 0, 65535).unwrap();
        assert_eq!(be32(&d, 0) as usize, d.len() - 4);
        assert_eq!(d.len(), 4 + 8 * COMMANDS.len());
        for (i, c) in COMMANDS.iter().enumerate() {
            let e = &d[4 + 8 * i..12 + 8 * i];
            assert_eq!(e[0], c.opcode);
            assert_eq!(e[5] & 0x02, 0);
            assert_eq!(e[5] & 0x01 != 0, c.service_action.is_some());
            if e[5] & 1 == 0 {
                assert_eq!(be16(e, 2), 0);
            }
            assert_eq!(be16(e, 6) as usize, c.usage.len());
        }
        let d = rsoc(0, true, 0, 0, 65535).unwrap();
        assert_eq!(d.len(), 4 + 20 * COMMANDS.len());
        for i in 0..COMMANDS.len() {
            let e = &d[4 + 20 * i..24 + 20 * i];
            assert_eq!(e[5] & 0x02, 0x02);
            assert_eq!(be16(e, 8), 0x0A);
        }
        // Truncation keeps the full length field.
        let d = rsoc(0, false, 0, 0, 6).unwrap();
        assert_eq!(d.len(), 6);
        assert_eq!(be32(&d, 0) as usize, 8 * COMMANDS.len());
    }

    #[test]
    fn rsoc_one_command() {
        let d = rsoc(1, false, 0x28, 0, 512).unwrap();
        assert_eq!(d[1] & 0x07, 0x03);
        assert_eq!(be16(&d, 2), 10);
        assert_eq!(d[4], 0x28);
        assert_eq!(d[5] & 0x18, 0x18, "DPO and FUA are advertised");
        assert_eq!(d.len(), 14);
        let d = rsoc(1, true, 0x2F, 0, 512).unwrap();
        assert_eq!(d[1] & 0x80, 0x80);
        assert_eq!(d[5] & 0x10, 0x10);
        assert_eq!(d.len(), 4 + 10 + 12);
        // Unsupported opcode: SUPPORT = 001b.
        let d = rsoc(1, false, 0x04, 0, 512).unwrap();
        assert_eq!(d, vec![0, 1, 0, 0]);
        // Service-action opcodes need option 2, and vice versa.
        assert!(rsoc(1, false, 0x9E, 0x10, 512).is_err());
        assert!(rsoc(2, false, 0x28, 0, 512).is_err());
        let d = rsoc(2, false, 0x9E, 0x10, 512).unwrap();
        assert_eq!(d[1] & 7, 3);
        assert_eq!(d[4], 0x9E);
        let d = rsoc(2, false, 0x9E, 0x13, 512).unwrap();
        assert_eq!(d[1] & 7, 1);
        assert_eq!(rsoc(3, false, 0xA3, 0x0C, 512).unwrap()[1] & 7, 3);
        let s = rsoc(4, false, 0, 0, 512).unwrap_err();
        assert_eq!(s.field_pointer(), Some((true, 2, Some(2))));
    }
}
