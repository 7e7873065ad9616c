//! `modelcas mount` (foreground until SIGINT/SIGTERM or an external unmount) and
//! `modelcas umount`.
//!
//! `modelcas mount` is two processes: this one mounts the connection and holds it (a
//! `mountd::holder::Holder` of one volume, which never reads the store), and runs the
//! same command line again as its FUSE server (with `MODELCAS_MOUNTD_SERVER_FD` set; see
//! [`serve_volumes`]). When the server dies it is started again at once and takes the
//! mount over (readers pause, nothing fails); SIGHUP restarts it from the binary on disk,
//! an upgrade without unmounting.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use modelfs::MountOptions;
use read::file_cache::FileCache;
use read::tensor_plan::TensorOrder;

use crate::args::MountTuning;
use crate::ctx::{resolve, Ctx};

/// Options of `modelcas mount`.
pub struct Options {
    pub repo: Option<String>,
    pub allow_other: bool,
    pub cache_mib: usize,
    pub fetch_threads: Option<usize>,
    pub threads: usize,
    pub spin_us: Option<u64>,
    pub safetensors_order: Option<String>,
    pub file_cache: Option<PathBuf>,
    pub file_cache_size: Option<String>,
    pub passthrough: bool,
}

impl Options {
    /// The flags, with `[mount]` of the config file under them.
    pub fn new(ctx: &Ctx, a: &MountTuning, repo: Option<String>) -> Options {
        let m = &ctx.config.mount;
        Options {
            repo,
            allow_other: a.allow_other || m.allow_other.unwrap_or(false),
            cache_mib: a.cache_mib.or(m.cache_mib).unwrap_or(64),
            fetch_threads: a.fetch_threads.or(m.fetch_threads),
            threads: a.threads.or(m.threads).unwrap_or(8),
            spin_us: a.spin_us.or(m.spin_us),
            safetensors_order: a.safetensors_order.clone().or(m.safetensors_order.clone()),
            file_cache: a.file_cache.clone().or(m.file_cache.clone()),
            file_cache_size: a.file_cache_size.clone().or(m.file_cache_size.clone()),
            passthrough: !a.no_passthrough && m.passthrough.unwrap_or(true),
        }
    }
}

/// `--safetensors-order` (`MODELCAS_SAFETENSORS_ORDER`, `[mount] safetensors_order`):
/// `name` (the default), `file` or `off`: the order in which the mount expects loaders to
/// walk a `.safetensors` file's tensors, for read-ahead.
fn tensor_order(v: Option<&str>) -> Result<TensorOrder> {
    match v {
        None => Ok(TensorOrder::Name),
        Some(v) => match TensorOrder::parse(v) {
            Some(o) => Ok(o),
            None => bail!("--safetensors-order {v:?}: expected name, file or off"),
        },
    }
}

/// The node's whole-file cache (`--file-cache`, `--file-cache-size`; default 20G under
/// the user's cache directory), or none when its size is 0. Files are named by their
/// sha256, so every store and mount of the node can share one. A directory given
/// explicitly must open; the default one is skipped with a warning when it cannot (a
/// read-only home in a container).
fn file_cache(o: &Options) -> Result<Option<Arc<FileCache>>> {
    let size = match &o.file_cache_size {
        Some(s) => crate::ctx::parse_size(s).with_context(|| format!("--file-cache-size {s:?}"))?,
        None => 20 << 30,
    };
    if size == 0 {
        return Ok(None);
    }
    if let Some(dir) = &o.file_cache {
        let cache = FileCache::open(dir, size)
            .with_context(|| format!("--file-cache {}", dir.display()))?;
        return Ok(Some(cache));
    }
    let Some(dir) = dirs::cache_dir().map(|d| d.join("modelcas/files")) else {
        tracing::warn!("no cache directory for the file cache (pass --file-cache): off");
        return Ok(None);
    };
    match FileCache::open(&dir, size) {
        Ok(cache) => Ok(Some(cache)),
        Err(e) => {
            tracing::warn!("file cache off (pass --file-cache DIR to choose where): {e}");
            Ok(None)
        }
    }
}

