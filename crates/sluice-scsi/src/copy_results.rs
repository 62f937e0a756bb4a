//! The copy manager's bookkeeping (SPC-4 6.4, 6.18): copy operations in progress and their
//! held status, RECEIVE COPY RESULTS (COPY STATUS, OPERATING PARAMETERS), and the
//! Third-Party Copy VPD page.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use crate::cdb::opcode as oc;
use crate::copy_list::{
    ListIdUsage, BLOCK_TO_BLOCK_SEGMENT, IDENTIFICATION_CSCD, MAX_CSCD_DESCRIPTORS,
    MAX_DESCRIPTOR_LIST_BYTES, MAX_SEGMENT_DESCRIPTORS,
};
use crate::field::{be32, put_truncated, u8_at};
use crate::lu::{Cmd, CmdResult, LogicalUnit};
use crate::sense::{invalid_field_in_cdb, SenseData, SenseKey};
use crate::NexusId;

/// TOTAL CONCURRENT COPIES: copy operations one LU runs at once. Each holds a 1 MiB buffer
/// and a thread of the transport's; more wait their turn at the initiator (INSUFFICIENT
/// RESOURCES tells it to).
pub(crate) const MAX_CONCURRENT_COPIES: u16 = 16;

/// Held statuses kept per I_T nexus beyond the running copies (a list identifier is one
/// byte, so there can never be more than 256 anyway).
const MAX_HELD_PER_NEXUS: usize = 256;

/// How far one copy operation has come, shared between the copy and RECEIVE COPY RESULTS.
#[derive(Debug, Default)]
pub(crate) struct CopyProgress {
    /// Segments completed.
    pub(crate) segments: AtomicU16,
    /// Bytes written to destinations.
    pub(crate) bytes: AtomicU64,
    /// COPY MANAGER STATUS: 00h in progress, 01h completed without error, 02h with error.
    state: AtomicU8,
}

const IN_PROGRESS: u8 = 0x00;
const COMPLETED: u8 = 0x01;
const FAILED: u8 = 0x02;

/// The copy operations of one LU (the copy manager the EXTENDED COPY was sent to).
#[derive(Debug, Default)]
pub(crate) struct CopyRecords {
    /// By I_T nexus and LIST IDENTIFIER, for lists whose identifier is unique.
    by_list: HashMap<(NexusId, u8), Arc<CopyProgress>>,
    /// Copies running now, whatever their LIST ID USAGE.
    running: u16,
}

impl CopyRecords {
    /// An I_T nexus is gone: its held statuses go with it (a new nexus never sees them).
    pub(crate) fn forget(&mut self, nexus: NexusId) {
        self.by_list.retain(|(n, _), _| *n != nexus);
    }
}

/// A copy operation registered with its LU; deregistered (its status settled) when dropped.
pub(crate) struct CopyGuard<'a> {
    lu: &'a LogicalUnit,
    key: (NexusId, u8),
    usage: ListIdUsage,
    pub(crate) progress: Arc<CopyProgress>,
    ok: bool,
}

impl<'a> CopyGuard<'a> {
    /// Registers a copy: refused with OPERATION IN PROGRESS (00h/16h) while a copy with the
    /// same unique LIST IDENTIFIER from the same I_T nexus runs, and with INSUFFICIENT
    /// RESOURCES (55h/03h) beyond [`MAX_CONCURRENT_COPIES`].
    pub(crate) fn begin(
        lu: &'a LogicalUnit,
        nexus: NexusId,
        list_id: u8,
        usage: ListIdUsage,
    ) -> Result<Self, SenseData> {
        let progress = Arc::new(CopyProgress::default());
        let key = (nexus, list_id);
        let mut st = lu.state();
        let records = &mut st.copies;
        if usage != ListIdUsage::None {
            if let Some(p) = records.by_list.get(&key) {
                if p.state.load(Ordering::Acquire) == IN_PROGRESS {
                    return Err(SenseData::new(SenseKey::ILLEGAL_REQUEST, 0x00, 0x16));
                }
            }
        }
        if records.running >= MAX_CONCURRENT_COPIES {
            return Err(SenseData::new(SenseKey::ILLEGAL_REQUEST, 0x55, 0x03));
        }
        if usage != ListIdUsage::None {
            let held = records.by_list.keys().filter(|(n, _)| *n == nexus).count();
            if held >= MAX_HELD_PER_NEXUS {
                return Err(SenseData::new(SenseKey::ILLEGAL_REQUEST, 0x55, 0x03));
            }
            records.by_list.insert(key, Arc::clone(&progress));
        }
        records.running += 1;
        Ok(Self {
            lu,
            key,
            usage,
            progress,
            ok: false,
        })
    }

    /// The copy completed without error.
    pub(crate) fn succeeded(mut self) {
        self.ok = true;
    }
}

