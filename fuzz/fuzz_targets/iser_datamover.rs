#![no_main]
//! Feeds arbitrary bytes as received Sends to both iSER datamovers (the target's, and the
//! initiator's with a small in-memory protection domain): each Send is refused with an error
//! or yields PDUs for the core; nothing may panic, and no buffer is read or written out of
//! its bounds.

use std::collections::HashMap;

use bytes::Bytes;
use sluice_proto::iser::{
    BufferAdvertisement, InitiatorDatamover, InitiatorOut, Regions, TargetDatamover,
};

#[derive(Default)]
struct Small {
    next: u32,
    regions: HashMap<u32, Vec<u8>>,
}

impl Small {
    fn insert(&mut self, bytes: Vec<u8>) -> BufferAdvertisement {
        self.next += 1;
        self.regions.insert(self.next, bytes);
        BufferAdvertisement {
            stag: self.next,
            base_offset: 0,
        }
    }
}

impl Regions for Small {
    fn register(&mut self, len: u32) -> Result<BufferAdvertisement, String> {
        if len > 1 << 20 {
            return Err("too large".into());
        }
        Ok(self.insert(vec![0; len as usize]))
    }
    fn register_gathered(&mut self, chunks: Vec<Bytes>) -> Result<BufferAdvertisement, String> {
        let len: usize = chunks.iter().map(Bytes::len).sum();
        if len > 1 << 20 {
            return Err("too large".into());
        }
        Ok(self.insert(chunks.concat()))
    }
    fn contents(&mut self, b: BufferAdvertisement, len: u32) -> Result<Bytes, String> {
        let r = self.regions.get(&b.stag).ok_or("stag")?;
        Ok(Bytes::copy_from_slice(
            r.get(..len as usize).ok_or("bounds")?,
        ))
    }
    fn release(&mut self, b: BufferAdvertisement) {
        self.regions.remove(&b.stag);
    }
}

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    let mut target = TargetDatamover::new(16384, 8192, true, 65536);
    let mut initiator = InitiatorDatamover::new(8192, 65536, 65536);
    let mut regions = Small::default();
    let mut out = InitiatorOut::default();
    // Sends are cut at 0xff bytes, so one input holds several.
    for send in input.split(|b| *b == 0xff) {
        let _ = target.handle_send(send);
        let _ = initiator.handle_send(send, &mut regions, &mut out);
        out.to_core.clear();
    }
});
