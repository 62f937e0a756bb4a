//! Everything connections share: the configuration, the SCSI targets with their LUNs, the
//! session table and the connection count.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use sluice_scsi::{LogicalUnit, LuConfig, ScsiTarget};
use sluice_storage::BlockDevice;
use sluice_storage::{FileDevice, FileOptions, MemoryDevice, NullDevice};

use crate::config::{Backend, LunDef, TargetConfig, TargetDef};
use crate::discovery::PORTAL_GROUP_TAG;
use crate::sessions::Sessions;

/// One configured target at run time.
#[derive(Debug)]
pub(crate) struct TargetRuntime {
    pub scsi: Arc<ScsiTarget>,
    /// Raw LUN fields whose backend may block the thread (file I/O).
    pub blocking_luns: Vec<u64>,
}

/// Shared state of the target process.
#[derive(Debug)]
pub(crate) struct Context {
    pub config: TargetConfig,
    /// By lower-cased target name.
    pub targets: HashMap<String, TargetRuntime>,
    pub sessions: Sessions,
    pub connections: AtomicUsize,
}

impl Context {
    /// Opens every backend and builds the logical units.
    pub(crate) fn build(config: TargetConfig) -> io::Result<Arc<Self>> {
        config
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut targets = HashMap::new();
        for t in &config.targets {
            let mut luns = Vec::new();
            let mut blocking_luns = Vec::new();
            for l in &t.luns {
                let device = open_backend(l)?;
                if device.blocks() {
                    blocking_luns.push(sluice_scsi::encode_lun(l.number));
                }
                let lu = LogicalUnit::new(lu_config(t, l, device));
                luns.push((l.number, Arc::new(lu)));
            }
            let runtime = TargetRuntime {
                scsi: Arc::new(ScsiTarget::new(luns)),
                blocking_luns,
            };
            targets.insert(t.iqn.to_ascii_lowercase(), runtime);
        }
        let sessions = Sessions::new(config.limits.max_sessions);
        Ok(Arc::new(Self {
            config,
            targets,
            sessions,
            connections: AtomicUsize::new(0),
        }))
    }

    /// Makes every LUN's completed writes durable (shutdown).
    pub(crate) fn flush_all(&self) {
        for t in self.targets.values() {
            for n in t.scsi.lun_numbers() {
                if let Some(lu) = t.scsi.lu(n) {
                    if let Err(e) = lu.device().flush() {
                        tracing::warn!(lun = n, error = %e, "flush failed");
                    }
                }
            }
        }
    }

    pub(crate) fn target(&self, name: &str) -> Option<&TargetRuntime> {
        self.targets.get(&name.to_ascii_lowercase())
    }
}

fn open_backend(l: &LunDef) -> io::Result<Arc<dyn BlockDevice>> {
    let bs = l.block_size;
    Ok(match &l.backend {
        Backend::Memory { size } => Arc::new(MemoryDevice::new(bs, size / u64::from(bs))),
        Backend::Null { size } => Arc::new(NullDevice::new(bs, size / u64::from(bs))),
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
            };
            let dev = FileDevice::open(path, options).map_err(|e| {
                io::Error::other(format!("LUN {}: {}: {e}", l.number, path.display()))
            })?;
            Arc::new(dev)
        }
    })
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
        target_port_name: format!("{},t,0x{PORTAL_GROUP_TAG:04x}", t.iqn),
        relative_target_port: 1,
        target_port_group: PORTAL_GROUP_TAG,
        write_cache: true,
        removable: l.removable,
    }
}

/// FNV-1a, 64 bit: a stable hash (std's `DefaultHasher` may change between releases).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}
