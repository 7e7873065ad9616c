//! The directory tree of a revision: which directories exist and what each contains,
//! derived from a manifest's file paths (manifests list files only).

use std::collections::BTreeMap;
use std::sync::Arc;

use repo::manifest::Manifest;

/// An entry of a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Child {
    /// A subdirectory.
    Dir,
    /// A file: its index in [`Manifest::files`].
    File(usize),
}

/// A manifest with its directory index.
#[derive(Debug)]
pub struct Tree {
    /// The revision.
    pub manifest: Arc<Manifest>,
    /// Directory path (`""` for the top) → entries sorted by name.
    dirs: BTreeMap<String, Vec<(String, Child)>>,
}

impl Tree {
    /// Indexes the directories of `manifest`.
    pub fn new(manifest: Arc<Manifest>) -> Tree {
        let mut dirs: BTreeMap<String, BTreeMap<String, Child>> = BTreeMap::new();
        dirs.entry(String::new()).or_default();
        for (i, f) in manifest.files.iter().enumerate() {
            let mut parent = String::new();
            let parts: Vec<&str> = f.path.split('/').collect();
            for (depth, part) in parts.iter().enumerate() {
                let last = depth + 1 == parts.len();
                let child = if last { Child::File(i) } else { Child::Dir };
                dirs.entry(parent.clone())
                    .or_default()
                    .insert(part.to_string(), child);
                if !last {
                    parent = if parent.is_empty() {
                        part.to_string()
                    } else {
                        format!("{parent}/{part}")
                    };
                    dirs.entry(parent.clone()).or_default();
                }
            }
        }
        let dirs = dirs
            .into_iter()
            .map(|(k, v)| (k, v.into_iter().collect()))
            .collect();
        Tree { manifest, dirs }
    }

    /// Entries of directory `dir`, or `None` if it is not a directory.
    pub fn list(&self, dir: &str) -> Option<&[(String, Child)]> {
        self.dirs.get(dir).map(|v| v.as_slice())
    }

    /// The entry `name` in `dir`.
    pub fn lookup(&self, dir: &str, name: &str) -> Option<Child> {
        let entries = self.dirs.get(dir)?;
        entries
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| entries[i].1)
    }

    /// Joins a directory path and a name.
    pub fn join(dir: &str, name: &str) -> String {
        if dir.is_empty() {
            name.to_string()
        } else {
            format!("{dir}/{name}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::names::{CommitId, RepoId};
    use format::Sha256;
    use repo::manifest::FileEntry;

    #[test]
    fn nested_paths() {
        let file = |p: &str| FileEntry {
            path: p.into(),
            size: 0,
            sha256: Sha256([0; 32]),
            executable: false,
            chunks: vec![],
        };
        let m = Manifest {
            repo: RepoId::parse("a/b").unwrap(),
            commit: CommitId([0; 20]),
            ingested_at: 0,
            source: "plain".into(),
            packs: vec![],
            files: vec![file("a.txt"), file("sub/deep/x.bin"), file("sub/y.bin")],
            published: None,
            xet_hashes: Vec::new(),
        };
        let t = Tree::new(Arc::new(m));
        let top: Vec<_> = t.list("").unwrap().iter().map(|e| e.0.as_str()).collect();
        assert_eq!(top, ["a.txt", "sub"]);
        assert_eq!(t.lookup("", "sub"), Some(Child::Dir));
        assert_eq!(t.lookup("sub/deep", "x.bin"), Some(Child::File(1)));
        assert_eq!(t.lookup("sub", "nope"), None);
        assert!(t.list("a.txt").is_none());
    }
}
