//! `modelcas`: the command-line interface. Parses arguments, opens the store and hands
//! over to one module per subcommand in `cmd/`; all the work is done by the `store` crate.

mod args;
mod cmd;
mod config;
mod logging;
mod metrics;
mod output;
mod progress;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    tune_malloc();
    store::failpoint::setup();
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
fn tune_malloc() {
    // SAFETY: mallopt only changes allocator tunables; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}
