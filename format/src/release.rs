//! Release records: the stored result of a revision's release check
//! (`repos/<org>/<name>/checks/<commit>`, magic `MCASCHCK`), its labels
//! (`repos/<org>/<name>/labels/<commit>/<key>`, magic `MCASLABL`) and the bundle record
//! that carries labels (kind 4, magic `MCASBLAB`); the digest that ties a check to the
//! files it judged, and the rules labels follow. docs/format/bytes.md "Release records".

use bincode::{Decode, Encode};

use crate::manifest::Manifest;
use crate::names::CommitId;
use crate::names::RepoId;

/// Severity byte of a warning; any other value reads as an error (fail-safe: a severity a
/// reader does not know counts against the revision).
pub const SEVERITY_WARNING: u8 = 1;
/// Severity byte written for an error.
pub const SEVERITY_ERROR: u8 = 0;
/// Problems a check object keeps; more are counted in `omitted`.
pub const MAX_PROBLEMS: usize = 1000;
/// Longest problem code, path and message kept (bytes).
pub const MAX_CODE: usize = 64;
/// See [`MAX_CODE`].
pub const MAX_PATH: usize = 1024;
/// See [`MAX_CODE`].
pub const MAX_MESSAGE: usize = 500;
/// Longest `by` field.
pub const MAX_BY: usize = 64;
/// Largest stored check object read (bytes), checked before it is read whole.
pub const MAX_CHECK_OBJECT: u64 = 4 << 20;
/// Labels one revision may carry.
pub const MAX_LABELS: usize = 64;
pub use crate::names::check_label_key;
/// Longest label key.
pub use crate::names::MAX_LABEL_KEY;

/// The labels of one commit, by key.
pub type Labels = std::collections::BTreeMap<String, String>;
/// Longest label value (bytes of UTF-8).
pub const MAX_LABEL_VALUE: usize = 1024;
/// Largest stored label object read (bytes).
pub const MAX_LABEL_OBJECT: u64 = 8 << 10;

/// One problem a release check found.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct Problem {
    /// [`SEVERITY_WARNING`], or an error (any other value; [`SEVERITY_ERROR`] is written).
    pub severity: u8,
    /// A stable identifier of the rule (`safetensors.truncated`).
    pub code: String,
    /// The file at fault, relative to the revision.
    pub path: String,
    /// The text shown, written at check time.
    pub message: String,
}

impl Problem {
    /// Whether it counts against the revision.
    pub fn is_error(&self) -> bool {
        self.severity != SEVERITY_WARNING
    }
}

/// The last release check of a commit: `repos/<org>/<name>/checks/<commit>`.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct CheckObject {
    /// The commit (must equal the key's).
    pub commit: CommitId,
    /// [`files_digest`] of the manifest checked: the record holds only while it equals
    /// the stored manifest's.
    pub files: [u8; 32],
    /// The rule set's version.
    pub rules: u32,
    /// When it was checked (seconds since the Unix epoch, the writer's clock).
    pub checked_at: u64,
    /// What wrote it (`ingest`, `pull`, `import`, `check`, `serve`); informational.
    pub by: String,
    /// Errors first, then by path and code; at most [`MAX_PROBLEMS`].
    pub problems: Vec<Problem>,
    /// Problems found beyond those kept.
    pub omitted: u32,
}

/// What a check record says of a revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No problem.
    Passed,
    /// Warnings only.
    Warnings,
    /// At least one error.
    Failed,
    /// No record, or one for other files.
    NotChecked,
}

impl Verdict {
    /// The word used in JSON and listings.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Passed => "passed",
            Verdict::Warnings => "warnings",
            Verdict::Failed => "failed",
            Verdict::NotChecked => "not checked",
        }
    }

    /// Whether a protected ref may move to the revision without `--force`.
    pub fn allows_protected_refs(self) -> bool {
        matches!(self, Verdict::Passed | Verdict::Warnings)
    }
}

impl CheckObject {
    /// Errors kept (an omitted problem is counted as an error only when no kept one is).
    pub fn errors(&self) -> usize {
        self.problems.iter().filter(|p| p.is_error()).count()
    }

    /// Warnings kept.
    pub fn warnings(&self) -> usize {
        self.problems.len() - self.errors()
    }

    /// The verdict; problems beyond the kept ones count as errors when none is kept
    /// (problems are sorted errors first, so a full list of warnings hides no error).
    pub fn verdict(&self) -> Verdict {
        if self.errors() > 0 || (self.omitted > 0 && self.problems.is_empty()) {
            Verdict::Failed
        } else if self.problems.is_empty() && self.omitted == 0 {
            Verdict::Passed
        } else {
            Verdict::Warnings
        }
    }

