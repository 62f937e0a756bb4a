//! The initiator's side. The initiator's driver is a TCP driver (it reads Data-In in place
//! from its socket); rather than teach it a second kind of stream, an association gives it a
//! loopback TCP connection carrying whole PDUs, and talks UDP to the target. The extra
//! loopback hop is the experimental transport's cost, not the TCP path's.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UdpSocket};

use crate::association::{self, Role, Source};
use crate::UdpConfig;

/// How long the bridge waits for the driver to connect to it.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens an association with the target at `portal` (`host:port`, resolved here) and returns
/// the loopback address the caller connects its TCP driver to; the association lives as long
/// as that connection. Only the first connection is accepted.
pub async fn connect(portal: &str, cfg: UdpConfig) -> io::Result<SocketAddr> {
    let target = tokio::net::lookup_host(portal)
        .await?
        .next()
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{portal} resolves to no address"),
            )
        })?;
    let any: SocketAddr = if target.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let udp = UdpSocket::bind(any).await?;
    crate::size_buffers(&udp, cfg.socket_buffer_bytes);
    udp.connect(target).await?;
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        let accepted = tokio::time::timeout(ACCEPT_TIMEOUT, listener.accept()).await;
        let Ok(Ok((stream, _))) = accepted else {
            return;
        };
        drop(listener);
        let _ = stream.set_nodelay(true);
        let udp = Arc::new(udp);
        association::run(
            stream,
            Arc::clone(&udp),
            target,
            Source::Socket(udp),
            Role::Initiator,
            cfg,
        )
        .await;
    });
    Ok(local)
}
