//! A limit on downloads from the upstream shared by every pull of a process (serve's
//! `--upstream-jobs`): a counting semaphore whose permits are held by the readers of the
//! files being downloaded and given back when a reader is dropped.

use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

/// Download slots.
pub struct Slots {
    free: Mutex<usize>,
    freed: Condvar,
}

impl Slots {
    /// `n` slots (at least one).
    pub fn new(n: usize) -> Arc<Slots> {
        Arc::new(Slots {
            free: Mutex::new(n.max(1)),
            freed: Condvar::new(),
        })
    }

    /// Waits for a free slot and holds it until the permit is dropped.
    pub fn acquire(self: &Arc<Self>) -> Permit {
        let mut free = self.free.lock();
        while *free == 0 {
            self.freed.wait(&mut free);
        }
        *free -= 1;
        Permit(self.clone())
    }
}

impl std::fmt::Debug for Slots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let free = *self.free.lock();
        f.debug_struct("Slots").field("free", &free).finish()
    }
}

/// A held slot.
pub struct Permit(Arc<Slots>);

impl Drop for Permit {
    fn drop(&mut self) {
        *self.0.free.lock() += 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_are_counted_and_given_back() {
        let s = Slots::new(2);
        let a = s.acquire();
        let b = s.acquire();
        assert_eq!(*s.free.lock(), 0);
        let waiter = {
            let s = s.clone();
            std::thread::spawn(move || drop(s.acquire()))
        };
        drop(a);
        waiter.join().unwrap();
        drop(b);
        assert_eq!(*s.free.lock(), 2);
    }
}
