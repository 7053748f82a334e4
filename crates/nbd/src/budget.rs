//! A byte budget (a counting semaphore in bytes): what bounds the memory a server spends on
//! requests in flight — READ replies waiting for a client that does not read them, WRITE
//! payloads waiting for a worker.
//!
//! Invariants:
//! - `used ≤ limit`, except that one holder may exceed the limit alone (`used` was 0 when
//!   it took its bytes): a single request larger than the budget still runs, so nothing
//!   deadlocks on a small budget.
//! - Every `take` that returned true is matched by one `give` of the same bytes.
//! - A taker waits (backpressure: the connection's reader stops reading requests, the
//!   client's socket fills); it gives up only when `give_up` says so (the connection broke
//!   or the server stops), checked every `POLL`.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

const POLL: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub struct ByteBudget {
    limit: usize,
    used: Mutex<usize>,
    freed: Condvar,
    /// The most bytes ever held at once (for tests and benchmarks).
    peak: Mutex<usize>,
}

impl ByteBudget {
    pub fn new(limit: usize) -> ByteBudget {
        ByteBudget {
            limit,
            used: Mutex::new(0),
            freed: Condvar::new(),
            peak: Mutex::new(0),
        }
    }

    /// Takes `n` bytes, waiting while they do not fit; false if `give_up` said stop first.
    pub fn take(&self, n: usize, give_up: &dyn Fn() -> bool) -> bool {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        while *used != 0 && *used + n > self.limit {
            if give_up() {
                return false;
            }
            used = self
                .freed
                .wait_timeout(used, POLL)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *used += n;
        let mut peak = self.peak.lock().unwrap_or_else(|p| p.into_inner());
        *peak = (*peak).max(*used);
        true
    }

    /// Takes `n` bytes without waiting, over the limit if need be (see `Replies::hold`).
    pub fn force_take(&self, n: usize) {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        *used += n;
        let mut peak = self.peak.lock().unwrap_or_else(|p| p.into_inner());
        *peak = (*peak).max(*used);
    }

    /// Gives back `n` bytes taken before.
    pub fn give(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        debug_assert!(*used >= n, "gave back more than was taken");
        *used = used.saturating_sub(n);
        self.freed.notify_all();
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        *self.used.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most bytes held at once since the budget was made.
    pub fn peak(&self) -> usize {
        *self.peak.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn takers_wait_for_room_and_one_oversized_taker_runs_alone() {
        let b = Arc::new(ByteBudget::new(100));
        assert!(b.take(60, &|| false));
        assert!(!b.take(60, &|| true), "no room: gives up when told");
        let b2 = Arc::clone(&b);
        let waiter = std::thread::spawn(move || b2.take(60, &|| false));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "waits while 60 + 60 > 100");
        b.give(60);
        assert!(waiter.join().unwrap());
        b.give(60);
        assert!(
            b.take(500, &|| false),
            "alone, a request larger than the budget runs"
        );
        b.give(500);
        assert_eq!((b.used(), b.peak()), (0, 500));
    }
}
