//! Which files of a revision to pull: `--include` and `--exclude` globs matched against
//! the whole path, as `hf download` (fnmatch) does: `*` also matches `/`, so `*.json`
//! selects every JSON file at any depth.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// Compiled include and exclude patterns.
pub struct Selection {
    include: Option<GlobSet>,
    exclude: Option<GlobSet>,
}

impl Selection {
    /// Every file matching any of `include` (all files when empty) and none of `exclude`.
    pub fn new(include: &[String], exclude: &[String]) -> Result<Selection, String> {
        Ok(Selection {
            include: compile(include)?,
            exclude: compile(exclude)?,
        })
    }

    /// Whether `path` is selected.
    pub fn matches(&self, path: &str) -> bool {
        self.include.as_ref().is_none_or(|s| s.is_match(path))
            && !self.exclude.as_ref().is_some_and(|s| s.is_match(path))
    }
}

fn compile(patterns: &[String]) -> Result<Option<GlobSet>, String> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let g = GlobBuilder::new(p)
            .literal_separator(false)
            .build()
            .map_err(|e| format!("pattern {p:?}: {e}"))?;
        b.add(g);
    }
    b.build().map(Some).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(inc: &[&str], exc: &[&str]) -> Selection {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Selection::new(&v(inc), &v(exc)).unwrap()
    }

    #[test]
    fn globs_match_like_hf_download() {
        let all = sel(&[], &[]);
        assert!(all.matches("a/b/c.bin"));
        let json = sel(&["*.json"], &[]);
        assert!(json.matches("config.json"));
        assert!(json.matches("sub/dir/tokenizer.json"));
        assert!(!json.matches("model.safetensors"));
        let no_onnx = sel(&[], &["onnx/*", "*.bin"]);
        assert!(!no_onnx.matches("onnx/model.onnx"));
        assert!(!no_onnx.matches("pytorch_model.bin"));
        assert!(no_onnx.matches("model.safetensors"));
        let both = sel(&["*.safetensors", "*.json"], &["*index*"]);
        assert!(both.matches("model-00001-of-00002.safetensors"));
        assert!(!both.matches("model.safetensors.index.json"));
        assert!(Selection::new(&["[".to_string()], &[]).is_err());
    }
}
