//! The `key=value\0` text format (RFC 7143 section 6.1) with limits, reassembly of text split
//! over PDUs with the C bit (sections 11.10.2, 11.12.2) and splitting of outgoing text.
//!
//! Everything here is bounded: key names, values, the number of pairs and the total size of
//! reassembled text all have hard caps ([`TextLimits`]), so a peer can make us neither allocate
//! without limit nor loop.

use bytes::{Bytes, BytesMut};

/// Hard limits applied to text received from the peer.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct TextLimits {
    /// Longest key name in bytes. RFC 7143 section 6.1: "The maximum length of a key-name is 63
    /// bytes."
    pub max_key_len: usize,
    /// Longest value in bytes (encoded form). Binary CHAP values may legitimately be
    /// 1024 bytes (section 12.1.3), i.e. 2050 characters as hex; 8192 leaves room for all keys.
    pub max_value_len: usize,
    /// Most pairs accepted in one text block (one negotiation step).
    pub max_pairs: usize,
    /// Most bytes accepted for text reassembled from PDUs with the C bit.
    pub max_total_len: usize,
}

impl TextLimits {
    /// Limits for login and operational text. RFC 7143 section 6.1 requires support for at
    /// least 8192 bytes of key=value data in a negotiation sequence; we accept eight times that.
    pub const LOGIN: TextLimits = TextLimits {
        max_key_len: 63,
        max_value_len: 8192,
        max_pairs: 256,
        max_total_len: 65_536,
    };

    /// Limits for SendTargets responses, which list many targets and addresses.
    pub const DISCOVERY: TextLimits = TextLimits {
        max_key_len: 63,
        max_value_len: 8192,
        max_pairs: 16_384,
        max_total_len: 1 << 20,
    };
}

impl Default for TextLimits {
    fn default() -> Self {
        Self::LOGIN
    }
}

/// Malformed or oversized text from the peer.
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TextError {
    /// A pair had no `=`.
    #[error("text pair without '='")]
    MissingEquals,
    /// Empty key name, or a character outside the RFC 7143 section 6.1 key-name alphabet.
    #[error("invalid key name")]
    BadKey,
    /// The key name is longer than [`TextLimits::max_key_len`].
    #[error("key name of {0} bytes is too long")]
    KeyTooLong(usize),
    /// A value is longer than [`TextLimits::max_value_len`].
    #[error("value of key {key} is {len} bytes, too long")]
    ValueTooLong {
        /// The key.
        key: String,
        /// The value length.
        len: usize,
    },
    /// The text is not UTF-8 (RFC 7143 section 6.1: "text is UTF-8").
    #[error("text is not UTF-8")]
    BadUtf8,
    /// More pairs than [`TextLimits::max_pairs`].
    #[error("more than {0} key=value pairs")]
    TooManyPairs(usize),
    /// Reassembled text exceeds [`TextLimits::max_total_len`].
    #[error("text exceeds {0} bytes")]
    TooLong(usize),
}

/// Parses a complete text block into `(key, value)` pairs, in order.
///
/// Empty items (runs of NULs, e.g. from padding) are skipped, and the last pair may lack its
/// terminating NUL (tolerated, although RFC 7143 section 6.1 says every pair "MUST be followed
/// by one null (0x00) delimiter"). Duplicate keys are returned as they are: detecting them is
/// the negotiator's job because some keys (TargetAddress) may repeat.
pub fn parse_pairs(data: &[u8], limits: &TextLimits) -> Result<Vec<(String, String)>, TextError> {
    if data.len() > limits.max_total_len {
        return Err(TextError::TooLong(limits.max_total_len));
    }
    let mut pairs = Vec::new();
    for item in data.split(|&b| b == 0) {
        if item.is_empty() {
            continue;
        }
        if pairs.len() >= limits.max_pairs {
            return Err(TextError::TooManyPairs(limits.max_pairs));
        }
        let eq = item
            .iter()
            .position(|&b| b == b'=')
            .ok_or(TextError::MissingEquals)?;
        let (key, value) = (&item[..eq], &item[eq + 1..]);
        check_key(key, limits)?;
        let key = std::str::from_utf8(key).map_err(|_| TextError::BadUtf8)?;
        if value.len() > limits.max_value_len {
            return Err(TextError::ValueTooLong {
                key: key.to_owned(),
                len: value.len(),
            });
        }
        let value = std::str::from_utf8(value).map_err(|_| TextError::BadUtf8)?;
        pairs.push((key.to_owned(), value.to_owned()));
    }
    Ok(pairs)
}

