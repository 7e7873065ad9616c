//! Release records in the [`Store`] (docs/format/protocols.md "Release records"): a
//! commit's last release check (`checks/<commit>`, trusted only while it names the stored
//! manifest's files) and its labels (`labels/<commit>/<key>`, one object each, so two
//! writers never lose each other's label).

use std::collections::BTreeMap;

use super::Store;
use crate::error::{Result, StoreError};
use crate::manifest::{now_secs, Manifest};
use format::codec::{self, Kind};
use format::layout;
use format::names::{CommitId, RepoId};
use format::release::{
    check_label_key, check_label_value, files_digest, CheckObject, LabelObject, Labels,
    MAX_CHECK_OBJECT, MAX_LABELS, MAX_LABEL_OBJECT,
};

impl Store {
    /// The stored check record of `commit`, whatever files it judged; `None` when absent.
    /// A record that does not decode, is over its cap or names another commit is
    /// [`StoreError::CorruptObject`].
    pub fn check_record(&self, repo: &RepoId, commit: &CommitId) -> Result<Option<CheckObject>> {
        let key = layout::check_key(repo, commit);
        let Some(bytes) = self.small_object(&key, MAX_CHECK_OBJECT)? else {
            return Ok(None);
        };
        let obj: CheckObject = decode_at(&key, Kind::Check, &bytes)?;
        obj.check(commit).map_err(|reason| corrupt(&key, reason))?;
        Ok(Some(obj))
    }

