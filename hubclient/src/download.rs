//! One file's bytes: `GET /{repo}/resolve/{commit}/{path}` as a [`Download`], a
//! `std::io::Read` that hides cut connections.
//!
//! The reader knows the file's full size before it returns a byte (given by the caller,
//! else announced by the upstream: `Content-Range`, `Content-Length`, `X-Linked-Size`) and
//! its position. When the body ends early or a read fails, it asks again with
//! `Range: bytes={position}-` and goes on; a 200 answer to that (a server ignoring
//! ranges) is read from the start and its first `position` bytes thrown away. Reaching
//! the size, it checks that nothing more follows. So the caller sees one stream that is
//! either exactly the file or an error: never a silently short or long file.
//!
//! Each answer is also checked against the first: same `X-Repo-Commit` as asked, same
//! `X-Linked-Etag`, no content encoding.
//!
//! A download has a total deadline that grows with what it received: its `k`-th byte
//! must be in within `total + k / min_rate` of `open` ([`crate::Timeouts`]), checked
//! after every read and before every re-request (a silent connection is cut by the
//! per-read timeout first). An upstream that dribbles a byte now and then, which no
//! per-read timeout catches, ends in [`Error::TooSlow`]. Errors inside `read` are [`Error`]s wrapped in
//! `io::Error` ([`Error::from_io`]); [`Download::copy_to`] returns them directly.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use crate::client::{Counters, HubClient, Reply, Target};
use crate::error::Error;
use crate::retry;
use crate::url::{check_path, check_repo, encode_path, is_commit};

/// Most re-requests for one download, however much each of them delivered: a bound on
/// the requests a server that sends a few bytes per connection can cause.
pub const MAX_RESUMES: u32 = 1000;

/// A file being downloaded. See the module documentation.
pub struct Download {
    client: HubClient,
    url: String,
    repo: String,
    commit: String,
    path: String,
    /// Offset in the file of the next byte `read` returns.
    pos: u64,
    /// The file's full size.
    size: u64,
    body: Option<ureq::BodyReader<'static>>,
    /// Bytes of the current body to throw away before `pos` (a 200 to a ranged request).
    skip: u64,
    /// The `X-Linked-Etag` of the first answer, which later ones must repeat.
    etag: Option<String>,
    /// Consecutive failed bodies without a byte between them, and their last reason.
    fails: u32,
    last_cut: String,
    resumes: u32,
    done: bool,
    /// When `open` was called, and the bytes received since (discarded ones included):
    /// the deadline's clock.
    started: Instant,
    received: u64,
}

impl HubClient {
    /// Starts downloading `path` of `repo` at `commit` (40 lowercase hex) from byte
    /// `offset`. With `size`, the file must have exactly that many bytes (the tree's
    /// size); without, the size the upstream announces is used.
    ///
    /// The first request is sent here, so a missing file, a refused token or an
    /// unreachable endpoint is reported now, as a typed error.
    pub fn open(
        &self,
        repo: &str,
        commit: &str,
        path: &str,
        offset: u64,
        size: Option<u64>,
    ) -> Result<Download, Error> {
        check_repo(repo).map_err(Error::Invalid)?;
        check_path(path).map_err(Error::Invalid)?;
        if !is_commit(commit) {
            return Err(Error::Invalid(format!(
                "commit {commit:?}: expected 40 lowercase hex digits"
            )));
        }
        if let Some(s) = size.filter(|s| offset > *s) {
            return Err(Error::Invalid(format!(
                "{path:?}: offset {offset} is past its size {s}"
            )));
        }
        let url = format!(
            "{}/{repo}/resolve/{commit}/{}",
            self.endpoint(),
            encode_path(path)
        );
        let mut d = Download {
            client: self.clone(),
            url,
            repo: repo.to_string(),
            commit: commit.to_string(),
            path: path.to_string(),
            pos: offset,
            size: size.unwrap_or(u64::MAX),
            body: None,
            skip: 0,
            etag: None,
            fails: 0,
            last_cut: String::new(),
            resumes: 0,
            done: false,
            started: Instant::now(),
            received: 0,
        };
        if size != Some(offset) {
            d.request(size.is_none())?;
        }
        Ok(d)
    }

    /// [`HubClient::open`] for a file of a [`crate::Revision`], with its size.
    pub fn open_file(
        &self,
        repo: &str,
        commit: &str,
        file: &crate::revision::RemoteFile,
        offset: u64,
    ) -> Result<Download, Error> {
        self.open(repo, commit, &file.path, offset, Some(file.size))
    }
}

impl Download {
    /// The file's full size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Offset in the file of the next byte to be read.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The file's path in its repository.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// How many times this download was re-requested after a cut.
    pub fn resumes(&self) -> u32 {
        self.resumes
    }

    /// Copies the rest of the file to `out`; returns the number of bytes copied.
    pub fn copy_to(&mut self, out: &mut impl Write) -> Result<u64, Error> {
        let mut buf = vec![0u8; 256 * 1024];
        let mut total = 0u64;
        loop {
            let n = self.read_typed(&mut buf)?;
            if n == 0 {
                return Ok(total);
            }
            out.write_all(&buf[..n])?;
            total += n as u64;
        }
    }

