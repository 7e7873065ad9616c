//! How the Hub names file versions, reproduced: which files are "LFS" files, their git
//! object ids, and the etag the client keys its cache on.
//!
//! On the Hub a large file (tracked by Git LFS: by extension in `.gitattributes`, or over
//! 10 MB) has the etag `sha256(content)` and the git oid of its LFS pointer file; a small
//! file has the etag and oid `sha1("blob <len>\0" + content)`, the git blob id.

use sha1::{Digest, Sha1};

/// Files over this size are LFS files whatever their extension.
pub const LFS_SIZE: u64 = 10 * 1000 * 1000;

/// Extensions the Hub's default `.gitattributes` tracks with LFS.
const LFS_EXTENSIONS: &[&str] = &[
    "7z",
    "arrow",
    "bin",
    "bz2",
    "ckpt",
    "ftz",
    "gguf",
    "gz",
    "h5",
    "joblib",
    "mlmodel",
    "model",
    "msgpack",
    "npy",
    "npz",
    "onnx",
    "ot",
    "parquet",
    "pb",
    "pickle",
    "pkl",
    "pt",
    "pth",
    "rar",
    "safetensors",
    "tar",
    "tflite",
    "tgz",
    "wasm",
    "xz",
    "zip",
    "zst",
];

/// Whether the Hub would store this file with LFS.
pub fn is_lfs(path: &str, size: u64) -> bool {
    if size > LFS_SIZE {
        return true;
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    match name.rsplit_once('.') {
        Some((_, ext)) => LFS_EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str()),
        None => false,
    }
}

/// The LFS pointer file of a file with this sha256 and size.
pub fn lfs_pointer(sha256_hex: &str, size: u64) -> String {
    format!("version https://git-lfs.github.com/spec/v1\noid sha256:{sha256_hex}\nsize {size}\n")
}

/// Incremental git blob id: `sha1("blob <len>\0" + content)`.
pub struct GitBlob(Sha1);

impl GitBlob {
    /// Starts the id of a blob of `len` bytes.
    pub fn new(len: u64) -> GitBlob {
        let mut h = Sha1::new();
        h.update(format!("blob {len}\0").as_bytes());
        GitBlob(h)
    }

    /// Adds content.
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// The 40-hex id.
    pub fn finish(self) -> String {
        hex::encode(self.0.finalize())
    }
}

/// The git blob id of `data`.
pub fn git_blob_id(data: &[u8]) -> String {
    let mut b = GitBlob::new(data.len() as u64);
    b.update(data);
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_ids_match_git() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(
            git_blob_id(b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        // `git hash-object /dev/null`
        assert_eq!(git_blob_id(b""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
    }

    #[test]
    fn lfs_rule() {
        assert!(is_lfs("model-00001-of-00002.safetensors", 10));
        assert!(is_lfs("sub/tokenizer.model", 10));
        assert!(!is_lfs("config.json", 10));
        assert!(is_lfs("tokenizer.json", 20_000_000));
        assert!(!is_lfs("README", 5));
    }
}
