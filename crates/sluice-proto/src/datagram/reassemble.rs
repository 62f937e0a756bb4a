//! The receiving side: datagrams back into whole PDUs, within fixed bounds.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::{DatagramError, SegmentHeader};

/// How much a [`Reassembler`] may hold, and for how long.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct ReassemblyLimits {
    /// The longest PDU accepted: a datagram announcing more is dropped before anything is
    /// allocated. The transport sets it from the MaxRecvDataSegmentLength it declared (RFC
    /// 7143 section 13.12) with [`crate::framing::max_frame_len`].
    pub max_pdu_len: usize,
    /// PDUs reassembled at once; a new one beyond it drops the oldest.
    pub max_partial: usize,
    /// Bytes held by partial PDUs at once; a new one beyond it drops the oldest.
    pub max_buffered_bytes: usize,
    /// A partial PDU older than this is dropped: its missing segments are taken as lost.
    pub partial_timeout: Duration,
}

impl Default for ReassemblyLimits {
    /// 64 partial PDUs, 32 MiB, 1 s; PDUs up to the largest a 24-bit DataSegmentLength allows.
    fn default() -> Self {
        ReassemblyLimits {
            max_pdu_len: crate::framing::max_frame_len(
                crate::pdu::MAX_DATA_SEGMENT_LEN,
                crate::framing::Digests {
                    header: true,
                    data: true,
                },
            ),
            // A window of reads each sending a burst of PDUs keeps a few in flight at once;
            // a peer interleaving more than 64 PDUs' datagrams is not one sluice sends to.
            max_partial: 64,
            // Two of the largest PDUs, so that one large PDU never starves the next.
            max_buffered_bytes: 32 << 20,
            // Datagrams of one PDU leave back to back; a segment a second late is lost.
            partial_timeout: Duration::from_secs(1),
        }
    }
}

/// What a [`Reassembler`] did, for counters.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct ReassemblyStats {
    /// Whole PDUs delivered.
    pub delivered: u64,
    /// Datagrams dropped as malformed or conflicting.
    pub malformed: u64,
    /// Datagrams repeating a segment already held.
    pub duplicates: u64,
    /// Partial PDUs dropped because they grew too old.
    pub expired: u64,
    /// Partial PDUs dropped to make room for newer ones.
    pub evicted: u64,
}

/// A PDU of which some segments are in.
#[derive(Debug)]
struct Partial {
    header: SegmentHeader,
    first_seen: Instant,
    buf: BytesMut,
    /// One bit per segment received.
    have: Vec<u64>,
    missing: u16,
    cost: usize,
}

impl Partial {
    fn cost_of(h: &SegmentHeader) -> usize {
        h.total_len as usize + usize::from(h.count).div_ceil(64) * 8
    }
}

/// Reassembles PDUs from datagrams; see the [module docs](super).
#[derive(Debug)]
pub struct Reassembler {
    limits: ReassemblyLimits,
    /// Oldest first.
    partials: VecDeque<Partial>,
    buffered: usize,
    stats: ReassemblyStats,
}

