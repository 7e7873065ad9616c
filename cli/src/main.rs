//! `modelcas`: the command-line interface. Parses arguments, opens the store and hands
//! over to one module per subcommand in `cmd/`; all the work is done by the `store` crate.

mod args;
mod cmd;
mod config;
mod ctx;
mod logging;
mod metrics;
mod output;
mod progress;
mod resident;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    tune_malloc();
    repo::failpoint::setup();
    let cli = args::Cli::parse();
    match cmd::run(cli) {
        Ok(code) => code,
        Err(e) => {
            if let Some(ioe) = e.downcast_ref::<std::io::Error>() {
                if ioe.kind() == std::io::ErrorKind::BrokenPipe {
                    return ExitCode::SUCCESS;
                }
            }
            eprintln!("modelcas: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Chunks and frames are buffers of hundreds of KiB to a few MiB, allocated and freed at a
/// high rate. glibc serves such sizes with fresh `mmap`s and trims freed heap eagerly, so
/// every buffer costs page faults and zeroing in the kernel; keeping them in the heap makes
/// checkout about a fifth faster here (docs/BENCHMARKS.md). Larger buffers (packs being
/// built, fuser's 16 MiB request buffers) still get their own mappings, so they do not eat
/// the heap that chunk buffers reuse. Memory stays bounded by the pipelines' own limits.
///
/// glibc gives threads up to 8 arenas per core, each keeping its own freed buffers: the
/// mount (8 FUSE threads, the fetch workers) grew by the bytes it had read (157 → 227 MiB
/// over 16 reads of a 512 MiB revision; docs/BENCHMARKS.md). One arena per core, at least
/// two, keeps that flat without making threads queue for one heap.
///
/// The mount's FUSE server takes one arena (issue 40): its chunks are decoded by the FUSE
/// threads (a reader's miss) and by the fetch workers (prefetches), in two arenas, and freed
/// wherever the cache drops them, so each arena grew to hold most of the chunk cache in turn
/// (free bytes kept by glibc at the peak: 32 MiB with 1 reader, 80 MiB with 4). The server's
/// threads spend their time decoding and copying, not in malloc: no slower with one.
fn tune_malloc() {
    let server = std::env::var_os(mountd::holder::SERVER_FD_ENV).is_some();
    let arenas = if server {
        1
    } else {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .clamp(2, 64)
    } as libc::c_int;
    // SAFETY: mallopt only changes allocator tunables; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_ARENA_MAX, arenas);
    }
}
