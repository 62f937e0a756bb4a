//! CHAP (RFC 1994) as used by iSCSI (RFC 7143 section 12.1.3), one-way and mutual.
//!
//! Response = H(identifier ‖ secret ‖ challenge) (RFC 1994 section 4.1), with H chosen by
//! CHAP_A. RFC 7143 section 12.1.3 takes the algorithm numbers "as defined in \[RFC1994\]", which
//! defines 5, MD5; sluice also accepts 6 SHA-1, 7 SHA-256 and 8 SHA3-256, the numbers Linux's
//! iSCSI target (LIO) and open-iscsi use for them. Binary values travel as `0x` hex or `0b` base64
//! (RFC 7143 section 6.1). Randomness is an input: this crate reads no OS entropy, so callers
//! pass a `FnMut(&mut [u8])` that fills a buffer from a CSPRNG.

use base64::Engine as _;
use subtle::ConstantTimeEq;

use crate::text::KeyId;

/// Longest binary challenge or response accepted from the wire. RFC 7143 section 12.1.3 limits
/// CHAP_C to 1024 bytes.
pub const MAX_BINARY_LEN: usize = 1024;

/// A CHAP digest algorithm (CHAP_A value).
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub enum ChapAlgorithm {
    /// 5: MD5 (RFC 1994; the one every implementation supports).
    Md5,
    /// 6: SHA-1.
    Sha1,
    /// 7: SHA-256.
    Sha256,
    /// 8: SHA3-256.
    Sha3_256,
}

impl ChapAlgorithm {
    /// Every algorithm, in our order of preference as a responder.
    pub const ALL: [ChapAlgorithm; 4] = [Self::Sha3_256, Self::Sha256, Self::Sha1, Self::Md5];

    /// The CHAP_A code.
    pub const fn code(self) -> u8 {
        match self {
            Self::Md5 => 5,
            Self::Sha1 => 6,
            Self::Sha256 => 7,
            Self::Sha3_256 => 8,
        }
    }

    /// Decodes a CHAP_A code.
    pub const fn from_code(code: u64) -> Option<Self> {
        match code {
            5 => Some(Self::Md5),
            6 => Some(Self::Sha1),
            7 => Some(Self::Sha256),
            8 => Some(Self::Sha3_256),
            _ => None,
        }
    }

    /// Length of the digest (and of a valid CHAP_R) in bytes.
    pub const fn digest_len(self) -> usize {
        match self {
            Self::Md5 => 16,
            Self::Sha1 => 20,
            Self::Sha256 | Self::Sha3_256 => 32,
        }
    }

    /// The CHAP response: H(identifier ‖ secret ‖ challenge) (RFC 1994 section 4.1).
    pub fn response(self, identifier: u8, secret: &[u8], challenge: &[u8]) -> Vec<u8> {
        fn run<D: sha2::Digest>(id: u8, secret: &[u8], challenge: &[u8]) -> Vec<u8> {
            let mut h = D::new();
            h.update([id]);
            h.update(secret);
            h.update(challenge);
            h.finalize().to_vec()
        }
        match self {
            Self::Md5 => run::<md5::Md5>(identifier, secret, challenge),
            Self::Sha1 => run::<sha1::Sha1>(identifier, secret, challenge),
            Self::Sha256 => run::<sha2::Sha256>(identifier, secret, challenge),
            Self::Sha3_256 => run::<sha3::Sha3_256>(identifier, secret, challenge),
        }
    }
}

/// A malformed or unacceptable CHAP value.
#[derive(Clone, Copy, Debug, Eq, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ChapError {
    /// Not `0x` hex or `0b` base64, or bad digits.
    #[error("malformed binary value")]
    Encoding,
    /// Empty, or longer than [`MAX_BINARY_LEN`].
    #[error("binary value has an unacceptable length")]
    Length,
    /// CHAP_I is not a number in 0..=255.
    #[error("malformed CHAP_I")]
    Identifier,
    /// No CHAP_A value we support.
    #[error("no supported CHAP algorithm")]
    NoAlgorithm,
}

