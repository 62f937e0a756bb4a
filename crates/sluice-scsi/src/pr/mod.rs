//! Reservations of one logical unit: persistent reservations (SPC-4 5.12, PERSISTENT RESERVE
//! IN/OUT) and the older RESERVE/RELEASE reservations (SPC-2 5.5), with the gate every other
//! command passes.
//!
//! The gate costs a command one atomic load while the logical unit is not reserved: a flag
//! word, set under the state lock whenever a reservation of either kind comes or goes. Only a
//! reserved logical unit takes the lock to decide. Commands that touch the medium read the
//! flag inside the logical unit's I/O lock, and the commands that reserve or preempt hold that
//! lock exclusively: a write that passed the gate has finished before PREEMPT (AND ABORT)
//! answers, and none passes after it.
//!
//! With APTPL set (and a [`StateStore`] attached), every change is saved before the command
//! completes, so the registrations and the reservation survive a crash and a restart.

mod legacy;
mod model;
pub(crate) mod params;
pub(crate) mod persist;
mod prin;
mod prout;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use sluice_storage::StateStore;

use crate::access::{Access, PrClass};
use crate::field::{be16, be32, put_truncated, u8_at};
use crate::lu::Cmd;
use crate::ports::Fabric;
use crate::sense::{
    invalid_field_in_cdb, invalid_field_in_param, param_list_length_error, SenseData, SenseKey,
};
use crate::NexusId;

pub(crate) use legacy::{release, reserve};
pub use model::{Holder, PrState, PrType, Registration, Reservation, MAX_REGISTRATIONS};
use params::{parse_prout_parameters, ServiceAction, MAX_PROUT_LIST_BYTES};

/// How a command that did not succeed ends.
#[derive(Debug)]
pub(crate) enum Failure {
    /// CHECK CONDITION with this sense.
    Check(SenseData),
    /// RESERVATION CONFLICT (a status without sense).
    Conflict,
}

impl From<SenseData> for Failure {
    fn from(s: SenseData) -> Self {
        Failure::Check(s)
    }
}

/// A persistent reservation exists.
const PR_RESERVED: u8 = 0x01;
/// A RESERVE(6)/(10) reservation exists.
const LEGACY_RESERVED: u8 = 0x02;
/// A shared store changed under us: the state in memory must be read again before the gate,
/// PERSISTENT RESERVE IN or OUT trusts it.
const STALE: u8 = 0x04;
/// How often PERSISTENT RESERVE OUT retries when another gateway changed the shared state
/// between its read and its compare-and-write.
const MAX_SHARED_RETRIES: usize = 16;

#[derive(Debug, Default)]
struct Inner {
    pr: PrState,
    /// The I_T nexus holding a RESERVE reservation.
    legacy: Option<NexusId>,
    /// The shared store's version `pr` was read at (shared stores only).
    version: u64,
}

/// The reservations of one logical unit.
#[derive(Debug, Default)]
pub(crate) struct Reservations {
    inner: Mutex<Inner>,
    /// [`PR_RESERVED`] | [`LEGACY_RESERVED`] | [`STALE`]: what the gate's fast path reads
    /// (shared with a shared store's change callback, which sets [`STALE`]).
    flags: Arc<AtomicU8>,
    store: OnceLock<Arc<dyn StateStore>>,
}

