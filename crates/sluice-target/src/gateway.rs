//! RBD LUNs exported by several gateways (SPC-4 5.15, asymmetric logical unit access).
//!
//! Each `sluice target` that exports an image keeps the logical unit's persistent
//! reservations in the image's shared RADOS object (`sluice.lu.<image>`, see
//! `sluice_storage::LuObject`) instead of a local state file, so every gateway answers
//! PERSISTENT RESERVE IN alike, enforces a reservation made through another, and the state
//! outlives every gateway's restart.
//!
//! With a [`GatewayConfig`], a coordinator thread per LU also follows the image's RBD
//! exclusive lock into the LU's ALUA states: the lock holder's group is active/optimized,
//! every other group the configured non-owner state (active/non-optimized or standby). Once
//! a second it
//! - as the owner, checks it still holds the lock: a lock broken by another gateway means
//!   this one is fenced (its client blocklisted, every write refused by the cluster), and its
//!   own group becomes unavailable;
//! - as a non-owner, asks every gateway who is alive (a notify on the shared object that
//!   each live gateway acks with its group). The owner's group becomes active/optimized; an
//!   owner that did not ack within 3 s is dead or hung: its lock is broken
//!   (librbd blocklists its client) and this gateway takes the lock;
//! - takes a lock nobody holds.
//!
//! SET TARGET PORT GROUPS moves the lock: the group asked to become active/optimized takes
//! it once the owner released it (a "transfer" notify), and an owner asked to step down
//! releases it. A command that writes through an active/non-optimized gateway moves the lock
//! the same way before it runs (an implicit transition, SPC-4 5.15.2.2): only the holder of
//! the exclusive lock can write the image.

use std::io;
use std::sync::Arc;

use sluice_scsi::LogicalUnit;

use crate::config::{GatewayConfig, LunDef, RbdImage};
use crate::swap_device::Backing;

/// What a LUN's gateway role needs after its logical unit exists.
pub(crate) struct Gateway {
    #[cfg(feature = "rbd")]
    object: Arc<sluice_storage::LuObject>,
    #[cfg(feature = "rbd")]
    device: Arc<sluice_storage::RbdDevice>,
}

/// Opens an RBD LUN and the object it shares with the other gateways.
#[cfg(feature = "rbd")]
pub(crate) fn open_rbd(l: &LunDef, image: &RbdImage) -> io::Result<(Backing, Option<Gateway>)> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("LUN {}: {e}", l.number));
    let dev = sluice_storage::RbdDevice::open(image, l.block_size, l.read_only).map_err(named)?;
    let object = Arc::new(dev.shared_object().map_err(named)?);
    let device = Arc::new(dev);
    Ok((
        Backing::Other(Arc::clone(&device) as _),
        Some(Gateway { object, device }),
    ))
}

/// Without the `rbd` feature there is nothing to share.
#[cfg(not(feature = "rbd"))]
pub(crate) fn open_rbd(l: &LunDef, _image: &RbdImage) -> io::Result<(Backing, Option<Gateway>)> {
    Ok((crate::context::open_backend(l)?, None))
}

impl Gateway {
    /// Keeps `lu`'s persistent reservations in the shared object (restoring what it holds).
    pub(crate) fn attach(&self, lu: &LogicalUnit, l: &LunDef) -> io::Result<()> {
        #[cfg(feature = "rbd")]
        lu.attach_reservation_store(Arc::clone(&self.object) as _)
            .map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("LUN {}: the shared reservation state: {e}", l.number),
                )
            })?;
        #[cfg(not(feature = "rbd"))]
        let _ = (lu, l);
        Ok(())
    }

    /// Starts following the image's exclusive lock into `lu`'s ALUA states (until `lu` is
    /// dropped), and hands it SET TARGET PORT GROUPS.
    pub(crate) fn coordinate(&self, lu: &Arc<LogicalUnit>, config: &GatewayConfig) {
        #[cfg(feature = "rbd")]
        coordinator::start(&self.device, &self.object, lu, config);
        #[cfg(not(feature = "rbd"))]
        let _ = (lu, config);
    }
}

