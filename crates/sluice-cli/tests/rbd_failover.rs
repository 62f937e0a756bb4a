//! Failover of a multipath initiator between two gateways of one RBD image, against a real
//! single-node Ceph cluster (interop tier).
//!
//! `sluice bench --verify --paths` writes and reads back through both gateways while the
//! gateway that owns the LU (active/optimized, recorded owner, holding the image's exclusive
//! lock as the writer) is killed with SIGKILL mid-run. The other gateway must fence the dead
//! owner (blocklist its client) and take over,
//! the initiator must move its commands there, and the run must end with no failed command,
//! no mismatch and no acknowledged write missing. The killed gateway is restarted during the
//! run and must rejoin as active/non-optimized, its path logged in again.

mod support;

use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use sluice_test_support::CephCluster;
use support::gateways::{
    report_target_port_groups, session, wait_for_owner, Gateways, ACTIVE_NON_OPTIMIZED,
};

/// How long the gateways may take to agree on a first owner.
const SETTLE: Duration = Duration::from_secs(20);
/// The failover goal with default settings: the longest pause between two completions.
const FAILOVER_GOAL: Duration = Duration::from_secs(10);

/// The seconds in a bench report line `... LABEL X.XXX s ...`.
fn seconds_after(text: &str, label: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.contains(label))?;
    let rest = &line[line.find(label)? + label.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

#[test]
fn bench_verify_survives_kill_of_the_owning_gateway() {
    let c = CephCluster::start();
    c.create_image("failover", 64);
    let mut gw = Gateways::start(&c, "failover", 2, &[]);
    let observers: Vec<_> = (0..2)
        .map(|i| session(gw.url(i), "iqn.2026-11.test:observer"))
        .collect();
    let (owner, _) = wait_for_owner(&[&observers[0], &observers[1]], SETTLE, |_| true);
    drop(observers);
    let o = usize::from(owner - 1);
    let other = 1 - o;

    // Random 4 KiB writes at QD 8 through the owner's URL plus the other gateway's portal,
    // read back after the run (--verify checks every acknowledged write).
    let bench = Process::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "bench",
            gw.url(o),
            "--paths",
            gw.portal(other),
            "--rw",
            "randwrite",
            "--bs",
            "4k",
            "--qd",
            "8",
            "--size",
            "32M",
            "--time",
            "30s",
            "--verify",
            "--quiet",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sluice bench");

    std::thread::sleep(Duration::from_secs(6));
    let killed = Instant::now();
    gw.kill(o);
    // The survivor takes the LU over: it reports itself active/optimized.
    let survivor = session(gw.url(other), "iqn.2026-11.test:observer");
    let (now_owner, _) = wait_for_owner(&[&survivor], Duration::from_secs(30), |g| {
        usize::from(g - 1) == other
    });
    println!(
        "kill -9 of group {owner}: group {now_owner} active/optimized after {:?}",
        killed.elapsed()
    );
    // Restarted on its old portal while the run goes on: it rejoins as a non-owner.
    std::thread::sleep(Duration::from_secs(2));
    gw.restart(o);
    let back = session(gw.url(o), "iqn.2026-11.test:observer");
    let (owner_after, _) =
        wait_for_owner(&[&back, &survivor], SETTLE, |g| usize::from(g - 1) == other);
    let groups = report_target_port_groups(&back);
    let restarted = groups
        .iter()
        .find(|(g, ..)| usize::from(*g - 1) == o)
        .expect("the restarted gateway's group");
    assert_eq!(
        restarted.1, ACTIVE_NON_OPTIMIZED,
        "the restarted gateway rejoins active/non-optimized: {groups:?} (owner {owner_after})"
    );

    let out = bench.wait_with_output().expect("sluice bench");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    println!("{text}");
    assert!(out.status.success(), "sluice bench failed:\n{text}\n{err}");
    assert!(text.contains(", 0 errors"), "no failed command: {text}");
    let verify = text
        .lines()
        .find(|l| l.contains("verify:"))
        .expect("a verify line");
    assert!(verify.contains(" 0 mismatches"), "{verify}");
    assert!(verify.ends_with(" 0 lost"), "{verify}");
    assert!(
        !verify.contains("after the run 0 acknowledged"),
        "acknowledged writes were checked: {verify}"
    );
    // The path to the killed gateway failed over, and I/O never paused past the goal.
    let failover =
        seconds_after(&text, "I/O resumed on another path").expect("a failover was reported");
    let pause =
        seconds_after(&text, "longest pause between two completions:").expect("longest pause");
    println!("failover {failover:.3} s, longest pause {pause:.3} s");
    assert!(
        Duration::from_secs_f64(pause) < FAILOVER_GOAL,
        "I/O paused {pause} s (goal {FAILOVER_GOAL:?})"
    );
    // The restarted gateway's path came back.
    assert!(
        text.lines().any(|l| l.contains(gw.portal(o))
            && l.contains(" up ")
            && !l.contains(" 0 reconnects")),
        "the killed gateway's path logged in again: {text}"
    );
}
