//! RDMA devices: enumeration and opening, with an error that says what to do when there is
//! none (most machines: no RNIC, and no soft-RoCE link set up).

use std::sync::Arc;

use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::DeviceContext;

use crate::error::VerbsError;

/// One device as `ibv_devices` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceSummary {
    /// Kernel name (`mlx5_0`, `rxe0`, `siw0`).
    pub name: String,
    /// Transport (InfiniBand for IB and RoCE, iWARP).
    pub transport: String,
}

/// The RDMA devices libibverbs sees. A system without RDMA support in the kernel makes
/// `ibv_get_device_list` fail rather than return an empty list; both mean none here.
pub fn devices() -> Vec<DeviceSummary> {
    let Ok(list) = DeviceList::new() else {
        return Vec::new();
    };
    list.iter()
        .map(|d| DeviceSummary {
            name: d.name(),
            transport: d.transport_type().to_string(),
        })
        .collect()
}

/// Opens the device called `name`, or the first one.
pub fn open(name: Option<&str>) -> Result<Arc<DeviceContext>, VerbsError> {
    let list = DeviceList::new().map_err(|_| VerbsError::NoDevice)?;
    if list.is_empty() {
        return Err(VerbsError::NoDevice);
    }
    let device = match name {
        None => list.iter().next().ok_or(VerbsError::NoDevice)?,
        Some(n) => list
            .iter()
            .find(|d| d.name() == n)
            .ok_or_else(|| VerbsError::NoSuchDevice {
                name: n.to_owned(),
                available: list.iter().map(|d| d.name()).collect::<Vec<_>>().join(", "),
            })?,
    };
    device
        .open()
        .map_err(|e| super::failed("ibv_open_device")(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Whatever the machine has, opening agrees with the enumeration: where there is no
    // device (these build machines), the error is the one that points to docs/iser.md.
    #[test]
    fn opening_agrees_with_enumeration() {
        let found = devices();
        match open(None) {
            Err(VerbsError::NoDevice) => assert!(found.is_empty(), "{found:?}"),
            Ok(_) => assert!(!found.is_empty()),
            Err(e) => panic!("unexpected error {e} with devices {found:?}"),
        }
        if found.is_empty() {
            let msg = VerbsError::NoDevice.to_string();
            assert!(
                msg.starts_with("no RDMA device; see docs/iser.md for rxe"),
                "{msg}"
            );
            assert_eq!(open(Some("rxe0")).err(), Some(VerbsError::NoDevice));
        } else {
            let e = open(Some("no-such-device")).err();
            assert!(matches!(e, Some(VerbsError::NoSuchDevice { .. })), "{e:?}");
        }
    }
}
