//! Upstream operations off the request threads: single flight on a pool of its own, and
//! waiters that hold no thread.
//!
//! - **Own pool** ([`Pool`]): every upstream operation (a resolution, a pull) runs on a
//!   few threads of its own with a bounded queue, never on the threads that route
//!   requests and stream stored files. A slow or silent upstream can fill this pool; it
//!   cannot take a thread from `/metrics` or a stored download. A full queue is an
//!   immediate error, not a wait.
//! - **Single flight** ([`Flights`]): concurrent callers with the same key share one run.
//!   A run always ends with a result for every waiter: a panic in the operation, or a
//!   job the pool drops unrun, completes the flight with an error ([`Outcome::failed`]),
//!   and the flight leaves the map so that a later caller runs it again.
//! - **Waiters that hold no thread** ([`Waits`]): the server routes a request with a
//!   [`Waits`] installed ([`Waits::route`]). A flight that is not done then answers
//!   [`Outcome::pending`] at once instead of blocking; the server awaits
//!   [`Waits::pending`] asynchronously (within the request's timeout) and routes the
//!   request again, and each flight it waited on replays its result and leader flag
//!   ([`Flights::replay`]), so the second routing sees what a blocking one would have.
//!   Without a [`Waits`] (tests, fuzzing) a caller blocks until the flight is done.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::Hash;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tokio::sync::watch;

/// What a flight produces: it can also say "failed" (a panic, a job dropped, a full
/// queue) and "pending" (not done yet; the caller is told to wait and route again).
pub trait Outcome: Clone + Send + 'static {
    /// The operation did not produce a result, for the reason given.
    fn failed(why: String) -> Self;
    /// The operation is in flight; the request waits for it and is routed again.
    fn pending() -> Self;
}

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads running jobs from a bounded queue.
pub struct Pool {
    queue: SyncSender<Job>,
    name: &'static str,
    capacity: usize,
}

impl Pool {
    /// `workers` threads named `name`, with room for `queued` jobs waiting.
    pub fn new(name: &'static str, workers: usize, queued: usize) -> Pool {
        let (tx, rx) = sync_channel::<Job>(queued);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..workers.max(1) {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || work(&rx));
            if let Err(e) = spawned {
                // Fewer workers: jobs still run on the others (none: each job sent is
                // dropped with the queue when the pool goes, and its flight fails).
                tracing::error!("cannot start a {name} thread: {e}");
            }
        }
        Pool {
            queue: tx,
            name,
            capacity: queued,
        }
    }

    /// Queues `job`, or gives it back with the reason when the queue is full.
    fn submit(&self, job: Job) -> Result<(), (String, Job)> {
        match self.queue.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(job)) => Err((
                format!(
                    "the mirror's {} queue is full ({} operations waiting); try again later",
                    self.name, self.capacity
                ),
                job,
            )),
            Err(TrySendError::Disconnected(job)) => {
                Err((format!("the mirror's {} threads are gone", self.name), job))
            }
        }
    }
}

/// A worker: runs jobs until the pool is dropped; a panicking job does not end it.
fn work(rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = {
            let rx = rx.lock();
            match rx.recv() {
                Ok(j) => j,
                Err(_) => return,
            }
        };
        // The job completes its flight itself, panic or not (see `Completion`).
        let _ = catch_unwind(AssertUnwindSafe(job));
    }
}

/// The shared result of one operation in flight: set once, waited for by blocked callers
/// (the cell) and by requests that hold no thread (`ready`).
pub struct Flight<K, V> {
    key: K,
    result: OnceLock<V>,
    ready: watch::Sender<bool>,
}

impl<K, V: Clone> Flight<K, V> {
    fn new(key: K) -> Flight<K, V> {
        Flight {
            key,
            result: OnceLock::new(),
            ready: watch::Sender::new(false),
        }
    }

    fn result(&self) -> Option<V> {
        self.result.get().cloned()
    }

    /// Sets the result (the first one wins) and wakes every waiter.
    fn complete(&self, v: V) {
        let _ = self.result.set(v);
        self.ready.send_replace(true);
    }

    /// Blocks until the result is in.
    fn wait(&self) -> V {
        self.result.wait().clone()
    }
}

type Map<K, V> = Arc<Mutex<HashMap<K, Arc<Flight<K, V>>>>>;