/// `--spin-us` (`MODELCAS_MOUNT_SPIN_US`, `[mount] spin_us`): at most 1000 (longer looks
/// only spend a CPU after each request); without it, 50, or 0 under a CPU quota.
fn spin_wait(us: Option<u64>) -> Result<Duration> {
    let max = modelfs::MAX_SPIN_WAIT.as_micros();
    match us {
        None => Ok(modelfs::default_spin_wait()),
        Some(us) if u128::from(us) > max => bail!(
            "--spin-us (MODELCAS_MOUNT_SPIN_US, [mount] spin_us) {us}: at most {max} microseconds"
        ),
        Some(us) => Ok(Duration::from_micros(us)),
    }
}

/// The mount's options for `o`, `single` shown at the root (None: every repository).
fn mount_options(
    store: &repo::Store,
    o: &Options,
    single: Option<(format::RepoId, format::CommitId)>,
) -> Result<MountOptions> {
    let (cache_mib, threads) = (o.cache_mib, o.threads);
    if cache_mib < 16 {
        bail!("--cache-mib {cache_mib}: at least 16 MiB is needed");
    }
    if o.fetch_threads == Some(0) || threads == 0 {
        bail!("--threads and --fetch-threads must be at least 1");
    }
    let remote = crate::ctx::is_remote(&store.backend().location());
    Ok(MountOptions {
        single,
        allow_other: o.allow_other,
        threads,
        spin_wait: spin_wait(o.spin_us)?,
        cache_bytes: cache_mib << 20,
        fetch_threads: o.fetch_threads.unwrap_or(if remote {
            crate::ctx::REMOTE_READ_THREADS
        } else {
            4
        }),
        tensor_order: tensor_order(o.safetensors_order.as_deref())?,
        readahead: Default::default(),
        file_cache: file_cache(o)?,
        passthrough: o.passthrough,
        on_first_entry: None,
    })
}

/// Revisions of a full mount waiting for [`release_notices`]'s thread; more are dropped.
const NOTICE_QUEUE: usize = 64;

/// Logs the release check of `repo@commit` where it is worth a word to whoever uses the
/// revision (design/release-check.md §6; a warning, never a refusal): failed (warn), not
/// made (info). `volume` prefixes the lines. Reads the manifest and the record; an error
/// reading them is logged and ignored.
pub fn release_notice(
    store: &repo::Store,
    repo: &format::RepoId,
    commit: &format::CommitId,
    volume: Option<&str>,
) {
    let check = store
        .manifest(repo, commit)
        .and_then(|m| store.current_check(&m));
    log_release_check(repo, commit, volume, check);
}

/// [`release_notice`] on a thread of its own: the caller does not wait for the store.
pub fn release_notice_in_background(
    store: &repo::Store,
    repo: &format::RepoId,
    commit: &format::CommitId,
    volume: Option<String>,
) {
    let (s, r, c) = (store.clone(), repo.clone(), *commit);
    let spawned = std::thread::Builder::new()
        .name("release-notice".into())
        .spawn(move || release_notice(&s, &r, &c, volume.as_deref()));
    if let Err(e) = spawned {
        tracing::warn!("{repo}@{commit}: release check not read (no thread: {e})");
    }
}

fn log_release_check(
    repo: &format::RepoId,
    commit: &format::CommitId,
    volume: Option<&str>,
    check: repo::Result<Option<format::release::CheckObject>>,
) {
    let at = volume.map(|v| format!("volume {v}: ")).unwrap_or_default();
    match check {
        Ok(Some(c)) if c.verdict() == format::release::Verdict::Failed => tracing::warn!(
            "{at}{repo}@{commit} failed its release check: {}",
            c.errors_line(5)
        ),
        Ok(Some(_)) => {}
        Ok(None) => tracing::info!(
            "{at}{repo}@{commit}: release check not made (run modelcas check {repo}@{commit})"
        ),
        Err(e) => tracing::warn!("{at}{repo}@{commit}: its release check not read: {e}"),
    }
}

