//! The forced-parameter matrix of `negotiation.rs`, against Debian's tgtd: InitialR2T x
//! ImmediateData x MaxOutstandingR2T x MaxRecvDataSegmentLength x two burst settings. Both
//! sides make offers (tgtd's through `tgtadm --op update`); the negotiated values must be
//! what the RFC 7143 section 13 rules give, and the PDU counters of writes of several sizes
//! must be what sections 13.10-13.14 predict for them, with the data read back.
//!
//! tgtd (1.0.85) builds the next R2T only when the F-bit Data-Out of the previous one has
//! arrived, so MaxOutstandingR2T 1 and 4 negotiate differently but move the same PDUs.
//!
//! A missing tgtd fails the test (install Debian's `tgt`); it is never skipped.

mod common;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::{model, Tgtd, TGT_IQN};
use sluice_initiator::{Command, ConnectOptions, Direction, Session};
use sluice_proto::pdu::Pdu;

/// tgtd's LUN with the backing file (LUN 0 is its controller).
const LUN: u16 = 1;
/// Write sizes: below every burst, above the first burst, several bursts, many bursts.
const SIZES: [u32; 4] = [4 * 1024, 68 * 1024, 168 * 1024, 1024 * 1024];
/// tgtd's MaxXmitDataSegmentLength setting. tgtd 1.0.85 overwrites it with the
/// MaxRecvDataSegmentLength the initiator declares, so it does not limit Data-In: with our
/// 65536 its Data-Ins carry 65536 bytes, not 16384 (section 13.12 only bounds them by ours).
const TGT_XMIT: u32 = 16384;

/// One point of the matrix: the values the negotiation must end with, and which side
/// forces them (the other side offers something more permissive).
#[derive(Clone, Copy, Debug)]
struct Case {
    immediate: bool,
    initial_r2t: bool,
    /// tgtd's declared MaxRecvDataSegmentLength: the most we may put in one PDU.
    mrdsl: u32,
    max_r2t: u16,
    fbl: u32,
    mbl: u32,
    /// Our own declared MaxRecvDataSegmentLength.
    our_mrdsl: u32,
    /// tgtd forces ImmediateData / InitialR2T / MaxOutstandingR2T (else we do).
    target_forces: bool,
    /// tgtd forces the burst lengths (else we do).
    target_forces_bursts: bool,
}

fn yes(b: bool) -> &'static str {
    if b {
        "Yes"
    } else {
        "No"
    }
}

