//! The reader's place of the vendored fuser (`vendor/fuser/src/reader_place.rs`, issue 40):
//! at most one FUSE worker reads `/dev/fuse` at a time; a place left empty by a worker
//! serving a slow request is taken by the standby within ticks; a standby asleep on an
//! idle mount is woken by the next leave.

use fuser::{ReaderPlace, TICK};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

/// A second worker that takes the place once, notes it in the counter, and ends.
fn second_worker(place: &Arc<ReaderPlace>) -> (std::thread::JoinHandle<()>, Arc<AtomicUsize>) {
    let taken = Arc::new(AtomicUsize::new(0));
    let (p, t) = (place.clone(), taken.clone());
    let other = std::thread::spawn(move || {
        p.take();
        t.store(1, Ordering::SeqCst);
        p.leave_for_good();
    });
    (other, taken)
}

/// Two workers: while one serves a slow request outside the place, the other takes
/// the place within a few ticks (no request waits behind a slow one).
#[test]
fn an_empty_place_is_taken_by_the_standby_within_ticks() {
    let place = Arc::new(ReaderPlace::default());
    place.take();
    let (other, taken) = second_worker(&place);
    // The second worker parks as the standby; the first leaves with nothing waiting
    // (no wake) and "serves" a slow request.
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(taken.load(Ordering::SeqCst), 0);
    let left = Instant::now();
    place.leave(false);
    while taken.load(Ordering::SeqCst) == 0 {
        assert!(
            left.elapsed() < Duration::from_secs(2),
            "the standby never took the place"
        );
        std::thread::yield_now();
    }
    other.join().unwrap();
}

/// A standby that went to sleep on an idle place is woken by the next leave.
#[test]
fn a_sleeping_standby_is_woken_when_the_place_is_left() {
    let place = Arc::new(ReaderPlace::default());
    place.take();
    let (other, taken) = second_worker(&place);
    let start = Instant::now();
    while !place.standby_asleep() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the standby never slept"
        );
        std::thread::sleep(TICK);
    }
    place.leave(false);
    other.join().unwrap();
    assert_eq!(taken.load(Ordering::SeqCst), 1);
}

/// Eight workers each take and leave the place 1,000 times: never two at once, and
/// every worker ends.
#[test]
fn the_place_is_held_by_one_worker_at_a_time() {
    let place = Arc::new(ReaderPlace::default());
    let inside = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let (place, inside) = (place.clone(), inside.clone());
            std::thread::spawn(move || {
                for n in 0..1000 {
                    place.take();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    place.leave((n + i) % 3 == 0);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
}
