//! Tests of the configuration file: what valid files become. Errors are tested in [`errors`]
//! and [`target_errors`].

mod errors;
mod portal_groups;
mod rbd;
mod roundtrip;
mod target_errors;

use std::path::Path;
use std::time::Duration;

use sluice_target::config::{
    Acl, Backend, DigestPolicy, Keepalive, Limits, OperationalOffer, TargetConfig, TargetRef,
};

use super::*;

fn parse(src: &str) -> Result<TargetConfig, ConfigFileError> {
    parse_str(src, Path::new("test.toml"))
}

const MINIMAL: &str = r#"
[[target]]
iqn = "iqn.2026-11.io.sluice:a"
acl = "open"

[[target.lun]]
backend = "memory"
size = "1G"
"#;

/// Parses `src`, which must fail at `line`.
#[track_caller]
fn error_at(src: &str, line: usize) -> ConfigFileError {
    let e = parse(src).expect_err("expected an error");
    assert_eq!(e.line, line, "wrong line for: {e}");
    assert!(
        e.to_string().starts_with(&format!("test.toml:{line}:")),
        "{e}"
    );
    e
}

/// What is wrong with `src`, which must fail at `line`.
#[track_caller]
fn kind_at(src: &str, line: usize) -> ErrorKind {
    *error_at(src, line).kind
}

/// The first target of [`MINIMAL`].
fn target_a() -> TargetRef {
    TargetRef {
        index: 0,
        iqn: "iqn.2026-11.io.sluice:a".into(),
    }
}

/// `MINIMAL` with `replacement` instead of `acl = "open"`.
fn with_acl(replacement: &str) -> String {
    MINIMAL.replace("acl = \"open\"", replacement)
}

#[test]
fn example_file_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/target.toml");
    let config = load(&path).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(config.targets.len(), 2);
    assert!(config.discovery_auth.is_some());
    let kinds: Vec<_> = config
        .targets
        .iter()
        .flat_map(|t| &t.luns)
        .map(|l| match l.backend {
            Backend::Memory { .. } => "memory",
            Backend::File { .. } => "file",
            Backend::Null { .. } => "null",
            Backend::Rbd { .. } => "rbd",
        })
        .collect();
    for k in ["memory", "file", "null"] {
        assert!(kinds.contains(&k), "example lacks a {k} LUN");
    }
    assert!(config
        .targets
        .iter()
        .any(|t| t.chap.as_ref().is_some_and(|c| c.mutual.is_some())));
    assert!(config
        .targets
        .iter()
        .any(|t| t.chap.as_ref().is_some_and(|c| c.mutual.is_none())));
    assert!(config
        .targets
        .iter()
        .any(|t| matches!(t.acl, Acl::Allow(_))));
    assert!(config.keepalive.is_some());
}

#[test]
fn minimal_file_and_defaults() {
    let c = parse(MINIMAL).unwrap();
    assert_eq!(c.portals, vec!["127.0.0.1:3260".parse().unwrap()]);
    assert_eq!(c.offer, OperationalOffer::default());
    assert_eq!(
        c.offer.max_connections, 8,
        "MC/S up to 8 connections by default"
    );
    assert_eq!(c.limits, Limits::default());
    assert_eq!(
        c.keepalive,
        Some(Keepalive::default()),
        "pings are on by default"
    );
    let lun = &c.targets[0].luns[0];
    assert_eq!((lun.number, lun.block_size, lun.read_only), (0, 512, false));
    assert!(!lun.removable);
    assert_eq!(lun.backend, Backend::Memory { size: 1 << 30 });
    assert_eq!(c.targets[0].acl, Acl::Open);
}

#[test]
fn removable_key() {
    let c = parse(&format!("{MINIMAL}removable = true\n")).unwrap();
    assert!(c.targets[0].luns[0].removable);
}

#[test]
fn provisioning_threshold_and_sanitize_keys() {
    use sluice_target::config::{LuOptions, SanitizeOptions};
    let c = parse(MINIMAL).unwrap();
    assert_eq!(c.targets[0].luns[0].options, LuOptions::default());
    let src = format!(
        "{MINIMAL}provisioning = \"thin\"\nsoft_threshold = 75\nsanitize = true\n\
         sanitize_rate = \"64M\"\n"
    );
    let o = parse(&src).unwrap().targets[0].luns[0].options;
    assert_eq!(
        o,
        LuOptions {
            thin: true,
            soft_threshold_percent: Some(75),
            sanitize: Some(SanitizeOptions {
                overwrite_bytes_per_s: Some(64 << 20)
            }),
        }
    );
    let thick = parse(&format!(
        "{MINIMAL}provisioning = \"thick\"\nsanitize = true\n"
    ))
    .unwrap();
    let o = thick.targets[0].luns[0].options;
    assert!(!o.thin && o.sanitize.is_some());
    assert!(matches!(
        kind_at(&format!("{MINIMAL}soft_threshold = 80\n"), 9),
        crate::config_file::kind::ErrorKind::ThresholdNeedsThin { .. }
    ));
    assert!(matches!(
        kind_at(
            &format!("{MINIMAL}provisioning = \"thin\"\nsoft_threshold = 0\n"),
            10
        ),
        crate::config_file::kind::ErrorKind::OutOfRange {
            key: crate::config_file::kind::FileKey::SoftThreshold,
            ..
        }
    ));
    assert!(matches!(
        kind_at(&format!("{MINIMAL}sanitize_rate = \"1M\"\n"), 9),
        crate::config_file::kind::ErrorKind::SanitizeRate { .. }
    ));
    assert!(matches!(
        kind_at(&format!("{MINIMAL}provisioning = \"sparse\"\n"), 9),
        crate::config_file::kind::ErrorKind::Syntax(_)
    ));
}

