//! Everything connections share: the configuration in force, the SCSI targets with their
//! LUNs, the session table, the connection count and the login counters.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use std::path::{Path, PathBuf};

use sluice_scsi::{LogicalUnit, LuConfig, ScsiTarget};
use sluice_storage::BlockDevice;
use sluice_storage::{FileDevice, FileOptions, MemoryDevice, NullDevice, StateFile};

use crate::config::{Backend, LunDef, TargetConfig, TargetDef};
use crate::metrics::{LoginCounters, LuMetrics};
use crate::portal_groups::target_ports;
use crate::sessions::Sessions;
use crate::swap_device::{Backing, SwapDevice};

/// One logical unit at run time.
#[derive(Debug)]
pub(crate) struct LunRuntime {
    /// Its number.
    pub number: u16,
    /// The 8-byte LUN field that addresses it.
    pub raw: u64,
    /// Its device, which a resize swaps.
    pub device: Arc<SwapDevice>,
    pub lu: Arc<LogicalUnit>,
    /// Its counters across connections.
    pub metrics: LuMetrics,
    /// Whether its backend may block the thread (file I/O): commands then run on the
    /// blocking pool.
    pub blocking: bool,
    /// Whether its backend completes plain reads, writes and flushes by itself
    /// (`BlockDevice::submits`: RBD images): those commands are then awaited, not run on
    /// the blocking pool (`device_io`).
    pub submits: bool,
    /// Whether its size may change outside sluice (RBD images): `capacity_watch` looks.
    pub external_size: bool,
    /// For a LUN several gateways export: what aborts the tasks another gateway's PREEMPT
    /// AND ABORT preempted (set by [`Context::hook_peer_aborts`]).
    pub peer_aborts: Option<Arc<crate::gateway::PeerAborts>>,
}

/// One configured target at run time.
#[derive(Debug)]
pub(crate) struct TargetRuntime {
    pub scsi: Arc<ScsiTarget>,
    /// Its LUs; replaced as a whole when one is added or removed.
    luns: RwLock<Arc<[Arc<LunRuntime>]>>,
    /// Bumped whenever `luns` changes: connections keep a copy of the list and look again
    /// only when this moved (one relaxed load per command).
    pub generation: AtomicU64,
    /// Logins to it.
    pub logins: LoginCounters,
}

impl TargetRuntime {
    /// Opens every backend of `t`, a target of `config` (its portal groups are the target's
    /// ports; its state directory keeps the LUs' persistent reservations).
    pub(crate) fn open(t: &TargetDef, config: &TargetConfig) -> io::Result<Self> {
        let luns = t
            .luns
            .iter()
            .map(|l| open_lun(t, l, config.state_dir.as_deref(), config.gateway.as_ref()))
            .collect::<io::Result<Vec<_>>>()?;
        let scsi = ScsiTarget::with_ports(
            luns.iter().map(|l| (l.number, Arc::clone(&l.lu))).collect(),
            target_ports(
                &t.iqn,
                &config.effective_portal_groups(),
                config.gateway.as_ref(),
            ),
        );
        Ok(Self {
            scsi: Arc::new(scsi),
            luns: RwLock::new(luns.into()),
            generation: AtomicU64::new(0),
            logins: LoginCounters::default(),
        })
    }

