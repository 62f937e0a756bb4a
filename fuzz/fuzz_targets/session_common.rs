//! Shared helpers of the session fuzz targets (`target_session`, `initiator_session`): a byte
//! reader, PDUs built from fuzz bytes and framed as a peer would send them, the round-trip
//! check of every PDU a session sends, and the negotiated values drawn from the input.

use bytes::{Bytes, BytesMut};
use sluice_proto::framing::{encode, Digests, FrameError, Framer};
use sluice_proto::params::SessionParams;
use sluice_proto::pdu::{Pdu, BHS_LEN};

/// Reads the fuzz input; yields zeros once exhausted.
pub struct Reader<'a>(pub &'a [u8]);

impl Reader<'_> {
    pub fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    /// The index of one of `gone.len()` connections (at least one): mostly one that is not
    /// gone, sometimes any.
    pub fn pick(&mut self, gone: &[bool]) -> usize {
        let b = self.byte();
        let present: Vec<usize> = (0..gone.len()).filter(|&i| !gone[i]).collect();
        if b >= 0xe0 || present.is_empty() {
            usize::from(b) % gone.len()
        } else {
            present[usize::from(b) % present.len()]
        }
    }

    /// Fills `out` from the input (zeros once it is exhausted).
    pub fn fill(&mut self, out: &mut [u8]) {
        let n = out.len().min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        out[n..].fill(0);
        self.0 = &self.0[n..];
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A header of 48 bytes: the first word always from the input, each of the other eleven
    /// words (bytes 4..48) from the input when its bit of a 16-bit mask is set, else zero. So
    /// every field value is reachable, and short inputs still make PDUs.
    pub fn header(&mut self) -> [u8; BHS_LEN] {
        let mut h = [0u8; BHS_LEN];
        self.fill(&mut h[..4]);
        let mask = self.u16();
        for word in 1..12 {
            if mask & (1 << word) != 0 {
                self.fill(&mut h[word * 4..word * 4 + 4]);
            }
        }
        h
    }

    /// A data segment: up to 127 bytes from the input, or a multiple of 512 bytes (up to
    /// 64 KiB) of one repeated byte, so that large segments cost the input two bytes.
    pub fn data(&mut self) -> Vec<u8> {
        let selector = self.byte();
        if selector < 128 {
            let mut data = vec![0u8; usize::from(selector)];
            self.fill(&mut data);
            data
        } else {
            let fill = self.byte();
            vec![fill; usize::from(selector - 127) * 512]
        }
    }

    /// Key=value text from a dictionary (and raw bytes now and then), NUL-terminated pairs.
    pub fn text(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        for _ in 0..self.byte() % 4 {
            let pick = usize::from(self.byte());
            if pick % 16 == 15 {
                let mut raw = vec![0u8; usize::from(self.byte() % 16)];
                self.fill(&mut raw);
                out.extend_from_slice(&raw);
            } else {
                out.extend_from_slice(TEXT[pick % TEXT.len()].as_bytes());
                out.push(0);
            }
        }
        out
    }

    /// Operational values as a login could have settled them (RFC 7143 section 13 ranges),
    /// every ErrorRecoveryLevel, over TCP or in RDMA mode.
    pub fn params(&mut self) -> SessionParams {
        let flags = self.byte();
        let error_recovery_level = self.byte() % 3;
        let max_burst_length = self.length();
        let first_burst_length = self.length().min(max_burst_length);
        SessionParams {
            header_digest: flags & 1 != 0,
            data_digest: flags & 2 != 0,
            max_connections: 4,
            initial_r2t: flags & 4 != 0,
            immediate_data: flags & 8 != 0,
            initiator_max_recv_data_segment_length: self.length(),
            target_max_recv_data_segment_length: self.length(),
            max_burst_length,
            first_burst_length,
            default_time2wait: 2,
            default_time2retain: 20,
            max_outstanding_r2t: [1, 1, 2, 4, 16, 65535][usize::from(flags >> 4) % 6],
            data_pdu_in_order: flags & 0x40 == 0,
            data_sequence_in_order: flags & 0x80 == 0,
            error_recovery_level,
            // An initiator connection in RDMA mode (iSER) answers R2Ts with one Data-Out.
            solicited_data_by_rdma: self.byte() & 1 != 0,
        }
    }

    /// A segment or burst length: 512 bytes to 16 MiB - 1 (RFC 7143 sections 13.12-13.14).
    fn length(&mut self) -> u32 {
        const LENGTHS: [u32; 8] = [512, 1024, 4096, 8192, 8192, 65536, 262_144, 16_777_215];
        LENGTHS[usize::from(self.byte()) % LENGTHS.len()]
    }
}

