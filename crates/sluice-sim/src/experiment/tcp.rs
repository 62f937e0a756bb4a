//! A TCP model of the kind ns-2's agents are (what the study ran iSCSI over): one byte
//! stream per direction cut into MSS-sized segments, a congestion window that grows by one
//! segment per acknowledged segment in slow start and by about one segment per round trip in
//! congestion avoidance (RFC 5681 section 3.1), fast retransmit on the third duplicate
//! acknowledgement with NewReno fast recovery (RFC 6582), and a retransmission timer from
//! smoothed round-trip samples with Karn's rule and exponential back-off (RFC 6298). With
//! [`TcpConfig::sack`] the receiver reports its out-of-order ranges (RFC 2018) and the sender
//! recovers every hole they reveal in one round trip, keeping the segments in flight within
//! the halved window (the "pipe" of RFC 6675), as Linux does; without it a sender learns of
//! one hole per round trip, as ns-2's agents of the study's time did. The receiver
//! acknowledges every segment at once (no delayed ACKs), keeps out-of-order segments, and its
//! application reads at once, so the advertised window is constant.
//! No SYN/FIN handshakes: the connection exists from time 0 (the study measures commands,
//! not connection setup).

use std::collections::{BTreeMap, VecDeque};

use bytes::{Bytes, BytesMut};

/// TCP settings of both ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    /// Payload bytes per segment.
    pub mss: usize,
    /// TCP + IP header bytes each packet carries on the wire.
    pub header_bytes: usize,
    /// Initial congestion window, in segments.
    pub initial_window: u32,
    /// The receiver's advertised window, in bytes.
    pub receive_window: usize,
    /// Lower bound of the retransmission timeout.
    pub min_rto_ns: u64,
    /// Retransmission timeout before the first round-trip sample.
    pub initial_rto_ns: u64,
    /// Upper bound of the backed-off retransmission timeout.
    pub max_rto_ns: u64,
    /// Selective acknowledgements (RFC 2018) and SACK-based loss recovery (RFC 6675).
    pub sack: bool,
}

impl TcpConfig {
    /// ns-2's agents as the study ran them: 1500-byte packets (1460 bytes of payload after
    /// 40 bytes of headers), an initial window of 2 segments, a 200 ms minimum RTO, no SACK.
    /// The advertised window (ns-2's `window_`, in packets) is not given in the study: 1000
    /// packets is what its Fig. 5.4 implies ("the buffer size of 1000 is large enough to hold
    /// all the packets", while 500 packets overflow).
    pub fn study() -> Self {
        Self {
            mss: 1460,
            header_bytes: 40,
            initial_window: 2,
            receive_window: 1000 * 1460,
            min_rto_ns: 200_000_000,
            initial_rto_ns: 1_000_000_000,
            max_rto_ns: 60_000_000_000,
            sack: false,
        }
    }

    /// Today's Linux defaults where they differ: an initial window of 10 segments (RFC 6928),
    /// window scaling to 6 MiB (`tcp_rmem`'s maximum) and SACK.
    pub fn today() -> Self {
        Self {
            initial_window: 10,
            receive_window: 6 << 20,
            sack: true,
            ..Self::study()
        }
    }
}

/// A segment of the stream.
#[derive(Clone, Debug)]
pub(crate) struct Segment {
    pub(crate) seq: u64,
    pub(crate) data: Bytes,
}

/// Counters of one sender.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Segments sent, retransmissions included.
    pub segments: u64,
    /// Segments sent again.
    pub retransmits: u64,
    /// Fast retransmits (third duplicate ACK).
    pub fast_retransmits: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
}

