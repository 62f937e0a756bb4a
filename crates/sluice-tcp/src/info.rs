//! `struct tcp_info` (include/uapi/linux/tcp.h) decoded from the bytes `getsockopt(TCP_INFO)`
//! fills. The kernel only ever appends fields and reports how many bytes it wrote, so fields
//! past that length are `None` (an older kernel), never garbage.

/// Bytes the decoder needs at least: every field up to `tcpi_sndbuf_limited` (Linux 4.10).
pub const TCP_INFO_MIN_LEN: usize = off::SNDBUF_LIMITED + 8;

/// The byte offsets of the fields read, as the kernel's header lays them out (natural
/// alignment, no packing). The tests check each against a `#[repr(C)]` copy of the header.
mod off {
    pub const STATE: usize = 0;
    pub const CA_STATE: usize = 1;
    pub const RETRANSMITS: usize = 2;
    pub const WSCALE: usize = 6;
    pub const APP_LIMITED: usize = 7;
    pub const RTO: usize = 8;
    pub const SND_MSS: usize = 16;
    pub const RCV_MSS: usize = 20;
    pub const UNACKED: usize = 24;
    pub const SACKED: usize = 28;
    pub const LOST: usize = 32;
    pub const RETRANS: usize = 36;
    pub const PMTU: usize = 60;
    pub const RCV_SSTHRESH: usize = 64;
    pub const RTT: usize = 68;
    pub const RTTVAR: usize = 72;
    pub const SND_SSTHRESH: usize = 76;
    pub const SND_CWND: usize = 80;
    pub const ADVMSS: usize = 84;
    pub const RCV_SPACE: usize = 96;
    pub const TOTAL_RETRANS: usize = 100;
    pub const PACING_RATE: usize = 104;
    pub const BYTES_ACKED: usize = 120;
    pub const BYTES_RECEIVED: usize = 128;
    pub const SEGS_OUT: usize = 136;
    pub const NOTSENT_BYTES: usize = 144;
    pub const MIN_RTT: usize = 148;
    pub const DELIVERY_RATE: usize = 160;
    pub const BUSY_TIME: usize = 168;
    pub const RWND_LIMITED: usize = 176;
    pub const SNDBUF_LIMITED: usize = 184;
    pub const DELIVERED: usize = 192;
    pub const BYTES_SENT: usize = 200;
    pub const BYTES_RETRANS: usize = 208;
    pub const SND_WND: usize = 228;
    pub const RCV_WND: usize = 232;
}

/// The congestion-avoidance state (`enum tcp_ca_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaState {
    /// Nothing bad seen.
    Open,
    /// Duplicate ACKs or SACKs seen: reordering or loss suspected.
    Disorder,
    /// The window was reduced for an ECN echo or local congestion.
    Cwr,
    /// Fast retransmit in progress.
    Recovery,
    /// A retransmission timeout: the window collapsed.
    Loss,
    /// A value this decoder does not know.
    Other(u8),
}

impl CaState {
    fn from_raw(v: u8) -> Self {
        match v {
            0 => CaState::Open,
            1 => CaState::Disorder,
            2 => CaState::Cwr,
            3 => CaState::Recovery,
            4 => CaState::Loss,
            n => CaState::Other(n),
        }
    }
}

