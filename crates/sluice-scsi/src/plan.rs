//! READ, WRITE and SYNCHRONIZE CACHE decided here and carried out by the transport.
//!
//! [`ScsiTarget::execute_with`](crate::ScsiTarget::execute_with) runs a command to its end on
//! the calling thread, device I/O included. For a backend that completes operations by itself
//! ([`BlockDevice::submits`]: an RBD image), a thread would sit in each one waiting. Here the
//! SCSI layer does everything but the I/O, exactly as `execute_with` would (unit attentions,
//! the command table, ALUA states, a sanitize or an ejected medium, reservations, write
//! protection, the range and transfer length), and hands back what to read, write or flush
//! ([`IoPlan`]); the transport submits it to the device, awaits it however it likes, and ends
//! the command with [`IoPlan::finish`].
//!
//! A READ or WRITE keeps its shared hold of the LU's I/O lock from its checks to the end of
//! its I/O, as under `execute_with`, so no write that passed the reservation gate is still
//! running when a reservation, a preemption or a sanitize takes effect. The hold is only
//! *tried* here: while a command that needs the lock exclusively holds it or waits for it, the
//! plan says [`Planned::Execute`] and the command takes the synchronous path, which waits.
//! Planning never blocks its thread on another command.

use std::sync::Arc;

use parking_lot::{ArcRwLockReadGuard, RawRwLock};
use sluice_storage::{BlockDevice, StorageError};

use crate::lu::{storage_sense, LogicalUnit};
use crate::opcodes::{self, Op};
use crate::ports::Fabric;
use crate::pr::Failure;
use crate::{access, alua, misc, rw, CommandResult, NexusId};

/// What the SCSI layer made of a command offered for planning.
#[derive(Debug)]
pub enum Planned {
    /// Not planned: run it through [`ScsiTarget::execute_with`](crate::ScsiTarget::execute_with)
    /// (another command, or one that must wait for the LU's I/O lock). Nothing was changed.
    Execute,
    /// It ended without device I/O (a check failed, or it moves no block): its result.
    Done(CommandResult),
    /// Device I/O to carry out, then [`IoPlan::finish`].
    Io(IoPlan),
}

/// The device operation a planned command needs.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum PlannedIo {
    /// Read `len` bytes from byte `offset`: the command's Data-In.
    Read {
        /// Byte offset.
        offset: u64,
        /// Bytes.
        len: usize,
    },
    /// Write the first `len` bytes of the command's Data-Out at byte `offset` (the whole
    /// blocks that arrived, at most what the CDB asks for); with `fua`, durably.
    Write {
        /// Byte offset.
        offset: u64,
        /// Bytes.
        len: usize,
        /// Durable before GOOD (FUA, or the write cache disabled).
        fua: bool,
    },
    /// Make every completed write durable (SYNCHRONIZE CACHE).
    Flush,
}

/// A command whose checks passed, waiting for its device I/O.
pub struct IoPlan {
    io: PlannedIo,
    lu: Arc<LogicalUnit>,
    /// The shared hold of the LU's I/O lock its checks ran under (READ, WRITE), until
    /// [`finish`](Self::finish).
    _hold: Option<ArcRwLockReadGuard<RawRwLock, ()>>,
}

impl std::fmt::Debug for IoPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoPlan")
            .field("io", &self.io)
            .finish_non_exhaustive()
    }
}

impl IoPlan {
    /// The operation to carry out.
    pub fn io(&self) -> PlannedIo {
        self.io
    }

    /// The device to carry it out on.
    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        self.lu.device()
    }

    /// Ends the command with what the device said: GOOD, or CHECK CONDITION with the sense
    /// the synchronous path gives the same error. Releases the LU's I/O lock.
    pub fn finish(self, result: Result<(), StorageError>) -> CommandResult {
        let outcome = match result {
            Ok(()) => {
                if let PlannedIo::Write { len, .. } = self.io {
                    self.lu.wrote(len as u64);
                }
                Ok(())
            }
            Err(e) => Err(storage_sense(
                &e,
                !matches!(self.io, PlannedIo::Read { .. }),
            )),
        };
        drop(self._hold);
        match outcome {
            Ok(()) => CommandResult::good(),
            Err(sense) => CommandResult::check_condition(sense.with_format(self.lu.sense_format())),
        }
    }
}