/// The release notices of a full mount ([`release_notice`] of each revision entered): the
/// FUSE thread entering a revision hands its manifest to one thread, which reads the
/// record, so that no FUSE thread waits on the store; at most [`NOTICE_QUEUE`] wait, and
/// more are dropped.
fn release_notices(store: &repo::Store) -> Result<modelfs::FirstEntry> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Arc<repo::manifest::Manifest>>(NOTICE_QUEUE);
    let store = store.clone();
    std::thread::Builder::new()
        .name("release-notices".into())
        .spawn(move || {
            for m in rx {
                log_release_check(&m.repo, &m.commit, None, store.current_check(&m));
            }
        })
        .context("a thread for release notices")?;
    Ok(modelfs::FirstEntry(Arc::new(move |m| {
        let _ = tx.try_send(m.clone());
    })))
}

/// Whether this process is a FUSE server started by a holder (`modelcas mount` or
/// `modelcas mountd`), rather than the command a person ran.
pub fn is_server() -> bool {
    std::env::var_os(mountd::holder::SERVER_FD_ENV).is_some()
}

/// The FUSE server: serves every volume its holder sends, with one store, one chunk cache
/// and one file cache for all, until the holder goes. A volume pinned to a commit shows it
/// at its root and holds it in use (gc's `--unused-for`) while it is served.
pub fn serve_volumes(ctx: &Ctx, o: &Options) -> Result<ExitCode> {
    let sock = mountd::server::holder_socket()?;
    let store = ctx.open()?;
    let base = mount_options(&store, o, None)?;
    let cache = modelfs::chunk_cache(&store, &base)?;
    repo::usage::start_background_writer();
    crate::resident::keep_code_resident();
    let serve = move |v: &mountd::wire::Volume,
                      fuse,
                      state|
          -> std::result::Result<mountd::server::Served, String> {
        serve_volume(&store, &cache, &base, v, fuse, state).map_err(|e| format!("{e:#}"))
    };
    mountd::server::run(sock, Arc::new(serve))?;
    repo::usage::flush_background();
    Ok(ExitCode::SUCCESS)
}

fn serve_volume(
    store: &repo::Store,
    cache: &Arc<read::cache::ChunkCache>,
    base: &MountOptions,
    v: &mountd::wire::Volume,
    fuse: std::os::fd::OwnedFd,
    state: std::os::fd::OwnedFd,
) -> Result<mountd::server::Served> {
    let mut opts = base.clone();
    opts.allow_other = v.allow_other;
    let mut hold = None;
    if let Some(c) = &v.commit {
        let repo = format::RepoId::parse(&v.repo)?;
        let commit =
            format::CommitId::parse(c).with_context(|| format!("volume {}: commit {c:?}", v.id))?;
        repo::usage::record_in_background(store, &repo, &commit, "volume", Duration::ZERO);
        hold = Some(repo::usage::hold(store, &repo, &commit, "volume"));
        opts.single = Some((repo, commit));
    } else {
        opts.on_first_entry = Some(release_notices(store)?);
    }
    let state = modelfs::takeover::State::open(std::fs::File::from(state))?;
    let taken_over = state.header().initialized();
    let session =
        modelfs::serve_connection(store.clone(), cache.clone(), fuse, Arc::new(state), &opts)?;
    Ok(mountd::server::Served {
        session: Box::new((session, hold)),
        taken_over,
    })
}

/// This process's command line, to run again as the FUSE server.
pub fn server_argv() -> Result<Vec<std::ffi::OsString>> {
    let exe = std::env::current_exe().context("the path of this modelcas binary")?;
    let mut argv = vec![exe.into_os_string()];
    argv.extend(std::env::args_os().skip(1));
    Ok(argv)
}

