//! The Xet key of a serve started without `--xet-secret-file`: made once and kept in the
//! index directory (`xet-secret`, docs/format/node.md, "Serve's kept Xet key"), never read
//! through a link or from a file this code did not write.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

/// The file in the index directory holding the Xet key of a serve started without
/// `--xet-secret-file`.
const KEPT_XET_SECRET: &str = "xet-secret";

/// The Xet key of a serve started without `--xet-secret-file`: kept in `dir` (the index
/// directory, this machine's own) as [`KEPT_XET_SECRET`], made on the first start, so that
/// a restart (an upgrade, a crash) keeps the tokens and URLs handed out valid: hf_xet does
/// not ask for a new token on a 401, it uses the one it has until that one expires (an
/// hour by default). When the key cannot be kept (a read-only directory), this process
/// signs with a key of its own, as serve did before keys were kept.
pub(super) fn kept_secret(dir: &Path) -> Result<[u8; 32]> {
    match keep_secret(dir) {
        Ok(key) => Ok(key),
        Err(e) => {
            tracing::warn!(
                "cannot keep the Xet key in {}: {e:#}; this process signs with a key of its \
                 own (the tokens and URLs it hands out end with it)",
                dir.display()
            );
            random_key()
        }
    }
}

/// 32 bytes from the kernel's random source (a key, or a name no one can guess).
fn random_key() -> Result<[u8; 32]> {
    hubserve::xet::load_secret(None).map_err(anyhow::Error::msg)
}

fn hex32(key: &[u8; 32]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// The kept key, made when there is none or the one there is not a key this code wrote (a
/// symbolic link, another owner, readable by others, not 64 hex digits: replaced, with a
/// warning, since tokens signed with it can no longer be trusted).
fn keep_secret(dir: &Path) -> Result<[u8; 32]> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(KEPT_XET_SECRET);
    remove_stale_temporaries(dir);
    match read_kept(&path) {
        Ok(Some(key)) => return Ok(key),
        Ok(None) => {}
        Err(why) => tracing::warn!(
            "the kept Xet key {}: {why}; making a new one (tokens handed out before are refused)",
            path.display()
        ),
    }
    std::fs::create_dir_all(dir).with_context(|| format!("mkdir {}", dir.display()))?;
    let text = hex32(&random_key()?);
    // A name no one can have planted, opened only if new and never through a link.
    let tmp = dir.join(format!(
        "{KEPT_XET_SECRET}.{}.{}.tmp",
        std::process::id(),
        &hex32(&random_key()?)[..16]
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, &path))
        .and_then(|()| std::fs::File::open(dir)?.sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", path.display()));
    }
    hubserve::xet::secret_from_text(text.as_bytes()).map_err(anyhow::Error::msg)
}

/// The key kept at `path`, `None` when there is none; an error saying why the file there is
/// not one (it is then replaced).
fn read_kept(path: &Path) -> Result<Option<[u8; 32]>, String> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err("is a symbolic link".into()),
        Err(e) => return Err(e.to_string()),
    };
    let m = f.metadata().map_err(|e| e.to_string())?;
    // SAFETY: geteuid has no arguments and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !m.is_file() || m.uid() != me || m.mode() & 0o077 != 0 {
        return Err(format!(
            "is not a regular file of this user that only it can read (mode {:o}, owner {})",
            m.mode() & 0o7777,
            m.uid()
        ));
    }
    let mut text = Vec::new();
    f.take(1024)
        .read_to_end(&mut text)
        .map_err(|e| e.to_string())?;
    let text = text.trim_ascii();
    if text.len() != 64
        || !text
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return Err("does not hold 64 hex digits (cut short or altered)".into());
    }
    hubserve::xet::secret_from_text(text).map(Some)
}

/// Temporary key files a start killed midway left (`xet-secret.*.tmp`, older than a
/// minute: a start writing one now is left alone); links are removed, never followed.
fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let old = std::fs::symlink_metadata(e.path())
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(60));
        if name.starts_with(&format!("{KEPT_XET_SECRET}.")) && name.ends_with(".tmp") && old {
            let _ = std::fs::remove_file(e.path());
        }
    }
}
