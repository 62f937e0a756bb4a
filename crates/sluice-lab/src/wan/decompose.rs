//! The study's model of a write (its Fig. 9): Ta, from the write's first data packet on the
//! wire to its last; Tb, the target's time to answer after the last packet; Tc, from the
//! status to the next write. Measured from the initiator's side, as the study's analyser
//! did, but where this setup's wire is: the study's analyser sat on the initiator's own
//! Gigabit link, its bottleneck, whereas here the initiator's socket hands packets to the
//! emulated link's queue at memory speed and the link's rate limiter is the bottleneck. So
//! the write's bytes are timed by their acknowledgements (TCP_INFO's `bytes_acked`, sampled
//! by the monitor): the acknowledgement clock is the bottleneck's departure clock shifted by
//! the constant delay, so the time between the first byte's acknowledgement and the last's
//! is the time the write took on the bottleneck (never less than its bytes at the link's
//! rate), and a write that waits on the sender (the study's send-buffer stall) waits there
//! too. Tb is then the wait from the last byte's acknowledgement to the status, which the
//! target sends after the write's last byte has reached it (with the acknowledgement
//! riding on the status, Tb reads as the target's time to answer).

use super::monitor::Sample;
use super::pdulog::{PduEvent, PduKind};

/// One write, decomposed (microseconds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WriteTimes {
    /// First data byte through the bottleneck to the last (their acknowledgements).
    pub ta_us: f64,
    /// The last data byte's acknowledgement to the status.
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

/// When `position` of the samples first reached `offset`, interpolated between samples
/// (microseconds since the epoch); `None` if it never did while sampled.
fn reached_at(samples: &[Sample], offset: u64, position: impl Fn(&Sample) -> u64) -> Option<f64> {
    let i = samples.partition_point(|s| position(s) < offset);
    let after = samples.get(i)?;
    let Some(before) = i.checked_sub(1).and_then(|j| samples.get(j)) else {
        return Some(after.t_us as f64);
    };
    let (s0, s1) = (position(before) as f64, position(after) as f64);
    let frac = if s1 > s0 {
        (offset as f64 - s0) / (s1 - s0)
    } else {
        1.0
    };
    Some(before.t_us as f64 + frac * (after.t_us - before.t_us) as f64)
}

/// When the stream's sent position first reached `offset` (the byte left the socket).
pub fn sent_at(samples: &[Sample], offset: u64) -> Option<f64> {
    reached_at(samples, offset, Sample::sent)
}

/// When the stream's acknowledged position first reached `offset`.
pub fn acked_at(samples: &[Sample], offset: u64) -> Option<f64> {
    reached_at(samples, offset, |s| s.acked)
}

/// Decomposes every write with a status in `events` (one connection, commands one at a
/// time).
pub fn decompose(events: &[PduEvent], samples: &[Sample]) -> Vec<WriteTimes> {
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
    for (i, &(itt, _, start, end)) in writes.iter().enumerate() {
        let (Some(first), Some(last), Some(done)) = (
            acked_at(samples, start + 1),
            acked_at(samples, end),
            status(itt),
        ) else {
            continue;
        };
        // The last acknowledgement usually rides on the status itself; the sample that saw
        // it may come up to a period after the status was read.
        let last = last.min(done);
        // Commands one at a time: the next is queued after this one's status.
        let next = writes
            .get(i + 1)
            .map(|w| w.1 - done)
            .filter(|&tc| tc >= 0.0);
        out.push(WriteTimes {
            ta_us: (last - first).max(0.0),
            tb_us: done - last,
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
    fn acknowledgements_time_the_writes() {
        let s = [sample(0, 0), sample(1000, 1000), sample(2000, 1000)];
        assert_eq!(acked_at(&s, 500), Some(500.0));
        assert_eq!(acked_at(&s, 1001), None);
    }

    #[test]
    fn two_writes_decompose_into_the_studys_times() {
        // Writes of 1000 stream bytes each. The first's bytes are acknowledged from 20 ms
        // (the first) to 30 ms (the last), its status arrives at 35 ms (Tb 5 ms); the
        // second is queued at 35.5 ms, its bytes acknowledged from 56 ms to 66 ms, the last
        // acknowledgement seen a sample after its status at 65.8 ms (Tb 0).
        let s = [
            sample(0, 0),
            sample(20_000, 1),
            sample(30_000, 1000),
            sample(56_000, 1001),
            sample(66_000, 2000),
        ];
        let e = [
            ev(0, true, PduKind::Command, 1, 0, 600),
            ev(0, true, PduKind::DataOut, 1, 600, 400),
            ev(35_000, false, PduKind::Response, 1, 0, 0),
            ev(35_500, true, PduKind::Command, 2, 1000, 1000),
            ev(65_800, false, PduKind::Response, 2, 0, 0),
        ];
        let w = decompose(&e, &s);
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].ta_us, 10_000.0, "{w:?}");
        assert_eq!(w[0].tb_us, 5000.0);
        assert_eq!(w[0].tc_us, Some(500.0));
        assert_eq!(w[1].ta_us, 9800.0, "{w:?}");
        assert_eq!(w[1].tb_us, 0.0);
        assert_eq!(w[1].tc_us, None);
        let m = mean(&w).unwrap();
        assert_eq!(m.writes, 2);
        assert!((m.ta_ms - 9.9).abs() < 1e-9);
        assert!(mean(&[]).is_none());
    }
}
