//! The study's model of a write (its Fig. 9): Ta, from the write's first data packet on the
//! wire to its last; Tb, the target's time to answer (the wait for the status less one
//! round trip); Tc, from the status to the next write. Measured from the initiator's side as
//! the study's analyser did: the PDU log gives each write's place in the byte stream, when
//! it was queued and when its status arrived, the monitor's samples when the stream's bytes
//! left the socket and the smoothed RTT at that moment (so that time the last bytes spend in
//! the link's queue is not counted as the target's).

use super::monitor::Sample;
use super::pdulog::{PduEvent, PduKind};

/// One write, decomposed (microseconds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WriteTimes {
    /// First data byte on the wire to the last.
    pub ta_us: f64,
    /// The wait for the status after the last byte, less the smoothed round trip then.
    pub tb_us: f64,
    /// Status to the next command's queueing by the initiator.
    pub tc_us: Option<f64>,
}

/// Means over the writes of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Decomposition {
    /// Writes decomposed.
    pub writes: usize,
    /// Mean Ta, ms.
    pub ta_ms: f64,
    /// Mean Tb, ms.
    pub tb_ms: f64,
    /// Mean Tc, ms.
    pub tc_ms: f64,
}

/// When the stream's sent position first reached `offset`, interpolated between samples
/// (microseconds since the epoch); `None` if it never did while sampled.
pub fn sent_at(samples: &[Sample], offset: u64) -> Option<f64> {
    let i = samples.partition_point(|s| s.sent() < offset);
    let after = samples.get(i)?;
    let Some(before) = i.checked_sub(1).and_then(|j| samples.get(j)) else {
        return Some(after.t_us as f64);
    };
    let (s0, s1) = (before.sent() as f64, after.sent() as f64);
    let frac = if s1 > s0 {
        (offset as f64 - s0) / (s1 - s0)
    } else {
        1.0
    };
    Some(before.t_us as f64 + frac * (after.t_us - before.t_us) as f64)
}

/// The smoothed RTT the kernel had at `t_us` (the first sample from then on), else `rtt_us`.
fn srtt_at(samples: &[Sample], t_us: f64, rtt_us: f64) -> f64 {
    let i = samples.partition_point(|s| (s.t_us as f64) < t_us);
    samples
        .get(i)
        .filter(|s| s.srtt_us > 0)
        .map_or(rtt_us, |s| f64::from(s.srtt_us))
}

/// Decomposes every write with a status in `events` (one connection, commands one at a
/// time); `rtt_us` stands in for the smoothed RTT where no sample has one.
pub fn decompose(events: &[PduEvent], samples: &[Sample], rtt_us: f64) -> Vec<WriteTimes> {
    // Commands in the order sent: tag, when queued, the stream range their PDUs cover.
    let mut writes: Vec<(u32, f64, u64, u64)> = Vec::new();
    for e in events.iter().filter(|e| e.sent) {
        match e.kind {
            PduKind::Command => writes.push((e.itt, e.t_us as f64, e.offset, e.end())),
            PduKind::DataOut => {
                if let Some(w) = writes.iter_mut().rev().find(|w| w.0 == e.itt) {
                    w.3 = w.3.max(e.end());
                }
            }
            _ => {}
        }
    }
    let status = |itt: u32| {
        events
            .iter()
            .find(|e| !e.sent && e.kind == PduKind::Response && e.itt == itt)
            .map(|e| e.t_us as f64)
    };
    let mut out = Vec::new();
    for (i, &(itt, queued, start, end)) in writes.iter().enumerate() {
        let (Some(first), Some(last), Some(done)) = (
            sent_at(samples, start + 1),
            sent_at(samples, end),
            status(itt),
        ) else {
            continue;
        };
        if done < last {
            // Sampling granularity put the last byte after the status: not measurable.
            continue;
        }
        // Interpolation may place the first byte a little before the command was queued.
        let first = first.max(queued);
        // Commands one at a time: the next is queued after this one's status.
        let next = writes
            .get(i + 1)
            .map(|w| w.1 - done)
            .filter(|&tc| tc >= 0.0);
        out.push(WriteTimes {
            ta_us: (last - first).max(0.0),
            tb_us: done - last - srtt_at(samples, last, rtt_us),
            tc_us: next,
        });
    }
    out
}

/// Means of `w` in milliseconds.
pub fn mean(w: &[WriteTimes]) -> Option<Decomposition> {
    if w.is_empty() {
        return None;
    }
    let n = w.len() as f64;
    let tcs: Vec<f64> = w.iter().filter_map(|x| x.tc_us).collect();
    Some(Decomposition {
        writes: w.len(),
        ta_ms: w.iter().map(|x| x.ta_us).sum::<f64>() / n / 1e3,
        tb_ms: w.iter().map(|x| x.tb_us).sum::<f64>() / n / 1e3,
        tc_ms: if tcs.is_empty() {
            0.0
        } else {
            tcs.iter().sum::<f64>() / tcs.len() as f64 / 1e3
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_us: u64, sent: u64) -> Sample {
        Sample {
            t_us,
            acked: sent,
            ..Sample::default()
        }
    }

    fn ev(t_us: u64, sent: bool, kind: PduKind, itt: u32, offset: u64, len: u32) -> PduEvent {
        PduEvent {
            t_us,
            sent,
            kind,
            itt,
            offset,
            wire_len: len,
        }
    }

    #[test]
    fn interpolates_the_sent_curve() {
        let s = [
            sample(0, 0),
            sample(1000, 1000),
            sample(2000, 1000),
            sample(3000, 3000),
        ];
        assert_eq!(sent_at(&s, 500), Some(500.0));
        assert_eq!(sent_at(&s, 1000), Some(1000.0));
        assert_eq!(sent_at(&s, 2000), Some(2500.0));
        assert_eq!(sent_at(&s, 3001), None);
    }

    #[test]
    fn two_writes_decompose_into_the_studys_times() {
        // Writes of 1000 stream bytes each: the first on the wire 0..10 ms, its status at
        // 35 ms (no sample has an RTT: 20 ms, so Tb 5 ms); the second queued at 35.5 ms, on
        // the wire from 36 ms to 46 ms.
        let s = [
            sample(0, 0),
            sample(10_000, 1000),
            sample(36_000, 1000),
            sample(46_000, 2000),
        ];
        let e = [
            ev(0, true, PduKind::Command, 1, 0, 600),
            ev(0, true, PduKind::DataOut, 1, 600, 400),
            ev(35_000, false, PduKind::Response, 1, 0, 0),
            ev(35_500, true, PduKind::Command, 2, 1000, 1000),
            ev(52_000, false, PduKind::Response, 2, 0, 0),
        ];
        let w = decompose(&e, &s, 20_000.0);
        assert_eq!(w.len(), 2);
        assert!((w[0].ta_us - 9990.0).abs() < 1.0, "{w:?}");
        assert_eq!(w[0].tb_us, 5000.0);
        assert_eq!(w[0].tc_us, Some(500.0));
        assert_eq!(w[1].tc_us, None);
        let m = mean(&w).unwrap();
        assert_eq!(m.writes, 2);
        assert!(mean(&[]).is_none());
        // With the kernel's smoothed RTT in the samples, Tb is measured against it.
        let with_srtt: Vec<Sample> = s
            .iter()
            .map(|x| Sample {
                srtt_us: 25_000,
                ..*x
            })
            .collect();
        let w = decompose(&e, &with_srtt, 20_000.0);
        assert_eq!(w[0].tb_us, 0.0);
    }
}
