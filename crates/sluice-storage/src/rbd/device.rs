//! [`RbdDevice`]: an RBD image behind the [`BlockDevice`] trait.

use std::io;
use std::sync::Arc;

use bytes::Bytes;

use super::librbd::{self, Cluster, ConnectArgs, Image, Pool};
use super::rados::LuObject;
use super::RbdImage;
use crate::{
    check_range, checked_size, read_only_error, BlockDevice, DeviceOp, StorageError, Submission,
};

/// The range librbd's compare-and-write takes: inside one sector of this size.
const LIBRBD_CAW_SECTOR: u64 = 512;

/// An RBD image, served through librbd.
///
/// Its size is the image's, asked of librbd on every call (sluice-target looks every second
/// and tells initiators when it changed); blocks past the last whole logical block are not
/// exported. librbd's client-side cache is off (whatever the configuration file says), so a
/// completed write is already on the OSDs: nothing acknowledged is lost with the process, and
/// another gateway of the image reads what this one wrote; FUA writes and SYNCHRONIZE CACHE
/// still send `rbd_aio_flush`. A discarded range reads as zeros: whole RADOS objects are removed and
/// the parts of others zeroed (the client runs with `rbd_skip_partial_discard` off). GET LBA
/// STATUS reports every block mapped ("mapped or unknown", SBC-4 5.8): librbd's allocation
/// map is not asked.
#[derive(Debug)]
pub struct RbdDevice {
    image: Arc<Image>,
    block_size: u32,
    read_only: bool,
    /// The size at open, used when librbd cannot say (it always can while the image is open).
    size_at_open: u64,
    object_size: u64,
}