pub fn mount(ctx: &Ctx, mountpoint: &Path, o: &Options) -> Result<ExitCode> {
    if is_server() {
        return serve_volumes(ctx, o);
    }
    // Block the signals before any thread starts (the S3 client starts some when the store
    // is opened), so that every thread inherits the mask and this one receives them below.
    let signals = block_signals();
    clear_dead_mount(mountpoint);
    // One spelling for the kernel's table, which `is_mounted` reads: absolute, no trailing
    // slash, no symlink.
    let canonical = match mountpoint.canonicalize() {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("mountpoint {} does not exist", mountpoint.display())
        }
        Err(e) => bail!("mountpoint {}: {e}", mountpoint.display()),
    };
    let mountpoint = canonical.as_path();
    let store = ctx.open()?;
    let single = match o.repo.as_deref() {
        Some(spec) => Some(resolve(&store, spec)?),
        None => None,
    };
    if let Some((r, c)) = &single {
        release_notice_in_background(&store, r, c, None);
    }
    let opts = mount_options(&store, o, single.clone())?;
    let fuse = modelfs::mount_connection(mountpoint, &opts)?;
    let holder = mountd::holder::Holder::start(server_argv()?)?;
    let volume = mountd::wire::Volume {
        id: format!("mount:{}", mountpoint.display()),
        target: mountpoint.to_path_buf(),
        repo: single
            .as_ref()
            .map(|(r, _)| r.to_string())
            .unwrap_or_default(),
        revision: o
            .repo
            .as_deref()
            .and_then(|spec| spec.split_once('@').map(|(_, rev)| rev.to_string()))
            .unwrap_or_default(),
        commit: single.as_ref().map(|(_, c)| c.to_hex()),
        allow_other: o.allow_other,
        labels: Vec::new(),
        instance: None,
    };
    if let Err(e) = holder.add(volume, fuse) {
        holder.stop();
        lazy_unmount(mountpoint);
        return Err(e.into());
    }
    modelfs::raise_readahead(mountpoint);
    match &single {
        Some((r, c)) => tracing::info!(
            "mounted {r}@{c} at {} (Ctrl-C or `modelcas umount` to stop)",
            mountpoint.display()
        ),
        None => tracing::info!(
            "mounted {} at {} (Ctrl-C or `modelcas umount` to stop)",
            store.backend().location(),
            mountpoint.display()
        ),
    }
    loop {
        if !modelfs::is_mounted(mountpoint) {
            tracing::info!("{} was unmounted", mountpoint.display());
            holder.stop();
            return Ok(ExitCode::SUCCESS);
        }
        match wait_signal(&signals, Duration::from_millis(200)) {
            Some(libc::SIGHUP) => {
                tracing::info!("SIGHUP: starting the FUSE server again from the binary on disk");
                holder.restart_server();
            }
            Some(sig) => {
                tracing::info!("signal {sig}: unmounting {}", mountpoint.display());
                break;
            }
            None => {}
        }
    }
    if umount(mountpoint).is_err() {
        // Busy (files still open): detach lazily so the process can exit.
        tracing::warn!("unmount of {} busy; detaching lazily", mountpoint.display());
        lazy_unmount(mountpoint);
    }
    holder.stop();
    Ok(ExitCode::SUCCESS)
}

/// A mount at `mountpoint` whose every holder died ("Transport endpoint is not
/// connected") is detached, so that a new one can be made there.
pub fn clear_dead_mount(mountpoint: &Path) {
    // Only a path the kernel's table shows mounted is stat'ed (a stat of a live mount
    // whose server is slow would wait for it; one of a dead mount fails at once).
    if !modelfs::is_mounted(mountpoint) {
        return;
    }
    if let Err(e) = std::fs::metadata(mountpoint) {
        if e.raw_os_error() == Some(libc::ENOTCONN) {
            tracing::warn!(
                "{}: a dead mount is there; detaching it",
                mountpoint.display()
            );
            lazy_unmount(mountpoint);
        }
    }
}

pub fn umount(mountpoint: &Path) -> Result<ExitCode> {
    let status = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg(mountpoint)
        .status();
    match status {
        Ok(s) if s.success() => Ok(ExitCode::SUCCESS),
        _ => {
            let c = std::ffi::CString::new(mountpoint.as_os_str().as_encoded_bytes())?;
            // SAFETY: a valid NUL-terminated path; umount2 touches no other memory.
            if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
                Ok(ExitCode::SUCCESS)
            } else {
                bail!(
                    "cannot unmount {}: {}",
                    mountpoint.display(),
                    std::io::Error::last_os_error()
                )
            }
        }
    }
}

pub fn lazy_unmount(mountpoint: &Path) {
    let ok = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg("-z")
        .arg(mountpoint)
        .status()
        .map(|s| s.success());
    if !matches!(ok, Ok(true)) {
        if let Ok(c) = std::ffi::CString::new(mountpoint.as_os_str().as_encoded_bytes()) {
            // SAFETY: as above.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

pub fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset operations on a local, zero-initialised set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

pub fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: set and ts are valid for the call; info may be null.
    let sig = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (sig > 0).then_some(sig)
}
