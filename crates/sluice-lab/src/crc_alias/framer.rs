//! The measurement on sluice's own code: real Data-In PDUs framed by `sluice_proto` with
//! CRC32C header and data digests, cut into TCP segments, corrupted by bit flips, checked by
//! the TCP checksum and then decoded by `sluice_proto`'s [`Framer`].
//!
//! Corruptions are drawn per stratum (exactly `w` bit flips inside one segment, the segment
//! chosen uniformly), the same conditioning as [`super::tcp`]. For each corrupted stream the
//! run records whether the segment's checksum still passes and what the framer says: header
//! digest mismatch, data digest mismatch, or a PDU accepted (an undetected corruption). The
//! prediction for the checksum is exact for `w = 2` on the bytes actually sent (flips in the
//! same bit column of two different words, one 0 becoming 1 and the other 1 becoming 0); for
//! heavier strata it is the uniform-data share `g_w` of [`super::tcp`]. For CRC32C the
//! prediction is that every corruption of up to 5 bits inside one segment is caught (odd
//! weights always, through the factor `x + 1`; 2-bit patterns need a span of `2^31 - 1`; a
//! 4-bit codeword is one in about `2^32` patterns).

use bytes::{Bytes, BytesMut};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use sluice_proto::framing::{encode, Digests, FrameError, Framer};
use sluice_proto::pdu::codes::ScsiStatus;
use sluice_proto::pdu::{DataIn, Pdu};
use sluice_proto::seq::{Itt, Lun, SeqNum, Ttt};

use super::tcp::{distinct_positions, passes};

/// TCP maximum segment size on a 1500-byte Ethernet path with timestamps.
pub const MSS: usize = 1448;

/// What the data segment holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload {
    /// Uniform random bytes (the study's assumption).
    Random,
    /// sluice's verify pattern ([`crate::fill_pattern`]): structured, like real blocks.
    Pattern,
}

impl Payload {
    /// Name in tables.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Payload::Random => "random",
            Payload::Pattern => "pattern",
        }
    }
}

/// The counts of one stratum of the measurement.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FramerCounts {
    /// Bits flipped per corruption.
    pub w: u64,
    /// Corruptions.
    pub trials: u64,
    /// That passed the TCP checksum.
    pub tcp_passed: u64,
    /// Predicted share passing the checksum.
    pub tcp_predicted: f64,
    /// Of those that passed the checksum: caught by the header digest.
    pub header_caught: u64,
    /// Of those that passed the checksum: caught by the data digest.
    pub data_caught: u64,
    /// Of those that passed the checksum: accepted by the framer (undetected).
    pub undetected: u64,
    /// Of all corruptions (checksum or not): caught by a digest. The study assumed the two
    /// checks independent; this is the digest's own rate.
    pub digest_caught_all: u64,
}

/// A framed Data-In PDU of `data_len` bytes with both digests, as bytes on the wire.
#[must_use]
pub fn framed_data_in(data_len: usize, payload: Payload, seed: u64) -> Vec<u8> {
    let mut data = vec![0u8; data_len];
    match payload {
        Payload::Random => SmallRng::seed_from_u64(seed).fill_bytes(&mut data),
        Payload::Pattern => crate::fill_pattern(&mut data, 0x1234_5000, seed),
    }
    let pdu = Pdu::DataIn(DataIn {
        final_bit: true,
        ack: false,
        overflow: false,
        underflow: false,
        status_present: true,
        status: ScsiStatus::Good,
        lun: Lun(0),
        itt: Itt(0x42),
        ttt: Ttt::RESERVED,
        stat_sn: SeqNum(1000),
        exp_cmd_sn: SeqNum(77),
        max_cmd_sn: SeqNum(140),
        data_sn: 0,
        buffer_offset: 0,
        residual: 0,
        data: Bytes::from(data),
    });
    let mut out = BytesMut::new();
    encode(&pdu, Digests::BOTH, &mut out);
    out.to_vec()
}

/// The exact share of 2-bit corruptions of `seg` (a whole number of 16-bit words) that leave
/// its ones'-complement sum unchanged.
#[must_use]
pub fn two_flip_share_of(seg: &[u8]) -> f64 {
    let words = seg.len() / 2;
    let mut ones = [0u64; 16];
    for c in seg.chunks(2) {
        let v = u16::from_be_bytes([c[0], c[1]]);
        for (k, o) in ones.iter_mut().enumerate() {
            *o += u64::from((v >> k) & 1);
        }
    }
    let pairs: u64 = ones.iter().map(|&o| o * (words as u64 - o)).sum();
    let bits = 16 * words as u64;
    pairs as f64 / (bits * (bits - 1) / 2) as f64
}

/// What the framer made of a stream.
enum Verdict {
    Header,
    Data,
    Accepted,
}

