//! Starting what operates a target: the control socket, the metrics endpoint, the admin API,
//! reload on SIGHUP and the systemd watchdog, as the configuration and flags ask.

use std::sync::Arc;

use anyhow::Context as _;
use tokio::task::JoinHandle;
use tracing::info;

use super::control::ControlSocket;
use super::http::{self, Endpoint};
use super::operator::Operator;
use super::token::Token;
use crate::cli_ops::OpsArgs;
use crate::config_file::{ControlConfig, MetricsConfig, ServiceConfig};

/// The file's `[metrics]` and `[control]` with the command line's flags over them.
pub fn with_flags(file: &ServiceConfig, flags: &OpsArgs) -> ServiceConfig {
    let mut s = file.clone();
    if let Some(listen) = flags.metrics {
        let token_file = s.metrics.as_ref().and_then(|m| m.token_file.clone());
        s.metrics = Some(MetricsConfig { listen, token_file });
    }
    if let Some(t) = &flags.metrics_token_file {
        if let Some(m) = &mut s.metrics {
            m.token_file = Some(t.clone());
        }
    }
    let touches_control = flags.control.is_some()
        || flags.control_group.is_some()
        || flags.admin_http.is_some()
        || flags.admin_token_file.is_some();
    if touches_control {
        let c = s.control.get_or_insert_with(ControlConfig::default);
        if flags.control.is_some() {
            c.socket.clone_from(&flags.control);
        }
        if flags.control_group.is_some() {
            c.group.clone_from(&flags.control_group);
        }
        if flags.admin_http.is_some() {
            c.http = flags.admin_http;
        }
        if flags.admin_token_file.is_some() {
            c.token_file.clone_from(&flags.admin_token_file);
        }
    }
    s
}

/// The tasks serving operators; they stop (and the control socket's file goes) on drop.
#[derive(Debug)]
pub struct Running(Vec<JoinHandle<()>>);

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Opens what `service` asks for and starts serving it, with reload on SIGHUP and the
/// systemd watchdog. Fails (before the target serves anything) when a socket or address
/// cannot be opened or a token file read.
pub async fn start(service: &ServiceConfig, operator: &Arc<Operator>) -> anyhow::Result<Running> {
    let mut tasks = Vec::new();
    if let Some(c) = &service.control {
        if let Some(path) = &c.socket {
            let socket = ControlSocket::bind(path, c.group.as_deref())?;
            info!(path = %path.display(), group = c.group.as_deref().unwrap_or("-"), "control socket open");
            tasks.push(tokio::spawn(socket.serve(Arc::clone(operator))));
        }
        if let Some(addr) = c.http {
            let file = c.token_file.as_deref().context(
                "the admin API needs a token file ([control] token_file or --admin-token-file)",
            )?;
            let endpoint = Endpoint::Admin(Token::read(file)?);
            let listener = http::bind(addr, &endpoint).await?;
            info!(%addr, "admin API listening");
            tasks.push(tokio::spawn(http::serve(
                listener,
                endpoint,
                Arc::clone(operator),
            )));
        }
    }
    if let Some(m) = &service.metrics {
        let token = m.token_file.as_deref().map(Token::read).transpose()?;
        let endpoint = Endpoint::Metrics(token);
        let listener = http::bind(m.listen, &endpoint).await?;
        let bound = listener.local_addr().unwrap_or(m.listen);
        info!(%bound, "metrics on http://{bound}/metrics");
        // Tests and scripts starting on port 0 learn the port from this line.
        eprintln!("sluice metrics on http://{bound}/metrics");
        tasks.push(tokio::spawn(http::serve(
            listener,
            endpoint,
            Arc::clone(operator),
        )));
    }
    tasks.push(tokio::spawn(super::service::reload_on_hangup(Arc::clone(
        operator,
    ))));
    tasks.push(tokio::spawn(super::service::watchdog(Arc::clone(operator))));
    Ok(Running(tasks))
}