/// Text fragments for Text Requests and Responses.
const TEXT: &[&str] = &[
    "SendTargets=All",
    "SendTargets=",
    "SendTargets=iqn.2026-11.io.sluice:fuzz",
    "MaxRecvDataSegmentLength=4096",
    "HeaderDigest=None",
    "MaxBurstLength=Reject",
    "X-com.example.foo=1",
    "X#vendor=2",
    "TargetName=iqn.2026-11.io.sluice:fuzz",
    "TargetAddress=127.0.0.1:3260,1",
    "NoEqualsSign",
    "=value",
    "Unknown=?",
];

/// Frames one PDU as a peer sends it: `header` with TotalAHSLength and DataSegmentLength set
/// from `ahs` and `data`, padded. Decoded by a framer limited to `max_segment` (the receiver's
/// MaxRecvDataSegmentLength), as the driver would: a PDU, or the error the framer reports.
pub fn frame(
    mut header: [u8; BHS_LEN],
    ahs: &[u8],
    data: &[u8],
    max_segment: u32,
) -> Result<Pdu, FrameError> {
    header[4] = (ahs.len() / 4) as u8;
    let len = (data.len() as u32).to_be_bytes();
    header[5..8].copy_from_slice(&len[1..]);
    let mut buf = BytesMut::with_capacity(BHS_LEN + ahs.len() + data.len() + 3);
    buf.extend_from_slice(&header);
    buf.extend_from_slice(&ahs[..ahs.len() / 4 * 4]);
    buf.extend_from_slice(data);
    buf.resize(buf.len() + (4 - data.len() % 4) % 4, 0);
    let mut framer = Framer::new(max_segment);
    match framer.decode(&mut buf) {
        Ok(Some(pdu)) => {
            assert!(buf.is_empty(), "the framer left bytes of a whole PDU");
            Ok(pdu)
        }
        Ok(None) => panic!("the framer wants more bytes of a whole PDU"),
        Err(e) => Err(e),
    }
}

/// Every PDU a session sends must encode and decode back to itself through a framer limited to
/// the peer's MaxRecvDataSegmentLength, with the connection's digests.
pub fn round_trip(pdu: &Pdu, params: &SessionParams, peer_max_segment: u32) {
    let digests = Digests::negotiated(params);
    let mut buf = BytesMut::new();
    encode(pdu, digests, &mut buf);
    let mut framer = Framer::new(peer_max_segment);
    framer.set_digests(digests);
    match framer.decode(&mut buf) {
        Ok(Some(back)) => {
            assert!(
                &back == pdu,
                "a sent PDU parses back as another:\n{}\n{}",
                brief(pdu),
                brief(&back)
            );
            assert!(buf.is_empty(), "bytes left after a sent PDU");
        }
        Ok(None) => panic!("a sent PDU does not frame whole: {}", brief(pdu)),
        Err(e) => panic!("a sent PDU does not frame: {e}: {}", brief(pdu)),
    }
}

/// A PDU's debug form with its data segment cut short (they can be 16 MiB).
pub fn brief(pdu: &Pdu) -> String {
    let text = format!("{pdu:?}");
    match text.char_indices().nth(600) {
        Some((at, _)) => format!("{}... ({} data bytes)", &text[..at], pdu.data().len()),
        None => text,
    }
}

/// Zero bytes for data segments and SCSI data, shared rather than allocated.
pub static ZEROS: [u8; 65536] = [0; 65536];

/// `len` zero bytes (at most 64 KiB).
pub fn zeros(len: usize) -> Bytes {
    Bytes::from_static(&ZEROS[..len.min(ZEROS.len())])
}
