//! Connection management of a session: opening the connections it was asked for, connection
//! recovery (RFC 7143 section 6.3.4: at ErrorRecoveryLevel 2 a login with the session's TSIH
//! and a failed connection's CID replaces it, and the core moves its commands there), and
//! session reinstatement when the core asks for it (section 6.3.5: a login with the same ISID
//! and TSIH 0 replaces the failed session), within the configured bounds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_proto::initiator::{ConnectionSetup, Failure};
use sluice_proto::seq::Tsih;
use tokio::sync::mpsc;

use crate::driver::{Shared, ToSupervisor};
use crate::login::{login, Join, LoggedIn};

/// The connection setup a login hands to the core.
pub(crate) fn setup_of(l: &LoggedIn, cid: u16) -> ConnectionSetup {
    let o = &l.outcome;
    ConnectionSetup {
        cid,
        params: o.params,
        cmd_sn: l.cmd_sn,
        exp_stat_sn: o.exp_stat_sn,
        exp_cmd_sn: o.exp_cmd_sn,
        max_cmd_sn: o.max_cmd_sn,
    }
}

/// Runs until the session is over.
pub(crate) async fn supervise(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<ToSupervisor>) {
    while let Some(msg) = rx.recv().await {
        match msg {
            ToSupervisor::ConnectionEnded => {}
            ToSupervisor::Ended => break,
            ToSupervisor::RecoverConnection(cid) => recover_connection(&shared, cid).await,
            ToSupervisor::Reinstate => {
                if !reinstate(&shared, &mut rx).await {
                    break;
                }
            }
        }
    }
}

/// Opens connections 1.. up to what the application asked for and the target accepted
/// (MaxConnections, RFC 7143 section 13.2). A connection that cannot be opened is logged and
/// the session goes on with fewer.
pub(crate) async fn open_extra_connections(shared: &Arc<Shared>) {
    let accepted = shared.lock().params().max_connections;
    let wanted = shared.opts.connections.min(accepted);
    let (portal, tsih) = {
        let info = shared.info.lock().unwrap_or_else(|p| p.into_inner());
        (info.portal.clone(), info.tsih)
    };
    for cid in 1..wanted {
        if let Err(e) = join_connection(shared, &portal, tsih, cid).await {
            tracing::warn!(cid, error = %e, "could not add a connection to the session");
            break;
        }
    }
}

/// Logs in a connection to the session (its TSIH) with `cid`, hands it to the core (which
/// moves the commands of a failed connection with that CID to it) and starts its task.
async fn join_connection(
    shared: &Arc<Shared>,
    portal: &str,
    tsih: u16,
    cid: u16,
) -> Result<(), crate::Error> {
    let (cmd_sn, session) = {
        let core = shared.lock();
        (core.command_window().0, *core.params())
    };
    let iser = shared.info.lock().unwrap_or_else(|p| p.into_inner()).iser;
    let join = Join {
        tsih: Tsih(tsih),
        cid,
        cmd_sn,
        session,
        iser,
    };
    let l = login(
        portal.to_owned(),
        Some(&shared.target),
        shared.isid,
        Some(join),
        &shared.opts,
        &shared.counters,
    )
    .await?;
    let id = {
        let mut core = shared.lock();
        let id = core.add_connection(setup_of(&l, cid), Instant::now());
        shared.after(&mut core, None);
        id
    };
    shared.spawn_connection(id, l.transport);
    Ok(())
}

/// Logs in a connection with the session's TSIH and `cid` after DefaultTime2Wait (section 7.5:
/// "Recovery attempts ... SHOULD NOT be made before Time2Wait seconds"), within the reconnect
/// bound, and hands it to the core, which moves the failed connection's commands to it. If no
/// login succeeds the core falls back to session reinstatement.
async fn recover_connection(shared: &Arc<Shared>, cid: u16) {
    let opts = &shared.opts;
    let (portal, tsih, time2wait) = {
        let info = shared.info.lock().unwrap_or_else(|p| p.into_inner());
        (
            info.portal.clone(),
            info.tsih,
            info.params.default_time2wait,
        )
    };
    let delay = opts
        .reconnect_delay
        .unwrap_or(Duration::from_secs(u64::from(time2wait)));
    for attempt in 1..=opts.max_reconnects.max(1) {
        tokio::time::sleep(delay).await;
        match join_connection(shared, &portal, tsih, cid).await {
            Ok(()) => {
                shared.counters.lock().connection_recoveries += 1;
                tracing::debug!(cid, attempt, "connection recovered");
                return;
            }
            Err(e) => {
                tracing::debug!(cid, attempt, error = %e, "connection recovery login failed");
                // The target does not know the session (any more): nothing to join.
                if e.login_status().is_some_and(|s| s.class == 2) {
                    break;
                }
            }
        }
    }
    let mut core = shared.lock();
    core.connection_recovery_failed(cid);
    shared.after(&mut core, None);
}

/// Closes what is left, logs in again and hands the outstanding commands to the new session;
/// `false` when it gave up (every request then failed).
async fn reinstate(shared: &Arc<Shared>, rx: &mut mpsc::UnboundedReceiver<ToSupervisor>) -> bool {
    // The core told every connection to close; wait until their tasks are gone.
    while shared.connection_tasks() > 0 {
        match rx.recv().await {
            Some(
                ToSupervisor::ConnectionEnded
                | ToSupervisor::Reinstate
                | ToSupervisor::RecoverConnection(_),
            ) => {}
            Some(ToSupervisor::Ended) | None => return false,
        }
    }
    let opts = &shared.opts;
    let (portal, time2wait) = {
        let info = shared.info.lock().unwrap_or_else(|p| p.into_inner());
        (info.portal.clone(), info.params.default_time2wait)
    };
    let mut last = shared
        .last_error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .1
        .clone();
    let mut attempts = 0;
    while attempts < opts.max_reconnects {
        attempts += 1;
        let delay = opts
            .reconnect_delay
            .unwrap_or(Duration::from_secs(u64::from(time2wait)));
        tokio::time::sleep(delay).await;
        match login(
            portal.clone(),
            Some(&shared.target),
            shared.isid,
            None,
            opts,
            &shared.counters,
        )
        .await
        {
            Ok(l) => {
                {
                    let mut info = shared.info.lock().unwrap_or_else(|p| p.into_inner());
                    info.params = l.outcome.params;
                    info.tsih = l.outcome.tsih.0;
                    info.iser = l.transport.iser_settled();
                }
                let id = {
                    let mut core = shared.lock();
                    let id = core.reinstate(setup_of(&l, 0), Instant::now());
                    shared.after(&mut core, None);
                    id
                };
                shared.counters.lock().reconnects += 1;
                shared.spawn_connection(id, l.transport);
                open_extra_connections(shared).await;
                return true;
            }
            Err(e) => {
                tracing::debug!(attempt = attempts, error = %e, "reconnect failed");
                let fatal = e.login_status().is_some_and(|s| s.class == 2);
                last = e.to_string();
                if fatal {
                    break;
                }
            }
        }
    }
    *shared.last_error.lock().unwrap_or_else(|p| p.into_inner()) = (attempts, last);
    let mut core = shared.lock();
    core.fail_all(Failure::ConnectionLost);
    shared.after(&mut core, None);
    false
}
