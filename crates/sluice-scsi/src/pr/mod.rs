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

pub(crate) mod events;
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

use events::{EventLog, PrEvent};
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
/// Events of another gateway's commands wait to be delivered to this process's I_T nexuses.
const PENDING: u8 = 0x08;
/// How often PERSISTENT RESERVE OUT retries when another gateway changed the shared state
/// between its read and its compare-and-write.
const MAX_SHARED_RETRIES: usize = 16;

#[derive(Debug, Default)]
struct Inner {
    pr: PrState,
    /// The I_T nexus of this process holding a RESERVE reservation. With a shared store,
    /// `shared_legacy` decides conflicts; this only says which local nexus's loss releases it.
    legacy: Option<NexusId>,
    /// What this process wrote as the shared RESERVE holder for `legacy` (shared stores).
    legacy_holder: Option<Holder>,
    /// The RESERVE holder every gateway sees (shared stores only): an I_T nexus of any
    /// gateway, by initiator port and relative target port.
    shared_legacy: Option<Holder>,
    /// The shared store's version `pr` was read at (shared stores only).
    version: u64,
    /// What the last commands asked of other I_T nexuses, as the shared store holds it.
    events: EventLog,
    /// The newest event this process has delivered (or made, or found at start).
    seen: u64,
    /// Events read from the shared store, not yet delivered to this process's I_T nexuses.
    pending: Vec<PrEvent>,
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

    /// The attached store, if other gateways share it.
    fn shared_store(&self) -> Option<&Arc<dyn StateStore>> {
        self.store.get().filter(|s| s.shared())
    }

    /// Whether some I_T nexus holds a RESERVE reservation.
    fn legacy_held(&self, inner: &Inner) -> bool {
        if self.shared_store().is_some() {
            inner.shared_legacy.is_some()
        } else {
            inner.legacy.is_some()
        }
    }

    /// Whether a RESERVE reservation is held by another I_T nexus than `nexus`.
    fn legacy_conflict(&self, inner: &Inner, nexus: NexusId, fabric: &Fabric) -> bool {
        if self.shared_store().is_some() {
            inner
                .shared_legacy
                .as_ref()
                .is_some_and(|h| *h != holder_of(&fabric.identity(nexus)))
        } else {
            inner.legacy.is_some_and(|holder| holder != nexus)
        }
    }

    fn publish(&self, inner: &Inner) {
        let mut flags = 0;
        if inner.pr.reservation.is_some() {
            flags |= PR_RESERVED;
        }
        if self.legacy_held(inner) {
            flags |= LEGACY_RESERVED;
        }
        // A change notified meanwhile stays noted.
        let _ = self
            .flags
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
                Some(old & (STALE | PENDING) | flags)
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
        let shared = match bytes {
            Some(b) => persist::decode_shared(&String::from_utf8_lossy(&b))
                .map_err(|e| fail(e.to_string()))?,
            None => persist::SharedState::default(),
        };
        let missed = shared.events.since(inner.seen);
        inner.pending.extend_from_slice(missed.events);
        if missed.lost {
            // More commands ran than the log keeps since this process last looked (it was cut
            // off from the notifications): the registrations of its I_T nexuses that are gone
            // were preempted or cleared.
            let gone = inner
                .pr
                .registrations
                .iter()
                .filter(|r| {
                    !shared
                        .pr
                        .registrations
                        .iter()
                        .any(|n| n.holder() == r.holder())
                })
                .map(|r| PrEvent {
                    seq: shared.events.last_seq(),
                    sender: None,
                    target: r.holder(),
                    attention: Some(crate::unit_attention::REGISTRATIONS_PREEMPTED),
                    abort: false,
                });
            inner.pending.extend(gone.collect::<Vec<_>>());
        }
        if !inner.pending.is_empty() {
            self.flags.fetch_or(PENDING, Ordering::AcqRel);
        }
        inner.seen = shared.events.last_seq();
        inner.pr = shared.pr;
        inner.shared_legacy = shared.spc2;
        inner.events = shared.events;
        inner.version = version;
        self.publish(inner);
        Ok(())
    }

