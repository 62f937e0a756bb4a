//! `run_on`: connections handed to worker runtimes (one current-thread runtime per OS thread)
//! over real TCP, where busy polling reads the socket directly. Several sessions at once move
//! data correctly and shut down cleanly.

mod support;

use std::net::SocketAddr;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_served_on_worker_runtimes_move_data_and_shut_down() {
    let (stop_workers, _) = tokio::sync::watch::channel(false);
    let mut handles = Vec::new();
    let mut threads = Vec::new();
    for _ in 0..2 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        handles.push(rt.handle().clone());
        let mut stop = stop_workers.subscribe();
        threads.push(std::thread::spawn(move || {
            rt.block_on(async move {
                let _ = stop.changed().await;
            })
        }));
    }

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
    for i in 0..3u8 {
        sessions.push(tokio::spawn(async move {
            let mut p = Peer::tcp(addr).await;
            p.login(&LoginOpts::normal().with_isid(10 + i))
                .await
                .expect("login");
            p.clear_unit_attention().await;
            let lba = 100 * u32::from(i);
            for round in 0..50u8 {
                let data = pattern(8 * BLOCK, i.wrapping_mul(31).wrapping_add(round));
                assert_eq!(p.write_immediate(lba, &data).await.status, 0);
                assert_eq!(p.read(lba, 8).await, data, "session {i} round {round}");
            }
            p
        }));
    }
    let mut peers = Vec::new();
    for s in sessions {
        peers.push(s.await.expect("session ran"));
    }
    drop(peers); // the initiators go away: the target closes their connections
    stop_tx.send(()).unwrap();
    server.await.unwrap().expect("run_on returns Ok");
    let _ = stop_workers.send(true);
    for t in threads {
        t.join().unwrap();
    }
}