/// Single flight on a [`Pool`]: concurrent callers with the same key share one run.
pub struct Flights<K, V> {
    inflight: Map<K, V>,
    pool: Pool,
}

/// Takes its flight out of the map, then completes it, when dropped, whatever happened
/// to the job: run to the end ([`Completion::finish`]), panicked, or dropped unrun with
/// the pool's queue. Out of the map first: a caller arriving after the result is set
/// starts afresh rather than reading a result it did not wait for.
struct Completion<K: Eq + Hash, V: Outcome> {
    flight: Arc<Flight<K, V>>,
    map: Map<K, V>,
    result: Option<V>,
}

impl<K: Eq + Hash, V: Outcome> Completion<K, V> {
    fn finish(mut self, v: V) {
        self.result = Some(v);
    }
}

impl<K: Eq + Hash, V: Outcome> Drop for Completion<K, V> {
    fn drop(&mut self) {
        {
            let mut map = self.map.lock();
            if map
                .get(&self.flight.key)
                .is_some_and(|f| Arc::ptr_eq(f, &self.flight))
            {
                map.remove(&self.flight.key);
            }
        }
        let v = self.result.take().unwrap_or_else(|| {
            V::failed(if std::thread::panicking() {
                "internal error: the upstream operation panicked (see the log)".into()
            } else {
                "internal error: the upstream operation was dropped before it ran".into()
            })
        });
        self.flight.complete(v);
    }
}

impl<K, V> Flights<K, V>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    V: Outcome + Sync,
{
    /// Flights run on `pool`.
    pub fn new(pool: Pool) -> Flights<K, V> {
        Flights {
            inflight: Arc::new(Mutex::new(HashMap::new())),
            pool,
        }
    }

    /// Runs `op` for `key` on the pool, or joins the run in progress. The flag is true
    /// for the caller that started it. With [`Waits`] installed on this thread, a run
    /// not done yet answers [`Outcome::pending`] at once (see the module doc); without,
    /// the caller blocks until it is done.
    pub fn run(&self, key: &K, op: impl FnOnce() -> V + Send + 'static) -> (V, bool) {
        if let Some(done) = self.replay(key) {
            return done;
        }
        let (flight, leader) = self.join_or_start(key, op);
        if let Some(v) = flight.result() {
            return (v, leader);
        }
        let deferred = with_waits(|w| {
            w.pending = Some(Wait(flight.ready.subscribe()));
            w.joined.push(Joined {
                flight: flight.clone(),
                leader,
            });
        });
        match deferred {
            Some(()) => (V::pending(), leader),
            None => (flight.wait(), leader),
        }
    }

    /// The result of a flight for `key` that the request routed with the current
    /// [`Waits`] waited on and that is done, with its leader flag.
    pub fn replay(&self, key: &K) -> Option<(V, bool)> {
        with_waits(|w| {
            w.joined.iter().rev().find_map(|j| {
                let f = j.flight.clone().downcast::<Flight<K, V>>().ok()?;
                let v = (f.key == *key).then(|| f.result()).flatten()?;
                Some((v, j.leader))
            })
        })
        .flatten()
    }

    /// The flight of `key`: joined if one is in progress, else started on the pool. A
    /// flight the pool refuses (queue full) is done at once, with that error.
    fn join_or_start(
        &self,
        key: &K,
        op: impl FnOnce() -> V + Send + 'static,
    ) -> (Arc<Flight<K, V>>, bool) {
        let flight = {
            let mut map = self.inflight.lock();
            if let Some(f) = map.get(key) {
                return (f.clone(), false);
            }
            let flight = Arc::new(Flight::new(key.clone()));
            map.insert(key.clone(), flight.clone());
            flight
        };
        let done = Completion {
            flight: flight.clone(),
            map: self.inflight.clone(),
            result: None,
        };
        let job: Job = Box::new(move || done.finish(op()));
        if let Err((why, job)) = self.pool.submit(job) {
            // The result first; then the job's drop takes the flight out of the map (not
            // under the map's lock: the drop takes it).
            flight.complete(V::failed(why));
            drop(job);
        }
        (flight, true)
    }