    /// Before a command of `lu` is checked for unit attentions: with a shared store that
    /// changed, reads it, and gives this process's I_T nexuses the unit attentions another
    /// gateway's PERSISTENT RESERVE OUT raised for them (and lifts their PREVENT MEDIUM
    /// REMOVAL if it was a PREEMPT AND ABORT). One atomic load when nothing changed. A store
    /// that cannot be read is tried again by the next command (the gate refuses what it must).
    pub(crate) fn catch_up(&self, lu: &crate::LogicalUnit, fabric: &Fabric) {
        if self.flags.load(Ordering::Acquire) & (STALE | PENDING) == 0 {
            return;
        }
        let pending = {
            let mut inner = self.lock();
            let _ = self.refresh(&mut inner, false);
            self.flags.fetch_and(!PENDING, Ordering::AcqRel);
            std::mem::take(&mut inner.pending)
        };
        deliver(lu, fabric, &pending);
    }

    /// Whether `nexus` may run a command of treatment `access` (call when [`active`]).
    pub(crate) fn gate(
        &self,
        nexus: NexusId,
        fabric: &Fabric,
        access: Access,
    ) -> Result<(), Failure> {
        let mut inner = self.lock();
        if self.shared_store().is_some() && !access.spc2 {
            // Another gateway may have reserved or released (RESERVE or PERSISTENT RESERVE).
            // Commands no reservation refuses (INQUIRY, REPORT TARGET PORT GROUPS...) never
            // wait for the store, so they are answered even when it cannot be read.
            self.refresh(&mut inner, false)?;
        }
        if self.legacy_conflict(&inner, nexus, fabric) && !access.spc2 {
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
            if let Some(mine) = inner.legacy_holder.take() {
                self.clear_shared_legacy(&mut inner, |h| *h == mine);
            }
            self.publish(&inner);
        }
    }

    /// A logical unit or target reset releases a RESERVE reservation (SAM-5 6.3), never a
    /// persistent one; with a shared store, whichever gateway's I_T nexus holds it.
    pub(crate) fn reset(&self) {
        let mut inner = self.lock();
        inner.legacy = None;
        inner.legacy_holder = None;
        self.clear_shared_legacy(&mut inner, |_| true);
        self.publish(&inner);
    }

    /// Forgets a RESERVE reservation held through this process, without touching a shared
    /// store (a reset through another gateway, which released it there).
    pub(crate) fn reset_local(&self) {
        let mut inner = self.lock();
        inner.legacy = None;
        inner.legacy_holder = None;
        self.publish(&inner);
    }

    /// Removes the shared RESERVE holder if `which` it is (no-op without a shared store). On
    /// a failure (the cluster unreachable) the state is marked stale, so the next command
    /// reads what the store holds; the reservation stays until released again or the logical
    /// unit is reset.
    fn clear_shared_legacy(&self, inner: &mut Inner, which: impl Fn(&Holder) -> bool) {
        if self.shared_store().is_none() {
            return;
        }
        let cleared = self.update_shared_legacy(inner, |inner| {
            Ok(inner
                .shared_legacy
                .as_ref()
                .is_some_and(&which)
                .then_some(None))
        });
        if cleared.is_err() {
            self.flags.fetch_or(STALE, Ordering::AcqRel);
        }
    }

    /// Changes the shared RESERVE holder by compare-and-write: `decide` sees the state just
    /// read and says what the holder becomes (`None`: leave it), or fails the command; a
    /// lost race decides again on the newer state.
    fn update_shared_legacy(
        &self,
        inner: &mut Inner,
        decide: impl Fn(&Inner) -> Result<Option<Option<Holder>>, Failure>,
    ) -> Result<(), Failure> {
        let Some(store) = self.shared_store() else {
            return Ok(());
        };
        let save_error = || SenseData::new(SenseKey::HARDWARE_ERROR, 0x44, 0x00);
        for _ in 0..=MAX_SHARED_RETRIES {
            self.refresh(inner, true)?;
            let Some(next) = decide(inner)? else {
                return Ok(());
            };
            let text = persist::encode_shared(&inner.pr, next.as_ref(), &inner.events);
            match store.save_if(inner.version, text.as_bytes()) {
                Ok(Some(version)) => {
                    inner.version = version;
                    inner.shared_legacy = next;
                    self.publish(inner);
                    return Ok(());
                }
                Ok(None) => continue,
                Err(_) => return Err(save_error().into()),
            }
        }
        Err(save_error().into())
    }

