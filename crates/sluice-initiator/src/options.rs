//! What a session connects with: identity, CHAP, operational offers and driver policy.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sluice_proto::chap::ChapAlgorithm;
use sluice_proto::initiator::Policy;
use sluice_proto::initiator::RecoveryConfig;
use sluice_proto::params::IMPLEMENTED_ERROR_RECOVERY_LEVEL;
use sluice_proto::pdu::Pdu;
use sluice_proto::text::{lookup, DigestKind, KeyId, OperationalOffer};

use crate::error::Error;
use crate::url::IscsiUrl;

/// The InitiatorName used when none is configured.
pub const DEFAULT_INITIATOR_NAME: &str = "iqn.2026-11.io.sluice:initiator";

/// Which way a traced PDU went.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Direction {
    /// Initiator to target.
    Sent,
    /// Target to initiator.
    Received,
}

/// A PDU trace hook: called for every PDU sent or received, login and discovery included.
pub type PduTrace = Arc<dyn Fn(Direction, &Pdu) + Send + Sync>;

/// A socket hook: called with every connection's socket once it is connected, before login
/// (measurement tools take a duplicate of it to sample TCP_INFO).
pub type SocketHook = Arc<dyn Fn(&tokio::net::TcpStream) + Send + Sync>;

/// CHAP settings (RFC 7143 section 12.1.3).
#[derive(Clone, Eq, PartialEq)]
pub struct Chap {
    /// CHAP_N we send.
    pub user: String,
    /// The secret we share with the target.
    pub secret: String,
    /// Mutual CHAP: the CHAP_N the target must answer with and its secret.
    pub mutual: Option<(String, String)>,
    /// CHAP_A values to offer, most preferred first.
    pub algorithms: Vec<ChapAlgorithm>,
}

impl fmt::Debug for Chap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chap")
            .field("user", &self.user)
            .field("mutual_user", &self.mutual.as_ref().map(|m| &m.0))
            .field("algorithms", &self.algorithms)
            .finish_non_exhaustive()
    }
}

