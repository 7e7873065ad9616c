//! Checking downloaded bytes against what the Hub states, while they stream: a
//! [`Verifier`] hashes every byte passed to it (sha256 always, the git blob sha1 when the
//! file is not in LFS), and [`RemoteFile::check`] compares the [`Digests`] with the tree
//! entry. Nothing is buffered; what to do on a mismatch is the caller's decision.
//!
//! The git blob id (the `gitblob` crate, shared with serve) is `sha1("blob {len}\0" ||
//! content)`: its header needs the length before the content, so the verifier is made for
//! the size the tree states, and a file of another length is reported as a size mismatch
//! first.

use std::io::{self, Read, Write};

use format::Sha256;
use gitblob::GitBlob;
use sha2::Digest;

use crate::error::Error;
use crate::revision::RemoteFile;

/// Hashes of the bytes a [`Verifier`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digests {
    /// Bytes seen.
    pub size: u64,
    pub sha256: Sha256,
    /// The git blob id for the expected size, when computed (files not in LFS).
    pub git_oid: Option<[u8; 20]>,
}

/// Streaming hashes of one file's content.
#[derive(Clone)]
pub struct Verifier {
    sha256: sha2::Sha256,
    git: Option<GitBlob>,
    size: u64,
}

impl Verifier {
    /// A verifier for content expected to be `expected_size` bytes long; with `git_oid`,
    /// it also computes the git blob id.
    pub fn new(expected_size: u64, git_oid: bool) -> Verifier {
        let git = git_oid.then(|| GitBlob::new(expected_size));
        Verifier {
            sha256: sha2::Sha256::new(),
            git,
            size: 0,
        }
    }

    /// The verifier [`RemoteFile::check`] needs for `file`: sha256 always, the git blob
    /// id for files not in LFS.
    pub fn for_file(file: &RemoteFile) -> Verifier {
        Verifier::new(file.size, !file.is_lfs())
    }

    pub fn update(&mut self, data: &[u8]) {
        self.sha256.update(data);
        if let Some(g) = &mut self.git {
            g.update(data);
        }
        self.size += data.len() as u64;
    }

    pub fn finish(self) -> Digests {
        Digests {
            size: self.size,
            sha256: Sha256(self.sha256.finalize().into()),
            git_oid: self.git.map(GitBlob::finish),
        }
    }
}

impl Write for Verifier {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A reader that hashes what passes through it: `Verifying::new(download, verifier)`,
/// read it to the end, then [`Verifying::finish`].
pub struct Verifying<R> {
    inner: R,
    verifier: Verifier,
}

impl<R: Read> Verifying<R> {
    pub fn new(inner: R, verifier: Verifier) -> Verifying<R> {
        Verifying { inner, verifier }
    }

    /// The digests of every byte read so far, and the inner reader.
    pub fn finish(self) -> (Digests, R) {
        (self.verifier.finish(), self.inner)
    }
}

impl<R: Read> Read for Verifying<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.verifier.update(&buf[..n]);
        Ok(n)
    }
}

impl RemoteFile {
    /// Whether `d` matches what the Hub states for this file: its size, then the sha256
    /// of an LFS file or the git blob id of any other. The error names the file.
    pub fn check(&self, d: &Digests) -> Result<(), Error> {
        let mismatch = |what, expected: String, actual: String| Error::Mismatch {
            path: self.path.clone(),
            what,
            expected,
            actual,
        };
        if d.size != self.size {
            return Err(mismatch("size", self.size.to_string(), d.size.to_string()));
        }
        if let Some(want) = &self.sha256 {
            if *want != d.sha256 {
                return Err(mismatch("sha256", want.to_hex(), d.sha256.to_hex()));
            }
            return Ok(());
        }
        match d.git_oid {
            Some(got) if hex::encode(got) == self.git_oid => Ok(()),
            Some(got) => Err(mismatch(
                "git blob sha1",
                self.git_oid.clone(),
                hex::encode(got),
            )),
            None => Err(mismatch(
                "git blob sha1",
                self.git_oid.clone(),
                "nothing (the verifier was made without the git id)".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verifier_computes_the_git_blob_id() {
        let mut v = Verifier::new(6, true);
        v.update(b"hel");
        v.update(b"lo\n");
        let got = v.finish().git_oid.map(hex::encode);
        assert_eq!(
            got.as_deref(),
            Some("ce013625030ba8dba906f756967f9e9ca394464a")
        );
        assert_eq!(Verifier::new(6, false).finish().git_oid, None);
    }

    #[test]
    fn check_by_kind() {
        let data = b"hello\n";
        let small = RemoteFile {
            path: "a.txt".into(),
            size: 6,
            git_oid: gitblob::git_blob_id(data),
            sha256: None,
            xet_hash: None,
        };
        let mut v = Verifier::for_file(&small);
        v.update(&data[..2]);
        v.update(&data[2..]);
        let d = v.finish();
        small.check(&d).unwrap();
        let lfs = RemoteFile {
            sha256: Some(d.sha256),
            git_oid: "0".repeat(40),
            ..small.clone()
        };
        lfs.check(&Verifier::for_file(&lfs).finish()).unwrap_err();
        let mut v = Verifier::for_file(&lfs);
        v.update(data);
        lfs.check(&v.finish()).unwrap();
        let mut v = Verifier::for_file(&small);
        v.update(b"hellO\n");
        let e = small.check(&v.finish()).unwrap_err().to_string();
        assert!(e.contains("a.txt") && e.contains("git blob sha1"), "{e}");
    }
}
