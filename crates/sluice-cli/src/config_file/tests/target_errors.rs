//! Errors about targets and LUNs, most found by `TargetConfig::validate`: each is of the
//! expected kind, names the target and LUN by position, and points at the expected line.

use std::path::PathBuf;

use sluice_target::config::{ConfigError, LunRef, TargetRef};

use super::{error_at, kind_at, target_a, MINIMAL};
use crate::config_file::kind::{ErrorKind, FileKey};
use crate::config_file::values::BackendKind;

#[test]
fn validation_errors_name_their_place() {
    let invalid = |src: &str, line: usize| match kind_at(src, line) {
        ErrorKind::Invalid(e) => e,
        kind => panic!("{kind:?}"),
    };
    let bad = TargetRef {
        index: 0,
        iqn: "disk0".into(),
    };
    let src = MINIMAL.replace("iqn.2026-11.io.sluice:a", "disk0");
    assert_eq!(invalid(&src, 3), ConfigError::BadName(bad));
    assert!(
        kind_at(&src, 3)
            .to_string()
            .ends_with("; for example iqn.2026-11.com.example:disk1"),
        "hint added"
    );
    let lun0 = LunRef {
        index: 0,
        number: 0,
    };
    assert!(matches!(
        invalid(&MINIMAL.replace("\"1G\"", "1000"), 8),
        ConfigError::Size { target, lun, size: 1000, block_size: 512 }
            if target == target_a() && lun == lun0
    ));
    assert!(matches!(
        invalid(&format!("{MINIMAL}block_size = 1024\n"), 9),
        ConfigError::BlockSize { lun, block_size: 1024, .. } if lun == lun0
    ));
    // Duplicate LUN: the second one is named.
    let src = format!("{MINIMAL}\n[[target.lun]]\nnumber = 0\nbackend = \"null\"\nsize = \"1G\"\n");
    assert_eq!(
        invalid(&src, 11),
        ConfigError::DuplicateLun {
            target: target_a(),
            lun: LunRef {
                index: 1,
                number: 0
            }
        }
    );
    // Duplicate target: the second one is named.
    let second = TargetRef {
        index: 1,
        ..target_a()
    };
    assert_eq!(
        invalid(&format!("{MINIMAL}{MINIMAL}"), 11),
        ConfigError::DuplicateTarget(second)
    );
    let src = "[[target]]\niqn = \"iqn.2026-11.io.sluice:a\"\nacl = \"open\"\n";
    assert_eq!(invalid(src, 2), ConfigError::NoLuns(target_a()));
    assert!(
        kind_at(src, 2)
            .to_string()
            .ends_with(": add a [[target.lun]] table after this target"),
        "hint added"
    );
    let src = "listen = [\"127.0.0.1:3260\"]\n";
    assert_eq!(invalid(src, 1), ConfigError::NoTargets);
    assert!(
        kind_at(src, 1)
            .to_string()
            .starts_with("no targets configured: add a [[target]] table"),
        "hint added"
    );
    // FirstBurstLength > MaxBurstLength: FirstBurstLength is pointed at.
    let src =
        format!("[session]\nmax_burst_length = \"64K\"\nfirst_burst_length = \"128K\"\n{MINIMAL}");
    assert_eq!(invalid(&src, 3), ConfigError::FirstBurst(131_072, 65_536));
    assert_eq!(
        kind_at(&src, 3).to_string(),
        "FirstBurstLength 131072 exceeds MaxBurstLength 65536"
    );
}

