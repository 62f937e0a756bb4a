//! TUN devices and network namespaces: the two ends of an emulated link.
#![allow(unsafe_code)] // ioctl(TUNSETIFF) and setns; see the SAFETY comments

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `TUNSETIFF` from linux/if_tun.h: _IOW('T', 202, int).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// A layer-3 device: packets start with the IP header.
const IFF_TUN: libc::c_short = 0x0001;
/// No 4-byte packet-information prefix.
const IFF_NO_PI: libc::c_short = 0x1000;

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags of the union.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _rest: [u8; 22],
}

/// Creates the TUN device `name` in the calling thread's network namespace and returns its
/// file descriptor (the device lives as long as the descriptor).
pub(super) fn open_tun(name: &str) -> io::Result<OwnedFd> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {name:?} must be 1 to 15 bytes"),
        ));
    }
    let file = File::options()
        .read(true)
        .write(true)
        .open("/dev/net/tun")?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_TUN | IFF_NO_PI,
        _rest: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: the descriptor is an open /dev/net/tun; `req` is a live, writable struct laid
    // out as the kernel's `struct ifreq` (16-byte name, flags first in the union, 40 bytes
    // in all), which TUNSETIFF reads and may write back.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReq) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(OwnedFd::from(file))
}

/// Runs `f` on a fresh thread that first enters the network namespace `ns` (a name from
/// `ip netns add`); descriptors it opens stay bound to that namespace.
pub(super) fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let nsfile = File::open(&path)?;
        // SAFETY: setns takes a descriptor we own (open for the call's duration) and a
        // namespace type constant; it changes only this thread's namespace, which ends with
        // the thread.
        if unsafe { libc::setns(nsfile.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        f()
    })
    .join()
    .map_err(|_| io::Error::other("the namespace thread panicked"))?
}

/// Reads one packet, waiting up to `timeout_ms` only when none is ready (the descriptor is
/// non-blocking, see [`nonblocking`]); `Ok(0)` on timeout.
pub(super) fn read_packet(fd: &OwnedFd, buf: &mut [u8], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes for the whole call.
    let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if r > 0 {
        return Ok(r as usize);
    }
    let e = io::Error::last_os_error();
    if r < 0 && e.kind() != io::ErrorKind::WouldBlock {
        return Err(e);
    }
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is one live pollfd and we pass a count of 1.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(0)
        } else {
            Err(e)
        };
    }
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: as above.
    let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock {
            Ok(0)
        } else {
            Err(e)
        };
    }
    Ok(r as usize)
}

/// Makes reads on `fd` return at once when no packet is waiting.
pub(super) fn nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own, with integer arguments only.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Writes one packet.
pub(super) fn write_packet(fd: &OwnedFd, pkt: &[u8]) -> io::Result<()> {
    // SAFETY: `pkt` is a live buffer of `pkt.len()` bytes for the whole call.
    let r = unsafe { libc::write(fd.as_raw_fd(), pkt.as_ptr().cast(), pkt.len()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Duplicates a descriptor (one per forwarding thread).
pub(super) fn dup(fd: &OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: dup of a descriptor we own; the result, if valid, is a new descriptor that
    // nothing else owns.
    let n = unsafe { libc::dup(fd.as_raw_fd()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `n` is a fresh descriptor from dup, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

/// Asks for timer precision of about a microsecond on this thread (the default slack of
/// 50 us would bunch a gigabit link's packets).
pub(crate) fn precise_timers() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and affects only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}
