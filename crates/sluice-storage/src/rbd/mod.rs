//! RBD images (Ceph's RADOS block device) as block devices, through librbd.
//!
//! [`RbdImage`] names an image and how to reach its cluster; it is plain data, there in every
//! build, so configurations can name RBD LUNs everywhere. [`RbdDevice`], the backend itself,
//! needs librbd and librados at build and run time and exists only with this crate's `rbd`
//! feature.
//!
//! Every operation is one librbd asynchronous call waited for on the calling thread (see
//! `librbd.rs`): the device says it [`blocks`](crate::BlockDevice::blocks), so the target runs
//! it on its blocking pool, where several commands are in flight at once, each on its thread.

use std::path::PathBuf;

#[cfg(feature = "rbd")]
mod device;
#[cfg(feature = "rbd")]
mod librbd;
#[cfg(feature = "rbd")]
mod rados;

#[cfg(feature = "rbd")]
pub use device::RbdDevice;
#[cfg(feature = "rbd")]
pub use rados::{decode_notify_reply, Ack, LuObject, NotifyHandler, MSG_STATE_CHANGED};

/// The client id used when none is configured (`client.admin`, as the `rbd` tool does).
pub const DEFAULT_CLIENT_ID: &str = "admin";

/// An RBD image and how to reach it.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct RbdImage {
    /// The pool that holds the image.
    pub pool: String,
    /// The image's name in the pool.
    pub image: String,
    /// The cluster's configuration file (`mon host`, `fsid`, ...); `None` lets librados look
    /// where the `ceph` tool does (`$CEPH_CONF`, then `/etc/ceph/ceph.conf` and others).
    pub conf_file: Option<PathBuf>,
    /// The Ceph client id, the `ID` of `client.ID`; `None` is [`DEFAULT_CLIENT_ID`].
    pub client_id: Option<String>,
    /// The keyring holding the client's key; `None` takes the configuration's `keyring`.
    pub keyring: Option<PathBuf>,
}

impl RbdImage {
    /// `POOL/IMAGE` with the default cluster settings, from the `POOL/IMAGE` form of the `rbd`
    /// tool. Both parts must be non-empty and free of `/`, `@` (a snapshot) and NUL.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let Some((pool, image)) = spec.split_once('/') else {
            return Err(format!("{spec:?} is not POOL/IMAGE"));
        };
        let image = Self {
            pool: pool.into(),
            image: image.into(),
            ..Self::default()
        };
        image.check_names()?;
        Ok(image)
    }

    /// Checks the pool and image names as [`parse`](Self::parse) does.
    pub fn check_names(&self) -> Result<(), String> {
        for (what, name) in [("pool", &self.pool), ("image", &self.image)] {
            if name.is_empty() {
                return Err(format!("the RBD {what} name is empty"));
            }
            if let Some(c) = name.chars().find(|c| matches!(c, '/' | '@' | '\0')) {
                return Err(format!("the RBD {what} name {name:?} contains {c:?}"));
            }
        }
        if let Some(id) = &self.client_id {
            // Ids may hold dots (`client.rgw.host1`); a whole `client.` name is a mistake.
            if id.is_empty() || id.contains('\0') || id.starts_with("client.") {
                return Err(format!(
                    "the Ceph client id {id:?} must be the ID of client.ID (e.g. \"admin\")"
                ));
            }
        }
        Ok(())
    }

    /// The client id in force.
    pub fn client_id(&self) -> &str {
        self.client_id.as_deref().unwrap_or(DEFAULT_CLIENT_ID)
    }

    /// `POOL/IMAGE`.
    pub fn spec(&self) -> String {
        format!("{}/{}", self.pool, self.image)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_takes_pool_and_image() {
        let i = RbdImage::parse("rbd/disk-1").unwrap();
        assert_eq!((i.pool.as_str(), i.image.as_str()), ("rbd", "disk-1"));
        assert_eq!(i.client_id(), "admin");
        assert_eq!(i.spec(), "rbd/disk-1");
        assert_eq!(i.conf_file, None);
    }

    #[test]
    fn parse_refuses_what_is_not_pool_slash_image() {
        for bad in [
            "",
            "rbd",
            "/img",
            "rbd/",
            "rbd/a/b",
            "rbd/img@snap",
            "rb\0d/img",
        ] {
            assert!(RbdImage::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn client_id_must_not_be_empty_or_a_full_name() {
        let mut i = RbdImage::parse("rbd/img").unwrap();
        i.client_id = Some("sluice".into());
        assert_eq!(i.check_names(), Ok(()));
        assert_eq!(i.client_id(), "sluice");
        for bad in ["", "client.sluice"] {
            i.client_id = Some(bad.into());
            assert!(i.check_names().is_err(), "{bad:?} was accepted");
        }
    }
}