#[test]
fn lun_errors_name_target_and_lun() {
    let lun0 = LunRef {
        index: 0,
        number: 0,
    };
    let kind = kind_at(
        &MINIMAL.replace("size = \"1G\"", "size = \"1G\"\npath = \"/tmp/x\""),
        9,
    );
    assert_eq!(
        kind,
        ErrorKind::NotForBackend {
            target: target_a(),
            lun: lun0,
            key: FileKey::Path,
            only: BackendKind::File,
            backend: BackendKind::Memory
        }
    );
    assert_eq!(
        kind.to_string(),
        "`path` only applies to backend = \"file\", not \"memory\""
    );
    assert!(matches!(
        kind_at(
            &MINIMAL.replace("size = \"1G\"", "size = \"1G\"\nhuge_pages = false"),
            9
        ),
        ErrorKind::NotForBackend {
            key: FileKey::HugePages,
            ..
        }
    ));
    let kind = kind_at(&MINIMAL.replace("size = \"1G\"\n", ""), 7);
    assert_eq!(
        kind,
        ErrorKind::NoSize {
            target: target_a(),
            lun: lun0,
            backend: BackendKind::Memory
        }
    );
    assert_eq!(
        kind.to_string(),
        "LUN 0: backend = \"memory\" needs a `size`, e.g. size = \"1G\""
    );
    assert_eq!(
        kind_at(&MINIMAL.replace("\"memory\"", "\"file\""), 7),
        ErrorKind::NoPath {
            target: target_a(),
            lun: lun0
        }
    );
    let kind = kind_at(&format!("{MINIMAL}serial = \"has space\"\n"), 9);
    assert_eq!(
        kind,
        ErrorKind::BadSerial {
            target: target_a(),
            lun: lun0
        }
    );
    assert!(kind.to_string().contains("1 to 64 printable"), "{kind}");
    let src =
        format!("{MINIMAL}\n[[target.lun]]\nnumber = 20000\nbackend = \"null\"\nsize = \"1G\"\n");
    let kind = kind_at(&src, 11);
    assert_eq!(
        kind,
        ErrorKind::OutOfRange {
            key: FileKey::LunNumber,
            value: 20_000,
            min: 0,
            max: 16_383
        }
    );
    assert_eq!(kind.to_string(), "number = 20000 is outside 0..=16383");
    let src = format!(
        "{MINIMAL}\n[[target.lun]]\nnumber = 16383\nbackend = \"null\"\nsize = \"1G\"\n\n\
         [[target.lun]]\nbackend = \"null\"\nsize = \"1G\"\n"
    );
    assert!(matches!(
        kind_at(&src, 15),
        ErrorKind::OutOfRange {
            key: FileKey::CountedLunNumber,
            value: 16_384,
            ..
        }
    ));
}

#[test]
fn file_lun_paths_are_checked() {
    let file = |path: &str| {
        MINIMAL.replace(
            "backend = \"memory\"",
            &format!("backend = \"file\"\npath = \"{path}\""),
        )
    };
    let lun0 = LunRef {
        index: 0,
        number: 0,
    };
    let kind = kind_at(&file("/nonexistent-sluice-dir/disk.img"), 8);
    assert_eq!(
        kind,
        ErrorKind::NoDirectory {
            target: target_a(),
            lun: lun0,
            dir: PathBuf::from("/nonexistent-sluice-dir")
        }
    );
    assert_eq!(
        kind.to_string(),
        "LUN 0: directory /nonexistent-sluice-dir does not exist"
    );
    let dir = tempfile::tempdir().unwrap();
    let src = file(&dir.path().display().to_string());
    assert!(matches!(
        kind_at(&src, 8),
        ErrorKind::PathIsDirectory { lun, .. } if lun == lun0
    ));
    let kind = kind_at(&file("no-such-file.img").replace("size = \"1G\"\n", ""), 8);
    assert_eq!(
        kind,
        ErrorKind::NoFile {
            target: target_a(),
            lun: lun0,
            path: PathBuf::from("./no-such-file.img")
        }
    );
    assert_eq!(
        kind.to_string(),
        "LUN 0: ./no-such-file.img does not exist; add `size` to create it (sparse)"
    );
}

#[test]
fn error_display_underlines_the_value() {
    let e = error_at(&MINIMAL.replace("\"1G\"", "\"1X\""), 8);
    let text = e.to_string();
    assert!(text.contains("8 | size = \"1X\""), "{text}");
    assert!(text.contains("|        ^^^^"), "{text}");
}
