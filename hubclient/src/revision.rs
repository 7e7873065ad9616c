//! What a revision holds: `GET /api/models/{repo}/revision/{rev}` for the commit, then
//! `GET /api/models/{repo}/tree/{commit}?recursive=true&expand=false`, page by page
//! (`Link: <...>; rel="next"`), for the files.
//!
//! Everything in these answers is untrusted: bodies are read up to a cap, every field is
//! checked (commit and oids as lowercase hex, paths by [`crate::url::check_path`], LFS
//! sizes against file sizes), duplicates and file/directory clashes are refused, and the
//! listing is held to [`crate::ListingLimits`] (files, bytes of paths, bytes of JSON over
//! all pages) and [`MAX_PAGES`]; a `Link` may lead only where a redirect may. An error
//! names the URL and what was wrong (for a cap: which one, and its value).

use std::collections::HashSet;

use format::{Sha256, XetHash};
use serde::Deserialize;

use crate::client::{HubClient, Outcome, Target};
use crate::error::Error;
use crate::options::ListingLimits;
use crate::url::{
    check_path, check_repo, check_revision, encode_segment, is_commit, is_lower_hex, join,
    next_link, parse_http,
};

/// Largest JSON body read from one answer. The Hub's pages are a few MB at most; the
/// cap keeps a hostile or broken upstream from exhausting memory.
pub const MAX_JSON_BODY: u64 = 64 << 20;

/// Most tree pages followed (the Hub sends about a thousand entries a page, so this
/// covers the default cap on files with room).
pub const MAX_PAGES: usize = 10_000;

/// One file of a revision, as the upstream describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteFile {
    /// Relative, `/`-separated, checked safe.
    pub path: String,
    pub size: u64,
    /// The git blob id (40 lowercase hex): of the content for a regular file, of the LFS
    /// pointer for an LFS file.
    pub git_oid: String,
    /// The content's sha256, for LFS files only (`lfs.oid`).
    pub sha256: Option<Sha256>,
    /// The content's Xet file hash, when the upstream lists one (`xetHash`; the BLAKE3
    /// output bytes, docs/format/xet.md).
    pub xet_hash: Option<XetHash>,
}

impl RemoteFile {
    /// Whether the file is stored in LFS (its content is then checked by sha256).
    pub fn is_lfs(&self) -> bool {
        self.sha256.is_some()
    }
}

/// A revision resolved to its commit, with every file in it (directories left out),
/// in the order the upstream listed them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revision {
    /// 40 lowercase hex digits.
    pub commit: String,
    pub files: Vec<RemoteFile>,
}

#[derive(Deserialize)]
struct RepoInfo {
    sha: String,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    oid: Option<String>,
    #[serde(default)]
    lfs: Option<Lfs>,
    #[serde(default, rename = "xetHash")]
    xet_hash: Option<String>,
}

#[derive(Deserialize)]
struct Lfs {
    oid: String,
    size: u64,
}

impl HubClient {
    /// The commit `rev` (a branch, tag, `refs/pr/N` or sha) of `repo` points to, and the
    /// files of that commit.
    pub fn revision(&self, repo: &str, rev: &str) -> Result<Revision, Error> {
        let commit = self.commit(repo, rev)?;
        let files = self.tree(repo, &commit)?;
        Ok(Revision { commit, files })
    }

    /// The commit `rev` of `repo` points to, checked to be 40 lowercase hex digits.
    pub fn commit(&self, repo: &str, rev: &str) -> Result<String, Error> {
        check_repo(repo).map_err(Error::Invalid)?;
        check_revision(rev).map_err(Error::Invalid)?;
        let url = format!(
            "{}/api/models/{repo}/revision/{}",
            self.endpoint(),
            encode_segment(rev)
        );
        let t = Target {
            repo,
            revision: Some(rev),
            path: None,
        };
        let body = self.get_json(&url, t)?;
        let info: RepoInfo = serde_json::from_slice(&body)
            .map_err(|e| Error::protocol(&url, format!("revision JSON: {e}")))?;
        if !is_commit(&info.sha) {
            let why = format!("sha {:?} is not 40 lowercase hex digits", clip(&info.sha));
            return Err(Error::protocol(&url, why));
        }
        if is_commit(rev) && info.sha != rev {
            let why = format!("asked for commit {rev}, got {}", info.sha);
            return Err(Error::protocol(&url, why));
        }
        Ok(info.sha)
    }

