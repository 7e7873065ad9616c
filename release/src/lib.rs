//! The release check (docs/design/release-check.md, §3 and §4): given the files of one model
//! revision, the problems that would keep vLLM or transformers from loading it. Pure: no
//! store, no clock, no network; the files come through the [`Files`] trait, so the store
//! feeds stored files through its checked read path and the CLI a plain directory
//! ([`DirFiles`]).
//!
//! * [`files`] — the input: [`Files`], [`FileInfo`], [`DirFiles`].
//! * `problems` — collecting problems: messages, numbers, the caps per (file, code) and
//!   per report, the partial-commit wording.
//! * `json` — JSON files streamed through serde visitors under a read cap.
//! * `header` — `.safetensors` headers, judged by the safetensors crate.
//! * `revision` — the class of a revision (model, adapter, other) and the loader JSON.
//! * `weights` — weights present, shard sets, `*.safetensors.index.json`.
//! * `tokenizer` — tokenizer files and the chat template.
//! * `automap` — `auto_map` references and the relative imports of remote code.

mod automap;
pub mod files;
mod header;
mod json;
mod problems;
mod revision;
mod tokenizer;
mod weights;

use std::collections::BTreeSet;

pub use files::{DirFiles, FileInfo, Files};

/// The rule set's version, stored with every check: it goes up whenever a rule, a code or
/// a severity changes, so records made by older rules can be found and made again.
pub const RULES: u32 = 2;

/// Problems kept in one report; the rest are counted in [`Report::omitted`].
pub const MAX_PROBLEMS: usize = 1000;
/// Problems kept per (file, code); the last kept one says how many more there were.
pub const MAX_PER_FILE_CODE: usize = 8;
/// A message's cap in bytes (the record's field cap, §2.2).
pub const MAX_MESSAGE: usize = 500;
/// A problem path's cap in bytes (§2.2).
pub const MAX_PATH: usize = 1024;
/// Tensor names are quoted up to this many bytes, then `…`.
pub const MAX_QUOTED_NAME: usize = 200;

/// The safetensors crate's `MAX_HEADER_SIZE`: `safe_open` refuses a longer header.
pub const MAX_HEADER: u64 = 100_000_000;
/// The first read of a `.safetensors` file: holds `N` and, nearly always, the header.
pub const FIRST_READ: usize = 64 * 1024;
/// Tensors read from one header (counted while the header is visited); past it the file's
/// ranges are not checked.
pub const MAX_TENSORS: usize = 1_048_576;
/// `config.json` and the other loader JSON files but `tokenizer_config.json`.
pub const MAX_LOADER_JSON: u64 = 16 << 20;
/// `*.safetensors.index.json`, in bytes.
pub const MAX_INDEX: u64 = 64 << 20;
/// `weight_map` entries read from one index.
pub const MAX_INDEX_ENTRIES: usize = 4_194_304;
/// `tokenizer.json` and `tekken.json`, streamed. Real ones are under 40 MB; the cap is
/// 128 MiB because serde_json buffers one JSON string whole, so a file that is a single
/// long key costs about twice its size while it is read.
pub const MAX_TOKENIZER_JSON: u64 = 128 << 20;
/// `tokenizer_config.json`, in bytes.
pub const MAX_TOKENIZER_CONFIG: u64 = 64 << 20;
/// Added or special tokens looked at for chat markers, per file.
pub const MAX_ADDED_TOKENS: usize = 1_048_576;
/// `vocab.json`, `merges.txt`, `vocab.txt` and `tokenizer.model`, in bytes.
pub const MAX_VOCAB: u64 = 256 << 20;
/// One line of `merges.txt` or `vocab.txt` (or a tiktoken `tokenizer.model`).
pub const MAX_LINE: usize = 64 * 1024;
/// `auto_map` references read, over `config.json` and `tokenizer_config.json` together.
pub const MAX_AUTO_MAP_REFS: usize = 256;
/// Remote-code `.py` files scanned for relative imports.
pub const MAX_PY_FILES: usize = 64;
/// One remote-code `.py` file, in bytes.
pub const MAX_PY: u64 = 4 << 20;

/// Tokens that mark a chat model: a tokenizer that has one asks for a chat template.
pub const CHAT_MARKERS: &[&str] = &[
    "<|im_start|>",
    "<|start_header_id|>",
    "<|eot_id|>",
    "<start_of_turn>",
    "[INST]",
    "<|user|>",
    "<|assistant|>",
];

/// How bad a problem is. Errors sort first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The revision does not load (or loads wrong).
    Error,
    /// The revision may load, with a caveat the message names.
    Warning,
}

