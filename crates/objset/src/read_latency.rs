//! Recent latencies of foreground reads (`Store::read`, which NBD and FUSE reads go
//! through), for a scrub that keeps them within a latency budget (`ScrubPacer`).
//!
//! ```text
//!   time ─►  | epoch n-19 | … | epoch n-1 | epoch n (now) |     100 ms each
//!   ring      slot (n-19)%20 …              slot n%20
//!   each slot: the epoch number it holds + a histogram, 4 buckets per octave of µs
//!   quantile(q) merges the newest slots until it has `WANTED_READS` reads (or the
//!   whole 2 s): a p99 of fewer than 100 reads would only be their slowest
//! ```
//! A slot is zeroed by the first read of a new epoch that lands in it (under a small lock
//! taken once per epoch); the counts are atomics, so readers never wait on each other. A
//! read counted while its slot is being zeroed may be lost: the window is a controller's
//! input, not an account.
//!
//! The pacer is a multiplicative-increase, multiplicative-decrease controller: every 20 ms
//! (from its first slice on) it doubles the pause between scrub slices while the
//! foreground p99 is over the budget and shrinks it by an eighth while the p99 is within it
//! (or nobody reads): quick to give the disks to the reads, slow to give them back to the
//! scrub, so the scrub runs as fast as the budget lets it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const EPOCH: Duration = Duration::from_millis(100);
/// How often the pacer adjusts its pause.
const ADJUST_EVERY: Duration = Duration::from_millis(20);
const EPOCHS: usize = 20;
/// Reads a quantile is taken over, when the window has them.
const WANTED_READS: u64 = 400;
/// Four buckets per power of two of microseconds, up to 2^40 µs.
const BUCKETS: usize = 4 * 40;

/// Latencies of the reads of the last `EPOCHS` epochs.
pub struct ReadLatency {
    start: Instant,
    slots: [Slot; EPOCHS],
}

struct Slot {
    /// The epoch counted here (0: none yet).
    epoch: AtomicU64,
    counts: [AtomicU32; BUCKETS],
    zeroing: Mutex<()>,
}

impl Default for ReadLatency {
    fn default() -> Self {
        ReadLatency {
            start: Instant::now(),
            slots: std::array::from_fn(|_| Slot {
                epoch: AtomicU64::new(0),
                counts: std::array::from_fn(|_| AtomicU32::new(0)),
                zeroing: Mutex::new(()),
            }),
        }
    }
}

impl ReadLatency {
    fn epoch_now(&self) -> u64 {
        (self.start.elapsed().as_millis() / EPOCH.as_millis()) as u64 + 1
    }

    /// Counts one read that took `took`.
    pub fn record(&self, took: Duration) {
        let epoch = self.epoch_now();
        let slot = &self.slots[epoch as usize % EPOCHS];
        if slot.epoch.load(Ordering::Acquire) != epoch {
            let _one = slot.zeroing.lock().unwrap_or_else(|p| p.into_inner());
            if slot.epoch.load(Ordering::Acquire) != epoch {
                slot.counts
                    .iter()
                    .for_each(|c| c.store(0, Ordering::Relaxed));
                slot.epoch.store(epoch, Ordering::Release);
            }
        }
        slot.counts[bucket_of(took)].fetch_add(1, Ordering::Relaxed);
    }

    /// The `q` quantile (0 < q ≤ 1) of the recent reads (the newest epochs that hold
    /// `WANTED_READS`, or the whole window), as the upper edge of its bucket; `None` with
    /// fewer than `min_reads` reads in the window.
    pub fn quantile(&self, q: f64, min_reads: u64) -> Option<Duration> {
        let now = self.epoch_now();
        let mut merged = [0u64; BUCKETS];
        let mut total = 0u64;
        for age in 0..EPOCHS as u64 {
            let Some(epoch) = now.checked_sub(age).filter(|&e| e > 0) else {
                break;
            };
            let slot = &self.slots[epoch as usize % EPOCHS];
            if slot.epoch.load(Ordering::Acquire) != epoch {
                continue;
            }
            for (m, c) in merged.iter_mut().zip(&slot.counts) {
                let n = u64::from(c.load(Ordering::Relaxed));
                *m += n;
                total += n;
            }
            if total >= WANTED_READS {
                break;
            }
        }
        if total == 0 || total < min_reads {
            return None;
        }
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &n) in merged.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(bucket_top(i));
            }
        }
        Some(bucket_top(BUCKETS - 1))
    }
}

/// Bucket of a latency: below 8 µs one per µs, then 4 per octave.
fn bucket_of(took: Duration) -> usize {
    let us = took.as_micros().min(u128::from(u64::MAX)) as u64;
    if us < 8 {
        return us as usize;
    }
    let octave = 63 - us.leading_zeros() as usize; // ≥ 3
    let quarter = ((us >> (octave - 2)) & 3) as usize;
    (octave * 4 + quarter - 4).min(BUCKETS - 1)
}

