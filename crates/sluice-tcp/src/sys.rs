//! The system calls rustix does not wrap: `getsockopt(TCP_INFO)` into a raw buffer, the
//! `SIOCOUTQ`/`SIOCOUTQNSD` ioctls, and `TCP_NOTSENT_LOWAT`.
#![allow(unsafe_code)] // getsockopt, ioctl and setsockopt with raw buffers; see SAFETY

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use crate::info::TcpInfo;

/// `SIOCOUTQ` (= `TIOCOUTQ`, asm-generic/ioctls.h): bytes in the send queue, sent or not.
const SIOCOUTQ: libc::c_ulong = 0x5411;
/// `SIOCOUTQNSD` (linux/sockios.h): bytes in the send queue not yet sent.
const SIOCOUTQNSD: libc::c_ulong = 0x894b;
/// Room for every field a kernel of today fills (about 250 bytes) and some to come.
const INFO_BUF: usize = 512;

/// `getsockopt(fd, IPPROTO_TCP, TCP_INFO)`, decoded.
pub fn tcp_info(fd: impl AsFd) -> io::Result<TcpInfo> {
    let mut buf = [0u8; INFO_BUF];
    let mut len = INFO_BUF as libc::socklen_t;
    // SAFETY: `buf` is a live, writable buffer of `len` bytes, and `len` a live socklen_t the
    // kernel overwrites with the number of bytes it wrote (never more than it was given).
    let rc = unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let n = (len as usize).min(INFO_BUF);
    TcpInfo::decode(&buf[..n]).map_err(io::Error::other)
}

/// The send queue of a TCP socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendQueue {
    /// Bytes written and not yet acknowledged (`SIOCOUTQ`).
    pub queued: u32,
    /// Of them, bytes not yet sent (`SIOCOUTQNSD`).
    pub not_sent: u32,
}

impl SendQueue {
    /// Reads both lengths (two ioctls: the kernel may move between them).
    pub fn read(fd: impl AsFd) -> io::Result<Self> {
        let fd = fd.as_fd();
        Ok(Self {
            queued: int_ioctl(fd.as_raw_fd(), SIOCOUTQ)?,
            not_sent: int_ioctl(fd.as_raw_fd(), SIOCOUTQNSD)?,
        })
    }

    /// Bytes sent and waiting for their acknowledgement.
    pub fn in_flight(&self) -> u32 {
        self.queued.saturating_sub(self.not_sent)
    }
}

fn int_ioctl(fd: libc::c_int, request: libc::c_ulong) -> io::Result<u32> {
    let mut v: libc::c_int = 0;
    // SAFETY: both requests write one `int` through the pointer, which points at a live one.
    let rc = unsafe { libc::ioctl(fd, request, &mut v as *mut libc::c_int) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(u32::try_from(v).unwrap_or(0))
}

/// `setsockopt(TCP_NOTSENT_LOWAT)`: the socket counts as writable only while fewer than
/// `bytes` are unsent.
pub fn set_notsent_lowat(fd: impl AsFd, bytes: u32) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: the option reads one `int` from a pointer to a live one of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The send buffer's size as the kernel accounts it (`SO_SNDBUF`: twice what was asked
/// for, or what autotuning grew it to).
pub fn send_buffer_bytes(fd: impl AsFd) -> io::Result<usize> {
    Ok(rustix::net::sockopt::socket_send_buffer_size(fd)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    /// The decoder against the running kernel: what was written and read must show up in
    /// the fields that count it.
    #[test]
    fn the_running_kernel_agrees_with_the_layout() {
        let (mut a, mut b) = pair();
        let data = vec![7u8; 3 << 20];
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            let mut got = 0;
            while got < 3 << 20 {
                got += b.read(&mut buf).unwrap();
            }
            b
        });
        a.write_all(&data).unwrap();
        let _b = reader.join().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let info = loop {
            let i = tcp_info(&a).unwrap();
            if i.payload_acked() == 3 << 20 || Instant::now() > deadline {
                break i;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(info.state, 1, "ESTABLISHED");
        assert_eq!(info.payload_acked(), 3 << 20);
        assert!(info.bytes_sent.unwrap() >= 3 << 20);
        assert_eq!(info.unacked, 0);
        assert_eq!(info.notsent_bytes, 0);
        assert!(
            info.snd_mss > 500 && info.snd_mss <= 65_483,
            "{}",
            info.snd_mss
        );
        assert!(info.snd_cwnd >= 1 && info.min_rtt_us > 0 && info.rtt_us > 0);
        assert!(info.busy_time_us >= info.sndbuf_limited_us + info.rwnd_limited_us);
        assert!(info.snd_wnd.unwrap() > 0);
        assert_eq!(SendQueue::read(&a).unwrap(), SendQueue::default());
    }

    #[test]
    fn a_peer_that_does_not_read_leaves_bytes_queued_and_unsent() {
        let (a, _b) = pair();
        a.set_nonblocking(true).unwrap();
        let chunk = vec![1u8; 1 << 20];
        let mut written = 0u64;
        let mut w = &a;
        // Until the receiver's buffer and our send buffer are both full.
        loop {
            match w.write(&chunk) {
                Ok(n) => written += n as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(50));
        let q = SendQueue::read(&a).unwrap();
        let info = tcp_info(&a).unwrap();
        assert!(q.queued > 0 && q.not_sent > 0, "{q:?}");
        assert!(q.queued >= q.not_sent);
        // The two views of the unsent bytes agree (nothing moves: the peer's window is shut).
        assert_eq!(info.notsent_bytes, q.not_sent);
        assert_eq!(info.payload_acked() + u64::from(q.queued), written);
        assert!(send_buffer_bytes(&a).unwrap() > 0);
    }

    #[test]
    fn notsent_lowat_is_set() {
        let (a, _b) = pair();
        set_notsent_lowat(&a, 128 * 1024).unwrap();
    }
}