/// Decodes a binary value: `0x`/`0X` hex or `0b`/`0B` base64 (RFC 7143 section 6.1). A hex
/// string with an odd number of digits has an implied leading zero. The encoded length is
/// checked before decoding so that absurd inputs cost nothing.
pub fn decode_binary(value: &str) -> Result<Vec<u8>, ChapError> {
    if value.len() > 2 + 2 * MAX_BINARY_LEN {
        return Err(ChapError::Length);
    }
    let bytes = if let Some(hex) = value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        decode_hex(hex)?
    } else if let Some(b64) = value
        .strip_prefix("0b")
        .or_else(|| value.strip_prefix("0B"))
    {
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(b64))
            .map_err(|_| ChapError::Encoding)?
    } else {
        return Err(ChapError::Encoding);
    };
    if bytes.is_empty() || bytes.len() > MAX_BINARY_LEN {
        return Err(ChapError::Length);
    }
    Ok(bytes)
}

fn decode_hex(hex: &str) -> Result<Vec<u8>, ChapError> {
    fn nibble(c: u8) -> Result<u8, ChapError> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(ChapError::Encoding),
        }
    }
    let digits = hex.as_bytes();
    let mut out = Vec::with_capacity(digits.len().div_ceil(2));
    let (head, rest) = if digits.len() % 2 == 1 {
        digits.split_at(1)
    } else {
        digits.split_at(0)
    };
    if let Some(&c) = head.first() {
        out.push(nibble(c)?);
    }
    for pair in rest.chunks_exact(2) {
        out.push((nibble(pair[0])? << 4) | nibble(pair[1])?);
    }
    Ok(out)
}

/// Encodes bytes as a `0x` hex binary value (what open-iscsi and Windows send).
pub fn encode_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 + 2 * bytes.len());
    s.push_str("0x");
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// Parses CHAP_I: a decimal or `0x` hex number in 0..=255 (RFC 7143 section 6.1 allows both
/// forms for a numerical value; the Linux LIO target once refused a hex CHAP_I, found by the
/// libiscsi test added in sahlberg/libiscsi pull request 473).
pub fn parse_identifier(value: &str) -> Result<u8, ChapError> {
    KeyId::ChapI
        .parse_number(value)
        .map_err(|_| ChapError::Identifier)
}

/// Picks the first algorithm of a CHAP_A list that is in `supported` (RFC 7143 section
/// 12.1.3: the target answers with the first supported value of the initiator's list).
pub fn select_algorithm(
    list: &str,
    supported: &[ChapAlgorithm],
) -> Result<ChapAlgorithm, ChapError> {
    list.split(',')
        .filter_map(|v| crate::text::keys::parse_number(v).and_then(ChapAlgorithm::from_code))
        .find(|a| supported.contains(a))
        .ok_or(ChapError::NoAlgorithm)
}

/// Constant-time equality of a received response and the expected one.
pub fn responses_equal(expected: &[u8], received: &[u8]) -> bool {
    expected.len() == received.len() && bool::from(expected.ct_eq(received))
}

/// One challenge we issued: verifies the peer's response to it.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct ChapChallenge {
    /// The algorithm (CHAP_A).
    pub algorithm: ChapAlgorithm,
    /// The identifier (CHAP_I).
    pub identifier: u8,
    /// The challenge bytes (CHAP_C).
    pub challenge: Vec<u8>,
}

impl ChapChallenge {
    /// Issues a fresh challenge of `len` bytes (clamped to digest length..=1024) with a random
    /// identifier, both drawn from `random`.
    pub fn issue(algorithm: ChapAlgorithm, len: usize, random: &mut dyn FnMut(&mut [u8])) -> Self {
        let len = len.clamp(algorithm.digest_len(), MAX_BINARY_LEN);
        let mut challenge = vec![0; len];
        random(&mut challenge);
        let mut id = [0u8; 1];
        random(&mut id);
        Self {
            algorithm,
            identifier: id[0],
            challenge,
        }
    }

    /// The keys that carry this challenge: CHAP_A, CHAP_I, CHAP_C.
    pub fn to_pairs(&self) -> Vec<(String, String)> {
        vec![
            KeyId::ChapA.pair(self.algorithm.code().to_string()),
            KeyId::ChapI.pair(self.identifier.to_string()),
            KeyId::ChapC.pair(encode_hex(&self.challenge)),
        ]
    }

