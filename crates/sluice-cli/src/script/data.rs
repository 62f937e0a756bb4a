//! Bytes a script writes and compares: the deterministic pattern, data sources made
//! concrete, comparison with the first difference named, hex dumps, and negotiated keys by
//! their RFC 7143 names.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use bytes::Bytes;
use sluice_initiator::SessionParams;

use super::ast::DataSource;

/// A buffer kept by `read ... into=NAME`: its bytes and where they were read from, so that a
/// pattern can be compared with it.
#[derive(Clone, Debug)]
pub struct Buffer {
    /// The data.
    pub data: Bytes,
    /// LBA of its first byte.
    pub lba: u64,
    /// Block size it was read with.
    pub block_size: u32,
}

/// Named buffers.
pub type Buffers = BTreeMap<String, Buffer>;

/// The pattern byte at `offset` of block `lba` for `seed`: a SplitMix64 output per 8-byte
/// word, so every block and every seed differ, and any sub-range is reproducible alone.
fn pattern_word(seed: u64, lba: u64, word: u64) -> u64 {
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(lba.rotate_left(24) ^ word)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `len` bytes of the pattern starting at block `lba` of `block_size` bytes.
pub fn pattern(seed: u64, lba: u64, block_size: u32, len: usize) -> Vec<u8> {
    let bs = block_size.max(1) as usize;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let block = lba.wrapping_add((out.len() / bs) as u64);
        let in_block = out.len() % bs;
        let word = pattern_word(seed, block, (in_block / 8) as u64).to_le_bytes();
        let take = (8 - in_block % 8).min(bs - in_block).min(len - out.len());
        out.extend_from_slice(&word[in_block % 8..in_block % 8 + take]);
    }
    out
}

/// The bytes `source` stands for at `lba`, `len` long.
pub fn materialize(
    source: &DataSource,
    lba: u64,
    block_size: u32,
    len: usize,
    buffers: &Buffers,
) -> Result<Bytes, String> {
    let exact = |data: Bytes, what: String| {
        if data.len() == len {
            Ok(data)
        } else {
            Err(format!(
                "{what} holds {} bytes; the command moves {len}",
                data.len()
            ))
        }
    };
    match source {
        DataSource::Byte(b) => Ok(Bytes::from(vec![*b; len])),
        DataSource::Pattern(seed) => Ok(Bytes::from(pattern(*seed, lba, block_size, len))),
        DataSource::File(path) => {
            let data =
                std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
            exact(Bytes::from(data), format!("file {}", path.display()))
        }
        DataSource::Buffer(name) => {
            let b = buffers
                .get(name)
                .ok_or_else(|| format!("no buffer named {name} (read ... into={name} first)"))?;
            exact(b.data.clone(), format!("buffer {name}"))
        }
    }
}

/// `None` when equal; else where and how `got` first differs from `want`.
pub fn first_difference(got: &[u8], want: &[u8], block_size: u32) -> Option<String> {
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        let bs = block_size.max(1) as usize;
        return Some(format!(
            "byte {i} (block +{}, offset {}) is {:#04x}, expected {:#04x}",
            i / bs,
            i % bs,
            got[i],
            want[i]
        ));
    }
    (got.len() != want.len()).then(|| format!("{} bytes, expected {}", got.len(), want.len()))
}

/// A hex dump: offset, 16 bytes in hex, the printable ones as text.
pub fn hex_dump(data: &[u8]) -> String {
    let mut out = String::new();
    for (row, chunk) in data.chunks(16).enumerate() {
        let _ = write!(out, "{:08x} ", row * 16);
        for b in chunk {
            let _ = write!(out, " {b:02x}");
        }
        for _ in chunk.len()..16 {
            out.push_str("   ");
        }
        out.push_str("  |");
        out.extend(chunk.iter().map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        }));
        out.push_str("|\n");
    }
    out
}

/// The keys [`negotiated`] reports, in RFC 7143 section 13 order.
pub const NEGOTIATED_KEYS: &[&str] = &[
    "HeaderDigest",
    "DataDigest",
    "MaxConnections",
    "InitialR2T",
    "ImmediateData",
    "MaxRecvDataSegmentLength",
    "MaxXmitDataSegmentLength",
    "MaxBurstLength",
    "FirstBurstLength",
    "DefaultTime2Wait",
    "DefaultTime2Retain",
    "MaxOutstandingR2T",
    "DataPDUInOrder",
    "DataSequenceInOrder",
    "ErrorRecoveryLevel",
];

