//! Object keys: the bucket layout shared by every backend (`docs/format/bucket.md`, "Bucket
//! layout").
//!
//! ```text
//! config                                   store config (chunk parameters, store id)
//! packs/<2 hex>/<64 hex>                   pack objects, named by the BLAKE3 of their bytes
//! repos/<org>/<name>/manifests/<40 hex>    one manifest per commit
//! repos/<org>/<name>/refs/<escaped ref>    one object per branch or tag ('/' written as %2F)
//! repos/<org>/<name>/pins/<40 hex>         one object per pinned commit
//! repos/<org>/<name>/used/<40 hex>         last-use records
//! repos/<org>/<name>/mirror/repo           the mirror brought the repository from upstream
//! repos/<org>/<name>/mirror/refs/<ref>     a ref the mirror set (escaped as refs/)
//! repos/<org>/<name>/partial/<40 hex>      a commit stored with only some of its files
//! locks/<gc|ingest>-<16 hex>               gc locks and ingest leases
//! gc/condemned                             packs marked for deletion, and when
//! moved/<2 hex>/<64 hex>                   forwarding records of packs gc rewrote
//! tmp/...                                  local store only: files being written
//! ```

use crate::names::{CommitId, RepoId};
use crate::pack::PackId;

/// The store config object.
pub const CONFIG_KEY: &str = "config";
/// The store's feature list (absent: none).
pub const FEATURES_KEY: &str = "features";
/// Prefix of every pack.
pub const PACKS_PREFIX: &str = "packs/";
/// Prefix of every lock and lease.
pub const LOCKS_PREFIX: &str = "locks/";
/// The list of packs gc has marked for deletion.
pub const CONDEMNED_KEY: &str = "gc/condemned";
/// Prefix of every forwarding record.
pub const MOVED_PREFIX: &str = "moved/";
/// Prefix of every repository.
pub const REPOS_PREFIX: &str = "repos/";

/// Key of a pack.
pub fn pack_key(id: &PackId) -> String {
    let hex = id.to_hex();
    format!("{PACKS_PREFIX}{}/{hex}", &hex[..2])
}

/// The pack id named by a pack key, if it is one.
pub fn parse_pack_key(key: &str) -> Option<PackId> {
    let rest = key.strip_prefix(PACKS_PREFIX)?;
    let (dir, name) = rest.split_once('/')?;
    let id = PackId::from_hex(name).ok()?;
    (dir.len() == 2 && name.starts_with(dir)).then_some(id)
}

/// Key of the forwarding record of a rewritten pack.
pub fn moved_key(id: &PackId) -> String {
    let hex = id.to_hex();
    format!("{MOVED_PREFIX}{}/{hex}", &hex[..2])
}

/// The old pack id named by a forwarding record's key, if it is one.
pub fn parse_moved_key(key: &str) -> Option<PackId> {
    let rest = key.strip_prefix(MOVED_PREFIX)?;
    let (dir, name) = rest.split_once('/')?;
    let id = PackId::from_hex(name).ok()?;
    (dir.len() == 2 && name.starts_with(dir)).then_some(id)
}

/// Prefix of one repository's objects.
pub fn repo_prefix(repo: &RepoId) -> String {
    format!("{REPOS_PREFIX}{}/{}/", repo.org(), repo.name())
}

/// Prefix of a repository's manifests.
pub fn manifests_prefix(repo: &RepoId) -> String {
    format!("{}manifests/", repo_prefix(repo))
}

/// Key of a manifest.
pub fn manifest_key(repo: &RepoId, commit: &CommitId) -> String {
    format!("{}{}", manifests_prefix(repo), commit.to_hex())
}

/// Prefix of a repository's refs.
pub fn refs_prefix(repo: &RepoId) -> String {
    format!("{}refs/", repo_prefix(repo))
}

/// Prefix of a repository's pins.
pub fn pins_prefix(repo: &RepoId) -> String {
    format!("{}pins/", repo_prefix(repo))
}

/// Key of a pin.
pub fn pin_key(repo: &RepoId, commit: &CommitId) -> String {
    format!("{}{}", pins_prefix(repo), commit.to_hex())
}

