//! RBD LUNs exported by several gateways (SPC-4 5.15, asymmetric logical unit access).
//!
//! Each `sluice target` that exports an image keeps the logical unit's persistent
//! reservations in the image's shared RADOS object (`sluice.lu.<image>`, see
//! `sluice_storage::LuObject`) instead of a local state file, so every gateway answers
//! PERSISTENT RESERVE IN alike, enforces a reservation made through another, and the state
//! outlives every gateway's restart.
//!
//! With a [`GatewayConfig`], a coordinator thread per LU (`coordinator.rs`) keeps the LU's
//! ALUA states in line with an ownership record in RADOS (`sluice.owner.<image>`, replaced
//! only by a compare-and-write on its version): the owner's group is active/optimized,
//! every other group the configured non-owner state (active/non-optimized or standby).
//!
//! Ownership is not the RBD exclusive lock. librbd hands the lock to whichever gateway
//! writes (it asks the holder to release it, as it does for any two clients of one image),
//! so a write through an active/non-optimized gateway runs there without changing who owns
//! the LU: no ALUA state changes and no unit attention is raised. The lock still keeps one
//! writer at a time, and fencing goes through the cluster's blocklist. Once a second each
//! gateway
//! - reads the record: an error saying its client is blocklisted means another gateway
//!   declared it dead; it reports its own group unavailable (every write it tries is refused
//!   by the cluster anyway) until it is restarted;
//! - asks every gateway who is alive (a notify on the shared object that each live gateway
//!   acks with its group and client addresses);
//! - breaks the exclusive lock of a holder that is no live gateway (librbd blocklists it);
//! - when the recorded owner did not ack within 3 s, blocklists that owner's client and
//!   records itself as the owner (compare-and-write: of two racing gateways one wins);
//! - records itself as owner of an LU nobody owns.
//!
//! SET TARGET PORT GROUPS rewrites the record (the group asked to become active/optimized
//! becomes the owner; an owner asked to step down records nobody and leaves the LU to the
//! others for a while) and notifies every gateway, which reads the record again at once.

use std::io;
use std::sync::{Arc, OnceLock};

use sluice_scsi::parameter_lists::Holder;
use sluice_scsi::LogicalUnit;

use crate::config::{GatewayConfig, LunDef, RbdImage};
use crate::swap_device::Backing;

/// What aborts the tasks of this process's I_T nexuses that another gateway's PREEMPT AND
/// ABORT preempted (SPC-4 5.12.11.2.5): set by the context once the sessions exist, called
/// on the thread that delivers the other gateway's message.
#[derive(Default)]
pub(crate) struct PeerAborts(OnceLock<AbortPreempted>);

/// Aborts the tasks of this process's I_T nexuses that the preempted registrations name.
pub(crate) type AbortPreempted = Box<dyn Fn(&[Holder]) + Send + Sync>;

impl std::fmt::Debug for PeerAborts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerAborts")
    }
}

impl PeerAborts {
    /// Sets what aborts the tasks (once; later calls change nothing).
    pub(crate) fn set(&self, abort: AbortPreempted) {
        let _ = self.0.set(abort);
    }

    /// Aborts the tasks of the I_T nexuses `preempted` names, if the context is there yet.
    #[cfg_attr(not(feature = "rbd"), allow(dead_code))]
    pub(crate) fn abort(&self, preempted: &[Holder]) {
        if let Some(f) = self.0.get() {
            f(preempted);
        }
    }
}

/// What a LUN's gateway role needs after its logical unit exists.
pub(crate) struct Gateway {
    #[cfg(feature = "rbd")]
    object: Arc<sluice_storage::LuObject>,
    #[cfg(feature = "rbd")]
    device: Arc<sluice_storage::RbdDevice>,
    /// Who owns the logical unit (`sluice.owner.<image>`).
    #[cfg(feature = "rbd")]
    ownership: Arc<sluice_storage::LuObject>,
}

/// Opens an RBD LUN and the object it shares with the other gateways.
#[cfg(feature = "rbd")]
pub(crate) fn open_rbd(l: &LunDef, image: &RbdImage) -> io::Result<(Backing, Option<Gateway>)> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("LUN {}: {e}", l.number));
    let dev = sluice_storage::RbdDevice::open(image, l.block_size, l.read_only).map_err(named)?;
    let object = Arc::new(dev.shared_object().map_err(named)?);
    let ownership = Arc::new(dev.ownership_object().map_err(named)?);
    let device = Arc::new(dev);
    Ok((
        Backing::Other(Arc::clone(&device) as _),
        Some(Gateway {
            object,
            device,
            ownership,
        }),
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

    /// Starts following the LU's shared ownership record into `lu`'s ALUA states (until `lu`
    /// is dropped), and hands it SET TARGET PORT GROUPS; returns the slot for what aborts
    /// tasks another gateway's PREEMPT AND ABORT preempted.
    pub(crate) fn coordinate(
        &self,
        lu: &Arc<LogicalUnit>,
        config: &GatewayConfig,
    ) -> Arc<PeerAborts> {
        let aborts = Arc::new(PeerAborts::default());
        #[cfg(feature = "rbd")]
        coordinator::start(
            &self.device,
            &self.object,
            &self.ownership,
            lu,
            config,
            Arc::clone(&aborts),
        );
        #[cfg(not(feature = "rbd"))]
        let _ = (lu, config);
        aborts
    }
}

#[cfg(feature = "rbd")]
mod coordinator;