impl Drop for CopyGuard<'_> {
    fn drop(&mut self) {
        let state = if self.ok { COMPLETED } else { FAILED };
        self.progress.state.store(state, Ordering::Release);
        let mut st = self.lu.state();
        st.copies.running = st.copies.running.saturating_sub(1);
        if self.usage == ListIdUsage::NoHold {
            // Nothing is held once it is over; the entry only kept the identifier unique.
            if st
                .copies
                .by_list
                .get(&self.key)
                .is_some_and(|p| Arc::ptr_eq(p, &self.progress))
            {
                st.copies.by_list.remove(&self.key);
            }
        }
    }
}

/// RECEIVE COPY RESULTS (SPC-4 6.18).
pub(crate) fn receive_copy_results(cmd: &mut Cmd<'_>) -> CmdResult {
    let alloc = be32(cmd.cdb, 10) as usize;
    let data = match u8_at(cmd.cdb, 1) & 0x1F {
        oc::RCR_COPY_STATUS => copy_status(cmd.lu, cmd.nexus, u8_at(cmd.cdb, 2))?,
        _ => operating_parameters(cmd.lu.block_size()),
    };
    put_truncated(cmd.data_in, &data, alloc);
    Ok(())
}

/// COPY STATUS (SPC-4 6.18.3): the status of the copy with this LIST IDENTIFIER from this I_T
/// nexus; INVALID FIELD IN CDB if there is none. A completed copy's status is returned once.
fn copy_status(lu: &LogicalUnit, nexus: NexusId, list_id: u8) -> Result<Vec<u8>, SenseData> {
    let mut st = lu.state();
    let Some(p) = st.copies.by_list.get(&(nexus, list_id)).cloned() else {
        return Err(invalid_field_in_cdb(2, Some(7)));
    };
    let state = p.state.load(Ordering::Acquire);
    if state != IN_PROGRESS {
        st.copies.by_list.remove(&(nexus, list_id));
    }
    drop(st);
    let mut d = vec![0u8; 12];
    d[0..4].copy_from_slice(&8u32.to_be_bytes());
    d[4] = state; // HDD=0: no data is held
    d[5..7].copy_from_slice(&p.segments.load(Ordering::Relaxed).to_be_bytes());
    let (units, count) = transfer_count(p.bytes.load(Ordering::Relaxed));
    d[7] = units;
    d[8..12].copy_from_slice(&count.to_be_bytes());
    Ok(d)
}

/// TRANSFER COUNT UNITS and TRANSFER COUNT for `bytes`: the smallest unit (bytes, KiB, MiB,
/// ... : 2^(10 × units) bytes) in which the count fits in 32 bits.
fn transfer_count(bytes: u64) -> (u8, u32) {
    let mut units = 0u8;
    let mut count = bytes;
    while count > u64::from(u32::MAX) {
        count >>= 10;
        units += 1;
    }
    // Fits after the loop.
    (units, count as u32)
}

/// MAXIMUM SEGMENT LENGTH: the most one segment can copy, 65535 blocks (its count field is
/// two bytes).
fn max_segment_bytes(block_size: u32) -> u32 {
    u32::try_from(u64::from(u16::MAX) * u64::from(block_size)).unwrap_or(u32::MAX)
}

/// OPERATING PARAMETERS (SPC-4 6.18.4): the limits [`crate::copy_list::parse`] enforces.
fn operating_parameters(block_size: u32) -> Vec<u8> {
    let implemented = [BLOCK_TO_BLOCK_SEGMENT, IDENTIFICATION_CSCD];
    let mut d = vec![0u8; 44];
    d[4] = 0x00; // SNLID=0: a copy always has a list identifier (LIST ID USAGE 11b aside)
    d[8..10].copy_from_slice(&MAX_CSCD_DESCRIPTORS.to_be_bytes());
    d[10..12].copy_from_slice(&MAX_SEGMENT_DESCRIPTORS.to_be_bytes());
    d[12..16].copy_from_slice(&MAX_DESCRIPTOR_LIST_BYTES.to_be_bytes());
    d[16..20].copy_from_slice(&max_segment_bytes(block_size).to_be_bytes());
    // MAXIMUM INLINE DATA LENGTH, HELD DATA LIMIT, MAXIMUM STREAM DEVICE TRANSFER SIZE: 0.
    d[34..36].copy_from_slice(&MAX_CONCURRENT_COPIES.to_be_bytes());
    d[36] = MAX_CONCURRENT_COPIES as u8;
    // DATA SEGMENT GRANULARITY: log2 of the block size (whole blocks only).
    d[37] = block_size.max(1).trailing_zeros() as u8;
    d[43] = implemented.len() as u8;
    d.extend_from_slice(&implemented);
    let available = (d.len() - 4) as u32;
    d[0..4].copy_from_slice(&available.to_be_bytes());
    d
}