    /// Whether `response` (a CHAP_R value) answers this challenge for `secret`. Malformed
    /// values and wrong lengths are simply false; the comparison is constant-time.
    pub fn verify(&self, secret: &[u8], response: &str) -> bool {
        let Ok(received) = decode_binary(response) else {
            return false;
        };
        let expected = self
            .algorithm
            .response(self.identifier, secret, &self.challenge);
        responses_equal(&expected, &received)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_vector_matches_md5sum() {
        // Derived independently:
        //   printf '\x01secretsecret\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10' | md5sum
        //   fa56f1fd495b3f124996421bfddb4980  -
        let challenge: Vec<u8> = (1..=16).collect();
        let r = ChapAlgorithm::Md5.response(1, b"secretsecret", &challenge);
        assert_eq!(encode_hex(&r), MD5_VECTOR);
    }
    const MD5_VECTOR: &str = "0xfa56f1fd495b3f124996421bfddb4980";

    #[test]
    fn digest_lengths() {
        for a in ChapAlgorithm::ALL {
            assert_eq!(a.response(0, b"s", b"c").len(), a.digest_len());
            assert_eq!(ChapAlgorithm::from_code(a.code().into()), Some(a));
        }
        assert_eq!(ChapAlgorithm::from_code(4), None);
    }

    #[test]
    fn binary_encodings() {
        assert_eq!(decode_binary("0x0102ff"), Ok(vec![1, 2, 255]));
        assert_eq!(decode_binary("0XABC"), Ok(vec![0x0a, 0xbc]));
        assert_eq!(decode_binary("0bAQL/"), Ok(vec![1, 2, 255]));
        assert_eq!(decode_binary("0bAQI"), Ok(vec![1, 2]));
        assert_eq!(decode_binary("0x"), Err(ChapError::Length));
        assert_eq!(decode_binary("0xzz"), Err(ChapError::Encoding));
        assert_eq!(decode_binary("1234"), Err(ChapError::Encoding));
        let huge = format!("0x{}", "00".repeat(1025));
        assert_eq!(decode_binary(&huge), Err(ChapError::Length));
        let max = format!("0x{}", "00".repeat(1024));
        assert_eq!(decode_binary(&max).map(|v| v.len()), Ok(1024));
        assert_eq!(decode_binary(&"0b".repeat(5000)), Err(ChapError::Length));
    }

    #[test]
    fn identifier_and_algorithm_selection() {
        assert_eq!(parse_identifier("255"), Ok(255));
        assert_eq!(parse_identifier("0x10"), Ok(16));
        assert_eq!(parse_identifier("256"), Err(ChapError::Identifier));
        assert_eq!(parse_identifier("-1"), Err(ChapError::Identifier));
        let all = ChapAlgorithm::ALL;
        assert_eq!(
            select_algorithm("8,7,6,5", &all),
            Ok(ChapAlgorithm::Sha3_256)
        );
        assert_eq!(select_algorithm("5", &all), Ok(ChapAlgorithm::Md5));
        assert_eq!(select_algorithm("99,x,6", &all), Ok(ChapAlgorithm::Sha1));
        assert_eq!(
            select_algorithm("7", &[ChapAlgorithm::Md5]),
            Err(ChapError::NoAlgorithm)
        );
    }

    #[test]
    fn challenge_round_trip_constant_time_verify() {
        let mut counter = 0u8;
        let mut rng = |buf: &mut [u8]| {
            for b in buf {
                counter = counter.wrapping_add(17);
                *b = counter;
            }
        };
        for a in ChapAlgorithm::ALL {
            let c = ChapChallenge::issue(a, 0, &mut rng);
            assert_eq!(c.challenge.len(), a.digest_len());
            let good = encode_hex(&a.response(c.identifier, b"0123456789ab", &c.challenge));
            assert!(c.verify(b"0123456789ab", &good));
            assert!(!c.verify(b"0123456789ac", &good));
            assert!(!c.verify(b"0123456789ab", "0x00"));
            assert!(!c.verify(b"0123456789ab", "garbage"));
        }
        assert_eq!(
            ChapChallenge::issue(ChapAlgorithm::Md5, 5000, &mut rng)
                .challenge
                .len(),
            1024
        );
    }
}