/// One defect of one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub severity: Severity,
    /// Stable id (§3.2), e.g. `safetensors.truncated`.
    pub code: String,
    /// The file at fault, relative to the revision's root.
    pub path: String,
    /// The text shown, starting with the path and ": ".
    pub message: String,
}

/// A partial commit: only some of the upstream files are stored.
#[derive(Clone, Copy, Debug, Default)]
pub struct Partial {
    pub stored: u64,
    pub upstream: u64,
}

/// What the caller knows beside the files.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Set for a partial commit: missing-file errors become warnings that say so, when
    /// they name no more distinct paths than the commit left out (`upstream - stored`).
    pub partial: Option<Partial>,
}

/// What the check found in one revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// "model", "adapter" or "other" (§3.1).
    pub class: String,
    /// `.safetensors` files at any depth.
    pub safetensors_files: u32,
    /// Tensors over all `.safetensors` headers read.
    pub tensors: u64,
    /// The tokenizer file(s) checked, e.g. "tokenizer.json"; `None` when none was.
    pub tokenizer: Option<String>,
}

/// The result of [`check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Sorted: errors first, then by path, then by code; at most [`MAX_PROBLEMS`].
    pub problems: Vec<Problem>,
    /// Problems found beyond those kept.
    pub omitted: u32,
    pub summary: Summary,
}

/// The verdict of a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    Warnings,
    Failed,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Passed => "passed",
            Verdict::Warnings => "warnings",
            Verdict::Failed => "failed",
        }
    }
}

impl Report {
    pub fn errors(&self) -> usize {
        self.count(Severity::Error)
    }

    pub fn warnings(&self) -> usize {
        self.count(Severity::Warning)
    }

    /// Failed if any kept problem is an error, warnings if only warnings, else passed.
    pub fn verdict(&self) -> Verdict {
        if self.errors() > 0 {
            Verdict::Failed
        } else if self.warnings() > 0 {
            Verdict::Warnings
        } else {
            Verdict::Passed
        }
    }

    fn count(&self, severity: Severity) -> usize {
        self.problems
            .iter()
            .filter(|p| p.severity == severity)
            .count()
    }
}

/// A check that could not be made: a file could not be read. Never a problem of the
/// revision (the store's read path failed, or the directory changed).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl CheckError {
    pub(crate) fn read(path: &str) -> impl FnOnce(std::io::Error) -> CheckError + '_ {
        move |source| CheckError::Read {
            path: path.to_string(),
            source,
        }
    }
}

/// Checks one revision. Deterministic: the same files give an equal report.
pub fn check(files: &dyn Files, opts: &Options) -> Result<Report, CheckError> {
    let mut sink = problems::Sink::new(opts.partial);
    let class = revision::classify(files.list());
    let mut summary = Summary {
        class: class.as_str().to_string(),
        ..Summary::default()
    };
    let indexes = if class == revision::Class::Other {
        Vec::new()
    } else {
        weights::read_indexes(files, &mut sink)?
    };
    let named: BTreeSet<String> = indexes
        .iter()
        .flat_map(|i| i.files.keys().cloned())
        .collect();
    let headers = header::check_all(files, &mut sink, &named)?;
    summary.safetensors_files = headers.files;
    summary.tensors = headers.tensors;
    match class {
        revision::Class::Model => {
            let needed = !revision::gguf_only(files);
            let config = revision::check_config(files, &mut sink, needed)?;
            revision::check_loader_json(files, &mut sink, class)?;
            weights::check_weights(files, &mut sink);
            weights::check_shards(files, &mut sink, &named);
            weights::check_indexes(files, &mut sink, &indexes, &headers.names)?;
            let tok = tokenizer::check(files, &mut sink, needed)?;
            summary.tokenizer = tok.checked;
            let mut refs = config.auto_map;
            refs.extend(tok.auto_map);
            automap::check(files, &mut sink, &refs)?;
        }
        revision::Class::Adapter => {
            revision::check_loader_json(files, &mut sink, class)?;
            weights::check_shards(files, &mut sink, &named);
            weights::check_indexes(files, &mut sink, &indexes, &headers.names)?;
        }
        revision::Class::Other => {
            if !revision::empty(files, &mut sink) {
                revision::check_loader_json(files, &mut sink, class)?;
                revision::not_a_model(files, &mut sink);
            }
        }
    }
    Ok(sink.finish(summary))
}

#[cfg(test)]
#[path = "../tests/fixture/mod.rs"]
mod fixture;

#[cfg(test)]
mod tests;
