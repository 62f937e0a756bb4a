//! Which byte ranges of a buffer have arrived: a sorted list of disjoint, merged ranges.
//!
//! Used to accept data PDUs in any order (DataPDUInOrder=No, RFC 7143 section 13.18) while
//! refusing overlays and recognising exact duplicates. In-order data keeps the list at one
//! range, held inline, so no allocation happens per PDU or per command (a read at
//! ErrorRecoveryLevel 1 keeps two of these: bytes and DataSNs).

use smallvec::SmallVec;

/// Outcome of [`Coverage::insert`].
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) enum Insert {
    /// The range was new and is now recorded.
    New,
    /// The range was already fully covered: a duplicate.
    Duplicate,
    /// The range partly overlaps data already received; nothing was recorded.
    Overlap,
}

/// Disjoint half-open ranges `[start, end)`, sorted and merged when adjacent.
#[derive(Clone, Debug, Default)]
pub(crate) struct Coverage {
    /// Two ranges inline: one in order, two while a single hole is open.
    ranges: SmallVec<[(u32, u32); 2]>,
    bytes: u32,
}

impl Coverage {
    /// Total bytes covered.
    pub(crate) fn bytes(&self) -> u32 {
        self.bytes
    }

    /// End of the contiguous range starting at `base`, or `base` if nothing starts there.
    pub(crate) fn contiguous_end(&self, base: u32) -> u32 {
        match self.ranges.first() {
            Some(&(start, end)) if start == base => end,
            _ => base,
        }
    }

    /// Whether every unit of `[start, end)` is covered (an empty range is). Unlike
    /// [`gaps`](Self::gaps), allocates nothing: it is asked for every data PDU under recovery.
    pub(crate) fn covers(&self, start: u32, end: u32) -> bool {
        if start >= end {
            return true;
        }
        // The only range that can hold `start`: the first whose end lies past it.
        let i = self.ranges.partition_point(|&(_, e)| e <= start);
        self.ranges
            .get(i)
            .is_some_and(|&(s, e)| s <= start && end <= e)
    }

    /// The parts of `[start, end)` not covered, in offset order (the holes a lost PDU left,
    /// RFC 7143 section 7.9).
    pub(crate) fn gaps(&self, start: u32, end: u32) -> Vec<(u32, u32)> {
        let mut gaps = Vec::new();
        let mut at = start;
        for &(s, e) in &self.ranges {
            if e <= at {
                continue;
            }
            if s >= end {
                break;
            }
            if s > at {
                gaps.push((at, s));
            }
            at = at.max(e);
        }
        if at < end {
            gaps.push((at, end));
        }
        gaps
    }

    /// Records `[start, end)` whatever part of it was there already (a union).
    pub(crate) fn add(&mut self, start: u32, end: u32) {
        for (s, e) in self.gaps(start, end) {
            self.insert(s, e);
        }
    }

    /// Records `[start, end)`. Empty ranges are always [`Insert::Duplicate`].
    pub(crate) fn insert(&mut self, start: u32, end: u32) -> Insert {
        if start >= end {
            return Insert::Duplicate;
        }
        // First range whose end reaches `start` (touching counts, for merging).
        let i = self.ranges.partition_point(|&(_, e)| e < start);
        if let Some(&(s, e)) = self.ranges.get(i) {
            if s <= start && end <= e {
                return Insert::Duplicate;
            }
            // Overlap (not mere adjacency) with this range or the following ones.
            if s < end && start < e {
                return Insert::Overlap;
            }
        }
        if let Some(&(s, _)) = self.ranges.get(i + 1) {
            if s < end {
                return Insert::Overlap;
            }
        }
        self.bytes += end - start;
        let merge_prev = self.ranges.get(i).is_some_and(|&(_, e)| e == start);
        let merge_next_at = if merge_prev { i + 1 } else { i };
        let merge_next = self
            .ranges
            .get(merge_next_at)
            .is_some_and(|&(s, _)| s == end);
        match (merge_prev, merge_next) {
            (true, true) => {
                self.ranges[i].1 = self.ranges[i + 1].1;
                self.ranges.remove(i + 1);
            }
            (true, false) => self.ranges[i].1 = end,
            (false, true) => self.ranges[i].0 = start,
            (false, false) => self.ranges.insert(i, (start, end)),
        }
        Insert::New
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_adjacent_and_refuses_overlays() {
        let mut c = Coverage::default();
        assert_eq!(c.insert(10, 20), Insert::New);
        assert_eq!(c.insert(30, 40), Insert::New);
        assert_eq!(c.insert(20, 30), Insert::New);
        assert_eq!(c.ranges.as_slice(), [(10, 40)]);
        assert_eq!(c.insert(15, 25), Insert::Duplicate);
        assert_eq!(c.insert(35, 45), Insert::Overlap);
        assert_eq!(c.insert(0, 11), Insert::Overlap);
        assert_eq!(c.insert(0, 10), Insert::New);
        assert_eq!(c.insert(50, 60), Insert::New);
        assert_eq!(c.insert(40, 55), Insert::Overlap);
        assert_eq!(c.insert(45, 50), Insert::New);
        assert_eq!(c.ranges.as_slice(), [(0, 40), (45, 60)]);
        assert_eq!(c.bytes(), 55);
        assert_eq!(c.contiguous_end(0), 40);
        assert_eq!(c.insert(5, 5), Insert::Duplicate);
    }

    #[test]
    fn gaps_are_the_uncovered_parts() {
        let mut c = Coverage::default();
        assert_eq!(c.gaps(0, 10), vec![(0, 10)]);
        c.insert(2, 4);
        c.insert(6, 8);
        assert_eq!(c.gaps(0, 10), vec![(0, 2), (4, 6), (8, 10)]);
        assert_eq!(c.gaps(3, 7), vec![(4, 6)]);
        assert_eq!(c.gaps(2, 4), vec![]);
        c.insert(0, 2);
        c.insert(4, 6);
        c.insert(8, 10);
        assert_eq!(c.gaps(0, 10), vec![]);
        let mut u = Coverage::default();
        u.insert(2, 4);
        u.add(0, 6);
        assert_eq!((u.ranges.as_slice(), u.bytes()), ([(0, 6)].as_slice(), 6));
    }

    proptest::proptest! {
        /// `covers` is exactly "no gaps", for any set of inserted ranges and any query.
        #[test]
        fn covers_is_no_gaps(
            inserts in proptest::collection::vec((0u32..64, 0u32..16), 0..12),
            start in 0u32..80,
            len in 0u32..20,
        ) {
            let mut c = Coverage::default();
            for (s, l) in inserts {
                c.insert(s, s + l);
            }
            proptest::prop_assert_eq!(c.covers(start, start + len), c.gaps(start, start + len).is_empty());
        }
    }
}
