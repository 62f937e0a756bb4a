//! One configuration of the WAN study: who writes (sluice's initiator, libiscsi through
//! qemu-img, or a plain socket), with which iSCSI parameters, which TCP settings, how many
//! commands of what size at once.

use sluice_tcp::{BufferPolicy, SocketOptions};

use crate::sweep::{Direction, Point};

/// What moves the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Initiator {
    /// sluice's initiator in this process, monitored (TCP_INFO, send queue, PDU times).
    Sluice,
    /// libiscsi, as `qemu-img bench -w` over `iscsi://` (throughput only: its socket is in
    /// another process).
    Libiscsi,
    /// One TCP stream of plain writes to a sink behind the link: what TCP alone achieves (the
    /// study's iperf).
    Socket,
}

impl Initiator {
    /// `sluice`, `libiscsi` or `socket`.
    pub fn name(self) -> &'static str {
        match self {
            Initiator::Sluice => "sluice",
            Initiator::Libiscsi => "libiscsi",
            Initiator::Socket => "socket",
        }
    }

    /// The inverse of [`Self::name`].
    pub fn from_name(s: &str) -> Option<Self> {
        [Initiator::Sluice, Initiator::Libiscsi, Initiator::Socket]
            .into_iter()
            .find(|i| i.name() == s)
    }
}

/// The iSCSI parameters both sides offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Params {
    /// RFC 7143's defaults (section 13): InitialR2T=Yes, ImmediateData=Yes,
    /// FirstBurstLength 64 KiB, MaxBurstLength 256 KiB, MaxRecvDataSegmentLength 8 KiB,
    /// MaxOutstandingR2T 1.
    Rfc,
    /// The study's Table 1, optimised: InitialR2T=No, ImmediateData=Yes, FirstBurstLength,
    /// MaxBurstLength and MaxRecvDataSegmentLength 1 MiB.
    Study,
    /// As [`Params::Study`] with both burst lengths raised to the command size, as the
    /// study's section IV.B did for its 4 MB writes: every write goes unsolicited.
    StudyBurst,
    /// Whatever sluice's initiator and target offer by default: nothing forced.
    Defaults,
}

impl Params {
    /// `rfc`, `study`, `study-burst` or `defaults`.
    pub fn name(self) -> &'static str {
        match self {
            Params::Rfc => "rfc",
            Params::Study => "study",
            Params::StudyBurst => "study-burst",
            Params::Defaults => "defaults",
        }
    }

    /// The inverse of [`Self::name`].
    pub fn from_name(s: &str) -> Option<Self> {
        [
            Params::Rfc,
            Params::Study,
            Params::StudyBurst,
            Params::Defaults,
        ]
        .into_iter()
        .find(|p| p.name() == s)
    }

    /// The parameter-study point both sides are forced to (the target's configuration and
    /// the initiator's offers), or `None` for each side's defaults.
    pub fn point(self, c: &Config) -> Option<Point> {
        let base = Point {
            direction: Direction::Write,
            outstanding: c.queue_depth,
            command_bytes: c.block_bytes,
            connections: c.connections,
            ..Point::default()
        };
        let mib = 1 << 20;
        match self {
            Params::Rfc => Some(base),
            Params::Study => Some(Point {
                initial_r2t: false,
                immediate_data: true,
                ..base.mrdsl(mib).bursts(mib)
            }),
            Params::StudyBurst => Some(Point {
                initial_r2t: false,
                immediate_data: true,
                // RFC 7143 section 13.13: bursts up to 2^24 - 1 bytes.
                ..base.mrdsl(mib).bursts(c.block_bytes.clamp(mib, 16_776_192))
            }),
            Params::Defaults => None,
        }
    }
}

/// Everything one run is made with, the link's round-trip time aside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// A short name for legends and the report ("iSCSI, study, kernel buffers").
    pub label: String,
    /// What writes.
    pub initiator: Initiator,
    /// The iSCSI parameters (ignored by [`Initiator::Socket`]).
    pub params: Params,
    /// The initiator socket's TCP settings (libiscsi keeps its own).
    pub tcp: SocketOptions,
    /// Commands in flight.
    pub queue_depth: u32,
    /// Bytes per command (for a socket: per `write`).
    pub block_bytes: u32,
    /// TCP connections of the session.
    pub connections: u16,
}

