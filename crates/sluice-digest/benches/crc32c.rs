//! CRC32C throughput per implementation and size.
//!
//! Sizes: 48 B (a BHS, i.e. one header digest), 512 B (a sector), 8 KiB (a typical data
//! segment, the size profiled in Joglekar, Kounavis and Berry, "A Scalable and High Performance
//! Software iSCSI Implementation"), 64 KiB and 1 MiB (large bursts, past L1 and on small cores
//! past L2). Throughput is in decimal bytes, so criterion prints GB/s
//! (10^9 B/s). Results and method: `docs/performance.md`, section "CRC32C".
//!
//! Run (`--bench` keeps the flags away from the unit-test harness):
//! `cargo bench -p sluice-digest --bench crc32c -- --warm-up-time 1 --measurement-time 2`

// `criterion_group!` expands to an undocumented `pub fn benches`, and the workspace lints
// missing docs; the bench binary has no public API to document.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sluice_digest::{hardware, Algorithm};

const SIZES: [(usize, &str); 5] = [
    (48, "48B"),
    (512, "512B"),
    (8 << 10, "8KiB"),
    (64 << 10, "64KiB"),
    (1 << 20, "1MiB"),
];

fn bench_crc32c(c: &mut Criterion) {
    eprintln!("crc-fast backend: {}", hardware::backend());
    // Non-constant data, so nothing can be folded at compile time.
    let data: Vec<u8> = (0..SIZES[4].0 as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut group = c.benchmark_group("crc32c");
    for (size, label) in SIZES {
        let input = &data[..size];
        group.throughput(Throughput::BytesDecimal(size as u64));
        for alg in Algorithm::ALL {
            group.bench_with_input(BenchmarkId::new(alg.name(), label), input, |b, input| {
                b.iter(|| alg.checksum(black_box(input)));
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_crc32c);
criterion_main!(benches);
