//! The [`ObjectStore`] trait every bucket is reached through (the contract is in the
//! crate's doc), the values it lists ([`ObjectMeta`], [`Temporary`]), and the check of a
//! key before it touches a file system or a bucket.

use std::time::SystemTime;

use crate::error::{ObjectError, Result};

/// One listed object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The full key.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// Changes whenever the object is replaced (S3: the ETag; local: modification time and
    /// inode). Lets a cache of small objects (gc's manifest cache) skip unchanged ones.
    pub tag: String,
    /// When the store last wrote it, by the store's clock (S3 `Last-Modified`, whole
    /// seconds or milliseconds; local: mtime). `None` when the store does not say.
    pub modified: Option<SystemTime>,
}

/// A leftover of an interrupted write: a local temporary file or an incomplete S3
/// multipart upload. Invisible to readers; only space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Temporary {
    /// What it is, for reports (`tmp/<file>`, `upload <key> <id>`).
    pub name: String,
    /// Age in seconds.
    pub age_secs: u64,
    /// What the backend needs to remove it.
    pub handle: String,
    /// Key being written, where known.
    pub key: Option<String>,
}

/// A flat key-value object store: a directory, an S3 bucket, memory.
pub trait ObjectStore: Send + Sync {
    /// Stores `data` under `key`, replacing any previous object, atomically and durably:
    /// when `put` returns, the object survives a crash of the machine.
    fn put(&self, key: &str, data: &[u8]) -> Result<()>;
    /// Like [`ObjectStore::put`] (atomic, visible on return), but durable only once
    /// [`ObjectStore::sync_deferred`] has returned. Ingest writes packs this way so that
    /// writeback overlaps the work, and syncs them all before writing a manifest.
    fn put_deferred(&self, key: &str, data: &[u8]) -> Result<()> {
        self.put(key, data)
    }
    /// Makes every object written with [`ObjectStore::put_deferred`] so far durable.
    fn sync_deferred(&self) -> Result<()> {
        Ok(())
    }
    /// Stores several small objects (manifests, refs), each as [`ObjectStore::put`] would:
    /// every one is atomic, and durable once this returns `Ok`. Keys must be distinct; the
    /// order in which the objects become visible is not specified. On an error some may
    /// have been stored and others not, as with puts one after the other. A store may do
    /// the work together: the local store syncs them all before renaming any into place
    /// (one journal commit instead of two per object), S3 sends the PUTs concurrently.
    fn put_many(&self, objects: &[(String, Vec<u8>)]) -> Result<()> {
        for (key, data) in objects {
            self.put(key, data)?;
        }
        Ok(())
    }
    /// The whole object. [`ObjectError::NotFound`] when absent.
    fn get(&self, key: &str) -> Result<Vec<u8>>;
    /// `len` bytes from `offset`. Fewer bytes than asked is an error
    /// ([`ObjectError::CorruptObject`]: the object is truncated).
    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Vec<u8>>;
    /// Every object whose key starts with `prefix`, sorted by key.
    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>>;
    /// Deletes `key`; deleting an absent key is not an error.
    fn delete(&self, key: &str) -> Result<()>;
    /// Size of `key`, or `None` when absent.
    fn size(&self, key: &str) -> Result<Option<u64>>;
    /// Metadata of `key` (one HEAD), or `None` when absent.
    fn stat(&self, key: &str) -> Result<Option<ObjectMeta>>;
    /// The store's current time: the clock that stamps `modified` (S3: the `Date` header
    /// of a response; local: this machine's clock, which stamps file mtimes). Only
    /// differences between this and `modified` times are meaningful.
    fn now(&self) -> Result<SystemTime>;
    /// Leftovers of interrupted writes at least `min_age` old (none by default).
    fn temporaries(&self, _min_age: std::time::Duration) -> Result<Vec<Temporary>> {
        Ok(Vec::new())
    }
    /// Removes a leftover found by [`ObjectStore::temporaries`].
    fn remove_temporary(&self, _t: &Temporary) -> Result<()> {
        Ok(())
    }
    /// A human-readable location (`/path/to/store`, `s3://bucket/prefix`).
    fn location(&self) -> String;
    /// Whether the store only reads (a hub): its writes answer [`ObjectError::ReadOnly`],
    /// and a command that writes checks this before it does any work. Every wrapper must
    /// forward it.
    fn read_only(&self) -> bool {
        false
    }
    /// The whole object `key` once more, from a source other than the one that answered
    /// (attempt 1, 2, ...: each another source, past every cache), because the bytes it
    /// gave failed their check. `Ok(None)`: no other source is left (a directory or the
    /// bucket itself has none). Every wrapper must forward it.
    fn get_again(&self, key: &str, attempt: u32) -> Result<Option<Vec<u8>>> {
        let _ = (key, attempt);
        Ok(None)
    }
    /// [`ObjectStore::get_again`] for `len` bytes from `offset`.
    fn get_range_again(
        &self,
        key: &str,
        offset: u64,
        len: u64,
        attempt: u32,
    ) -> Result<Option<Vec<u8>>> {
        let _ = (key, offset, len, attempt);
        Ok(None)
    }
}

