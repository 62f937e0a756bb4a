//! Tests of the configuration file: parsing, defaults, and errors that name their line.

use std::path::Path;
use std::time::Duration;

use sluice_target::config::{
    Acl, Backend, DigestPolicy, Keepalive, Limits, OperationalOffer, TargetConfig,
};

use super::*;

fn parse(src: &str) -> Result<TargetConfig, ConfigFileError> {
    parse_str(src, Path::new("test.toml"))
}

/// Asserts that `src` fails at `line` with a message containing `needle`.
#[track_caller]
fn fails_at(src: &str, line: usize, needle: &str) -> ConfigFileError {
    let e = parse(src).expect_err("expected an error");
    assert_eq!(e.line, line, "wrong line for: {e}");
    assert!(e.message.contains(needle), "{needle:?} not in: {e}");
    assert!(
        e.to_string().starts_with(&format!("test.toml:{line}:")),
        "{e}"
    );
    e
}

const MINIMAL: &str = r#"
[[target]]
iqn = "iqn.2026-11.io.sluice:a"
acl = "open"

[[target.lun]]
backend = "memory"
size = "1G"
"#;

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
fn syntax_error_names_the_line() {
    fails_at(
        "listen = [\"127.0.0.1:3260\"\n\n[[target]\n",
        3,
        "invalid array: expected `]`",
    );
    fails_at("\n\nlisten = [\"127.0.0.1:3260\",]\nfoo = = 1\n", 4, "");
}

#[test]
fn unknown_keys_are_named_with_the_alternatives() {
    let e = fails_at(
        "\n[session]\nmax_burst_lenght = \"1M\"\n",
        3,
        "unknown key `max_burst_lenght`",
    );
    assert!(e.message.contains("expected one of"), "{e}");
    assert!(e.message.contains("`max_burst_length`"), "{e}");
    fails_at(
        &MINIMAL.replace("size = \"1G\"", "size = \"1G\"\nblocksize = 4096"),
        9,
        "unknown key `blocksize`",
    );
    fails_at(&format!("{MINIMAL}\n[oops]\n"), 10, "unknown key `oops`");
}

#[test]
fn bad_values_name_their_line() {
    fails_at(
        &MINIMAL.replace("\"1G\"", "\"1 gigabyte\""),
        8,
        "invalid size",
    );
    fails_at(
        &MINIMAL.replace("\"memory\"", "\"ram\""),
        7,
        "unknown value `ram`",
    );
    fails_at(
        "listen = [\"localhost:3260\"]\n",
        1,
        "invalid listen address",
    );
    fails_at("[keepalive]\ninterval = \"soon\"\n", 2, "invalid duration");
    fails_at(
        "[session]\nheader_digest = \"crc32c\"\n",
        2,
        "unknown value `crc32c`",
    );
    fails_at(
        "[session]\nerror_recovery_level = 3\n",
        2,
        "ErrorRecoveryLevel = 3 is outside 0..=2",
    );
    fails_at(
        "[session]\nmax_recv_data_segment_length = \"32M\"\n",
        2,
        "MaxRecvDataSegmentLength = 33554432 is outside 512..=16777215",
    );
}

#[test]
fn session_keys_are_bounded_by_the_key_table() {
    for (key, value, message) in [
        (
            "max_recv_data_segment_length",
            "100",
            "MaxRecvDataSegmentLength = 100 is outside 512..=16777215 (RFC 7143 section 13.12)",
        ),
        (
            "max_burst_length",
            "\"16M\"",
            "MaxBurstLength = 16777216 is outside 512..=16777215",
        ),
        (
            "first_burst_length",
            "511",
            "FirstBurstLength = 511 is outside",
        ),
        (
            "max_outstanding_r2t",
            "0",
            "MaxOutstandingR2T = 0 is outside 1..=65535",
        ),
        (
            "default_time2wait",
            "\"1h1s\"",
            "DefaultTime2Wait = 3601 is outside 0..=3600",
        ),
        (
            "default_time2retain",
            "3601",
            "DefaultTime2Retain = 3601 is outside 0..=3600",
        ),
        (
            "error_recovery_level",
            "3",
            "ErrorRecoveryLevel = 3 is outside 0..=2",
        ),
        (
            "max_connections",
            "0",
            "MaxConnections = 0 is outside 1..=65535 (RFC 7143 section 13.2)",
        ),
        (
            "max_connections",
            "65536",
            "MaxConnections = 65536 is outside",
        ),
    ] {
        fails_at(
            &format!("[session]\n{key} = {value}\n{MINIMAL}"),
            2,
            message,
        );
    }
    fails_at(
        "[session]\ndefault_time2wait = \"1500ms\"\n",
        2,
        "DefaultTime2Wait is a whole number of seconds",
    );
    fails_at(
        "[session]\nmax_outstanding_r2t = -1\n",
        2,
        "invalid value: integer `-1`",
    );
    let c = parse(&format!(
        "[session]\nmax_recv_data_segment_length = 512\nmax_burst_length = 16777215\n\
         first_burst_length = 512\nmax_outstanding_r2t = 65535\ndefault_time2wait = \"1h\"\n\
         error_recovery_level = 2\nmax_connections = 65535\n{MINIMAL}"
    ))
    .unwrap();
    assert_eq!(c.offer.max_connections, 65_535);
    assert_eq!(c.offer.max_recv_data_segment_length, 512);
    assert_eq!(c.offer.max_burst_length, 16_777_215);
    assert_eq!(c.offer.max_outstanding_r2t, 65_535);
    assert_eq!(c.offer.default_time2wait, 3600);
    assert_eq!(c.offer.error_recovery_level, 2);
}