#[test]
fn lun_numbers_follow_the_previous_one() {
    let src = format!(
        "{MINIMAL}\n[[target.lun]]\nnumber = 5\nbackend = \"null\"\nsize = 4096\n\n[[target.lun]]\nbackend = \"null\"\nsize = \"1T\"\n"
    );
    let c = parse(&src).unwrap();
    let numbers: Vec<u16> = c.targets[0].luns.iter().map(|l| l.number).collect();
    assert_eq!(numbers, [0, 5, 6]);
}

#[test]
fn sessions_keys_accept_sizes_and_durations() {
    let src = format!(
        "listen = [\"[::1]:3261\", \"0.0.0.0\"]\n[session]\nmax_recv_data_segment_length = \"64K\"\nmax_burst_length = 1048576\nfirst_burst_length = \"64KiB\"\ndefault_time2wait = \"3s\"\ndefault_time2retain = 0\nheader_digest = \"require\"\nqueue_depth = 32\nmax_connections = 2\n[keepalive]\ninterval = \"20s\"\ntimeout = \"1m\"\n[limits]\nlogin_timeout = \"5s\"\nmax_outstanding_bytes_per_connection = \"16M\"\n{MINIMAL}"
    );
    let c = parse(&src).unwrap();
    assert_eq!(c.portals[0].to_string(), "[::1]:3261");
    assert_eq!(c.portals[1].to_string(), "0.0.0.0:3260");
    assert_eq!(c.offer.max_recv_data_segment_length, 65_536);
    assert_eq!(c.offer.first_burst_length, 65_536);
    assert_eq!(c.offer.default_time2wait, 3);
    assert_eq!(c.offer.header_digest, DigestPolicy::Require);
    assert_eq!(c.offer.data_digest, DigestPolicy::Allow);
    assert_eq!(c.offer.queue_depth, 32);
    assert_eq!(c.offer.max_connections, 2);
    assert_eq!(
        c.keepalive,
        Some(Keepalive {
            interval: Duration::from_secs(20),
            timeout: Duration::from_secs(60)
        })
    );
    assert_eq!(c.limits.login_timeout, Duration::from_secs(5));
    assert_eq!(c.limits.max_outstanding_bytes_per_connection, 16 << 20);
}

#[test]
fn session_keys_take_their_whole_table_range() {
    let c = parse(&format!(
        "[session]\nmax_recv_data_segment_length = 512\nmax_burst_length = 16777215\n\
         first_burst_length = 512\nmax_outstanding_r2t = 65535\ndefault_time2wait = \"1h\"\n\
         default_time2retain = 0\nerror_recovery_level = 0\nmax_connections = 65535\n{MINIMAL}"
    ))
    .unwrap();
    assert_eq!(c.offer.max_recv_data_segment_length, 512);
    assert_eq!(c.offer.max_burst_length, 16_777_215);
    assert_eq!(c.offer.first_burst_length, 512);
    assert_eq!(c.offer.max_outstanding_r2t, 65_535);
    assert_eq!(c.offer.default_time2wait, 3600);
    assert_eq!(c.offer.default_time2retain, 0);
    assert_eq!(c.offer.error_recovery_level, 0);
    assert_eq!(c.offer.max_connections, 65_535);
}

#[test]
fn recovery_table_sets_the_error_recovery_settings() {
    let c = parse(&format!(
        "[session]\nerror_recovery_level = 1\n[recovery]\ndata_ack_every = 8\n\
         sequence_timeout = \"250ms\"\nmax_retained_statuses = 4096\n\
         max_retained_bytes = \"64M\"\n{MINIMAL}"
    ))
    .unwrap();
    assert_eq!(c.offer.error_recovery_level, 1);
    assert_eq!(c.recovery.data_ack_every, Some(8));
    assert_eq!(c.recovery.sequence_timeout, Duration::from_millis(250));
    assert_eq!(c.recovery.max_retained_statuses, 4096);
    assert_eq!(c.recovery.max_retained_bytes, 64 << 20);
    let c = parse(&format!("[recovery]\ndata_ack_every = 0\n{MINIMAL}")).unwrap();
    assert_eq!(
        c.recovery.data_ack_every, None,
        "0 turns DataACK requests off"
    );
    let c = parse(MINIMAL).unwrap();
    assert_eq!(c.recovery, sluice_proto::target::RecoveryConfig::default());
}

#[test]
fn relative_paths_follow_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let src = MINIMAL.replace(
        "backend = \"memory\"",
        "backend = \"file\"\npath = \"disk.img\"\ndirect = true\nhuge_pages = false",
    );
    let c = parse_str(&src, &dir.path().join("t.toml")).unwrap();
    assert_eq!(
        c.targets[0].luns[0].backend,
        Backend::File {
            path: dir.path().join("disk.img"),
            size: Some(1 << 30),
            direct: true,
            huge_pages: false
        }
    );
}

#[test]
fn tcp_congestion_is_taken_as_written_and_absent_by_default() {
    // Reno is built into every Linux kernel, so the check against the host passes.
    let c = parse(&format!("tcp_congestion = \"reno\"\n{MINIMAL}")).unwrap();
    assert_eq!(c.tcp_congestion.as_deref(), Some("reno"));
    assert_eq!(parse(MINIMAL).unwrap().tcp_congestion, None);
}