#[cfg(feature = "rbd")]
mod coordinator {
    use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
    use std::time::{Duration, Instant};

    use sluice_scsi::{AccessState, AluaController, LogicalUnit, SenseData, SenseKey};
    use sluice_storage::{LuObject, RbdDevice};

    use crate::config::GatewayConfig;

    /// How long a non-owner waits for the owner's ack before it declares it dead.
    const PING_TIMEOUT: Duration = Duration::from_secs(3);
    /// How often ownership is checked.
    const TICK: Duration = Duration::from_secs(1);
    /// How long an owner that released the lock on request leaves it to the others.
    const YIELD: Duration = Duration::from_secs(10);
    /// How long SET TARGET PORT GROUPS waits for the transfer it asked for.
    const TRANSFER_TIMEOUT: Duration = Duration::from_secs(15);

    const PING: &[u8] = b"ping";
    const TRANSFER: &str = "transfer ";
    const ALIVE: &str = "gateway ";

    #[derive(Clone, Copy, Debug, Eq, PartialEq)]
    enum Role {
        Owner,
        NonOwner,
        /// Its lock was broken: blocklisted, it can never write again (a restart rejoins).
        Fenced,
    }

    #[derive(Debug)]
    struct State {
        role: Role,
        /// The group asked to become the owner by a transfer notify, and until when.
        transfer_to: Option<(u16, Instant)>,
        /// Leave an unowned lock to the others until then.
        yield_until: Option<Instant>,
        /// Wake the thread now.
        wake: bool,
        /// Tell the other gateways this one wants the lock (a write arrived through it).
        announce: bool,
    }

    #[derive(Debug)]
    struct Coordinator {
        device: Arc<RbdDevice>,
        object: Arc<LuObject>,
        lu: Weak<LogicalUnit>,
        me: u16,
        /// This gateway's client addresses, sent in its acks: a lock owner name is one.
        addresses: String,
        groups: Vec<u16>,
        non_owner: AccessState,
        state: Mutex<State>,
        changed: Condvar,
        /// Serialises ownership changes (the thread's and SET TARGET PORT GROUPS').
        ownership: Mutex<()>,
    }