/// The sending half of one direction.
#[derive(Debug)]
pub(crate) struct Sender {
    cfg: TcpConfig,
    /// Bytes from `snd_una` on (sent and unacknowledged, then not yet sent), in the chunks
    /// they were written in: acknowledging and writing never copy the stream.
    buf: VecDeque<Bytes>,
    /// Bytes in `buf`.
    buffered: u64,
    snd_una: u64,
    snd_nxt: u64,
    /// The highest sequence number ever sent (after a timeout `snd_nxt` goes back).
    high_tx: u64,
    pub(crate) cwnd: u64,
    ssthresh: u64,
    /// Congestion-avoidance growth, in bytes acknowledged since the last increase.
    ca_acked: u64,
    dupacks: u32,
    /// NewReno: in fast recovery until this is acknowledged.
    recover: Option<u64>,
    /// SACK scoreboard: ranges the receiver holds above `snd_una` (start to end, merged).
    sacked: BTreeMap<u64, u64>,
    /// In SACK recovery, holes below this were sent again already.
    rexmit_next: u64,
    srtt: Option<f64>,
    rttvar: f64,
    rto: u64,
    rto_deadline: Option<u64>,
    /// The segment being timed: its end and when it was sent (Karn: never a retransmitted one).
    timed: Option<(u64, u64)>,
    pub(crate) stats: TcpStats,
}

impl Sender {
    pub(crate) fn new(cfg: TcpConfig) -> Self {
        let mss = cfg.mss as u64;
        Self {
            cfg,
            buf: VecDeque::new(),
            buffered: 0,
            snd_una: 0,
            snd_nxt: 0,
            high_tx: 0,
            cwnd: u64::from(cfg.initial_window.max(1)) * mss,
            ssthresh: u64::MAX,
            ca_acked: 0,
            dupacks: 0,
            recover: None,
            sacked: BTreeMap::new(),
            rexmit_next: 0,
            srtt: None,
            rttvar: 0.0,
            rto: cfg.initial_rto_ns,
            rto_deadline: None,
            timed: None,
            stats: TcpStats::default(),
        }
    }

    /// Appends application bytes to the stream.
    pub(crate) fn write(&mut self, data: Bytes) {
        self.buffered += data.len() as u64;
        if !data.is_empty() {
            self.buf.push_back(data);
        }
    }

    fn end(&self) -> u64 {
        self.snd_una + self.buffered
    }

    /// Drops the first `n` bytes of the buffer (they were acknowledged).
    fn release(&mut self, mut n: u64) {
        self.buffered -= n;
        while n > 0 {
            let Some(front) = self.buf.front_mut() else {
                return;
            };
            let len = front.len() as u64;
            if len <= n {
                n -= len;
                self.buf.pop_front();
            } else {
                *front = front.slice(n as usize..);
                n = 0;
            }
        }
    }

    fn flight(&self) -> u64 {
        self.snd_nxt - self.snd_una
    }

    fn segment_at(&self, seq: u64, limit: u64) -> Segment {
        let mut off = (seq - self.snd_una) as usize;
        let len = (self.cfg.mss as u64).min(limit - seq) as usize;
        let mut pieces = Vec::new();
        let mut need = len;
        for chunk in &self.buf {
            if off >= chunk.len() {
                off -= chunk.len();
                continue;
            }
            let take = (chunk.len() - off).min(need);
            pieces.push(chunk.slice(off..off + take));
            need -= take;
            off = 0;
            if need == 0 {
                break;
            }
        }
        let data = if pieces.len() == 1 {
            pieces.pop().unwrap_or_default()
        } else {
            let mut joined = BytesMut::with_capacity(len);
            for p in &pieces {
                joined.extend_from_slice(p);
            }
            joined.freeze()
        };
        Segment { seq, data }
    }

