//! What a check returns (problems, severities, the report and its verdict, read errors),
//! what it is told (a partial commit), and the limits it keeps to: the caps on what a file
//! declares and on what is kept (docs/design/release-check.md §3.3).

/// The rule set's version, stored with every check: it goes up whenever a rule, a code or
/// a severity changes, so records made by older rules can be found and made again.
pub const RULES: u32 = 2;

/// Problems kept in one report (the stored record's cap); the rest are counted in
/// [`Report::omitted`]. The record's caps are the format's: a report always fits one.
pub use format::release::{MAX_MESSAGE, MAX_PATH, MAX_PROBLEMS};
/// Problems kept per (file, code); the last kept one says how many more there were.
pub const MAX_PER_FILE_CODE: usize = 8;
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
