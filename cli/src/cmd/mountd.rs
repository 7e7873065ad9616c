//! `modelcas mountd`: the node's holder of CSI volumes (`mountd::holder`), listening on
//! its socket for the plugin (`modelcas csi`), until SIGTERM; SIGHUP restarts its FUSE
//! server from the binary on disk. Run again with `MODELCAS_MOUNTD_SERVER_FD` set, it is
//! that server (`mount::serve_volumes`).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::args::MountdArgs;
use crate::cmd::mount::{self, block_signals, wait_signal};
use crate::ctx::Ctx;

pub fn run(ctx: &Ctx, a: &MountdArgs) -> Result<ExitCode> {
    let o = mount::Options::new(ctx, &a.tuning, None);
    if mount::is_server() {
        return mount::serve_volumes(ctx, &o);
    }
    let signals = block_signals();
    let taken = if a.take_over && a.socket.exists() {
        match mountd::socket::take_over(&a.socket) {
            Ok(taken) => Some(taken),
            Err(e) => {
                tracing::warn!("--take-over: {e}; starting with no volumes");
                None
            }
        }
    } else {
        None
    };
    // After a takeover the old mountd's socket is still there until it notices: replaced.
    let replace = taken.is_some();
    let taken = taken.unwrap_or_default();
    let holder = mountd::holder::Holder::start_after(mount::server_argv()?, taken.history)?;
    let n = taken.held.len();
    for held in taken.held {
        let id = held.volume.id.clone();
        if let Err(e) = holder.adopt(held) {
            tracing::error!("volume {id} taken over but not kept: {e}");
        }
    }
    if a.take_over {
        tracing::info!("took {n} volumes over");
    }
    let (listening, socket) = (holder.clone(), a.socket.clone());
    let listener = std::thread::spawn(move || mountd::socket::listen(&socket, &listening, replace));
    tracing::info!("mountd listening on {}", a.socket.display());
    loop {
        if listener.is_finished() {
            let r = listener.join();
            match r {
                Ok(Ok(())) => {
                    // Handed over: the new mountd serves every volume. Stay until told to
                    // stop (an exit would have the container restarted, and take them back).
                    tracing::info!("every volume handed over; waiting for SIGTERM");
                    while !matches!(wait_signal(&signals, Duration::from_secs(1)), Some(s) if s != libc::SIGHUP)
                    {
                    }
                    return Ok(ExitCode::SUCCESS);
                }
                Ok(Err(e)) => {
                    return Err(e).context(format!("mountd socket {}", a.socket.display()))
                }
                Err(_) => anyhow::bail!("mountd socket thread panicked"),
            }
        }
        match wait_signal(&signals, Duration::from_millis(200)) {
            Some(libc::SIGHUP) => {
                tracing::info!("SIGHUP: starting the FUSE server again from the binary on disk");
                holder.restart_server();
            }
            Some(sig) => {
                let held = holder.count();
                if held > 0 {
                    tracing::warn!(
                        "signal {sig}: stopping with {held} volumes held: their mounts end (ENOTCONN) \
                         until the plugin unpublishes them"
                    );
                }
                holder.stop();
                return Ok(ExitCode::SUCCESS);
            }
            None => {}
        }
    }
}
