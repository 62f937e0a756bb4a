//! Memory held per idle connection and per idle logged-in session, measured as the growth of
//! this process's resident set (the target runs in-process, over real TCP through `run`).
//!
//! The figure includes the test's own client side (a TcpStream and a small read buffer per
//! connection), so it overstates what the target holds. Kernel socket buffers are not part of
//! the RSS. Both measurements run in one test so that nothing else in this binary allocates
//! meanwhile.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use support::*;
use tokio::net::TcpStream;

/// Most memory an idle connection or session may cost: the budget sluice holds itself to.
const MAX_BYTES_PER_CONNECTION: u64 = 64 * 1024;
const CONNECTIONS: usize = 1000;
const SESSIONS: usize = 1000;

fn raise_fd_limit(want: u64) {
    // SAFETY: `lim` is an initialised rlimit on our stack, live for both calls; getrlimit
    // writes only that struct and setrlimit only reads it.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

async fn start_target() -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let mut cfg = config();
    cfg.portals = vec!["127.0.0.1:0".parse().unwrap()];
    cfg.limits.max_connections = 4 * CONNECTIONS;
    cfg.limits.max_sessions = 4 * SESSIONS;
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        sluice_target::run(
            cfg,
            move |a: &[SocketAddr]| {
                let _ = addr_tx.send(a[0]);
            },
            async move {
                let _ = stop_rx.await;
            },
        )
        .await
        .expect("run");
    });
    (addr_rx.await.unwrap(), stop_tx)
}

/// Lets the target's tasks settle, then reads the RSS.
async fn settled_rss() -> u64 {
    tokio::time::sleep(Duration::from_millis(300)).await;
    rss_kib()
}

fn per_connection(before: u64, after: u64, n: usize) -> u64 {
    after.saturating_sub(before) * 1024 / n as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_and_sessions_stay_small() {
    raise_fd_limit(4 * (CONNECTIONS + SESSIONS) as u64 + 256);
    let (addr, stop) = start_target().await;

    // Warm up: a connection and a session, so that one-off allocations (runtime, LUN, first
    // buffers) are not counted below.
    let mut warm = Peer::tcp(addr).await;
    warm.login(&LoginOpts::normal().with_isid(255))
        .await
        .unwrap();
    warm.clear_unit_attention().await;

    // 1. Idle TCP connections, not logged in.
    let before = settled_rss().await;
    let mut idle = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        idle.push(TcpStream::connect(addr).await.expect("connect"));
    }
    let after = settled_rss().await;
    let per_conn = per_connection(before, after, CONNECTIONS);
    println!(
        "idle connections: {CONNECTIONS}, RSS {before} KiB -> {after} KiB, {per_conn} bytes per connection"
    );
    // 2. Idle logged-in sessions (each has run one command, so its SCSI nexus exists too).
    // The idle connections stay open, so that the sessions cannot reuse memory they freed.
    let before = settled_rss().await;
    let mut sessions = Vec::with_capacity(SESSIONS);
    for i in 0..SESSIONS {
        let mut p = Peer::tcp(addr).await;
        let opts = LoginOpts {
            isid: sluice_proto::seq::Isid([0x80, 0, 0, (i >> 16) as u8, (i >> 8) as u8, i as u8]),
            ..LoginOpts::normal()
        };
        p.login(&opts).await.expect("login");
        p.clear_unit_attention().await;
        sessions.push(p);
    }
    let after = settled_rss().await;
    let per_session = per_connection(before, after, SESSIONS);
    println!(
        "idle sessions: {SESSIONS}, RSS {before} KiB -> {after} KiB, {per_session} bytes per session"
    );
    // Every one still answers.
    for p in sessions.iter_mut().step_by(97) {
        p.assert_alive().await;
    }
    drop(sessions);
    drop(idle);
    drop(warm);
    let _ = stop.send(());

    assert!(
        per_conn < MAX_BYTES_PER_CONNECTION,
        "{per_conn} bytes per idle connection"
    );
    assert!(
        per_session < MAX_BYTES_PER_CONNECTION,
        "{per_session} bytes per idle session"
    );
}