    /// The first `max` error messages joined by `; `, then how many more (the omitted
    /// problems counted): one log line or message naming what fails.
    pub fn errors_line(&self, max: usize) -> String {
        let errors: Vec<&str> = self
            .problems
            .iter()
            .filter(|p| p.is_error())
            .map(|p| p.message.as_str())
            .collect();
        let mut out = errors[..errors.len().min(max)].join("; ");
        let more = errors.len().saturating_sub(max) + self.omitted as usize;
        if more > 0 {
            out.push_str(&format!("; … and {more} more"));
        }
        out
    }

    /// The verdict in a few words: `passed`, `passed with 2 warnings`, `FAILED (3 errors, 1
    /// warning)`.
    pub fn summary(&self) -> String {
        let (e, w) = (self.errors(), self.warnings());
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        match self.verdict() {
            Verdict::Passed => "passed".into(),
            Verdict::Warnings => format!("passed with {w} warning{}", plural(w)),
            _ if w > 0 => format!("FAILED ({e} error{}, {w} warning{})", plural(e), plural(w)),
            _ => format!("FAILED ({e} error{})", plural(e)),
        }
    }

    /// Why the stored bytes cannot be this record: the caps and the key's commit.
    pub fn check(&self, commit: &CommitId) -> Result<(), String> {
        if &self.commit != commit {
            return Err(format!("record of commit {}", self.commit.to_hex()));
        }
        if self.problems.len() > MAX_PROBLEMS {
            return Err(format!(
                "{} problems (at most {MAX_PROBLEMS})",
                self.problems.len()
            ));
        }
        if self.by.len() > MAX_BY {
            return Err("`by` too long".into());
        }
        for p in &self.problems {
            if p.code.len() > MAX_CODE || p.path.len() > MAX_PATH || p.message.len() > MAX_MESSAGE {
                return Err(format!("a problem of {:?} over its caps", p.code));
            }
        }
        Ok(())
    }
}

/// Cuts `s` to at most `max` bytes on a character boundary, ending in `…` when cut.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// One label of a commit: `repos/<org>/<name>/labels/<commit>/<key>`.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct LabelObject {
    /// The commit (must equal the key's).
    pub commit: CommitId,
    /// The key (must equal the key's last segment).
    pub key: String,
    /// The value.
    pub value: String,
    /// When it was set (seconds, writer's clock; informational).
    pub set_at: u64,
    /// What set it (`ingest`, `label`, `import`).
    pub by: String,
}

/// Bundle record kind 4: the labels of one revision the bundle carries.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct BundleLabels {
    /// The repository.
    pub repo: RepoId,
    /// The commit (one of the bundle's manifests).
    pub commit: CommitId,
    /// (key, value) pairs, sorted by key, keys distinct.
    pub labels: Vec<(String, String)>,
}

/// Unicode format and separator characters that change how a line shows in a terminal
/// or a page without being seen: bidi marks and overrides, zero-width characters, line
/// and paragraph separators, the byte order mark.
fn is_format_char(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
}

/// Why a label value is refused.
pub fn check_label_value(key: &str, value: &str) -> Result<(), String> {
    if value.len() > MAX_LABEL_VALUE {
        return Err(format!(
            "label {key}: value of {} bytes (at most {MAX_LABEL_VALUE})",
            value.len()
        ));
    }
    if value.chars().any(|c| c.is_control() || is_format_char(c)) {
        return Err(format!(
            "label {key}: value has control or invisible formatting characters (bidi \
             overrides, zero-width or line separators)"
        ));
    }
    Ok(())
}

impl LabelObject {
    /// Why the stored bytes cannot be this label of `commit` under `key`.
    pub fn check(&self, commit: &CommitId, key: &str) -> Result<(), String> {
        if &self.commit != commit || self.key != key {
            return Err(format!(
                "label {:?} of commit {} stored under another key",
                self.key,
                self.commit.to_hex()
            ));
        }
        check_label_key(&self.key)?;
        check_label_value(&self.key, &self.value)?;
        if self.by.len() > MAX_BY {
            return Err("`by` too long".into());
        }
        Ok(())
    }
}

impl BundleLabels {
    /// Why the record cannot be taken: label rules, order, count.
    pub fn check(&self) -> Result<(), String> {
        if self.labels.is_empty() || self.labels.len() > MAX_LABELS {
            return Err(format!(
                "{} labels for {}@{} (1 to {MAX_LABELS})",
                self.labels.len(),
                self.repo,
                self.commit.to_hex()
            ));
        }
        for w in self.labels.windows(2) {
            if w[0].0 >= w[1].0 {
                return Err(format!("labels not sorted or repeated at {:?}", w[1].0));
            }
        }
        for (k, v) in &self.labels {
            check_label_key(k)?;
            check_label_value(k, v)?;
        }
        Ok(())
    }
}

