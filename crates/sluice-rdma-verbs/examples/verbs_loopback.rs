//! Checks the verbs provider on a machine with an RDMA device (an RNIC, or soft-RoCE:
//! `rdma link add rxe0 type rxe netdev eth0`): lists the devices, then connects to itself
//! through RDMA-CM on ADDR (an IP address of the RDMA interface, any free port) and moves
//! bytes with a Send, an RDMA Write and an RDMA Read, comparing every byte.
//!
//! ```sh
//! cargo run -p sluice-rdma-verbs --features verbs --example verbs_loopback -- 10.0.0.5:7471
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use sluice_rdma::{Access, RecvWr, RemoteAddr, SendWr, Sge, VaMode, WcStatus, WorkCompletion};
use sluice_rdma_verbs::verbs::cm::{connect, VerbsListener};
use sluice_rdma_verbs::verbs::device::devices;
use sluice_rdma_verbs::verbs::queue::{QueueDepths, VerbsQueuePair};
use sluice_rdma_verbs::VerbsError;

const LEN: usize = 64 * 1024;

fn main() -> ExitCode {
    let Some(addr) = std::env::args()
        .nth(1)
        .and_then(|a| a.parse::<SocketAddr>().ok())
    else {
        eprintln!("usage: verbs_loopback IP:PORT (an address of the RDMA interface)");
        return ExitCode::from(2);
    };
    for d in devices() {
        println!("device {} ({})", d.name, d.transport);
    }
    match run(addr) {
        Ok(()) => {
            println!("Send, RDMA Write and RDMA Read of {LEN} bytes: every byte as sent");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn wait(qp: &mut VerbsQueuePair) -> Result<WorkCompletion, VerbsError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(wc) = qp.poll_cq()? {
            if wc.status != WcStatus::Success {
                return Err(VerbsError::UnexpectedEvent {
                    expected: "a successful completion",
                    got: format!("{wc:?}"),
                });
            }
            return Ok(wc);
        }
        if Instant::now() > deadline {
            return Err(VerbsError::UnexpectedEvent {
                expected: "a completion within 5 s",
                got: "none".into(),
            });
        }
        std::thread::yield_now();
    }
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..LEN)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn run(addr: SocketAddr) -> Result<(), VerbsError> {
    let listener = VerbsListener::bind(addr)?;
    // The passive side: one region the peer may write and read, and a posted receive.
    let server = std::thread::spawn(move || {
        listener.accept(QueueDepths::default(), |qp| {
            let region = qp.register(
                2 * LEN as u64,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
                VaMode::ZeroBased,
            )?;
            qp.post_recv(&RecvWr {
                wr_id: 1,
                sge: Sge {
                    stag: region.stag,
                    va: 0,
                    len: LEN as u32,
                },
            })?;
            qp.fill(region.stag, LEN as u64, &pattern(3))?;
            println!(
                "passive side: region {} of {} bytes",
                region.stag, region.len
            );
            Ok(())
        })
    });
    let mut local = None;
    let mut conn = connect(addr, Duration::from_secs(2), QueueDepths::default(), |qp| {
        let r = qp.register(2 * LEN as u64, Access::LOCAL_WRITE, VaMode::Based(0))?;
        qp.fill(r.stag, r.base_va, &pattern(1))?;
        local = Some(r);
        Ok(())
    })?;
    let mut server = server
        .join()
        .map_err(|_| VerbsError::Unsupported("a panicking thread"))??;
    let local = local.ok_or(VerbsError::Unsupported("a region"))?;
    let sge = |off: u64| Sge {
        stag: local.stag,
        va: local.base_va + off,
        len: LEN as u32,
    };
    // Send: lands in the passive side's receive.
    conn.qp.post_send(&SendWr::Send {
        wr_id: 10,
        sge: sge(0),
        invalidate: None,
    })?;
    wait(&mut conn.qp)?;
    wait(&mut server.qp)?;
    // The passive side's region: its STag is the lowest registered there; learn it the way a
    // protocol would, by reading what the passive side described.
    let remote_stag = server_region(&server.qp)?;
    if server.qp.contents(remote_stag, 0, LEN)? != pattern(1) {
        return Err(VerbsError::Unsupported("Send delivering the bytes sent"));
    }
    // RDMA Write over the received bytes, then RDMA Read of the other half.
    conn.qp.fill(local.stag, local.base_va, &pattern(2))?;
    conn.qp.post_send(&SendWr::Write {
        wr_id: 11,
        sge: sge(0),
        remote: RemoteAddr {
            stag: remote_stag,
            va: 0,
        },
    })?;
    wait(&mut conn.qp)?;
    if server.qp.contents(remote_stag, 0, LEN)? != pattern(2) {
        return Err(VerbsError::Unsupported(
            "RDMA Write placing the bytes written",
        ));
    }
    conn.qp.post_send(&SendWr::Read {
        wr_id: 12,
        sge: sge(LEN as u64),
        remote: RemoteAddr {
            stag: remote_stag,
            va: LEN as u64,
        },
    })?;
    wait(&mut conn.qp)?;
    if conn
        .qp
        .contents(local.stag, local.base_va + LEN as u64, LEN)?
        != pattern(3)
    {
        return Err(VerbsError::Unsupported(
            "RDMA Read returning the bytes read",
        ));
    }
    Ok(())
}

/// The one region the passive side registered.
fn server_region(qp: &VerbsQueuePair) -> Result<sluice_rdma::STag, VerbsError> {
    qp.stags()
        .next()
        .ok_or(VerbsError::Unsupported("a registered region"))
}
