//! Errors of the configuration file's syntax, global tables, ACLs and CHAP: each is of the
//! expected kind, concerns the expected target or key, and points at the expected line. The
//! words of each kind are checked once.

use sluice_proto::text::{KeyId, KeyValueError};
use sluice_target::config::{ChapOwner, ConfigError, SecretRole};

use super::{kind_at, parse, target_a, with_acl, MINIMAL};
use crate::config_file::kind::{ErrorKind, FileKey};

#[test]
fn what_the_toml_reader_refuses_is_syntax() {
    let cases = [
        ("listen = [\"127.0.0.1:3260\"\n\n[[target]\n", 3),
        ("\n\nlisten = [\"127.0.0.1:3260\",]\nfoo = = 1\n", 4),
        ("\n[session]\nmax_burst_lenght = \"1M\"\n", 3),
        (
            &MINIMAL.replace("size = \"1G\"", "size = \"1G\"\nblocksize = 4096"),
            9,
        ),
        (&format!("{MINIMAL}\n[oops]\n"), 10),
        (&MINIMAL.replace("\"1G\"", "\"1 gigabyte\""), 8),
        (&MINIMAL.replace("\"memory\"", "\"ram\""), 7),
        ("listen = [\"localhost:3260\"]\n", 1),
        ("[keepalive]\ninterval = \"soon\"\n", 2),
        ("[session]\nheader_digest = \"crc32c\"\n", 2),
        ("[session]\nmax_outstanding_r2t = -1\n", 2),
        (&with_acl("acl = \"all\""), 4),
        (
            "[discovery]\nchap = { user = \"d\", secret = \"0123456789abc\", pass = 1 }\n",
            2,
        ),
    ];
    for (src, line) in cases {
        let kind = kind_at(src, line);
        assert!(matches!(kind, ErrorKind::Syntax(_)), "{src}: {kind:?}");
    }
    // The reader's words, in the file's vocabulary: keys, not fields.
    let text = kind_at("\n[session]\nmax_burst_lenght = \"1M\"\n", 3).to_string();
    assert!(
        text.starts_with("unknown key `max_burst_lenght`, expected one of")
            && text.contains("`max_burst_length`"),
        "{text}"
    );
}

#[test]
fn session_keys_out_of_their_table_range() {
    let cases = [
        (
            "max_recv_data_segment_length",
            "100",
            KeyId::MaxRecvDataSegmentLength,
            100,
        ),
        (
            "max_recv_data_segment_length",
            "\"32M\"",
            KeyId::MaxRecvDataSegmentLength,
            32 << 20,
        ),
        (
            "max_burst_length",
            "\"16M\"",
            KeyId::MaxBurstLength,
            16 << 20,
        ),
        ("first_burst_length", "511", KeyId::FirstBurstLength, 511),
        ("max_outstanding_r2t", "0", KeyId::MaxOutstandingR2T, 0),
        (
            "default_time2wait",
            "\"1h1s\"",
            KeyId::DefaultTime2Wait,
            3601,
        ),
        (
            "default_time2retain",
            "3601",
            KeyId::DefaultTime2Retain,
            3601,
        ),
        ("error_recovery_level", "3", KeyId::ErrorRecoveryLevel, 3),
        ("max_connections", "0", KeyId::MaxConnections, 0),
        ("max_connections", "65536", KeyId::MaxConnections, 65_536),
    ];
    for (name, text, key, value) in cases {
        assert_eq!(
            kind_at(&format!("[session]\n{name} = {text}\n{MINIMAL}"), 2),
            ErrorKind::Key(KeyValueError::OutOfRange { key, value }),
            "{name} = {text}"
        );
    }
    assert_eq!(
        kind_at("[session]\nerror_recovery_level = 3\n", 2).to_string(),
        "ErrorRecoveryLevel = 3 is outside 0..=2 (RFC 7143 section 13.20)"
    );
    let kind = kind_at("[session]\ndefault_time2wait = \"1500ms\"\n", 2);
    assert_eq!(kind, ErrorKind::WholeSeconds(KeyId::DefaultTime2Wait));
    assert_eq!(
        kind.to_string(),
        "DefaultTime2Wait is a whole number of seconds (RFC 7143 section 13.15)"
    );
    let kind = kind_at(&format!("[session]\nqueue_depth = 0\n{MINIMAL}"), 2);
    assert_eq!(
        kind,
        ErrorKind::OutOfRange {
            key: FileKey::QueueDepth,
            value: 0,
            min: 1,
            max: 65_536
        }
    );
    assert_eq!(kind.to_string(), "queue_depth = 0 is outside 1..=65536");
}

