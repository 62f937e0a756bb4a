//! Listening, accepting and shutting down.

use std::future::Future;
use std::io;

use crate::config::TargetConfig;

/// Serves `config` until `shutdown` completes, then logs initiators out and returns.
///
/// `on_listening` is called once with the bound addresses (useful with port 0), before any
/// connection is accepted.
pub async fn run(
    config: TargetConfig,
    on_listening: impl FnOnce(&[std::net::SocketAddr]) + Send,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let _ = (config, on_listening, shutdown);
    Err(io::Error::other("target driver not built yet"))
}
