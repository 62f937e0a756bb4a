//! `set_busy_poll_always` (`sluice target --threads N --busy-poll`): connections on worker
//! runtimes spin on their sockets before every wait, at any queue depth. Commands one at a
//! time and batches of 32 arriving at once are all answered, with the right data. A test
//! binary of its own: the switch is process-wide.

mod support;

use support::*;

const WORKERS: usize = 1;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spinning_connections_answer_single_commands_and_batches() {
    sluice_target::set_busy_poll_always(true);
    let target = WorkerTarget::start(config(), WORKERS).await;
    let addr = target.addr;

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
    target.stop().await;
}
