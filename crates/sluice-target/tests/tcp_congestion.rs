//! `tcp_congestion` over real TCP connections: the target's side of an accepted connection
//! runs the configured algorithm (as the kernel reports it, `ss -ti`), the initiator's side
//! keeps the host's, and a name the kernel does not offer stops the target before it serves.

mod support;

use std::time::Duration;

use support::*;

/// The host's default algorithm and the ones a socket may be given.
fn host_algorithms() -> (String, Vec<String>) {
    let read = |name: &str| std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}")).unwrap();
    let default = read("tcp_congestion_control").trim().to_owned();
    let available = read("tcp_available_congestion_control")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    (default, available)
}

/// The congestion control of the established TCP sockets matching the `ss` filter `filter`
/// (e.g. `sport = :3260`), as the kernel reports it: the first word of each socket's
/// `ss -ti` information line.
fn algorithms_of(filter: &str) -> Vec<String> {
    let out = std::process::Command::new("ss")
        .args(["-H", "-t", "-i", "-n", "state", "established", filter])
        .output()
        .expect("ss (iproute2) runs");
    assert!(out.status.success(), "ss failed: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with([' ', '\t']))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_connections_run_the_configured_algorithm() {
    let (default, available) = host_algorithms();
    // One that differs from the host's default, so that the test shows the setting took.
    let Some(chosen) = available.iter().find(|a| **a != default).cloned() else {
        panic!("this kernel offers one congestion control only ({default}): nothing to choose");
    };
    let mut cfg = config();
    cfg.portals = vec!["127.0.0.1:0".parse().unwrap()];
    cfg.tcp_congestion = Some(chosen.clone());
    let (addr, stop_tx, server) = run_tcp(cfg).await;

    let mut p = Peer::tcp(addr).await;
    p.login(&LoginOpts::normal()).await.expect("login");
    p.clear_unit_attention().await;
    let port = addr.port();
    assert_eq!(
        algorithms_of(&format!("sport = :{port}")),
        [chosen],
        "the target's side of the connection"
    );
    assert_eq!(
        algorithms_of(&format!("dport = :{port}")),
        [default],
        "the initiator's side keeps the host's default"
    );
    // The connection serves as usual.
    let data = pattern(8 * BLOCK, 0x5a);
    assert_eq!(p.write_immediate(8, &data).await.status, 0);
    assert_eq!(p.read(8, 8).await, data);

    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(20), server)
        .await
        .expect("target stops")
        .unwrap()
        .unwrap();
}

#[test]
fn an_unknown_algorithm_stops_the_target_before_it_serves() {
    let mut cfg = config();
    cfg.tcp_congestion = Some("no-such-cc".into());
    let err = sluice_target::Target::new(cfg).expect_err("an unknown algorithm is refused");
    let text = err.to_string();
    assert!(
        text.contains("TCP congestion control \"no-such-cc\" is not available on this host"),
        "{text}"
    );
    // The message says what is available instead.
    assert!(text.contains("reno"), "{text}");
}