impl Reassembler {
    /// An empty reassembler within `limits`.
    pub fn new(limits: ReassemblyLimits) -> Reassembler {
        Reassembler {
            limits,
            partials: VecDeque::new(),
            buffered: 0,
            stats: ReassemblyStats::default(),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &ReassemblyLimits {
        &self.limits
    }

    /// Changes the longest PDU accepted (after login, when MaxRecvDataSegmentLength is
    /// known). Partial PDUs longer than the new bound are dropped.
    pub fn set_max_pdu_len(&mut self, max_pdu_len: usize) {
        self.limits.max_pdu_len = max_pdu_len;
        let before = self.partials.len();
        let mut freed = 0;
        self.partials.retain(|p| {
            let keep = p.header.total_len as usize <= max_pdu_len;
            if !keep {
                freed += p.cost;
            }
            keep
        });
        self.buffered -= freed;
        self.stats.evicted += (before - self.partials.len()) as u64;
    }

    /// What happened so far.
    pub fn stats(&self) -> ReassemblyStats {
        self.stats
    }

    /// Bytes held by partial PDUs.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered
    }

    /// Partial PDUs held.
    pub fn partial_count(&self) -> usize {
        self.partials.len()
    }

    /// Takes one datagram received at `now`. Returns the PDU it completes, if any. A
    /// malformed datagram is dropped with the reason (nothing else changes, except that a
    /// segment conflicting with a partial PDU drops that PDU too).
    pub fn push(
        &mut self,
        datagram: &[u8],
        now: Instant,
    ) -> Result<Option<BytesMut>, DatagramError> {
        self.expire(now);
        let (h, payload) = match SegmentHeader::parse(datagram, self.limits.max_pdu_len) {
            Ok(parsed) => parsed,
            Err(e) => {
                self.stats.malformed += 1;
                return Err(e);
            }
        };
        if h.count == 1 {
            self.stats.delivered += 1;
            return Ok(Some(BytesMut::from(payload)));
        }
        let slot = self
            .partials
            .iter()
            .position(|p| p.header.pdu_id == h.pdu_id);
        let i = match slot {
            Some(i) => {
                let p = &self.partials[i];
                if p.header.total_len != h.total_len || p.header.count != h.count {
                    // Two PDUs under one id: neither can be trusted.
                    self.remove(i);
                    self.stats.malformed += 1;
                    return Err(DatagramError::Conflict { pdu_id: h.pdu_id });
                }
                i
            }
            None => self.insert(h, now)?,
        };
        let p = &mut self.partials[i];
        let (word, bit) = (usize::from(h.index) / 64, 1u64 << (h.index % 64));
        if p.have[word] & bit != 0 {
            self.stats.duplicates += 1;
            return Ok(None);
        }
        p.have[word] |= bit;
        p.buf[h.range()].copy_from_slice(payload);
        p.missing -= 1;
        if p.missing > 0 {
            return Ok(None);
        }
        let done = self.remove(i).map(|p| p.buf);
        self.stats.delivered += 1;
        Ok(done)
    }

    /// Drops the partial PDUs older than the partial timeout at `now`; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let timeout = self.limits.partial_timeout;
        let mut n = 0;
        while let Some(p) = self.partials.front() {
            if now.saturating_duration_since(p.first_seen) < timeout {
                break;
            }
            self.remove(0);
            n += 1;
        }
        self.stats.expired += n as u64;
        n
    }

    /// When the oldest partial PDU expires, if any is held.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.partials
            .front()
            .map(|p| p.first_seen + self.limits.partial_timeout)
    }

    /// Makes room for and adds a partial PDU; returns its position.
    fn insert(&mut self, h: SegmentHeader, now: Instant) -> Result<usize, DatagramError> {
        let cost = Partial::cost_of(&h);
        if cost > self.limits.max_buffered_bytes || self.limits.max_partial == 0 {
            self.stats.malformed += 1;
            return Err(DatagramError::Budget {
                len: h.total_len as usize,
            });
        }
        while self.partials.len() >= self.limits.max_partial
            || self.buffered + cost > self.limits.max_buffered_bytes
        {
            self.remove(0);
            self.stats.evicted += 1;
        }
        self.buffered += cost;
        self.partials.push_back(Partial {
            header: SegmentHeader { index: 0, ..h },
            first_seen: now,
            buf: BytesMut::zeroed(h.total_len as usize),
            have: vec![0; usize::from(h.count).div_ceil(64)],
            missing: h.count,
            cost,
        });
        Ok(self.partials.len() - 1)
    }

    fn remove(&mut self, i: usize) -> Option<Partial> {
        let p = self.partials.remove(i)?;
        self.buffered -= p.cost;
        Some(p)
    }
}
