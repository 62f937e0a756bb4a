use super::*;

fn params(first_burst: u32, initial_r2t: bool) -> SessionParams {
    SessionParams {
        initial_r2t,
        immediate_data: true,
        first_burst_length: first_burst,
        max_burst_length: 262_144,
        initiator_max_recv_data_segment_length: 8192,
        target_max_recv_data_segment_length: 8192,
        ..SessionParams::default()
    }
}

fn one(bytes: u32, write: bool) -> Vec<Io> {
    vec![Io {
        at_ns: 0,
        bytes,
        write,
    }]
}

fn response(exp: &Experiment) -> f64 {
    let out = run_experiment(exp).unwrap();
    assert_eq!(out.failures(), 0, "{:?}", out.commands);
    out.commands[0].response_ns().unwrap() as f64 / 1e9
}

#[test]
fn a_read_takes_one_round_trip_plus_its_transfer() {
    let exp = Experiment::new(params(65_536, false), 8, one(4096, false));
    let t = response(&exp);
    // 20 ms round trip; 4 KiB at 1 Gb/s is microseconds, but its three segments need two
    // windows of slow start from an initial window of two.
    assert!((0.040..0.0405).contains(&t), "{t}");
    let out = run_experiment(&exp).unwrap();
    let c = &out.commands[0];
    assert_eq!(c.t2, Some(0));
    assert!(c.t3.unwrap() >= 10_000_000 && c.t3.unwrap() < 10_100_000);
    assert!(c.t4.unwrap() > c.t3.unwrap());
}

#[test]
fn response_time_jumps_past_first_burst_length() {
    // Unsolicited data up to FirstBurstLength goes with the command; a byte more needs an
    // R2T, a round trip more.
    let at = |bytes| {
        let mut exp = Experiment::new(params(65_536, false), 8, one(bytes, true));
        // A window wide enough that slow start does not blur the protocol's round trips.
        exp.transport = Transport::Tcp(TcpConfig {
            initial_window: 100,
            ..TcpConfig::study()
        });
        response(&exp)
    };
    let (below, at_fbl, above) = (at(32_768), at(65_536), at(66_048));
    assert!(above - at_fbl > 0.018, "{at_fbl} -> {above}");
    assert!(at_fbl - below < 0.005, "{below} -> {at_fbl}");
}

#[test]
fn the_command_window_queues_commands_at_the_initiator() {
    let work: Vec<Io> = (0..4)
        .map(|_| Io {
            at_ns: 0,
            bytes: 4096,
            write: false,
        })
        .collect();
    let out = run_experiment(&Experiment::new(params(65_536, false), 1, work)).unwrap();
    let waits: Vec<u64> = out.commands.iter().map(|c| c.t2.unwrap() - c.t1).collect();
    assert_eq!(waits[0], 0);
    assert!(
        waits.windows(2).all(|w| w[1] > w[0] + 15_000_000),
        "{waits:?}"
    );
    let m = out.metrics;
    assert!((m.command_throughput * m.interval_s - 4.0).abs() < 1e-9);
    assert!(m.interval_s > 4.0 * 0.020);
}

#[test]
fn a_small_drop_tail_queue_costs_retransmissions_not_data() {
    let mut exp = Experiment::new(params(65_536, false), 8, one(8 << 20, true));
    exp.link.queue_packets = 20;
    exp.transport = Transport::Tcp(TcpConfig {
        initial_window: 64,
        ..TcpConfig::study()
    });
    let out = run_experiment(&exp).unwrap();
    assert_eq!(out.failures(), 0);
    assert!(out.up.dropped > 0);
    assert!(out.initiator_tcp.retransmits > 0);
}

#[test]
fn bit_errors_become_tcp_retransmissions() {
    let mut exp = Experiment::new(params(65_536, false), 8, one(4 << 20, false));
    exp.link.ber = 1e-6;
    let out = run_experiment(&exp).unwrap();
    assert_eq!(out.failures(), 0);
    assert!(out.down.corrupted > 0);
    assert!(out.target_tcp.retransmits >= out.down.corrupted.min(1));
}

#[test]
fn udp_carries_one_pdu_per_datagram() {
    let mut exp = Experiment::new(params(65_536, false), 8, one(256 << 10, false));
    exp.transport = Transport::Udp;
    let out = run_experiment(&exp).unwrap();
    assert_eq!(out.failures(), 0, "{:?}", out.commands);
    assert_eq!(out.pdus_lost, 0);
    // 256 KiB in 8 KiB Data-In PDUs: 32 datagrams of 6 fragments each.
    assert_eq!(out.down.offered, 32 * 6);
}

/// A burst of datagrams larger than the queue loses some: at ErrorRecoveryLevel 0 nothing
/// recovers them and the command times out; at level 1 the initiator's SNACK does.
#[test]
fn udp_losses_need_error_recovery_level_1() {
    let mut exp = Experiment::new(params(65_536, false), 8, one(1 << 20, false));
    exp.transport = Transport::Udp;
    exp.timeouts.transfer_context = std::time::Duration::from_millis(100);
    exp.timeouts.command = std::time::Duration::from_secs(30);
    let out = run_experiment(&exp).unwrap();
    assert!(out.pdus_lost > 0);
    assert_eq!(out.failures(), 1);
    exp.params.error_recovery_level = 1;
    let out = run_experiment(&exp).unwrap();
    assert!(out.pdus_lost > 0);
    assert_eq!(out.failures(), 0, "{:?}", out.commands);
    assert!(out.commands[0].response_ns().unwrap() < 1_000_000_000);
}

#[test]
fn runs_are_deterministic() {
    let mut exp = Experiment::new(params(65_536, false), 8, one(2 << 20, true));
    exp.link.ber = 1e-6;
    let (a, b) = (run_experiment(&exp).unwrap(), run_experiment(&exp).unwrap());
    assert_eq!(a.commands, b.commands);
    assert_eq!(a.events, b.events);
}