/// Why a saved reservation state could not be restored.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// A store was attached already.
    #[error("a reservation store is attached already")]
    AlreadyAttached,
    /// The store could not be read.
    #[error("cannot read the saved reservations: {0}")]
    Io(#[from] std::io::Error),
    /// The saved state is damaged.
    #[error("the saved reservations are damaged ({0})")]
    Damaged(#[from] persist::DecodeError),
}

impl Reservations {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every change replaces the state whole after it succeeded: a poisoned lock still
        // guards a consistent state.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether any reservation exists: one atomic load, the gate's fast path.
    #[inline]
    pub(crate) fn active(&self) -> bool {
        self.flags.load(Ordering::Acquire) != 0
    }

    fn publish(&self, inner: &Inner) {
        let mut flags = 0;
        if inner.pr.reservation.is_some() {
            flags |= PR_RESERVED;
        }
        if inner.legacy.is_some() {
            flags |= LEGACY_RESERVED;
        }
        // A change notified meanwhile stays noted.
        let _ = self
            .flags
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
                Some(old & STALE | flags)
            });
    }

    /// Reads a shared store's state again, when it was notified as changed or `force`d.
    /// Stores nobody else changes are never read again.
    fn refresh(&self, inner: &mut Inner, force: bool) -> Result<(), SenseData> {
        let Some(store) = self.store.get().filter(|s| s.shared()) else {
            return Ok(());
        };
        if !force && self.flags.load(Ordering::Acquire) & STALE == 0 {
            return Ok(());
        }
        // Cleared before the read: a change notified during it marks the state stale again.
        self.flags.fetch_and(!STALE, Ordering::AcqRel);
        // The command ends with a retryable error and the state stays marked stale.
        let fail = |_: String| {
            self.flags.fetch_or(STALE, Ordering::AcqRel);
            // INTERNAL TARGET FAILURE: the initiator may retry.
            SenseData::new(SenseKey::HARDWARE_ERROR, 0x44, 0x00)
        };
        let (bytes, version) = store.load_versioned().map_err(|e| fail(e.to_string()))?;
        let pr = match bytes {
            Some(b) => persist::decode_shared(&String::from_utf8_lossy(&b))
                .map_err(|e| fail(e.to_string()))?,
            None => PrState::default(),
        };
        inner.pr = pr;
        inner.version = version;
        self.publish(inner);
        Ok(())
    }

    /// Whether `nexus` may run a command of treatment `access` (call when [`active`]).
    pub(crate) fn gate(
        &self,
        nexus: NexusId,
        fabric: &Fabric,
        access: Access,
    ) -> Result<(), Failure> {
        let mut inner = self.lock();
        if inner.legacy.is_some_and(|holder| holder != nexus) && !access.spc2 {
            return Err(Failure::Conflict);
        }
        if matches!(
            access.pr,
            PrClass::Allowed | PrClass::PersistentOut | PrClass::Legacy
        ) {
            return Ok(());
        }
        // Only commands a persistent reservation can refuse wait for a stale shared state.
        self.refresh(&mut inner, false)?;
        if inner.pr.reservation.is_some() && inner.pr.conflicts(&fabric.identity(nexus), access.pr)
        {
            return Err(Failure::Conflict);
        }
        Ok(())
    }

    /// The I_T nexus is gone: a RESERVE reservation it held is released (SPC-2 5.5.1).
    /// Persistent reservations outlive the nexus (SPC-4 5.12.1).
    pub(crate) fn nexus_gone(&self, nexus: NexusId) {
        let mut inner = self.lock();
        if inner.legacy == Some(nexus) {
            inner.legacy = None;
            self.publish(&inner);
        }
    }

    /// A logical unit or target reset releases a RESERVE reservation (SAM-5 6.3), never a
    /// persistent one.
    pub(crate) fn reset(&self) {
        let mut inner = self.lock();
        inner.legacy = None;
        self.publish(&inner);
    }

    /// Attaches the store APTPL state is kept in, and restores what it holds.
    /// A shared store (other gateways' changes) is read again whenever it says it changed.
    pub(crate) fn attach_store(&self, store: Arc<dyn StateStore>) -> Result<(), RestoreError> {
        let shared = store.shared();
        let (bytes, version) = store.load_versioned()?;
        let restored = match bytes {
            Some(bytes) if shared => persist::decode_shared(&String::from_utf8_lossy(&bytes))?,
            Some(bytes) => persist::decode(&String::from_utf8_lossy(&bytes))?,
            None => PrState::default(),
        };
        if shared {
            let flags = Arc::clone(&self.flags);
            store.on_change(Box::new(move || {
                flags.fetch_or(STALE, Ordering::AcqRel);
            }));
        }
        self.store
            .set(store)
            .map_err(|_| RestoreError::AlreadyAttached)?;
        let mut inner = self.lock();
        inner.pr = restored;
        inner.version = version;
        self.publish(&inner);
        Ok(())
    }
}

/// PERSISTENT RESERVE IN (SPC-4 6.15).
pub(crate) fn persistent_reserve_in(cmd: &mut Cmd<'_>) -> Result<(), Failure> {
    let alloc = usize::from(be16(cmd.cdb, 7));
    let res = cmd.lu.reservations();
    let mut inner = res.lock();
    // Another gateway may have changed the state: answer what the shared store holds now.
    res.refresh(&mut inner, true)?;
    // SPC-2 5.5.1: while a RESERVE reservation is held, every PERSISTENT RESERVE IN and OUT
    // conflicts, whoever sends it.
    if inner.legacy.is_some() {
        return Err(Failure::Conflict);
    }
    let data = match u8_at(cmd.cdb, 1) & 0x1F {
        0x00 => prin::read_keys(&inner.pr),
        0x01 => prin::read_reservation(&inner.pr),
        0x02 => prin::report_capabilities(inner.pr.aptpl, res.store.get().is_some()),
        0x03 => prin::read_full_status(&inner.pr),
        _ => return Err(invalid_field_in_cdb(1, Some(4)).into()),
    };
    put_truncated(cmd.data_in, &data, alloc);
    Ok(())
}

