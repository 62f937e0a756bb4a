//! The configuration written by [`to_toml`] reads back to the same configuration.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sluice_target::config::{
    AccessState, Acl, Backend, ChapCredentials, DigestPolicy, Keepalive, LunDef, PortalGroup,
    RbdImage, TargetConfig, TargetDef,
};

use super::super::*;

fn round_trip(config: &TargetConfig, service: &ServiceConfig) {
    let text = to_toml(config, service);
    let (back, back_service) = parse_all(&text, Path::new("/etc/sluice/saved.toml"))
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(&back, config, "{text}");
    assert_eq!(&back_service, service, "{text}");
    assert_eq!(
        to_toml(&back, &back_service),
        text,
        "written twice, the same text"
    );
}

#[test]
fn the_example_file_round_trips() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/target.toml");
    let src = std::fs::read_to_string(&path).unwrap();
    let (config, service) = parse_all(&src, &path).unwrap();
    round_trip(&config, &service);
}

#[test]
fn every_setting_off_its_default_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let file: PathBuf = dir.path().join("disk \"a\".img");
    std::fs::write(&file, vec![0; 4096]).unwrap();
    let (mut config, _) = parse_all(
        r#"
[[target]]
iqn = "iqn.2026-11.io.sluice:a"
acl = "open"
[[target.lun]]
backend = "memory"
size = "1G"
"#,
        Path::new("x.toml"),
    )
    .unwrap();
    config.portals = vec![
        "0.0.0.0:3261".parse().unwrap(),
        "[::1]:3262".parse().unwrap(),
        "127.0.0.2:3263".parse().unwrap(),
    ];
    config.portal_groups = vec![
        PortalGroup {
            tag: 1,
            portals: vec![config.portals[0]],
            alua_group: 1,
            alua_state: AccessState::ActiveOptimized,
        },
        PortalGroup {
            tag: 7,
            portals: vec![config.portals[1], config.portals[2]],
            alua_group: 70,
            alua_state: AccessState::Standby,
        },
    ];
    config.state_dir = Some("/var/lib/sluice".into());
    // Linux always has Reno built in.
    config.tcp_congestion = Some("reno".into());
    config.discovery_auth = Some(ChapCredentials {
        user: "disco".into(),
        secret: "0123456789abcdef".into(),
        mutual: None,
    });
    let o = &mut config.offer;
    o.max_recv_data_segment_length = 65_536;
    o.max_burst_length = 524_288;
    o.first_burst_length = 131_072;
    o.immediate_data = false;
    o.initial_r2t = true;
    o.max_outstanding_r2t = 4;
    o.data_pdu_in_order = false;
    o.data_sequence_in_order = false;
    o.header_digest = DigestPolicy::Require;
    o.data_digest = DigestPolicy::Forbid;
    o.default_time2wait = 5;
    o.default_time2retain = 60;
    o.error_recovery_level = 1;
    o.queue_depth = 64;
    o.max_connections = 2;
    o.phase_collapse = false;
    config.keepalive = Some(Keepalive {
        interval: Duration::from_millis(1500),
        timeout: Duration::from_secs(7),
    });
    config.recovery.data_ack_every = Some(16);
    config.recovery.sequence_timeout = Duration::from_millis(250);
    config.recovery.max_retained_statuses = 99;
    config.limits.max_sessions = 7;
    config.limits.max_connections = 70;
    config.limits.max_outstanding_bytes_per_connection = 1 << 30;
    config.limits.login_timeout = Duration::from_secs(3);
    config.limits.shutdown_grace = Duration::from_millis(100);
    config.targets.push(TargetDef {
        iqn: "iqn.2026-11.io.sluice:b".into(),
        alias: Some("second \u{e9}".into()),
        luns: vec![
            LunDef {
                number: 3,
                backend: Backend::File {
                    path: file,
                    size: Some(1 << 20),
                    direct: true,
                    huge_pages: false,
                },
                block_size: 4096,
                read_only: true,
                removable: true,
                serial: Some("SN-42".into()),
                options: sluice_target::config::LuOptions {
                    thin: true,
                    soft_threshold_percent: Some(90),
                    sanitize: Some(sluice_target::config::SanitizeOptions {
                        overwrite_bytes_per_s: Some(200 << 20),
                    }),
                },
            },
            LunDef {
                number: 300,
                backend: Backend::Null { size: 1 << 40 },
                block_size: 512,
                read_only: false,
                removable: false,
                serial: None,
                options: Default::default(),
            },
            LunDef {
                number: 301,
                backend: Backend::Rbd {
                    image: RbdImage {
                        pool: "pool-a".into(),
                        image: "disk \"1\"".into(),
                        conf_file: Some("/etc/ceph/cluster b.conf".into()),
                        client_id: Some("sluice.gw1".into()),
                        keyring: Some("/etc/ceph/ceph.client.sluice.gw1.keyring".into()),
                    },
                },
                block_size: 4096,
                read_only: false,
                removable: false,
                serial: None,
                options: Default::default(),
            },
        ],
        acl: Acl::Allow(vec![
            "iqn.1994-05.com.redhat:a".into(),
            "iqn.1991-05.com.microsoft:b".into(),
        ]),
        chap: Some(ChapCredentials {
            user: "u\"ser".into(),
            secret: "0123456789ab\\cd".into(),
            mutual: Some(("target".into(), "ba9876543210zz".into())),
        }),
    });
    let service = ServiceConfig {
        metrics: Some(MetricsConfig {
            listen: "10.0.0.1:9100".parse::<SocketAddr>().unwrap(),
            token_file: Some("/etc/sluice/metrics.token".into()),
        }),
        control: Some(ControlConfig {
            socket: Some("/run/sluice/control.sock".into()),
            group: Some("storage".into()),
            http: Some("127.0.0.1:9491".parse().unwrap()),
            token_file: Some("/etc/sluice/admin.token".into()),
        }),
    };
    round_trip(&config, &service);
    config.keepalive = None;
    config.recovery.data_ack_every = None;
    config.limits.max_outstanding_bytes_per_connection = usize::MAX;
    round_trip(&config, &ServiceConfig::default());
}
