#![no_main]
//! Arbitrary byte streams through a whole target connection: `Target::serve_stream` over an
//! in-memory pipe, memory LUN, open ACL.
//!
//! Input layout: the first byte is the mode (bit 0: prepend a canned successful normal login,
//! bit 1: make that login a discovery session, bit 2: build well-framed PDUs from the rest,
//! see [`assist`]; bits 3-7 seed the chunk sizes), the rest is the byte stream, written in chunks of 1..=256 bytes so that PDUs straddle reads. The write side
//! is then closed and responses are drained. The connection task must end, without panicking,
//! and leave no session behind once the SCSI layer has returned its commands. Time is tokio's paused clock: login timeouts, keepalive and
//! shutdown grace elapse instantly once everything is idle.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sluice_proto::framing::{encode, Digests};
use sluice_proto::login::{InitiatorConfig, InitiatorLogin};
use sluice_proto::pdu::Pdu;
use sluice_proto::seq::{Isid, Itt, SeqNum, Tsih};
use sluice_proto::text::OperationalOffer;
use sluice_target::config::{
    Acl, Backend, Keepalive, Limits, LunDef, OperationalOffer as TargetOffer, TargetConfig,
    TargetDef,
};
use sluice_target::Target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TARGET_NAME: &str = "iqn.2026-11.io.sluice:fuzz";
const INITIATOR_NAME: &str = "iqn.2026-11.io.sluice:fuzzer";

fn config() -> &'static TargetConfig {
    static CONFIG: OnceLock<TargetConfig> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let lun = |number| LunDef {
            number,
            backend: Backend::Memory { size: 256 * 1024 },
            block_size: 512,
            read_only: number == 1,
            removable: false,
            options: Default::default(),
            serial: None,
        };
        TargetConfig {
            portals: vec!["127.0.0.1:3260".parse().unwrap()],
            portal_groups: Vec::new(),
            state_dir: None,
            targets: vec![TargetDef {
                iqn: TARGET_NAME.into(),
                alias: Some("fuzz".into()),
                luns: vec![lun(0), lun(1)],
                acl: Acl::Open,
                chap: None,
            }],
            discovery_auth: None,
            offer: TargetOffer {
                // Small limits so that oversized segments and write-buffer limits are reachable.
                max_recv_data_segment_length: 8192,
                max_burst_length: 65536,
                first_burst_length: 16384,
                queue_depth: 8,
                ..TargetOffer::default()
            },
            limits: Limits {
                max_outstanding_bytes_per_connection: 128 * 1024,
                login_timeout: Duration::from_secs(2),
                shutdown_grace: Duration::from_secs(1),
                ..Limits::default()
            },
            keepalive: Some(Keepalive {
                interval: Duration::from_secs(1),
                timeout: Duration::from_secs(1),
            }),
            recovery: Default::default(),
            fault_hook: None,
            gateway: None,
            tcp_congestion: None,
        }
    })
}

/// The first Login Request of a login that completes in one round trip (no CHAP: CSG=1,
/// NSG=3, T=1 with every operational offer).
fn canned_login(discovery: bool) -> &'static [u8] {
    static NORMAL: OnceLock<Vec<u8>> = OnceLock::new();
    static DISCOVERY: OnceLock<Vec<u8>> = OnceLock::new();
    let cell = if discovery { &DISCOVERY } else { &NORMAL };
    cell.get_or_init(|| {
        let cfg = InitiatorConfig {
            initiator_name: INITIATOR_NAME.into(),
            initiator_alias: None,
            target_name: (!discovery).then(|| TARGET_NAME.into()),
            isid: Isid([0x80, 0, 0, 0, 0, 1]),
            tsih: Tsih(0),
            cid: 0,
            chap: None,
            offer: OperationalOffer::default(),
        };
        let mut login = InitiatorLogin::new(cfg, Itt(0), SeqNum(1), SeqNum(0));
        let req = login.start().expect("canned login request");
        let mut out = BytesMut::new();
        encode(&Pdu::LoginRequest(req), Digests::NONE, &mut out);
        out.to_vec()
    })
}