/// PERSISTENT RESERVE OUT (SPC-4 6.16).
pub(crate) fn persistent_reserve_out(cmd: &mut Cmd<'_>) -> Result<(), Failure> {
    let cdb = cmd.cdb;
    let action = ServiceAction::from_code(u8_at(cdb, 1) & 0x1F)
        .ok_or_else(|| invalid_field_in_cdb(1, Some(4)))?;
    let res = cmd.lu.reservations();
    if res.lock().legacy.is_some() {
        return Err(Failure::Conflict);
    }
    let pll = be32(cdb, 5) as usize;
    if pll > MAX_PROUT_LIST_BYTES {
        return Err(param_list_length_error().into());
    }
    let list = cmd.data_out.contiguous(pll);
    if list.len() < pll {
        return Err(param_list_length_error().into());
    }
    let params = parse_prout_parameters(action, &list)?;
    let store = res.store.get();
    // SPC-4 6.16.3: APTPL=1 where persistence is not supported (PTPL_C=0) is an invalid
    // field; it only counts for the register service actions.
    let registers = matches!(
        action,
        ServiceAction::Register
            | ServiceAction::RegisterAndIgnoreExistingKey
            | ServiceAction::RegisterAndMove
    );
    if registers && params.aptpl() && store.is_none() {
        let at = if action == ServiceAction::RegisterAndMove {
            17
        } else {
            20
        };
        return Err(invalid_field_in_param(at, Some(0)).into());
    }
    let me = cmd.fabric.identity(cmd.nexus);
    let req = prout::Request {
        action,
        scope: u8_at(cdb, 2) >> 4,
        type_code: u8_at(cdb, 2) & 0x0F,
        params: &params,
        me: &me,
        ports: &cmd.fabric.ports,
    };
    let effects = {
        let mut inner = res.lock();
        if inner.legacy.is_some() {
            return Err(Failure::Conflict);
        }
        // The change is not made when it cannot be saved: the initiator may retry.
        let save_error = || SenseData::new(SenseKey::HARDWARE_ERROR, 0x44, 0x00);
        let mut attempt = 0;
        loop {
            // A shared store is read first, and written only if nobody changed it since
            // (compare-and-write on its version); a lost race applies the command again to
            // the newer state, as if it had arrived after the other gateway's.
            res.refresh(&mut inner, true)?;
            let mut next = inner.pr.clone();
            let effects = prout::apply(&mut next, &req)?;
            match store {
                Some(store) if store.shared() => {
                    match store.save_if(inner.version, persist::encode_shared(&next).as_bytes()) {
                        Ok(Some(version)) => inner.version = version,
                        Ok(None) if attempt < MAX_SHARED_RETRIES => {
                            attempt += 1;
                            continue;
                        }
                        Ok(None) | Err(_) => return Err(save_error().into()),
                    }
                }
                Some(store) if next.aptpl || inner.pr.aptpl => {
                    store
                        .save(persist::encode(&next).as_bytes())
                        .map_err(|_| save_error())?;
                }
                _ => {}
            }
            inner.pr = next;
            res.publish(&inner);
            break effects;
        }
    };
    // Unit attentions and aborts reach the I_T nexuses the registrations name (the sender
    // never gets a unit attention for its own command).
    for (reg, code) in effects.unit_attentions {
        for n in cmd.fabric.nexuses_where(|id| reg.covers(id)) {
            if n != cmd.nexus {
                cmd.lu.establish(n, code);
            }
        }
    }
    if !effects.aborted.is_empty() {
        let nexuses = cmd
            .fabric
            .nexuses_where(|id| effects.aborted.iter().any(|r| r.covers(id)));
        // SPC-4 5.12.11.2.5 c): as if each had sent PREVENT ALLOW MEDIUM REMOVAL with PREVENT=0.
        let mut st = cmd.lu.state();
        for n in &nexuses {
            st.prevent.remove(n);
        }
        drop(st);
        cmd.aborts = nexuses;
    }
    Ok(())
}

#[cfg(test)]
#[path = "tests.rs"]
pub(crate) mod tests;

#[cfg(test)]
#[path = "conflict_tests.rs"]
mod conflict_tests;

#[cfg(test)]
#[path = "ordering_tests.rs"]
mod ordering_tests;
