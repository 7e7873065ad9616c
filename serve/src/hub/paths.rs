//! Tree entries and `POST /api/models/{repo}/paths-info/{rev}` (`get_paths_info`, and
//! `HfFileSystem.info`): the entries of the paths a form-encoded body names, in the shapes
//! the tree route lists them (the body is decoded by [`crate::decode::form_pairs`]).

use std::collections::HashSet;

use http::StatusCode;
use serde_json::{json, Value};

use super::{dir_entry, Hub, Located};
use crate::decode::form_pairs;
use crate::reply::{bad_request, internal, Reply};

/// Most paths one paths-info request may name (the body cap bounds it too).
const MAX_PATHS: usize = 10_000;

impl Hub {
    /// File `i`'s tree entry: `oid`, `size`, `lfs` for LFS files, `xetHash` where Xet
    /// serves it.
    pub(super) fn file_entry(
        &self,
        at: &Located,
        i: usize,
    ) -> Result<Value, read::source::ReadError> {
        let f = &at.manifest.files[i];
        let (oid, _, lfs) = self.ids(at, i)?;
        let mut e = json!({ "type": "file", "oid": oid, "size": f.size, "path": f.path });
        if let Some(l) = lfs {
            e["lfs"] = l;
        }
        if let Some(x) = self.xet_listed(at, i) {
            e["xetHash"] = x;
        }
        Ok(e)
    }

    /// The entry of `path` at the located revision: a file, a directory (some file lies
    /// under it), or `None`.
    fn path_entry(
        &self,
        at: &Located,
        path: &str,
    ) -> Result<Option<Value>, read::source::ReadError> {
        let files = &at.manifest.files;
        if let Ok(i) = files.binary_search_by(|f| f.path.as_str().cmp(path)) {
            return self.file_entry(at, i).map(Some);
        }
        let prefix = format!("{path}/");
        let first = files.partition_point(|f| f.path.as_str() < prefix.as_str());
        let is_dir = files
            .get(first)
            .is_some_and(|f| f.path.starts_with(&prefix));
        Ok(is_dir.then(|| dir_entry(at, path)))
    }

    /// `POST /api/models/{org}/{name}/paths-info/{rev}`: the entries of the `paths` the
    /// body names that exist, in the order named, each once; missing ones are left out.
    pub(super) fn paths_info(&self, org: &str, name: &str, rev: &str, body: &[u8]) -> Reply {
        let form = match form_pairs(body) {
            Ok(f) => f,
            Err(e) => return bad_request(&e.to_string()),
        };
        let paths: Vec<&str> = form
            .iter()
            .filter(|(k, _)| k == "paths" || k == "paths[]")
            .map(|(_, v)| v.trim_matches('/'))
            .collect();
        if paths.len() > MAX_PATHS {
            let msg = format!("{} paths: at most {MAX_PATHS} per request", paths.len());
            return bad_request(&msg);
        }
        let at = match self.locate(org, name, rev) {
            Ok(x) => x,
            Err(r) => return *r,
        };
        self.record_use(&at);
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for p in paths {
            if p.is_empty() || !seen.insert(p) {
                continue;
            }
            match self.path_entry(&at, p) {
                Ok(Some(e)) => out.push(e),
                Ok(None) => {}
                Err(e) => return internal(e),
            }
        }
        Reply::json(StatusCode::OK, &Value::Array(out))
    }
}
