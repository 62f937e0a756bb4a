//! Raw RDMA Write and Read throughput of the software provider over loopback TCP.
//!
//! `cargo run --release -p sluice-rdma --example raw_throughput [TOTAL_MIB] [ROUNDS]`
//! alternates Write and Read for ROUNDS rounds per message size and prints each run and the
//! medians.

use sluice_rdma::bench::{loopback, BenchOp};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let total_mib: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(512);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    println!("op,message_bytes,depth,bytes,seconds,mbit_per_s");
    for message in [4u32 << 10, 64 << 10, 1 << 20] {
        let mut results = [Vec::new(), Vec::new()];
        for _ in 0..rounds {
            for (i, op) in [BenchOp::Write, BenchOp::Read].into_iter().enumerate() {
                let r = loopback(op, total_mib << 20, message, 16).await?;
                println!(
                    "{:?},{},{},{},{:.3},{:.0}",
                    r.op,
                    r.message_bytes,
                    r.depth,
                    r.bytes,
                    r.elapsed.as_secs_f64(),
                    r.mbit_per_s()
                );
                results[i].push(r.mbit_per_s());
            }
        }
        for (op, mut v) in ["Write", "Read"].into_iter().zip(results) {
            v.sort_by(f64::total_cmp);
            println!("# median {op} {message} B: {:.0} Mbit/s", v[v.len() / 2]);
        }
    }
    Ok(())
}
