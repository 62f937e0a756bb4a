//! Operating a running target: LUs added, grown and removed, ACL changes, closing a session,
//! applying a whole new configuration, and the counters the status reports, each checked
//! against what a scripted initiator sees on the wire.

mod support;

use bytes::Bytes;
use sluice_proto::pdu::Pdu;
use sluice_proto::seq::Lun;
use sluice_target::config::{Acl, Backend, LunDef, TargetConfig};
use sluice_target::status::{Op, StatusKind, LATENCY_BOUNDS_NS};
use sluice_target::ChangeError;
use support::*;

const OPERATOR: &str = "test";

fn memory_lun(number: u16, size: u64) -> LunDef {
    LunDef::new(number, Backend::Memory { size }, BLOCK as u32)
}

/// Runs a command without data out on `lun`.
async fn command_on(p: &mut Peer, lun: u16, cdb: &[u8], edtl: u32) -> Completion {
    let mut cmd = p.scsi_command(cdb, edtl > 0, false, edtl);
    cmd.lun = Lun(sluice_scsi::encode_lun(lun));
    let itt = cmd.itt;
    p.send(&Pdu::ScsiCommand(cmd)).await;
    p.completion(itt).await
}

fn report_luns() -> [u8; 12] {
    [0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]
}

/// The LUN numbers of REPORT LUNS data (peripheral addressing, below 256).
fn reported(data: &[u8]) -> Vec<u8> {
    data[8..].chunks(8).map(|e| e[1]).collect()
}

fn read_capacity10() -> [u8; 10] {
    [0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0]
}

#[tokio::test]
async fn an_added_lun_is_reported_changed_and_served() {
    let h = Harness::new(config());
    let (mut p, _task) = h.logged_in().await;
    let report = h
        .target
        .add_lun(TARGET, memory_lun(1, 1 << 20), OPERATOR)
        .unwrap();
    assert_eq!(report.changes, [format!("target {TARGET}: LUN 1: added")]);
    let c = p.command(&tur(), 0).await;
    assert_eq!(
        c.sense_code(),
        Some((6, 0x3F, 0x0E)),
        "REPORTED LUNS DATA HAS CHANGED"
    );
    let c = p.command(&report_luns(), 256).await;
    assert_eq!(reported(&c.data), [0, 1]);
    // LUN 1's first command reports its power-on, then it serves.
    let c = command_on(&mut p, 1, &tur(), 0).await;
    assert_eq!(c.sense_code().map(|s| s.1), Some(0x29));
    let c = command_on(&mut p, 1, &read_capacity10(), 8).await;
    assert_eq!(c.status, 0);
    assert_eq!(
        u32::from_be_bytes(c.data[..4].try_into().unwrap()),
        (1 << 20) / BLOCK as u32 - 1
    );
    let again = h.target.add_lun(TARGET, memory_lun(1, 1 << 20), OPERATOR);
    assert!(matches!(again, Err(ChangeError::LunExists { lun: 1, .. })));

    h.target.remove_lun(TARGET, 1, OPERATOR).unwrap();
    let c = p.command(&tur(), 0).await;
    assert_eq!(c.sense_code(), Some((6, 0x3F, 0x0E)));
    let c = p.command(&report_luns(), 256).await;
    assert_eq!(reported(&c.data), [0]);
    let c = command_on(&mut p, 1, &tur(), 0).await;
    assert_eq!(
        c.sense_code(),
        Some((5, 0x25, 0x00)),
        "LOGICAL UNIT NOT SUPPORTED"
    );
    let last = h.target.remove_lun(TARGET, 0, OPERATOR);
    assert!(matches!(last, Err(ChangeError::Invalid(_))), "{last:?}");
}