    fn arm(&mut self, now: u64) {
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rto);
        }
    }

    /// New segments the windows allow, at `now`.
    pub(crate) fn poll(&mut self, now: u64, out: &mut Vec<Segment>) {
        let window = self.cwnd.min(self.cfg.receive_window as u64);
        while self.snd_nxt < self.end() && self.flight() < window {
            let room = window - self.flight();
            let seg = self.segment_at(self.snd_nxt, self.end());
            // Send whole segments only, unless it is the stream's tail (no Nagle: iSCSI sets
            // TCP_NODELAY).
            if (seg.data.len() as u64) > room && self.flight() > 0 {
                break;
            }
            let end = seg.seq + seg.data.len() as u64;
            if seg.seq < self.high_tx {
                self.stats.retransmits += 1;
            } else if self.timed.is_none() {
                self.timed = Some((end, now));
            }
            self.snd_nxt = end;
            self.high_tx = self.high_tx.max(end);
            self.stats.segments += 1;
            self.arm(now);
            out.push(seg);
        }
    }

    fn retransmit_first(&mut self, now: u64, out: &mut Vec<Segment>) {
        if self.snd_una >= self.high_tx {
            return;
        }
        let seg = self.segment_at(self.snd_una, self.high_tx);
        self.stats.segments += 1;
        self.stats.retransmits += 1;
        // Karn's rule: a retransmitted segment's acknowledgement is ambiguous.
        self.timed = None;
        self.snd_nxt = self.snd_nxt.max(self.snd_una + seg.data.len() as u64);
        self.arm(now);
        out.push(seg);
    }

    fn sample_rtt(&mut self, rtt: u64) {
        let r = rtt as f64;
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2.0;
            }
            Some(s) => {
                self.rttvar = 0.75 * self.rttvar + 0.25 * (s - r).abs();
                self.srtt = Some(0.875 * s + 0.125 * r);
            }
        }
        let rto = self.srtt.unwrap_or(r) + (4.0 * self.rttvar).max(1_000_000.0);
        self.rto = (rto as u64).clamp(self.cfg.min_rto_ns, self.cfg.max_rto_ns);
    }

    /// A cumulative acknowledgement of everything below `ack`, with the receiver's
    /// out-of-order ranges (ignored without SACK).
    pub(crate) fn on_ack(
        &mut self,
        now: u64,
        ack: u64,
        sack: &[(u64, u64)],
        out: &mut Vec<Segment>,
    ) {
        let mss = self.cfg.mss as u64;
        if self.cfg.sack {
            self.record_sack(ack, sack);
        }
        if ack > self.snd_una && ack <= self.high_tx {
            let acked = ack - self.snd_una;
            self.release(acked);
            self.snd_una = ack;
            self.snd_nxt = self.snd_nxt.max(ack);
            if let Some((end, sent)) = self.timed {
                if ack >= end {
                    self.sample_rtt(now - sent);
                    self.timed = None;
                }
            }
            self.dupacks = 0;
            match self.recover {
                Some(r) if ack < r && self.cfg.sack => {}
                Some(r) if ack < r => {
                    // A partial acknowledgement: the next hole is lost too (RFC 6582).
                    self.cwnd = self.cwnd.saturating_sub(acked) + mss;
                    self.rto_deadline = None;
                    self.retransmit_first(now, out);
                }
                Some(_) => {
                    self.recover = None;
                    self.cwnd = self.ssthresh.min(self.flight() + mss).max(mss);
                }
                None if self.cwnd < self.ssthresh => self.cwnd += acked.min(mss),
                None => {
                    self.ca_acked += acked;
                    if self.ca_acked >= self.cwnd {
                        self.ca_acked -= self.cwnd;
                        self.cwnd += mss;
                    }
                }
            }
            self.rto_deadline = None;
            if self.snd_una < self.high_tx {
                self.arm(now);
            }
        } else if ack == self.snd_una && self.flight() > 0 {
            self.dupacks += 1;
            if self.dupacks == 3 && self.recover.is_none() {
                self.stats.fast_retransmits += 1;
                self.ssthresh = (self.flight() / 2).max(2 * mss);
                self.recover = Some(self.high_tx);
                if self.cfg.sack {
                    self.cwnd = self.ssthresh;
                    self.rexmit_next = self.snd_una;
                } else {
                    self.cwnd = self.ssthresh + 3 * mss;
                    self.retransmit_first(now, out);
                }
            } else if self.dupacks > 3 && self.recover.is_some() && !self.cfg.sack {
                // Each further duplicate: a segment left the network.
                self.cwnd += mss;
            }
        }
        if self.cfg.sack && self.recover.is_some() {
            self.sack_send(now, out);
        } else {
            self.poll(now, out);
        }
    }

    fn record_sack(&mut self, ack: u64, blocks: &[(u64, u64)]) {
        for &(mut start, mut end) in blocks {
            start = start.max(ack);
            if end <= start || end > self.high_tx {
                continue;
            }
            // Merge with every range it touches.
            let touching: Vec<(u64, u64)> = self
                .sacked
                .range(..=end)
                .filter(|(_, &e)| e >= start)
                .map(|(&s, &e)| (s, e))
                .collect();
            for (s, e) in touching {
                self.sacked.remove(&s);
                start = start.min(s);
                end = end.max(e);
            }
            self.sacked.insert(start, end);
        }
        let una = ack.max(self.snd_una);
        let below: Vec<u64> = self.sacked.range(..una).map(|(&s, _)| s).collect();
        for s in below {
            if let Some(e) = self.sacked.remove(&s) {
                if e > una {
                    self.sacked.insert(una, e);
                }
            }
        }
    }

    /// The first byte not acknowledged at or after `from`, and where that hole ends (below the
    /// highest SACKed byte), if any.
    fn next_hole(&self, from: u64) -> Option<(u64, u64)> {
        let mut at = from.max(self.snd_una);
        for (&s, &e) in &self.sacked {
            if e <= at {
                continue;
            }
            if s > at {
                return Some((at, s));
            }
            at = e;
        }
        None
    }

    /// RFC 6675's pipe: bytes in flight, not counting those the receiver holds and the holes
    /// below its highest range not sent again yet (taken as lost).
    fn pipe(&self) -> u64 {
        let sacked: u64 = self.sacked.iter().map(|(s, e)| e - s).sum();
        let mut lost = 0;
        let mut from = self.rexmit_next;
        while let Some((s, e)) = self.next_hole(from) {
            lost += e - s;
            from = e;
        }
        (self.high_tx - self.snd_una).saturating_sub(sacked + lost)
    }

    /// SACK recovery: the holes first, then new data, while the pipe is below the window.
    fn sack_send(&mut self, now: u64, out: &mut Vec<Segment>) {
        let mss = self.cfg.mss as u64;
        let mut pipe = self.pipe();
        while pipe < self.cwnd {
            let seg = if let Some((s, e)) = self.next_hole(self.rexmit_next) {
                let seg = self.segment_at(s, e);
                self.rexmit_next = s + seg.data.len() as u64;
                self.stats.retransmits += 1;
                self.timed = None;
                seg
            } else if self.high_tx < self.end()
                && self.high_tx - self.snd_una < self.cfg.receive_window as u64
            {
                let seg = self.segment_at(self.high_tx, self.end());
                self.high_tx += seg.data.len() as u64;
                self.snd_nxt = self.high_tx;
                seg
            } else {
                break;
            };
            pipe += (seg.data.len() as u64).max(1).min(mss);
            self.stats.segments += 1;
            self.arm(now);
            out.push(seg);
        }
    }

    /// Its state in one line.
    pub(crate) fn describe(&self) -> String {
        format!(
            "una {} nxt {} high {} end {} cwnd {} ssthresh {} rto {} ms deadline {:?}",
            self.snd_una,
            self.snd_nxt,
            self.high_tx,
            self.end(),
            self.cwnd,
            self.ssthresh,
            self.rto / 1_000_000,
            self.rto_deadline
        )
    }

    /// When the retransmission timer fires.
    pub(crate) fn next_timeout(&self) -> Option<u64> {
        self.rto_deadline
    }

    /// The retransmission timer fired: back to one segment and go back to `snd_una`.
    pub(crate) fn on_timeout(&mut self, now: u64, out: &mut Vec<Segment>) {
        if self.rto_deadline.is_none_or(|d| d > now) {
            return;
        }
        self.rto_deadline = None;
        if self.snd_una >= self.high_tx {
            return;
        }
        let mss = self.cfg.mss as u64;
        self.stats.timeouts += 1;
        self.ssthresh = (self.flight() / 2).max(2 * mss);
        self.cwnd = mss;
        self.ca_acked = 0;
        self.dupacks = 0;
        self.recover = None;
        self.sacked.clear();
        self.timed = None;
        self.snd_nxt = self.snd_una;
        self.rto = (self.rto * 2).min(self.cfg.max_rto_ns);
        self.poll(now, out);
    }
}

