//! RBD LUNs exported by several gateways: each `sluice target` that exports an image keeps
//! the logical unit's persistent reservations in the image's shared RADOS object
//! (`sluice.lu.<image>`, see `sluice_storage::LuObject`) instead of a local state file, so
//! every gateway answers PERSISTENT RESERVE IN alike, enforces a reservation made through
//! another, and the state outlives every gateway's restart.

use std::io;
use std::sync::Arc;

use sluice_scsi::LogicalUnit;

use crate::config::{LunDef, RbdImage};
use crate::swap_device::Backing;

/// What a LUN's gateway role needs after its logical unit exists.
pub(crate) struct Gateway {
    #[cfg(feature = "rbd")]
    object: Arc<sluice_storage::LuObject>,
}

/// Opens an RBD LUN and the object it shares with the other gateways.
#[cfg(feature = "rbd")]
pub(crate) fn open_rbd(l: &LunDef, image: &RbdImage) -> io::Result<(Backing, Option<Gateway>)> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("LUN {}: {e}", l.number));
    let dev = sluice_storage::RbdDevice::open(image, l.block_size, l.read_only).map_err(named)?;
    let object = Arc::new(dev.shared_object().map_err(named)?);
    Ok((Backing::Other(Arc::new(dev)), Some(Gateway { object })))
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
}
