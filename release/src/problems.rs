//! Collecting problems: each message starts with its file's path, numbers are written
//! with thousands separators, names are quoted and clipped; at the end the problems are
//! sorted, capped per (file, code) and per report, and clipped to the record's caps.

use std::collections::{BTreeMap, BTreeSet};

use crate::report::{
    Partial, Problem, Report, Severity, Summary, MAX_MESSAGE, MAX_PATH, MAX_PER_FILE_CODE,
    MAX_PROBLEMS, MAX_QUOTED_NAME,
};

/// A problem as found: its message is clipped only at the end, keeping `tail` whole.
struct Found {
    severity: Severity,
    code: &'static str,
    path: String,
    body: String,
    tail: String,
    /// For a missing-file problem, the path it says is missing; its severity and tail are
    /// decided in [`Sink::finish`], once all are known.
    missing: Option<String>,
    /// More problems like it, counted but not kept ([`Sink::more`]).
    extra: usize,
}

/// Where the rules put what they find.
pub(crate) struct Sink {
    found: Vec<Found>,
    partial: Option<Partial>,
}

impl Sink {
    pub(crate) fn new(partial: Option<Partial>) -> Sink {
        Sink {
            found: Vec::new(),
            partial,
        }
    }

    pub(crate) fn error(&mut self, code: &'static str, path: &str, message: String) {
        self.push(Severity::Error, code, path, message, String::new());
    }

    pub(crate) fn warning(&mut self, code: &'static str, path: &str, message: String) {
        self.push(Severity::Warning, code, path, message, String::new());
    }

    /// A file that should be there and is not: an error, but in a partial commit a warning
    /// that says so when no more paths are missing than the commit left out (see
    /// [`Sink::finish`]).
    pub(crate) fn missing(&mut self, code: &'static str, path: &str, message: String) {
        self.missing_named(code, path, path, message);
    }

    /// [`Sink::missing`] reported on `path` for the missing file `named` (an index that
    /// names a file that is not there).
    pub(crate) fn missing_named(
        &mut self,
        code: &'static str,
        path: &str,
        named: &str,
        message: String,
    ) {
        self.push(Severity::Error, code, path, message, String::new());
        if let Some(f) = self.found.last_mut() {
            f.missing = Some(named.to_string());
        }
    }

    /// Missing-file problems of a partial commit: warnings ending "(a partial commit: N of
    /// M upstream files stored)" when the distinct paths they name are no more than the
    /// files left out (`upstream - stored`), else errors that say more are missing than
    /// were left out. Without a partial commit they stay errors.
    fn resolve_missing(&mut self) {
        let Some(p) = self.partial else { return };
        let named: BTreeSet<&str> = self
            .found
            .iter()
            .filter_map(|f| f.missing.as_deref())
            .collect();
        let left_out = p.upstream.saturating_sub(p.stored);
        let excused = named.len() as u64 <= left_out;
        let head = format!(
            " (a partial commit: {} of {} upstream files stored",
            num(p.stored),
            num(p.upstream)
        );
        let tail = if excused {
            format!("{head})")
        } else {
            format!("{head}, but more files are missing than were left out)")
        };
        for f in self.found.iter_mut().filter(|f| f.missing.is_some()) {
            if excused {
                f.severity = Severity::Warning;
            }
            f.tail = tail.clone();
        }
    }

    /// `n` more errors of `code` for `path` like the last one pushed, counted for the
    /// "… and N more" of [`Sink::finish`] without their messages (a rule that finds
    /// millions keeps [`MAX_PER_FILE_CODE`] of them).
    pub(crate) fn more(&mut self, code: &'static str, path: &str, n: usize) {
        let last = self
            .found
            .iter_mut()
            .rev()
            .find(|f| f.code == code && f.path == path && f.severity == Severity::Error);
        if let Some(f) = last {
            f.extra += n;
        }
    }

    /// A file over its read cap: not checked.
    pub(crate) fn too_large(&mut self, path: &str, size: u64, cap: u64) {
        let message = format!(
            "{} bytes, more than the check reads ({}): not checked",
            num(size),
            num(cap)
        );
        self.warning("check.too-large", path, message);
    }

