//! Worker threads kept for the life of the process instead of spawned per request.
//!
//! `on_io_threads` runs one job per item: the first on the calling thread, the others on a
//! pool of kept threads (32; the binary may set another count with `set_io_threads`), and returns when all are done. Used for
//! per-leaf I/O (each job a blocking `preadv`/`pwritev`; the pool is large so that every
//! leaf of a wide pool is busy at once and a slow disk blocks only its own job) and for
//! splitting checksum, compression and parity work in two halves (`split_cpu`).
//!
//! Spawning OS threads per batch cost tens of microseconds per leaf and per batch (a fifth
//! of a 1 MiB read on tmpfs); work-stealing pools spin between bursts, which on two cores
//! takes time from the work itself. Idle threads here sleep on a condition variable.

use std::collections::VecDeque;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

use crate::io_class::{IoClass, CLASSES};
use crate::iostat::IoStats;

/// Threads kept for jobs unless the binary chose another count.
pub const DEFAULT_IO_THREADS: usize = 32;

/// The count `set_io_threads` chose (0: the default).
static IO_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Sets how many I/O threads the process keeps; only before the first I/O (the pool is
/// started once). Returns false (and changes nothing) if it has started already.
pub fn set_io_threads(n: usize) -> bool {
    assert!(n > 0, "at least one I/O thread");
    IO_THREADS.store(n, Ordering::SeqCst);
    let started = QUEUE.get().is_some();
    !started
}

/// The number of I/O threads in force (or to be started).
pub fn io_threads() -> usize {
    match IO_THREADS.load(Ordering::SeqCst) {
        0 => DEFAULT_IO_THREADS,
        n => n,
    }
}

static QUEUE: OnceLock<&'static JobQueue> = OnceLock::new();

type Job = Box<dyn FnOnce() + Send + 'static>;

struct JobQueue {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
}

thread_local! {
    /// When the leaf request this thread issues next became ready to go: when its job was
    /// queued, or when the job's previous request ended. `MeteredLeaf` counts the time
    /// from then to the request's start as its queue wait (`iostat -l`). `None` outside
    /// `on_io_threads` jobs.
    static READY_SINCE: std::cell::Cell<Option<std::time::Instant>> =
        const { std::cell::Cell::new(None) };
}

/// How long the leaf request starting now waited for an I/O thread (or behind the
/// earlier requests of its job), and from now on the next one waits from `next`.
pub(crate) fn queue_wait(now: std::time::Instant) -> Option<std::time::Duration> {
    READY_SINCE.with(|r| r.get().map(|t| now.saturating_duration_since(t)))
}

/// Marks when the next leaf request of this thread's job is ready (after one ended).
pub(crate) fn mark_ready(at: std::time::Instant) {
    READY_SINCE.with(|r| {
        if r.get().is_some() {
            r.set(Some(at));
        }
    });
}

/// Runs `f` as a job queued at `queued` by a thread whose I/O class scope was `scope`
/// (`crate::io_class`: the worker counts the job's requests as the submitter would).
fn as_job<R>(queued: std::time::Instant, scope: Option<IoClass>, f: impl FnOnce() -> R) -> R {
    let _class = crate::io_class::set_scope(scope);
    let outer = READY_SINCE.with(|r| r.replace(Some(queued)));
    let result = f();
    READY_SINCE.with(|r| r.set(outer));
    result
}

/// Leaf-I/O jobs queued for an I/O thread and not started yet, per class (`iostat -q`'s
/// `pend`). The queue is the process's, shared by every pool it holds.
static PENDING: [AtomicU64; CLASSES] = [const { AtomicU64::new(0) }; CLASSES];

/// Leaf-I/O jobs waiting for an I/O thread now, per class (`IoClass::index` order).
pub fn pending_by_class() -> [u64; CLASSES] {
    std::array::from_fn(|i| PENDING[i].load(Ordering::Relaxed))
}

thread_local! {
    /// Set on pool threads: a job that itself fans out runs its items inline (a pool
    /// thread waiting for jobs queued behind it could otherwise wait forever).
    static ON_POOL_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn queue() -> &'static JobQueue {
    QUEUE.get_or_init(|| {
        let q: &'static JobQueue = Box::leak(Box::new(JobQueue {
            jobs: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
        }));
        for i in 0..io_threads() {
            std::thread::Builder::new()
                .name(format!("cairn-io-{i}"))
                .spawn(move || {
                    ON_POOL_THREAD.with(|f| f.set(true));
                    loop {
                        let job = {
                            let mut jobs = q.jobs.lock().unwrap_or_else(|p| p.into_inner());
                            loop {
                                if let Some(job) = jobs.pop_front() {
                                    break job;
                                }
                                jobs = q.ready.wait(jobs).unwrap_or_else(|p| p.into_inner());
                            }
                        };
                        job();
                    }
                })
                .expect("cannot start the I/O threads");
        }
        q
    })
}

