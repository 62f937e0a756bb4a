//! The emulated link against its settings: round trips of small probes take the configured
//! delay, a paced stream arrives at the configured rate, and settings changed while the link
//! runs take effect. Needs root (network namespaces, TUN devices), which the test command
//! has; without it the test fails and says why.

use std::time::Duration;

use sluice_lab::link::{EmulatedLink, LinkSpec};

fn require_root() {
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    assert!(
        root,
        "the emulated-link tests need root (network namespaces and TUN devices)"
    );
}

#[test]
fn delay_and_rate_are_what_was_asked() {
    require_root();
    let spec: LinkSpec = "rate=100mbit,rtt=20ms,queue=512K,mtu=9000".parse().unwrap();
    let mut link = EmulatedLink::start(spec).unwrap();
    let a = link.measure_accuracy(Duration::from_millis(500)).unwrap();
    eprintln!("{a:?}");
    assert_eq!(a.rtt.answered, a.rtt.sent, "{a:?}");
    // The forwarder adds the delay and at most a few hundred microseconds of its own.
    let want_us = 20_000.0;
    assert!(
        a.rtt.min_us >= want_us && a.rtt.median_us < want_us + 2_000.0,
        "RTT {:?} for 20 ms",
        a.rtt
    );
    let rate = a.forward_rate_bps.unwrap();
    assert!(
        (0.9e8..1.05e8).contains(&rate),
        "{rate} bit/s through a 100 Mbit/s link"
    );
    assert!(a.forward_lateness.packets > 100, "{:?}", a.forward_lateness);

    // A new delay takes effect without restarting the link.
    link.set_spec(spec.with_rtt(Duration::from_millis(50)))
        .unwrap();
    let b = link.measure_accuracy(Duration::ZERO).unwrap();
    assert!(
        b.rtt.min_us >= 50_000.0 && b.rtt.median_us < 52_000.0,
        "RTT {:?} for 50 ms",
        b.rtt
    );
    assert!(b.forward_rate_bps.is_none());
    assert!(link
        .set_spec(LinkSpec { mtu: 1500, ..spec })
        .unwrap_err()
        .to_string()
        .contains("MTU is fixed"));
}