/// Everything a connection is made with. Build with [`ConnectOptions::default`] and the
/// setters, or from a URL's query with [`ConnectOptions::apply`].
#[derive(Clone)]
pub struct ConnectOptions {
    /// InitiatorName.
    pub initiator_name: String,
    /// InitiatorAlias, sent when set.
    pub initiator_alias: Option<String>,
    /// The session's ISID (RFC 7143 section 11.12.5); `None` draws a random one. Keeping one
    /// ISID across sessions keeps the initiator port, so the target sees the same I_T nexus
    /// again: SCSI persistent reservations and registrations belong to it.
    pub isid: Option<[u8; 6]>,
    /// CHAP, when the target requires it.
    pub chap: Option<Chap>,
    /// Operational keys offered at login (RFC 7143 section 13). The result is in
    /// [`Session::params`](crate::Session::params).
    pub offer: OperationalOffer,
    /// Limit on TCP connect.
    pub connect_timeout: Duration,
    /// Limit on one whole login (all its PDUs).
    pub login_timeout: Duration,
    /// Send a NOP-Out ping after this much idle time (`None`: never).
    pub keepalive_interval: Option<Duration>,
    /// How long a ping may go unanswered before the connection counts as lost.
    pub keepalive_timeout: Duration,
    /// Most consecutive reconnect attempts after a lost connection (0: fail the commands).
    pub max_reconnects: u32,
    /// Most times one command is retried on a new connection.
    pub max_retries: u32,
    /// Delay before reconnecting; `None` means the negotiated DefaultTime2Wait.
    pub reconnect_delay: Option<Duration>,
    /// Most login redirects followed (RFC 7143 section 11.13.5, class 1).
    pub max_redirects: u32,
    /// Connections to open in the session (MC/S). MaxConnections is offered at least this
    /// high; the session opens as many as the target accepts.
    pub connections: u16,
    /// How commands are spread over the connections.
    pub policy: Policy,
    /// Called for every PDU, for debugging.
    pub trace: Option<PduTrace>,
    /// TCP settings of every connection: congestion control, buffers, `TCP_NODELAY`,
    /// `TCP_NOTSENT_LOWAT`. By default the send buffer grows past the kernel's autotuning
    /// ceiling while TCP_INFO says it limits the connection (a long fat path).
    pub tcp: sluice_tcp::SocketOptions,
    /// Called with each connection's socket once connected, for measurement.
    pub socket_hook: Option<SocketHook>,
    /// Recovery timers: the command deadline, and the retry period of ErrorRecoveryLevel 1
    /// and above.
    pub recovery: RecoveryConfig,
    /// Test hook: faults (corruption, drops, duplicates, resets) applied by the initiator to
    /// its own connections' PDUs, on send and on receive, from full feature phase on. `None`
    /// in production; tests of error recovery set it. It works on framed PDUs, so it does not
    /// apply to iSER connections in RDMA mode, whose PDUs pass as values (`IserOptions::faults`
    /// injects faults into their RDMA traffic instead).
    pub fault_hook: Option<std::sync::Arc<sluice_fault::FaultHook>>,
    /// Experimental: carry the session over UDP (`iscsi+udp://`, only sluice's target speaks
    /// it) with these settings, instead of TCP. See [`ConnectOptions::use_udp`].
    pub udp: Option<sluice_udp::UdpConfig>,
    /// Carry the session over iSER (RFC 7145, `iser://`) on the software RDMA provider with
    /// these settings, instead of iSCSI over TCP. See [`ConnectOptions::use_iser`].
    pub iser: Option<crate::iser::IserOptions>,
    /// What the iSER datamovers of this session's connections did.
    pub iser_stats: crate::iser::IserStats,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        // open-iscsi's offers (large bursts, unsolicited data allowed), except that we accept
        // Data-In segments of up to 1 MiB where open-iscsi and libiscsi say 256 KiB: payloads
        // are received in place (no copy either way), and fewer, larger PDUs cost the target
        // and us less per byte (against tgtd, 1 MiB reads went 1,374 -> 1,466 IOPS). A target
        // still sends at most its own MaxXmitDataSegmentLength.
        //
        // On a long path every round trip a write waits for is the cost (`sluice lab wan`):
        // we offer to send a whole write unsolicited (FirstBurstLength as large as
        // MaxBurstLength, where open-iscsi offers 256 KiB), and when a target asks for the
        // data by R2T, to have several R2Ts of one write out at once (MaxOutstandingR2T 8,
        // where RFC 7143 and open-iscsi say 1), so that a write beyond the first burst costs
        // one round trip, not one per burst. Both keys are minimums (RFC 7143 sections
        // 13.14, 13.17): a target that wants less answers less.
        let offer = OperationalOffer {
            initial_r2t: false,
            immediate_data: true,
            max_recv_data_segment_length: 1 << 20,
            max_burst_length: 16_776_192,
            first_burst_length: 16_776_192,
            max_outstanding_r2t: 8,
            ..OperationalOffer::default()
        };
        Self {
            initiator_name: DEFAULT_INITIATOR_NAME.to_owned(),
            initiator_alias: None,
            isid: None,
            chap: None,
            offer,
            connect_timeout: Duration::from_secs(10),
            login_timeout: Duration::from_secs(15),
            keepalive_interval: Some(Duration::from_secs(30)),
            keepalive_timeout: Duration::from_secs(15),
            max_reconnects: 3,
            max_retries: 3,
            reconnect_delay: None,
            max_redirects: 8,
            connections: 1,
            policy: Policy::RoundRobin,
            trace: None,
            tcp: sluice_tcp::SocketOptions::default(),
            socket_hook: None,
            recovery: RecoveryConfig::default(),
            fault_hook: None,
            udp: None,
            iser: None,
            iser_stats: crate::iser::IserStats::default(),
        }
    }
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("initiator_name", &self.initiator_name)
            .field("chap", &self.chap)
            .field("offer", &self.offer)
            .field("max_reconnects", &self.max_reconnects)
            .finish_non_exhaustive()
    }
}

impl ConnectOptions {
    /// Options for `url`: its CHAP user/secret and query arguments applied to the defaults
    /// (for `iscsi+udp://`, to the defaults of [`ConnectOptions::use_udp`]).
    pub fn from_url(url: &IscsiUrl) -> Result<Self, Error> {
        let mut o = Self::default();
        if url.udp {
            o.use_udp(sluice_udp::UdpConfig::default());
        }
        if url.iser {
            o.use_iser(crate::iser::IserOptions::default());
        }
        if let (Some(user), Some(secret)) = (&url.user, &url.password) {
            o.set_chap(user, secret);
        } else if url.user.is_some() {
            return Err(Error::Option(
                "the URL names a CHAP user but no secret (user%secret@host)".into(),
            ));
        }
        for (k, v) in &url.options {
            o.apply(k, v)?;
        }
        Ok(o)
    }