/// Prefix of a repository's last-use records.
pub fn used_prefix(repo: &RepoId) -> String {
    format!("{}used/", repo_prefix(repo))
}

/// Key of the last-use record of a commit.
pub fn used_key(repo: &RepoId, commit: &CommitId) -> String {
    format!("{}{}", used_prefix(repo), commit.to_hex())
}

/// The repository a key under `repos/` belongs to (`repos/<org>/<name>/...`, the id
/// valid); `None` for any other key.
pub fn repo_of_key(key: &str) -> Option<RepoId> {
    let rest = key.strip_prefix(REPOS_PREFIX)?;
    let mut parts = rest.splitn(3, '/');
    let (org, name, tail) = (parts.next()?, parts.next()?, parts.next()?);
    if tail.is_empty() {
        return None;
    }
    RepoId::parse(&format!("{org}/{name}"))
        .ok()
        .filter(|r| r.org() == org && r.name() == name)
}

/// The repository and commit of a last-use record's key ([`used_key`]); `None` for any
/// other key, or one spelled another way.
pub fn parse_used_key(key: &str) -> Option<(RepoId, CommitId)> {
    let repo = repo_of_key(key)?;
    let hex = key.strip_prefix(&used_prefix(&repo))?;
    let commit = CommitId::parse(hex).ok()?;
    (commit.to_hex() == hex).then_some((repo, commit))
}

/// Key of the mirror's record of a repository it brought from its upstream.
pub fn mirror_repo_key(repo: &RepoId) -> String {
    format!("{}mirror/repo", repo_prefix(repo))
}

/// Key of the mirror's record of a ref it set (escaped as [`ref_key`]).
pub fn mirror_ref_key(repo: &RepoId, name: &str) -> String {
    format!(
        "{}mirror/refs/{}",
        repo_prefix(repo),
        name.replace('/', "%2F")
    )
}

/// Key of the record of a partially stored commit.
pub fn partial_key(repo: &RepoId, commit: &CommitId) -> String {
    format!("{}partial/{}", repo_prefix(repo), commit.to_hex())
}

/// Prefix of a repository's release check records.
pub fn checks_prefix(repo: &RepoId) -> String {
    format!("{}checks/", repo_prefix(repo))
}

/// Key of the release check record of a commit.
pub fn check_key(repo: &RepoId, commit: &CommitId) -> String {
    format!("{}{}", checks_prefix(repo), commit.to_hex())
}

/// Prefix of a repository's release labels.
pub fn labels_prefix(repo: &RepoId) -> String {
    format!("{}labels/", repo_prefix(repo))
}

/// Prefix of the release labels of a commit.
pub fn commit_labels_prefix(repo: &RepoId, commit: &CommitId) -> String {
    format!("{}{}/", labels_prefix(repo), commit.to_hex())
}

/// Key of one release label (the key must pass [`crate::names::check_label_key`], so it
/// needs no escaping).
pub fn label_key(repo: &RepoId, commit: &CommitId, key: &str) -> String {
    format!("{}{key}", commit_labels_prefix(repo, commit))
}

/// The commit and label key of a key under [`labels_prefix`]; `None` for any other key or
/// one spelled another way.
pub fn parse_label_key(repo: &RepoId, key: &str) -> Option<(CommitId, String)> {
    let rest = key.strip_prefix(&labels_prefix(repo))?;
    let (hex, name) = rest.split_once('/')?;
    let commit = CommitId::parse(hex).ok()?;
    (commit.to_hex() == hex && crate::names::check_label_key(name).is_ok())
        .then(|| (commit, name.to_string()))
}

/// The commit of a key under [`checks_prefix`]; `None` for any other key.
pub fn parse_check_key(repo: &RepoId, key: &str) -> Option<CommitId> {
    let hex = key.strip_prefix(&checks_prefix(repo))?;
    let commit = CommitId::parse(hex).ok()?;
    (commit.to_hex() == hex).then_some(commit)
}

/// Key of a lock or lease.
pub fn lock_key(kind: &str, id: u64) -> String {
    format!("{LOCKS_PREFIX}{kind}-{id:016x}")
}

