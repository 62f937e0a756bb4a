//! Combining CRCs: the CRC32C of `A || B` from `crc32c(A)`, `crc32c(B)` and the length of `B`,
//! without touching the bytes again.
//!
//! A CRC is the remainder of the message polynomial modulo the generator, so appending `n`
//! bytes multiplies the first part's contribution by `x^(8n)` modulo the generator; the
//! initial and final complements cancel out between the two digests, which is why the
//! combination needs only that multiplication and an exclusive or. All arithmetic here is in
//! the bit-reflected domain the digest itself uses (bit 31 is the coefficient of `x^0`).

use crate::POLY_REFLECTED;

/// `x^0` in the reflected representation.
const ONE: u32 = 1 << 31;

/// `a * b mod P`, both reflected.
fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut m = ONE;
    while m != 0 {
        if a & m != 0 {
            product ^= b;
        }
        m >>= 1;
        // b *= x (mod P): one bit towards higher powers is one bit right when reflected.
        b = if b & 1 != 0 {
            (b >> 1) ^ POLY_REFLECTED
        } else {
            b >> 1
        };
    }
    product
}

/// `x^(8 * len) mod P`, reflected: the factor that appending `len` bytes applies.
fn x_pow_8n(len: u64) -> u32 {
    let mut result = ONE;
    // square: x^(8 * 2^k), starting at x^8.
    let mut square = ONE >> 8;
    let mut n = len;
    while n != 0 {
        if n & 1 != 0 {
            result = mul_mod(square, result);
        }
        square = mul_mod(square, square);
        n >>= 1;
    }
    result
}

/// The CRC32C of `A || B`, given `crc_a = crc32c(A)`, `crc_b = crc32c(B)` and `len_b = B.len()`.
#[must_use]
pub fn combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    mul_mod(x_pow_8n(len_b), crc_a) ^ crc_b
}

/// [`combine`] for one fixed length, precomputed: a few table lookups per call, for joining
/// many pieces of the same size (e.g. per-block CRCs of a large buffer).
#[derive(Clone)]
pub struct Appender {
    len: u64,
    /// `table[i][b]` = the factor applied to byte `i` of a CRC whose value there is `b`.
    table: Box<[[u32; 256]; 4]>,
}

impl Appender {
    /// Prepares [`append`](Self::append) for pieces of `len` bytes.
    #[must_use]
    pub fn new(len: u64) -> Self {
        let factor = x_pow_8n(len);
        let mut table = Box::new([[0u32; 256]; 4]);
        for (i, row) in table.iter_mut().enumerate() {
            for (b, slot) in row.iter_mut().enumerate() {
                // Multiplication by a constant is linear over GF(2): tabulate it per byte.
                *slot = mul_mod(factor, (b as u32) << (8 * i));
            }
        }
        Self { len, table }
    }

    /// The length this appender joins.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it joins empty pieces (then [`append`](Self::append) is a plain exclusive or).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `combine(crc_a, crc_b, self.len())`.
    #[must_use]
    pub fn append(&self, crc_a: u32, crc_b: u32) -> u32 {
        let t = &self.table;
        let shifted = t[0][(crc_a & 0xff) as usize]
            ^ t[1][((crc_a >> 8) & 0xff) as usize]
            ^ t[2][((crc_a >> 16) & 0xff) as usize]
            ^ t[3][(crc_a >> 24) as usize];
        shifted ^ crc_b
    }
}

impl std::fmt::Debug for Appender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Appender").field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crc32c;
    use proptest::prelude::*;

    #[test]
    fn known_split_of_the_rfc_vector() {
        // RFC 3720 B.4: 32 bytes of zeros digest to 0x8a9136aa.
        let zeros = [0u8; 32];
        let whole = crc32c(&zeros);
        assert_eq!(whole, 0x8a91_36aa);
        assert_eq!(combine(crc32c(&zeros[..5]), crc32c(&zeros[5..]), 27), whole);
        assert_eq!(combine(whole, crc32c(&[]), 0), whole);
        assert_eq!(combine(crc32c(&[]), whole, 32), whole);
    }

    proptest! {
        #[test]
        fn combine_equals_the_crc_of_the_concatenation(
            a in proptest::collection::vec(any::<u8>(), 0..600),
            b in proptest::collection::vec(any::<u8>(), 0..600),
        ) {
            let mut ab = a.clone();
            ab.extend_from_slice(&b);
            prop_assert_eq!(combine(crc32c(&a), crc32c(&b), b.len() as u64), crc32c(&ab));
            let app = Appender::new(b.len() as u64);
            prop_assert_eq!(app.append(crc32c(&a), crc32c(&b)), crc32c(&ab));
        }

        #[test]
        fn appending_blocks_one_by_one_equals_the_whole(
            data in proptest::collection::vec(any::<u8>(), 0..8 * 64),
        ) {
            let app = Appender::new(64);
            let mut chunks = data.chunks(64);
            let mut crc = crc32c(chunks.next().unwrap_or(&[]));
            let mut tail = None;
            for c in chunks {
                if c.len() == 64 {
                    crc = app.append(crc, crc32c(c));
                } else {
                    tail = Some(c);
                }
            }
            if let Some(t) = tail {
                crc = combine(crc, crc32c(t), t.len() as u64);
            }
            prop_assert_eq!(crc, crc32c(&data));
        }
    }
}
