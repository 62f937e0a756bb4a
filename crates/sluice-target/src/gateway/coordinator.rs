//! The thread that keeps one gateway LU's ALUA states in line with the shared ownership
//! record, fails a dead owner over, and runs SET TARGET PORT GROUPS.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use sluice_scsi::parameter_lists::Holder;
use sluice_scsi::{AccessState, AluaController, LogicalUnit, SenseData, SenseKey, TransportId};
use sluice_storage::{LuObject, RbdDevice, StateStore};

use super::PeerAborts;
use crate::config::GatewayConfig;

/// How long a gateway waits for another's ack before it declares it dead.
const PING_TIMEOUT: Duration = Duration::from_secs(3);
/// How often ownership and liveness are checked.
const TICK: Duration = Duration::from_secs(1);
/// How long an owner that stepped down on request leaves the ownership to the others.
const YIELD: Duration = Duration::from_secs(10);
/// How long SET TARGET PORT GROUPS waits for the states it asked for.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(15);

const PING: &[u8] = b"ping";
/// Sent after the ownership record changed: every gateway reads it again at once.
const OWNER_CHANGED: &[u8] = b"owner-changed";
const ALIVE: &str = "gateway ";
/// `lu-reset <group>`: the LU was reset through that gateway.
const LU_RESET: &str = "lu-reset ";
/// How long a reset waits for the other gateways to have reset their part.
const RESET_NOTIFY_TIMEOUT: Duration = Duration::from_secs(1);
/// `pr-abort <group>` then one `<relative target port> <TransportID hex>` line per preempted
/// registration: a PREEMPT AND ABORT through that gateway preempted them.
const PR_ABORT: &str = "pr-abort ";
/// How long PREEMPT AND ABORT waits for the other gateways to have aborted the tasks (as
/// long as a liveness ping: a gateway silent for longer is declared dead and fenced).
const PR_ABORT_NOTIFY_TIMEOUT: Duration = PING_TIMEOUT;
/// The ownership record's first line.
const RECORD_MAGIC: &str = "sluice-owner 1";

#[derive(Clone, Copy, Debug, Eq, PartialEq)]
enum Role {
    Owner,
    NonOwner,
    /// Blocklisted by the cluster: it can never write again (a restart rejoins).
    Fenced,
}

#[derive(Debug)]
struct State {
    role: Role,
    /// Leave an unowned LU to the others until then.
    yield_until: Option<Instant>,
    /// Wake the thread now.
    wake: bool,
}

#[derive(Debug)]
struct Coordinator {
    device: Arc<RbdDevice>,
    /// The LU's shared object: liveness pings and change notifications travel on it.
    object: Arc<LuObject>,
    /// The ownership record.
    ownership: Arc<LuObject>,
    lu: Weak<LogicalUnit>,
    me: u16,
    /// This gateway's client addresses, sent in its acks: a lock owner name is one.
    addresses: String,
    groups: Vec<u16>,
    non_owner: AccessState,
    state: Mutex<State>,
    changed: Condvar,
    /// The client addresses each other gateway last acked with (to fence it when it dies).
    seen: Mutex<HashMap<u16, String>>,
    /// Serialises ownership changes (the thread's and SET TARGET PORT GROUPS').
    serial: Mutex<()>,
    /// Aborts the tasks another gateway's PREEMPT AND ABORT preempted.
    aborts: Arc<PeerAborts>,
}

