//! Linux TCP sockets, measured and tuned without patching the kernel.
//!
//! Oguchi et al. ("Performance Improvement of iSCSI Remote Storage Access through Optimization
//! of Multiple Layers") patched monitors into the kernel to watch the congestion window and
//! the socket's send queue, and traced a WAN write stall to the send-buffer check
//! (`sk_stream_memory_free`). Today's kernels expose all of it to user space:
//!
//! - [`TcpInfo`]: `getsockopt(TCP_INFO)` decoded by the kernel's `struct tcp_info` layout
//!   (`info.rs`): congestion window, slow-start threshold, smoothed RTT, unacknowledged
//!   segments, retransmissions, delivery and pacing rates, the peer's window, bytes not yet
//!   sent, and the time the connection spent limited by the receiver's window or by its own
//!   send buffer, the study's cause named directly.
//! - [`SendQueue`]: `SIOCOUTQ` and `SIOCOUTQNSD`, the bytes in the send queue and those of
//!   them not yet sent.
//! - [`SocketOptions`]: congestion control, buffer sizes, `TCP_NODELAY`,
//!   `TCP_NOTSENT_LOWAT`, applied before or after connecting as each needs.
//! - [`check_congestion_control`]: whether a congestion control algorithm may be given to a
//!   socket on this host, with an error that lists those that may
//!   ([`set_congestion_control`], [`congestion_control`] set and read it).
//! - [`SendBufferTuner`]: sluice's answer to the stall: it watches the send-buffer-limited
//!   time and grows the buffer past the kernel's autotuning ceiling towards the measured
//!   bandwidth-delay product, within a bound (sans-IO; the initiator's driver feeds it).
//!
//! Module map: `info` (the decoder and the layout), `sys` (the system calls, the crate's only
//! `unsafe`), `options`, `congestion`, `tuner`.

// `unsafe` only in `sys` (getsockopt, ioctl, setsockopt with raw buffers), each block with a
// SAFETY comment.
#![deny(unsafe_code)]

mod congestion;
mod info;
mod options;
mod sys;
mod tuner;

pub use congestion::{
    check_congestion_control, check_congestion_control_in, congestion_control,
    parse_available_congestion_controls, set_congestion_control, CongestionError,
    AVAILABLE_CONGESTION_CONTROLS,
};
pub use info::{CaState, TcpInfo, TCP_INFO_MIN_LEN};
pub use options::{set_recv_buffer, set_send_buffer, BufferPolicy, SocketOptions};
pub use sys::{send_buffer_bytes, set_notsent_lowat, tcp_info, SendQueue};
pub use tuner::{SendBufferTuner, TunerDecision, DEFAULT_SEND_BUFFER_CEILING};
