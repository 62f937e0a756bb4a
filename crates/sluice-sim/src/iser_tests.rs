//! iSER sessions in the simulator: seeds pass with data moved by RDMA, injected faults end
//! connections with the RFC's errors instead of corrupting data, and a datamover that places
//! data where it should not is caught.

use crate::world::{iser::Sabotage, World};
use crate::{run, FaultChoice, SimConfig, Summary, Transport, Violation};

fn iser(seed: u64, faults: FaultChoice) -> SimConfig {
    SimConfig {
        seed,
        faults,
        transport: Transport::Iser,
        ..SimConfig::default()
    }
}

fn sweep(seeds: std::ops::Range<u64>, faults: FaultChoice) -> Vec<Summary> {
    seeds
        .map(|seed| run(iser(seed, faults)).unwrap_or_else(|v| panic!("{v}")))
        .collect()
}

#[test]
fn iser_seeds_move_data_by_rdma_and_keep_every_invariant() {
    let runs = sweep(0..60, FaultChoice::Off);
    let (mut writes, mut reads, mut invalidates, mut unsolicited) = (0, 0, 0, 0);
    let mut held_back = 0;
    for s in &runs {
        assert_eq!(s.transport, Transport::Iser);
        assert_eq!(s.iser.data_pdus_in_sends, 0);
        assert!(
            !s.params.header_digest && !s.params.data_digest,
            "no digests over iSER"
        );
        assert_eq!(s.iser.remote_access_errors, 0);
        if s.params.initial_r2t {
            assert_eq!(s.iser.unsolicited_data_outs, 0, "seed {}", s.seed);
        }
        if s.counts.reads > 0 {
            assert!(
                s.iser.rdma_writes > 0,
                "seed {}: reads without RDMA Writes",
                s.seed
            );
        }
        writes += s.iser.rdma_writes;
        reads += s.iser.rdma_reads;
        invalidates += s.iser.send_invalidates;
        unsolicited += s.iser.unsolicited_data_outs;
        held_back += s.iser.held_back;
    }
    // One seed in three holds both sides to MaxOutstandingUnexpectedPDUs=2: some of their
    // pings and task management requests wait for room, and every seed still passes.
    assert!(held_back > 0);
    assert!(writes > 0 && reads > 0 && invalidates > 0);
    // InitialR2T ranges as over TCP: some seeds send unsolicited Data-Out in Sends.
    assert!(unsolicited > 0);
    // Some seeds run several connections, each with its own queue pairs.
    assert!(runs.iter().any(|s| s.connections > 1));
}

#[test]
fn iser_runs_are_reproducible() {
    let cfg = iser(11, FaultChoice::FromSeed);
    let (a, b) = (run(cfg).unwrap(), run(cfg).unwrap());
    assert_eq!(
        (a.pdus, a.bytes, a.virtual_ns, a.events, a.iser),
        (b.pdus, b.bytes, b.virtual_ns, b.events, b.iser)
    );
}

/// Lost messages and resets cost connections; a wrong STag is a remote access error that
/// ends the connection (RFC 5040 section 6.4, RFC 7145 section 10.1.3), never data moved
/// somewhere else: every read still returns the last acknowledged write.
#[test]
fn faults_end_connections_without_corrupting_data() {
    let runs = sweep(0..120, FaultChoice::FromSeed);
    let by = |mode: &'static str| runs.iter().filter(move |s| s.faults == mode);
    let wrong: Vec<_> = by("wrong STags").collect();
    assert!(!wrong.is_empty());
    assert!(
        wrong
            .iter()
            .any(|s| s.iser.wrong_stags > 0 && s.iser.remote_access_errors > 0),
        "a wrong STag was advertised and refused"
    );
    for s in &wrong {
        // Every refused access cost the connection it happened on.
        assert!(s.lost_connections >= s.iser.remote_access_errors);
    }
    for mode in ["lost RDMA messages", "resets"] {
        assert!(
            by(mode).any(|s| s.lost_connections > 0),
            "{mode}: no connection lost in 120 seeds"
        );
    }
    assert!(by("delayed RDMA messages").count() > 0);
}

fn sabotaged(seed: u64, sabotage: Sabotage) -> Result<Summary, Violation> {
    let mut world = World::new(iser(seed, FaultChoice::Off));
    world.sabotage = sabotage;
    world.run()
}

/// The sweep would catch a target datamover that put read data at the wrong offset of the
/// initiator's buffer: out of the buffer it is a remote access error, inside it the data
/// read back is not what was written.
#[test]
fn a_misplaced_rdma_write_is_caught() {
    for offset in [512, 1] {
        let caught = (0..20)
            .filter(|&seed| sabotaged(seed, Sabotage::WriteOffset(offset)).is_err())
            .count();
        assert!(
            caught >= 15,
            "offset {offset}: only {caught} of 20 seeds caught it"
        );
    }
    assert!(sabotaged(3, Sabotage::None).is_ok());
}

/// Seed 3450 (the first 6,000-seed sweep): 30 connections' worth of small Data-In on a slow
/// link put more RDMA Writes in flight than the send queue holds; they wait for room instead
/// of failing the connection.
#[test]
fn a_full_send_queue_holds_work_requests_back() {
    let s = run(iser(3450, FaultChoice::FromSeed)).unwrap_or_else(|v| panic!("{v}"));
    assert!(s.iser.rdma_writes > 1024, "{:?}", s.iser);
}