/// Context string of [`files_digest`].
pub const FILES_DIGEST_CONTEXT: &[u8] = b"modelcas-release-files-v1\0";

/// The digest of what a check judges: BLAKE3-256 of [`FILES_DIGEST_CONTEXT`] then, for
/// each file in manifest order, `path || 0x00 || size (u64 LE) || sha256 || executable
/// (1 byte)`. Chunk locations are left out: an import or a gc rewrite moves chunks, never
/// files.
pub fn files_digest(manifest: &Manifest) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(FILES_DIGEST_CONTEXT);
    for f in &manifest.files {
        h.update(f.path.as_bytes());
        h.update(&[0]);
        h.update(&f.size.to_le_bytes());
        h.update(&f.sha256.0);
        h.update(&[u8::from(f.executable)]);
    }
    *h.finalize().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{self, Kind};

    fn check_object() -> CheckObject {
        CheckObject {
            commit: CommitId([7; 20]),
            files: [9; 32],
            rules: 1,
            checked_at: 1_700_000_000,
            by: "ingest".into(),
            problems: vec![Problem {
                severity: SEVERITY_ERROR,
                code: "config.missing".into(),
                path: "config.json".into(),
                message: "config.json: missing".into(),
            }],
            omitted: 0,
        }
    }

    #[test]
    fn check_objects_round_trip_and_give_their_verdict() {
        let c = check_object();
        let bytes = codec::encode(Kind::Check, &c, true);
        let back: CheckObject = codec::decode(Kind::Check, &bytes).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.verdict(), Verdict::Failed);
        let mut w = c.clone();
        w.problems[0].severity = SEVERITY_WARNING;
        assert_eq!(w.verdict(), Verdict::Warnings);
        w.problems[0].severity = 7; // unknown: an error
        assert_eq!(w.verdict(), Verdict::Failed);
        w.problems.clear();
        assert_eq!(w.verdict(), Verdict::Passed);
        w.omitted = 3;
        assert_eq!(w.verdict(), Verdict::Failed);
        assert!(c.check(&CommitId([7; 20])).is_ok());
        assert_eq!(c.summary(), "FAILED (1 error)");
        assert_eq!(c.errors_line(5), "config.json: missing");
        let mut more = c.clone();
        more.omitted = 2;
        assert_eq!(more.errors_line(0), "; … and 3 more");
        assert!(c.check(&CommitId([8; 20])).is_err());
    }

    #[test]
    fn label_rules_refuse_what_a_key_cannot_hold() {
        for good in ["vllm", "validated-by", "cuda.version", "a_1", "9x"] {
            assert!(check_label_key(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-x",
            ".x",
            "a/b",
            "a b",
            "ä",
            &"k".repeat(65),
            "a=b",
            "..",
        ] {
            assert!(check_label_key(bad).is_err(), "{bad:?}");
        }
        assert!(check_label_value("k", "0.11.0 (cu128)").is_ok());
        assert!(check_label_value("k", "a\nb").is_err());
        for hidden in ["a\u{202E}b", "a\u{2028}b", "\u{200B}", "\u{FEFF}x"] {
            assert!(check_label_value("k", hidden).is_err(), "{hidden:?}");
        }
        assert!(check_label_value("k", "vLLM 0.11 — ok é 中").is_ok());
        assert!(check_label_value("k", &"v".repeat(1025)).is_err());
        let l = LabelObject {
            commit: CommitId([1; 20]),
            key: "vllm".into(),
            value: "0.11.0".into(),
            set_at: 1,
            by: "label".into(),
        };
        assert!(l.check(&CommitId([1; 20]), "vllm").is_ok());
        assert!(l.check(&CommitId([1; 20]), "torch").is_err());
        assert!(l.check(&CommitId([2; 20]), "vllm").is_err());
    }

    #[test]
    fn bundle_labels_must_be_sorted_distinct_and_valid() {
        let mut b = BundleLabels {
            repo: RepoId::parse("o/m").unwrap(),
            commit: CommitId([1; 20]),
            labels: vec![("a".into(), "1".into()), ("b".into(), "2".into())],
        };
        assert!(b.check().is_ok());
        b.labels.push(("b".into(), "3".into()));
        assert!(b.check().is_err());
        b.labels = vec![];
        assert!(b.check().is_err());
    }

    #[test]
    fn clip_cuts_on_character_boundaries() {
        assert_eq!(clip("abc", 5), "abc");
        let c = clip(&"é".repeat(10), 7);
        assert!(c.len() <= 7 && c.ends_with('…'), "{c}");
    }
}
