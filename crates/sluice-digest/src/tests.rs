//! Cross-implementation tests: RFC vectors for every path, exhaustive short lengths and
//! alignments, property tests, and the `crc32c` crate as an independent oracle.

use proptest::prelude::*;

use crate::{crc32c, finalize, from_wire, to_wire, Algorithm, Crc32c, INITIAL_STATE};

/// RFC 3720 Appendix B.4, "CRC Examples": input and the digest bytes as they go on the wire.
fn rfc3720_b4_vectors() -> Vec<(&'static str, Vec<u8>, [u8; 4])> {
    crate::vectors::rfc3720_b4()
        .into_iter()
        .map(|v| (v.name, v.input, v.wire))
        .collect()
}

/// Every way this crate can compute a digest, as (label, result).
fn all_ways(data: &[u8]) -> Vec<(String, u32)> {
    let mut out = vec![("crc32c()".to_owned(), crc32c(data))];
    for alg in Algorithm::ALL {
        out.push((format!("{alg}.checksum"), alg.checksum(data)));
        out.push((
            format!("{alg}.update"),
            finalize(alg.update(INITIAL_STATE, data)),
        ));
        let mut stream = Crc32c::with_algorithm(alg);
        stream.update(data);
        out.push((format!("Crc32c<{alg}>"), stream.finish()));
    }
    out
}

#[test]
fn rfc3720_b4_vectors_on_every_path() {
    for (name, data, wire) in rfc3720_b4_vectors() {
        for (how, crc) in all_ways(&data) {
            assert_eq!(to_wire(crc), wire, "{name} via {how}");
            assert_eq!(crc, from_wire(wire), "{name} via {how}");
        }
        assert_eq!(
            to_wire(crc32c::crc32c(&data)),
            wire,
            "{name}: oracle disagrees with the RFC"
        );
    }
}

#[test]
fn rfc3720_b4_vectors_streamed_byte_by_byte() {
    for (name, data, wire) in rfc3720_b4_vectors() {
        for alg in Algorithm::ALL {
            let mut stream = Crc32c::with_algorithm(alg);
            for byte in &data {
                stream.update(std::slice::from_ref(byte));
            }
            assert_eq!(to_wire(stream.finish()), wire, "{name} via {alg}");
        }
    }
}

#[test]
fn a_received_pdu_with_its_digest_leaves_the_magic_residue() {
    // Running the digest through the CRC after the data leaves a fixed register, the check a
    // hardware receiver makes. The IPS working group (2001) gave it MSB-first as 0x1c2d19ed;
    // our register is bit-reflected, so it reads 0xB798B438 here.
    for (_, mut data, wire) in rfc3720_b4_vectors() {
        data.extend_from_slice(&wire);
        for alg in Algorithm::ALL {
            assert_eq!(alg.update(INITIAL_STATE, &data), 0xB798_B438, "{alg}");
        }
    }
}

#[test]
fn every_length_and_alignment_agrees() {
    // 64 + 8 bytes of a non-repeating pattern, so a misplaced byte changes the result.
    let buf: Vec<u8> = (0..72u32).map(|i| (i * 37 + 11) as u8).collect();
    for offset in 0..8 {
        for len in 0..=64 {
            let data = &buf[offset..offset + len];
            let expected = crc32c::crc32c(data);
            for (how, crc) in all_ways(data) {
                assert_eq!(crc, expected, "offset {offset} len {len} via {how}");
            }
        }
    }
}

#[test]
fn registers_can_change_hands_between_implementations() {
    // The three `update`s share one register convention; prove it by passing the register
    // round the implementations, a few bytes each.
    let data: Vec<u8> = (0..=255).collect();
    let mut state = INITIAL_STATE;
    for (i, piece) in data.chunks(13).enumerate() {
        state = Algorithm::ALL[i % 3].update(state, piece);
    }
    assert_eq!(finalize(state), crc32c::crc32c(&data));
}

#[test]
fn large_inputs_agree() {
    // Exercise the hardware path's wide folding loops, which only start past a few hundred
    // bytes, and a length that is not a multiple of any fold width.
    let data: Vec<u8> = (0..(1 << 20) + 13)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let expected = crc32c::crc32c(&data);
    for (how, crc) in all_ways(&data) {
        assert_eq!(crc, expected, "via {how}");
    }
}

proptest! {
    #[test]
    fn implementations_agree(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let expected = crc32c::crc32c(&data);
        for (how, crc) in all_ways(&data) {
            prop_assert_eq!(crc, expected, "via {}", how);
        }
    }

    #[test]
    fn any_split_streams_to_the_one_shot_result(
        data in proptest::collection::vec(any::<u8>(), 0..4096),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        // Cut the input at up to eight random points (empty pieces allowed) and stream it.
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(data.len() + 1)).collect();
        points.push(0);
        points.push(data.len());
        points.sort_unstable();
        let one_shot = crc32c(&data);
        for alg in Algorithm::ALL {
            let mut stream = Crc32c::with_algorithm(alg);
            for pair in points.windows(2) {
                stream.update(&data[pair[0]..pair[1]]);
            }
            prop_assert_eq!(stream.finish(), one_shot, "via {}", alg);
        }
    }
}