    /// Carries the session over the experimental UDP transport with `udp`. Losses there are
    /// repaired by ErrorRecoveryLevel 1 (RFC 7143 section 7), so at least 1 is offered, and a
    /// login that settles on 0 fails: nothing short of the command timeout would recover a
    /// lost PDU. A PDU is lost whole when one of its datagrams is, so the Data-In segments
    /// asked for are made small (`sluice_udp::DEFAULT_UDP_MAX_RECV_DATA_SEGMENT`, set again
    /// afterwards to choose another).
    pub fn use_udp(&mut self, udp: sluice_udp::UdpConfig) -> &mut Self {
        self.udp = Some(udp);
        self.offer.error_recovery_level = self.offer.error_recovery_level.max(1);
        self.offer.max_recv_data_segment_length = self
            .offer
            .max_recv_data_segment_length
            .min(sluice_udp::DEFAULT_UDP_MAX_RECV_DATA_SEGMENT);
        self
    }

    /// Carries the session over iSER with `iser`. ImmediateData and InitialR2T are offered
    /// as over TCP: immediate data travels in the command's Send and, with InitialR2T=No,
    /// unsolicited Data-Out in Sends of their own up to FirstBurstLength; the target fetches
    /// the rest with RDMA Reads (RFC 7145 section 7.3.4). Digests are off (section 6.3: the
    /// RDMA layer's CRC protects the data).
    pub fn use_iser(&mut self, iser: crate::iser::IserOptions) -> &mut Self {
        self.iser = Some(iser);
        self.set_digests(false, false);
        self
    }

    /// One-way CHAP with MD5 (add algorithms to [`Chap::algorithms`] to offer more).
    pub fn set_chap(&mut self, user: &str, secret: &str) -> &mut Self {
        let mutual = self.chap.take().and_then(|c| c.mutual);
        self.chap = Some(Chap {
            user: user.to_owned(),
            secret: secret.to_owned(),
            mutual,
            algorithms: vec![ChapAlgorithm::Md5],
        });
        self
    }

    /// Mutual CHAP: the name and secret the target must prove. Needs [`set_chap`] first.
    ///
    /// [`set_chap`]: Self::set_chap
    pub fn set_mutual_chap(&mut self, user: &str, secret: &str) -> Result<&mut Self, Error> {
        let chap = self.chap.as_mut().ok_or_else(|| {
            Error::Option("mutual CHAP needs a CHAP user and secret for the initiator".into())
        })?;
        chap.mutual = Some((user.to_owned(), secret.to_owned()));
        Ok(self)
    }

    /// Sets both digests to CRC32C (`true`) or None.
    pub fn set_digests(&mut self, header: bool, data: bool) -> &mut Self {
        let pick = |on| {
            vec![if on {
                DigestKind::Crc32c
            } else {
                DigestKind::None
            }]
        };
        self.offer.header_digest = pick(header);
        self.offer.data_digest = pick(data);
        self
    }

    /// Applies one option: a libiscsi URL argument (`header_digest`, `data_digest`,
    /// `target_user`, `target_password`, `initiator_name`, `chap_algorithms`), sluice's
    /// `iser_fallback` (`tcp` or `none`, for `iser://` URLs),
    /// `connections` (MC/S) and `policy` (`round-robin`, `lu-affinity`, `least-commands`,
    /// `least-bytes`), or any RFC 7143 operational key by its name (`InitialR2T=No`,
    /// `MaxBurstLength=65536`, ...). A key's value is checked against its type and range in
    /// the key table: `MaxRecvDataSegmentLength=100` is an error, not a value moved into range.
    pub fn apply(&mut self, key: &str, value: &str) -> Result<(), Error> {
        let bad = || Error::Option(format!("{key}={value}: invalid value"));
        match key {
            "header_digest" => self.offer.header_digest = digests(value).ok_or_else(bad)?,
            "data_digest" => self.offer.data_digest = digests(value).ok_or_else(bad)?,
            "initiator_name" => self.initiator_name = value.to_owned(),
            "target_user" => {
                let secret = self
                    .chap
                    .as_ref()
                    .and_then(|c| c.mutual.clone())
                    .map(|m| m.1);
                self.set_mutual_chap(value, &secret.unwrap_or_default())?;
            }
            "target_password" => {
                let user = self
                    .chap
                    .as_ref()
                    .and_then(|c| c.mutual.clone())
                    .map(|m| m.0);
                self.set_mutual_chap(&user.unwrap_or_default(), value)?;
            }
            "chap_algorithms" => self.set_chap_algorithms(value).ok_or_else(bad)?,
            // With iser:// URLs: what to do when the target does not answer
            // RDMAExtensions=Yes: `tcp` goes on as iSCSI over TCP, `none` (the default)
            // fails the login.
            "iser_fallback" => {
                let iser = self.iser.as_mut().ok_or_else(|| {
                    Error::Option("iser_fallback applies to iser:// URLs only".into())
                })?;
                iser.fallback_to_tcp = match value {
                    "tcp" => true,
                    "none" => false,
                    _ => return Err(bad()),
                };
            }
            "connections" => self.connections = connections(value)?,
            "policy" => self.policy = Policy::from_name(value).ok_or_else(bad)?,
            _ => self.apply_key(key, value)?,
        }
        Ok(())
    }