#[test]
fn listen_keepalive_and_limits() {
    let kind = kind_at(&format!("listen = []\n{MINIMAL}"), 1);
    assert_eq!(kind, ErrorKind::NoListen);
    assert!(kind.to_string().starts_with("listen = [] leaves nothing"));
    let kind = kind_at("listen = [\"127.0.0.1\",\n\"127.0.0.1:3260\"]\n", 2);
    assert_eq!(
        kind,
        ErrorKind::ListenTwice("127.0.0.1:3260".parse().unwrap())
    );
    assert_eq!(kind.to_string(), "127.0.0.1:3260 is listed twice");
    let kind = kind_at("[keepalive]\ninterval = 0\n", 2);
    assert_eq!(kind, ErrorKind::Zero(FileKey::KeepaliveInterval));
    assert!(kind.to_string().contains("use enabled = false"), "{kind}");
    let kind = kind_at("[keepalive]\ntimeout = \"0s\"\n", 2);
    assert_eq!(kind, ErrorKind::Zero(FileKey::KeepaliveTimeout));
    let kind = kind_at("[recovery]\nsequence_timeout = 0\n", 2);
    assert_eq!(kind, ErrorKind::Zero(FileKey::SequenceTimeout));
    assert_eq!(kind.to_string(), "sequence_timeout must be above zero");
    assert!(matches!(
        kind_at("[recovery]\ndata_ack_every = -1\n", 2),
        ErrorKind::OutOfRange {
            key: FileKey::DataAckEvery,
            value: -1,
            ..
        }
    ));
    assert!(matches!(
        kind_at("[recovery]\nmax_retained_bytes = 0\n", 2),
        ErrorKind::Zero(FileKey::MaxRetainedBytes)
    ));
    assert!(matches!(
        kind_at("[recovery]\nmax_retained_statuses = 0\n", 2),
        ErrorKind::OutOfRange {
            key: FileKey::MaxRetainedStatuses,
            value: 0,
            ..
        }
    ));
    let kind = kind_at("[limits]\nlogin_timeout = 0\n", 2);
    assert_eq!(kind, ErrorKind::Zero(FileKey::LoginTimeout));
    assert_eq!(kind.to_string(), "login_timeout must be above zero");
    let kind = kind_at("[limits]\nmax_outstanding_bytes_per_connection = 0\n", 2);
    assert_eq!(kind, ErrorKind::Zero(FileKey::MaxOutstandingBytes));
    assert!(matches!(
        kind_at("[limits]\nmax_sessions = 0\n", 2),
        ErrorKind::OutOfRange {
            key: FileKey::MaxSessions,
            value: 0,
            ..
        }
    ));
}