/// The receiving half of one direction.
#[derive(Debug, Default)]
pub(crate) struct Receiver {
    rcv_nxt: u64,
    out_of_order: BTreeMap<u64, Bytes>,
    /// Where the latest out-of-order segment starts (its block goes first, RFC 2018).
    latest: Option<u64>,
}

impl Receiver {
    /// A segment arrived intact: the in-order bytes it completes go to `deliver`; returns the
    /// cumulative acknowledgement to send.
    pub(crate) fn on_segment(&mut self, seg: Segment, deliver: &mut Vec<Bytes>) -> u64 {
        let end = seg.seq + seg.data.len() as u64;
        if end > self.rcv_nxt {
            if seg.seq > self.rcv_nxt {
                let keep = self
                    .out_of_order
                    .get(&seg.seq)
                    .is_none_or(|b| b.len() < seg.data.len());
                if keep {
                    self.out_of_order.insert(seg.seq, seg.data);
                }
                self.latest = Some(seg.seq);
            } else {
                let skip = (self.rcv_nxt - seg.seq) as usize;
                deliver.push(seg.data.slice(skip..));
                self.rcv_nxt = end;
                while let Some(entry) = self.out_of_order.first_entry() {
                    let seq = *entry.key();
                    if seq > self.rcv_nxt {
                        break;
                    }
                    let data = entry.remove();
                    let end = seq + data.len() as u64;
                    if end > self.rcv_nxt {
                        deliver.push(data.slice((self.rcv_nxt - seq) as usize..));
                        self.rcv_nxt = end;
                    }
                }
            }
        }
        self.rcv_nxt
    }