/// "Assisted" streams: the input is a sequence of records `[len][len bytes]`, each made into
/// one PDU whose framing is right: the record's first 48 bytes (zero-padded) are the BHS with
/// no AHS, the rest is the data segment (padded), and commands get the CmdSN the target
/// expects (starting at the canned login's 1). The fuzzer then spends its time on what the
/// PDUs mean rather than on finding lengths and sequence numbers.
fn assist(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut cmd_sn: u32 = 1;
    let mut rest = input;
    while let Some((&len, tail)) = rest.split_first() {
        let n = usize::from(len).min(tail.len());
        let (record, tail) = tail.split_at(n);
        rest = tail;
        let mut bhs = [0u8; 48];
        let head = record.len().min(48);
        bhs[..head].copy_from_slice(&record[..head]);
        let data = &record[head..];
        bhs[4] = 0;
        let dsl = (data.len() as u32).to_be_bytes();
        bhs[5..8].copy_from_slice(&dsl[1..]);
        let opcode = bhs[0] & 0x3f;
        let immediate = bhs[0] & 0x40 != 0;
        // NOP-Out, SCSI Command, TMF, Text, Logout carry a CmdSN at bytes 24..28.
        if matches!(opcode, 0x00 | 0x01 | 0x02 | 0x04 | 0x06) {
            bhs[24..28].copy_from_slice(&cmd_sn.to_be_bytes());
            if !immediate {
                cmd_sn = cmd_sn.wrapping_add(1);
            }
        }
        out.extend_from_slice(&bhs);
        out.extend_from_slice(data);
        out.resize(out.len() + (4 - data.len() % 4) % 4, 0);
    }
    out
}

fuzz_target!(|input: &[u8]| {
    let Some((&mode, stream)) = input.split_first() else {
        return;
    };
    let target = Target::new(config().clone()).expect("fuzz target configuration");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(async {
        let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:3260".parse().unwrap();
        let (client, server) = tokio::io::duplex(64 * 1024);
        let target = std::sync::Arc::new(target);
        let t = std::sync::Arc::clone(&target);
        let serving = tokio::spawn(async move { t.serve_stream(server, peer, local).await });
        let (mut rd, mut wr) = tokio::io::split(client);
        // Drain whatever the target answers, so its writer never stalls.
        let drain = tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = rd.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        });
        if mode & 1 != 0 {
            // The target may already have closed (it never does on a valid login); errors
            // only end the write phase early.
            let _ = wr.write_all(canned_login(mode & 2 != 0)).await;
        }
        let assisted;
        let mut rest = stream;
        if mode & 4 != 0 {
            assisted = assist(stream);
            rest = &assisted;
        }
        let mut rng = u32::from(mode >> 3) | 0x100;
        while !rest.is_empty() {
            rng ^= rng << 13;
            rng ^= rng >> 17;
            rng ^= rng << 5;
            let n = (rng as usize % 256 + 1).min(rest.len());
            let (chunk, tail) = rest.split_at(n);
            if wr.write_all(chunk).await.is_err() {
                break;
            }
            rest = tail;
            tokio::task::yield_now().await;
        }
        let _ = wr.shutdown().await;
        drop(wr);
        // Paused clock: this only fires if the connection task is stuck with nothing to do.
        let ended = tokio::time::timeout(Duration::from_secs(600), serving).await;
        match ended {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("connection task failed: {e}"),
            Err(_) => panic!("connection task did not end after the peer closed"),
        }
        let _ = tokio::time::timeout(Duration::from_secs(60), drain).await;
        // A session whose connection is gone stays while the SCSI layer still runs one of its
        // commands (on a blocking thread, in real time); it is looked at every second of the
        // paused clock, which runs ahead while nothing is ready. Wait for it in real time.
        let give_up = std::time::Instant::now() + Duration::from_secs(5);
        while target.session_count() > 0 && std::time::Instant::now() < give_up {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert_eq!(
            target.session_count(),
            0,
            "a session outlived its connection"
        );
    });
});
