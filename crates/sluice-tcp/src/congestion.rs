//! Choosing a socket's congestion control (`TCP_CONGESTION`, tcp(7)) by name, and checking
//! the name first.
//!
//! Linux lets a process pick the algorithm per socket among those the kernel has loaded
//! ([`AVAILABLE_CONGESTION_CONTROLS`]); an unprivileged process only among
//! `net.ipv4.tcp_allowed_congestion_control`, one with `CAP_NET_ADMIN` among all of them.
//! The sender's algorithm is the one that paces and sizes what goes on the wire: for an iSCSI
//! read, the target's.

use std::io;
use std::os::fd::AsFd;

/// Where Linux lists the congestion control algorithms a socket may be given.
pub const AVAILABLE_CONGESTION_CONTROLS: &str =
    "/proc/sys/net/ipv4/tcp_available_congestion_control";

/// Longest algorithm name the kernel accepts (`TCP_CA_NAME_MAX` is 16 bytes with the NUL).
const NAME_MAX: usize = 15;

/// Why a congestion control name cannot be used.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum CongestionError {
    /// Not among the algorithms this kernel has loaded.
    #[error(
        "TCP congestion control {name:?} is not available on this host (available: {}; \
         see {AVAILABLE_CONGESTION_CONTROLS})",
        .available.join(", ")
    )]
    Unknown {
        /// The name asked for.
        name: String,
        /// What the kernel offers.
        available: Vec<String>,
    },
    /// The list of algorithms could not be read.
    #[error("cannot read {AVAILABLE_CONGESTION_CONTROLS} to check TCP congestion control {name:?}: {error}")]
    Unreadable {
        /// The name asked for.
        name: String,
        /// What the system said.
        error: String,
    },
}

/// The algorithms listed in the contents of [`AVAILABLE_CONGESTION_CONTROLS`] (names separated by spaces).
pub fn parse_available_congestion_controls(list: &str) -> Vec<String> {
    list.split_whitespace().map(str::to_owned).collect()
}

/// Checks `name` against `available`. Names are compared exactly, as the kernel does.
pub fn check_congestion_control_in(
    name: &str,
    available: &[String],
) -> Result<(), CongestionError> {
    if name.len() <= NAME_MAX && available.iter().any(|a| a == name) {
        return Ok(());
    }
    Err(CongestionError::Unknown {
        name: name.to_owned(),
        available: available.to_vec(),
    })
}

/// Checks `name` against the algorithms this host's kernel has loaded.
pub fn check_congestion_control(name: &str) -> Result<(), CongestionError> {
    let list = std::fs::read_to_string(AVAILABLE_CONGESTION_CONTROLS).map_err(|e| {
        CongestionError::Unreadable {
            name: name.to_owned(),
            error: e.to_string(),
        }
    })?;
    check_congestion_control_in(name, &parse_available_congestion_controls(&list))
}

/// Gives the TCP socket `fd` the congestion control `name`.
pub fn set_congestion_control(fd: impl AsFd, name: &str) -> io::Result<()> {
    rustix::net::sockopt::set_tcp_congestion(fd, name).map_err(io::Error::from)
}

/// The congestion control of the TCP socket `fd`.
pub fn congestion_control(fd: impl AsFd) -> io::Result<String> {
    rustix::net::sockopt::tcp_congestion(fd).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernel_list() {
        assert_eq!(
            parse_available_congestion_controls("reno bbr cubic\n"),
            ["reno", "bbr", "cubic"]
        );
        assert!(parse_available_congestion_controls("\n").is_empty());
    }

    #[test]
    fn accepts_only_listed_names() {
        let available = parse_available_congestion_controls("reno cubic");
        assert_eq!(check_congestion_control_in("cubic", &available), Ok(()));
        let err = check_congestion_control_in("bbr", &available).unwrap_err();
        assert_eq!(
            err.to_string(),
            "TCP congestion control \"bbr\" is not available on this host (available: reno, \
             cubic; see /proc/sys/net/ipv4/tcp_available_congestion_control)"
        );
        // Exact names only: the kernel does not fold case or trim.
        assert!(check_congestion_control_in("CUBIC", &available).is_err());
        assert!(check_congestion_control_in(" cubic", &available).is_err());
        assert!(check_congestion_control_in("", &available).is_err());
    }

    #[test]
    fn reno_is_always_there() {
        // Linux builds Reno in and lists it first, whatever else is loaded.
        assert_eq!(check_congestion_control("reno"), Ok(()));
        assert!(matches!(
            check_congestion_control("no-such-algorithm"),
            Err(CongestionError::Unknown { .. })
        ));
    }

    #[test]
    fn set_and_read_back_on_a_socket() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        set_congestion_control(&listener, "reno").unwrap();
        assert_eq!(congestion_control(&listener).unwrap(), "reno");
        let err = set_congestion_control(&listener, "no-such-algorithm").unwrap_err();
        assert_eq!(
            err.raw_os_error(),
            Some(rustix::io::Errno::NOENT.raw_os_error())
        );
    }
}