/// Operational keys with their values.
type Keys = Vec<(&'static str, String)>;

/// (tgtd's settings, our offers) for `c`. The forcing side offers the case's value; the
/// other side offers the permissive one (And: Yes, Or: No, Min: larger), so the result
/// shows the rule was applied rather than an echo.
fn offers(c: &Case) -> (Keys, Keys) {
    let relaxed = (true, false, c.max_r2t.saturating_mul(4));
    let forced = (c.immediate, c.initial_r2t, c.max_r2t);
    let (t, i) = if c.target_forces {
        (forced, relaxed)
    } else {
        (relaxed, forced)
    };
    let (tb, ib) = if c.target_forces_bursts {
        ((c.fbl, c.mbl), (c.fbl * 2, c.mbl * 2))
    } else {
        ((c.fbl * 2, c.mbl * 2), (c.fbl, c.mbl))
    };
    let side = |(imm, r2t, max_r2t): (bool, bool, u16), (fbl, mbl): (u32, u32)| {
        vec![
            ("ImmediateData", yes(imm).to_owned()),
            ("InitialR2T", yes(r2t).to_owned()),
            ("MaxOutstandingR2T", max_r2t.to_string()),
            ("FirstBurstLength", fbl.to_string()),
            ("MaxBurstLength", mbl.to_string()),
        ]
    };
    let mut target = side(t, tb);
    target.push(("MaxRecvDataSegmentLength", c.mrdsl.to_string()));
    target.push(("MaxXmitDataSegmentLength", TGT_XMIT.to_string()));
    let mut ours = side(i, ib);
    ours.push(("MaxRecvDataSegmentLength", c.our_mrdsl.to_string()));
    (target, ours)
}

/// Data-In PDUs for a read of `len` when the target fills each up to `seg` bytes.
fn data_in_model(len: u32, seg: u32) -> u32 {
    len.div_ceil(seg)
}

fn pattern(len: u32, seed: u32) -> Bytes {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(len) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect::<Vec<_>>()
        .into()
}

/// What one write moved: (PDUs per sequence, R2Ts, immediate bytes).
type Observed = (Vec<u32>, u32, u32);

async fn run_case(tgt: &Tgtd, n: u32, c: &Case) -> Vec<Observed> {
    let (target, ours) = offers(c);
    for (k, v) in &target {
        tgt.set(k, v);
    }
    let mut opts = ConnectOptions::default();
    for (k, v) in &ours {
        opts.apply(k, v).unwrap();
    }
    // Every R2T tgtd sends: (R2TSN, Buffer Offset, Desired Data Transfer Length).
    let r2ts = Arc::new(Mutex::new(Vec::new()));
    {
        let r2ts = r2ts.clone();
        opts.trace = Some(Arc::new(move |dir, pdu| {
            if let (Direction::Received, Pdu::R2t(r)) = (dir, pdu) {
                r2ts.lock().unwrap().push((
                    r.r2t_sn,
                    r.buffer_offset,
                    r.desired_data_transfer_length,
                ));
            }
        }));
    }
    let s = Session::connect(&tgt.portal, TGT_IQN, opts)
        .await
        .unwrap_or_else(|e| panic!("login to tgtd with {c:?}: {e}"));
    let p = s.params();
    // Section 13.11 (And), 13.10 (Or), 13.12 (declarative), 13.13/13.14/13.17 (Min).
    assert_eq!(
        (
            p.immediate_data,
            p.initial_r2t,
            p.target_max_recv_data_segment_length,
            p.initiator_max_recv_data_segment_length,
            p.first_burst_length,
            p.max_burst_length,
            p.max_outstanding_r2t,
        ),
        (
            c.immediate,
            c.initial_r2t,
            c.mrdsl,
            c.our_mrdsl,
            c.fbl,
            c.mbl,
            c.max_r2t
        ),
        "negotiated with tgtd {target:?}, ours {ours:?}"
    );
    s.test_unit_ready(LUN).await.unwrap();
    let mut observed = Vec::new();
    let mut lba = 0u64;
    for (k, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, n * 16 + k as u32);
        let before = s.counters();
        let out = s
            .execute(Command::write(
                LUN,
                &sluice_scsi::cdb::write16(lba, len / 512, false),
                data.clone(),
            ))
            .await
            .unwrap()
            .check()
            .unwrap_or_else(|e| panic!("write {len} with {c:?}: {e}"));
        let st = &out.stats;
        let what = format!("write of {len} bytes, {c:?}");
        let expect = model(len, c.immediate, c.initial_r2t, c.fbl, c.mbl, c.mrdsl);
        assert_eq!(st.sequences, expect, "{what}");
        let imm = if c.immediate {
            len.min(c.fbl).min(c.mrdsl)
        } else {
            0
        };
        assert_eq!(st.immediate_bytes, imm, "{what}");
        let pdus: u32 = st.sequences.iter().sum();
        assert_eq!(st.data_out, pdus - u32::from(imm > 0), "{what}");
        // Every sequence but an unsolicited first one answers an R2T.
        let unsolicited = u32::from(c.immediate || !c.initial_r2t);
        assert_eq!(st.r2t, expect.len() as u32 - unsolicited, "{what}");
        let after = s.counters();
        assert_eq!(after.r2t() - before.r2t(), u64::from(st.r2t), "{what}");
        assert_eq!(
            after.data_out() - before.data_out(),
            u64::from(st.data_out),
            "{what}"
        );
        assert_eq!(st.attempts, 1, "{what}");
        // The R2Ts ask for the rest after the unsolicited data, MaxBurstLength at a time,
        // R2TSN counting from 0 (sections 11.8 and 13.13).
        let first = len.min(c.fbl);
        let mut off = match (c.immediate, c.initial_r2t) {
            (_, false) => first,
            (true, true) => first.min(c.mrdsl),
            (false, true) => 0,
        };
        let mut want = Vec::new();
        while off < len {
            let burst = c.mbl.min(len - off);
            want.push((want.len() as u32, off, burst));
            off += burst;
        }
        assert_eq!(
            std::mem::take(&mut *r2ts.lock().unwrap()),
            want,
            "R2Ts of the {what}"
        );

        let read = s
            .execute(Command::read(
                LUN,
                &sluice_scsi::cdb::read16(lba, len / 512, false),
                len,
            ))
            .await
            .unwrap()
            .check()
            .unwrap_or_else(|e| panic!("read {len} with {c:?}: {e}"));
        assert!(read.data == data, "data read back differs: {what}");
        assert_eq!(
            read.stats.data_in,
            data_in_model(len, c.our_mrdsl),
            "Data-In PDUs of a read of {len} bytes, {c:?}"
        );
        observed.push((
            out.stats.sequences,
            out.stats.r2t,
            out.stats.immediate_bytes,
        ));
        lba += u64::from(len / 512);
    }
    s.logout().await.unwrap();
    eprintln!(
        "imm={} r2t={} mrdsl={:>6} maxr2t={} fbl={:>6} mbl={:>6} our_mrdsl={:>5} seqs={:?}",
        yes(c.immediate),
        yes(c.initial_r2t),
        c.mrdsl,
        c.max_r2t,
        c.fbl,
        c.mbl,
        c.our_mrdsl,
        observed.iter().map(|o| &o.0).collect::<Vec<_>>()
    );
    observed
}

#[tokio::test]
async fn tgtd_forced_parameter_matrix() {
    let started = std::time::Instant::now();
    let tgt = Tgtd::start();
    let mut n = 0u32;
    for immediate in [false, true] {
        for initial_r2t in [false, true] {
            for mrdsl in [512, 8192, 262_144] {
                for max_r2t in [1u16, 4] {
                    for (fbl, mbl) in [(32 * 1024, 64 * 1024), (64 * 1024, 256 * 1024)] {
                        let c = Case {
                            immediate,
                            initial_r2t,
                            mrdsl,
                            max_r2t,
                            fbl,
                            mbl,
                            our_mrdsl: if n.is_multiple_of(2) { 4096 } else { 65536 },
                            target_forces: n.is_multiple_of(2),
                            target_forces_bursts: n % 4 < 2,
                        };
                        run_case(&tgt, n, &c).await;
                        n += 1;
                    }
                }
            }
        }
    }
    assert_eq!(n, 48);
    eprintln!("{n} cases against tgtd in {:?}", started.elapsed());
}