#[tokio::test]
async fn a_grown_lun_keeps_its_data_and_reports_its_new_capacity() {
    let h = Harness::new(config());
    let (mut p, _task) = h.logged_in().await;
    let data = pattern(BLOCK * 4, 3);
    assert_eq!(p.write_immediate(100, &data).await.status, 0);
    let old_blocks = (LUN_SIZE / BLOCK as u64) as u32;
    let beyond = p.write_immediate(old_blocks, &data).await;
    assert_eq!(
        beyond.sense_code(),
        Some((5, 0x21, 0x00)),
        "LBA out of range"
    );

    h.target
        .resize_lun(TARGET, 0, 2 * LUN_SIZE, OPERATOR)
        .unwrap();
    let c = p.command(&read_capacity10(), 8).await;
    assert_eq!(
        c.sense_code(),
        Some((6, 0x2A, 0x09)),
        "CAPACITY DATA HAS CHANGED"
    );
    let c = p.command(&read_capacity10(), 8).await;
    assert_eq!(c.status, 0);
    assert_eq!(
        u32::from_be_bytes(c.data[..4].try_into().unwrap()),
        2 * old_blocks - 1
    );
    assert_eq!(p.read(100, 4).await, data, "the data stayed");
    assert_eq!(p.write_immediate(old_blocks, &data).await.status, 0);
    assert_eq!(p.read(old_blocks, 4).await, data);

    let shrink = h.target.resize_lun(TARGET, 0, LUN_SIZE, OPERATOR);
    assert!(
        matches!(shrink, Err(ChangeError::Shrink { .. })),
        "{shrink:?}"
    );
    let status = h.target.status();
    assert_eq!(status.targets[0].luns[0].blocks, 2 * u64::from(old_blocks));
    assert_eq!(
        h.target.config().targets[0].luns[0].backend,
        Backend::Memory { size: 2 * LUN_SIZE }
    );
}

#[tokio::test]
async fn a_file_lun_grows_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lun.img");
    let mut config = config();
    config.targets[0].luns[0].backend = Backend::File {
        path: path.clone(),
        size: Some(LUN_SIZE),
        direct: false,
        huge_pages: false,
    };
    let h = Harness::new(config);
    let (mut p, _task) = h.logged_in().await;
    let data = pattern(BLOCK, 9);
    assert_eq!(p.write_immediate(7, &data).await.status, 0);
    h.target
        .resize_lun(TARGET, 0, 3 * LUN_SIZE, OPERATOR)
        .unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 * LUN_SIZE);
    assert_eq!(
        p.command(&tur(), 0).await.sense_code(),
        Some((6, 0x2A, 0x09))
    );
    assert_eq!(p.read(7, 1).await, data);
    let last = (3 * LUN_SIZE / BLOCK as u64 - 1) as u32;
    assert_eq!(p.write_immediate(last, &data).await.status, 0);
    assert_eq!(p.read(last, 1).await, data);
}

#[tokio::test]
async fn an_initiator_taken_off_the_acl_is_closed_and_refused() {
    const OTHER: &str = "iqn.2026-11.io.sluice.test:other";
    let mut config = config();
    config.targets[0].acl = Acl::Allow(vec![INITIATOR.into(), OTHER.into()]);
    let h = Harness::new(config);
    let (mut kept, _a) = h.logged_in().await;
    let other = LoginOpts {
        initiator: OTHER.into(),
        ..LoginOpts::normal()
    };
    let (mut gone, _b) = h.logged_in_with(&other).await;
    assert_eq!(h.target.status().sessions.len(), 2);

    let report = h.target.acl_remove(TARGET, OTHER, OPERATOR).unwrap();
    assert_eq!(report.sessions_closed, 1);
    gone.expect_closed().await;
    kept.assert_alive().await;
    let (mut again, _c) = h.connect();
    let refused = again.login(&other).await.unwrap_err();
    assert_eq!((refused.status.class, refused.status.detail), (2, 2));

    assert!(h.target.acl_remove(TARGET, OTHER, OPERATOR).is_err());
    assert!(
        h.target.acl_remove(TARGET, INITIATOR, OPERATOR).is_err(),
        "the last name stays"
    );
    h.target.acl_add(TARGET, OTHER, OPERATOR).unwrap();
    let (mut back, _d) = h.connect();
    back.login(&other).await.expect("admitted again");
    let status = h.target.status();
    let logins = &status.targets[0].logins;
    assert_eq!(logins.ok, 3);
    assert_eq!(
        logins.failed[sluice_target::status::LoginFailure::Authorization as usize],
        1
    );
}

