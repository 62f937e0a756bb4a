//! What a connection's socket is set up with. Everything is applied before `connect`: the
//! receive buffer must be, since the window scale is chosen from it in the SYN (RFC 7323
//! section 2.2: it cannot change afterwards), and the others may be.

use std::io;
use std::os::fd::AsFd;

use rustix::net::sockopt;

use crate::tuner::DEFAULT_SEND_BUFFER_CEILING;

/// How a socket buffer is sized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufferPolicy {
    /// The kernel's autotuning alone (`net.ipv4.tcp_wmem` / `tcp_rmem` bound it).
    Kernel,
    /// A fixed size in bytes as the kernel accounts it (`SO_SNDBUF`/`SO_RCVBUF` report it;
    /// half of it is asked for, since the kernel doubles the request for its bookkeeping).
    /// Autotuning is off. Past `net.core.wmem_max`/`rmem_max` it needs CAP_NET_ADMIN
    /// (`SO_SNDBUFFORCE`), which is tried first; without it the kernel caps the size.
    Fixed(usize),
    /// Autotuning, and once the send buffer is what limits the connection (TCP_INFO's
    /// send-buffer-limited time), growth past autotuning's ceiling up to `ceiling` bytes
    /// (see [`SendBufferTuner`](crate::SendBufferTuner)). Send buffers only.
    Grow {
        /// The most the buffer may grow to.
        ceiling: usize,
    },
}

impl BufferPolicy {
    /// `kernel`, `grow`, `grow:BYTES` or `BYTES` (a plain number; callers parse units).
    pub fn name(&self) -> String {
        match self {
            BufferPolicy::Kernel => "kernel".into(),
            BufferPolicy::Fixed(n) => n.to_string(),
            BufferPolicy::Grow { ceiling } if *ceiling == DEFAULT_SEND_BUFFER_CEILING => {
                "grow".into()
            }
            BufferPolicy::Grow { ceiling } => format!("grow:{ceiling}"),
        }
    }
}

/// The TCP settings of a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketOptions {
    /// `TCP_NODELAY`: segments go out without waiting to fill (iSCSI writes whole PDUs).
    pub nodelay: bool,
    /// `TCP_CONGESTION` (`cubic`, `reno`, `bbr`, ... as `net.ipv4.tcp_available_congestion_control`
    /// lists); `None`: the system's default.
    pub congestion_control: Option<String>,
    /// The send buffer.
    pub send_buffer: BufferPolicy,
    /// A fixed receive buffer (bytes as the kernel accounts them); `None`: autotuning.
    pub recv_buffer: Option<usize>,
    /// `TCP_NOTSENT_LOWAT`: writable only while fewer bytes than this wait unsent.
    pub notsent_lowat: Option<u32>,
}

impl Default for SocketOptions {
    /// No delay, the system's congestion control, autotuned buffers with the send buffer
    /// free to grow past autotuning's ceiling when it limits the connection.
    fn default() -> Self {
        Self {
            nodelay: true,
            congestion_control: None,
            send_buffer: BufferPolicy::Grow {
                ceiling: DEFAULT_SEND_BUFFER_CEILING,
            },
            recv_buffer: None,
            notsent_lowat: None,
        }
    }
}

impl SocketOptions {
    /// Applies every setting to a socket not yet connected; the error names the setting.
    pub fn apply(&self, fd: impl AsFd) -> io::Result<()> {
        let fd = fd.as_fd();
        let named = |what: &str, e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"));
        sockopt::set_tcp_nodelay(fd, self.nodelay).map_err(|e| named("TCP_NODELAY", e.into()))?;
        if let Some(cc) = &self.congestion_control {
            sockopt::set_tcp_congestion(fd, cc).map_err(|e| {
                named(
                    &format!("TCP_CONGESTION {cc} (see net.ipv4.tcp_allowed_congestion_control)"),
                    e.into(),
                )
            })?;
        }
        if let BufferPolicy::Fixed(n) = self.send_buffer {
            set_send_buffer(fd, n).map_err(|e| named("SO_SNDBUF", e))?;
        }
        if let Some(n) = self.recv_buffer {
            set_recv_buffer(fd, n).map_err(|e| named("SO_RCVBUF", e))?;
        }
        if let Some(n) = self.notsent_lowat {
            crate::sys::set_notsent_lowat(fd, n).map_err(|e| named("TCP_NOTSENT_LOWAT", e))?;
        }
        Ok(())
    }
}

/// Sets the send buffer to `bytes` as the kernel accounts it: with `SO_SNDBUFFORCE` when
/// allowed, else `SO_SNDBUF` (capped by `net.core.wmem_max`). Returns the size in force.
pub fn set_send_buffer(fd: impl AsFd, bytes: usize) -> io::Result<usize> {
    let fd = fd.as_fd();
    let ask = (bytes / 2).max(1);
    if sockopt::set_socket_send_buffer_size_force(fd, ask).is_err() {
        sockopt::set_socket_send_buffer_size(fd, ask)?;
    }
    Ok(sockopt::socket_send_buffer_size(fd)?)
}

/// As [`set_send_buffer`], for the receive buffer (`net.core.rmem_max`).
pub fn set_recv_buffer(fd: impl AsFd, bytes: usize) -> io::Result<usize> {
    let fd = fd.as_fd();
    let ask = (bytes / 2).max(1);
    if sockopt::set_socket_recv_buffer_size_force(fd, ask).is_err() {
        sockopt::set_socket_recv_buffer_size(fd, ask)?;
    }
    Ok(sockopt::socket_recv_buffer_size(fd)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn fixed_buffers_and_congestion_control_are_applied() {
        let s = std::net::TcpStream::connect(
            TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap(),
        )
        .unwrap();
        let o = SocketOptions {
            nodelay: true,
            congestion_control: Some("reno".into()),
            send_buffer: BufferPolicy::Fixed(1 << 20),
            recv_buffer: Some(1 << 20),
            notsent_lowat: Some(65_536),
        };
        o.apply(&s).unwrap();
        assert_eq!(sockopt::tcp_congestion(&s).unwrap(), "reno");
        assert!(sockopt::tcp_nodelay(&s).unwrap());
        // Exactly the size asked for (root may force it past net.core.wmem_max), else no
        // more than the system's cap.
        let snd = sockopt::socket_send_buffer_size(&s).unwrap();
        let root = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
        if root {
            assert_eq!(snd, 1 << 20);
            assert_eq!(set_send_buffer(&s, 64 << 20).unwrap(), 64 << 20);
        } else {
            assert!(snd <= 1 << 20, "{snd}");
        }
        let bad = SocketOptions {
            congestion_control: Some("no-such-algorithm".into()),
            ..SocketOptions::default()
        };
        let e = bad.apply(&s).unwrap_err().to_string();
        assert!(e.contains("TCP_CONGESTION no-such-algorithm"), "{e}");
        assert_eq!(BufferPolicy::Fixed(4096).name(), "4096");
        assert_eq!(SocketOptions::default().send_buffer.name(), "grow");
    }
}
