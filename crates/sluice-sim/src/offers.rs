//! Random offers for both sides of a login, so that the negotiated values of every
//! operational key (RFC 7143 section 13) wander over their ranges from seed to seed.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use sluice_proto::text::{DigestKind, OperationalOffer};

use crate::net::log_uniform;

/// A segment or burst length: mostly the sizes real peers use, sometimes anything in the
/// key's range (512 to 2^24 - 1).
fn length(rng: &mut ChaCha8Rng) -> u32 {
    match rng.gen_range(0..4) {
        0 => *[512u32, 4096, 8192, 65_536, 262_144, 1 << 20]
            .get(rng.gen_range(0..6))
            .unwrap_or(&8192),
        1 => rng.gen_range(512..=16_777_215),
        _ => log_uniform(rng, 512, 1 << 20) as u32,
    }
}

fn digests(rng: &mut ChaCha8Rng) -> Vec<DigestKind> {
    match rng.gen_range(0..4) {
        0 => vec![DigestKind::None],
        1 => vec![DigestKind::Crc32c],
        2 => vec![DigestKind::Crc32c, DigestKind::None],
        _ => vec![DigestKind::None, DigestKind::Crc32c],
    }
}

/// One side's offer. `max_connections` is what this side asks for (or accepts), and
/// ErrorRecoveryLevel is at most `max_erl`.
pub(crate) fn random_offer(
    rng: &mut ChaCha8Rng,
    max_connections: u16,
    max_erl: u8,
) -> OperationalOffer {
    let max_burst = length(rng);
    OperationalOffer {
        header_digest: digests(rng),
        data_digest: digests(rng),
        max_connections,
        initial_r2t: rng.gen_bool(0.5),
        immediate_data: rng.gen_bool(0.5),
        max_recv_data_segment_length: length(rng),
        max_burst_length: max_burst,
        first_burst_length: length(rng).min(max_burst),
        default_time2wait: rng.gen_range(0..=3600),
        default_time2retain: rng.gen_range(0..=3600),
        max_outstanding_r2t: if rng.gen_bool(0.7) {
            rng.gen_range(1..=4)
        } else {
            rng.gen_range(1..=65_535)
        },
        data_pdu_in_order: rng.gen_bool(0.7),
        data_sequence_in_order: rng.gen_bool(0.7),
        // Each side offers the highest level most often: the session runs at the lower of the
        // two offers, and each of 0, 1 and 2 should be common (about 28/36/36 %).
        error_recovery_level: {
            let draw = rng.gen_range(0.0..1.0);
            let level = if draw < 0.15 {
                0
            } else if draw < 0.4 {
                1
            } else {
                2
            };
            level.min(max_erl)
        },
        protocol_level: None,
    }
}