#[tokio::test]
async fn a_closed_session_ends_and_others_go_on() {
    let h = Harness::new(config());
    let (mut a, _a) = h.logged_in().await;
    let (mut b, _b) = h.logged_in_with(&LoginOpts::normal().with_isid(2)).await;
    let status = h.target.status();
    assert_eq!(status.sessions.len(), 2);
    let first = &status.sessions[0];
    assert_eq!(first.initiator, INITIATOR);
    assert_eq!(first.target.as_deref(), Some(TARGET));
    assert_eq!(first.connections.len(), 1);
    h.target.close_session(first.id, OPERATOR).unwrap();
    a.expect_closed().await;
    b.assert_alive().await;
    assert!(matches!(
        h.target.close_session(first.id, OPERATOR),
        Err(ChangeError::NoSession(_))
    ));
}

#[tokio::test]
async fn a_new_configuration_leaves_untouched_sessions_alone() {
    let h = Harness::new(config());
    let (mut p, _task) = h.logged_in().await;
    let before = h.target.config();

    let mut bad = before.clone();
    bad.targets[0].luns.push(memory_lun(0, 1 << 20));
    let refused = h.target.apply(bad, OPERATOR);
    assert!(
        matches!(refused, Err(ChangeError::Invalid(_))),
        "{refused:?}"
    );
    assert_eq!(h.target.config(), before, "nothing changed");

    let mut missing = before.clone();
    missing.targets[0].luns.push(LunDef {
        number: 1,
        backend: Backend::File {
            path: "/nonexistent-sluice-dir/x.img".into(),
            size: None,
            direct: false,
            huge_pages: false,
        },
        ..memory_lun(1, 0)
    });
    assert!(matches!(
        h.target.apply(missing, OPERATOR),
        Err(ChangeError::Open { lun: 1, .. })
    ));
    assert_eq!(h.target.config(), before);

    // The targets' SCSI ports (portal groups and their ALUA states) and the state directory
    // stay as the target started.
    let mut regrouped = before.clone();
    regrouped.portal_groups = vec![sluice_target::config::PortalGroup {
        tag: 2,
        portals: regrouped.portals.clone(),
        alua_group: 2,
        alua_state: sluice_target::config::AccessState::ActiveOptimized,
    }];
    assert!(matches!(
        h.target.apply(regrouped, OPERATOR),
        Err(ChangeError::NeedsRestart(_))
    ));
    let mut stateful = before.clone();
    stateful.state_dir = Some("/var/lib/sluice".into());
    assert!(matches!(
        h.target.apply(stateful, OPERATOR),
        Err(ChangeError::NeedsRestart(_))
    ));
    assert_eq!(h.target.config(), before);

    let mut new = before.clone();
    new.offer.max_burst_length = 65_536;
    new.offer.first_burst_length = 65_536;
    new.limits.max_sessions = 10;
    let mut second = support::target_def("iqn.2026-11.io.sluice:second");
    second.luns[0].number = 3;
    new.targets.push(second);
    let report = h.target.apply(new.clone(), OPERATOR).unwrap();
    assert_eq!(report.sessions_closed, 0);
    assert!(report
        .changes
        .contains(&"target iqn.2026-11.io.sluice:second: added".to_string()));
    assert_eq!(h.target.config(), new);
    p.assert_alive().await;
    assert_eq!(p.read(0, 1).await.len(), BLOCK, "the session still reads");
    let second = LoginOpts {
        target: Some("iqn.2026-11.io.sluice:second".into()),
        ..LoginOpts::normal().with_isid(5)
    };
    let (mut q, _q) = h.connect();
    let outcome = q.login(&second).await.expect("the new target serves");
    assert_eq!(
        outcome.params.max_burst_length, 65_536,
        "new sessions negotiate anew"
    );
    assert_ne!(
        p.outcome.as_ref().unwrap().params.max_burst_length,
        65_536,
        "the old session keeps what it negotiated"
    );

    // Removing the target closes its sessions, and only those.
    let report = h.target.apply(before.clone(), OPERATOR).unwrap();
    assert_eq!(report.sessions_closed, 1);
    q.expect_closed().await;
    p.assert_alive().await;
}