#[test]
fn missing_acl_explains_the_choice() {
    let e = fails_at(&MINIMAL.replace("acl = \"open\"\n", ""), 3, "no `acl` key");
    assert!(e.message.contains("acl = \"open\""), "{e}");
    fails_at(
        &MINIMAL.replace("acl = \"open\"", "acl = \"all\""),
        4,
        "use acl = \"open\" or a list",
    );
    fails_at(
        &MINIMAL.replace("acl = \"open\"", "acl = []"),
        4,
        "admits nobody",
    );
    fails_at(
        &MINIMAL.replace(
            "acl = \"open\"",
            "acl = [\n  \"iqn.1994-05.com.redhat:ok\",\n  \"client2\",\n]",
        ),
        6,
        "\"client2\" is not a valid initiator name",
    );
}

#[test]
fn validation_errors_name_their_line() {
    // Bad target name (TargetConfig::validate).
    fails_at(
        &MINIMAL.replace("iqn.2026-11.io.sluice:a", "disk0"),
        3,
        "not a valid iSCSI name",
    );
    // Size not a multiple of the block size.
    fails_at(
        &MINIMAL.replace("\"1G\"", "1000"),
        8,
        "not a positive multiple",
    );
    // Bad block size.
    fails_at(
        &format!("{MINIMAL}block_size = 1024\n"),
        9,
        "block size 1024",
    );
    // Duplicate LUN: the second one is named.
    fails_at(
        &format!("{MINIMAL}\n[[target.lun]]\nnumber = 0\nbackend = \"null\"\nsize = \"1G\"\n"),
        11,
        "LUN 0 is defined twice",
    );
    // LUN number out of range.
    fails_at(
        &format!("{MINIMAL}\n[[target.lun]]\nnumber = 20000\nbackend = \"null\"\nsize = \"1G\"\n"),
        11,
        "outside 0..=16383",
    );
    // Duplicate target: the second one is named.
    fails_at(&format!("{MINIMAL}{MINIMAL}"), 11, "defined twice");
    // Target without LUNs.
    fails_at(
        "[[target]]\niqn = \"iqn.2026-11.io.sluice:a\"\nacl = \"open\"\n",
        2,
        "no LUNs",
    );
    // No targets at all.
    fails_at(
        "listen = [\"127.0.0.1:3260\"]\n",
        1,
        "no targets configured",
    );
    // FirstBurstLength > MaxBurstLength.
    fails_at(
        &format!("[session]\nmax_burst_length = \"64K\"\nfirst_burst_length = \"128K\"\n{MINIMAL}"),
        3,
        "FirstBurstLength",
    );
    // A key out of the RFC range.
    fails_at(
        &format!("[session]\n\nmax_recv_data_segment_length = 100\n{MINIMAL}"),
        3,
        "MaxRecvDataSegmentLength = 100",
    );
}

#[test]
fn chap_errors_name_their_line() {
    let chap = |extra: &str| {
        MINIMAL.replace(
            "acl = \"open\"",
            &format!("acl = \"open\"\nchap = {{ user = \"u\", secret = \"short\"{extra} }}"),
        )
    };
    fails_at(&chap(""), 5, "12 to 255 characters");
    let good = "\"0123456789abc\"";
    let src = chap("").replace("\"short\"", good);
    assert!(parse(&src).is_ok());
    fails_at(
        &chap(&format!(", mutual_user = \"t\", mutual_secret = {good}")).replace("\"short\"", good),
        5,
        "must differ",
    );
    fails_at(
        &chap(", mutual_user = \"t\"").replace("\"short\"", good),
        5,
        "needs mutual_secret",
    );
    fails_at(
        &format!("[discovery]\nchap = {{ user = \"d\", secret = \"tiny\" }}\n{MINIMAL}"),
        2,
        "CHAP secret for discovery",
    );
    fails_at(
        "[discovery]\nchap = { user = \"d\", secret = \"0123456789abc\", pass = 1 }\n",
        2,
        "unknown key `pass`",
    );
}

#[test]
fn backend_keys_are_checked() {
    fails_at(
        &MINIMAL.replace("size = \"1G\"", "size = \"1G\"\npath = \"/tmp/x\""),
        9,
        "only applies to backend = \"file\"",
    );
    fails_at(
        &MINIMAL.replace("size = \"1G\"", "size = \"1G\"\nhuge_pages = false"),
        9,
        "`huge_pages` only applies to backend = \"file\"",
    );
    fails_at(&MINIMAL.replace("size = \"1G\"\n", ""), 7, "needs a `size`");
    fails_at(
        &MINIMAL.replace("\"memory\"", "\"file\""),
        7,
        "needs a `path`",
    );
    fails_at(
        &MINIMAL.replace(
            "backend = \"memory\"",
            "backend = \"file\"\npath = \"/nonexistent-sluice-dir/disk.img\"",
        ),
        8,
        "does not exist",
    );
    fails_at(
        &MINIMAL.replace(
            "backend = \"memory\"\nsize = \"1G\"",
            "backend = \"file\"\npath = \"no-such-file.img\"",
        ),
        8,
        "add `size` to create it",
    );
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
fn error_display_underlines_the_value() {
    let e = fails_at(&MINIMAL.replace("\"1G\"", "\"1X\""), 8, "invalid size");
    let text = e.to_string();
    assert!(text.contains("8 | size = \"1X\""), "{text}");
    assert!(text.contains("|        ^^^^"), "{text}");
}