pub(super) fn start(
    device: &Arc<RbdDevice>,
    object: &Arc<LuObject>,
    ownership: &Arc<LuObject>,
    lu: &Arc<LogicalUnit>,
    config: &GatewayConfig,
    aborts: Arc<PeerAborts>,
) {
    let c = Arc::new(Coordinator {
        device: Arc::clone(device),
        object: Arc::clone(object),
        ownership: Arc::clone(ownership),
        lu: Arc::downgrade(lu),
        me: config.group,
        addresses: device.client_addresses().unwrap_or_default(),
        groups: config.groups.clone(),
        non_owner: config.non_owner,
        state: Mutex::new(State {
            role: Role::NonOwner,
            yield_until: None,
            wake: false,
        }),
        changed: Condvar::new(),
        seen: Mutex::new(HashMap::new()),
        serial: Mutex::new(()),
        aborts,
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

/// What the ownership record says: the owner's group and its client's addresses (empty
/// when the gateway that wrote it did not know them).
#[derive(Clone, Debug, Default, Eq, PartialEq)]
struct Record {
    owner: Option<u16>,
    addresses: String,
}

/// The record's contents (`owner: None`: nobody, or no record yet).
fn parse_record(bytes: Option<&[u8]>) -> Record {
    let parse = || -> Option<Record> {
        let text = std::str::from_utf8(bytes?).ok()?;
        let mut lines = text.lines();
        if lines.next()? != RECORD_MAGIC {
            return None;
        }
        let rest = lines.find_map(|l| l.strip_prefix("owner "))?;
        let (group, addresses) = rest.split_once(' ').unwrap_or((rest, ""));
        Some(Record {
            owner: Some(group.parse().ok()?),
            addresses: addresses.trim().to_owned(),
        })
    };
    parse().unwrap_or_default()
}

/// The record's text.
fn record(r: &Record) -> String {
    match r.owner {
        Some(g) => format!("{RECORD_MAGIC}\nowner {g} {}\n", r.addresses),
        None => format!("{RECORD_MAGIC}\nowner none\n"),
    }
}

/// The message that tells the other gateways which registrations a PREEMPT AND ABORT through
/// gateway `group` preempted.
fn pr_abort_message(group: u16, preempted: &[Holder]) -> String {
    let mut text = format!("{PR_ABORT}{group}\n");
    for h in preempted {
        let id: String = h
            .initiator
            .to_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        text.push_str(&format!("{} {id}\n", h.port));
    }
    text
}

/// `(group, preempted registrations)` of a PREEMPT AND ABORT message; `None` for anything
/// else or a damaged one. At most `MAX_REGISTRATIONS` lines are read.
fn parse_pr_abort(payload: &[u8]) -> Option<(u16, Vec<Holder>)> {
    let text = std::str::from_utf8(payload).ok()?.strip_prefix(PR_ABORT)?;
    let mut lines = text.lines();
    let group = lines.next()?.parse().ok()?;
    let mut preempted = Vec::new();
    for line in lines {
        if preempted.len() >= sluice_scsi::MAX_REGISTRATIONS {
            return None;
        }
        let (port, id) = line.split_once(' ')?;
        if id.len() % 2 != 0 || id.len() > 2 * sluice_scsi::MAX_TRANSPORT_ID_BYTES {
            return None;
        }
        let bytes = (0..id.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(id.get(i..i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        let (initiator, used) = TransportId::parse(&bytes).ok()?;
        if used != bytes.len() {
            return None;
        }
        preempted.push(Holder {
            initiator,
            port: port.parse().ok()?,
        });
    }
    Some((group, preempted))
}

/// `(group, addresses)` of a liveness ack.
fn parse_ack(payload: &[u8]) -> Option<(u16, &str)> {
    let text = std::str::from_utf8(payload).ok()?.strip_prefix(ALIVE)?;
    let (group, addresses) = text.split_once(' ')?;
    Some((group.parse().ok()?, addresses))
}

/// The addresses in librados' list (`[v2:IP:PORT/NONCE,v1:IP:PORT/NONCE]` or one bare
/// address), without their protocol prefixes: what the blocklist takes.
fn client_addresses(list: &str) -> Vec<&str> {
    let mut all: Vec<&str> = list
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|a| {
            a.trim()
                .trim_start_matches("v2:")
                .trim_start_matches("v1:")
                .trim_start_matches("any:")
        })
        .filter(|a| !a.is_empty())
        .collect();
    all.dedup();
    all
}

impl Coordinator {
    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A notify from another gateway (on a librados thread: only answers, notes and wakes).
    fn on_notify(&self, payload: &[u8]) -> Option<Vec<u8>> {
        if payload == PING {
            return Some(format!("{ALIVE}{} {}", self.me, self.addresses).into_bytes());
        }
        if payload == OWNER_CHANGED {
            self.wake();
        }
        let reset_by = std::str::from_utf8(payload)
            .ok()
            .and_then(|t| t.strip_prefix(LU_RESET))
            .and_then(|g| g.parse::<u16>().ok());
        if reset_by.is_some_and(|g| g != self.me) {
            if let Some(lu) = self.lu.upgrade() {
                lu.reset_by_peer();
            }
        }
        if let Some((group, preempted)) = parse_pr_abort(payload) {
            if group != self.me {
                self.aborts.abort(&preempted);
            }
        }
        None
    }

    fn wake(&self) {
        self.lock_state().wake = true;
        self.changed.notify_all();
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
        self.lock_state().role = role;
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

    /// This gateway was blocklisted: it refuses the LU until it is restarted.
    fn fence(&self) {
        tracing::error!(
            image = self.device.name(),
            "this gateway was fenced (blocklisted by another gateway that found it dead): it \
             refuses the LU until it is restarted"
        );
        self.apply(None, Role::Fenced);
    }

    /// Reads the ownership record and its version.
    fn read_record(&self) -> std::io::Result<(Record, u64)> {
        let (bytes, version) = self.ownership.load_versioned()?;
        Ok((parse_record(bytes.as_deref()), version))
    }

    /// Names `owner` in the record (with its addresses, when known) if it is still at
    /// `version`; whether it did.
    fn write_record(&self, version: u64, owner: Option<u16>) -> std::io::Result<bool> {
        let addresses = match owner {
            Some(g) if g == self.me => self.addresses.clone(),
            Some(g) => self
                .seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&g)
                .cloned()
                .unwrap_or_default(),
            None => String::new(),
        };
        let text = record(&Record { owner, addresses });
        let done = self
            .ownership
            .compare_and_write(version, text.as_bytes())?
            .is_some();
        if done {
            tracing::info!(
                image = self.device.name(),
                ?owner,
                "ownership record written"
            );
        }
        Ok(done)
    }

    fn tick(&self) -> std::io::Result<()> {
        let _serial = self.serial.lock().unwrap_or_else(PoisonError::into_inner);
        if self.lock_state().role == Role::Fenced {
            return Ok(());
        }
        let (rec, version) = match self.read_record() {
            Err(e) if e.kind() == std::io::ErrorKind::NotConnected => {
                self.fence();
                return Ok(());
            }
            other => other?,
        };
        // Who is alive: every live gateway acks within the timeout.
        let alive: HashMap<u16, String> = self
            .object
            .notify(PING, PING_TIMEOUT)?
            .iter()
            .filter_map(|a| parse_ack(&a.payload).map(|(g, addr)| (g, addr.to_owned())))
            .collect();
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(alive.iter().map(|(g, a)| (*g, a.clone())));
        self.break_dead_lock(&alive)?;
        match rec.owner {
            // Recorded with this client's addresses, so that another gateway can fence it.
            Some(g) if g == self.me && rec.addresses != self.addresses => {
                if self.write_record(version, Some(g))? {
                    self.apply(Some(g), Role::Owner);
                }
            }
            Some(g) if g == self.me => self.apply(Some(g), Role::Owner),
            Some(g) if alive.contains_key(&g) => self.apply(Some(g), Role::NonOwner),
            Some(g) => {
                tracing::warn!(
                    image = self.device.name(),
                    owner = g,
                    "the owner did not answer within {PING_TIMEOUT:?}: fencing it \
                     (blocklisting its client) and taking over"
                );
                self.fence_group(g, &rec.addresses)?;
                if self.write_record(version, Some(self.me))? {
                    self.apply(Some(self.me), Role::Owner);
                    self.announce();
                }
            }
            None => {
                let yielding = self
                    .lock_state()
                    .yield_until
                    .is_some_and(|t| t > Instant::now());
                if !yielding && self.write_record(version, Some(self.me))? {
                    self.apply(Some(self.me), Role::Owner);
                    self.announce();
                } else {
                    self.apply(None, Role::NonOwner);
                }
            }
        }
        Ok(())
    }

    /// Breaks the exclusive lock of a holder that is no live gateway (dead, hung or cut off):
    /// librbd blocklists it, so nothing it still has in flight reaches the image, and the
    /// live gateways' writes can take the lock again.
    fn break_dead_lock(&self, alive: &HashMap<u16, String>) -> std::io::Result<()> {
        for holder in self.device.lock_owners()? {
            let live = self.addresses.contains(holder.as_str())
                || alive.values().any(|a| a.contains(holder.as_str()));
            if !live {
                tracing::warn!(
                    image = self.device.name(),
                    holder = %holder,
                    "the exclusive lock's holder did not answer within {PING_TIMEOUT:?}: \
                     breaking its lock (its client is blocklisted)"
                );
                self.device.break_lock(&holder)?;
            }
        }
        Ok(())
    }

    /// Blocklists the client of gateway `group` (the addresses the record names, and those
    /// it last answered a ping with), whether or not it holds the lock now, so it cannot
    /// write again even if it was only hung.
    fn fence_group(&self, group: u16, recorded: &str) -> std::io::Result<()> {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&group)
            .cloned()
            .unwrap_or_default();
        let mut addresses = client_addresses(recorded);
        addresses.extend(client_addresses(&seen));
        addresses.sort_unstable();
        addresses.dedup();
        if addresses.is_empty() {
            // Only a record written before the owner's first tick lacks them.
            tracing::warn!(
                image = self.device.name(),
                group,
                "the silent owner's client address is unknown: it is not blocklisted (its \
                 lock is broken if it holds it)"
            );
        }
        for address in addresses {
            self.device.blocklist(address)?;
            tracing::info!(image = self.device.name(), group, address, "blocklisted");
        }
        Ok(())
    }

    /// Tells every gateway the record changed (each reads it again at once).
    fn announce(&self) {
        if let Err(e) = self.object.notify(OWNER_CHANGED, PING_TIMEOUT) {
            tracing::warn!(image = self.device.name(), error = %e, "cannot notify the gateways");
        }
    }

    /// Names `owner` in the record, whatever it named before (SET TARGET PORT GROUPS).
    fn set_owner(&self, owner: Option<u16>) -> std::io::Result<()> {
        let _serial = self.serial.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let (_, version) = self.read_record()?;
            if self.write_record(version, owner)? {
                break;
            }
        }
        let role = if owner == Some(self.me) {
            Role::Owner
        } else {
            Role::NonOwner
        };
        self.apply(owner, role);
        self.announce();
        Ok(())
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
            self.wake();
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
        if c.role() == Role::Fenced {
            return Err(stpg_failed());
        }
        let lu_state = |c: &Coordinator, g: u16| c.lu.upgrade().map(|lu| lu.access_state(g));
        match state {
            AccessState::ActiveOptimized => {
                if lu_state(c, group) == Some(AccessState::ActiveOptimized) {
                    return Ok(());
                }
                c.set_owner(Some(group)).map_err(|_| stpg_failed())?;
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
                // The owner steps down: another gateway takes the LU.
                c.lock_state().yield_until = Some(Instant::now() + YIELD);
                c.set_owner(None).map_err(|_| stpg_failed())
            }
            // Other groups' states follow who owns the LU.
            _ => Ok(()),
        }
    }

    /// A write through an active/non-optimized gateway runs there: librbd moves the
    /// exclusive lock to this client for it (and back when the owner writes again), while
    /// the ownership, and so every group's ALUA state, stays as it is.
    fn write_through(&self, group: u16) -> Result<(), SenseData> {
        if group == self.0.me && self.0.role() == Role::Fenced {
            return Err(transitioning());
        }
        Ok(())
    }

    /// Every other gateway resets its part of the LU (unit attentions for its I_T nexuses)
    /// before this reset's response goes out; a gateway that does not ack within a second
    /// is dead or about to be fenced.
    fn logical_unit_reset(&self) {
        let c = &self.0;
        let msg = format!("{LU_RESET}{}", c.me);
        if let Err(e) = c.object.notify(msg.as_bytes(), RESET_NOTIFY_TIMEOUT) {
            tracing::warn!(image = c.device.name(), error = %e, "cannot tell the gateways of a reset");
        }
    }

    /// Every other gateway aborts the tasks of its preempted I_T nexuses before the PREEMPT
    /// AND ABORT's status goes out. One that does not ack in time is dead, hung or cut off:
    /// if it owns the LU it is fenced within seconds (its writes refused by the cluster);
    /// otherwise it aborts nothing, and refuses the preempted nexuses' next commands once it
    /// reads the shared state again (docs/ceph.md).
    fn preempted_and_aborted(&self, preempted: &[Holder]) {
        let c = &self.0;
        let msg = pr_abort_message(c.me, preempted);
        match c.object.notify(msg.as_bytes(), PR_ABORT_NOTIFY_TIMEOUT) {
            Ok(acks) if acks.len() < c.groups.len() => tracing::warn!(
                image = c.device.name(),
                acked = acks.len(),
                gateways = c.groups.len(),
                "PREEMPT AND ABORT: not every gateway confirmed it aborted the preempted tasks"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(
                image = c.device.name(),
                error = %e,
                "cannot tell the gateways of a PREEMPT AND ABORT"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        for r in [
            Record::default(),
            Record {
                owner: Some(1),
                addresses: "[v2:127.0.0.1:0/5,v1:127.0.0.1:0/5]".into(),
            },
            Record {
                owner: Some(65535),
                addresses: String::new(),
            },
        ] {
            assert_eq!(parse_record(Some(record(&r).as_bytes())), r);
        }
        let nobody = Record::default();
        assert_eq!(parse_record(None), nobody);
        assert_eq!(parse_record(Some(b"")), nobody);
        assert_eq!(parse_record(Some(b"owner 3\n")), nobody, "no magic line");
        assert_eq!(parse_record(Some(b"sluice-owner 1\nowner x\n")), nobody);
        assert_eq!(parse_record(Some(&[0xff, 0xfe])), nobody);
    }

    #[test]
    fn acks_name_a_group_and_addresses() {
        assert_eq!(
            parse_ack(b"gateway 2 [v2:127.0.0.2:0/123,v1:127.0.0.2:0/123]"),
            Some((2, "[v2:127.0.0.2:0/123,v1:127.0.0.2:0/123]"))
        );
        assert_eq!(parse_ack(b"gateway x y"), None);
        assert_eq!(parse_ack(b"hello"), None);
        assert_eq!(parse_ack(b""), None);
    }

    #[test]
    fn pr_abort_messages_round_trip_and_are_bounded() {
        let preempted = vec![
            Holder {
                initiator: TransportId::iscsi_port("iqn.2026-11.test:a", [0x80, 0, 0, 0x5e, 0, 1]),
                port: 1,
            },
            Holder {
                initiator: TransportId::iscsi_device("iqn.2026-11.test:b"),
                port: 2,
            },
        ];
        let msg = pr_abort_message(2, &preempted);
        assert!(msg.starts_with("pr-abort 2\n1 "), "{msg}");
        assert_eq!(parse_pr_abort(msg.as_bytes()), Some((2, preempted.clone())));
        assert_eq!(parse_pr_abort(b"pr-abort 3\n"), Some((3, Vec::new())));
        for bad in [
            "pr-abort x\n".to_owned(),
            msg.replacen("\n1 ", "\nx ", 1),
            msg.replacen("\n1 ", "\n1", 1),
            format!("{}0\n", msg.trim_end()),
            format!("{msg}1 4\n"),
            format!(
                "{msg}1 {}\n",
                "00".repeat(sluice_scsi::MAX_TRANSPORT_ID_BYTES + 1)
            ),
        ] {
            assert_eq!(parse_pr_abort(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(parse_pr_abort(b"lu-reset 1"), None);
        assert_eq!(parse_pr_abort(&[0xff, 0xfe]), None);
        // What comes through the cluster is untrusted: at most one line per registration.
        let line = msg.lines().nth(1).unwrap();
        let full = format!(
            "pr-abort 1\n{}",
            format!("{line}\n").repeat(sluice_scsi::MAX_REGISTRATIONS)
        );
        assert_eq!(
            parse_pr_abort(full.as_bytes()).map(|(_, v)| v.len()),
            Some(sluice_scsi::MAX_REGISTRATIONS)
        );
        assert_eq!(parse_pr_abort(format!("{full}{line}\n").as_bytes()), None);
    }

    #[test]
    fn blocklist_addresses_lose_their_protocol() {
        assert_eq!(
            client_addresses("[v2:127.0.0.2:0/123,v1:127.0.0.2:0/123]"),
            ["127.0.0.2:0/123"]
        );
        assert_eq!(client_addresses("127.0.0.1:0/9"), ["127.0.0.1:0/9"]);
        assert!(client_addresses("").is_empty());
    }
}
