//! An emulated network link between two network namespaces, in user space: the machine's
//! kernel has no netem, so packets cross from one TUN device to the other through
//! `forward.rs`, which serialises them at each direction's rate behind a tail-drop queue,
//! adds its one-way delay (with jitter, if asked) and loses packets at random (if asked).
//! The initiator stays in this process's namespace (`10.201.N.1`); the target runs inside the
//! link's namespace (`10.201.N.2`, started with `ip netns exec`, or sockets opened there with
//! [`EmulatedLink::in_netns`]). The settings may change between runs
//! ([`EmulatedLink::set_spec`]); `accuracy.rs` measures what the link really does. Needs root
//! (CAP_NET_ADMIN) and the `ip` command. Every `sluice lab` study that needs more than
//! loopback uses this one link.

mod accuracy;
mod forward;
mod spec;
mod tun;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

pub use accuracy::{LinkAccuracy, RttProbe};
pub use forward::{DirectionCounters, Lateness};
pub use spec::{LinkSpec, PathSpec};
pub(crate) use tun::precise_timers;

use crate::error::LabError;

/// A running emulated link; dropping it removes the namespace and both devices.
pub struct EmulatedLink {
    spec: LinkSpec,
    /// Each direction's settings as the forwarder reads them, packet by packet.
    paths: [Arc<Mutex<PathSpec>>; 2],
    netns: String,
    subnet: u8,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Initiator to target.
    pub forward: Arc<DirectionCounters>,
    /// Target to initiator.
    pub backward: Arc<DirectionCounters>,
}

fn ip(args: &[&str]) -> Result<(), LabError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| LabError::Link(format!("running ip {}: {e}", args.join(" "))))?;
    if !out.status.success() {
        return Err(LabError::Link(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// The prefix of a link's namespace: `sluicelab-PID-N`, the N-th link of process PID.
/// (Builds before links were counted named theirs `sluice-lab-PID` and delete any
/// `sluice-lab-*` whose PID is not a live process: a counted name under their prefix would
/// be deleted while in use.)
const NETNS_PREFIX: &str = "sluicelab-";

/// Removes namespaces left by labs whose process is gone.
fn remove_stale() {
    let Ok(dir) = std::fs::read_dir("/var/run/netns") else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix(NETNS_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .or_else(|| name.strip_prefix("sluice-lab-"));
        if let Some(pid) = pid {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = ip(&["netns", "del", &name]);
            }
        }
    }
}

/// A `10.201.N.0/30` subnet no interface of this namespace uses yet, trying `first` and up:
/// two links on the same subnet would route each other's packets.
fn free_subnet(first: u32) -> Result<u8, LabError> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .map_err(|e| LabError::Link(format!("running ip addr show: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    (0..250)
        .map(|i| ((first + i) % 250) as u8)
        .find(|n| !text.contains(&format!(" 10.201.{n}.")))
        .ok_or_else(|| LabError::Link("every 10.201.N.0/30 subnet is in use".into()))
}

impl EmulatedLink {
    /// Creates the namespace, the devices and the forwarder.
    pub fn start(spec: LinkSpec) -> Result<Self, LabError> {
        // SAFETY: geteuid has no arguments and cannot fail.
        #[allow(unsafe_code)]
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            return Err(LabError::Link(
                "an emulated link needs root (network namespaces and TUN devices)".into(),
            ));
        }
        remove_stale();
        // Links of one process (tests run several at once) are told apart by a counter.
        static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = STARTED.fetch_add(1, Ordering::Relaxed) % 100;
        let pid = std::process::id();
        let netns = format!("{NETNS_PREFIX}{pid}-{n}");
        let subnet = free_subnet(pid + n)?;
        // Interface names are at most 15 bytes: 3 + 7 digits of pid + 1 + 2.
        let (a_name, b_name) = (format!("slA{pid}x{n}"), format!("slB{pid}x{n}"));
        ip(&["netns", "add", &netns])?;
        let mut link = Self {
            spec,
            paths: [
                Arc::new(Mutex::new(spec.forward)),
                Arc::new(Mutex::new(spec.backward)),
            ],
            netns: netns.clone(),
            subnet,
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            forward: Arc::default(),
            backward: Arc::default(),
        };
        let io = |what: &str, e: std::io::Error| LabError::Link(format!("{what}: {e}"));
        let a = tun::open_tun(&a_name).map_err(|e| io("creating the initiator's TUN", e))?;
        let b_name2 = b_name.clone();
        let b = tun::in_netns(&netns, move || tun::open_tun(&b_name2))
            .map_err(|e| io("creating the target's TUN", e))?;
        let mtu = spec.mtu.to_string();
        let (ia, ta) = (link.initiator_addr(), link.target_addr());
        ip(&["addr", "add", &format!("{ia}/30"), "dev", &a_name])?;
        ip(&["link", "set", "dev", &a_name, "mtu", &mtu, "up"])?;
        ip(&[
            "-n",
            &netns,
            "addr",
            "add",
            &format!("{ta}/30"),
            "dev",
            &b_name,
        ])?;
        ip(&[
            "-n", &netns, "link", "set", "dev", &b_name, "mtu", &mtu, "up",
        ])?;
        ip(&["-n", &netns, "link", "set", "dev", "lo", "up"])?;
        let dup = |fd| tun::dup(fd).map_err(|e| io("duplicating a TUN descriptor", e));
        let (a2, b2) = (dup(&a)?, dup(&b)?);
        link.threads.extend(forward::direction(
            Arc::clone(&link.paths[0]),
            spec.seed,
            a,
            b,
            Arc::clone(&link.stop),
            Arc::clone(&link.forward),
        ));
        link.threads.extend(forward::direction(
            Arc::clone(&link.paths[1]),
            spec.seed.wrapping_add(1),
            b2,
            a2,
            Arc::clone(&link.stop),
            Arc::clone(&link.backward),
        ));
        Ok(link)
    }

    /// The link's settings.
    pub fn spec(&self) -> LinkSpec {
        self.spec
    }

    /// Changes the link's rate, delay, jitter, loss and queues from the next packet on (the
    /// packets already scheduled keep their times). The MTU is fixed when the link starts.
    pub fn set_spec(&mut self, spec: LinkSpec) -> Result<(), LabError> {
        if spec.mtu != self.spec.mtu {
            return Err(LabError::Link(format!(
                "the MTU is fixed when the link starts ({}, asked {})",
                self.spec.mtu, spec.mtu
            )));
        }
        for (slot, path) in self.paths.iter().zip([spec.forward, spec.backward]) {
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = path;
        }
        self.spec = spec;
        Ok(())
    }

    /// Runs `f` on a thread inside the link's namespace and returns what it returns:
    /// sockets it opens (a listener, say) stay in that namespace wherever they are used.
    pub fn in_netns<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
    ) -> Result<T, LabError> {
        tun::in_netns(&self.netns, f)
            .map_err(|e| LabError::Link(format!("inside namespace {}: {e}", self.netns)))
    }

    /// The namespace the target must run in (`ip netns exec NAME ...`).
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// The initiator's address (this namespace).
    pub fn initiator_addr(&self) -> String {
        format!("10.201.{}.1", self.subnet)
    }

    /// The target's address (inside [`Self::netns`]).
    pub fn target_addr(&self) -> String {
        format!("10.201.{}.2", self.subnet)
    }
}

impl Drop for EmulatedLink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = ip(&["netns", "del", &self.netns]);
    }
}