/// Whether `opcode` is one [`plan`] takes: READ and WRITE (6/10/12/16), SYNCHRONIZE CACHE
/// (10/16).
fn plannable(opcode: u8) -> bool {
    use crate::cdb::opcode as oc;
    matches!(
        opcode,
        oc::READ_6
            | oc::READ_10
            | oc::READ_12
            | oc::READ_16
            | oc::WRITE_6
            | oc::WRITE_10
            | oc::WRITE_12
            | oc::WRITE_16
            | oc::SYNCHRONIZE_CACHE_10
            | oc::SYNCHRONIZE_CACHE_16
    )
}

/// Plans `cdb` from `nexus` on `lu`, with `data_out_bytes` of Data-Out received; see the
/// module documentation.
pub(crate) fn plan(
    lu: &Arc<LogicalUnit>,
    nexus: NexusId,
    cdb: &[u8],
    data_out_bytes: usize,
    fabric: &Fabric,
) -> Planned {
    if !cdb.first().copied().is_some_and(plannable) {
        return Planned::Execute;
    }
    lu.catch_up(cdb, fabric);
    if let Some(attention) = lu.unit_attention_for(nexus, cdb) {
        return Planned::Done(attention);
    }
    let planned = opcodes::lookup_for(cdb, |info| lu.supports(info))
        .and_then(|info| opcodes::validate(info, cdb).map(|()| info.op))
        .map_err(Failure::Check)
        .and_then(|op| checked(lu, op, nexus, cdb, data_out_bytes, fabric));
    match planned {
        Ok(p) => p,
        Err(Failure::Conflict) => Planned::Done(CommandResult::reservation_conflict()),
        Err(Failure::Check(sense)) => Planned::Done(CommandResult::check_condition(
            sense.with_format(lu.sense_format()),
        )),
    }
}

/// The checks of `LogicalUnit::execute` for `op`, in the same order, and then those of the
/// command itself (`rw::read`, `rw::write`, `misc::synchronize_cache`) up to its I/O.
fn checked(
    lu: &Arc<LogicalUnit>,
    op: Op,
    nexus: NexusId,
    cdb: &[u8],
    data_out_bytes: usize,
    fabric: &Fabric,
) -> Result<Planned, Failure> {
    let access = || access::classify(cdb).unwrap_or(access::UNLISTED);
    // ALUA (SPC-4 5.15.2.4).
    if lu.alua().restricted() {
        let group = fabric.port_of(nexus).map_or(0, |p| p.group);
        let state = lu.alua().state(group);
        alua::check(state, access())?;
        // A write through an active/non-optimized gateway first moves the ownership to it
        // (an implicit transition, SPC-4 5.15.2.2), which waits for the other gateways: that
        // is the synchronous path's to do, off the connection's task.
        if access().pr == crate::access::PrClass::Restricted
            && lu.alua().change_moves_ownership(state)
        {
            return Ok(Planned::Execute);
        }
    }
    // READ and WRITE decide whether they may touch the medium inside the hold their I/O
    // runs under (see `LogicalUnit`); SYNCHRONIZE CACHE takes no hold.
    let hold = match op {
        Op::Read | Op::Write => match lu.io.try_read_arc() {
            Some(hold) => Some(hold),
            None => return Ok(Planned::Execute),
        },
        Op::SynchronizeCache => None,
        _ => return Ok(Planned::Execute),
    };
    lu.ready_for(op)?;
    lu.gate(nexus, fabric, access)?;
    let io = match op {
        Op::Read => match rw::read_extent(lu, cdb)? {
            Some((offset, len)) => PlannedIo::Read { offset, len },
            None => return Ok(Planned::Done(CommandResult::good())),
        },
        Op::Write => {
            let w = rw::write_extent(lu, cdb)?;
            // Only the whole blocks that arrived are written (as `rw::write_blocks`).
            let bs = lu.block_size().max(1) as usize;
            let len = data_out_bytes.min(w.len) / bs * bs;
            if len == 0 {
                return Ok(Planned::Done(CommandResult::good()));
            }
            PlannedIo::Write {
                offset: rw::offset(lu, w.lba),
                len,
                fua: w.fua,
            }
        }
        _ => {
            misc::synchronize_cache_checks(lu, cdb)?;
            PlannedIo::Flush
        }
    };
    Ok(Planned::Io(IoPlan {
        io,
        lu: Arc::clone(lu),
        _hold: hold,
    }))
}