/// RFC 7143 section 6.1: key names are letters, digits, `.`, `-`, `+`, `@`, `_`; extension keys
/// start with `X-` or `X#` (section 13.22, 13.26).
fn check_key(key: &[u8], limits: &TextLimits) -> Result<(), TextError> {
    if key.is_empty() {
        return Err(TextError::BadKey);
    }
    if key.len() > limits.max_key_len {
        return Err(TextError::KeyTooLong(key.len()));
    }
    let ok = key.iter().all(|&b| {
        b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+' | b'@' | b'_' | b'#')
    });
    if ok {
        Ok(())
    } else {
        Err(TextError::BadKey)
    }
}

/// Encodes pairs as `key=value\0` for each pair.
pub fn encode_pairs<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)]) -> Bytes {
    let mut out = BytesMut::new();
    for (k, v) in pairs {
        out.extend_from_slice(k.as_ref().as_bytes());
        out.extend_from_slice(b"=");
        out.extend_from_slice(v.as_ref().as_bytes());
        out.extend_from_slice(&[0]);
    }
    out.freeze()
}

/// Splits outgoing text into chunks of at most `max_len` bytes (at least 1).
///
/// Returns `(chunk, cont)` where `cont` is the C bit: set on every chunk but the last (RFC 7143
/// section 11.12.2 / 11.10.2). A pair may be cut in the middle; the receiver reassembles before
/// parsing. Empty text yields one empty chunk with C=0.
pub fn split_text(text: &Bytes, max_len: usize) -> Vec<(Bytes, bool)> {
    let max_len = max_len.max(1);
    if text.is_empty() {
        return vec![(Bytes::new(), false)];
    }
    let mut chunks = Vec::with_capacity(text.len().div_ceil(max_len));
    let mut start = 0;
    while start < text.len() {
        let end = (start + max_len).min(text.len());
        chunks.push((text.slice(start..end), end < text.len()));
        start = end;
    }
    chunks
}

/// Reassembles text whose PDUs carry the C bit, with a hard cap on the total size.
///
/// Feed the data of every PDU with [`push`](Self::push); when a PDU arrives with C=0 the
/// returned value is the complete text. RFC 7143 section 11.12.2: "When set to 1, this bit
/// indicates that the text (set of key=value pairs) in this Login Request is not complete (it
/// will be continued on subsequent Login Requests); otherwise, it indicates that this Login
/// Request ends a set of key=value pairs."
#[derive(Debug, Default)]
pub struct TextAssembler {
    buf: BytesMut,
    max_total_len: usize,
    failed: bool,
}

