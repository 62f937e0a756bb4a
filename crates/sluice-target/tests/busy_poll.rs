//! `set_busy_poll_always` (`sluice target --threads N --busy-poll`): connections on worker
//! runtimes spin on their sockets before every wait, at any queue depth. Commands one at a
//! time and batches of 32 arriving at once are all answered, with the right data. A test
//! binary of its own: the switch is process-wide.

mod support;

use std::net::SocketAddr;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spinning_connections_answer_single_commands_and_batches() {
    sluice_target::set_busy_poll_always(true);
    let (stop_workers, _) = tokio::sync::watch::channel(false);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let handles = vec![rt.handle().clone()];
    let mut stop = stop_workers.subscribe();
    let worker = std::thread::spawn(move || {
        rt.block_on(async move {
            let _ = stop.changed().await;
        })
    });

    let mut cfg = config();
    cfg.portals = vec!["127.0.0.1:0".parse().unwrap()];
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(sluice_target::run_on(
        cfg,
        handles,
        move |a: &[SocketAddr]| {
            let _ = addr_tx.send(a[0]);
        },
        async move {
            let _ = stop_rx.await;
        },
    ));
    let addr = addr_rx.await.unwrap();

    let mut sessions = Vec::new();
    for i in 0..2u8 {
        sessions.push(tokio::spawn(async move {
            let mut p = Peer::tcp(addr).await;
            p.login(&LoginOpts::normal().with_isid(20 + i))
                .await
                .expect("login");
            p.clear_unit_attention().await;
            let lba = 1000 * u32::from(i);
            for round in 0..20u8 {
                let data = pattern(8 * BLOCK, i.wrapping_mul(17).wrapping_add(round));
                assert_eq!(p.write_immediate(lba, &data).await.status, 0);
                assert_eq!(p.read(lba, 8).await, data, "session {i} round {round}");
                // 32 writes of 4 KiB, then 32 reads of them, each batch sent at once.
                p.write_batch(lba, 32, 8).await;
                p.read_batch(lba, 32, 8).await;
                assert_eq!(p.read(lba + 31 * 8, 8).await, vec![0x5a; 8 * BLOCK]);
            }
            p
        }));
    }
    let mut peers = Vec::new();
    for s in sessions {
        peers.push(s.await.expect("session ran"));
    }
    drop(peers);
    stop_tx.send(()).unwrap();
    server.await.unwrap().expect("run_on returns Ok");
    let _ = stop_workers.send(true);
    worker.join().unwrap();
}