    /// Every file of `commit` in `repo`, following the tree's pages.
    pub fn tree(&self, repo: &str, commit: &str) -> Result<Vec<RemoteFile>, Error> {
        check_repo(repo).map_err(Error::Invalid)?;
        if !is_commit(commit) {
            return Err(Error::Invalid(format!(
                "commit {commit:?}: expected 40 lowercase hex digits"
            )));
        }
        let t = Target {
            repo,
            revision: Some(commit),
            path: None,
        };
        let mut url = format!(
            "{}/api/models/{repo}/tree/{commit}?recursive=true&expand=false",
            self.endpoint()
        );
        let mut list = FileList::new(repo, self.inner.opts.limits);
        let (mut pages, mut seen) = (0usize, HashSet::new());
        loop {
            pages += 1;
            if pages > MAX_PAGES || !seen.insert(url.clone()) {
                return Err(Error::protocol(
                    &url,
                    format!("tree pages loop or exceed {MAX_PAGES}"),
                ));
            }
            let budget = list.limits.max_json_bytes.saturating_sub(list.bytes);
            let (body, link) = self.get_page(&url, t, budget.min(MAX_JSON_BODY))?;
            list.bytes += body.len() as u64;
            list.add_page(&url, &body)?;
            match link {
                None => break,
                Some(next) => url = self.next_page(&url, &next)?,
            }
        }
        list.finish(&url)
    }

    /// The URL of the page a `Link` names, if the client may go there (as a redirect).
    fn next_page(&self, url: &str, next: &str) -> Result<String, Error> {
        let bad = |why: String| Error::protocol(url, format!("Link {:?}: {why}", clip(next)));
        let base = parse_http(url).map_err(bad)?;
        let u = join(&base, next).map_err(bad)?;
        match self.refuses(&u) {
            Some(why) => Err(bad(why)),
            None => Ok(u.to_string()),
        }
    }

    /// GET `url` and read its body (at most [`MAX_JSON_BODY`]), retrying a body cut off.
    fn get_json(&self, url: &str, t: Target<'_>) -> Result<Vec<u8>, Error> {
        self.get_page(url, t, MAX_JSON_BODY).map(|(body, _)| body)
    }

    /// Like `get_json` with a cap of `limit` bytes, with the `rel="next"` target of the
    /// answer's `Link` header. Each attempt is over within the `total` timeout.
    fn get_page(
        &self,
        url: &str,
        t: Target<'_>,
        limit: u64,
    ) -> Result<(Vec<u8>, Option<String>), Error> {
        let total = Some(self.inner.opts.timeouts.total);
        self.with_retries(|| match self.once(url, &[], t, total) {
            Outcome::Done(r) if r.status == 416 => {
                Outcome::Fail(Error::protocol(url, "416 to a plain GET"))
            }
            Outcome::Done(r) => {
                let link = r.header("link").and_then(next_link).map(str::to_string);
                match read_capped(r.body, url, limit) {
                    Ok(body) => Outcome::Done((body, link)),
                    Err(Cap::TooBig) if limit < MAX_JSON_BODY => Outcome::Fail(Error::ListingCap {
                        url: url.to_string(),
                        repo: t.repo.to_string(),
                        what: "bytes of listing JSON",
                        cap: self.inner.opts.limits.max_json_bytes,
                    }),
                    Err(Cap::TooBig) => Outcome::Fail(too_big(url)),
                    Err(Cap::Cut(e)) => Outcome::Retry(e, None),
                }
            }
            Outcome::Retry(e, d) => Outcome::Retry(e, d),
            Outcome::Fail(e) => Outcome::Fail(e),
        })
    }
}

enum Cap {
    TooBig,
    Cut(Error),
}

/// The body, if it is at most `limit` bytes (announced or read).
fn read_capped(body: ureq::Body, url: &str, limit: u64) -> Result<Vec<u8>, Cap> {
    if body.content_length().is_some_and(|n| n > limit) {
        return Err(Cap::TooBig);
    }
    match body.into_with_config().limit(limit).read_to_vec() {
        Ok(v) => Ok(v),
        Err(ureq::Error::BodyExceedsLimit(_)) => Err(Cap::TooBig),
        Err(e) => Err(Cap::Cut(Error::Transport {
            url: url.to_string(),
            attempts: 1,
            source: Box::new(e),
        })),
    }
}