    /// SACK blocks (RFC 2018 section 4): the range holding the latest segment first, then
    /// the lowest others, four in all.
    pub(crate) fn sack_blocks(&self) -> Vec<(u64, u64)> {
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for (&s, b) in &self.out_of_order {
            let e = s + b.len() as u64;
            if let Some(last) = ranges.last_mut() {
                if s <= last.1 {
                    last.1 = last.1.max(e);
                    continue;
                }
            }
            ranges.push((s, e));
        }
        let first = self
            .latest
            .and_then(|l| ranges.iter().position(|&(s, e)| s <= l && l < e));
        let mut blocks: Vec<(u64, u64)> = first.map(|i| ranges[i]).into_iter().collect();
        blocks.extend(
            ranges
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != first)
                .map(|(_, r)| *r)
                .take(4 - blocks.len()),
        );
        blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> TcpConfig {
        TcpConfig {
            mss: 1000,
            initial_window: 1,
            ..TcpConfig::study()
        }
    }

    /// Sends everything the window allows, acknowledges it all one RTT later, and returns
    /// how many segments each round carried.
    fn rounds(s: &mut Sender, n: usize) -> Vec<usize> {
        let mut r = Receiver::default();
        let mut now = 0;
        let mut sizes = Vec::new();
        let mut out = Vec::new();
        s.poll(now, &mut out);
        for _ in 0..n {
            sizes.push(out.len());
            now += 10_000_000;
            let mut acks = Vec::new();
            for seg in out.drain(..) {
                acks.push(r.on_segment(seg, &mut Vec::new()));
            }
            for a in acks {
                s.on_ack(now, a, &[], &mut out);
            }
        }
        sizes
    }

    #[test]
    fn slow_start_doubles_the_window_every_round_trip() {
        let mut s = Sender::new(cfg());
        s.write(Bytes::from(vec![0u8; 1_000_000]));
        assert_eq!(rounds(&mut s, 6), [1, 2, 4, 8, 16, 32]);
    }