/// The latency just above every one `bucket_of` puts in bucket `i`.
fn bucket_top(i: usize) -> Duration {
    if i < 8 {
        return Duration::from_micros(i as u64 + 1);
    }
    let octave = (i + 4) / 4;
    let quarter = (i + 4) % 4;
    Duration::from_micros(((5 + quarter as u64) << (octave - 2)).min(u64::MAX >> 1))
}

/// How a scrub keeps foreground reads within `budget` (their p99): the pause it takes
/// after each slice, adjusted every `ADJUST_EVERY` from what `ReadLatency` saw.
pub struct ScrubPacer {
    budget: Duration,
    pause: Duration,
    /// When the pause was last adjusted (`None`: never, so the first slice adjusts it).
    adjusted: Option<Instant>,
}

/// Reads needed in the window before its p99 is believed (with fewer, the slowest of them
/// stands for it).
const MIN_READS: u64 = 5;
const LONGEST_PAUSE: Duration = Duration::from_secs(1);
const SHORTEST_PAUSE: Duration = Duration::from_micros(250);

impl ScrubPacer {
    pub fn new(budget: Duration) -> ScrubPacer {
        ScrubPacer {
            budget,
            pause: Duration::ZERO,
            adjusted: None,
        }
    }

    /// The pause to take after a slice, given the foreground reads' p99 now.
    pub fn pause_after_slice(&mut self, p99: Option<Duration>) -> Duration {
        if self.adjusted.is_none_or(|t| t.elapsed() >= ADJUST_EVERY) {
            self.adjusted = Some(Instant::now());
            self.pause = next_pause(self.pause, p99, self.budget);
        }
        self.pause
    }

    /// The pause after a slice for `store`'s foreground reads.
    pub fn pause_for(&mut self, reads: &ReadLatency) -> Duration {
        self.pause_after_slice(reads.quantile(0.99, MIN_READS))
    }
}

fn next_pause(pause: Duration, p99: Option<Duration>, budget: Duration) -> Duration {
    match p99 {
        Some(p) if p > budget => (pause * 2).clamp(SHORTEST_PAUSE * 4, LONGEST_PAUSE),
        _ if pause < SHORTEST_PAUSE => Duration::ZERO,
        _ => pause * 7 / 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_their_latencies() {
        for us in [
            0u64, 1, 7, 8, 9, 15, 16, 100, 999, 1000, 4096, 65_537, 10_000_000,
        ] {
            let d = Duration::from_micros(us);
            let i = bucket_of(d);
            assert!(
                d < bucket_top(i),
                "{us} µs in bucket {i} (top {:?})",
                bucket_top(i)
            );
            if i > 0 {
                assert!(d >= bucket_top(i - 1), "{us} µs below bucket {i}");
            }
            // At most a quarter of an octave (25 %) wide above 8 µs.
            if us >= 8 {
                assert!(bucket_top(i).as_micros() as f64 <= (us as f64 + 1.0) * 1.25);
            }
        }
    }

    #[test]
    fn the_p99_follows_the_slow_reads() {
        let w = ReadLatency::default();
        assert_eq!(w.quantile(0.99, 1), None);
        for _ in 0..990 {
            w.record(Duration::from_micros(100));
        }
        for _ in 0..10 {
            w.record(Duration::from_millis(50));
        }
        let p99 = w.quantile(0.99, 20).unwrap();
        assert!(p99 <= Duration::from_micros(125), "{p99:?}");
        for _ in 0..20 {
            w.record(Duration::from_millis(50));
        }
        let p99 = w.quantile(0.99, 20).unwrap();
        assert!(p99 >= Duration::from_millis(50), "{p99:?}");
        assert_eq!(w.quantile(0.99, 5000), None, "too few reads to believe");
    }

    #[test]
    fn old_epochs_leave_the_window() {
        let w = ReadLatency::default();
        for _ in 0..100 {
            w.record(Duration::from_millis(80));
        }
        std::thread::sleep(EPOCH * (EPOCHS as u32 + 1));
        for _ in 0..100 {
            w.record(Duration::from_micros(10));
        }
        let p99 = w.quantile(0.99, 20).unwrap();
        assert!(p99 <= Duration::from_micros(12), "{p99:?}");
    }

    #[test]
    fn the_pause_grows_over_the_budget_and_shrinks_under_it() {
        let budget = Duration::from_millis(5);
        let over = Some(Duration::from_millis(9));
        let under = Some(Duration::from_millis(1));
        let mut pause = Duration::ZERO;
        for _ in 0..20 {
            pause = next_pause(pause, over, budget);
        }
        assert_eq!(pause, LONGEST_PAUSE);
        // Within the budget it shrinks, slowly.
        let near = next_pause(pause, Some(Duration::from_micros(4900)), budget);
        assert!(near < pause && near * 8 >= pause * 7, "{near:?}");
        for _ in 0..120 {
            pause = next_pause(pause, under, budget);
        }
        assert_eq!(pause, Duration::ZERO, "nobody slow: full speed");
        assert_eq!(next_pause(Duration::ZERO, None, budget), Duration::ZERO);
    }
}