#[tokio::test]
async fn counters_match_the_io_exactly() {
    let h = Harness::new(config());
    let (mut p, _task) = h.logged_in().await;
    // clear_unit_attention sent TEST UNIT READYs: one CHECK CONDITION, one GOOD.
    let (reads, writes) = (5u32, 3u32);
    for i in 0..reads {
        p.read(i * 8, 8).await;
    }
    for i in 0..writes {
        p.write_immediate(i * 2, &pattern(2 * BLOCK, i as u8)).await;
    }
    // One write whose data is solicited by an R2T (more than FirstBurstLength is not
    // needed: without immediate data the whole transfer is solicited).
    let mut cmd = p.scsi_command(&write10(64, 2), false, true, 2 * BLOCK as u32);
    cmd.data = Bytes::new();
    let itt = cmd.itt;
    p.send(&Pdu::ScsiCommand(cmd)).await;
    let r2t = p.expect_r2t().await;
    let data = pattern(2 * BLOCK, 7);
    let out = p.data_out(&r2t, 0, 0, &data, true);
    p.send(&out).await;
    assert_eq!(p.completion(itt).await.status, 0);
    // A command out of range: ILLEGAL REQUEST.
    assert_eq!(
        p.command(&read10(u32::MAX - 1, 1), BLOCK as u32)
            .await
            .sense_code()
            .map(|s| s.0),
        Some(5)
    );

    let status = h.target.status();
    let lu = &status.targets[0].luns[0].counts;
    let (r, w, o) = (Op::Read as usize, Op::Write as usize, Op::Other as usize);
    assert_eq!(lu.commands[r], u64::from(reads) + 1);
    assert_eq!(lu.commands[w], u64::from(writes) + 1);
    assert_eq!(lu.commands[o], 2, "the two TEST UNIT READYs");
    assert_eq!(lu.read_bytes, u64::from(reads) * 8 * BLOCK as u64);
    assert_eq!(lu.write_bytes, u64::from(writes + 1) * 2 * BLOCK as u64);
    assert_eq!(lu.latency[r].count(), u64::from(reads) + 1);
    assert_eq!(lu.latency[w].count(), u64::from(writes) + 1);
    assert_eq!(lu.latency[o].count(), 2);
    assert_eq!(lu.latency[r].buckets.len(), LATENCY_BOUNDS_NS.len() + 1);
    assert!(lu.latency[r].sum_ns > 0);
    assert_eq!(
        lu.status[StatusKind::Good as usize],
        u64::from(reads + writes) + 2
    );
    assert_eq!(lu.status[StatusKind::CheckCondition as usize], 2);
    assert_eq!(lu.sense_keys[6], 1, "UNIT ATTENTION");
    assert_eq!(lu.sense_keys[5], 1, "ILLEGAL REQUEST");

    let session = &status.sessions[0];
    let conn = &session.connections[0].counts;
    assert_eq!(conn.commands[r], u64::from(reads) + 1);
    assert_eq!(conn.commands[w], u64::from(writes) + 1);
    assert_eq!(conn.r2ts, 1);
    assert_eq!(conn.data_in_bytes, u64::from(reads) * 8 * BLOCK as u64);
    assert_eq!(
        conn.data_out_bytes,
        u64::from(writes + 1) * 2 * BLOCK as u64
    );
    assert_eq!(
        conn.responses[StatusKind::Good as usize],
        u64::from(reads + writes) + 2
    );
    assert_eq!(conn.pdus_received, u64::from(reads + writes) + 2 + 2 + 1);
    assert_eq!(session.tasks, 0);

    // The LU's totals outlive the session.
    drop(p);
    let deadline = std::time::Instant::now() + ANSWER;
    while !h.target.status().sessions.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the session did not end"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let after = h.target.status();
    assert_eq!(after.targets[0].luns[0].counts, *lu);
}