/// Inside `impl ObjectStore for W`, the methods a wrapper passes on to the store in its
/// field `$inner` unchanged: [`ObjectStore::read_only`], [`ObjectStore::get_again`] and
/// [`ObjectStore::get_range_again`]. One definition, so that no wrapper turns a hub's read-only
/// refusal or its second try off by leaving one out.
#[macro_export]
macro_rules! forward_asking_again {
    ($inner:ident) => {
        fn read_only(&self) -> bool {
            self.$inner.read_only()
        }
        fn get_again(&self, key: &str, attempt: u32) -> $crate::Result<Option<Vec<u8>>> {
            self.$inner.get_again(key, attempt)
        }
        fn get_range_again(
            &self,
            key: &str,
            offset: u64,
            len: u64,
            attempt: u32,
        ) -> $crate::Result<Option<Vec<u8>>> {
            self.$inner.get_range_again(key, offset, len, attempt)
        }
    };
}

/// Checks a key before it touches a filesystem or a bucket: no empty segment, no `.`
/// or `..`, no leading `/`, no backslash.
pub fn check_key(key: &str) -> Result<()> {
    let bad = key.is_empty()
        || key.starts_with('/')
        || key.contains('\\')
        || key
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..");
    if bad {
        return Err(ObjectError::Invalid(format!("invalid object key {key:?}")));
    }
    Ok(())
}

/// Checks a listing prefix: empty, or a key (as [`check_key`]) that may end with `/`. A
/// prefix that names `.` or `..` would list outside the store on a directory.
pub fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Ok(());
    }
    let body = prefix.strip_suffix('/').unwrap_or(prefix);
    let last = body.rsplit('/').next().unwrap_or(body);
    // A partial last segment ("repos/or") is a prefix, not a path: only `.`/`..` matter.
    check_key(body)
        .map_err(|_| ObjectError::Invalid(format!("invalid listing prefix {prefix:?}")))?;
    if last == "." || last == ".." {
        return Err(ObjectError::Invalid(format!(
            "invalid listing prefix {prefix:?}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod prefix_tests {
    use super::check_prefix;

    #[test]
    fn prefixes_stay_inside_the_store() {
        for ok in ["", "packs/", "repos/or", "repos/org/name/refs/", "config"] {
            assert!(check_prefix(ok).is_ok(), "{ok}");
        }
        for bad in [
            "packs/../../",
            "..",
            "../",
            "repos/a/../b/",
            "/etc/",
            "repos//",
            "a/./b",
            ".",
            "a\\b",
            "//",
        ] {
            assert!(check_prefix(bad).is_err(), "{bad}");
        }
    }
}
