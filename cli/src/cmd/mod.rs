//! One module per subcommand, and the dispatch to them (`init` and `config show` are
//! here); the global options and opening the store are [`crate::ctx`]'s.

mod bundle;
mod csi;
mod gc;
mod index;
mod ingest;
mod ls;
mod mount;
mod mountd;
mod pull;
mod read;
mod release;
mod serve;
mod shared_index;
mod stats;
mod sync;
mod ui;
mod uploads;
mod upstream;
mod xet_key;

use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use repo::Store;

use crate::args::{Cli, Command};
use crate::ctx::Ctx;

fn init(ctx: &Ctx, chunk_avg: u32, pack_size: u32) -> Result<ExitCode> {
    let chunk = chunker::ChunkParams::around(chunk_avg);
    chunk
        .validate()
        .with_context(|| format!("--chunk-avg {chunk_avg}"))?;
    if !(64 * 1024..=1 << 30).contains(&pack_size) {
        bail!("--pack-size {pack_size}: must be between 64 KiB and 1 GiB");
    }
    let backend = ctx.backend()?;
    match Store::open(backend.clone()) {
        Ok(_) => bail!("a store already exists at {}", backend.location()),
        Err(repo::StoreError::NoStore(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let s = Store::open_or_create(
        backend,
        repo::CreateOptions {
            chunk,
            pack_target: pack_size as usize,
        },
    )?;
    let c = s.config();
    println!(
        "created store {} (chunks {}/{}/{} bytes, packs {} bytes)",
        s.backend().location(),
        c.chunk_min,
        c.chunk_avg,
        c.chunk_max,
        c.pack_target
    );
    Ok(ExitCode::SUCCESS)
}

/// Runs the parsed command line: merges the config file under flags and environment,
/// starts logging and metrics, runs the command, writes the metrics file.
pub fn run(cli: Cli) -> Result<ExitCode> {
    let (file, file_path) = crate::config::load(cli.config.as_deref())?;
    let config = crate::config::merge_globals(&cli, file);
    crate::logging::init(
        config.log_level.as_deref(),
        config.log_format.as_deref(),
        cli.quiet,
    )?;
    let metrics = crate::metrics::registry(matches!(cli.command, Command::Serve(_)));
    // A mount's holder reads nothing: its FUSE server (the same command run again) serves
    // the metrics, and a server that cannot bind the port (its predecessor's socket not yet
    // gone) still serves the mount.
    let holder =
        matches!(cli.command, Command::Mount(_) | Command::Mountd(_)) && !mount::is_server();
    if let Some(addr) = config.metrics_listen.as_ref().filter(|_| !holder) {
        if let Err(e) = crate::metrics::serve(addr, metrics.clone()) {
            if !mount::is_server() {
                return Err(e);
            }
            tracing::warn!("{e:#}: no metrics from this FUSE server");
        }
    }
    let ctx = Ctx {
        store_arg: config.store.clone(),
        cache_dir: config.cache_dir.clone(),
        cache_size: config.cache_size.clone(),
        s3: objects::S3Options {
            endpoint: config.endpoint_url.clone(),
            region: config.region.clone(),
            path_style: config.path_style,
        },
        index_dir: config.index_dir.clone(),
        quiet: cli.quiet,
        config,
        metrics,
    };
    let code = dispatch(&ctx, cli.command, file_path.as_deref());
    if let Some(path) = &ctx.config.metrics_file {
        crate::metrics::write_file(path, &ctx.metrics)?;
    }
    code
}

/// The name of a command that writes to the store (refused on hubs before any work).
fn writer(command: &Command) -> Option<&'static str> {
    Some(match command {
        Command::Init { .. } => "init",
        Command::Ingest { .. } => "ingest",
        Command::Gc(_) => "gc",
        Command::Rm { .. } => "rm",
        Command::Pull(_) => "pull",
        Command::Sync(_) => "sync",
        Command::Import { .. } => "import",
        Command::Pin { .. } => "pin",
        Command::Unpin { .. } => "unpin",
        Command::Ref { .. } => "ref",
        Command::Check { all: true, .. } => "check --all",
        Command::Label { labels, remove, .. } if !labels.is_empty() || !remove.is_empty() => {
            "label"
        }
        Command::Fsck { .. } => "fsck",
        // The index is the node's own, but rebuilding it reads gc's records, which hubs
        // do not serve.
        Command::Index { .. } => "index rebuild",
        Command::Serve(a) if a.upstream.upstream.is_some() => "serve --upstream",
        _ => return None,
    })
}

fn dispatch(ctx: &Ctx, command: Command, file_path: Option<&std::path::Path>) -> Result<ExitCode> {
    if let (Some(name), true) = (writer(&command), ctx.store_is_hub()) {
        let loc = ctx.store_arg.as_deref().unwrap_or_default();
        anyhow::bail!(
            "--store {loc} is a modelcas hub, which only reads: `modelcas {name}` writes to the \
             store; run it against the bucket itself (--store s3://BUCKET/PREFIX or the store's \
             directory)"
        );
    }
    match command {
        Command::Config {
            action: crate::args::ConfigAction::Show,
        } => {
            print!("{}", crate::config::show(&ctx.config, file_path)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Init {
            chunk_avg,
            pack_size,
        } => init(ctx, chunk_avg, pack_size),
        Command::Ingest {
            path,
            repo,
            revision,
            refs,
            threads,
            reread,
            labels,
            json,
        } => {
            let flags = ingest::Flags {
                threads,
                reread,
                labels,
                json,
            };
            ingest::run(ctx, &path, repo, revision, refs, flags)
        }
        Command::Ls {
            target,
            json,
            sha256sum,
        } => ls::run(ctx, target.as_deref(), json, sha256sum),
        Command::Checkout { revision, dir } => read::checkout(ctx, &revision, &dir),
        Command::Cat { revision, path } => read::cat(ctx, &revision, &path),
        Command::Verify { revision, json } => read::verify(ctx, &revision, json),
        Command::Check {
            target,
            all: true,
            recheck,
            json,
            ..
        } => release::check_all(ctx, target.as_deref(), recheck, json),
        Command::Check {
            target,
            json,
            no_record,
            ..
        } => release::check(ctx, target.as_deref().unwrap_or_default(), json, no_record),
        Command::Label {
            revision,
            labels,
            remove,
            json,
        } => release::label(ctx, &revision, &labels, &remove, json),
        Command::Stats { json } => stats::run(ctx, json),
        Command::Index { action } => index::run(ctx, action),
        Command::Mount(a) => mount::mount(
            ctx,
            &a.mountpoint,
            &mount::Options::new(ctx, &a.tuning, a.repo.clone()),
        ),
        Command::Mountd(a) => mountd::run(ctx, &a),
        Command::Csi(a) => csi::run(ctx, &a),
        Command::Umount { mountpoint } => mount::umount(&mountpoint),
        Command::Gc(a) => gc::gc(ctx, &ctx.config, &a),
        Command::Rm { revision, force } => gc::rm(ctx, &revision, force),
        Command::Export {
            revisions,
            output,
            have,
            have_from,
            no_labels,
            json,
        } => {
            let have_file = have_from.as_deref();
            bundle::export(
                ctx,
                &revisions,
                &output,
                (&have, have_file, no_labels),
                json,
            )
        }
        Command::Pull(a) => pull::run(ctx, &a),
        Command::Sync(a) => sync::run(ctx, &a),
        Command::Import { file, json } => bundle::import(ctx, &file, json),
        Command::Serve(a) => serve::run(ctx, serve::Options::new(ctx, *a)?),
        Command::Pin { revision } => gc::pin(ctx, &revision, true),
        Command::Ref {
            repo,
            name,
            revision,
        } => gc::set_ref(ctx, &repo, &name, &revision),
        Command::Unpin { revision } => gc::pin(ctx, &revision, false),
        Command::Fsck {
            read_data,
            grace,
            json,
        } => gc::fsck(ctx, &ctx.config, read_data, grace, json),
    }
}