impl RbdDevice {
    /// Connects to the cluster as the configured client, opens the pool and the image
    /// (read-only when `read_only`), and checks that the image holds at least one block of
    /// `block_size` bytes.
    ///
    /// Fails within about ten seconds when no monitor answers, with an error that names the
    /// configuration file and client; errors for a missing pool or image name them.
    pub fn open(spec: &RbdImage, block_size: u32, read_only: bool) -> io::Result<Self> {
        spec.check_names()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        checked_size(block_size, 0)?;
        let cluster = Cluster::connect(&ConnectArgs {
            conf_file: spec.conf_file.as_deref(),
            client_id: spec.client_id(),
            keyring: spec.keyring.as_deref(),
        })?;
        let pool = Pool::open(&cluster, &spec.pool)?;
        let image = Image::open(&pool, &spec.image, read_only)?;
        drop((pool, cluster));
        let info = image.stat()?;
        if info.size < u64::from(block_size) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the RBD image {} holds {} bytes, less than one {block_size}-byte block",
                    image.name(),
                    info.size
                ),
            ));
        }
        tracing::info!(
            image = image.name(),
            size = info.size,
            object_size = info.object_size,
            librbd = librbd::version(),
            read_only,
            "RBD image open"
        );
        Ok(Self {
            image: Arc::new(image),
            block_size,
            read_only,
            size_at_open: info.size,
            object_size: info.object_size,
        })
    }

    /// `POOL/IMAGE`.
    pub fn name(&self) -> &str {
        self.image.name()
    }

    /// Bytes per RADOS object the image is striped over (4 MiB by default): the granularity
    /// at which discards free space.
    pub fn object_size(&self) -> u64 {
        self.object_size
    }

    /// Takes the image's exclusive lock (the image needs the `exclusive-lock` feature, on by
    /// default) and keeps it against other clients' requests until released: librbd then no
    /// longer hands it to another client that writes. Gateways do not use it (see
    /// [`ownership_object`](Self::ownership_object)).
    pub fn lock_exclusive(&self) -> io::Result<()> {
        self.image.lock_acquire()
    }

    /// Releases the exclusive lock.
    pub fn release_lock(&self) -> io::Result<()> {
        self.image.lock_release()
    }

    /// Whether this client holds the exclusive lock.
    pub fn holds_lock(&self) -> io::Result<bool> {
        self.image.is_lock_owner()
    }

    /// Who holds the exclusive lock (librbd's owner names); empty when nobody does.
    pub fn lock_owners(&self) -> io::Result<Vec<String>> {
        self.image.lock_owners()
    }

    /// Breaks `owner`'s exclusive lock and fences it: the cluster refuses that client's
    /// writes from then on, so a gateway that lost its lock cannot acknowledge another write.
    pub fn break_lock(&self, owner: &str) -> io::Result<()> {
        self.image.lock_break(owner)
    }

    /// The RADOS object the gateways exporting this image share (`sluice.lu.<image>` in the
    /// image's pool), opened through this image's client and watched.
    pub fn shared_object(&self) -> io::Result<LuObject> {
        let image = self.name().rsplit('/').next().unwrap_or_default();
        LuObject::open(self.image.pool(), &format!("sluice.lu.{image}"))
    }

    /// The RADOS object that records which gateway owns the logical unit exported from this
    /// image (`sluice.owner.<image>` in the image's pool), apart from the exclusive lock,
    /// which librbd moves to whichever client writes.
    pub fn ownership_object(&self) -> io::Result<LuObject> {
        let image = self.name().rsplit('/').next().unwrap_or_default();
        LuObject::open(self.image.pool(), &format!("sluice.owner.{image}"))
    }

    /// Blocklists another client of the cluster by one of its addresses (`IP:PORT/NONCE`, as
    /// [`client_addresses`](Self::client_addresses) lists them): the cluster refuses its
    /// writes from then on, so a gateway declared dead cannot acknowledge another write.
    pub fn blocklist(&self, address: &str) -> io::Result<()> {
        self.image.pool().blocklist(address)
    }

    /// The cluster-wide id of this image's client: the lock owner name `client.N` of
    /// [`lock_owners`](Self::lock_owners) is this gateway's when `N` equals it.
    pub fn client_id(&self) -> u64 {
        self.image.pool().instance_id()
    }

    /// This image's client's addresses: the lock owner name of
    /// [`lock_owners`](Self::lock_owners) is one of them when this client holds the lock.
    pub fn client_addresses(&self) -> io::Result<String> {
        self.image.pool().client_addrs()
    }

    fn size_now(&self) -> u64 {
        self.image.size().unwrap_or(self.size_at_open)
    }

    /// Checks a range against the whole blocks of the image now.
    fn check(&self, offset: u64, len: u64) -> Result<(), StorageError> {
        check_range(offset, len, self.size_bytes())
    }

    fn check_writable(&self) -> Result<(), StorageError> {
        if self.read_only {
            Err(read_only_error())
        } else {
            Ok(())
        }
    }
}

impl RbdDevice {
    /// Checks `op` as the synchronous calls would and submits it to librbd: the returned
    /// future is woken by librbd's completion callback, so no thread waits for it. A write
    /// with FUA submits its flush once the write completed.
    fn start(&self, op: DeviceOp) -> Result<Submission, StorageError> {
        match op {
            DeviceOp::Read { offset, len } => {
                self.check(offset, len as u64)?;
                if len == 0 {
                    return Ok(Box::pin(std::future::ready(Ok(Bytes::new()))));
                }
                let read = self.image.submit_read(offset, len)?;
                Ok(Box::pin(async move { Ok(read.await?) }))
            }
            DeviceOp::Write {
                offset,
                mut segments,
                fua,
            } => {
                self.check_writable()?;
                let total: u64 = segments.iter().map(|s| s.len() as u64).sum();
                self.check(offset, total)?;
                segments.retain(|s| !s.is_empty());
                let write = if segments.is_empty() {
                    None
                } else {
                    Some(self.image.submit_write(offset, segments)?)
                };
                let image = Arc::clone(&self.image);
                Ok(Box::pin(async move {
                    if let Some(write) = write {
                        write.await?;
                    }
                    if fua {
                        image.submit_flush()?.await?;
                    }
                    Ok(Bytes::new())
                }))
            }
            DeviceOp::Flush => {
                if self.read_only {
                    return Ok(Box::pin(std::future::ready(Ok(Bytes::new()))));
                }
                let flush = self.image.submit_flush()?;
                Ok(Box::pin(async move { Ok(flush.await?) }))
            }
        }
    }
}