    /// Applies an RFC 7143 key given by its name, as the key table types and bounds it.
    fn apply_key(&mut self, key: &str, value: &str) -> Result<(), Error> {
        let Some(def) = lookup(key) else {
            return Err(Error::Option(format!("unknown option {key}")));
        };
        let bad = || Error::Option(format!("{key}={value}: invalid value"));
        match def.id {
            // libiscsi's digest names are accepted here too (`crc32c-none`).
            KeyId::HeaderDigest => self.offer.header_digest = digests(value).ok_or_else(bad)?,
            KeyId::DataDigest => self.offer.data_digest = digests(value).ok_or_else(bad)?,
            KeyId::InitiatorName => self.initiator_name = value.to_owned(),
            KeyId::InitiatorAlias => self.initiator_alias = Some(value.to_owned()),
            KeyId::ChapA => self.set_chap_algorithms(value).ok_or_else(bad)?,
            KeyId::ErrorRecoveryLevel => {
                let level: u8 = def.id.parse_number(value)?;
                if level > IMPLEMENTED_ERROR_RECOVERY_LEVEL {
                    return Err(Error::Option(format!(
                        "{key}={value}: sluice implements levels 0 to \
                         {IMPLEMENTED_ERROR_RECOVERY_LEVEL} only"
                    )));
                }
                self.offer.error_recovery_level = level;
            }
            id => self.offer.set_key(id, value)?,
        }
        Ok(())
    }

    /// Sets the CHAP_A values to offer; `None` without CHAP or for an unknown algorithm.
    fn set_chap_algorithms(&mut self, value: &str) -> Option<()> {
        let chap = self.chap.as_mut()?;
        chap.algorithms = value
            .split(',')
            .map(chap_algorithm)
            .collect::<Option<_>>()?;
        Some(())
    }
}

/// The `connections` option: a session opens at least one connection, and at most as many as
/// MaxConnections can express.
fn connections(value: &str) -> Result<u16, Error> {
    KeyId::MaxConnections
        .parse_number(value)
        .map_err(|e| Error::Option(format!("connections={value}: {e}")))
}

/// Parses libiscsi digest names (`none`, `crc32c`, `crc32c-none`, `none-crc32c`) and the RFC
/// list form (`CRC32C,None`).
fn digests(value: &str) -> Option<Vec<DigestKind>> {
    value
        .split([',', '-', '_'])
        .map(|d| match d.to_ascii_lowercase().as_str() {
            "none" => Some(DigestKind::None),
            "crc32c" => Some(DigestKind::Crc32c),
            _ => None,
        })
        .collect()
}