fn too_big(url: &str) -> Error {
    Error::protocol(url, "JSON body larger than 64 MiB")
}

/// The files gathered from tree pages, within the caps.
struct FileList {
    repo: String,
    limits: ListingLimits,
    files: Vec<RemoteFile>,
    /// Bytes of JSON read and of file paths kept, over all pages.
    bytes: u64,
    path_bytes: u64,
}

impl FileList {
    fn new(repo: &str, limits: ListingLimits) -> FileList {
        FileList {
            repo: repo.to_string(),
            limits,
            files: Vec::new(),
            bytes: 0,
            path_bytes: 0,
        }
    }

    fn cap(&self, url: &str, what: &'static str, cap: u64) -> Error {
        Error::ListingCap {
            url: url.to_string(),
            repo: self.repo.clone(),
            what,
            cap,
        }
    }

    fn add_page(&mut self, url: &str, body: &[u8]) -> Result<(), Error> {
        let entries: Vec<Entry> = serde_json::from_slice(body)
            .map_err(|e| Error::protocol(url, format!("tree JSON: {e}")))?;
        let l = self.limits;
        for e in entries {
            let Some(f) = entry_file(e).map_err(|why| Error::protocol(url, why))? else {
                continue;
            };
            if self.files.len() >= l.max_files {
                return Err(self.cap(url, "files", l.max_files as u64));
            }
            self.path_bytes += f.path.len() as u64;
            if self.path_bytes > l.max_path_bytes {
                return Err(self.cap(url, "bytes of file paths", l.max_path_bytes));
            }
            self.files.push(f);
        }
        Ok(())
    }

    /// Refuses a path listed twice, and a file that is also the directory of another
    /// (`a` and `a/b`): no snapshot can hold both. (A sorted index instead of a set of
    /// paths: the paths are held once.)
    fn finish(self, url: &str) -> Result<Vec<RemoteFile>, Error> {
        let mut sorted: Vec<&str> = self.files.iter().map(|f| f.path.as_str()).collect();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::protocol(
                url,
                format!("file {:?} listed twice", w[0]),
            ));
        }
        for f in &self.files {
            let mut dir = f.path.as_str();
            while let Some((parent, _)) = dir.rsplit_once('/') {
                if sorted.binary_search(&parent).is_ok() {
                    let why = format!(
                        "{parent:?} is both a file and the directory of {:?}",
                        f.path
                    );
                    return Err(Error::protocol(url, why));
                }
                dir = parent;
            }
        }
        Ok(self.files)
    }
}

/// The file an entry describes (`None` for a directory), or why it is unacceptable.
fn entry_file(e: Entry) -> Result<Option<RemoteFile>, String> {
    check_path(&e.path)?;
    let path = &e.path;
    match e.kind.as_str() {
        "directory" => return Ok(None),
        "file" => {}
        other => return Err(format!("entry {path:?} of unknown type {:?}", clip(other))),
    }
    let size = e
        .size
        .ok_or_else(|| format!("file {path:?} without a size"))?;
    let oid = e.oid.unwrap_or_default();
    if !is_lower_hex(&oid, 40) {
        return Err(format!(
            "file {path:?}: oid {:?} is not 40 lowercase hex digits",
            clip(&oid)
        ));
    }
    let sha256 = match e.lfs {
        None => None,
        Some(l) => Some(lfs_sha256(path, size, &l)?),
    };
    let xet_hash =
        match &e.xet_hash {
            None => None,
            Some(h) => Some(XetHash::parse(h).map_err(|_| {
                format!("file {path:?}: xetHash {:?} is not 64 hex digits", clip(h))
            })?),
        };
    Ok(Some(RemoteFile {
        path: e.path,
        size,
        git_oid: oid,
        sha256,
        xet_hash,
    }))
}

fn lfs_sha256(path: &str, size: u64, l: &Lfs) -> Result<Sha256, String> {
    if l.size != size {
        return Err(format!(
            "file {path:?}: lfs.size {} differs from size {size}",
            l.size
        ));
    }
    match Sha256::from_hex(&l.oid) {
        Ok(sha) if is_lower_hex(&l.oid, 64) => Ok(sha),
        _ => Err(format!(
            "file {path:?}: lfs.oid {:?} is not 64 lowercase hex digits",
            clip(&l.oid)
        )),
    }
}

/// At most 80 characters of an untrusted value, for an error message.
fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}
