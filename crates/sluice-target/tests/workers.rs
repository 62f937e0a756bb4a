//! `run_on`: connections handed to worker runtimes (one current-thread runtime per OS thread)
//! over real TCP, where busy polling reads the socket directly. Several sessions at once move
//! data correctly and shut down cleanly.

mod support;

use support::*;

const WORKERS: usize = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_served_on_worker_runtimes_move_data_and_shut_down() {
    let target = WorkerTarget::start(config(), WORKERS).await;
    let addr = target.addr;

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
    target.stop().await;
}
