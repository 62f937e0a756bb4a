//! Both sides driven against each other in memory: the initiator plans Data-Out, the target
//! collects it and issues R2Ts; the target segments Data-In, the initiator reassembles it.
//! Includes the worked WRITE example of section 4.3.3 of Sajid Hussain, "Performance
//! Evaluation of iSCSI for IP Storage and Transport Protocols" (PhD dissertation, University of
//! Manitoba, 2004), and property tests.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::initiator::{InitiatorRead, InitiatorWrite, ReadProgress};
use super::target_read::DataInSequence;
use super::target_write::{TargetWrite, WriteProgress};
use super::{Residual, SequentialTtts};
use crate::params::SessionParams;
use crate::pdu::codes::ScsiStatus;
use crate::pdu::{Cdb, DataOut, R2t, ScsiCommand, TaskAttr};
use crate::seq::{Itt, Lun, SeqNum};

/// What a simulated write moved, per data sequence.
#[derive(Debug)]
struct WriteRun {
    buffer: BytesMut,
    /// Data-carrying PDUs per sequence: first the unsolicited burst (immediate + unsolicited
    /// Data-Out), then one entry per R2T in R2TSN order.
    sequences: Vec<u32>,
    r2ts: u32,
    data_out: u32,
}

/// Tiny deterministic shuffler (xorshift64) so failures reproduce from the proptest seed.
fn shuffle<T>(items: &mut [T], seed: &mut u64) {
    for i in (1..items.len()).rev() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        items.swap(i, (*seed % (i as u64 + 1)) as usize);
    }
}