/// The Third-Party Copy VPD page body (SPC-4 7.8.17), for a copy manager that implements
/// EXTENDED COPY (LID1) and RECEIVE COPY RESULTS: the Supported Commands, Parameter Data,
/// Supported Descriptors and General Copy Operations descriptors.
pub(crate) fn third_party_copy_page(block_size: u32) -> Vec<u8> {
    let mut page = Vec::new();
    // Supported Commands (0001h): each command with its service actions.
    let commands: [(u8, &[u8]); 2] = [
        (oc::EXTENDED_COPY, &[oc::EC_LID1]),
        (
            oc::RECEIVE_COPY_RESULTS,
            &[oc::RCR_COPY_STATUS, oc::RCR_OPERATING_PARAMETERS],
        ),
    ];
    let mut list = Vec::new();
    for (op, sas) in commands {
        list.push(op);
        list.push(sas.len() as u8);
        list.extend_from_slice(sas);
    }
    let mut body = vec![list.len() as u8];
    body.extend_from_slice(&list);
    push_descriptor(&mut page, 0x0001, body);
    // Parameter Data (0004h).
    let mut body = vec![0u8; 28];
    body[4..6].copy_from_slice(&MAX_CSCD_DESCRIPTORS.to_be_bytes());
    body[6..8].copy_from_slice(&MAX_SEGMENT_DESCRIPTORS.to_be_bytes());
    body[8..12].copy_from_slice(&MAX_DESCRIPTOR_LIST_BYTES.to_be_bytes());
    // MAXIMUM INLINE DATA LENGTH (bytes 12-15 of the body): 0.
    push_descriptor(&mut page, 0x0004, body);
    // Supported Descriptors (0008h).
    let body = vec![2, BLOCK_TO_BLOCK_SEGMENT, IDENTIFICATION_CSCD];
    push_descriptor(&mut page, 0x0008, body);
    // General Copy Operations (8001h).
    let mut body = vec![0u8; 32];
    body[0..4].copy_from_slice(&u32::from(MAX_CONCURRENT_COPIES).to_be_bytes());
    body[4..8].copy_from_slice(&u32::from(MAX_CONCURRENT_COPIES).to_be_bytes());
    body[8..12].copy_from_slice(&max_segment_bytes(block_size).to_be_bytes());
    body[12] = block_size.max(1).trailing_zeros() as u8;
    push_descriptor(&mut page, 0x8001, body);
    page
}

/// Appends a third-party copy descriptor: type, length, body padded to a multiple of four.
fn push_descriptor(page: &mut Vec<u8>, kind: u16, mut body: Vec<u8>) {
    while !body.len().is_multiple_of(4) {
        body.push(0);
    }
    page.extend_from_slice(&kind.to_be_bytes());
    // Bodies here are a few dozen bytes.
    page.extend_from_slice(&(body.len() as u16).to_be_bytes());
    page.extend_from_slice(&body);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_counts_fit() {
        assert_eq!(transfer_count(0), (0, 0));
        assert_eq!(transfer_count(u64::from(u32::MAX)), (0, u32::MAX));
        assert_eq!(transfer_count(1 << 32), (1, 1 << 22));
        assert_eq!(transfer_count(u64::MAX), (4, (u64::MAX >> 40) as u32));
    }

    #[test]
    fn operating_parameters_layout() {
        let d = operating_parameters(512);
        assert_eq!(be32(&d, 0) as usize, d.len() - 4);
        assert_eq!(crate::field::be16(&d, 8), MAX_CSCD_DESCRIPTORS);
        assert_eq!(crate::field::be16(&d, 10), MAX_SEGMENT_DESCRIPTORS);
        assert_eq!(be32(&d, 12), MAX_DESCRIPTOR_LIST_BYTES);
        assert_eq!(be32(&d, 16), 65535 * 512);
        assert_eq!(d[37], 9);
        assert_eq!(&d[43..], &[2, 0x02, 0xE4]);
    }

    #[test]
    fn third_party_copy_descriptors_are_whole() {
        let p = third_party_copy_page(4096);
        let mut at = 0;
        let mut kinds = Vec::new();
        while at < p.len() {
            let len = usize::from(crate::field::be16(&p, at + 2));
            assert_eq!(len % 4, 0);
            kinds.push(crate::field::be16(&p, at));
            at += 4 + len;
        }
        assert_eq!(at, p.len());
        assert_eq!(kinds, vec![0x0001, 0x0004, 0x0008, 0x8001]);
        // Supported Commands: 83h/00h, 84h/00h and 03h.
        assert_eq!(&p[4..12], &[7, 0x83, 1, 0x00, 0x84, 2, 0x00, 0x03]);
    }
}