    /// The check record of `manifest`'s commit if it judged exactly its files (a record
    /// for other files, or one that does not decode, is none: *not checked*).
    pub fn current_check(&self, manifest: &Manifest) -> Result<Option<CheckObject>> {
        match self.check_record(&manifest.repo, &manifest.commit) {
            Ok(Some(c)) if c.files == files_digest(manifest) => Ok(Some(c)),
            Ok(_) | Err(StoreError::CorruptObject { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes the check record of a commit (replacing the last one). Written after the
    /// manifest; a record whose commit went meanwhile is an orphan, ignored and removed by
    /// the next `rm` or gc of that commit.
    pub fn put_check(&self, repo: &RepoId, check: &CheckObject) -> Result<()> {
        check
            .check(&check.commit)
            .map_err(|reason| StoreError::Invalid(format!("check record: {reason}")))?;
        let bytes = codec::encode(Kind::Check, check, true);
        Ok(self
            .backend
            .put(&layout::check_key(repo, &check.commit), &bytes)?)
    }

    /// The labels of `commit`: one LIST and one GET per label. A damaged label is left out
    /// (and named by `fsck`).
    pub fn labels(&self, repo: &RepoId, commit: &CommitId) -> Result<Labels> {
        let mut out = Labels::new();
        for meta in self
            .backend
            .list(&layout::commit_labels_prefix(repo, commit))?
        {
            if let Some((c, key)) = layout::parse_label_key(repo, &meta.key) {
                // More than a writer ever leaves: the first in key order are kept.
                if out.len() >= MAX_LABELS && !out.contains_key(&key) {
                    continue;
                }
                if let Some(l) = self.label_object(repo, &c, &key)? {
                    out.insert(l.key, l.value);
                }
            }
        }
        if out.len() > MAX_LABELS {
            out = out.into_iter().take(MAX_LABELS).collect();
        }
        Ok(out)
    }

    /// The labels of every commit of `repo`: one LIST of its labels and a GET per label.
    pub fn repo_labels(&self, repo: &RepoId) -> Result<BTreeMap<CommitId, Labels>> {
        let mut out: BTreeMap<CommitId, Labels> = BTreeMap::new();
        for meta in self.backend.list(&layout::labels_prefix(repo))? {
            if let Some((c, key)) = layout::parse_label_key(repo, &meta.key) {
                if let Some(l) = self.label_object(repo, &c, &key)? {
                    out.entry(c).or_default().insert(l.key, l.value);
                }
            }
        }
        for labels in out.values_mut() {
            if labels.len() > MAX_LABELS {
                *labels = std::mem::take(labels)
                    .into_iter()
                    .take(MAX_LABELS)
                    .collect();
            }
        }
        Ok(out)
    }

    /// The check records of every commit of `repo` that decode (one LIST, a GET each).
    pub fn repo_checks(&self, repo: &RepoId) -> Result<BTreeMap<CommitId, CheckObject>> {
        let mut out = BTreeMap::new();
        for meta in self.backend.list(&layout::checks_prefix(repo))? {
            if let Some(c) = layout::parse_check_key(repo, &meta.key) {
                match self.check_record(repo, &c) {
                    Ok(Some(obj)) => {
                        out.insert(c, obj);
                    }
                    Ok(None) | Err(StoreError::CorruptObject { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(out)
    }

    /// Sets labels of a stored commit (replacing the values of keys it has), under a write
    /// lease: the commit is checked before and after, and the labels written are deleted
    /// again if it went meanwhile. `by` says what set them.
    pub fn set_labels(
        &self,
        repo: &RepoId,
        commit: &CommitId,
        labels: &[(String, String)],
        by: &str,
    ) -> Result<()> {
        self.update_labels(repo, commit, labels, &[], by)
    }

    /// Removes labels of a commit; removing an absent one is not an error.
    pub fn remove_labels(&self, repo: &RepoId, commit: &CommitId, keys: &[String]) -> Result<()> {
        self.update_labels(repo, commit, &[], keys, "label")
    }

    /// Sets `set` and removes `remove` (a key in both is set), all checked first: a label
    /// breaking the rules, an unknown commit or a count over [`MAX_LABELS`] afterwards
    /// changes nothing.
    pub fn update_labels(
        &self,
        repo: &RepoId,
        commit: &CommitId,
        set: &[(String, String)],
        remove: &[String],
        by: &str,
    ) -> Result<()> {
        for (k, v) in set {
            check_label_key(k).map_err(StoreError::Invalid)?;
            check_label_value(k, v).map_err(StoreError::Invalid)?;
        }
        for k in remove {
            check_label_key(k).map_err(StoreError::Invalid)?;
        }
        if set.is_empty() && remove.is_empty() {
            return Ok(());
        }
        let lease = self.write_lease()?;
        self.require_commit(repo, commit)?;
        let mut after: Labels = self.labels(repo, commit)?;
        for k in remove {
            after.remove(k);
        }
        after.extend(set.iter().cloned());
        if after.len() > MAX_LABELS {
            return Err(StoreError::Invalid(format!(
                "{repo}@{}: {} labels, at most {MAX_LABELS}",
                commit.to_hex(),
                after.len()
            )));
        }
        let objects: Vec<(String, Vec<u8>)> = set
            .iter()
            .map(|(k, v)| {
                let obj = LabelObject {
                    commit: *commit,
                    key: k.clone(),
                    value: v.clone(),
                    set_at: now_secs(),
                    by: by.to_string(),
                };
                (
                    layout::label_key(repo, commit, k),
                    codec::encode(Kind::Label, &obj, false),
                )
            })
            .collect();
        lease.check()?;
        self.backend.put_many(&objects)?;
        for k in remove.iter().filter(|k| !set.iter().any(|(s, _)| s == *k)) {
            self.backend.delete(&layout::label_key(repo, commit, k))?;
        }
        if !self.has_commit(repo, commit)? {
            for (key, _) in &objects {
                self.backend.delete(key)?;
            }
            return Err(StoreError::RemovedMeanwhile {
                repo: repo.to_string(),
                commit: commit.to_hex(),
                what: "the labels were set",
            });
        }
        drop(lease);
        Ok(())
    }

    /// Deletes the check record and labels of a commit (with its manifest: `rm`, gc).
    pub fn delete_release_records(&self, repo: &RepoId, commit: &CommitId) -> Result<()> {
        self.backend.delete(&layout::check_key(repo, commit))?;
        for meta in self
            .backend
            .list(&layout::commit_labels_prefix(repo, commit))?
        {
            self.backend.delete(&meta.key)?;
        }
        Ok(())
    }

    fn label_object(
        &self,
        repo: &RepoId,
        commit: &CommitId,
        key: &str,
    ) -> Result<Option<LabelObject>> {
        let k = layout::label_key(repo, commit, key);
        let bytes = match self.small_object(&k, MAX_LABEL_OBJECT) {
            Ok(Some(bytes)) => bytes,
            // Over its cap: damaged, left out like one that does not decode.
            Ok(None) | Err(StoreError::CorruptObject { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        match codec::decode::<LabelObject>(Kind::Label, &bytes) {
            Ok(l) if l.check(commit, key).is_ok() => Ok(Some(l)),
            _ => Ok(None),
        }
    }

    fn require_commit(&self, repo: &RepoId, commit: &CommitId) -> Result<()> {
        if self.has_commit(repo, commit)? {
            Ok(())
        } else {
            Err(StoreError::UnknownRevision {
                repo: repo.to_string(),
                rev: commit.to_hex(),
            })
        }
    }

    /// The object at `key` when it is at most `cap` bytes (checked before it is read
    /// whole); `None` when absent.
    fn small_object(&self, key: &str, cap: u64) -> Result<Option<Vec<u8>>> {
        match self.backend.size(key)? {
            None => return Ok(None),
            Some(n) if n > cap => {
                return Err(corrupt(key, format!("{n} bytes, more than {cap}")));
            }
            Some(_) => {}
        }
        match self.backend.get(key) {
            Ok(b) if b.len() as u64 <= cap => Ok(Some(b)),
            Ok(b) => Err(corrupt(key, format!("{} bytes, more than {cap}", b.len()))),
            Err(objects::ObjectError::NotFound(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

fn corrupt(key: &str, reason: String) -> StoreError {
    StoreError::CorruptObject {
        key: key.to_string(),
        reason,
    }
}

fn decode_at<T: bincode::Decode<()>>(key: &str, kind: Kind, bytes: &[u8]) -> Result<T> {
    codec::decode(kind, bytes).map_err(|e| corrupt(key, e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::handle::CreateOptions;
    use format::release::{Problem, SEVERITY_ERROR};
    use objects::{MemoryStore, ObjectStore};

    fn store() -> (Store, Arc<MemoryStore>, RepoId, CommitId) {
        let backend = Arc::new(MemoryStore::new());
        let store = Store::open_or_create(backend.clone(), CreateOptions::default()).unwrap();
        let repo = RepoId::parse("org/m").unwrap();
        let c = CommitId([1; 20]);
        backend.put(&layout::manifest_key(&repo, &c), b"m").unwrap();
        (store, backend, repo, c)
    }

    fn record(c: CommitId, files: [u8; 32]) -> CheckObject {
        CheckObject {
            commit: c,
            files,
            rules: 1,
            checked_at: 5,
            by: "test".into(),
            problems: vec![Problem {
                severity: SEVERITY_ERROR,
                code: "config.missing".into(),
                path: "config.json".into(),
                message: "config.json: missing".into(),
            }],
            omitted: 0,
        }
    }

    #[test]
    fn check_records_are_read_back_and_refused_when_damaged_or_misplaced() {
        let (store, backend, repo, c) = store();
        assert_eq!(store.check_record(&repo, &c).unwrap(), None);
        store.put_check(&repo, &record(c, [3; 32])).unwrap();
        assert_eq!(
            store.check_record(&repo, &c).unwrap(),
            Some(record(c, [3; 32]))
        );
        // Another commit's record under this key: refused.
        let other = codec::encode(Kind::Check, &record(CommitId([2; 20]), [3; 32]), true);
        backend.put(&layout::check_key(&repo, &c), &other).unwrap();
        assert!(matches!(
            store.check_record(&repo, &c),
            Err(StoreError::CorruptObject { .. })
        ));
        // Over its cap: refused before it is read.
        let big = vec![0u8; MAX_CHECK_OBJECT as usize + 1];
        backend.put(&layout::check_key(&repo, &c), &big).unwrap();
        assert!(matches!(
            store.check_record(&repo, &c),
            Err(StoreError::CorruptObject { .. })
        ));
    }

    #[test]
    fn labels_are_set_replaced_removed_and_go_with_the_commit() {
        let (store, _, repo, c) = store();
        let set = |k: &str, v: &str| (k.to_string(), v.to_string());
        store
            .set_labels(
                &repo,
                &c,
                &[set("vllm", "0.11.0"), set("torch", "2.9")],
                "t",
            )
            .unwrap();
        store
            .set_labels(&repo, &c, &[set("vllm", "0.12.0")], "t")
            .unwrap();
        let l = store.labels(&repo, &c).unwrap();
        assert_eq!(l.get("vllm").map(String::as_str), Some("0.12.0"));
        assert_eq!(l.len(), 2);
        assert_eq!(store.repo_labels(&repo).unwrap()[&c], l);
        store.remove_labels(&repo, &c, &["torch".into()]).unwrap();
        assert_eq!(store.labels(&repo, &c).unwrap().len(), 1);
        assert!(store
            .set_labels(&repo, &c, &[set("a/b", "x")], "t")
            .is_err());
        assert!(store
            .set_labels(&repo, &CommitId([9; 20]), &[set("a", "x")], "t")
            .is_err());
        store.put_check(&repo, &record(c, [3; 32])).unwrap();
        store.remove_commit(&repo, &c, true).unwrap();
        assert!(store.repo_labels(&repo).unwrap().is_empty());
        assert_eq!(store.check_record(&repo, &c).unwrap(), None);
    }

    #[test]
    fn labels_beyond_the_cap_are_refused_with_nothing_written() {
        let (store, _, repo, c) = store();
        let many: Vec<(String, String)> = (0..=MAX_LABELS)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        assert!(store.set_labels(&repo, &c, &many, "t").is_err());
        assert!(store.labels(&repo, &c).unwrap().is_empty());
    }
}