/// What the kernel says about one TCP connection. Times are microseconds, rates bytes per
/// second, window and queue sizes bytes unless named in segments.
#[derive(Clone, Debug, PartialEq)]
pub struct TcpInfo {
    /// `TCP_ESTABLISHED` is 1 (`include/net/tcp_states.h`).
    pub state: u8,
    /// Congestion-avoidance state.
    pub ca_state: CaState,
    /// Consecutive retransmission timeouts of the segment at the head.
    pub retransmits: u8,
    /// Window scale we send with (the peer's shift applied to its window).
    pub snd_wscale: u8,
    /// Window scale we receive with.
    pub rcv_wscale: u8,
    /// The last delivery-rate sample was limited by the application, not the network.
    pub delivery_rate_app_limited: bool,
    /// Retransmission timeout.
    pub rto_us: u32,
    /// Sender's maximum segment size.
    pub snd_mss: u32,
    /// Receiver's estimate of the peer's segment size.
    pub rcv_mss: u32,
    /// Segments sent and not yet acknowledged (in flight, counting lost ones).
    pub unacked: u32,
    /// Segments selectively acknowledged.
    pub sacked: u32,
    /// Segments presumed lost.
    pub lost: u32,
    /// Segments retransmitted and not yet acknowledged.
    pub retrans: u32,
    /// Path MTU.
    pub pmtu: u32,
    /// Receive-window growth threshold.
    pub rcv_ssthresh: u32,
    /// Smoothed round-trip time.
    pub rtt_us: u32,
    /// Its mean deviation.
    pub rttvar_us: u32,
    /// Slow-start threshold, segments (`0x7fffffff`: not yet set).
    pub snd_ssthresh: u32,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// MSS we advertised.
    pub advmss: u32,
    /// Receive-buffer autotuning's current space.
    pub rcv_space: u32,
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// Pacing rate.
    pub pacing_rate: u64,
    /// Bytes acknowledged by the peer, counted in sequence space from the initial sequence
    /// number: the SYN (and a FIN) count one each; see [`TcpInfo::payload_acked`].
    pub bytes_acked: u64,
    /// Payload bytes received.
    pub bytes_received: u64,
    /// Segments sent.
    pub segs_out: u32,
    /// Bytes written by the application and not yet sent.
    pub notsent_bytes: u32,
    /// Minimum RTT seen (the path's propagation delay, as best TCP knows).
    pub min_rtt_us: u32,
    /// The latest delivery-rate sample.
    pub delivery_rate: u64,
    /// Time with data outstanding or queued (the sum of the three limited-by states).
    pub busy_time_us: u64,
    /// Part of the busy time limited by the receiver's window.
    pub rwnd_limited_us: u64,
    /// Part of the busy time limited by the send buffer: the application had more to
    /// write, the network could take it, the buffer was full.
    pub sndbuf_limited_us: u64,
    /// Segments delivered (Linux 4.18).
    pub delivered: Option<u32>,
    /// Payload bytes sent, retransmissions included (Linux 4.19).
    pub bytes_sent: Option<u64>,
    /// Payload bytes retransmitted (Linux 4.19).
    pub bytes_retrans: Option<u64>,
    /// The peer's advertised window after scaling (Linux 5.4).
    pub snd_wnd: Option<u32>,
    /// Our advertised window after scaling (Linux 6.2).
    pub rcv_wnd: Option<u32>,
}

