//! Release facts of revisions in the Hub API (docs/design/release-check.md §6, §7.5): the
//! `"modelcas"` member of `model_info` (the revision's release check and labels), and the
//! guard of `[serve.locks]` for a locked commit whose check failed (403
//! `ReleaseCheckFailed`, unless `serve --force`).
//!
//! The facts are read from the store (one GET of the check record, one LIST of the labels
//! and a GET per label) and kept in the hub's release cache: at most
//! [`super::RELEASE_CACHE`] revisions, each for [`RELEASE_TTL`], so a check or label written by another process is
//! seen within that time, and a revision this process pulls is read again at once.

use std::sync::Arc;
use std::time::Instant;

use format::release::{CheckObject, Verdict};
use http::StatusCode;
use repo::StoreError;
use serde_json::{json, Value};

use super::{Hub, Located, ReleaseFacts, RELEASE_TTL};
use crate::reply::Reply;

/// Errors named in the 403 of a failing lock; the rest are counted.
const ERRORS_SHOWN: usize = 3;

impl Hub {
    /// The release facts of the located revision, from [`Hub::releases`] when read less
    /// than [`RELEASE_TTL`] ago and not pulled by this request.
    pub(super) fn release_facts(&self, at: &Located) -> Result<Arc<ReleaseFacts>, StoreError> {
        let key = (at.repo.clone(), at.commit);
        if !at.pulled {
            if let Some((when, facts)) = self.releases.get(&key) {
                if when.elapsed() < RELEASE_TTL {
                    return Ok(facts);
                }
            }
        }
        let facts = Arc::new(ReleaseFacts {
            check: self.store.current_check(&at.manifest)?,
            labels: self.store.labels(&at.repo, &at.commit)?,
        });
        self.releases.insert(key, (Instant::now(), facts.clone()));
        Ok(facts)
    }

    /// `model_info`'s `"modelcas"` member; `None` (logged) when the records cannot be read,
    /// so that a client's download does not fail on them.
    pub(super) fn release_json(&self, at: &Located) -> Option<Value> {
        match self.release_facts(at) {
            Ok(f) => Some(json!({ "check": check_json(f.check.as_ref()), "labels": f.labels })),
            Err(e) => {
                tracing::warn!("release records of {}@{}: {e}", at.repo, at.commit.to_hex());
                None
            }
        }
    }

    /// The 403 for the commit of a `[serve.locks]` entry whose release check failed
    /// (without `--force`). A locked commit stored at start was judged then (serve refuses
    /// to start on a failing one); this catches one the mirror fetched later. A commit
    /// without a current record is served, with a warning: the check could not be made
    /// when it was pulled, and serve cannot make it.
    pub(super) fn lock_guard(&self, at: &Located) -> Result<(), Box<Reply>> {
        if self.policy.force_locks || self.policy.lock_of(&at.repo) != Some(at.commit) {
            return Ok(());
        }
        let facts = self.release_facts(at).map_err(crate::reply::internal)?;
        let Some(check) = &facts.check else {
            tracing::warn!(
                "{}@{} (locked by [serve.locks]) has no release check record: run modelcas \
                 check {}@{}",
                at.repo,
                at.commit.to_hex(),
                at.repo,
                at.commit.to_hex()
            );
            return Ok(());
        };
        if check.verdict() != Verdict::Failed {
            return Ok(());
        }
        let msg = format!(
            "{} is locked to {} by the server's [serve.locks], and that revision failed its \
             release check ({}); fix the lock or start serve with --force",
            at.repo,
            at.commit.to_hex(),
            check.errors_line(ERRORS_SHOWN)
        );
        let mut r = Reply::error(
            StatusCode::FORBIDDEN,
            "ReleaseCheckFailed",
            &msg,
            Some(&at.commit),
        );
        // The body also carries the record, for a client that reads more than `error`.
        let body = json!({ "error": msg, "check": check_json(Some(check)) });
        r.body = crate::body::Body::full(body.to_string());
        Err(Box::new(r))
    }
}

/// A check record as JSON: `{verdict, errors, warnings, rules, checked_at, by, problems:
/// [{severity, code, path, message}], omitted}`, or `{"verdict": "not checked", ...}` (the
/// shape `modelcas check --json` and `ls --json` print).
pub(super) fn check_json(obj: Option<&CheckObject>) -> Value {
    let Some(c) = obj else {
        return json!({"verdict": Verdict::NotChecked.as_str(), "errors": null,
                      "warnings": null, "rules": null, "problems": []});
    };
    let problems: Vec<Value> = c
        .problems
        .iter()
        .map(|p| {
            json!({"severity": if p.is_error() { "error" } else { "warning" },
                   "code": p.code, "path": p.path, "message": p.message})
        })
        .collect();
    json!({"verdict": c.verdict().as_str(), "errors": c.errors(), "warnings": c.warnings(),
           "rules": c.rules, "checked_at": c.checked_at, "by": c.by, "problems": problems,
           "omitted": c.omitted})
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::release::{Problem, SEVERITY_ERROR, SEVERITY_WARNING};
    use format::CommitId;

    fn record(problems: Vec<Problem>) -> CheckObject {
        CheckObject {
            commit: CommitId([1; 20]),
            files: [0; 32],
            rules: 1,
            checked_at: 5,
            by: "test".into(),
            problems,
            omitted: 0,
        }
    }

    fn problem(severity: u8, n: usize) -> Problem {
        Problem {
            severity,
            code: format!("code.{n}"),
            path: format!("f{n}"),
            message: format!("f{n}: bad {n}"),
        }
    }

    #[test]
    fn check_json_names_the_verdict_counts_and_each_problem() {
        let none = check_json(None);
        assert_eq!(none["verdict"], "not checked");
        assert_eq!(none["problems"], json!([]));
        let c = record(vec![
            problem(SEVERITY_ERROR, 1),
            problem(SEVERITY_WARNING, 2),
        ]);
        let j = check_json(Some(&c));
        assert_eq!(j["verdict"], "failed");
        assert_eq!(
            (j["errors"].clone(), j["warnings"].clone()),
            (json!(1), json!(1))
        );
        assert_eq!(
            j["problems"][1],
            json!({"severity": "warning", "code": "code.2", "path": "f2", "message": "f2: bad 2"})
        );
        assert_eq!(check_json(Some(&record(Vec::new())))["verdict"], "passed");
    }

    #[test]
    fn the_errors_of_a_failing_lock_are_named_up_to_a_few() {
        let c = record((0..5).map(|i| problem(SEVERITY_ERROR, i)).collect());
        assert_eq!(
            c.errors_line(3),
            "f0: bad 0; f1: bad 1; f2: bad 2; … and 2 more"
        );
        let one = record(vec![
            problem(SEVERITY_ERROR, 7),
            problem(SEVERITY_WARNING, 8),
        ]);
        assert_eq!(one.errors_line(3), "f7: bad 7");
    }
}
