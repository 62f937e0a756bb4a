//! Block operations submitted to a backend that completes them later, with no thread waiting:
//! the plain reads, writes and flushes of a logical unit whose store answers over the network
//! (an RBD image through librbd's `rbd_aio_*` calls, whose completion callback wakes the
//! future).
//!
//! A backend says it takes them with [`BlockDevice::submits`](crate::BlockDevice::submits);
//! the caller then hands [`DeviceOp`]s to [`BlockDevice::submit`](crate::BlockDevice::submit)
//! from an asynchronous task and awaits the [`Submission`]. The crate names no runtime: a
//! submission is a plain [`Future`], woken from whatever thread the backend completes on.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

use crate::{BlockDevice, StorageError};

/// A submitted operation: the bytes read (empty for writes and flushes), or why it failed.
pub type Submission = Pin<Box<dyn Future<Output = Result<Bytes, StorageError>> + Send + 'static>>;

/// One plain block operation.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum DeviceOp {
    /// Read `len` bytes from byte `offset`.
    Read {
        /// Byte offset.
        offset: u64,
        /// Bytes to read.
        len: usize,
    },
    /// Write `segments`, back to back, from byte `offset` (their sum a whole number of
    /// blocks); with `fua`, complete only once the data is durable.
    Write {
        /// Byte offset.
        offset: u64,
        /// The data, in order (e.g. the data segments of the PDUs that carried it).
        segments: Vec<Bytes>,
        /// Force unit access.
        fua: bool,
    },
    /// Make every completed write durable.
    Flush,
}

/// Runs `op` through the synchronous calls of `device`, on the calling thread: what
/// [`BlockDevice::submit`](crate::BlockDevice::submit) does for a backend that does not
/// submit (it returns a future that is already complete).
pub fn run_now(device: &(impl BlockDevice + ?Sized), op: DeviceOp) -> Result<Bytes, StorageError> {
    match op {
        DeviceOp::Read { offset, len } => {
            if let Some(shared) = device.read_shared(offset, len) {
                return shared;
            }
            let mut out = bytes::BytesMut::with_capacity(len);
            device.read_append(offset, len, &mut out)?;
            Ok(out.freeze())
        }
        DeviceOp::Write {
            offset,
            segments,
            fua,
        } => {
            let slices: Vec<&[u8]> = segments.iter().map(|s| &s[..]).collect();
            device.write_vectored_at(offset, &slices, fua)?;
            Ok(Bytes::new())
        }
        DeviceOp::Flush => device.flush().map(|()| Bytes::new()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    use bytes::Bytes;

    use super::DeviceOp;
    use crate::{BlockDevice, MemoryDevice};

    struct Nothing;
    impl Wake for Nothing {
        fn wake(self: Arc<Self>) {}
    }

    /// Polls a submission of a backend that does not submit: it is complete at once.
    fn ready(dev: &dyn BlockDevice, op: DeviceOp) -> Result<Bytes, crate::StorageError> {
        let waker = Waker::from(Arc::new(Nothing));
        let mut fut = dev.submit(op);
        match fut.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(r) => r,
            Poll::Pending => panic!("a synchronous backend's submission is already complete"),
        }
    }

    #[test]
    fn default_submission_runs_the_synchronous_calls() {
        let dev = MemoryDevice::new(512, 64);
        assert!(!dev.submits());
        let data = Bytes::from(vec![7u8; 700]);
        let rest = Bytes::from(vec![9u8; 324]);
        let op = DeviceOp::Write {
            offset: 1024,
            segments: vec![data, rest],
            fua: true,
        };
        assert!(ready(&dev, op).unwrap().is_empty());
        let read = ready(
            &dev,
            DeviceOp::Read {
                offset: 1024,
                len: 1024,
            },
        )
        .unwrap();
        assert_eq!(&read[..700], &[7u8; 700][..]);
        assert_eq!(&read[700..], &[9u8; 324][..]);
        assert!(ready(&dev, DeviceOp::Flush).unwrap().is_empty());
        let beyond = DeviceOp::Read {
            offset: 64 * 512,
            len: 512,
        };
        assert!(matches!(
            ready(&dev, beyond),
            Err(crate::StorageError::OutOfRange { .. })
        ));
    }
}