    /// The LUs as they are now.
    pub(crate) fn luns(&self) -> Arc<[Arc<LunRuntime>]> {
        Arc::clone(&self.luns.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Serves `luns` from now on. Every nexus that knows a LU of the new set gets REPORTED
    /// LUNS DATA HAS CHANGED (SPC-4 6.33) through `ScsiTarget::replace_luns`.
    pub(crate) fn set_luns(&self, luns: Vec<Arc<LunRuntime>>) {
        let mut slot = self.luns.write().unwrap_or_else(PoisonError::into_inner);
        self.scsi
            .replace_luns(luns.iter().map(|l| (l.number, Arc::clone(&l.lu))).collect());
        *slot = luns.into();
        self.generation.fetch_add(1, Ordering::Release);
    }
}

/// Shared state of the target process.
#[derive(Debug)]
pub(crate) struct Context {
    /// The configuration in force: replaced as a whole by a change (see `change.rs`).
    config: RwLock<Arc<TargetConfig>>,
    /// By lower-cased target name.
    targets: RwLock<HashMap<String, Arc<TargetRuntime>>>,
    pub sessions: Sessions,
    pub connections: AtomicUsize,
    /// What the iSER connections did (`iser.rs`).
    pub iser: crate::iser::IserCounters,
    /// Logins of discovery sessions.
    pub discovery_logins: LoginCounters,
    /// Logins naming no configured target.
    pub unknown_logins: LoginCounters,
    /// Held by whoever changes the configuration, so that changes apply one at a time.
    pub changes: Mutex<()>,
    /// Each listening portal as configured and as bound: SendTargets reports a portal
    /// configured on port 0 with the port its listener got.
    pub listeners: Mutex<Vec<(std::net::SocketAddr, std::net::SocketAddr)>>,
}

impl Context {
    /// Opens every backend and builds the logical units.
    pub(crate) fn build(config: TargetConfig) -> io::Result<Arc<Self>> {
        config
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut targets = HashMap::new();
        for t in &config.targets {
            targets.insert(
                t.iqn.to_ascii_lowercase(),
                Arc::new(TargetRuntime::open(t, &config)?),
            );
        }
        let sessions = Sessions::new(config.limits.max_sessions);
        let ctx = Arc::new(Self {
            config: RwLock::new(Arc::new(config)),
            targets: RwLock::new(targets),
            sessions,
            connections: AtomicUsize::new(0),
            iser: crate::iser::IserCounters::default(),
            discovery_logins: LoginCounters::default(),
            unknown_logins: LoginCounters::default(),
            changes: Mutex::new(()),
            listeners: Mutex::new(Vec::new()),
        });
        ctx.hook_peer_aborts();
        Ok(ctx)
    }

    /// Lets every gateway LUN abort the tasks of this process's I_T nexuses that another
    /// gateway's PREEMPT AND ABORT preempted (call again after LUNs were opened; LUNs hooked
    /// already stay as they are).
    pub(crate) fn hook_peer_aborts(self: &Arc<Self>) {
        for (name, t) in self.targets().iter() {
            for l in t.luns().iter() {
                let Some(slot) = &l.peer_aborts else {
                    continue;
                };
                let (ctx, name, lun) = (Arc::downgrade(self), name.clone(), l.raw);
                slot.set(Box::new(move |preempted| {
                    let Some(ctx) = ctx.upgrade() else {
                        return;
                    };
                    let Some(t) = ctx.target(&name) else {
                        return;
                    };
                    let nexuses = t.scsi.nexuses_of(preempted);
                    crate::ffp::abort_tasks_of(&ctx, &nexuses, sluice_proto::seq::Lun(lun), None);
                }));
            }
        }
    }

    /// The configuration in force.
    pub(crate) fn config(&self) -> Arc<TargetConfig> {
        Arc::clone(&self.config.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Puts `config` in force (its runtime changes were made already).
    pub(crate) fn set_config(&self, config: TargetConfig) {
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(config);
    }

    /// Makes every LUN's completed writes durable (shutdown).
    pub(crate) fn flush_all(&self) {
        for t in self.all_targets() {
            for l in t.luns().iter() {
                if let Err(e) = l.device.flush() {
                    tracing::warn!(lun = l.number, error = %e, "flush failed");
                }
            }
        }
    }

    pub(crate) fn target(&self, name: &str) -> Option<Arc<TargetRuntime>> {
        self.targets()
            .get(&name.to_ascii_lowercase())
            .map(Arc::clone)
    }

    /// Every target, with its lower-cased name.
    pub(crate) fn all_targets(&self) -> Vec<Arc<TargetRuntime>> {
        self.targets().values().map(Arc::clone).collect()
    }

    fn targets(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<TargetRuntime>>> {
        self.targets.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds or replaces (`Some`) or removes (`None`) the runtime of target `name`.
    pub(crate) fn set_target(&self, name: &str, runtime: Option<Arc<TargetRuntime>>) {
        let mut map = self.targets.write().unwrap_or_else(PoisonError::into_inner);
        let key = name.to_ascii_lowercase();
        match runtime {
            Some(r) => map.insert(key, r),
            None => map.remove(&key),
        };
    }
}

/// Opens one LUN: its backend, behind a swappable device, and its logical unit, whose
/// persistent reservations with APTPL are kept under `state_dir` (and restored from there).
pub(crate) fn open_lun(
    t: &TargetDef,
    l: &LunDef,
    state_dir: Option<&Path>,
    gateway_config: Option<&crate::config::GatewayConfig>,
) -> io::Result<Arc<LunRuntime>> {
    let (backing, gateway) = match &l.backend {
        Backend::Rbd { image } => crate::gateway::open_rbd(l, image)?,
        _ => (open_backend(l)?, None),
    };
    let device = Arc::new(SwapDevice::new(backing));
    let blocking = device.blocks();
    let submits = device.submits();
    let shared: Arc<dyn BlockDevice> = Arc::clone(&device) as Arc<dyn BlockDevice>;
    let lu = LogicalUnit::new(lu_config(t, l, shared));
    if let Some(gateway) = &gateway {
        // Shared with every gateway exporting the image: kept in RADOS, not in state_dir.
        gateway.attach(&lu, l)?;
    } else if let Some(dir) = state_dir {
        let store = StateFile::new(reservation_file(dir, t, l));
        let path = store.path().display().to_string();
        lu.attach_reservation_store(Arc::new(store)).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "LUN {}: {path}: {e} (move the file away to start without the \
                     reservations it holds)",
                    l.number
                ),
            )
        })?;
    }
    let lu = Arc::new(lu);
    let mut peer_aborts = None;
    if let (Some(gateway), Some(config)) = (gateway, gateway_config) {
        // Follows the image's exclusive lock into the LU's ALUA states, until the LU goes.
        peer_aborts = Some(gateway.coordinate(&lu, config));
    }
    Ok(Arc::new(LunRuntime {
        number: l.number,
        raw: sluice_scsi::encode_lun(l.number),
        device,
        lu,
        metrics: LuMetrics::default(),
        blocking,
        submits,
        external_size: matches!(l.backend, Backend::Rbd { .. }),
        peer_aborts,
    }))
}

/// Opens the backend of `l` (a file LUN with a size larger than its file grows the file).
pub(crate) fn open_backend(l: &LunDef) -> io::Result<Backing> {
    let bs = l.block_size;
    Ok(match &l.backend {
        Backend::Memory { size } => {
            Backing::Memory(Arc::new(MemoryDevice::new(bs, size / u64::from(bs))))
        }
        Backend::Null { size } => {
            Backing::Other(Arc::new(NullDevice::new(bs, size / u64::from(bs))))
        }
        Backend::File {
            path,
            size,
            direct,
            huge_pages,
        } => {
            let options = FileOptions {
                size: *size,
                block_size: bs,
                read_only: l.read_only,
                direct: *direct,
                create: size.is_some(),
                huge_pages: *huge_pages,
                thin: l.options.thin,
            };
            let dev = FileDevice::open(path, options).map_err(|e| {
                io::Error::other(format!("LUN {}: {}: {e}", l.number, path.display()))
            })?;
            Backing::Other(Arc::new(dev))
        }
        Backend::Rbd { image } => open_rbd(l, image)?,
    })
}

/// Opens an RBD LUN (connecting to its cluster) with the LUN's block size and access.
#[cfg(feature = "rbd")]
fn open_rbd(l: &LunDef, image: &sluice_storage::RbdImage) -> io::Result<Backing> {
    let dev = sluice_storage::RbdDevice::open(image, l.block_size, l.read_only)
        .map_err(|e| io::Error::new(e.kind(), format!("LUN {}: {e}", l.number)))?;
    Ok(Backing::Other(Arc::new(dev)))
}

/// Without the `rbd` feature there is no librbd to open an RBD LUN with.
#[cfg(not(feature = "rbd"))]
fn open_rbd(l: &LunDef, image: &sluice_storage::RbdImage) -> io::Result<Backing> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "LUN {}: rbd {}: this sluice was built without RBD support (build it with the \
             `rbd` feature; it needs librbd-dev and librados-dev)",
            l.number,
            image.spec()
        ),
    ))
}

