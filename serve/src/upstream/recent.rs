//! What the mirror did lately, kept in memory for the mirror page: the last pulls with
//! their results, and the last upstream failures. Not persisted: it covers this `serve`
//! process since it started (the page says so), and is bounded ([`KEPT`] of each).

use std::collections::VecDeque;

use parking_lot::Mutex;

/// Entries kept of each kind; the oldest goes first.
pub const KEPT: usize = 50;

/// One pull through the mirror.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pull {
    /// When it ended (seconds since the epoch).
    pub at: u64,
    pub repo: String,
    pub commit: String,
    /// Bytes received, or why it failed.
    pub result: Result<u64, String>,
    pub millis: u64,
}

/// One failed upstream operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub at: u64,
    /// `resolve` or `pull`.
    pub op: &'static str,
    /// What was asked (`org/name@rev`).
    pub what: String,
    pub error: String,
}

/// The last pulls and failures, newest last.
#[derive(Default)]
pub struct Recent {
    inner: Mutex<(VecDeque<Pull>, VecDeque<Failure>)>,
}

/// Longest message kept (an upstream's error text is not ours to trust in size).
const MAX_TEXT: usize = 500;

fn clip(s: &str) -> String {
    if s.len() <= MAX_TEXT {
        return s.to_string();
    }
    let mut end = MAX_TEXT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn push<T>(q: &mut VecDeque<T>, v: T) {
    if q.len() >= KEPT {
        q.pop_front();
    }
    q.push_back(v);
}

impl Recent {
    pub fn pull(&self, repo: &str, commit: &str, result: Result<u64, String>, millis: u64) {
        let p = Pull {
            at: repo::clock::now_secs(),
            repo: clip(repo),
            commit: clip(commit),
            result: result.map_err(|e| clip(&e)),
            millis,
        };
        push(&mut self.lock().0, p);
    }

    pub fn failure(&self, op: &'static str, what: &str, error: &str) {
        let f = Failure {
            at: repo::clock::now_secs(),
            op,
            what: clip(what),
            error: clip(error),
        };
        push(&mut self.lock().1, f);
    }

    /// The pulls and failures kept, newest first.
    pub fn snapshot(&self) -> (Vec<Pull>, Vec<Failure>) {
        let g = self.lock();
        (
            g.0.iter().rev().cloned().collect(),
            g.1.iter().rev().cloned().collect(),
        )
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, (VecDeque<Pull>, VecDeque<Failure>)> {
        self.inner.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_entries_newest_first_and_clips_long_texts() {
        let r = Recent::default();
        for i in 0..(KEPT + 5) {
            r.pull("o/m", &format!("{i}"), Ok(i as u64), 1);
        }
        let n = KEPT * 10;
        for i in 0..n {
            r.failure("pull", &format!("o/m@{i}"), &"x".repeat(10_000));
            assert!(r.snapshot().1.len() <= KEPT);
        }
        let (pulls, fails) = r.snapshot();
        assert_eq!(pulls.len(), KEPT);
        assert_eq!(pulls[0].commit, format!("{}", KEPT + 4));
        assert_eq!(pulls[KEPT - 1].commit, "5");
        assert_eq!(fails.len(), KEPT);
        assert_eq!(
            fails[0].what,
            format!("o/m@{}", n - 1),
            "the newest failure first"
        );
        let longest = fails.iter().map(|f| f.error.len()).max().unwrap_or(0);
        assert!(longest <= MAX_TEXT + 3);
        println!(
            "cache-bound serve upstream recent: bound {KEPT} of each; after {} pulls and {n} \
             failures: {} pulls, {} failures, longest text {longest} bytes",
            KEPT + 5,
            pulls.len(),
            fails.len()
        );
    }
}