/// Counts finished jobs; `wait` returns when all have finished.
struct Latch {
    left: Mutex<usize>,
    done: Condvar,
}

impl Latch {
    fn count_down(&self) {
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        *left -= 1;
        if *left == 0 {
            self.done.notify_all();
        }
    }

    fn wait(&self) {
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        while *left > 0 {
            left = self.done.wait(left).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Runs `f` on every item — the first on the caller, the rest on kept threads — and
/// returns the results in the order of `items` once all are done. A panic in a job is
/// raised again here, after every job has finished.
pub fn on_io_threads<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    fan_out(items, None, f)
}

/// `on_io_threads` for jobs that each issue reads (`is_read`) or writes to one leaf, whose
/// counters `stats_of` gives (none for an unmetered leaf): while a job waits for a thread
/// it counts as pending in the class its requests will be counted in, for the process
/// and for its leaf (`iostat -q`'s pend).
pub fn on_leaf_io<'s, T: Send, R: Send>(
    is_read: bool,
    items: Vec<T>,
    stats_of: impl Fn(&T) -> Option<&'s IoStats>,
    f: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    let class = crate::io_class::for_request(is_read);
    let leaves = items
        .iter()
        .map(|item| stats_of(item).map(|s| s.pending_counter(class)))
        .collect();
    fan_out(items, Some((class, leaves)), f)
}

/// Runs `f` on each item, each on a scoped thread of its own (not a pool thread, so work
/// that itself fans out to the pool threads still can: one item per top-level vdev, each
/// fanning its leaves out), carrying this thread's I/O class. Inline, one after the
/// other, for a single item or on a pool thread (which must not wait for queued work).
pub fn on_own_threads<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    if items.len() <= 1 || ON_POOL_THREAD.with(|p| p.get()) {
        return items.into_iter().map(f).collect();
    }
    let (f, scope) = (&f, crate::io_class::scope());
    std::thread::scope(|s| {
        let running: Vec<_> = items
            .into_iter()
            .map(|item| {
                s.spawn(move || {
                    let _class = crate::io_class::set_scope(scope);
                    f(item)
                })
            })
            .collect();
        running
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

/// Counters a queued job of `on_leaf_io` is pending in: its class's (the process's), and
/// per item its leaf's, if metered.
type PendingIn<'s> = Option<(IoClass, Vec<Option<&'s AtomicU64>>)>;

/// `on_io_threads`, counting the queued jobs as pending where `pending` says.
fn fan_out<T: Send, R: Send>(
    items: Vec<T>,
    pending: PendingIn<'_>,
    f: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    if items.len() <= 1 || ON_POOL_THREAD.with(|p| p.get()) {
        return items.into_iter().map(f).collect();
    }
    let n = items.len();
    let mut out: Vec<Option<std::thread::Result<R>>> = (0..n).map(|_| None).collect();
    let latch = Latch {
        left: Mutex::new(n - 1),
        done: Condvar::new(),
    };
    {
        let (f, latch) = (&f, &latch);
        let mut items = items.into_iter();
        let first = items.next().expect("two or more items");
        let (first_slot, other_slots) = out.split_first_mut().expect("two or more slots");
        let q = queue();
        let queued = std::time::Instant::now();
        let scope = crate::io_class::scope();
        let (class, leaves) = match pending {
            Some((class, leaves)) => (Some(&PENDING[class.index()]), leaves),
            None => (None, Vec::new()),
        };
        {
            let mut jobs = q.jobs.lock().unwrap_or_else(|p| p.into_inner());
            for (i, (slot, item)) in other_slots.iter_mut().zip(items).enumerate() {
                // Item 0 runs on the caller: the queued ones are items 1…
                let leaf = leaves.get(i + 1).copied().flatten();
                let waiting = [class, leaf];
                for w in waiting.iter().flatten() {
                    w.fetch_add(1, Ordering::Relaxed);
                }
                let job: Box<dyn FnOnce() + Send + '_> = Box::new(move || {
                    for w in waiting.iter().flatten() {
                        w.fetch_sub(1, Ordering::Relaxed);
                    }
                    *slot = Some(catch_unwind(AssertUnwindSafe(|| {
                        as_job(queued, scope, || f(item))
                    })));
                    latch.count_down();
                });
                // SAFETY: the job borrows `f`, `latch` and its `slot`, which all live until
                // this function returns. It returns only after `latch.wait()`, and every job
                // counts the latch down as its very last step (a panic in `f` is caught
                // first), so no job runs or holds a borrow past that point.
                let job: Job =
                    unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Job>(job) };
                jobs.push_back(job);
            }
        }
        // One wakeup per job queued: waking all 32 threads for a small batch made each of
        // them take the lock and sleep again (most of a txg sync of many small files went
        // into those wakeups). A thread re-checks the queue before it sleeps, so a job
        // queued while every thread is busy is taken when one finishes.
        for _ in 1..n {
            q.ready.notify_one();
        }
        *first_slot = Some(catch_unwind(AssertUnwindSafe(|| {
            as_job(queued, scope, || f(first))
        })));
        latch.wait();
    }
    out.into_iter()
        .map(|r| match r.expect("every job ran") {
            Ok(v) => v,
            Err(panic) => resume_unwind(panic),
        })
        .collect()
}

