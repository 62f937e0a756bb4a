//! Within-command recovery of reads at the initiator, against Data-In PDUs cut by the target's
//! own [`DataInSequence`](crate::task::target_read::DataInSequence).

use bytes::Bytes;

use super::super::{InitiatorRead, ReadProgress};
use super::ReadAsk;
use crate::params::SessionParams;
use crate::pdu::codes::ScsiStatus;
use crate::pdu::DataIn;
use crate::seq::{Itt, Lun, Ttt};
use crate::task::target_read::DataInSequence;

const ITT: Itt = Itt(9);

fn params() -> SessionParams {
    SessionParams {
        error_recovery_level: 1,
        initiator_max_recv_data_segment_length: 512,
        max_burst_length: 2048,
        ..SessionParams::default()
    }
}

fn data(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// The 17 Data-In PDUs of the study's Figure 4.6 (DataSN 0 to 16), the A bit every 4.
fn figure_4_6_pdus() -> (Vec<DataIn>, Bytes) {
    let payload = data(17 * 512);
    let seq = DataInSequence::new(ITT, payload.clone(), 17 * 512, ScsiStatus::Good, &params())
        .with_data_ack(4, Ttt(40), Lun(2));
    (seq.collect(), payload)
}

fn feed(r: &mut InitiatorRead, pdus: &[DataIn], sns: &[u32]) -> Vec<ReadAsk> {
    let mut asks = Vec::new();
    for &sn in sns {
        r.handle_data_in(&pdus[sn as usize]).expect("accepted");
        asks.extend(r.take_asks());
    }
    asks
}

fn snack(beg_run: u32, run_length: u32) -> ReadAsk {
    ReadAsk::Data {
        beg_run,
        run_length,
    }
}

fn ack(beg_run: u32) -> ReadAsk {
    ReadAsk::DataAck {
        ttt: Ttt(40),
        lun: Lun(2),
        beg_run,
    }
}

/// Hussain's Figure 4.6, row by row: DataACK 4 after 0-5; SNACK 6-8 on 9; no DataACK while
/// holes remain (10-12); SNACK 13-15 on 16; the holes filled out of order (14, 6, 7, 8, 15);
/// DataACK 17 when the last one (13) arrives.
#[test]
fn the_simulation_studys_figure_4_6_walk_through() {
    let (pdus, payload) = figure_4_6_pdus();
    let acks: Vec<u32> = pdus.iter().filter(|d| d.ack).map(|d| d.data_sn).collect();
    assert_eq!(
        acks,
        vec![3, 7, 11, 15],
        "the target asks every 4 Data-In PDUs"
    );
    let mut r = InitiatorRead::new(ITT, 17 * 512, &params());
    assert_eq!(feed(&mut r, &pdus, &[0, 1, 2, 3, 4, 5]), vec![ack(4)]);
    assert_eq!(feed(&mut r, &pdus, &[9]), vec![snack(6, 3)]);
    assert_eq!(feed(&mut r, &pdus, &[10, 11, 12]), vec![]);
    assert_eq!(feed(&mut r, &pdus, &[16]), vec![snack(13, 3)]);
    assert_eq!(feed(&mut r, &pdus, &[14]), vec![]);
    assert_eq!(feed(&mut r, &pdus, &[6]), vec![]);
    assert_eq!(feed(&mut r, &pdus, &[7, 8, 15]), vec![]);
    let last = r.handle_data_in(&pdus[13]).expect("accepted");
    assert_eq!(r.take_asks().to_vec(), vec![ack(17)]);
    match last {
        ReadProgress::Complete(got, status) => {
            assert_eq!(got, payload);
            assert_eq!(status.status, ScsiStatus::Good);
        }
        other => panic!("expected completion, got {other:?}"),
    }
}

#[test]
fn duplicates_are_discarded_and_a_digest_error_is_asked_for_at_once() {
    let (pdus, payload) = figure_4_6_pdus();
    let mut r = InitiatorRead::new(ITT, 17 * 512, &params());
    feed(&mut r, &pdus, &[0, 1]);
    // DataSN 2 arrives with a bad data digest: only its header counts.
    let header = DataIn {
        data: Bytes::new(),
        ..pdus[2].clone()
    };
    r.handle_lost_data_in(&header);
    assert_eq!(r.take_asks().to_vec(), vec![snack(2, 1)]);
    assert_eq!(feed(&mut r, &pdus, &[3, 1]), vec![], "1 is a duplicate");
    assert_eq!(r.counters().duplicates, 1);
    feed(&mut r, &pdus, &[2]);
    let asks = feed(&mut r, &pdus, &(4..17).collect::<Vec<u32>>());
    assert!(asks.iter().all(|a| matches!(a, ReadAsk::DataAck { .. })));
    assert!(r.done);
    let _ = payload;
}

#[test]
fn a_status_before_its_data_waits_and_the_missing_tail_is_asked_for() {
    let (pdus, payload) = figure_4_6_pdus();
    let mut r = InitiatorRead::new(ITT, 17 * 512, &params());
    feed(&mut r, &pdus, &(0..12).collect::<Vec<u32>>());
    r.take_asks();
    // 12..16 lost, then a separate SCSI Response saying 17 Data-In were sent.
    let rsp =
        crate::task::scsi_response(ITT, ScsiStatus::Good, crate::task::Residual::None, 17, &[]);
    assert_eq!(r.handle_response(&rsp), Ok(ReadProgress::Waiting));
    assert_eq!(r.take_asks().to_vec(), vec![snack(12, 5)]);
    for pdu in &pdus[12..16] {
        assert_eq!(r.handle_data_in(pdu), Ok(ReadProgress::Waiting));
    }
    let p = r.handle_data_in(&DataIn {
        status_present: false,
        ..pdus[16].clone()
    });
    match p {
        Ok(ReadProgress::Complete(got, _)) => assert_eq!(got, payload),
        other => panic!("expected completion, got {other:?}"),
    }
}

#[test]
fn a_stuck_read_asks_again_then_restarts_with_an_r_data_snack() {
    let (pdus, payload) = figure_4_6_pdus();
    let mut r = InitiatorRead::new(ITT, 17 * 512, &params());
    feed(&mut r, &pdus, &[0, 1, 2, 3, 4, 5, 9]);
    r.take_asks();
    r.handle_stall(5);
    assert_eq!(
        r.take_asks().to_vec(),
        vec![snack(6, 3)],
        "the hole, asked for again"
    );
    r.handle_stall(5);
    assert_eq!(
        r.take_asks().to_vec(),
        vec![snack(6, 3)],
        "once more: that answer may have been lost too"
    );
    r.handle_stall(5);
    assert_eq!(r.take_asks().to_vec(), vec![ReadAsk::RData { tag: 5 }]);
    assert_eq!(r.acknowledged_data_sn(), 4);
    // The target resends from DataSN 4, cut to 1 KiB now, and ends with a tagged Response.
    let resent = DataInSequence::new(ITT, payload.clone(), 17 * 512, ScsiStatus::Good, &params())
        .resume(
            4,
            &SessionParams {
                initiator_max_recv_data_segment_length: 1024,
                ..params()
            },
        )
        .expect("resumable");
    let mut count = 4;
    for pdu in resent.clone() {
        assert_eq!(r.handle_data_in(&pdu), Ok(ReadProgress::Waiting));
        count += 1;
    }
    // A status without the tag is discarded.
    let mut rsp = crate::task::scsi_response(
        ITT,
        ScsiStatus::Good,
        crate::task::Residual::None,
        count,
        &[],
    );
    assert_eq!(r.handle_response(&rsp), Ok(ReadProgress::Waiting));
    rsp.snack_tag = 5;
    match r.handle_response(&rsp) {
        Ok(ReadProgress::Complete(got, _)) => assert_eq!(got, payload),
        other => panic!("expected completion, got {other:?}"),
    }
}

#[test]
fn data_snacks_that_fill_holes_go_on_and_fruitless_stalls_are_counted() {
    let (pdus, _) = figure_4_6_pdus();
    let mut r = InitiatorRead::new(ITT, 17 * 512, &params());
    // Every other Data-In lost: holes at 1, 3, 5, 7 (9 seen last).
    feed(&mut r, &pdus, &[0, 2, 4, 6, 8, 9]);
    r.take_asks();
    r.handle_stall(5);
    assert_eq!(
        r.take_asks().to_vec(),
        vec![snack(1, 1), snack(3, 1), snack(5, 1), snack(7, 1)]
    );
    assert_eq!(
        r.fruitless_stalls(),
        1,
        "the first stall has nothing to compare with"
    );
    // Half of what was asked arrives: the holes shrank, so they are asked for again
    // rather than everything discarded for an R-Data SNACK.
    feed(&mut r, &pdus, &[3, 7]);
    r.take_asks();
    r.handle_stall(6);
    assert_eq!(r.take_asks().to_vec(), vec![snack(1, 1), snack(5, 1)]);
    assert_eq!(r.fruitless_stalls(), 0);
    // Nothing more arrives: the stalls count up (the session gives the read up at its bound);
    // the holes are asked for twice more, then everything with an R-Data SNACK.
    for tag in [7, 8] {
        r.handle_stall(tag);
        assert_eq!(r.take_asks().to_vec(), vec![snack(1, 1), snack(5, 1)]);
    }
    assert_eq!(r.fruitless_stalls(), 2);
    r.handle_stall(9);
    assert_eq!(r.take_asks().to_vec(), vec![ReadAsk::RData { tag: 9 }]);
    assert_eq!(r.fruitless_stalls(), 3);
    r.handle_stall(10);
    r.take_asks();
    assert_eq!(r.fruitless_stalls(), 4);
}

/// One step of a read's life under recovery, for the property below.
#[derive(Clone, Debug)]
enum Step {
    /// The Data-In with this DataSN arrives (again, perhaps).
    Deliver(usize),
    /// The Data-In with this DataSN arrives with a data digest error.
    Lost(usize),
    /// The SCSI Response arrives (phase collapse off only).
    Response,
    /// The session's retry timer finds the read stalled.
    Stall(u32),
    /// The task is reassigned to another connection.
    Reassign,
}

fn step_strategy(pdus: usize) -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        6 => (0..pdus).prop_map(Step::Deliver),
        1 => (0..pdus).prop_map(Step::Lost),
        1 => Just(Step::Response),
        1 => (1u32..100).prop_map(Step::Stall),
        1 => Just(Step::Reassign),
    ]
}