fn decode(stream: &[u8], max_data: u32) -> Verdict {
    let mut framer = Framer::new(max_data);
    framer.set_digests(Digests::BOTH);
    let mut buf = BytesMut::from(stream);
    match framer.decode(&mut buf) {
        Err(FrameError::HeaderDigest { .. } | FrameError::HeaderDigestSkipped { .. }) => {
            Verdict::Header
        }
        Err(FrameError::DataDigest { .. }) => Verdict::Data,
        // A header digest in force checks the header before any field is trusted, so other
        // outcomes mean the corruption was not seen by a digest.
        _ => Verdict::Accepted,
    }
}

/// Runs `trials` corruptions of exactly `w` bits on PDUs with `data_len` data bytes.
/// `g_uniform` is the uniform-data checksum pass share for `w` (used as the prediction for
/// `w > 2`).
#[must_use]
pub fn measure(
    data_len: usize,
    payload: Payload,
    w: usize,
    trials: u64,
    g_uniform: f64,
    seed: u64,
) -> FramerCounts {
    let stream = framed_data_in(data_len, payload, seed);
    // Segments, each followed by its checksum word (the pseudo-header and TCP header are
    // constant and add nothing to the comparison).
    let segs: Vec<Vec<u8>> = stream
        .chunks(MSS)
        .map(|c| {
            let mut s = c.to_vec();
            s.extend(super::tcp::checksum(c));
            s
        })
        .collect();
    debug_assert!(segs.iter().all(|s| passes(s) && s.len() % 2 == 0));
    let tcp_predicted = if w == 2 {
        segs.iter()
            .map(|s| two_flip_share_of(&s[..s.len() - 2]))
            .sum::<f64>()
            / segs.len() as f64
    } else {
        g_uniform
    };
    let max_data = u32::try_from(data_len).unwrap_or(u32::MAX);
    let mut rng = SmallRng::seed_from_u64(seed.wrapping_mul(31).wrapping_add(w as u64));
    let mut counts = FramerCounts {
        w: w as u64,
        trials,
        tcp_predicted,
        ..FramerCounts::default()
    };
    let mut pos = Vec::new();
    let mut corrupted = stream.clone();
    for _ in 0..trials {
        let k = rng.gen_range(0..segs.len());
        let start = k * MSS;
        let payload_len = segs[k].len() - 2;
        distinct_positions(&mut rng, payload_len * 8, w, &mut pos);
        let mut seg = segs[k].clone();
        for &b in &pos {
            seg[b / 8] ^= 0x80 >> (b % 8);
            corrupted[start + b / 8] ^= 0x80 >> (b % 8);
        }
        let tcp_ok = passes(&seg);
        let verdict = decode(&corrupted, max_data);
        for &b in &pos {
            corrupted[start + b / 8] ^= 0x80 >> (b % 8);
        }
        let caught = !matches!(verdict, Verdict::Accepted);
        counts.digest_caught_all += u64::from(caught);
        if tcp_ok {
            counts.tcp_passed += 1;
            match verdict {
                Verdict::Header => counts.header_caught += 1,
                Verdict::Data => counts.data_caught += 1,
                Verdict::Accepted => counts.undetected += 1,
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_uncorrupted_stream_decodes_and_every_segment_passes() {
        let s = framed_data_in(8192, Payload::Random, 3);
        assert_eq!(s.len(), 48 + 4 + 8192 + 4);
        let mut framer = Framer::new(8192);
        framer.set_digests(Digests::BOTH);
        let mut buf = BytesMut::from(&s[..]);
        assert!(matches!(framer.decode(&mut buf), Ok(Some(Pdu::DataIn(_)))));
    }

    #[test]
    fn two_flip_share_of_random_words_is_near_the_uniform_closed_form() {
        let s = framed_data_in(8192, Payload::Random, 5);
        let g = two_flip_share_of(&s[1000..1000 + MSS]);
        let uniform = super::super::tcp::two_flip_pass_share((MSS / 2) as u64);
        assert!((g / uniform - 1.0).abs() < 0.05, "{g} {uniform}");
    }

    #[test]
    fn corruptions_that_pass_the_checksum_are_caught_by_the_digests() {
        let c = measure(8192, Payload::Random, 2, 3_000, 0.0, 11);
        assert!(c.tcp_passed > 30, "{c:?}");
        assert_eq!(c.undetected, 0);
        assert_eq!(c.header_caught + c.data_caught, c.tcp_passed);
        assert_eq!(c.digest_caught_all, c.trials);
        let sd = (c.tcp_predicted * c.trials as f64).sqrt();
        assert!((c.tcp_passed as f64 - c.tcp_predicted * c.trials as f64).abs() < 5.0 * sd);
    }
}