impl Config {
    /// A sluice initiator writing `block` bytes per command, one at a time, with `params`
    /// and the kernel's own buffer sizing.
    pub fn iscsi(label: &str, params: Params, block: u32) -> Self {
        Self {
            label: label.into(),
            initiator: Initiator::Sluice,
            params,
            tcp: SocketOptions {
                send_buffer: BufferPolicy::Kernel,
                ..SocketOptions::default()
            },
            queue_depth: 1,
            block_bytes: block,
            connections: 1,
        }
    }

    /// A plain TCP stream with the kernel's own buffer sizing.
    pub fn socket(label: &str) -> Self {
        Self {
            initiator: Initiator::Socket,
            block_bytes: 1 << 20,
            ..Self::iscsi(label, Params::Defaults, 1 << 20)
        }
    }

    /// With the congestion control `cc`.
    #[must_use]
    pub fn cc(mut self, cc: &str) -> Self {
        self.tcp.congestion_control = Some(cc.into());
        self
    }

    /// With the send buffer sized by `policy`.
    #[must_use]
    pub fn send_buffer(mut self, policy: BufferPolicy) -> Self {
        self.tcp.send_buffer = policy;
        self
    }

    /// With `qd` commands in flight.
    #[must_use]
    pub fn qd(mut self, qd: u32) -> Self {
        self.queue_depth = qd;
        self
    }

    /// By `initiator`.
    #[must_use]
    pub fn by(mut self, initiator: Initiator) -> Self {
        self.initiator = initiator;
        self
    }

    /// The congestion control's name, `default` when the system's.
    pub fn cc_name(&self) -> &str {
        self.tcp.congestion_control.as_deref().unwrap_or("default")
    }

    /// A stable text naming every setting: identifies the configuration across an
    /// interrupted run.
    pub fn key(&self) -> String {
        format!(
            "{} params={} cc={} sndbuf={} rcvbuf={} lowat={} nodelay={} qd={} bs={} conns={}",
            self.initiator.name(),
            self.params.name(),
            self.cc_name(),
            self.tcp.send_buffer.name(),
            self.tcp
                .recv_buffer
                .map_or("kernel".into(), |n| n.to_string()),
            self.tcp
                .notsent_lowat
                .map_or("none".into(), |n| n.to_string()),
            self.tcp.nodelay,
            self.queue_depth,
            self.block_bytes,
            self.connections,
        )
    }

    /// Checks what the run needs.
    pub fn validate(&self) -> Result<(), String> {
        if self.queue_depth == 0 || self.connections == 0 || self.block_bytes == 0 {
            return Err(format!(
                "{}: queue depth, connections and block size must be positive",
                self.label
            ));
        }
        if self.initiator != Initiator::Socket && !self.block_bytes.is_multiple_of(512) {
            return Err(format!(
                "{}: block size {} is not a multiple of 512",
                self.label, self.block_bytes
            ));
        }
        if let Some(p) = self.params.point(self) {
            p.validate().map_err(|e| format!("{}: {e}", self.label))?;
        }
        Ok(())
    }
}

