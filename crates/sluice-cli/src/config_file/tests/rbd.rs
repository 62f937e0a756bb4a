//! `backend = "rbd"` LUNs: what a valid table becomes, and what each mistake is called.

use std::path::Path;

use sluice_target::config::{Backend, LunRef, RbdImage};

use super::super::kind::{ErrorKind, FileKey};
use super::super::values::BackendKind;
use super::{kind_at, parse_str, target_a, MINIMAL};

/// `MINIMAL` with its memory LUN replaced by `lun` (lines from 7 on).
fn with_lun(lun: &str) -> String {
    MINIMAL.replace("backend = \"memory\"\nsize = \"1G\"\n", lun)
}

const LUN0: LunRef = LunRef {
    index: 0,
    number: 0,
};

#[test]
fn an_rbd_lun_names_its_image_and_cluster() {
    let src = with_lun(
        "backend = \"rbd\"\nimage = \"pool-a/disk.1\"\nceph_conf = \"ceph/ceph.conf\"\n\
         ceph_id = \"sluice\"\nceph_keyring = \"/etc/ceph/ceph.client.sluice.keyring\"\n",
    );
    let c = parse_str(&src, Path::new("/etc/sluice/target.toml")).unwrap();
    let expected = RbdImage {
        pool: "pool-a".into(),
        image: "disk.1".into(),
        // Relative paths are the file's directory's, as for `path`.
        conf_file: Some("/etc/sluice/ceph/ceph.conf".into()),
        client_id: Some("sluice".into()),
        keyring: Some("/etc/ceph/ceph.client.sluice.keyring".into()),
    };
    assert_eq!(
        c.targets[0].luns[0].backend,
        Backend::Rbd { image: expected }
    );
}

#[test]
fn cluster_keys_are_optional() {
    let c = parse_str(
        &with_lun("backend = \"rbd\"\nimage = \"rbd/disk\"\n"),
        Path::new("t.toml"),
    )
    .unwrap();
    let Backend::Rbd { image } = &c.targets[0].luns[0].backend else {
        panic!("not rbd: {:?}", c.targets[0].luns[0].backend);
    };
    assert_eq!(*image, RbdImage::parse("rbd/disk").unwrap());
    assert_eq!(image.client_id(), "admin");
}

#[test]
fn rbd_mistakes_are_named_where_they_are() {
    let kind = kind_at(&with_lun("backend = \"rbd\"\n"), 7);
    assert_eq!(
        kind,
        ErrorKind::NoImage {
            target: target_a(),
            lun: LUN0
        }
    );
    assert!(kind.to_string().contains("needs an `image`"), "{kind}");

    let kind = kind_at(&with_lun("backend = \"rbd\"\nimage = \"disk\"\n"), 8);
    assert!(matches!(kind, ErrorKind::BadRbd { .. }), "{kind:?}");
    assert!(kind.to_string().contains("is not POOL/IMAGE"), "{kind}");

    let kind = kind_at(
        &with_lun("backend = \"rbd\"\nimage = \"rbd/disk\"\nceph_id = \"client.x\"\n"),
        9,
    );
    assert!(kind.to_string().contains("the ID of client.ID"), "{kind}");

    let kind = kind_at(
        &with_lun("backend = \"rbd\"\nimage = \"rbd/disk\"\nsize = \"1G\"\n"),
        9,
    );
    assert_eq!(
        kind,
        ErrorKind::RbdSize {
            target: target_a(),
            lun: LUN0
        }
    );
    assert!(kind.to_string().contains("rbd resize"), "{kind}");

    // The file backend's keys on an RBD LUN, and the RBD keys elsewhere.
    let kind = kind_at(
        &with_lun("backend = \"rbd\"\nimage = \"rbd/disk\"\ndirect = true\n"),
        9,
    );
    assert_eq!(
        kind.to_string(),
        "`direct` only applies to backend = \"file\", not \"rbd\""
    );
    let kind = kind_at(
        &MINIMAL.replace("size = \"1G\"", "size = \"1G\"\nceph_keyring = \"k\""),
        9,
    );
    assert_eq!(
        kind,
        ErrorKind::NotForBackend {
            target: target_a(),
            lun: LUN0,
            key: FileKey::CephKeyring,
            only: BackendKind::Rbd,
            backend: BackendKind::Memory
        }
    );
}

#[test]
fn a_gateway_table_makes_one_portal_group_per_gateway() {
    use sluice_target::config::{AccessState, GatewayConfig};
    let lun = "backend = \"rbd\"\nimage = \"rbd/disk\"\n";
    let src = format!(
        "[gateway]\ngroup = 2\ngroups = [1, 2, 3]\n{}",
        with_lun(lun)
    );
    let c = parse_str(&src, Path::new("t.toml")).unwrap();
    assert_eq!(
        c.gateway,
        Some(GatewayConfig {
            group: 2,
            groups: vec![1, 2, 3],
            non_owner: AccessState::ActiveNonOptimized,
        })
    );
    let groups = c.effective_portal_groups();
    assert_eq!(groups.len(), 1);
    assert_eq!((groups[0].tag, groups[0].alua_group), (2, 2));
    let standby = src.replace(
        "groups = [1, 2, 3]\n",
        "groups = [1, 2, 3]\nnon_owner = \"standby\"\n",
    );
    let c = parse_str(&standby, Path::new("t.toml")).unwrap();
    assert_eq!(c.gateway.unwrap().non_owner, AccessState::Standby);
    // Its own group missing from the list: named at the table.
    let e = parse_str(&src.replace("[1, 2, 3]", "[1, 3]"), Path::new("t.toml")).unwrap_err();
    assert_eq!(e.line, 1, "{e}");
    assert!(e.to_string().contains("its own group"), "{e}");
    // Group 0 is out of range.
    let kind = kind_at(&src.replace("group = 2", "group = 0"), 2);
    assert!(
        matches!(
            kind,
            ErrorKind::OutOfRange {
                key: FileKey::GatewayGroup,
                ..
            }
        ),
        "{kind:?}"
    );
}
