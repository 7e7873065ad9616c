//! Lookups every rule module shares: a file by path, whether a path is top-level
//! weights, the text of a JSON error.

use crate::files::{FileInfo, Files};
use crate::problems::json_error;

/// Extensions of weights files at the top level.
pub(crate) const WEIGHT_EXTS: &[&str] = &[".safetensors", ".bin", ".pt", ".pth", ".gguf"];

/// A top-level weights file (not `training_args.bin`, which the Trainer writes beside
/// adapters and models and which holds no weights).
pub(crate) fn is_weights(path: &str) -> bool {
    !path.contains('/')
        && path != "training_args.bin"
        && WEIGHT_EXTS.iter().any(|e| path.ends_with(e))
}

pub(crate) fn find<'a>(files: &'a dyn Files, path: &str) -> Option<&'a FileInfo> {
    let list = files.list();
    list.binary_search_by(|f| f.path.as_str().cmp(path))
        .ok()
        .map(|i| &list[i])
}

/// "not valid JSON: …" for syntax, "not a JSON object: …" for a value of another shape.
pub(crate) fn invalid_text(e: &serde_json::Error) -> String {
    if e.is_data() {
        format!("not a JSON object of the expected shape: {}", json_error(e))
    } else {
        format!("not valid JSON: {}", json_error(e))
    }
}