    #[test]
    fn congestion_avoidance_grows_one_segment_per_round_trip() {
        let mut s = Sender::new(cfg());
        s.ssthresh = 4000;
        s.write(Bytes::from(vec![0u8; 1_000_000]));
        assert_eq!(rounds(&mut s, 7), [1, 2, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn third_duplicate_ack_retransmits_and_halves_the_window() {
        let mut s = Sender::new(TcpConfig {
            initial_window: 10,
            ..cfg()
        });
        s.write(Bytes::from(vec![0u8; 20_000]));
        let mut out = Vec::new();
        s.poll(0, &mut out);
        assert_eq!(out.len(), 10);
        let mut r = Receiver::default();
        // Segment 0 is lost: the others make duplicate acknowledgements of 0.
        let lost = out.remove(0);
        let mut resent = Vec::new();
        for (n, seg) in out.drain(..).enumerate() {
            let ack = r.on_segment(seg, &mut Vec::new());
            assert_eq!(ack, 0);
            s.on_ack(1_000, ack, &[], &mut resent);
            if n < 2 {
                assert!(resent.is_empty(), "retransmitted after {} dupacks", n + 1);
            }
        }
        assert_eq!(s.stats.fast_retransmits, 1);
        assert_eq!(resent[0].seq, lost.seq);
        assert_eq!(s.ssthresh, 5_000);
        // The retransmission fills the hole: everything is acknowledged at once.
        let ack = r.on_segment(resent.remove(0), &mut Vec::new());
        assert_eq!(ack, 10_000);
        s.on_ack(2_000, ack, &[], &mut resent);
        assert_eq!(s.cwnd, 5_000);
        assert!(s.recover.is_none());
    }

    /// Ten of twenty segments lost: without SACK one hole a round trip, with it all at once.
    fn recovery_rounds(sack: bool) -> usize {
        let mut s = Sender::new(TcpConfig {
            initial_window: 20,
            sack,
            ..cfg()
        });
        s.write(Bytes::from(vec![0u8; 20_000]));
        let mut r = Receiver::default();
        let mut flight = Vec::new();
        s.poll(0, &mut flight);
        let mut rounds = 0;
        let mut first = true;
        while r.rcv_nxt < 20_000 {
            rounds += 1;
            let mut next = Vec::new();
            for (n, seg) in flight.drain(..).enumerate() {
                if first && n % 2 == 0 {
                    continue;
                }
                let ack = r.on_segment(seg, &mut Vec::new());
                s.on_ack(rounds as u64 * 10_000_000, ack, &r.sack_blocks(), &mut next);
            }
            first = false;
            flight = next;
            assert!(rounds < 50);
        }
        rounds
    }

    #[test]
    fn sack_recovers_many_holes_in_one_round_trip() {
        let (newreno, sack) = (recovery_rounds(false), recovery_rounds(true));
        assert!(newreno >= 10, "{newreno}");
        assert!(sack <= 3, "{sack}");
    }

    #[test]
    fn timeout_resends_from_the_first_unacknowledged_byte_and_backs_off() {
        let mut s = Sender::new(TcpConfig {
            initial_window: 4,
            ..cfg()
        });
        s.write(Bytes::from(vec![0u8; 8_000]));
        let mut out = Vec::new();
        s.poll(0, &mut out);
        assert_eq!(out.len(), 4);
        assert_eq!(s.next_timeout(), Some(1_000_000_000));
        out.clear();
        s.on_timeout(999_999_999, &mut out);
        assert!(out.is_empty(), "fired early");
        s.on_timeout(1_000_000_000, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].seq, 0);
        assert_eq!(s.cwnd, 1000);
        assert_eq!(s.stats.timeouts, 1);
        assert_eq!(s.next_timeout(), Some(3_000_000_000));
    }

    #[test]
    fn receiver_reassembles_out_of_order_segments() {
        let mut r = Receiver::default();
        let seg = |seq: u64, b: &'static [u8]| Segment {
            seq,
            data: Bytes::from_static(b),
        };
        let mut got = Vec::new();
        assert_eq!(r.on_segment(seg(3, b"def"), &mut got), 0);
        assert_eq!(r.on_segment(seg(0, b"abc"), &mut got), 6);
        assert_eq!(r.on_segment(seg(1, b"bcdefg"), &mut got), 7);
        let all: Vec<u8> = got.iter().flat_map(|b| b.iter().copied()).collect();
        assert_eq!(all, b"abcdefg");
    }
}