/// Maps `f` over `items` in two halves, one on the caller and one on a kept thread (below
/// `min_items`, all on the caller).
pub fn split_cpu<T: Send, R: Send>(
    items: Vec<T>,
    min_items: usize,
    f: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    if items.len() < min_items.max(2) {
        return items.into_iter().map(f).collect();
    }
    let mut first = items;
    let second = first.split_off(first.len().div_ceil(2));
    let halves = on_io_threads(vec![first, second], |half| {
        half.into_iter().map(&f).collect::<Vec<_>>()
    });
    halves.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_order_and_borrows_work() {
        let data: Vec<u64> = (0..100).collect();
        let sums = on_io_threads((0..10).collect(), |i: usize| {
            data[i * 10..(i + 1) * 10].iter().sum::<u64>()
        });
        let want: Vec<u64> = (0..10)
            .map(|i| (i * 10..(i + 1) * 10).sum::<u64>())
            .collect();
        assert_eq!(sums, want);
        let doubled = split_cpu((0..1000).collect(), 4, |x: u32| x * 2);
        assert_eq!(doubled, (0..1000).map(|x| x * 2).collect::<Vec<_>>());
    }

    #[test]
    fn a_panicking_job_is_raised_after_the_others_finished() {
        let finished = std::sync::atomic::AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            on_io_threads((0..8).collect(), |i: usize| {
                if i == 5 {
                    panic!("job {i}");
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
                finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            })
        }));
        assert!(r.is_err());
        assert_eq!(finished.load(std::sync::atomic::Ordering::SeqCst), 7);
    }

    #[test]
    fn nested_fan_out_from_a_pool_thread_does_not_deadlock() {
        let totals = on_io_threads((0..64).collect(), |i: u64| {
            on_io_threads((0..4).collect(), |j: u64| i * j)
                .iter()
                .sum::<u64>()
        });
        assert_eq!(totals[3], 3 * 6);
    }
}
