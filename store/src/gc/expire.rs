//! After gc deletes expired manifests: waiting for the pin, ref and rm commands that were
//! running (their write leases), then putting back each expired manifest a ref or pin now
//! wants, only where its key is absent (docs/format/protocols.md, "Garbage collection", step 3).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use super::report::{expired_revision, GcReport};
use super::session::Rev;
use format::names::{CommitId, RepoId};
use objects::ObjectStore;
use repo::handle::{decode_manifest, Store};
use repo::lock;
use repo::Result;

/// Longest gc waits for pin, ref and rm commands that were running when it deleted expired
/// manifests: twice their lease's time to live (a holder that died goes stale within one).
const WRITERS_WAIT: Duration = Duration::from_secs(2 * lock::WRITE_LEASE_TTL.as_secs());
/// How often the write leases are listed while waiting.
const WRITERS_POLL: Duration = Duration::from_millis(50);

/// Waits until every write lease live now is released or stale (at most [`WRITERS_WAIT`]):
/// each of those commands has then either written its pin or ref and seen the commit
/// still there, or taken back what it wrote. Stale leases are removed.
pub(super) fn wait_for_writers(
    backend: &dyn ObjectStore,
    report: &mut GcReport,
    warn: &dyn Fn(String),
) -> Result<()> {
    let now = lock::store_now_ms(backend)?;
    let mut live = Vec::new();
    for l in lock::list(backend, lock::WRITE_KIND)? {
        if l.is_stale(now) {
            backend.delete(&l.key)?;
            report.stale_locks_removed += 1;
        } else {
            live.push(l.key);
        }
    }
    report.writers_waited_for = live.len();
    let deadline = Instant::now() + WRITERS_WAIT;
    while !live.is_empty() {
        if Instant::now() > deadline {
            warn(format!(
                "{} pin/ref/rm commands still running after {} s; going on",
                live.len(),
                WRITERS_WAIT.as_secs()
            ));
            break;
        }
        std::thread::sleep(WRITERS_POLL);
        let now = lock::store_now_ms(backend)?;
        let current: HashMap<String, lock::Listed> = lock::list(backend, lock::WRITE_KIND)?
            .into_iter()
            .map(|l| (l.key.clone(), l))
            .collect();
        live.retain(|k| current.get(k).is_some_and(|l| !l.is_stale(now)));
    }
    Ok(())
}

/// After expired manifests were deleted and the writers waited for: lists refs and pins
/// again and puts back each expired manifest that is now referenced or pinned, only where
/// its key is absent (an ingest may have written the commit again meanwhile: what it wrote
/// is kept, and used for liveness). The rest are reported expired.
pub(super) fn restore_wanted(
    store: &Store,
    expired: Vec<Rev>,
    kept: &mut Vec<Rev>,
    report: &mut GcReport,
    warn: &dyn Fn(String),
) -> Result<()> {
    let backend = store.backend();
    let mut by_repo: BTreeMap<RepoId, Vec<Rev>> = BTreeMap::new();
    for h in expired {
        by_repo.entry(h.repo.clone()).or_default().push(h);
    }
    for (repo, gone) in by_repo {
        let mut wanted: HashSet<CommitId> = store.refs(&repo)?.into_values().collect();
        wanted.extend(store.pins(&repo)?);
        for h in gone {
            let rev = expired_revision(&h.manifest);
            if !wanted.contains(&h.manifest.commit) {
                // Its last-use record goes with it.
                backend.delete(&format::layout::used_key(&repo, &h.manifest.commit))?;
                // So do its release records, unless an ingest stored the commit again
                // meanwhile (its records are then the new ones).
                if backend.size(&h.key)?.is_none() {
                    store.delete_release_records(&repo, &h.manifest.commit)?;
                }
                report.expired.push(rev);
                continue;
            }
            let h = match backend.get(&h.key) {
                Err(objects::ObjectError::NotFound(_)) => {
                    backend.put(&h.key, &h.bytes)?;
                    h
                }
                Ok(bytes) => Rev {
                    manifest: decode_manifest(&h.key, &bytes)?,
                    bytes,
                    ..h
                },
                Err(e) => return Err(e.into()),
            };
            warn(format!(
                "{repo}@{}: a ref or pin appeared while it was expiring; kept",
                h.manifest.commit
            ));
            report.restored.push(rev);
            kept.push(h);
        }
    }
    Ok(())
}
