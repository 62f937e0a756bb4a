//! The theoretical line the study draws in its Figs. 7 and 23, and the bound a send buffer
//! puts on a stream.
//!
//! A write of B bytes over a link of goodput G and round-trip time RTT takes at best B/G to
//! send and then the status's round trip (the study's Fig. 9 with the target's and the
//! initiator's own times, Tb and Tc, at zero): B / (B/G + RTT). With q writes in flight the
//! link is shared and q of them fit in that time, up to the link: min(G, q·B / (B/G + RTT)).
//! A plain stream has no round trip per write: G.

/// IPv4 (20 bytes) and TCP with timestamps (32 bytes) per packet.
pub const TCP_IP_HEADERS: u32 = 52;

/// The TCP payload a link of `rate_bps` (IP packets of `mtu` bytes) carries, bytes/s.
pub fn goodput(rate_bps: f64, mtu: u32) -> f64 {
    rate_bps / 8.0 * f64::from(mtu - TCP_IP_HEADERS) / f64::from(mtu)
}

/// The study's line for `qd` writes of `block` bytes in flight: bytes/s.
pub fn write_line(goodput: f64, rtt_s: f64, block: u64, qd: u32) -> f64 {
    let b = block as f64;
    (f64::from(qd) * b / (b / goodput + rtt_s)).min(goodput)
}

/// What a send buffer of `sndbuf` bytes (as the kernel accounts them) lets through per
/// round trip, bytes/s: each segment's memory is about `overhead` times its payload, and a
/// full buffer's worth of payload is the most in flight.
pub fn buffer_bound(sndbuf: u64, overhead: f64, rtt_s: f64) -> f64 {
    sndbuf as f64 / overhead / rtt_s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_of_the_studys_writes() {
        let g = goodput(1e9, 9000);
        assert!((g - 124_277_777.0).abs() < 1.0, "{g}");
        // 4 MiB one at a time: 33.7 ms on the wire plus 50 ms of round trip.
        let one = write_line(g, 0.050, 4 << 20, 1);
        assert!((one / 1e6 - 50.1).abs() < 0.1, "{}", one / 1e6);
        // Enough in flight fills the link; no round trip leaves only the link.
        assert_eq!(write_line(g, 0.050, 4 << 20, 8), g);
        assert!((write_line(g, 0.0, 4 << 20, 1) - g).abs() < 1e-3);
        // 4 MiB of buffer over 50 ms, the kernel counting about 1.1 bytes per byte.
        assert!((buffer_bound(4 << 20, 1.1, 0.05) / 1e6 - 76.3).abs() < 0.1);
    }
}
