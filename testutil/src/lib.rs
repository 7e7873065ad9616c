//! Helpers for the tests of every crate (a dev-dependency only; it depends on nothing, so
//! any crate can use it without a cycle).
//!
//! [`wait_until`] is the one way a test waits for something another thread or process
//! does: it polls with a short backoff and fails the test, naming what it waited for,
//! when the bound passes. A test never waits with a bare sleep or a hand-written loop.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// The first pause between two polls; each next one is twice as long, up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(1);
/// The longest pause between two polls.
const MAX_PAUSE: Duration = Duration::from_millis(50);

/// Calls `ready` until it returns `Some` and returns that, or `None` once `timeout` has
/// passed (after one last call). Between calls it sleeps 1 ms, then twice as long each
/// time, up to 50 ms. For waits whose expiry is an outcome rather than a failure (a
/// process that must be killed when it does not exit); everywhere else, [`wait_until`].
pub fn poll_until<T>(timeout: Duration, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        if let Some(v) = ready() {
            return Some(v);
        }
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            return None;
        }
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// Calls `ready` until it returns `Some` and returns that; panics naming `what` (what was
/// waited for) and `timeout` once `timeout` has passed. `what` is formatted only then, so
/// it may show the last state seen (`std::fmt::from_fn` over a `Cell` the closure sets).
/// `ready` may itself panic when waiting is pointless (the awaited process exited).
#[track_caller]
pub fn wait_until<T>(what: impl Display, timeout: Duration, ready: impl FnMut() -> Option<T>) -> T {
    match poll_until(timeout, ready) {
        Some(v) => v,
        None => panic!("timed out after {timeout:?} waiting for {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn returns_the_first_value_ready() {
        let mut n = 0;
        let got = wait_until("n to reach 5", Duration::from_secs(10), || {
            n += 1;
            (n == 5).then_some(n * 10)
        });
        assert_eq!((got, n), (50, 5));
    }

    #[test]
    fn polls_once_more_at_the_bound_and_gives_up() {
        let calls = Cell::new(0);
        let start = Instant::now();
        let got: Option<()> = poll_until(Duration::from_millis(30), || {
            calls.set(calls.get() + 1);
            None
        });
        assert!(got.is_none());
        assert!(start.elapsed() >= Duration::from_millis(30));
        // 1 + 2 + 4 + 8 + 16 ms, then the rest: a handful of calls, not a spin.
        assert!((2..=10).contains(&calls.get()), "{} calls", calls.get());
    }

    #[test]
    #[should_panic(expected = "timed out after 20ms waiting for the answer (last seen 7)")]
    fn names_what_it_waited_for_and_the_last_state() {
        let seen = Cell::new(0);
        wait_until(
            std::fmt::from_fn(|f| write!(f, "the answer (last seen {})", seen.get())),
            Duration::from_millis(20),
            || {
                seen.set(7);
                None::<()>
            },
        );
    }
}