    /// Attaches the store APTPL state is kept in, and restores what it holds.
    /// A shared store (other gateways' changes) is read again whenever it says it changed.
    pub(crate) fn attach_store(&self, store: Arc<dyn StateStore>) -> Result<(), RestoreError> {
        let shared = store.shared();
        let (bytes, version) = store.load_versioned()?;
        let restored = match bytes {
            Some(bytes) if shared => persist::decode_shared(&String::from_utf8_lossy(&bytes))?,
            Some(bytes) => persist::SharedState {
                pr: persist::decode(&String::from_utf8_lossy(&bytes))?,
                ..Default::default()
            },
            None => persist::SharedState::default(),
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
        // Events logged before this process started are for I_T nexuses that are gone.
        inner.seen = restored.events.last_seq();
        inner.pr = restored.pr;
        inner.shared_legacy = restored.spc2;
        inner.events = restored.events;
        inner.version = version;
        self.publish(&inner);
        Ok(())
    }
}

/// Gives the I_T nexuses of this process that `events` name their unit attentions, and lifts
/// the PREVENT MEDIUM REMOVAL of those a PREEMPT AND ABORT preempted (SPC-4 5.12.11.2.5 c)).
/// The sender of each command gets nothing ([`PrEvent::covers`]).
fn deliver(lu: &crate::LogicalUnit, fabric: &Fabric, events: &[PrEvent]) {
    for e in events {
        for n in fabric.nexuses_where(|id| e.covers(id)) {
            if let Some(code) = e.attention {
                lu.establish(n, code);
            }
            if e.abort {
                lu.state().prevent.remove(&n);
            }
        }
    }
}

/// The RESERVE holder an I_T nexus of identity `id` is.
fn holder_of(id: &crate::ports::NexusIdentity) -> Holder {
    Holder {
        initiator: id.initiator.clone(),
        port: id.target_port,
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
    if res.legacy_held(&inner) {
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
    {
        let inner = res.lock();
        if res.legacy_held(&inner) {
            return Err(Failure::Conflict);
        }
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
        if res.legacy_held(&inner) {
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
            if res.legacy_held(&inner) {
                return Err(Failure::Conflict);
            }
            let mut next = inner.pr.clone();
            let effects = prout::apply(&mut next, &req)?;
            match store {
                Some(store) if store.shared() => {
                    // What it asks of other I_T nexuses goes in the log, for every gateway's.
                    let mut events = inner.events.clone();
                    events.record(&holder_of(&me), &effects.unit_attentions, &effects.aborted);
                    let text = persist::encode_shared(&next, inner.shared_legacy.as_ref(), &events);
                    match store.save_if(inner.version, text.as_bytes()) {
                        Ok(Some(version)) => {
                            inner.version = version;
                            // This process delivers its own command's events below.
                            inner.seen = events.last_seq();
                            inner.events = events;
                        }
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
            res.flags.fetch_and(!PENDING, Ordering::AcqRel);
            break (effects, std::mem::take(&mut inner.pending));
        }
    };
    let (effects, others) = effects;
    // Other gateways' commands read meanwhile come first.
    deliver(cmd.lu, cmd.fabric, &others);
    // Unit attentions and aborts reach the I_T nexuses the registrations name (the sender
    // never gets a unit attention for its own command).
    for (reg, code) in effects.unit_attentions {
        for n in cmd.fabric.nexuses_where(|id| reg.covers(id)) {
            if n != cmd.nexus {
                cmd.lu.establish(n, code);
            }
        }
    }
    if !effects.aborted.is_empty() && res.shared_store().is_some() {
        // The other gateways abort the tasks of their preempted I_T nexuses before this
        // command's status goes out.
        if let Some(peers) = cmd.lu.alua().controller() {
            let holders: Vec<Holder> = effects.aborted.iter().map(Registration::holder).collect();
            peers.preempted_and_aborted(&holders);
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

#[cfg(test)]
#[path = "shared_tests.rs"]
mod shared_tests;