fn pattern(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i * 31 + i / 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

fn run_write(params: &SessionParams, data: &Bytes, mut seed: u64) -> WriteRun {
    let lun = Lun::from_number(0);
    let mut initiator = InitiatorWrite::new(Itt(9), lun, data.clone(), params);
    let cmd = ScsiCommand {
        immediate: false,
        final_bit: initiator.command_final_bit(),
        read: false,
        write: true,
        attr: TaskAttr::Simple,
        lun,
        itt: Itt(9),
        expected_data_transfer_length: initiator.edtl(),
        cmd_sn: SeqNum(1),
        exp_stat_sn: SeqNum(1),
        cdb: Cdb::default(),
        bidi_read_length: None,
        data: initiator.immediate_data(),
    };
    let mut ttts = SequentialTtts::default();
    let (mut target, mut progress) =
        TargetWrite::new(&cmd, params, initiator.edtl(), &mut ttts).expect("command accepted");
    let unsolicited: Vec<DataOut> = initiator.unsolicited().collect();
    let mut sequences = vec![u32::from(!cmd.data.is_empty()) + unsolicited.len() as u32];
    let mut queue = vec![unsolicited];
    let mut pending: Vec<R2t> = Vec::new();
    loop {
        match progress {
            WriteProgress::Complete(buffer) => {
                let c = target.counters();
                assert_eq!(c.r2t, initiator.counters().r2t);
                assert_eq!(c.data_out, initiator.counters().data_out);
                return WriteRun {
                    buffer: BytesMut::from(&buffer.to_bytes()[..]),
                    sequences,
                    r2ts: c.r2t,
                    data_out: c.data_out,
                };
            }
            WriteProgress::NeedR2ts(r2ts) => pending.extend(r2ts),
            WriteProgress::Waiting => {}
            WriteProgress::CrcError => panic!("no data was lost"),
        }
        progress = WriteProgress::Waiting;
        if queue.iter().all(Vec::is_empty) {
            assert!(!pending.is_empty(), "stalled: no data and no R2T");
            for r2t in pending.drain(..) {
                let seq: Vec<DataOut> = initiator.handle_r2t(&r2t).expect("valid R2T").collect();
                sequences.push(seq.len() as u32);
                queue.push(seq);
            }
            if !params.data_sequence_in_order {
                queue.reverse();
            }
        }
        let mut seq = queue.remove(0);
        if !params.data_pdu_in_order {
            shuffle(&mut seq, &mut seed);
        }
        for pdu in &seq {
            match target
                .handle_data_out(pdu, &mut ttts)
                .expect("valid Data-Out")
            {
                WriteProgress::Waiting => {}
                done_or_r2ts => progress = done_or_r2ts,
            }
        }
    }
}

/// Sequence sizes the rules predict: (first burst PDUs, per-R2T PDUs).
fn predicted_write(params: &SessionParams, edtl: u32) -> Vec<u32> {
    let mrdsl = params.target_max_recv_data_segment_length;
    let first = params.first_burst_length.min(edtl);
    let imm = if params.immediate_data {
        first.min(mrdsl)
    } else {
        0
    };
    let unsolicited_end = if params.initial_r2t { imm } else { first };
    let mut sequences = vec![u32::from(imm > 0) + (unsolicited_end - imm).div_ceil(mrdsl)];
    let mut offset = unsolicited_end;
    while offset < edtl {
        let len = (edtl - offset).min(params.max_burst_length);
        sequences.push(len.div_ceil(mrdsl));
        offset += len;
    }
    sequences
}

/// The parameters of the worked example in Hussain's dissertation (section 4.3.3), with
/// `pdu_len` as the target's MaxRecvDataSegmentLength.
fn hussain_example(pdu_len: u32) -> SessionParams {
    SessionParams {
        immediate_data: true,
        initial_r2t: false,
        first_burst_length: 32 * 1024,
        max_burst_length: 64 * 1024,
        target_max_recv_data_segment_length: pdu_len,
        ..SessionParams::default()
    }
}

/// Hussain's dissertation, section 4.3.3: 168 KiB WRITE, ImmediateData=Yes, InitialR2T=No,
/// FirstBurstLength 32 KiB, MaxBurstLength 64 KiB.
#[test]
fn hussain_worked_write_example() {
    let data = pattern(168 * 1024);
    let run = run_write(&hussain_example(1500), &data, 1);
    assert_eq!(&run.buffer[..], &data[..]);
    assert_eq!(run.sequences, vec![22, 44, 44, 6]);
    assert_eq!(run.r2ts, 3);
    assert_eq!(run.data_out, 21 + 44 + 44 + 6);

    let run = run_write(&hussain_example(1024), &data, 1);
    assert_eq!(run.sequences, vec![32, 64, 64, 8]);
    assert_eq!(run.r2ts, 3);
    assert_eq!(&run.buffer[..], &data[..]);
}

#[test]
fn predicted_counts_match_hussain_example() {
    assert_eq!(
        predicted_write(&hussain_example(1500), 168 * 1024),
        vec![22, 44, 44, 6]
    );
}

fn arb_params() -> impl Strategy<Value = SessionParams> {
    (
        any::<(bool, bool, bool, bool)>(),
        512u32..=20_000,
        512u32..=70_000,
        512u32..=70_000,
        1u16..=4,
    )
        .prop_map(
            |((imm, r2t, pdu_order, seq_order), mrdsl, a, b, outstanding)| SessionParams {
                immediate_data: imm,
                initial_r2t: r2t,
                target_max_recv_data_segment_length: mrdsl,
                initiator_max_recv_data_segment_length: mrdsl,
                first_burst_length: a.min(b),
                max_burst_length: a.max(b),
                max_outstanding_r2t: outstanding,
                data_pdu_in_order: pdu_order,
                data_sequence_in_order: seq_order,
                ..SessionParams::default()
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn write_reassembles_with_predicted_counts(
        params in arb_params(),
        edtl in prop_oneof![0u32..2048, 0u32..300_000],
        seed in 1u64..,
    ) {
        let data = pattern(edtl as usize);
        let run = run_write(&params, &data, seed);
        prop_assert_eq!(&run.buffer[..], &data[..]);
        let mut predicted = predicted_write(&params, edtl);
        let mut got = run.sequences.clone();
        // Out-of-order sequences are reported in the order the initiator answered them.
        predicted[1..].sort_unstable();
        got[1..].sort_unstable();
        prop_assert_eq!(got, predicted.clone());
        prop_assert_eq!(run.r2ts as usize, predicted.len() - 1);
    }

    #[test]
    fn read_reassembles_in_any_allowed_order(
        params in arb_params(),
        edtl in 0u32..300_000,
        produced in 0u32..300_000,
        good in any::<bool>(),
        seed in 1u64..,
    ) {
        let data = pattern(produced as usize);
        let status = if good { ScsiStatus::Good } else { ScsiStatus::CheckCondition };
        let mut segmenter = DataInSequence::new(Itt(5), data.clone(), edtl, status, &params);
        let predicted = segmenter.total_pdus();
        let mut pdus: Vec<_> = segmenter.by_ref().collect();
        prop_assert_eq!(pdus.len() as u32, predicted);
        let mrdsl = params.initiator_max_recv_data_segment_length as usize;
        let mbl = params.max_burst_length;
        let sent = produced.min(edtl);
        let expected_pdus = (sent / mbl) * mbl.div_ceil(mrdsl as u32) + (sent % mbl).div_ceil(mrdsl as u32);
        prop_assert_eq!(predicted, expected_pdus);
        prop_assert!(pdus.iter().all(|p| p.data.len() <= mrdsl));
        if !params.data_pdu_in_order || !params.data_sequence_in_order {
            // The status-carrying PDU stays last (section 11.7.3).
            let n = pdus.len().saturating_sub(1);
            shuffle(&mut pdus[..n], &mut seed.clone());
        }
        let mut initiator = InitiatorRead::new(Itt(5), edtl, &params);
        let mut outcome = None;
        for pdu in &pdus {
            if let ReadProgress::Complete(d, s) = initiator.handle_data_in(pdu).expect("valid Data-In") {
                outcome = Some((d, s));
            }
        }
        if segmenter.needs_response() {
            prop_assert!(outcome.is_none());
            let rsp = segmenter.response(&[0x70, 0, 5]);
            if let ReadProgress::Complete(d, s) = initiator.handle_response(&rsp).expect("valid response") {
                prop_assert_eq!(&s.sense[..], &[0x70, 0, 5]);
                outcome = Some((d, s));
            }
        }
        let (received, status_seen) = outcome.expect("read completed");
        prop_assert_eq!(&received[..], &data[..sent as usize]);
        prop_assert_eq!(status_seen.status, status);
        prop_assert_eq!(status_seen.residual, Residual::from_lengths(edtl, produced));
        prop_assert_eq!(initiator.counters().data_in, predicted);
    }
}