    fn push(
        &mut self,
        severity: Severity,
        code: &'static str,
        path: &str,
        body: String,
        tail: String,
    ) {
        let path = clip(path, MAX_PATH, "…");
        self.found.push(Found {
            severity,
            code,
            path,
            body,
            tail,
            missing: None,
            extra: 0,
        });
    }

    /// Problems found so far for this path at any severity (the header pass asks whether
    /// it named anything).
    pub(crate) fn count_for(&self, path: &str) -> usize {
        self.found
            .iter()
            .filter(|f| f.path == path)
            .map(|f| 1 + f.extra)
            .sum()
    }

    pub(crate) fn finish(mut self, summary: Summary) -> Report {
        self.resolve_missing();
        self.found
            .sort_by(|a, b| (a.severity, &a.path, a.code).cmp(&(b.severity, &b.path, b.code)));
        let mut per: BTreeMap<(Severity, String, &'static str), usize> = BTreeMap::new();
        for f in &self.found {
            *per.entry((f.severity, f.path.clone(), f.code)).or_default() += 1 + f.extra;
        }
        let mut seen: BTreeMap<(Severity, String, &'static str), usize> = BTreeMap::new();
        let mut problems = Vec::new();
        for f in self.found {
            let key = (f.severity, f.path.clone(), f.code);
            let n = seen.entry(key.clone()).or_default();
            *n += 1;
            if *n > MAX_PER_FILE_CODE {
                continue;
            }
            let total = per.get(&key).copied().unwrap_or(0);
            let mut tail = f.tail;
            if *n == MAX_PER_FILE_CODE && total > MAX_PER_FILE_CODE {
                tail.push_str(&format!(
                    " … and {} more",
                    num((total - MAX_PER_FILE_CODE) as u64)
                ));
            }
            problems.push(make(f.severity, f.code, f.path, &f.body, &tail));
        }
        let omitted = problems.len().saturating_sub(MAX_PROBLEMS);
        problems.truncate(MAX_PROBLEMS);
        Report {
            problems,
            omitted: u32::try_from(omitted).unwrap_or(u32::MAX),
            summary,
        }
    }
}

fn make(severity: Severity, code: &str, path: String, body: &str, tail: &str) -> Problem {
    let head = format!("{path}: {body}");
    let room = MAX_MESSAGE.saturating_sub(tail.len());
    let message = format!("{}{tail}", clip(&head, room, "…"));
    Problem {
        severity,
        code: code.to_string(),
        path,
        message,
    }
}

/// `s` cut to at most `max` bytes (at a character boundary), `mark` ending a cut one.
pub(crate) fn clip(s: &str, max: usize, mark: &str) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(mark.len());
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{mark}", &s[..end])
}

/// A name in double quotes, clipped to [`MAX_QUOTED_NAME`] bytes.
pub(crate) fn quote(name: &str) -> String {
    format!("\"{}\"", clip(name, MAX_QUOTED_NAME, "…"))
}

/// A number with thousands separators: 1,203,334.
pub(crate) fn num(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A serde_json error's text with its line and column written with separators.
pub(crate) fn json_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    if e.line() == 0 {
        return text;
    }
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let base = text.strip_suffix(&suffix).unwrap_or(&text);
    format!(
        "{base} at line {} column {}",
        num(e.line() as u64),
        num(e.column() as u64)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_have_separators() {
        assert_eq!(num(0), "0");
        assert_eq!(num(999), "999");
        assert_eq!(num(1000), "1,000");
        assert_eq!(num(1_203_334), "1,203,334");
        assert_eq!(num(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn clipping_keeps_char_boundaries() {
        assert_eq!(clip("héllo", 3, "…"), "…");
        assert_eq!(clip("héllo", 5, "…"), "h…", "not inside the é");
        assert_eq!(clip("héllo!", 6, "…"), "hé…");
        assert_eq!(clip("abc", 3, "…"), "abc");
        let long = "é".repeat(300);
        let q = quote(&long);
        assert!(q.len() <= MAX_QUOTED_NAME + 2);
        assert!(q.ends_with("…\""));
    }
}
