//! Reading a file's manifest again after a pack was found gone: the one rule the mount and
//! serve share. gc may repack a kept revision and delete the old packs after its grace
//! period (manifests never change; the new places are in its forwarding records, `moved/`);
//! a reader that held the old locations longer reads the manifest again, resolved through
//! those records, and goes on only if the file is still there with the same content.

use std::sync::Arc;

use format::{CommitId, RepoId};
use repo::manifest::{FileEntry, Manifest};
use repo::{Result, Store};

/// The commit's manifest, read again and resolved through gc's forwarding records, with
/// the index of the file `was` in it, if that file is still there with the same size and
/// sha256; `None` when it changed or is gone (the commit was removed and ingested again
/// with other files: its bytes must not be mixed with the old ones).
pub fn same_file(
    store: &Store,
    repo: &RepoId,
    commit: &CommitId,
    was: &FileEntry,
) -> Result<Option<(Arc<Manifest>, usize)>> {
    let fresh = Arc::new(store.manifest_resolved(repo, commit)?);
    let found = fresh
        .files
        .binary_search_by(|f| f.path.as_str().cmp(&was.path))
        .ok()
        .filter(|&i| fresh.files[i].sha256 == was.sha256 && fresh.files[i].size == was.size);
    if found.is_some() {
        tracing::info!(%repo, commit = %commit.to_hex(), file = %was.path,
            "a pack was gone: read the manifest again");
    }
    Ok(found.map(|i| (fresh, i)))
}
