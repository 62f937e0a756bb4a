//! One initiator connection: its own connection to the target, both directions pumped, and
//! the way it ends (a FIN passed on, or a reset of both sockets).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_fault::Direction;
use tokio::net::TcpStream;
use tracing::{debug, info, warn};

use crate::pump::{pump, Stop};
use crate::shared::{lock, Shared};

/// How long the connection to the target may take before the initiator's is given up.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves one accepted initiator connection until it ends.
pub(crate) async fn serve(client: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let (index, relay) = shared.open();
    let upstream = shared.upstream;
    let server = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(upstream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            warn!(conn = index, %peer, %upstream, error = %e, "cannot reach the target");
            shared.upstream_failed();
            reset(&client);
            shared.close(index);
            return;
        }
        Err(_) => {
            warn!(conn = index, %peer, %upstream, "connecting to the target timed out");
            shared.upstream_failed();
            reset(&client);
            shared.close(index);
            return;
        }
    };
    info!(conn = index, %peer, %upstream, "connection opened");
    // iSCSI PDUs are request and answer: Nagle's algorithm would hold them back.
    for s in [&client, &server] {
        if let Err(e) = s.set_nodelay(true) {
            debug!(conn = index, error = %e, "TCP_NODELAY");
        }
    }
    let (mut client, mut server) = (client, server);
    let result = {
        let (from_initiator, to_initiator) = client.split();
        let (from_target, to_target) = server.split();
        let i_to_t = pump(
            Direction::ToTarget,
            from_initiator,
            to_target,
            &relay,
            &shared,
        );
        let t_to_i = pump(
            Direction::ToInitiator,
            from_target,
            to_initiator,
            &relay,
            &shared,
        );
        tokio::try_join!(i_to_t, t_to_i)
    };
    let digests = lock(&relay).digests();
    match result {
        Ok(_) => info!(conn = index, "connection closed"),
        Err(Stop::Reset) => {
            info!(conn = index, "connection reset by the fault plan");
            reset(&client);
            reset(&server);
        }
        Err(Stop::Relay(e)) => {
            warn!(conn = index, error = %e, "stream cannot be relayed; resetting the connection");
            shared.unframeable();
            reset(&client);
            reset(&server);
        }
        Err(Stop::Io(e)) => {
            // One side failed (often a reset by the peer): the other side learns of it the
            // same way.
            info!(conn = index, error = %e, "connection ended");
            reset(&client);
            reset(&server);
        }
    }
    debug!(
        conn = index,
        header_digest = digests.header,
        data_digest = digests.data,
        "digests in force at the end"
    );
    shared.close(index);
}

/// Makes the socket's close send an RST instead of a FIN (SO_LINGER with a zero timeout),
/// for when it is dropped.
fn reset(stream: &TcpStream) {
    if let Err(e) = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO)) {
        debug!(error = %e, "SO_LINGER");
    }
}