impl BlockDevice for RbdDevice {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn num_blocks(&self) -> u64 {
        self.size_now() / u64::from(self.block_size)
    }

    fn blocks(&self) -> bool {
        true
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        self.check(offset, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        Ok(self.image.read(offset, buf)?)
    }

    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), StorageError> {
        self.check_writable()?;
        self.check(offset, data.len() as u64)?;
        if !data.is_empty() {
            self.image.write(offset, data)?;
        }
        if fua {
            self.image.flush()?;
        }
        Ok(())
    }

    /// One `rbd_aio_writev` for the whole write, whatever the segments' lengths.
    fn write_vectored_at(
        &self,
        offset: u64,
        segments: &[&[u8]],
        fua: bool,
    ) -> Result<(), StorageError> {
        self.check_writable()?;
        let total: u64 = segments.iter().map(|s| s.len() as u64).sum();
        self.check(offset, total)?;
        match segments {
            [] => {}
            [one] => self.image.write(offset, one)?,
            _ if total > 0 => self.image.write_vectored(offset, segments)?,
            _ => {}
        }
        if fua {
            self.image.flush()?;
        }
        Ok(())
    }

    fn submits(&self) -> bool {
        true
    }

    fn submit(&self, op: DeviceOp) -> Submission {
        self.start(op)
            .unwrap_or_else(|e| Box::pin(std::future::ready(Err(e))))
    }

    fn flush(&self) -> Result<(), StorageError> {
        if self.read_only {
            return Ok(());
        }
        Ok(self.image.flush()?)
    }

    /// `rbd_aio_write_zeroes`: librbd zeroes whole objects by discarding them.
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> Result<(), StorageError> {
        self.check_writable()?;
        self.check(offset, len)?;
        if len > 0 {
            self.image.write_zeroes(offset, len)?;
        }
        if fua {
            self.image.flush()?;
        }
        Ok(())
    }

    /// `rbd_aio_writesame`: the block goes to librbd once, however long the range.
    fn write_repeated(
        &self,
        offset: u64,
        data: &[u8],
        unit: usize,
        fua: bool,
    ) -> Result<(), StorageError> {
        self.check_writable()?;
        self.check(offset, data.len() as u64)?;
        if unit == 0 || data.len() % unit != 0 {
            return self.write_at(offset, data, fua);
        }
        if !data.is_empty() {
            self.image
                .write_same(offset, data.len() as u64, &data[..unit])?;
        }
        if fua {
            self.image.flush()?;
        }
        Ok(())
    }

    /// `rbd_aio_compare_and_write`: the OSD compares and writes as one operation, so a write
    /// through another gateway cannot land in between. librbd takes only ranges inside one
    /// 512-byte sector (what VMware's ATS locking sends: one 512-byte block); a longer range
    /// falls back to the caller's lock (`None`), atomic among this process's initiators only.
    fn compare_and_write(
        &self,
        offset: u64,
        compare: &[u8],
        data: &[u8],
        fua: bool,
    ) -> Option<Result<Option<u64>, StorageError>> {
        let len = data.len() as u64;
        if len == 0 || offset % LIBRBD_CAW_SECTOR + len > LIBRBD_CAW_SECTOR {
            return None;
        }
        let done = (|| {
            self.check_writable()?;
            self.check(offset, len)?;
            let r = self.image.compare_and_write(offset, compare, data)?;
            if r.is_none() && fua {
                self.image.flush()?;
            }
            Ok(r)
        })();
        Some(done)
    }

    /// Thin LUs: a discard frees whole objects and zeroes the rest of its range (the
    /// cluster handle is opened with `rbd_skip_partial_discard = false`), so a discarded
    /// range reads zeros.
    fn deallocates(&self) -> bool {
        true
    }

    /// Space comes back a RADOS object at a time.
    fn deallocation_granularity(&self) -> u64 {
        self.object_size.max(u64::from(self.block_size))
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), StorageError> {
        self.check_writable()?;
        self.check(offset, len)?;
        if len > 0 {
            self.image.discard(offset, len)?;
        }
        Ok(())
    }
}
