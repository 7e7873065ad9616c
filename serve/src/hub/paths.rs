//! Tree entries and `POST /api/models/{repo}/paths-info/{rev}` (`get_paths_info`, and
//! `HfFileSystem.info`): the entries of the paths a form-encoded body names, in the shapes
//! the tree route lists them; plus the `application/x-www-form-urlencoded` decoder that
//! body and the query strings of the browsing routes go through.

use std::collections::HashSet;

use http::StatusCode;
use percent_encoding::percent_decode;
use serde_json::{json, Value};

use super::{internal, Hub, Located, Reply};

/// Most paths one paths-info request may name (the body cap bounds it too).
const MAX_PATHS: usize = 10_000;

/// A form or query string that is not valid `application/x-www-form-urlencoded` UTF-8.
#[derive(Debug, thiserror::Error)]
#[error("malformed form encoding: {0}")]
pub struct FormError(String);

/// The `key=value` pairs of a form body or a query string, `+` and `%xx` decoded, in
/// order; a pair without `=` has an empty value. Non-UTF-8 (after decoding) is an error.
pub fn form_pairs(raw: &[u8]) -> Result<Vec<(String, String)>, FormError> {
    let decode = |s: &[u8]| -> Result<String, FormError> {
        let plus: Vec<u8> = s
            .iter()
            .map(|b| if *b == b'+' { b' ' } else { *b })
            .collect();
        let bytes: Vec<u8> = percent_decode(&plus).collect();
        String::from_utf8(bytes).map_err(|_| FormError("not UTF-8".into()))
    };
    raw.split(|b| *b == b'&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = match p.iter().position(|b| *b == b'=') {
                Some(i) => (&p[..i], &p[i + 1..]),
                None => (p, &p[p.len()..]),
            };
            Ok((decode(k)?, decode(v)?))
        })
        .collect()
}

/// Whether `key` is set to true (`true`, `True`, `1`) in the query string.
pub(super) fn query_flag(query: &str, key: &str) -> bool {
    form_pairs(query.as_bytes())
        .unwrap_or_default()
        .iter()
        .any(|(k, v)| k == key && matches!(v.as_str(), "true" | "True" | "1"))
}

/// The git id the tree route gives directory `dir` of the located revision (stable for a
/// commit; the store keeps no git trees).
pub(super) fn dir_oid(at: &Located, dir: &str) -> String {
    gitblob::git_blob_id(format!("tree {}@{dir}", at.commit.to_hex()).as_bytes())
}

/// A directory's tree entry.
pub(super) fn dir_entry(at: &Located, dir: &str) -> Value {
    json!({ "type": "directory", "oid": dir_oid(at, dir), "path": dir })
}

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

/// A 400 with the Hub's error shape.
pub(super) fn bad_request(msg: &str) -> Reply {
    Reply::error(StatusCode::BAD_REQUEST, "", msg, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_pairs_decode_plus_escapes_and_bare_keys() {
        let p = form_pairs(b"paths=a+b%2Fc.json&paths=x&expand=False&flag&&=v").unwrap();
        let want = [
            ("paths", "a b/c.json"),
            ("paths", "x"),
            ("expand", "False"),
            ("flag", ""),
            ("", "v"),
        ];
        let got: Vec<(&str, &str)> = p.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got, want);
        assert!(form_pairs(b"paths=%ff").is_err());
        assert!(form_pairs(&[b'p', b'=', 0xc3]).is_err());
        assert_eq!(form_pairs(b"a=%zz%").unwrap()[0].1, "%zz%");
    }
}