impl TcpInfo {
    /// Decodes the first `bytes.len()` bytes the kernel wrote; an error names the length when
    /// it is shorter than [`TCP_INFO_MIN_LEN`].
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() < TCP_INFO_MIN_LEN {
            return Err(format!(
                "TCP_INFO returned {} bytes; the send-buffer and receive-window limited times \
                 need {TCP_INFO_MIN_LEN} (Linux 4.10 or later)",
                bytes.len()
            ));
        }
        let u8_at = |o: usize| bytes[o];
        let u32_at =
            |o: usize| u32::from_ne_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
        let u64_at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[o..o + 8]);
            u64::from_ne_bytes(b)
        };
        let opt32 = |o: usize| (bytes.len() >= o + 4).then(|| u32_at(o));
        let opt64 = |o: usize| (bytes.len() >= o + 8).then(|| u64_at(o));
        let wscale = u8_at(off::WSCALE);
        Ok(Self {
            state: u8_at(off::STATE),
            ca_state: CaState::from_raw(u8_at(off::CA_STATE)),
            retransmits: u8_at(off::RETRANSMITS),
            // `__u8 tcpi_snd_wscale : 4, tcpi_rcv_wscale : 4`: the first bit-field takes the
            // low bits on the little-endian ABIs Linux runs sluice on.
            snd_wscale: wscale & 0x0f,
            rcv_wscale: wscale >> 4,
            delivery_rate_app_limited: u8_at(off::APP_LIMITED) & 1 != 0,
            rto_us: u32_at(off::RTO),
            snd_mss: u32_at(off::SND_MSS),
            rcv_mss: u32_at(off::RCV_MSS),
            unacked: u32_at(off::UNACKED),
            sacked: u32_at(off::SACKED),
            lost: u32_at(off::LOST),
            retrans: u32_at(off::RETRANS),
            pmtu: u32_at(off::PMTU),
            rcv_ssthresh: u32_at(off::RCV_SSTHRESH),
            rtt_us: u32_at(off::RTT),
            rttvar_us: u32_at(off::RTTVAR),
            snd_ssthresh: u32_at(off::SND_SSTHRESH),
            snd_cwnd: u32_at(off::SND_CWND),
            advmss: u32_at(off::ADVMSS),
            rcv_space: u32_at(off::RCV_SPACE),
            total_retrans: u32_at(off::TOTAL_RETRANS),
            pacing_rate: u64_at(off::PACING_RATE),
            bytes_acked: u64_at(off::BYTES_ACKED),
            bytes_received: u64_at(off::BYTES_RECEIVED),
            segs_out: u32_at(off::SEGS_OUT),
            notsent_bytes: u32_at(off::NOTSENT_BYTES),
            min_rtt_us: u32_at(off::MIN_RTT),
            delivery_rate: u64_at(off::DELIVERY_RATE),
            busy_time_us: u64_at(off::BUSY_TIME),
            rwnd_limited_us: u64_at(off::RWND_LIMITED),
            sndbuf_limited_us: u64_at(off::SNDBUF_LIMITED),
            delivered: opt32(off::DELIVERED),
            bytes_sent: opt64(off::BYTES_SENT),
            bytes_retrans: opt64(off::BYTES_RETRANS),
            snd_wnd: opt32(off::SND_WND),
            rcv_wnd: opt32(off::RCV_WND),
        })
    }

    /// Payload bytes acknowledged: [`Self::bytes_acked`] without the SYN.
    pub fn payload_acked(&self) -> u64 {
        self.bytes_acked.saturating_sub(1)
    }

    /// The congestion window in bytes.
    pub fn cwnd_bytes(&self) -> u64 {
        u64::from(self.snd_cwnd) * u64::from(self.snd_mss)
    }

    /// Whether the slow-start threshold has been set (the kernel starts it "infinite").
    pub fn ssthresh_set(&self) -> bool {
        self.snd_ssthresh < 0x7fff_ffff
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    /// `struct tcp_info` as include/uapi/linux/tcp.h declares it (Linux 6.x), field for
    /// field; a bit-field byte is one `u8`. `repr(C)` lays it out as the C compiler does.
    #[allow(dead_code)]
    #[repr(C)]
    struct KernelTcpInfo {
        tcpi_state: u8,
        tcpi_ca_state: u8,
        tcpi_retransmits: u8,
        tcpi_probes: u8,
        tcpi_backoff: u8,
        tcpi_options: u8,
        tcpi_wscale: u8,
        tcpi_app_limited_fastopen: u8,
        tcpi_rto: u32,
        tcpi_ato: u32,
        tcpi_snd_mss: u32,
        tcpi_rcv_mss: u32,
        tcpi_unacked: u32,
        tcpi_sacked: u32,
        tcpi_lost: u32,
        tcpi_retrans: u32,
        tcpi_fackets: u32,
        tcpi_last_data_sent: u32,
        tcpi_last_ack_sent: u32,
        tcpi_last_data_recv: u32,
        tcpi_last_ack_recv: u32,
        tcpi_pmtu: u32,
        tcpi_rcv_ssthresh: u32,
        tcpi_rtt: u32,
        tcpi_rttvar: u32,
        tcpi_snd_ssthresh: u32,
        tcpi_snd_cwnd: u32,
        tcpi_advmss: u32,
        tcpi_reordering: u32,
        tcpi_rcv_rtt: u32,
        tcpi_rcv_space: u32,
        tcpi_total_retrans: u32,
        tcpi_pacing_rate: u64,
        tcpi_max_pacing_rate: u64,
        tcpi_bytes_acked: u64,
        tcpi_bytes_received: u64,
        tcpi_segs_out: u32,
        tcpi_segs_in: u32,
        tcpi_notsent_bytes: u32,
        tcpi_min_rtt: u32,
        tcpi_data_segs_in: u32,
        tcpi_data_segs_out: u32,
        tcpi_delivery_rate: u64,
        tcpi_busy_time: u64,
        tcpi_rwnd_limited: u64,
        tcpi_sndbuf_limited: u64,
        tcpi_delivered: u32,
        tcpi_delivered_ce: u32,
        tcpi_bytes_sent: u64,
        tcpi_bytes_retrans: u64,
        tcpi_dsack_dups: u32,
        tcpi_reord_seen: u32,
        tcpi_rcv_ooopack: u32,
        tcpi_snd_wnd: u32,
        tcpi_rcv_wnd: u32,
        tcpi_rehash: u32,
    }

    #[test]
    fn offsets_match_the_kernel_layout() {
        let pairs = [
            (off::STATE, offset_of!(KernelTcpInfo, tcpi_state)),
            (off::CA_STATE, offset_of!(KernelTcpInfo, tcpi_ca_state)),
            (
                off::RETRANSMITS,
                offset_of!(KernelTcpInfo, tcpi_retransmits),
            ),
            (off::WSCALE, offset_of!(KernelTcpInfo, tcpi_wscale)),
            (
                off::APP_LIMITED,
                offset_of!(KernelTcpInfo, tcpi_app_limited_fastopen),
            ),
            (off::RTO, offset_of!(KernelTcpInfo, tcpi_rto)),
            (off::SND_MSS, offset_of!(KernelTcpInfo, tcpi_snd_mss)),
            (off::RCV_MSS, offset_of!(KernelTcpInfo, tcpi_rcv_mss)),
            (off::UNACKED, offset_of!(KernelTcpInfo, tcpi_unacked)),
            (off::SACKED, offset_of!(KernelTcpInfo, tcpi_sacked)),
            (off::LOST, offset_of!(KernelTcpInfo, tcpi_lost)),
            (off::RETRANS, offset_of!(KernelTcpInfo, tcpi_retrans)),
            (off::PMTU, offset_of!(KernelTcpInfo, tcpi_pmtu)),
            (
                off::RCV_SSTHRESH,
                offset_of!(KernelTcpInfo, tcpi_rcv_ssthresh),
            ),
            (off::RTT, offset_of!(KernelTcpInfo, tcpi_rtt)),
            (off::RTTVAR, offset_of!(KernelTcpInfo, tcpi_rttvar)),
            (
                off::SND_SSTHRESH,
                offset_of!(KernelTcpInfo, tcpi_snd_ssthresh),
            ),
            (off::SND_CWND, offset_of!(KernelTcpInfo, tcpi_snd_cwnd)),
            (off::ADVMSS, offset_of!(KernelTcpInfo, tcpi_advmss)),
            (off::RCV_SPACE, offset_of!(KernelTcpInfo, tcpi_rcv_space)),
            (
                off::TOTAL_RETRANS,
                offset_of!(KernelTcpInfo, tcpi_total_retrans),
            ),
            (
                off::PACING_RATE,
                offset_of!(KernelTcpInfo, tcpi_pacing_rate),
            ),
            (
                off::BYTES_ACKED,
                offset_of!(KernelTcpInfo, tcpi_bytes_acked),
            ),
            (
                off::BYTES_RECEIVED,
                offset_of!(KernelTcpInfo, tcpi_bytes_received),
            ),
            (off::SEGS_OUT, offset_of!(KernelTcpInfo, tcpi_segs_out)),
            (
                off::NOTSENT_BYTES,
                offset_of!(KernelTcpInfo, tcpi_notsent_bytes),
            ),
            (off::MIN_RTT, offset_of!(KernelTcpInfo, tcpi_min_rtt)),
            (
                off::DELIVERY_RATE,
                offset_of!(KernelTcpInfo, tcpi_delivery_rate),
            ),
            (off::BUSY_TIME, offset_of!(KernelTcpInfo, tcpi_busy_time)),
            (
                off::RWND_LIMITED,
                offset_of!(KernelTcpInfo, tcpi_rwnd_limited),
            ),
            (
                off::SNDBUF_LIMITED,
                offset_of!(KernelTcpInfo, tcpi_sndbuf_limited),
            ),
            (off::DELIVERED, offset_of!(KernelTcpInfo, tcpi_delivered)),
            (off::BYTES_SENT, offset_of!(KernelTcpInfo, tcpi_bytes_sent)),
            (
                off::BYTES_RETRANS,
                offset_of!(KernelTcpInfo, tcpi_bytes_retrans),
            ),
            (off::SND_WND, offset_of!(KernelTcpInfo, tcpi_snd_wnd)),
            (off::RCV_WND, offset_of!(KernelTcpInfo, tcpi_rcv_wnd)),
        ];
        for (i, (ours, kernels)) in pairs.iter().enumerate() {
            assert_eq!(ours, kernels, "field {i}");
        }
        assert_eq!(std::mem::size_of::<KernelTcpInfo>(), 240);
    }

    /// Bytes laid out as the kernel would write them, with a distinct value per field.
    fn sample(len: usize) -> Vec<u8> {
        let mut b = vec![0u8; 240];
        let put32 =
            |b: &mut Vec<u8>, o: usize, v: u32| b[o..o + 4].copy_from_slice(&v.to_ne_bytes());
        let put64 =
            |b: &mut Vec<u8>, o: usize, v: u64| b[o..o + 8].copy_from_slice(&v.to_ne_bytes());
        b[off::STATE] = 1;
        b[off::CA_STATE] = 3;
        b[off::WSCALE] = 0x97; // rcv 9, snd 7
        b[off::APP_LIMITED] = 0b101; // app-limited, fastopen bits set
        put32(&mut b, off::SND_MSS, 8948);
        put32(&mut b, off::RTT, 20_123);
        put32(&mut b, off::SND_CWND, 700);
        put32(&mut b, off::SND_SSTHRESH, 0x7fff_ffff);
        put32(&mut b, off::NOTSENT_BYTES, 123_456);
        put64(&mut b, off::BYTES_ACKED, 5 << 30);
        put64(&mut b, off::DELIVERY_RATE, 118_000_000);
        put64(&mut b, off::BUSY_TIME, 9_000_000);
        put64(&mut b, off::RWND_LIMITED, 10);
        put64(&mut b, off::SNDBUF_LIMITED, 4_000_000);
        put64(&mut b, off::BYTES_SENT, (5 << 30) + 99);
        put32(&mut b, off::SND_WND, 6 << 20);
        b.truncate(len);
        b
    }

    #[test]
    fn decodes_every_field_from_its_offset() {
        let i = TcpInfo::decode(&sample(240)).unwrap();
        assert_eq!(i.state, 1);
        assert_eq!(i.ca_state, CaState::Recovery);
        assert_eq!((i.snd_wscale, i.rcv_wscale), (7, 9));
        assert!(i.delivery_rate_app_limited);
        assert_eq!(i.snd_mss, 8948);
        assert_eq!(i.rtt_us, 20_123);
        assert_eq!(i.cwnd_bytes(), 700 * 8948);
        assert!(!i.ssthresh_set());
        assert_eq!(i.notsent_bytes, 123_456);
        assert_eq!(i.bytes_acked, 5 << 30);
        assert_eq!(i.delivery_rate, 118_000_000);
        assert_eq!(
            (i.busy_time_us, i.rwnd_limited_us, i.sndbuf_limited_us),
            (9_000_000, 10, 4_000_000)
        );
        assert_eq!(i.bytes_sent, Some((5 << 30) + 99));
        assert_eq!(i.snd_wnd, Some(6 << 20));
        assert_eq!(i.rcv_wnd, Some(0));
    }

    #[test]
    fn older_kernels_leave_later_fields_unknown() {
        // Linux 4.10 stops after tcpi_sndbuf_limited.
        let i = TcpInfo::decode(&sample(TCP_INFO_MIN_LEN)).unwrap();
        assert_eq!(i.sndbuf_limited_us, 4_000_000);
        assert_eq!((i.bytes_sent, i.snd_wnd, i.rcv_wnd), (None, None, None));
        // Linux 5.4 has the peer's window but not ours.
        let i = TcpInfo::decode(&sample(232)).unwrap();
        assert_eq!((i.snd_wnd, i.rcv_wnd), (Some(6 << 20), None));
        let e = TcpInfo::decode(&sample(104)).unwrap_err();
        assert!(e.contains("104 bytes") && e.contains("4.10"), "{e}");
    }
}
