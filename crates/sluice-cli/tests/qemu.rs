//! QEMU's block layer (libiscsi inside qemu-img and qemu-io) against `sluice target`.

mod support;

use std::process::Command;

use support::{require_tool, TargetProcess};

fn run(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .output()
        .expect("run qemu tool");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{tool} {args:?} failed:\n{text}");
    text
}

#[test]
fn qemu_img_reports_the_lun_size() {
    let qemu_img = require_tool("qemu-img", "qemu-utils and qemu-block-extra");
    let target = TargetProcess::start(&["--memory", "64M"]);
    let info = run(&qemu_img, &["info", "--output=json", &target.url]);
    assert!(info.contains("\"virtual-size\": 67108864"), "{info}");
}

/// Patterns across the LUN, synchronous and asynchronous, read back verified.
fn patterns(target: &TargetProcess) {
    let qemu_io = require_tool("qemu-io", "qemu-utils and qemu-block-extra");
    let out = run(
        &qemu_io,
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0xa5 0 1M",
            "-c",
            "write -P 0x5a 1M 4k",
            "-c",
            "aio_write -P 0x11 8M 256k",
            "-c",
            "aio_flush",
            "-c",
            "read -P 0xa5 0 1M",
            "-c",
            "read -P 0x5a 1M 4k",
            "-c",
            "read -P 0x11 8M 256k",
            "-c",
            "read -P 0x00 16M 64k",
            &target.url,
        ],
    );
    assert!(!out.contains("Pattern verification failed"), "{out}");
    assert_eq!(out.matches("read ").count(), 4, "{out}");
}

#[test]
fn qemu_io_patterns_on_a_memory_lun() {
    patterns(&TargetProcess::start(&[
        "--memory",
        "64M",
        "--block-size",
        "4096",
    ]));
}

#[test]
fn qemu_io_patterns_on_a_file_lun() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lun.img");
    patterns(&TargetProcess::start(&[
        "--file",
        path.to_str().unwrap(),
        "--size",
        "64M",
    ]));
}

/// An image into the LUN and back out, byte for byte.
fn convert_round_trip(target: &TargetProcess) {
    let qemu_img = require_tool("qemu-img", "qemu-utils and qemu-block-extra");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.raw");
    let back = dir.path().join("back.raw");
    let data: Vec<u8> = (0..16u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&src, &data).unwrap();
    run(
        &qemu_img,
        &[
            "convert",
            "-n",
            "-f",
            "raw",
            "-O",
            "raw",
            src.to_str().unwrap(),
            &target.url,
        ],
    );
    run(
        &qemu_img,
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "raw",
            &target.url,
            back.to_str().unwrap(),
        ],
    );
    assert!(
        std::fs::read(&back).unwrap() == data,
        "image changed on its way through the LUN"
    );
    run(
        &qemu_img,
        &[
            "compare",
            "-f",
            "raw",
            "-F",
            "raw",
            src.to_str().unwrap(),
            &target.url,
        ],
    );
}

#[test]
fn qemu_img_convert_round_trips_through_a_memory_lun() {
    convert_round_trip(&TargetProcess::start(&["--memory", "16M"]));
}

#[test]
fn qemu_img_convert_round_trips_through_a_file_lun() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lun.img");
    convert_round_trip(&TargetProcess::start(&[
        "--file",
        path.to_str().unwrap(),
        "--size",
        "16M",
    ]));
}
