//! The target under hostile input, as a process: login floods, truncated PDUs and garbage on
//! many connections, while a well-behaved initiator keeps passing verified I/O.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_proto::framing::{encode, Digests};
use sluice_proto::pdu::{LoginRequest, Pdu};
use sluice_proto::seq::{Isid, Itt, SeqNum, Tsih};
use sluice_proto::text::encode_pairs;
use support::{require_tool, TargetProcess};

/// Hostile connections made while the good client works.
const HOSTILE_CONNECTIONS: usize = 400;

fn portal(url: &str) -> String {
    url.trim_start_matches("iscsi://")
        .split('/')
        .next()
        .unwrap()
        .to_string()
}

fn login_bytes(initiator: &str, target: &str) -> BytesMut {
    let pdu = Pdu::LoginRequest(LoginRequest {
        transit: true,
        cont: false,
        csg: 1,
        nsg: 3,
        version_max: 0,
        version_min: 0,
        isid: Isid([0x80, 1, 2, 3, 4, 5]),
        tsih: Tsih(0),
        itt: Itt(1),
        cid: 0,
        cmd_sn: SeqNum(1),
        exp_stat_sn: SeqNum(0),
        data: encode_pairs(&[
            ("InitiatorName", initiator),
            ("TargetName", target),
            ("SessionType", "Normal"),
        ]),
    });
    let mut out = BytesMut::new();
    encode(&pdu, Digests::NONE, &mut out);
    out
}

/// One hostile connection; what it does depends on `kind`.
fn attack(addr: &str, kind: usize, i: usize) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
    let login = login_bytes(
        &format!("iqn.2026-11.test:flood{i}"),
        "iqn.2026-11.io.sluice:default",
    );
    let _ = match kind % 5 {
        // A login flood: complete logins, then vanish without logout.
        0 => s.write_all(&login),
        // Truncated PDU: half a header, then close.
        1 => s.write_all(&login[..20]),
        // A header announcing more data than ever comes.
        2 => s.write_all(&login[..login.len() - 8]),
        // Garbage before login.
        3 => s.write_all(&Bytes::from(vec![0xa5u8; 4096])),
        // A login to a target that does not exist.
        _ => s.write_all(&login_bytes("iqn.2026-11.test:x", "iqn.2026-11.test:nope")),
    };
    let mut buf = [0u8; 512];
    let _ = s.read(&mut buf);
}

#[test]
fn floods_and_bad_input_do_not_disturb_a_good_client() {
    let qemu_io = require_tool("qemu-io", "qemu-utils and qemu-block-extra");
    let target = TargetProcess::start(&["--memory", "64M"]);
    let addr = portal(&target.url);
    let done = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let attackers: Vec<_> = (0..8)
        .map(|t| {
            let (addr, stop, done) = (addr.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    attack(&addr, i, i);
                    done.fetch_add(1, Ordering::Relaxed);
                    i += 8;
                }
            })
        })
        .collect();
    // The good client keeps working until the storm has made a few hundred connections.
    let started = std::time::Instant::now();
    let mut round = 0u64;
    while done.load(Ordering::Relaxed) < HOSTILE_CONNECTIONS
        && started.elapsed() < Duration::from_secs(60)
    {
        round += 1;
        let pattern = format!(
            "write -P 0x{:02x} {}M 512k",
            round % 250 + 1,
            (round % 30) * 2
        );
        let check = format!(
            "read -P 0x{:02x} {}M 512k",
            round % 250 + 1,
            (round % 30) * 2
        );
        let out = Command::new(&qemu_io)
            .args(["-f", "raw", "-c", &pattern, "-c", &check, &target.url])
            .output()
            .expect("run qemu-io");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !text.contains("verification failed"),
            "round {round}:\n{text}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for h in attackers {
        h.join().unwrap();
    }
    let attacks = done.load(Ordering::Relaxed);
    assert!(
        attacks >= HOSTILE_CONNECTIONS,
        "only {attacks} hostile connections in 60 s"
    );
    assert!(round >= 3, "the good client ran only {round} rounds");
    // Still up and serving after the storm.
    let last = format!(
        "read -P 0x{:02x} {}M 512k",
        round % 250 + 1,
        (round % 30) * 2
    );
    let out = Command::new(&qemu_io)
        .args(["-f", "raw", "-c", &last, &target.url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
