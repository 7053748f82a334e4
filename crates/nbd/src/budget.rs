//! A byte budget: a counting semaphore over bytes that bounds the memory a server holds
//! for requests and replies it has taken in but not yet written back.
//!
//! Invariants (checked by `debug_assert!` and by the tests through [`BudgetStats`]):
//! - `used <= limit`, except while exactly one grant is outstanding: a single request
//!   larger than the whole budget is granted alone when nothing else holds bytes, so an
//!   oversized request waits but never deadlocks. Hence `used <= max(limit, largest grant)`
//!   for grants by `acquire`; `acquire_now` (a connection's first request, see the server)
//!   may go past the limit by one request per connection.
//! - Every grant is a [`Permit`]; dropping it gives its bytes back and wakes waiters, so
//!   bytes cannot leak on an error path (a panicking worker drops its permits too).
//! - A waiter gives up when its `give_up` check says so (server stopping, connection
//!   broken); it re-checks at least every `poll`, so stop stays bounded in time.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Bytes in use and the most ever in use at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetStats {
    pub used: u64,
    pub peak: u64,
    pub limit: u64,
}

/// A byte budget shared by the holders of its permits.
pub struct ByteBudget {
    state: Mutex<BudgetState>,
    freed: Condvar,
}

/// The figures, and how many threads wait in `acquire`: a release wakes them only when
/// there are some (a wake is a system call, and almost every release finds nobody
/// waiting). A waiter counts itself under the lock before it waits, and a release reads
/// the count under the same lock, so no wake is lost.
struct BudgetState {
    stats: BudgetStats,
    waiters: usize,
}

impl ByteBudget {
    pub fn new(limit: u64) -> Arc<ByteBudget> {
        Arc::new(ByteBudget {
            state: Mutex::new(BudgetState {
                stats: BudgetStats {
                    used: 0,
                    peak: 0,
                    limit: limit.max(1),
                },
                waiters: 0,
            }),
            freed: Condvar::new(),
        })
    }

    pub fn stats(&self) -> BudgetStats {
        lock(&self.state).stats
    }

    /// Waits until `bytes` fit (or the budget is empty), then takes them. `None` when
    /// `give_up` turned true while waiting.
    pub fn acquire(
        self: &Arc<Self>,
        bytes: u64,
        poll: Duration,
        give_up: impl Fn() -> bool,
    ) -> Option<Permit> {
        let mut state = lock(&self.state);
        while state.stats.used > 0 && state.stats.used.saturating_add(bytes) > state.stats.limit {
            if give_up() {
                return None;
            }
            state.waiters += 1;
            state = self
                .freed
                .wait_timeout(state, poll)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            state.waiters -= 1;
        }
        let stats = &mut state.stats;
        stats.used += bytes;
        stats.peak = stats.peak.max(stats.used);
        debug_assert!(stats.used <= stats.limit || stats.used == bytes);
        Some(Permit {
            budget: self.clone(),
            bytes,
        })
    }

    /// Takes `bytes` without waiting, over the limit if need be: for a connection's first
    /// request in flight, so that connections whose clients never read cannot starve one
    /// whose client does (see `server::Budgets::charge`).
    pub fn acquire_now(self: &Arc<Self>, bytes: u64) -> Permit {
        let stats = &mut lock(&self.state).stats;
        stats.used += bytes;
        stats.peak = stats.peak.max(stats.used);
        Permit {
            budget: self.clone(),
            bytes,
        }
    }

    fn release(&self, bytes: u64) {
        let mut state = lock(&self.state);
        debug_assert!(
            state.stats.used >= bytes,
            "budget released more than it granted"
        );
        state.stats.used = state.stats.used.saturating_sub(bytes);
        let anyone_waits = state.waiters > 0;
        drop(state);
        if anyone_waits {
            self.freed.notify_all();
        }
    }
}

/// Bytes held from a [`ByteBudget`]; given back on drop.
pub struct Permit {
    budget: Arc<ByteBudget>,
    bytes: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLL: Duration = Duration::from_millis(10);

    #[test]
    fn grants_within_the_limit_and_one_oversized_alone() {
        let b = ByteBudget::new(100);
        let a = b.acquire(60, POLL, || false).unwrap();
        // 60 + 60 > 100: waits, and gives up when told.
        assert!(b.acquire(60, POLL, || true).is_none());
        drop(a);
        // Larger than the whole budget, but nothing else is held: granted alone.
        let big = b.acquire(500, POLL, || false).unwrap();
        assert!(b.acquire(1, POLL, || true).is_none());
        drop(big);
        assert_eq!(
            b.stats(),
            BudgetStats {
                used: 0,
                peak: 500,
                limit: 100
            }
        );
    }

    #[test]
    fn a_waiter_proceeds_when_bytes_come_back() {
        let b = ByteBudget::new(100);
        let held = b.acquire(80, POLL, || false).unwrap();
        let b2 = b.clone();
        let waiter = std::thread::spawn(move || b2.acquire(50, POLL, || false).is_some());
        std::thread::sleep(Duration::from_millis(50));
        drop(held);
        assert!(waiter.join().unwrap());
        assert!(b.stats().peak <= 100);
    }

    /// Waiters that would not look again for a minute are woken by the release itself
    /// (releases wake only when someone waits: this fails if the count is wrong).
    #[test]
    fn a_release_wakes_every_waiter_at_once() {
        let b = ByteBudget::new(100);
        let held = b.acquire(100, POLL, || false).unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        for _ in 0..3 {
            let (b, done) = (b.clone(), done.clone());
            std::thread::spawn(move || {
                let permit = b.acquire(30, Duration::from_secs(60), || false);
                done.send(permit.is_some()).unwrap();
                // (Held until the test ends, so the others are woken by `held` alone.)
                std::thread::sleep(Duration::from_secs(2));
            });
        }
        // Let all three wait, then one release must wake them all.
        while lock(&b.state).waiters < 3 {
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(held);
        for _ in 0..3 {
            let granted = finished.recv_timeout(Duration::from_secs(10));
            assert_eq!(granted, Ok(true), "a waiter was not woken by the release");
        }
        assert_eq!(lock(&b.state).waiters, 0);
    }
}