/// Changes `tcp` as `spec` says: `cc=NAME`, `sndbuf=kernel|grow|grow:SIZE|SIZE`,
/// `rcvbuf=kernel|SIZE`, `lowat=none|SIZE`, `nodelay=on|off`, comma-separated, in order
/// (sizes as `4M`, `512K`; a fixed size is the kernel's accounting, twice the request).
pub fn apply_tcp_spec(tcp: &mut SocketOptions, spec: &str) -> Result<(), String> {
    const KEYS: &str = "cc, sndbuf, rcvbuf, lowat, nodelay";
    let size = |v: &str, k: &str| -> Result<usize, String> {
        crate::size_dist::parse_byte_size(v)
            .map_err(|e| format!("{k} {v:?}: {e}"))
            .and_then(|n| usize::try_from(n).map_err(|_| format!("{k} {v:?}: too large")))
    };
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: use KEY=VALUE ({KEYS})"))?;
        match k {
            "cc" if !v.is_empty() => tcp.congestion_control = Some(v.to_owned()),
            "sndbuf" => {
                tcp.send_buffer = match v {
                    "kernel" => BufferPolicy::Kernel,
                    "grow" => BufferPolicy::Grow {
                        ceiling: sluice_tcp::DEFAULT_SEND_BUFFER_CEILING,
                    },
                    _ => match v.strip_prefix("grow:") {
                        Some(c) => BufferPolicy::Grow {
                            ceiling: size(c, k)?,
                        },
                        None => BufferPolicy::Fixed(size(v, k)?),
                    },
                }
            }
            "rcvbuf" => {
                tcp.recv_buffer = match v {
                    "kernel" => None,
                    _ => Some(size(v, k)?),
                }
            }
            "lowat" => {
                tcp.notsent_lowat = match v {
                    "none" => None,
                    _ => Some(
                        u32::try_from(size(v, k)?)
                            .map_err(|_| format!("lowat {v:?}: too large"))?,
                    ),
                }
            }
            "nodelay" => {
                tcp.nodelay = match v {
                    "on" => true,
                    "off" => false,
                    _ => return Err(format!("nodelay {v:?}: on or off")),
                }
            }
            _ => return Err(format!("{part:?}: unknown TCP setting ({KEYS})")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_presets_force_what_the_study_set() {
        let c = Config::iscsi("x", Params::StudyBurst, 4 << 20);
        let p = Params::StudyBurst.point(&c).unwrap();
        assert_eq!((p.first_burst, p.max_burst), (4 << 20, 4 << 20));
        assert!(!p.initial_r2t && p.immediate_data);
        assert_eq!(p.target_mrdsl, 1 << 20);
        let r = Params::Rfc.point(&c).unwrap();
        assert_eq!(
            (r.first_burst, r.max_burst, r.target_mrdsl),
            (65_536, 262_144, 8192)
        );
        assert!(r.initial_r2t);
        assert!(Params::Defaults.point(&c).is_none());
        for p in [
            Params::Rfc,
            Params::Study,
            Params::StudyBurst,
            Params::Defaults,
        ] {
            assert_eq!(Params::from_name(p.name()), Some(p));
        }
        assert_eq!(Initiator::from_name("socket"), Some(Initiator::Socket));
    }

    #[test]
    fn tcp_specs_set_what_they_name() {
        let mut t = SocketOptions::default();
        apply_tcp_spec(
            &mut t,
            "cc=reno,sndbuf=16M,rcvbuf=8M,lowat=128K,nodelay=off",
        )
        .unwrap();
        assert_eq!(t.congestion_control.as_deref(), Some("reno"));
        assert_eq!(t.send_buffer, BufferPolicy::Fixed(16 << 20));
        assert_eq!(t.recv_buffer, Some(8 << 20));
        assert_eq!(t.notsent_lowat, Some(128 << 10));
        assert!(!t.nodelay);
        apply_tcp_spec(&mut t, "sndbuf=grow:32M,rcvbuf=kernel,lowat=none").unwrap();
        assert_eq!(t.send_buffer, BufferPolicy::Grow { ceiling: 32 << 20 });
        assert_eq!((t.recv_buffer, t.notsent_lowat), (None, None));
        apply_tcp_spec(&mut t, "sndbuf=kernel").unwrap();
        assert_eq!(t.send_buffer, BufferPolicy::Kernel);
        for (bad, says) in [
            ("speed=1", "unknown TCP setting"),
            ("nodelay=maybe", "on or off"),
            ("sndbuf=lots", "sndbuf"),
            ("cc", "KEY=VALUE"),
        ] {
            let e = apply_tcp_spec(&mut t, bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn keys_name_every_setting() {
        let a = Config::iscsi("a", Params::Study, 1 << 20);
        let b = a.clone().cc("reno");
        let c = a.clone().send_buffer(BufferPolicy::Fixed(16 << 20));
        let d = a.clone().qd(8);
        let keys = [a.key(), b.key(), c.key(), d.key()];
        for (i, k) in keys.iter().enumerate() {
            for other in &keys[i + 1..] {
                assert_ne!(k, other);
            }
        }
        assert!(c.key().contains("sndbuf=16777216"), "{}", c.key());
        assert!(Config::iscsi("bad", Params::Rfc, 1000).validate().is_err());
        assert!(a.validate().is_ok());
    }
}
