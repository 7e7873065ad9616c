//! The reader's place of a session (modelcas addition 4, `MODELCAS-PATCH.md`; public for
//! modelcas's tests of it, `fuse/tests/reader_place.rs`): with
//! `Config::spin_wait` set, at most one worker at a time reads `/dev/fuse`, and it looks for
//! a request (`poll` with no timeout, `sched_yield` between polls) for up to `spin_wait`
//! before its blocking read.
//!
//! Why one: the kernel wakes a worker sleeping in `read` for every request it queues. On a
//! 2-vCPU VM that wake-up, on the other CPU, was most of what a small file's open and read
//! cost; a looking worker takes the request without it, but only if no sleeping reader is
//! woken for it first (with eight workers in `read`, the sleepers won three requests in
//! four on a loaded machine). So the other workers wait here, not in `read`:
//!
//! * A worker that read a request leaves the place and serves it. When another request is
//!   already waiting (a burst, concurrent readers), it wakes a parked worker to take the
//!   place at once; otherwise it comes back itself when done, and a walk of small files
//!   wakes no thread at all.
//! * While the place is empty (its last holder is serving a slow request), one parked
//!   worker, the standby, looks every [`TICK`] and takes it once it stayed empty for a
//!   whole tick: a request that arrives then waits at most two ticks, never behind a slow
//!   one, and a quick serve is never interrupted by a change of reader.
//! * The standby stops ticking after [`IDLE_TICKS`] ticks with the place held and nothing
//!   taken (an idle mount spends no CPU); the next worker to leave the place wakes it.
//! * A worker that ends (the connection gone, an error) leaves the place and wakes one
//!   parked worker, which reads, ends the same way, and wakes the next.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How often the standby looks at an empty place.
pub const TICK: Duration = Duration::from_millis(1);
/// Ticks with the place held and no take after which the standby sleeps until woken.
pub const IDLE_TICKS: u32 = 20;

#[derive(Debug, Default)]
struct State {
    /// A worker holds the place (looks at or reads the device).
    held: bool,
    /// A request waits (its reader saw it, or a worker ended): a parked worker takes the
    /// free place at once.
    wanted: bool,
    /// Places taken so far (the standby sees whether anything happens).
    takes: u64,
    /// Times the place was left (the standby tells one empty spell from the next).
    leaves: u64,
    /// Workers parked, not counting the standby.
    parked: usize,
    /// A worker is the standby (ticks while the place is held or briefly empty).
    standby: bool,
    /// The standby sleeps until woken (the mount was idle).
    standby_asleep: bool,
}

/// The reader's place of one session.
#[derive(Debug, Default)]
pub struct ReaderPlace {
    state: Mutex<State>,
    parked: Condvar,
}

impl ReaderPlace {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A worker that panicked while holding the lock left plain flags behind.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, s: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.parked.wait(s).unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until this worker holds the place. A worker coming back from serving a
    /// request takes a free place at once; a parked one only when a request waits, or (the
    /// standby) when the place stayed empty for a whole tick.
    pub fn take(&self) {
        let mut s = self.lock();
        let mut coming_back = true;
        loop {
            if !s.held && (coming_back || s.wanted) {
                break;
            }
            coming_back = false;
            if !s.standby {
                s.standby = true;
                s = self.stand_by(s);
                s.standby = false;
                break;
            }
            s.parked += 1;
            s = self.wait(s);
            s.parked -= 1;
        }
        s.held = true;
        s.wanted = false;
        s.takes += 1;
        if !s.standby && s.parked > 0 {
            // One of the parked becomes the standby.
            drop(s);
            self.parked.notify_one();
        }
    }

    /// The standby's wait: returns with the place free and a request waiting, or empty for
    /// a whole tick (its holder serves a slow request). Sleeps untimed after
    /// [`IDLE_TICKS`] ticks of a held place and no take.
    fn stand_by<'a>(&self, mut s: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        let mut idle = 0;
        let mut seen = s.takes;
        let mut empty_spell = None;
        loop {
            if !s.held {
                if s.wanted || empty_spell == Some(s.leaves) {
                    return s;
                }
                empty_spell = Some(s.leaves);
            } else {
                empty_spell = None;
            }
            if s.held && s.takes == seen {
                idle += 1;
            } else {
                idle = 0;
                seen = s.takes;
            }
            if idle > IDLE_TICKS {
                s.standby_asleep = true;
                s = self.wait(s);
                s.standby_asleep = false;
                idle = 0;
                seen = s.takes;
                empty_spell = None;
                continue;
            }
            s = self
                .parked
                .wait_timeout(s, TICK)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Leaves the place after a read: `waiting` says whether another request is already
    /// queued (a parked worker then takes the place to read it now). A sleeping standby is
    /// woken either way, to tick while the place may be empty.
    pub fn leave(&self, waiting: bool) {
        let mut s = self.lock();
        s.held = false;
        s.leaves += 1;
        s.wanted |= waiting;
        let sleepers = s.parked + usize::from(s.standby);
        let (one, all) = (waiting && sleepers > 0, s.standby_asleep);
        drop(s);
        if all {
            self.parked.notify_all();
        } else if one {
            self.parked.notify_one();
        }
    }

    /// Whether the standby sleeps until woken (for tests).
    pub fn standby_asleep(&self) -> bool {
        self.lock().standby_asleep
    }

    /// Leaves the place for good (the worker ends): a parked worker takes it.
    pub fn leave_for_good(&self) {
        let mut s = self.lock();
        s.held = false;
        s.leaves += 1;
        s.wanted = true;
        drop(s);
        self.parked.notify_all();
    }
}