#[tokio::test]
async fn the_status_names_what_a_config_file_would() {
    let mut config: TargetConfig = config();
    config.targets[0].luns.push(memory_lun(2, 1 << 20));
    let h = Harness::new(config);
    let status = h.target.status();
    let t = &status.targets[0];
    assert_eq!(t.iqn, TARGET);
    assert_eq!(t.acl, Acl::Open);
    assert_eq!(
        t.luns
            .iter()
            .map(|l| (l.number, l.blocks))
            .collect::<Vec<_>>(),
        [(0, LUN_SIZE / BLOCK as u64), (2, 2048)]
    );
    assert_eq!(t.luns[0].serial.len(), 16);
}

/// LBPME of READ CAPACITY(16) on `lun`: whether the LU the session reaches is thin.
async fn thin_on(p: &mut Peer, lun: u16) -> bool {
    let mut cdb = [0u8; 16];
    cdb[0] = 0x9E;
    cdb[1] = 0x10;
    cdb[13] = 32;
    let c = command_on(p, lun, &cdb, 32).await;
    assert_eq!(c.status, 0, "READ CAPACITY(16): {:?}", c.sense_code());
    c.data[14] & 0x80 != 0
}

/// A reload of a configuration with two portal groups (one standby) and a thin LU with a
/// soft threshold: applied as it was, it keeps the LU (and its provisioning); a change of the
/// LU's provisioning replaces the LU with one provisioned as asked; the portal groups are kept
/// throughout, and changing one's ALUA state needs a restart.
#[tokio::test]
async fn a_reload_keeps_portal_groups_and_thin_luns() {
    use sluice_target::config::{AccessState, LuOptions, PortalGroup};
    let mut cfg = config();
    cfg.portals = vec![
        "127.0.0.1:3260".parse().unwrap(),
        "127.0.0.2:3260".parse().unwrap(),
    ];
    cfg.portal_groups = vec![
        PortalGroup {
            tag: 1,
            portals: vec![cfg.portals[0]],
            alua_group: 1,
            alua_state: AccessState::ActiveOptimized,
        },
        PortalGroup {
            tag: 2,
            portals: vec![cfg.portals[1]],
            alua_group: 2,
            alua_state: AccessState::Standby,
        },
    ];
    cfg.targets[0].luns[0].options = LuOptions {
        thin: true,
        soft_threshold_percent: Some(80),
        sanitize: None,
    };
    let h = Harness::new(cfg.clone());
    let (mut p, _task) = h.logged_in().await;
    assert!(thin_on(&mut p, 0).await);

    let mut same = cfg.clone();
    same.targets[0].alias = Some("renamed".into());
    let report = h.target.apply(same.clone(), OPERATOR).unwrap();
    assert!(
        !report.changes.iter().any(|c| c.contains("replaced")),
        "{report:?}"
    );
    assert_eq!(h.target.config(), same);
    assert_eq!(h.target.config().portal_groups, cfg.portal_groups);
    assert!(thin_on(&mut p, 0).await, "still thin");

    let mut thick = same.clone();
    thick.targets[0].luns[0].options = LuOptions::default();
    let report = h.target.apply(thick.clone(), OPERATOR).unwrap();
    assert!(
        report
            .changes
            .iter()
            .any(|c| c.ends_with("LUN 0: replaced")),
        "{report:?}"
    );
    assert_eq!(h.target.config(), thick);
    assert_eq!(h.target.config().portal_groups, cfg.portal_groups);
    p.clear_unit_attention().await;
    assert!(!thin_on(&mut p, 0).await, "replaced by a thick LU");

    let mut active = thick.clone();
    active.portal_groups[1].alua_state = AccessState::ActiveNonOptimized;
    assert!(matches!(
        h.target.apply(active, OPERATOR),
        Err(ChangeError::NeedsRestart(_))
    ));
    assert_eq!(h.target.config(), thick, "nothing changed");
}