    pub(super) fn start(
        device: &Arc<RbdDevice>,
        object: &Arc<LuObject>,
        lu: &Arc<LogicalUnit>,
        config: &GatewayConfig,
    ) {
        let c = Arc::new(Coordinator {
            device: Arc::clone(device),
            object: Arc::clone(object),
            lu: Arc::downgrade(lu),
            me: config.group,
            addresses: device.client_addresses().unwrap_or_default(),
            groups: config.groups.clone(),
            non_owner: config.non_owner,
            state: Mutex::new(State {
                role: Role::NonOwner,
                transfer_to: None,
                yield_until: None,
                wake: false,
                announce: false,
            }),
            changed: Condvar::new(),
            ownership: Mutex::new(()),
        });
        let weak = Arc::downgrade(&c);
        object.subscribe(Arc::new(move |payload: &[u8]| {
            let c = weak.upgrade()?;
            c.on_notify(payload)
        }));
        lu.set_alua_controller(Arc::new(Controller(Arc::clone(&c))));
        let spawned = std::thread::Builder::new()
            .name(format!("gateway-{}", device.name()))
            .spawn(move || c.run());
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the gateway coordinator");
        }
    }

    impl Coordinator {
        fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
            self.state.lock().unwrap_or_else(PoisonError::into_inner)
        }

        /// A notify from another gateway (on a librados thread: only notes and wakes).
        fn on_notify(&self, payload: &[u8]) -> Option<Vec<u8>> {
            if payload == PING {
                return Some(format!("{ALIVE}{} {}", self.me, self.addresses).into_bytes());
            }
            let text = std::str::from_utf8(payload).ok()?;
            let group: u16 = text.strip_prefix(TRANSFER)?.parse().ok()?;
            let mut st = self.lock_state();
            st.transfer_to = Some((group, Instant::now() + TRANSFER_TIMEOUT));
            st.wake = true;
            self.changed.notify_all();
            None
        }

        fn run(self: Arc<Self>) {
            let mut last_error = String::new();
            while self.lu.strong_count() > 0 {
                if let Err(e) = self.tick() {
                    let text = e.to_string();
                    if text != last_error {
                        tracing::warn!(image = self.device.name(), error = %text, "gateway coordination");
                        last_error = text;
                    }
                }
                let st = self.lock_state();
                let (mut st, _) = self
                    .changed
                    .wait_timeout_while(st, TICK, |s| !s.wake)
                    .unwrap_or_else(PoisonError::into_inner);
                st.wake = false;
            }
        }

        /// Sets the LU's states for `owner` (`None`: nobody is known to own it).
        fn apply(&self, owner: Option<u16>, role: Role) {
            let Some(lu) = self.lu.upgrade() else {
                return;
            };
            let states: Vec<(u16, AccessState)> = self
                .groups
                .iter()
                .map(|g| {
                    let s = if *g == self.me && role == Role::Fenced {
                        AccessState::Unavailable
                    } else if Some(*g) == owner {
                        AccessState::ActiveOptimized
                    } else {
                        self.non_owner
                    };
                    (*g, s)
                })
                .collect();
            if lu.set_access_states(&states) {
                tracing::info!(
                    image = self.device.name(),
                    ?owner,
                    ?role,
                    "ALUA states changed"
                );
            }
        }

        fn tick(&self) -> std::io::Result<()> {
            let _serial = self
                .ownership
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let announce = std::mem::take(&mut self.lock_state().announce);
            if announce {
                // Heard by every gateway, this one included: the owner releases, this one
                // takes the lock once it is free.
                let msg = format!("{TRANSFER}{}", self.me);
                self.object.notify(msg.as_bytes(), PING_TIMEOUT)?;
            }
            let (role, transfer_to, yield_until) = {
                let mut st = self.lock_state();
                if st
                    .transfer_to
                    .is_some_and(|(_, until)| until < Instant::now())
                {
                    st.transfer_to = None;
                }
                (st.role, st.transfer_to.map(|(g, _)| g), st.yield_until)
            };
            if role == Role::Fenced {
                return Ok(());
            }
            let holds = self.device.holds_lock();
            if role == Role::Owner && !matches!(holds, Ok(true)) {
                tracing::error!(
                    image = self.device.name(),
                    "this gateway lost the exclusive lock: it is fenced and refuses the LU \
                     until it is restarted"
                );
                self.set_role(Role::Fenced);
                self.apply(None, Role::Fenced);
                return Ok(());
            }
            if holds? {
                if let Some(g) = transfer_to.filter(|g| *g != self.me) {
                    // SET TARGET PORT GROUPS through some gateway asked for group `g`.
                    self.device.release_lock()?;
                    let mut st = self.lock_state();
                    st.role = Role::NonOwner;
                    st.yield_until = Some(Instant::now() + YIELD);
                    st.transfer_to = None;
                    drop(st);
                    tracing::info!(image = self.device.name(), to = g, "released the lock");
                    self.apply(None, Role::NonOwner);
                    return Ok(());
                }
                self.set_role(Role::Owner);
                self.apply(Some(self.me), Role::Owner);
                return Ok(());
            }
            let owners = self.device.lock_owners()?;
            let Some(owner) = owners.first() else {
                let wanted = transfer_to == Some(self.me);
                let yielding = yield_until.is_some_and(|t| t > Instant::now());
                if wanted || (!yielding && transfer_to.is_none()) {
                    self.take()?;
                }
                return Ok(());
            };
            let acks = self.object.notify(PING, PING_TIMEOUT)?;
            // The owner is the gateway whose client has the lock owner's address.
            let alive = acks.iter().find_map(|a| {
                let text = std::str::from_utf8(&a.payload).ok()?.strip_prefix(ALIVE)?;
                let (group, addresses) = text.split_once(' ')?;
                addresses
                    .contains(owner.as_str())
                    .then(|| group.parse::<u16>().ok())?
            });
            match alive {
                Some(group) => {
                    self.set_role(Role::NonOwner);
                    self.apply(Some(group), Role::NonOwner);
                }
                None => {
                    tracing::warn!(
                        image = self.device.name(),
                        owner = %owner,
                        "the lock owner did not answer within {PING_TIMEOUT:?}: breaking its \
                         lock (its client is blocklisted) and taking over"
                    );
                    self.device.break_lock(owner)?;
                    self.take()?;
                }
            }
            Ok(())
        }

        fn take(&self) -> std::io::Result<()> {
            self.device.lock_exclusive()?;
            {
                let mut st = self.lock_state();
                st.role = Role::Owner;
                st.transfer_to = None;
                st.yield_until = None;
            }
            tracing::info!(image = self.device.name(), group = self.me, "took the lock");
            self.apply(Some(self.me), Role::Owner);
            Ok(())
        }

        fn set_role(&self, role: Role) {
            self.lock_state().role = role;
        }

        fn role(&self) -> Role {
            self.lock_state().role
        }

        /// Wakes the thread and waits (at most `timeout`) until `done` holds.
        fn wait_for(&self, timeout: Duration, done: impl Fn(&Self) -> bool) -> bool {
            let deadline = Instant::now() + timeout;
            while Instant::now() < deadline {
                if done(self) {
                    return true;
                }
                {
                    let mut st = self.lock_state();
                    st.wake = true;
                    self.changed.notify_all();
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            done(self)
        }
    }

    /// SET TARGET PORT GROUPS for a gateway LU.
    #[derive(Debug)]
    struct Controller(Arc<Coordinator>);

    /// NOT READY, LOGICAL UNIT NOT ACCESSIBLE, ASYMMETRIC ACCESS STATE TRANSITION (SPC-4
    /// 5.15.2.5): the initiator retries.
    fn transitioning() -> SenseData {
        SenseData::new(SenseKey::NOT_READY, 0x04, 0x0A)
    }

    /// SET TARGET PORT GROUPS COMMAND FAILED (SPC-4 table 38: 67h/0Ah).
    fn stpg_failed() -> SenseData {
        SenseData::new(SenseKey::HARDWARE_ERROR, 0x67, 0x0A)
    }

    impl AluaController for Controller {
        fn request(&self, group: u16, state: AccessState) -> Result<(), SenseData> {
            let c = &self.0;
            let lu_state = |c: &Coordinator, g: u16| c.lu.upgrade().map(|lu| lu.access_state(g));
            match state {
                AccessState::ActiveOptimized => {
                    if lu_state(c, group) == Some(AccessState::ActiveOptimized) {
                        return Ok(());
                    }
                    // Every gateway hears it: the owner releases, `group`'s gateway takes.
                    let msg = format!("{TRANSFER}{group}");
                    c.object
                        .notify(msg.as_bytes(), PING_TIMEOUT)
                        .map_err(|_| stpg_failed())?;
                    let done = c.wait_for(TRANSFER_TIMEOUT, |c| {
                        lu_state(c, group) == Some(AccessState::ActiveOptimized)
                    });
                    if done {
                        Ok(())
                    } else {
                        Err(stpg_failed())
                    }
                }
                _ if group == c.me && c.role() == Role::Owner => {
                    // The owner steps down: another gateway takes the lock.
                    let _serial = c.ownership.lock().unwrap_or_else(PoisonError::into_inner);
                    c.device.release_lock().map_err(|_| stpg_failed())?;
                    {
                        let mut st = c.lock_state();
                        st.role = Role::NonOwner;
                        st.yield_until = Some(Instant::now() + YIELD);
                    }
                    c.apply(None, Role::NonOwner);
                    Ok(())
                }
                // Other groups' states follow who owns the LU.
                _ => Ok(()),
            }
        }

        fn write_through(&self, group: u16) -> Result<(), SenseData> {
            let c = &self.0;
            if group != c.me || c.role() == Role::Owner {
                return Ok(());
            }
            if c.role() == Role::Fenced {
                return Err(transitioning());
            }
            c.lock_state().announce = true;
            if c.wait_for(TRANSFER_TIMEOUT, |c| c.role() == Role::Owner) {
                Ok(())
            } else {
                Err(transitioning())
            }
        }
    }
}