/// A negotiated key's value as the RFC writes it (`Yes`, `CRC32C`, `65536`).
/// MaxRecvDataSegmentLength is the initiator's own (what the target may send it);
/// MaxXmitDataSegmentLength the target's (what the initiator may send).
pub fn negotiated(p: &SessionParams, key: &str) -> Option<String> {
    let yes = |b: bool| if b { "Yes" } else { "No" }.to_owned();
    let digest = |b: bool| if b { "CRC32C" } else { "None" }.to_owned();
    Some(match key {
        "HeaderDigest" => digest(p.header_digest),
        "DataDigest" => digest(p.data_digest),
        "MaxConnections" => p.max_connections.to_string(),
        "InitialR2T" => yes(p.initial_r2t),
        "ImmediateData" => yes(p.immediate_data),
        "MaxRecvDataSegmentLength" => p.initiator_max_recv_data_segment_length.to_string(),
        "MaxXmitDataSegmentLength" => p.target_max_recv_data_segment_length.to_string(),
        "MaxBurstLength" => p.max_burst_length.to_string(),
        "FirstBurstLength" => p.first_burst_length.to_string(),
        "DefaultTime2Wait" => p.default_time2wait.to_string(),
        "DefaultTime2Retain" => p.default_time2retain.to_string(),
        "MaxOutstandingR2T" => p.max_outstanding_r2t.to_string(),
        "DataPDUInOrder" => yes(p.data_pdu_in_order),
        "DataSequenceInOrder" => yes(p.data_sequence_in_order),
        "ErrorRecoveryLevel" => p.error_recovery_level.to_string(),
        _ => return None,
    })
}

/// Whether an expected key value matches the negotiated one: names case-insensitively,
/// numbers by value (`0x10000` is `65536`).
pub fn same_value(got: &str, want: &str) -> bool {
    if got.eq_ignore_ascii_case(want) {
        return true;
    }
    match (
        super::words::number(got, ""),
        super::words::number(want, ""),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_per_block_and_reproducible_in_parts() {
        let whole = pattern(7, 100, 512, 4096);
        assert_eq!(&whole[1024..2048], pattern(7, 102, 512, 1024).as_slice());
        assert_ne!(whole, pattern(8, 100, 512, 4096));
        assert_ne!(&whole[..512], &whole[512..1024]);
        // Odd block sizes and lengths still line up.
        let odd = pattern(1, 0, 520, 1300);
        assert_eq!(&odd[520..1040], pattern(1, 1, 520, 520).as_slice());
        assert_eq!(odd.len(), 1300);
    }

    #[test]
    fn sources_and_differences() {
        let mut buffers = Buffers::new();
        buffers.insert(
            "a".into(),
            Buffer {
                data: Bytes::from_static(b"abcd"),
                lba: 0,
                block_size: 2,
            },
        );
        let b = DataSource::Buffer("a".into());
        assert_eq!(materialize(&b, 0, 2, 4, &buffers).unwrap(), &b"abcd"[..]);
        assert!(materialize(&b, 0, 2, 6, &buffers)
            .unwrap_err()
            .contains("holds 4 bytes"));
        assert!(
            materialize(&DataSource::Buffer("z".into()), 0, 2, 4, &buffers)
                .unwrap_err()
                .contains("no buffer named z")
        );
        assert_eq!(first_difference(b"abcd", b"abcd", 2), None);
        let d = first_difference(b"abXd", b"abcd", 2).unwrap();
        assert!(d.contains("byte 2 (block +1, offset 0)"), "{d}");
        assert!(first_difference(b"ab", b"abc", 2).is_some());
    }

    #[test]
    fn hex_dump_and_keys() {
        let d = hex_dump(b"0123456789abcdefXY\0");
        assert!(d.starts_with("00000000  30 31"), "{d}");
        assert!(d.contains("|XY.|"), "{d}");
        let p = SessionParams::default();
        for k in NEGOTIATED_KEYS {
            assert!(negotiated(&p, k).is_some(), "{k}");
        }
        assert_eq!(negotiated(&p, "InitialR2T").as_deref(), Some("Yes"));
        assert!(same_value("65536", "0x10000"));
        assert!(same_value("CRC32C", "crc32c"));
        assert!(!same_value("Yes", "No"));
    }
}