    fn target(&self) -> Target<'_> {
        Target {
            repo: &self.repo,
            revision: Some(&self.commit),
            path: Some(&self.path),
        }
    }

    /// Sends the request for the bytes from `pos` and takes its answer. `learn_size`:
    /// the size is not known yet and is taken from this answer.
    fn request(&mut self, learn_size: bool) -> Result<(), Error> {
        let mut extra = vec![("accept-encoding", "identity".to_string())];
        if self.pos > 0 {
            extra.push(("range", format!("bytes={}-", self.pos)));
        }
        let reply = self.client.get(&self.url, &extra, self.target())?;
        self.accept(reply, learn_size)
    }

    /// Checks an answer and makes its body the current one.
    fn accept(&mut self, reply: Reply, learn_size: bool) -> Result<(), Error> {
        self.check_identity(&reply)?;
        let announced = match reply.status {
            416 => return self.accept_416(&reply),
            206 => self.accept_206(&reply)?,
            200 => {
                self.skip = self.pos;
                self.accept_200(&reply)?
            }
            s => return Err(self.protocol(&reply, format!("unexpected status {s}"))),
        };
        match announced {
            Some(n) if learn_size => self.size = n,
            Some(n) if n != self.size => {
                let why = format!("the upstream announces {n} bytes, {} expected", self.size);
                return Err(self.size_error(why));
            }
            Some(_) => {}
            None if learn_size => {
                let why = "no size announced (Content-Length, Content-Range, X-Linked-Size): a cut could not be told from the end";
                return Err(self.size_error(why.into()));
            }
            None => {}
        }
        if self.pos > self.size {
            return Err(self.size_error(format!(
                "offset {} is past the size {}",
                self.pos, self.size
            )));
        }
        self.body = Some(reply.body.into_reader());
        Ok(())
    }

    /// The same file as before, as stored: the commit asked for, the same etag, no
    /// content encoding.
    fn check_identity(&mut self, reply: &Reply) -> Result<(), Error> {
        let encoding = reply
            .header("content-encoding")
            .map(str::trim)
            .unwrap_or("identity");
        if !encoding.eq_ignore_ascii_case("identity") {
            return Err(self.protocol(
                reply,
                format!("Content-Encoding {encoding:?} though identity was asked"),
            ));
        }
        if let Some(c) = reply.linked.repo_commit.as_deref() {
            if c.trim() != self.commit {
                return Err(self.protocol(
                    reply,
                    format!("X-Repo-Commit {c:?}, asked for {}", self.commit),
                ));
            }
        }
        if let Some(tag) = &reply.linked.linked_etag {
            let old = self.etag.get_or_insert_with(|| tag.clone());
            if old != tag {
                let why = format!("X-Linked-Etag changed from {old} to {tag} between requests");
                return Err(self.protocol(reply, why));
            }
        }
        Ok(())
    }

    /// A 206 must start at `pos`; it may stop before the end (a server may send less than
    /// asked), and the next read then asks for the rest. Returns the size it announces.
    fn accept_206(&mut self, reply: &Reply) -> Result<Option<u64>, Error> {
        self.skip = 0;
        let cr = reply.header("content-range").unwrap_or("");
        let Some((start, end, total)) = parse_content_range(cr) else {
            return Err(self.protocol(reply, format!("206 with Content-Range {cr:?}")));
        };
        let len = reply
            .header("content-length")
            .and_then(|v| v.trim().parse::<u64>().ok());
        if start != self.pos || len.is_some_and(|l| l != end + 1 - start) {
            let why = format!(
                "Content-Range {cr:?} (Content-Length {len:?}) answers bytes={}-",
                self.pos
            );
            return Err(self.protocol(reply, why));
        }
        Ok(Some(total.unwrap_or(end + 1)))
    }

    /// A 200 holds the whole file: its size is `Content-Length` and `X-Linked-Size`,
    /// which must agree when both are sent.
    fn accept_200(&mut self, reply: &Reply) -> Result<Option<u64>, Error> {
        let num = |v: Option<&str>| v.and_then(|v| v.trim().parse::<u64>().ok());
        let len = num(reply.header("content-length"));
        let linked = num(reply.linked.linked_size.as_deref());
        match (len, linked) {
            (Some(a), Some(b)) if a != b => {
                let why = format!("Content-Length {a} but X-Linked-Size {b}");
                Err(self.protocol(reply, why))
            }
            (a, b) => Ok(a.or(b)),
        }
    }

    /// 416: fine only when `pos` is the end (`Content-Range: bytes */{pos}`).
    fn accept_416(&mut self, reply: &Reply) -> Result<(), Error> {
        let cr = reply.header("content-range").unwrap_or("");
        let total = cr
            .trim()
            .strip_prefix("bytes */")
            .and_then(|t| t.parse::<u64>().ok());
        let known = self.size != u64::MAX;
        match total {
            Some(t) if t == self.pos && (!known || t == self.size) => {
                self.size = t;
                self.done = true;
                Ok(())
            }
            _ => Err(self.size_error(format!("416 to bytes={}- (Content-Range {cr:?})", self.pos))),
        }
    }

    fn protocol(&self, reply: &Reply, why: String) -> Error {
        Error::protocol(&reply.url, format!("{:?}: {why}", self.path))
    }

    fn size_error(&self, reason: String) -> Error {
        Error::Size {
            path: self.path.clone(),
            reason,
        }
    }

    /// The current body is gone (`why`): the next read asks again from `pos`.
    fn cut(&mut self, why: String) {
        tracing::debug!(path = %self.path, position = self.pos, reason = %why, "download cut");
        self.body = None;
        self.fails += 1;
        self.last_cut = why;
    }

    /// Asks again from `pos` after a cut, within the retry bounds, after a backoff.
    fn resume(&mut self) -> Result<(), Error> {
        let o = &self.client.inner.opts;
        if self.fails > o.max_retries || self.resumes >= MAX_RESUMES {
            return Err(Error::Interrupted {
                path: self.path.clone(),
                position: self.pos,
                attempts: self.fails,
                last: self.last_cut.clone(),
            });
        }
        std::thread::sleep(retry::backoff(self.fails, o.base_backoff, o.max_backoff));
        self.check_pace()?;
        self.resumes += 1;
        let c = &self.client.inner.counters;
        Counters::add(&c.resumes, 1);
        Counters::add(&c.retries, 1);
        let r = self.request(false);
        if let Err(e) = &r {
            // Counted as a failure too, so that reading on after an error stays bounded.
            self.fails += 1;
            self.last_cut = e.to_string();
        }
        r
    }

    /// At the size: the body must end here. Bytes past it are an error; a failure to
    /// read the end is not (every byte is in).
    fn finish(&mut self) -> Result<usize, Error> {
        if let Some(mut body) = self.body.take() {
            let mut probe = [0u8; 1];
            if let Ok(n @ 1..) = body.read(&mut probe) {
                let why = format!("the body goes on past the announced size {}", self.size);
                Counters::add(&self.client.inner.counters.bytes, n as u64);
                return Err(self.size_error(why));
            }
        }
        self.done = true;
        Ok(0)
    }

    /// `read` with the client's error type.
    fn read_typed(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        loop {
            if self.done || buf.is_empty() {
                return Ok(0);
            }
            if self.pos >= self.size && self.skip == 0 {
                return self.finish();
            }
            let Some(body) = self.body.as_mut() else {
                self.resume()?;
                continue;
            };
            // While skipping, never read past the bytes to skip.
            let left = if self.skip > 0 {
                self.skip
            } else {
                self.size - self.pos
            };
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            match body.read(&mut buf[..want]) {
                Ok(0) => self.cut(format!("body ended at byte {} of {}", self.pos, self.size)),
                Ok(n) => {
                    let taken = self.take(n);
                    self.check_pace()?;
                    if let Some(n) = taken {
                        return Ok(n);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => self.cut(e.to_string()),
            }
        }
    }

    /// The deadline: `total + received / min_rate` after the start (see the module doc).
    fn check_pace(&self) -> Result<(), Error> {
        let t = self.client.inner.opts.timeouts;
        if t.min_rate == 0 {
            return Ok(());
        }
        let elapsed = self.started.elapsed();
        let earned = Duration::from_secs_f64(self.received as f64 / t.min_rate as f64);
        if elapsed <= t.total.saturating_add(earned) {
            return Ok(());
        }
        Err(Error::TooSlow {
            path: self.path.clone(),
            received: self.received,
            seconds: elapsed.as_secs(),
            grace: t.total.as_secs(),
            min_rate: t.min_rate,
        })
    }

    /// Accounts for `n` bytes just read: thrown away while skipping (`None`), else
    /// returned to the caller.
    fn take(&mut self, n: usize) -> Option<usize> {
        let c = &self.client.inner.counters;
        self.received += n as u64;
        Counters::add(&c.bytes, n as u64);
        self.fails = 0;
        if self.skip > 0 {
            self.skip -= n as u64;
            Counters::add(&c.discarded, n as u64);
            return None;
        }
        self.pos += n as u64;
        Some(n)
    }
}

impl Read for Download {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_typed(buf).map_err(Error::into_io)
    }
}

/// `bytes {start}-{end}/{total|*}` → (start, end, total).
fn parse_content_range(v: &str) -> Option<(u64, u64, Option<u64>)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    let (a, b) = (a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?);
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse::<u64>().ok()?),
    };
    (a <= b && total.is_none_or(|t| b < t)).then_some((a, b, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_ranges() {
        assert_eq!(parse_content_range("bytes 5-9/10"), Some((5, 9, Some(10))));
        assert_eq!(parse_content_range("bytes 0-0/*"), Some((0, 0, None)));
        assert_eq!(parse_content_range("bytes 9-5/10"), None);
        assert_eq!(parse_content_range("bytes 5-10/10"), None);
        assert_eq!(parse_content_range("items 5-9/10"), None);
        assert_eq!(parse_content_range("bytes */10"), None);
    }

    #[test]
    fn download_is_send() {
        fn send<T: Send>() {}
        send::<Download>();
        send::<HubClient>();
    }
}