/// What a read shows the session after a step.
fn observe(r: &mut InitiatorRead, outcome: String) -> String {
    format!(
        "{outcome} asks={:?} fruitless={} acked={} waits={}",
        r.take_asks(),
        r.fruitless_stalls(),
        r.acknowledged_data_sn(),
        r.status_waits_for_data()
    )
}

proptest::proptest! {
    /// An in-order read creates its recovery state only when something needs it: for any
    /// run of deliveries in any order, losses, duplicates, stalls, reassignments, A bits and
    /// statuses, it does exactly what a read that had the state from its first PDU does.
    #[test]
    fn recovery_created_late_behaves_as_recovery_from_the_start(
        count in 1usize..8,
        ack_every in proptest::option::of(1u32..4),
        collapse in proptest::bool::ANY,
        steps in proptest::collection::vec(step_strategy(8), 0..40),
    ) {
        let len = count * 512;
        let mut seq = DataInSequence::new(ITT, data(len), len as u32, ScsiStatus::Good, &params());
        if !collapse {
            seq = seq.without_phase_collapse();
        }
        if let Some(every) = ack_every {
            seq = seq.with_data_ack(every, Ttt(40), Lun(2));
        }
        let pdus: Vec<DataIn> = seq.by_ref().collect();
        let response = seq.needs_response().then(|| seq.response(&[]));
        let mut late = InitiatorRead::new(ITT, len as u32, &params());
        let mut early = InitiatorRead::new(ITT, len as u32, &params());
        early.wake_recovery();
        for step in steps {
            let run = |r: &mut InitiatorRead| {
                let outcome = match &step {
                    Step::Deliver(sn) => pdus.get(*sn).map(|p| format!("{:?}", r.handle_data_in(p))),
                    Step::Lost(sn) => pdus.get(*sn).map(|p| {
                        r.handle_lost_data_in(p);
                        String::new()
                    }),
                    Step::Response => response.as_ref().map(|rsp| format!("{:?}", r.handle_response(rsp))),
                    Step::Stall(tag) => {
                        r.handle_stall(*tag);
                        Some(String::new())
                    }
                    Step::Reassign => Some(format!("{}", r.reassign())),
                };
                observe(r, outcome.unwrap_or_default())
            };
            proptest::prop_assert_eq!(run(&mut late), run(&mut early), "after {:?}", step);
        }
    }
}