/// The SCSI identity of a LUN. Serial and NAA identifier derive from the target name and LUN
/// number, so they stay the same across restarts (initiators such as ESXi treat a changed
/// identity as a different disk: ESXi keeps the device identifier in the VMFS header and
/// treats a LUN whose NAA identifier changed as a snapshot, not mounted until resignatured,
/// as VMware's documentation of VMFS resignaturing describes).
fn lu_config(t: &TargetDef, l: &LunDef, device: Arc<dyn BlockDevice>) -> LuConfig {
    let hash = fnv1a(format!("{}/{}", t.iqn.to_ascii_lowercase(), l.number).as_bytes());
    let product = match l.backend {
        Backend::Memory { .. } => "sluice memory",
        Backend::File { .. } => "sluice file",
        Backend::Null { .. } => "sluice null",
        Backend::Rbd { .. } => "sluice rbd",
    };
    LuConfig {
        device,
        read_only: l.read_only,
        vendor: "SLUICE".into(),
        product: product.into(),
        revision: "0001".into(),
        serial: l.serial.clone().unwrap_or_else(|| format!("{hash:016x}")),
        // NAA 6 (IEEE Registered Extended) with a locally chosen company id: top nibble 6,
        // the rest from the hash.
        naa_id: (6u64 << 60) | (hash & 0x0fff_ffff_ffff_ffff),
        write_cache: true,
        removable: l.removable,
        options: l.options,
    }
}

