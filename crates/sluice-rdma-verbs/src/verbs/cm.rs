//! Connections through RDMA-CM: addressed by IP and port as iSER's are (RFC 7145 section
//! 5.1; port 3260 by default), with the queue pair taken through INIT, RTR and RTS with the
//! attributes the connection manager resolves.
//!
//! The iSER CM header (RFC 7145 section 9.1, [`crate::private_data`]) belongs in the
//! connection request's and reply's private data, but sideway 0.4.3's
//! `ConnectionParameter` and `Event` expose no private data: requests go out without it and
//! requests that carry it are accepted without reading it. Linux's isert target reads the
//! header only when private data is present, so it still accepts such a request; what is
//! lost is the negotiation of ZBVA and Send with Invalidate, which a datamover on this
//! provider must therefore not rely on (it cannot post Send with Invalidate anyway). A
//! sideway release that exposes `rdma_conn_param.private_data` closes the gap;
//! [`crate::private_data`] already builds and checks the bytes.
//! The responder resources and initiator depth are sideway's defaults (1 and 1): one RDMA
//! Read outstanding each way.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sideway::ibverbs::queue_pair::QueuePairState;
use sideway::rdmacm::communication_manager::{
    ConnectionParameter, Event, EventChannel, EventType, Identifier, PortSpace,
};

use super::failed;
use super::queue::{QueueDepths, VerbsQueuePair};
use crate::error::VerbsError;

/// An established connection: the queue pair and the connection manager's identifier (kept
/// so that dropping the connection disconnects it).
pub struct VerbsConnection {
    /// The queue pair, its regions and completions.
    pub qp: VerbsQueuePair,
    id: Arc<Identifier>,
    _channel: Arc<EventChannel>,
}

impl Drop for VerbsConnection {
    fn drop(&mut self) {
        let _ = self.id.disconnect();
    }
}

/// Waits for the next event on `channel` and requires it to be `want`.
fn expect_event(
    channel: &Arc<EventChannel>,
    want: EventType,
    name: &'static str,
) -> Result<Event, VerbsError> {
    let event = channel
        .get_cm_event()
        .map_err(|e| failed("rdma_get_cm_event")(&e))?;
    if event.event_type() == want {
        return Ok(event);
    }
    let got = format!("{:?} (status {})", event.event_type(), event.status());
    let _ = event.ack();
    Err(VerbsError::UnexpectedEvent {
        expected: name,
        got,
    })
}

/// Takes `qp` to INIT, RTR and RTS with the attributes `id` resolved.
fn ready(
    id: &Identifier,
    qp: &mut VerbsQueuePair,
    states: &[QueuePairState],
) -> Result<(), VerbsError> {
    for state in states {
        let attr = id
            .get_qp_attr(*state)
            .map_err(|e| failed("rdma_init_qp_attr")(&e))?;
        qp.modify(&attr)?;
    }
    Ok(())
}

/// Connects to `addr`. `before_connect` runs once the queue pair is in INIT, so the caller
/// can register regions and post receives before any Send can arrive (iSER posts its
/// receives first: RFC 7145 section 5.1).
pub fn connect(
    addr: SocketAddr,
    timeout: Duration,
    depths: QueueDepths,
    before_connect: impl FnOnce(&mut VerbsQueuePair) -> Result<(), VerbsError>,
) -> Result<VerbsConnection, VerbsError> {
    let channel = EventChannel::new().map_err(|_| VerbsError::NoDevice)?;
    let id = channel
        .create_id(PortSpace::Tcp)
        .map_err(|e| failed("rdma_create_id")(&e))?;
    id.resolve_addr(None, addr, timeout)
        .map_err(|e| failed("rdma_resolve_addr")(&e))?;
    ack(expect_event(
        &channel,
        EventType::AddressResolved,
        "address resolved",
    )?)?;
    id.resolve_route(timeout)
        .map_err(|e| failed("rdma_resolve_route")(&e))?;
    ack(expect_event(
        &channel,
        EventType::RouteResolved,
        "route resolved",
    )?)?;
    let ctx = id.get_device_context().ok_or(VerbsError::NoDevice)?;
    let mut qp = VerbsQueuePair::new(&ctx, depths)?;
    ready(&id, &mut qp, &[QueuePairState::Init])?;
    before_connect(&mut qp)?;
    let mut param = ConnectionParameter::default();
    param.setup_qp_number(qp.qp_number());
    id.connect(param).map_err(|e| failed("rdma_connect")(&e))?;
    ack(expect_event(
        &channel,
        EventType::ConnectResponse,
        "connect response",
    )?)?;
    ready(
        &id,
        &mut qp,
        &[QueuePairState::ReadyToReceive, QueuePairState::ReadyToSend],
    )?;
    id.establish().map_err(|e| failed("rdma_establish")(&e))?;
    Ok(VerbsConnection {
        qp,
        id,
        _channel: channel,
    })
}

fn ack(event: Event) -> Result<(), VerbsError> {
    event.ack().map_err(|e| failed("rdma_ack_cm_event")(&e))
}

/// A listening RDMA-CM identifier.
pub struct VerbsListener {
    channel: Arc<EventChannel>,
    _id: Arc<Identifier>,
}

impl VerbsListener {
    /// Listens on `addr` (an address of an RDMA-capable interface, or the unspecified one).
    pub fn bind(addr: SocketAddr) -> Result<Self, VerbsError> {
        let channel = EventChannel::new().map_err(|_| VerbsError::NoDevice)?;
        let id = channel
            .create_id(PortSpace::Tcp)
            .map_err(|e| failed("rdma_create_id")(&e))?;
        id.bind_addr(addr)
            .map_err(|e| failed("rdma_bind_addr")(&e))?;
        id.listen(64).map_err(|e| failed("rdma_listen")(&e))?;
        Ok(Self { channel, _id: id })
    }

    /// Accepts the next connection request; `before_accept` runs with the queue pair ready
    /// to receive, so receives are posted before the initiator can send.
    pub fn accept(
        &self,
        depths: QueueDepths,
        before_accept: impl FnOnce(&mut VerbsQueuePair) -> Result<(), VerbsError>,
    ) -> Result<VerbsConnection, VerbsError> {
        let event = expect_event(&self.channel, EventType::ConnectRequest, "connect request")?;
        let id = event.cm_id().ok_or(VerbsError::UnexpectedEvent {
            expected: "connect request with an identifier",
            got: "none".into(),
        })?;
        ack(event)?;
        let ctx = id.get_device_context().ok_or(VerbsError::NoDevice)?;
        let mut qp = VerbsQueuePair::new(&ctx, depths)?;
        ready(
            &id,
            &mut qp,
            &[QueuePairState::Init, QueuePairState::ReadyToReceive],
        )?;
        before_accept(&mut qp)?;
        ready(&id, &mut qp, &[QueuePairState::ReadyToSend])?;
        let mut param = ConnectionParameter::default();
        param.setup_qp_number(qp.qp_number());
        id.accept(param).map_err(|e| failed("rdma_accept")(&e))?;
        ack(expect_event(
            &self.channel,
            EventType::Established,
            "established",
        )?)?;
        Ok(VerbsConnection {
            qp,
            id,
            _channel: Arc::clone(&self.channel),
        })
    }
}
