//! What the LUNs must contain: for every block, the writes whose data it may hold.
//!
//! A write that completed GOOD leaves its data; one that ended with CHECK CONDITION (a unit
//! attention, reported before the command runs) leaves the block as it was; one aborted by
//! task management may or may not have run, so either is correct until the next write. The
//! workload never runs two commands on one block at once, so nothing else is uncertain.

use std::collections::{HashMap, HashSet};

/// Block size of the simulated LUNs.
pub(crate) const BLOCK: usize = 512;

/// The data write `id` puts in `lba` of `lun`; write 0 is the zeros a LUN starts with.
pub(crate) fn block_data(id: u32, lun: u16, lba: u32, out: &mut Vec<u8>) {
    if id == 0 {
        out.resize(out.len() + BLOCK, 0);
        return;
    }
    let mut x = (u64::from(id) << 32) ^ (u64::from(lun) << 24) ^ u64::from(lba) ^ 0x9e37_79b9;
    for _ in 0..BLOCK / 8 {
        // splitmix64: cheap, and every byte depends on the write, the LUN and the block.
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
}

/// How a write ended, as far as the data is concerned.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) enum WriteFate {
    Applied,
    NotApplied,
    Unknown,
}

#[derive(Debug, Default)]
pub(crate) struct Model {
    /// Write ids a block may hold; absent means only the initial zeros.
    candidates: HashMap<(u16, u32), Vec<u32>>,
    /// Blocks a command in flight touches.
    busy: HashSet<(u16, u32)>,
}

impl Model {
    /// Whether none of these blocks is in use; if so, they are taken.
    pub(crate) fn take(&mut self, lun: u16, lba: u32, blocks: u32) -> bool {
        if (lba..lba + blocks).any(|b| self.busy.contains(&(lun, b))) {
            return false;
        }
        self.busy.extend((lba..lba + blocks).map(|b| (lun, b)));
        true
    }

    pub(crate) fn release(&mut self, lun: u16, lba: u32, blocks: u32) {
        for b in lba..lba + blocks {
            self.busy.remove(&(lun, b));
        }
    }

    pub(crate) fn write_ended(
        &mut self,
        lun: u16,
        lba: u32,
        blocks: u32,
        id: u32,
        fate: WriteFate,
    ) {
        for b in lba..lba + blocks {
            let c = self.candidates.entry((lun, b)).or_insert_with(|| vec![0]);
            match fate {
                WriteFate::Applied => *c = vec![id],
                WriteFate::NotApplied => {}
                WriteFate::Unknown => c.push(id),
            }
        }
    }

    /// Checks read data against what each block may hold.
    pub(crate) fn check_read(&self, lun: u16, lba: u32, data: &[u8]) -> Result<(), String> {
        let mut want = Vec::with_capacity(BLOCK);
        for (i, got) in data.chunks(BLOCK).enumerate() {
            let b = lba + i as u32;
            let ids = self
                .candidates
                .get(&(lun, b))
                .map_or(&[0u32][..], Vec::as_slice);
            let ok = ids.iter().any(|&id| {
                want.clear();
                block_data(id, lun, b, &mut want);
                want[..got.len()] == *got
            });
            if !ok {
                return Err(format!(
                    "LUN {lun} block {b}: read data matches none of the writes {ids:?} that may be there"
                ));
            }
        }
        Ok(())
    }
}