fn chap_algorithm(name: &str) -> Option<ChapAlgorithm> {
    match name.to_ascii_lowercase().as_str() {
        "md5" | "5" => Some(ChapAlgorithm::Md5),
        "sha1" | "sha-1" | "6" => Some(ChapAlgorithm::Sha1),
        "sha256" | "sha-256" | "7" => Some(ChapAlgorithm::Sha256),
        "sha3-256" | "sha3_256" | "8" => Some(ChapAlgorithm::Sha3_256),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_proto::text::KeyValueError;

    #[test]
    fn url_arguments_and_keys_apply() {
        let url = IscsiUrl::parse(
            "iscsi://u%secretsecret1@h/iqn.a:b/0?header_digest=crc32c-none&target_user=t\
             &target_password=othersecret2&InitialR2T=Yes&MaxRecvDataSegmentLength=1500\
             &chap_algorithms=sha256,md5",
        )
        .unwrap();
        let o = ConnectOptions::from_url(&url).unwrap();
        assert_eq!(
            o.offer.header_digest,
            vec![DigestKind::Crc32c, DigestKind::None]
        );
        let chap = o.chap.unwrap();
        assert_eq!(chap.mutual, Some(("t".into(), "othersecret2".into())));
        assert_eq!(
            chap.algorithms,
            vec![ChapAlgorithm::Sha256, ChapAlgorithm::Md5]
        );
        assert!(o.offer.initial_r2t);
        assert_eq!(o.offer.max_recv_data_segment_length, 1500);
    }

    #[test]
    fn out_of_range_keys_are_errors_naming_key_and_range() {
        let mut o = ConnectOptions::default();
        let e = o.apply("MaxRecvDataSegmentLength", "100").unwrap_err();
        assert!(
            matches!(
                e,
                Error::Key(KeyValueError::OutOfRange {
                    key: KeyId::MaxRecvDataSegmentLength,
                    value: 100
                })
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "MaxRecvDataSegmentLength = 100 is outside 512..=16777215 (RFC 7143 section 13.12)"
        );
        for (key, value) in [
            ("MaxBurstLength", "511"),
            ("FirstBurstLength", "16777216"),
            ("MaxOutstandingR2T", "0"),
            ("MaxConnections", "0"),
            ("DefaultTime2Wait", "3601"),
            ("ErrorRecoveryLevel", "3"),
            ("iSCSIProtocolLevel", "32"),
        ] {
            let e = o.apply(key, value).unwrap_err();
            assert!(
                matches!(&e, Error::Key(KeyValueError::OutOfRange { key: k, .. }) if k.name() == key),
                "{key}={value}: {e:?}"
            );
        }
        assert_eq!(
            o.offer,
            ConnectOptions::default().offer,
            "nothing was moved into range"
        );
        o.apply("ErrorRecoveryLevel", "2").unwrap();
        assert_eq!(o.offer.error_recovery_level, 2);
        o.apply("ErrorRecoveryLevel", "1").unwrap();
        assert_eq!(o.offer.error_recovery_level, 1);
        o.apply("ErrorRecoveryLevel", "0").unwrap();
        assert_eq!(o.offer.error_recovery_level, 0);
        let url = IscsiUrl::parse("iscsi://h/iqn.a:b/0?MaxBurstLength=100").unwrap();
        assert!(matches!(
            ConnectOptions::from_url(&url),
            Err(Error::Key(KeyValueError::OutOfRange {
                key: KeyId::MaxBurstLength,
                ..
            }))
        ));
        o.apply("MaxRecvDataSegmentLength", "512").unwrap();
        o.apply("MaxOutstandingR2T", "0x10").unwrap();
        assert_eq!(o.offer.max_recv_data_segment_length, 512);
        assert_eq!(o.offer.max_outstanding_r2t, 16);
    }

    #[test]
    fn connections_and_policy() {
        let url = IscsiUrl::parse("iscsi://h/iqn.a:b/0?connections=4&policy=least-bytes").unwrap();
        let o = ConnectOptions::from_url(&url).unwrap();
        assert_eq!(o.connections, 4);
        assert_eq!(o.policy, Policy::from_name("least-bytes").unwrap());
        let mut o = ConnectOptions::default();
        for bad in ["0", "65536", "many"] {
            assert!(
                matches!(o.apply("connections", bad), Err(Error::Option(_))),
                "connections={bad}"
            );
        }
        assert!(matches!(
            o.apply("policy", "fastest"),
            Err(Error::Option(_))
        ));
        assert_eq!(o.connections, 1);
    }

    #[test]
    fn bad_options_are_named() {
        let mut o = ConnectOptions::default();
        assert!(matches!(
            o.apply("InitialR2T", "maybe"),
            Err(Error::Key(KeyValueError::Syntax {
                key: KeyId::InitialR2T,
                ..
            }))
        ));
        assert!(matches!(o.apply("Bogus", "1"), Err(Error::Option(_))));
        assert!(matches!(
            o.apply("TargetName", "iqn.x"),
            Err(Error::Key(KeyValueError::NotSettable { .. }))
        ));
        assert!(
            o.apply("target_user", "x").is_err(),
            "mutual CHAP without CHAP"
        );
    }
}