    /// Callers waiting on the flight of `key` (besides its leader): for tests.
    #[cfg(test)]
    pub(crate) fn joined(&self, key: &K) -> usize {
        let map = self.inflight.lock();
        // One reference is the map's, one the job's, one the leader's; each blocked
        // waiter holds one more.
        map.get(key)
            .map_or(0, |f| Arc::strong_count(f).saturating_sub(3))
    }
}

/// A flight a request waited on (kept for its replay).
struct Joined {
    flight: Arc<dyn Any + Send + Sync>,
    leader: bool,
}

/// Something to await: a flight that is not done.
pub struct Wait(watch::Receiver<bool>);

impl Wait {
    /// Returns when the flight is done (or its sender is gone, which means done too).
    pub async fn done(mut self) {
        let _ = self.0.wait_for(|d| *d).await;
    }
}

/// The flights one request waited on, across its routings. See the module doc.
#[derive(Default)]
pub struct Waits {
    joined: Vec<Joined>,
    pending: Option<Wait>,
    /// Routings so far.
    rounds: u32,
}

thread_local! {
    static WAITS: RefCell<Option<Waits>> = const { RefCell::new(None) };
}

/// Runs `f` on the installed [`Waits`], if any.
fn with_waits<T>(f: impl FnOnce(&mut Waits) -> T) -> Option<T> {
    WAITS.with(|w| w.borrow_mut().as_mut().map(f))
}

/// Whether the routing running on this thread stopped at a flight not done: its reply
/// is a placeholder, replaced once the wait is over, so it is neither logged nor
/// counted.
pub fn stopped() -> bool {
    with_waits(|w| w.pending.is_some()).unwrap_or(false)
}

/// Takes the installed [`Waits`] off the thread, even if the routing panicked.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        WAITS.with(|w| w.borrow_mut().take());
    }
}

impl Waits {
    /// Runs `route` with these waits installed on this thread: flights not done answer
    /// pending instead of blocking. Returns the routing's result and the waits.
    pub fn route<T>(mut self, route: impl FnOnce() -> T) -> (T, Waits) {
        self.pending = None;
        self.rounds += 1;
        WAITS.with(|w| *w.borrow_mut() = Some(self));
        let guard = Installed;
        let out = route();
        let waits = WAITS.with(|w| w.borrow_mut().take()).unwrap_or_default();
        drop(guard);
        (out, waits)
    }

    /// The flight the last routing stopped at, if it stopped at one: await it, then
    /// route again.
    pub fn pending(&mut self) -> Option<Wait> {
        self.pending.take()
    }

