//! Measures the chunk codec on the largest shard of a generated series: bytes stored and
//! throughput of each zstd setting on the bf16 high-byte plane, against plain zstd level 1
//! on the whole chunk, in one run.
//!
//! cargo run --release -p modelcas-store --example plane_codec -- PATH/TO/model-00001-of-00003.safetensors

use std::time::Instant;

use zstd::zstd_safe::CParameter;

fn main() {
    let path = std::env::args().nth(1).expect("usage: plane_codec FILE");
    let data = std::fs::read(&path).expect("read");
    let chunk = 512 * 1024;
    let chunks: Vec<&[u8]> = data.chunks(chunk).collect();
    let hi: Vec<Vec<u8>> = chunks
        .iter()
        .map(|c| c.iter().skip(1).step_by(2).copied().collect())
        .collect();
    let run = |name: &str,
               input: &[Vec<u8>],
               logical: usize,
               f: &dyn Fn(&mut zstd::bulk::Compressor<'static>)| {
        let mut c = zstd::bulk::Compressor::new(1).unwrap();
        f(&mut c);
        let t = Instant::now();
        let out: usize = input.iter().map(|p| c.compress(p).unwrap().len()).sum();
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{name:40} plane stored {:.3}  {:.0} MB/s of logical bytes",
            out as f64 / input.iter().map(|p| p.len()).sum::<usize>() as f64,
            logical as f64 / secs / 1e6
        );
    };
    let whole: Vec<Vec<u8>> = chunks.iter().map(|c| c.to_vec()).collect();
    run(
        "zstd 1 on whole chunks (baseline)",
        &whole,
        data.len(),
        &|_| {},
    );
    run("zstd 1 on high plane", &hi, data.len(), &|_| {});
    run("zstd 1 hashLog 12", &hi, data.len(), &|c| {
        c.set_parameter(CParameter::HashLog(12)).unwrap();
    });
    run("zstd 1 minMatch 7 hashLog 12", &hi, data.len(), &|c| {
        c.set_parameter(CParameter::HashLog(12)).unwrap();
        c.set_parameter(CParameter::MinMatch(7)).unwrap();
    });
    run(
        "zstd 1 minMatch 7 hashLog 10 window 18",
        &hi,
        data.len(),
        &|c| {
            c.set_parameter(CParameter::HashLog(10)).unwrap();
            c.set_parameter(CParameter::MinMatch(7)).unwrap();
            c.set_parameter(CParameter::WindowLog(18)).unwrap();
        },
    );
    run(
        "zstd 1 minMatch 7 hashLog 8 window 17",
        &hi,
        data.len(),
        &|c| {
            c.set_parameter(CParameter::HashLog(8)).unwrap();
            c.set_parameter(CParameter::MinMatch(7)).unwrap();
            c.set_parameter(CParameter::WindowLog(17)).unwrap();
        },
    );
    run(
        "zstd 1 minMatch 7 hashLog 6 window 16",
        &hi,
        data.len(),
        &|c| {
            c.set_parameter(CParameter::HashLog(6)).unwrap();
            c.set_parameter(CParameter::MinMatch(7)).unwrap();
            c.set_parameter(CParameter::WindowLog(16)).unwrap();
        },
    );
    run("zstd -1", &hi, data.len(), &|c| {
        c.set_parameter(CParameter::CompressionLevel(-1)).unwrap();
    });
    run("zstd 3", &hi, data.len(), &|c| {
        c.set_parameter(CParameter::CompressionLevel(3)).unwrap();
    });
}
