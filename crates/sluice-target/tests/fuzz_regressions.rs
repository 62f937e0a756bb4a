//! Byte streams the `target_conn` fuzz target found, replayed through a whole connection
//! (`Target::serve_stream` over an in-memory pipe) with the fuzz target's segment limits.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use sluice_proto::framing::{encode, Digests};
use sluice_proto::login::{InitiatorConfig, InitiatorLogin};
use sluice_proto::pdu::Pdu;
use sluice_proto::seq::{Isid, Itt, SeqNum, Tsih};
use sluice_proto::text::OperationalOffer;
use sluice_target::config::{OperationalOffer as TargetOffer, TargetConfig};
use sluice_target::Target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod support;
use support::{INITIATOR, TARGET};

/// The test configuration with the fuzz target's small segment and burst limits.
fn config() -> TargetConfig {
    TargetConfig {
        offer: TargetOffer {
            max_recv_data_segment_length: 8192,
            max_burst_length: 65536,
            first_burst_length: 16384,
            queue_depth: 8,
            ..TargetOffer::default()
        },
        ..support::config()
    }
}

fn login_request() -> Vec<u8> {
    let cfg = InitiatorConfig {
        initiator_name: INITIATOR.into(),
        initiator_alias: None,
        target_name: Some(TARGET.into()),
        isid: Isid([0x80, 0, 0, 0, 0, 1]),
        tsih: Tsih(0),
        cid: 0,
        chap: None,
        offer: OperationalOffer::default(),
    };
    let mut login = InitiatorLogin::new(cfg, Itt(0), SeqNum(1), SeqNum(0));
    let mut out = BytesMut::new();
    encode(
        &Pdu::LoginRequest(login.start().unwrap()),
        Digests::NONE,
        &mut out,
    );
    out.to_vec()
}

/// Waits until the target has no session, for at most 10 s of real time, and returns how many
/// are left. A session whose connection is gone stays while the SCSI layer still runs one of
/// its commands (on a blocking thread, in real time) and is looked at every second of the
/// runtime's paused clock, which runs ahead while nothing else is ready.
async fn wait_for_sessions_to_end(target: &Target) -> usize {
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    while target.session_count() > 0 && std::time::Instant::now() < give_up {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    target.session_count()
}

/// Logs in, writes `stream` in `pieces`, closes, and returns how many sessions the target
/// still has once the connection task has ended and the SCSI layer returned its commands.
fn sessions_left_after(stream: &[u8], pieces: &[usize]) -> usize {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let target = std::sync::Arc::new(Target::new(config()).unwrap());
        let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:3260".parse().unwrap();
        let (client, server) = tokio::io::duplex(64 * 1024);
        let t = std::sync::Arc::clone(&target);
        let serving = tokio::spawn(async move { t.serve_stream(server, peer, local).await });
        let (mut rd, mut wr) = tokio::io::split(client);
        let drain = tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = rd.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        });
        wr.write_all(&login_request()).await.unwrap();
        let mut rest = stream;
        for &n in pieces {
            let (chunk, tail) = rest.split_at(n.min(rest.len()));
            rest = tail;
            if wr.write_all(chunk).await.is_err() {
                break;
            }
            tokio::task::yield_now().await;
        }
        let _ = wr.shutdown().await;
        drop(wr);
        tokio::time::timeout(Duration::from_secs(600), serving)
            .await
            .expect("the connection task ends")
            .unwrap();
        let _ = tokio::time::timeout(Duration::from_secs(60), drain).await;
        wait_for_sessions_to_end(&target).await
    })
}

/// A Reject for an unknown opcode, then an immediate WRITE SAME(10) with F=0 (more
/// unsolicited data to come), then the initiator closes: the command was with the SCSI layer
/// when the connection went, and the session must still end (it once outlived the fuzz
/// target's check, which did not wait for the SCSI layer).
#[test]
fn reject_then_command_waiting_for_unsolicited_data() {
    let s = hex(concat!(
        "f0162032000000000000000000000000000000000000000000000000000000000000000000000000",
        "000000000000000041017e2a0000000200000000000000000000000000fd00000000000100010100",
        "41ff2f2f2f01f0f82f2f2f2f360c2a747d210000"
    ));
    assert_eq!(sessions_left_after(&s, &[17, 18, 36, 29]), 0);
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