#[test]
fn acl_errors_name_the_target() {
    let kind = kind_at(&MINIMAL.replace("acl = \"open\"\n", ""), 3);
    assert_eq!(kind, ErrorKind::NoAcl(target_a()));
    let text = kind.to_string();
    assert!(
        text.starts_with("target iqn.2026-11.io.sluice:a has no `acl` key")
            && text.contains("acl = \"open\""),
        "{text}"
    );
    let kind = kind_at(&with_acl("acl = []"), 4);
    assert_eq!(kind, ErrorKind::EmptyAcl(target_a()));
    assert!(kind.to_string().contains("admits nobody"), "{kind}");
    let kind = kind_at(
        &with_acl("acl = [\n  \"iqn.1994-05.com.redhat:ok\",\n  \"client2\",\n]"),
        6,
    );
    assert_eq!(
        kind,
        ErrorKind::BadInitiatorName {
            target: target_a(),
            name: "client2".into()
        }
    );
    assert!(
        kind.to_string()
            .starts_with("\"client2\" is not a valid initiator name"),
        "{kind}"
    );
    let kind = kind_at(
        &MINIMAL.replace("acl = \"open\"", "acl = \"open\"\nalias = \"a\\tb\""),
        5,
    );
    assert_eq!(kind, ErrorKind::BadAlias(target_a()));
    assert!(kind.to_string().contains("printable"), "{kind}");
}

#[test]
fn chap_errors_name_owner_and_secret() {
    let chap = |extra: &str| {
        with_acl(&format!(
            "acl = \"open\"\nchap = {{ user = \"u\", secret = \"short\"{extra} }}"
        ))
    };
    let good = "\"0123456789abc\"";
    assert!(parse(&chap("").replace("\"short\"", good)).is_ok());
    let owner = ChapOwner::Target(target_a());
    assert_eq!(
        kind_at(&chap(""), 5),
        ErrorKind::Invalid(ConfigError::ChapSecret {
            owner: owner.clone(),
            secret: SecretRole::Initiator
        })
    );
    let src =
        chap(&format!(", mutual_user = \"t\", mutual_secret = {good}")).replace("\"short\"", good);
    assert_eq!(
        kind_at(&src, 5),
        ErrorKind::Invalid(ConfigError::ChapSameSecret(owner.clone()))
    );
    let src = chap(", mutual_user = \"t\", mutual_secret = \"tiny\"").replace("\"short\"", good);
    assert_eq!(
        kind_at(&src, 5),
        ErrorKind::Invalid(ConfigError::ChapSecret {
            owner: owner.clone(),
            secret: SecretRole::Mutual
        })
    );
    let kind = kind_at(&chap(", mutual_user = \"t\"").replace("\"short\"", good), 5);
    assert_eq!(
        kind,
        ErrorKind::HalfMutualChap {
            owner: owner.clone(),
            given: FileKey::MutualUser
        }
    );
    assert_eq!(
        kind.to_string(),
        "iqn.2026-11.io.sluice:a: mutual_user needs mutual_secret as well"
    );
    let kind = kind_at(&chap("").replace("user = \"u\"", "user = \"\""), 5);
    assert_eq!(
        kind,
        ErrorKind::EmptyChapUser {
            owner,
            role: SecretRole::Initiator
        }
    );
    assert_eq!(
        kind.to_string(),
        "iqn.2026-11.io.sluice:a: CHAP user must not be empty"
    );
    let src = format!("[discovery]\nchap = {{ user = \"d\", secret = \"tiny\" }}\n{MINIMAL}");
    assert_eq!(
        kind_at(&src, 2),
        ErrorKind::Invalid(ConfigError::ChapSecret {
            owner: ChapOwner::Discovery,
            secret: SecretRole::Initiator
        })
    );
}

#[test]
fn an_unknown_tcp_congestion_is_named_at_its_line() {
    let src = format!("\ntcp_congestion = \"no-such-cc\"\n{MINIMAL}");
    let kind = kind_at(&src, 2);
    assert!(
        matches!(kind, ErrorKind::Invalid(ConfigError::TcpCongestion(_))),
        "{kind:?}"
    );
    let text = kind.to_string();
    assert!(
        text.starts_with(
            "TCP congestion control \"no-such-cc\" is not available on this host (available: "
        ) && text.contains("reno"),
        "{text}"
    );
    // Not a string: the reader refuses it.
    let kind = kind_at(&format!("tcp_congestion = 1\n{MINIMAL}"), 1);
    assert!(matches!(kind, ErrorKind::Syntax(_)), "{kind:?}");
}
