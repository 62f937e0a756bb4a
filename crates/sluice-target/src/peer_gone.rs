//! Whether the initiator has already left a connection whose PDUs are still being read.
//!
//! A target that stalls (a process stopped and resumed, a host frozen under a hypervisor, a
//! worker blocked for seconds) can come back to a socket whose receive queue still holds
//! commands the initiator sent before it gave up: Linux hands queued data to `read` before it
//! reports the initiator's FIN or reset. By then a multipath initiator has retried those
//! commands through another path and may have written the same blocks again since; executing
//! the stale copies would put old data over new. Once the connection has failed, its tasks
//! are the recovery's business, not this connection's (RFC 7143 section 7.1: a connection may
//! fail at any time, and what becomes of its active tasks is decided by the recovery, on
//! another connection or session), so a command read from a connection the initiator has
//! already closed or reset is not executed: the connection ends there, as it would have had
//! the close been seen first.
//!
//! Asking costs a `poll` system call, so [`StallWatch`] asks only when the reader has been
//! away from the socket for longer than [`STALL`]: a connection that reads continuously
//! never asks, an idle one asks once when its next command arrives.

use std::time::Duration;

/// How long the reader may be away from the socket (waiting in, or since, its last read)
/// before the next PDU it hands out is checked against a close the initiator already sent. An
/// initiator gives up on a connection after seconds (NOP-Out timeouts, SCSI command
/// timeouts), never sooner than this.
pub(crate) const STALL: Duration = Duration::from_secs(1);

/// How the initiator left.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Gone {
    /// It closed its sending half (FIN).
    Closed,
    /// It reset the connection, or the socket reports another error.
    Reset,
}

/// Whether `sock`'s peer has closed or reset the connection, asked without waiting. Data still
/// queued does not hide the close: `POLLRDHUP` is raised as soon as the FIN arrives.
pub(crate) fn peer_gone(sock: &socket2::SockRef<'_>) -> std::io::Result<Option<Gone>> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let socket: &socket2::Socket = sock;
    let mut fds = [PollFd::new(socket, PollFlags::IN | PollFlags::RDHUP)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match poll(&mut fds, Some(&now)) {
        Ok(0) | Err(rustix::io::Errno::INTR) => Ok(None),
        Ok(_) => {
            let got = fds[0].revents();
            Ok(if got.intersects(PollFlags::ERR | PollFlags::HUP) {
                Some(Gone::Reset)
            } else if got.contains(PollFlags::RDHUP) {
                Some(Gone::Closed)
            } else {
                None
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// The coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`, a few milliseconds of resolution):
/// read for every PDU handed out, so it must cost next to nothing, and a one-second threshold
/// needs no finer grain.
fn coarse_now() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// When the reader last was at the socket, to decide whether a PDU needs the check.
#[derive(Debug)]
pub(crate) struct StallWatch {
    /// On the coarse monotonic clock.
    since: Duration,
}

impl StallWatch {
    pub(crate) fn new() -> Self {
        Self {
            since: coarse_now(),
        }
    }

    /// A watch whose reader has been away for `away` already (for tests).
    #[cfg(test)]
    pub(crate) fn stalled_since(away: Duration) -> Self {
        Self {
            since: coarse_now().saturating_sub(away),
        }
    }

    /// A read of the socket is about to start.
    pub(crate) fn reading(&mut self) {
        self.since = coarse_now();
    }

    /// Whether a PDU handed out now needs the check: the reader has been away from the socket
    /// for longer than [`STALL`] since the read that brought it began. Restarts the clock, so
    /// a stalled connection asks once, not once per buffered PDU.
    pub(crate) fn stalled(&mut self) -> bool {
        let now = coarse_now();
        if now.saturating_sub(self.since) <= STALL {
            return false;
        }
        self.since = now;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        (client, server)
    }

    /// Queued data does not hide a FIN, nor a reset.
    #[test]
    fn a_close_behind_queued_data_is_seen() {
        let (mut client, server) = pair();
        client.write_all(b"a command").expect("write");
        let sock = socket2::SockRef::from(&server);
        // Data alone: nothing gone.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(peer_gone(&sock).expect("poll"), None);
        client
            .shutdown(std::net::Shutdown::Write)
            .expect("shutdown");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(peer_gone(&sock).expect("poll"), Some(Gone::Closed));

        let (mut client, server) = pair();
        client.write_all(b"a command").expect("write");
        socket2::SockRef::from(&client)
            .set_linger(Some(Duration::ZERO))
            .expect("linger 0");
        drop(client);
        std::thread::sleep(Duration::from_millis(20));
        let sock = socket2::SockRef::from(&server);
        assert_eq!(peer_gone(&sock).expect("poll"), Some(Gone::Reset));
    }

    #[test]
    fn only_a_long_absence_asks_and_then_once() {
        let mut watch = StallWatch::new();
        watch.reading();
        assert!(!watch.stalled());
        let mut watch = StallWatch::stalled_since(STALL * 2);
        assert!(watch.stalled());
        assert!(!watch.stalled(), "the clock restarts after a check");
    }
}
