//! Running under systemd: readiness and status (`Type=notify`, sd_notify(3) over
//! `NOTIFY_SOCKET`), the watchdog (`WatchdogSec=`), and reloading on SIGHUP
//! (`ExecReload=kill -HUP $MAINPID`). Outside systemd, `NOTIFY_SOCKET` is unset and the
//! notifications are no-ops; SIGHUP still reloads.

use std::sync::Arc;
use std::time::Duration;

use sd_notify::NotifyState;
use tracing::{error, info, warn};

use super::operator::Operator;

/// Tells the service manager the target is serving.
pub fn ready(status: &str) {
    notify(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// Tells the service manager the target is stopping.
pub fn stopping() {
    notify(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

fn notify(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        warn!(error = %e, "cannot notify the service manager");
    }
}

/// Pings the watchdog at half its interval while the target's session table answers (a
/// deadlock there, or a runtime that stopped running tasks, stops the pings and systemd
/// restarts the service). Returns at once when no watchdog is asked for.
pub async fn watchdog(operator: Arc<Operator>) {
    let Some(interval) = sd_notify::watchdog_enabled() else {
        return;
    };
    info!(?interval, "systemd watchdog enabled");
    let period = (interval / 2).max(Duration::from_millis(100));
    loop {
        tokio::time::sleep(period).await;
        let target = Arc::clone(operator.target());
        let alive = tokio::task::spawn_blocking(move || target.session_count())
            .await
            .is_ok();
        if alive {
            notify(&[NotifyState::Watchdog]);
        }
    }
}

/// Reloads the configuration on every SIGHUP; an invalid file changes nothing and is logged
/// with where it is wrong.
pub async fn reload_on_hangup(operator: Arc<Operator>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            warn!(error = %e, "cannot handle SIGHUP: no reload by signal");
            return;
        }
    };
    while hup.recv().await.is_some() {
        let mut states = vec![NotifyState::Reloading];
        if let Ok(now) = NotifyState::monotonic_usec_now() {
            states.push(now);
        }
        notify(&states);
        let op = Arc::clone(&operator);
        match tokio::task::spawn_blocking(move || op.reload("SIGHUP")).await {
            Ok(Ok(report)) => {
                for line in &report.changes {
                    info!("reload: {line}");
                }
                if report.changes.is_empty() {
                    info!("reload: nothing changed");
                }
            }
            Ok(Err(e)) => error!("reload refused, nothing changed: {e:#}"),
            Err(e) => error!(error = %e, "reload failed"),
        }
        ready("serving");
    }
}