/// The lock kind of commits to one branch (`commit.<16 hex>`): the first 8 bytes of the
/// BLAKE3 of the repository id in ASCII lower case, a line feed and the branch name, in hex.
/// A hub taking uploads holds it, exclusive, from reading the branch's head until the branch
/// has moved (docs/format/protocols.md, "Commit lock").
pub fn commit_lock_kind(repo: &RepoId, branch: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(repo.to_string().to_ascii_lowercase().as_bytes());
    h.update(b"\n");
    h.update(branch.as_bytes());
    let digest = h.finalize();
    let mut hex = String::with_capacity(16);
    for b in &digest.as_bytes()[..8] {
        hex.push_str(&format!("{b:02x}"));
    }
    format!("commit.{hex}")
}

/// Prefix of a repository's tag records (docs/format/bytes.md, "Tag records").
pub fn tags_prefix(repo: &RepoId) -> String {
    format!("{}tags/", repo_prefix(repo))
}

/// Key of the tag record of ref `name` (escaped as under `refs/`).
pub fn tag_key(repo: &RepoId, name: &str) -> String {
    format!("{}{}", tags_prefix(repo), name.replace('/', "%2F"))
}

/// Key of a ref (the name must have passed [`crate::names::check_ref_name`]).
pub fn ref_key(repo: &RepoId, name: &str) -> String {
    format!("{}{}", refs_prefix(repo), name.replace('/', "%2F"))
}

/// The ref name stored under a key of [`refs_prefix`]; `None` unless it passes
/// [`crate::names::check_ref_name`].
pub fn ref_name_from_key(repo: &RepoId, key: &str) -> Option<String> {
    key.strip_prefix(&refs_prefix(repo))
        .map(|s| s.replace("%2F", "/"))
        .filter(|name| crate::names::check_ref_name(name).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_repository_and_used_records_their_commit() {
        let r = RepoId::parse("org/m").unwrap();
        let c = CommitId([0xab; 20]);
        for key in [
            manifest_key(&r, &c),
            ref_key(&r, "a/b"),
            used_key(&r, &c),
            mirror_repo_key(&r),
        ] {
            assert_eq!(repo_of_key(&key), Some(r.clone()), "{key}");
        }
        assert_eq!(parse_used_key(&used_key(&r, &c)), Some((r.clone(), c)));
        assert_eq!(parse_check_key(&r, &check_key(&r, &c)), Some(c));
        assert_eq!(
            parse_label_key(&r, &label_key(&r, &c, "vllm")),
            Some((c, "vllm".to_string()))
        );
        assert_eq!(parse_label_key(&r, &label_key(&r, &c, "a/b")), None);
        assert_eq!(
            parse_check_key(&r, &format!("{}x", check_key(&r, &c))),
            None
        );
        for bad in [
            "repos/org/m",
            "repos/org/m/",
            "repos/org/../x",
            "repos//m/used/x",
            "packs/ab/cd",
            "config",
        ] {
            assert_eq!(repo_of_key(bad), None, "{bad}");
        }
        let upper = used_key(&r, &c)
            .to_uppercase()
            .replace("REPOS/ORG/M/USED", "repos/org/m/used");
        for bad in [
            manifest_key(&r, &c),
            format!("{}x", used_key(&r, &c)),
            format!("{}/x", used_key(&r, &c)),
            upper,
        ] {
            assert_eq!(parse_used_key(&bad), None, "{bad}");
        }
    }

    #[test]
    fn keys() {
        let r = RepoId::parse("org/m").unwrap();
        let c = CommitId([0xab; 20]);
        assert_eq!(
            manifest_key(&r, &c),
            format!("repos/org/m/manifests/{}", "ab".repeat(20))
        );
        assert_eq!(ref_key(&r, "refs/pr/1"), "repos/org/m/refs/refs%2Fpr%2F1");
        assert_eq!(
            ref_name_from_key(&r, "repos/org/m/refs/refs%2Fpr%2F1").unwrap(),
            "refs/pr/1"
        );
        let p = PackId([7; 32]);
        let k = pack_key(&p);
        assert_eq!(k, format!("packs/07/{}", "07".repeat(32)));
        assert_eq!(parse_pack_key(&k), Some(p));
        assert_eq!(parse_pack_key("packs/08/0707"), None);
    }
}