/// Where the persistent reservations of a LUN are kept: `<state dir>/<target>/lun-<N>.pr`
/// (iSCSI names are lower-cased ASCII without `/`, so the name is a safe directory name).
pub(crate) fn reservation_file(dir: &Path, t: &TargetDef, l: &LunDef) -> PathBuf {
    dir.join(t.iqn.to_ascii_lowercase())
        .join(format!("lun-{}.pr", l.number))
}

/// FNV-1a, 64 bit: a stable hash (std's `DefaultHasher` may change between releases).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rbd_lun() -> LunDef {
        LunDef {
            number: 3,
            backend: Backend::Rbd {
                image: sluice_storage::RbdImage::parse("rbd/disk").unwrap(),
            },
            block_size: 512,
            read_only: false,
            removable: false,
            serial: None,
            options: Default::default(),
        }
    }

    /// Without librbd an RBD LUN cannot open, and the error says why and how to get it.
    #[cfg(not(feature = "rbd"))]
    #[test]
    fn rbd_luns_need_the_rbd_feature() {
        let e = open_backend(&rbd_lun()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
        let text = e.to_string();
        assert!(text.starts_with("LUN 3: rbd rbd/disk: "), "{text}");
        assert!(text.contains("`rbd` feature"), "{text}");
    }

    /// With librbd, opening connects: a configuration naming no reachable monitor fails
    /// naming the LUN (the cluster-backed cases are in sluice-storage's rbd_cluster test).
    #[cfg(feature = "rbd")]
    #[test]
    fn rbd_luns_name_the_lun_when_they_cannot_open() {
        let mut l = rbd_lun();
        if let Backend::Rbd { image } = &mut l.backend {
            image.conf_file = Some("/nonexistent/ceph.conf".into());
        }
        let e = open_backend(&l).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("LUN 3: "), "{text}");
        assert!(text.contains("/nonexistent/ceph.conf"), "{text}");
    }
}
