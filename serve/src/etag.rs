//! How the Hub names file versions, reproduced: which files are "LFS" files, their git
//! object ids, and the etag the client keys its cache on.
//!
//! On the Hub a large file (tracked by Git LFS: by extension in `.gitattributes`, or over
//! 10 MB) has the etag `sha256(content)` and the git oid of its LFS pointer file; a small
//! file has the etag and oid `sha1("blob <len>\0" + content)`, the git blob id (computed
//! by the `gitblob` crate, which the Hub client shares).

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lfs_rule() {
        assert!(is_lfs("model-00001-of-00002.safetensors", 10));
        assert!(is_lfs("sub/tokenizer.model", 10));
        assert!(!is_lfs("config.json", 10));
        assert!(is_lfs("tokenizer.json", 20_000_000));
        assert!(!is_lfs("README", 5));
    }
}