    /// How many times the request was routed.
    pub fn rounds(&self) -> u32 {
        self.rounds
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc::channel;
    use std::sync::Barrier;
    use std::time::Duration;

    #[derive(Clone, Debug, PartialEq)]
    enum R {
        Ok(usize),
        Failed(String),
        Pending,
    }

    impl Outcome for R {
        fn failed(why: String) -> R {
            R::Failed(why)
        }
        fn pending() -> R {
            R::Pending
        }
    }

    fn flights(workers: usize, queued: usize) -> Arc<Flights<u32, R>> {
        Arc::new(Flights::new(Pool::new("test", workers, queued)))
    }

    /// Waits at most 20 s for a thread's answer (a hang fails the test, it does not
    /// hang it).
    fn answer<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(20)).ok()
    }

    #[test]
    fn one_flight_for_concurrent_callers() {
        let f = flights(2, 8);
        let runs = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(Barrier::new(2));
        let leader = {
            let (f, runs, started) = (f.clone(), runs.clone(), started.clone());
            std::thread::spawn(move || {
                let inner = f.clone();
                f.run(&7, move || {
                    started.wait();
                    // Bounded, so a broken single flight fails the asserts below
                    // instead of hanging.
                    testutil::poll_until(Duration::from_secs(10), || {
                        (inner.joined(&7) >= 8).then_some(())
                    });
                    R::Ok(runs.fetch_add(1, Ordering::SeqCst) + 41)
                })
            })
        };
        started.wait();
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let (f, runs) = (f.clone(), runs.clone());
                std::thread::spawn(move || {
                    f.run(&7, move || R::Ok(runs.fetch_add(1, Ordering::SeqCst) + 100))
                })
            })
            .collect();
        assert_eq!(leader.join().unwrap(), (R::Ok(41), true));
        for w in waiters {
            assert_eq!(w.join().unwrap(), (R::Ok(41), false));
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        // A later call runs again.
        assert_eq!(f.run(&7, || R::Ok(5)), (R::Ok(5), true));
    }

    /// Issue 26 point 7: a leader that panics leaves no waiter blocked: each gets an
    /// error, and the next call runs the operation again on a pool that survived.
    #[test]
    fn a_panicking_leader_fails_its_waiters_instead_of_hanging_them() {
        let f = flights(1, 8);
        let (go, gate) = channel::<()>();
        let (started_tx, started) = channel::<()>();
        let (gate, started_tx) = (Mutex::new(gate), Mutex::new(started_tx));
        let leader = {
            let f = f.clone();
            std::thread::spawn(move || {
                f.run(&1, move || {
                    let _ = started_tx.lock().send(());
                    let _ = gate.lock().recv();
                    panic!("boom")
                })
            })
        };
        started.recv_timeout(Duration::from_secs(20)).unwrap();
        let waiter = {
            let f = f.clone();
            std::thread::spawn(move || f.run(&1, || R::Ok(0)))
        };
        testutil::wait_until("the waiter to join", Duration::from_secs(10), || {
            (f.joined(&1) >= 1).then_some(())
        });
        go.send(()).unwrap();
        let got = answer(move || (leader.join().unwrap(), waiter.join().unwrap()));
        let Some(((R::Failed(a), true), (R::Failed(b), false))) = got else {
            panic!("the leader and the waiter got {got:?}")
        };
        assert!(a.contains("panicked") && b == a, "{a} / {b}");
        let again = {
            let f = f.clone();
            answer(move || f.run(&1, || R::Ok(9)))
        };
        assert_eq!(again, Some((R::Ok(9), true)));
    }

    /// A full queue is an error at once, not a wait; nothing is left in flight.
    #[test]
    fn a_full_pool_refuses_at_once() {
        let f = flights(1, 1);
        let (go, gate) = channel::<()>();
        let (started_tx, started) = channel::<()>();
        let gate = Mutex::new(gate);
        let started_tx = Mutex::new(started_tx);
        // Key 1 holds the only worker; key 2 fills the queue's one place.
        let busy = {
            let f = f.clone();
            std::thread::spawn(move || {
                f.run(&1, move || {
                    let _ = started_tx.lock().send(());
                    let _ = gate.lock().recv();
                    R::Ok(1)
                })
            })
        };
        started.recv_timeout(Duration::from_secs(20)).unwrap();
        let queued = {
            let f = f.clone();
            std::thread::spawn(move || f.run(&2, || R::Ok(2)))
        };
        testutil::wait_until("key 2 to be queued", Duration::from_secs(10), || {
            f.inflight.lock().get(&2).map(|_| ())
        });
        let got = answer({
            let f = f.clone();
            move || f.run(&3, || R::Ok(3))
        });
        let Some((R::Failed(why), true)) = got else {
            panic!("{got:?}")
        };
        assert!(why.contains("queue is full"), "{why}");
        assert!(f.inflight.lock().get(&3).is_none());
        go.send(()).unwrap();
        assert_eq!(busy.join().unwrap(), (R::Ok(1), true));
        assert_eq!(queued.join().unwrap(), (R::Ok(2), true));
    }

    /// With waits installed, a flight not done answers pending at once; once it is done,
    /// the next routing replays its result and leader flag without running it again.
    #[test]
    fn waits_defer_and_replay() {
        let f = flights(1, 8);
        let (go, gate) = channel::<()>();
        let gate = Mutex::new(gate);
        let runs = Arc::new(AtomicUsize::new(0));
        let op = {
            let runs = runs.clone();
            move || {
                let _ = gate.lock().recv();
                R::Ok(runs.fetch_add(1, Ordering::SeqCst) + 10)
            }
        };
        let (r, mut waits) = Waits::default().route(|| f.run(&4, op));
        assert_eq!(r, (R::Pending, true));
        let wait = waits.pending().expect("a wait");
        go.send(()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(20), wait.done())
                .await
                .expect("done")
        });
        let (r, mut waits) = waits.route(|| f.run(&4, || R::Ok(99)));
        assert_eq!(r, (R::Ok(10), true));
        assert!(waits.pending().is_none());
        assert_eq!(waits.rounds(), 2);
        // Another request starts afresh.
        assert_eq!(f.run(&4, || R::Ok(7)), (R::Ok(7), true));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}