impl TextAssembler {
    /// A new assembler refusing text longer than `max_total_len` bytes.
    pub fn new(max_total_len: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            max_total_len,
            failed: false,
        }
    }

    /// Adds one PDU's data. Returns `Ok(None)` while `cont` is set, `Ok(Some(text))` with the
    /// whole text (and resets) when `cont` is clear, and an error once the cap is exceeded (the
    /// assembler then stays failed).
    pub fn push(&mut self, data: &[u8], cont: bool) -> Result<Option<Bytes>, TextError> {
        if self.failed || self.buf.len().saturating_add(data.len()) > self.max_total_len {
            self.failed = true;
            self.buf.clear();
            return Err(TextError::TooLong(self.max_total_len));
        }
        self.buf.extend_from_slice(data);
        if cont {
            Ok(None)
        } else {
            Ok(Some(std::mem::take(&mut self.buf).freeze()))
        }
    }

    /// Whether text is partially assembled (a PDU with C=1 was the last one seen).
    pub fn is_pending(&self) -> bool {
        !self.buf.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_encodes_round_trip() {
        let text = encode_pairs(&[
            ("InitiatorName", "iqn.a:b"),
            ("HeaderDigest", "None,CRC32C"),
        ]);
        assert_eq!(
            &text[..],
            b"InitiatorName=iqn.a:b\0HeaderDigest=None,CRC32C\0"
        );
        let pairs = parse_pairs(&text, &TextLimits::LOGIN).unwrap();
        assert_eq!(pairs[0], ("InitiatorName".into(), "iqn.a:b".into()));
        assert_eq!(pairs[1].1, "None,CRC32C");
    }

    #[test]
    fn tolerates_padding_and_missing_last_nul_and_empty_values() {
        let pairs = parse_pairs(b"A=1\0\0\0B=\0C=x=y", &TextLimits::LOGIN).unwrap();
        assert_eq!(pairs.len(), 3);
        assert_eq!(pairs[1], ("B".into(), String::new()));
        assert_eq!(pairs[2].1, "x=y");
    }

    #[test]
    fn enforces_limits() {
        let l = TextLimits::LOGIN;
        assert_eq!(parse_pairs(b"novalue\0", &l), Err(TextError::MissingEquals));
        assert_eq!(parse_pairs(b"=v\0", &l), Err(TextError::BadKey));
        assert_eq!(parse_pairs(b"a b=v\0", &l), Err(TextError::BadKey));
        let long_key = format!("{}=v\0", "K".repeat(64));
        assert_eq!(
            parse_pairs(long_key.as_bytes(), &l),
            Err(TextError::KeyTooLong(64))
        );
        let ok_key = format!("{}=v\0", "K".repeat(63));
        assert!(parse_pairs(ok_key.as_bytes(), &l).is_ok());
        let long_value = format!("K={}\0", "v".repeat(8193));
        assert!(matches!(
            parse_pairs(long_value.as_bytes(), &l),
            Err(TextError::ValueTooLong { len: 8193, .. })
        ));
        let many: String = (0..257).map(|i| format!("K{i}=1\0")).collect();
        assert_eq!(
            parse_pairs(many.as_bytes(), &l),
            Err(TextError::TooManyPairs(256))
        );
        assert_eq!(parse_pairs(b"K=\xff\0", &l), Err(TextError::BadUtf8));
    }

    #[test]
    fn split_sets_c_on_all_but_last_and_reassembles() {
        let pairs: Vec<(String, String)> = (0..100)
            .map(|i| (format!("Key{i}"), "v".repeat(50)))
            .collect();
        let text = encode_pairs(&pairs);
        let chunks = split_text(&text, 512);
        assert!(chunks.len() > 1);
        assert!(chunks.iter().all(|(c, _)| c.len() <= 512));
        assert!(chunks[..chunks.len() - 1].iter().all(|(_, cont)| *cont));
        assert!(!chunks.last().unwrap().1);
        let mut asm = TextAssembler::new(65_536);
        let mut whole = None;
        for (chunk, cont) in &chunks {
            whole = asm.push(chunk, *cont).unwrap();
        }
        assert_eq!(
            parse_pairs(&whole.unwrap(), &TextLimits::LOGIN).unwrap(),
            pairs
        );
        assert_eq!(split_text(&Bytes::new(), 10), vec![(Bytes::new(), false)]);
    }

    #[test]
    fn assembler_caps_total_size() {
        let mut asm = TextAssembler::new(10);
        assert_eq!(asm.push(b"A=12345", true), Ok(None));
        assert!(asm.is_pending());
        assert_eq!(asm.push(b"6789", true), Err(TextError::TooLong(10)));
        assert_eq!(asm.push(b"", false), Err(TextError::TooLong(10)));
    }
}
