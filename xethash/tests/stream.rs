//! The hash does not depend on how the stream is cut into `update` calls, and its cost.

use proptest::prelude::*;
use xethash::{chunk_lengths, file_hash, Hasher, MAX_CHUNK, MIN_CHUNK};

fn data(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 56) as u8
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn pieces_never_change_the_hash(
        seed in any::<u64>(),
        n in 0usize..400_000,
        cuts in proptest::collection::vec(1usize..70_000, 1..20),
    ) {
        let d = data(seed, n);
        let want = file_hash(&d);
        let mut h = Hasher::new();
        let mut at = 0;
        let mut i = 0;
        while at < d.len() {
            let end = (at + cuts[i % cuts.len()]).min(d.len());
            h.update(&d[at..end]);
            at = end;
            i += 1;
        }
        prop_assert_eq!(h.finalize(), want);
        let lens = chunk_lengths(&d);
        prop_assert_eq!(lens.iter().sum::<usize>(), n);
        for (k, len) in lens.iter().enumerate() {
            prop_assert!(*len <= MAX_CHUNK);
            prop_assert!(*len >= MIN_CHUNK || k + 1 == lens.len());
        }
    }
}

/// Throughput of the hash on one core (run with `--ignored --nocapture`).
#[test]
#[ignore = "a measurement, not a check"]
fn throughput() {
    let d = data(7, 256 << 20);
    let t = std::time::Instant::now();
    let h = file_hash(&d);
    let s = t.elapsed().as_secs_f64();
    println!("xet hash: {:.0} MB/s ({h})", d.len() as f64 / s / 1e6);
    let t = std::time::Instant::now();
    let b = blake3::hash(&d);
    println!(
        "plain blake3: {:.0} MB/s ({b})",
        d.len() as f64 / t.elapsed().as_secs_f64() / 1e6
    );
    let t = std::time::Instant::now();
    let n = chunk_lengths(&d).len();
    println!(
        "chunker alone: {:.0} MB/s ({n} chunks)",
        d.len() as f64 / t.elapsed().as_secs_f64() / 1e6
    );
}
