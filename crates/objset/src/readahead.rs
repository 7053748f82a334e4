//! Sequential read-ahead for pools on rotating disks (ZFS's zfetch, simplified), fetched
//! in the background.
//!
//! ```text
//!  reads of one object:   [0, 1M)   [1M, 2M)   [2M, 3M)   [3M, 4M)  …
//!  stream                 new       continues  continues  continues   (starts at `next`)
//!  fetched ahead up to               2M+1M=3M   3M (wait)  4M+2M=6M   (`ahead`)
//!  window                            1 MiB      1 MiB      2 MiB … up to `max` (8 MiB)
//! ```
//! A read that continues a stream and finds less than half a window fetched beyond its
//! end asks for the blocks from `ahead` to its end plus a window. The reading thread
//! queues them (a `Prefetch`) after its own blocks are read and returns; the prefetch
//! thread (`StoreCore::prefetch_worker`) reads them into the block cache in one batch (one
//! request per disk for the whole window, where a synchronous reader would otherwise wait
//! a rotation per call on every disk). The window doubles at each refill. Only pools with
//! a rotating leaf use it (the store passes `max` 0 otherwise). Best effort: a block that
//! fails to read is left to the read that needs it (which reconstructs and repairs); dirty
//! blocks and holes are skipped.
//!
//! ```text
//!  reader ──note_read──► stream.fetching = [from, to) ──queue──► prefetch thread
//!     │                                                              │ read gate (shared)
//!     │ a later read of [from, to) waits (`wait_for_fetch`)           │ read_bps_shared
//!     └──────────────── woken by `landed` ◄──────────────────────────┘ (block cache)
//! ```
//! Rules that keep it correct:
//! - Block pointers are looked up under the state lock while the txg `open_txg` is open.
//!   The tree may stop naming them in that txg's sync, and their space is released at the
//!   start of the sync of `open_txg + 2` (`FREE_DELAY_TXGS`). The prefetch thread reads
//!   only while it holds the read gate shared (no sync can start) and only if the open txg
//!   is still at most `open_txg + 1` (that sync has not started); otherwise it drops the
//!   prefetch. A dropped or failed prefetch costs nothing but the reads it would have saved.
//! - Every prefetch queued ends in `landed` (read, dropped or shut down), which clears the
//!   stream's `fetching` and wakes the waiters: no reader waits for ever.
//! - A reader waits only before it takes the state lock and holds no lock while waiting;
//!   the prefetch thread takes the read gate and never the state lock.
//! - A reader that finds the range still fetching waits rather than reading it twice (on
//!   a disk the second read would queue behind the first).

use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};

use cairn_pool::io::bp::BlockPointer;

/// Objects followed at once; past this the table starts afresh.
const MAX_STREAMS: usize = 256;
/// The first window of a stream.
const FIRST_WINDOW: u64 = 1 << 20;
/// How far before or after a stream's next byte a read may start and still continue it.
const REORDER: u64 = 2 << 20;
/// Prefetches of one stream queued or being read at once: the next one waits at the disks
/// while the one before lands, so they never idle between two.
const MAX_IN_FLIGHT: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stream {
    /// Where a read continuing the stream starts.
    next: u64,
    /// Bytes fetched ahead up to here.
    ahead: u64,
    window: u64,
    /// Byte ranges queued or being read by the prefetch thread.
    fetching: [Option<(u64, u64)>; MAX_IN_FLIGHT],
}

/// Blocks of one object to read into the block cache.
#[derive(Debug)]
pub(crate) struct Prefetch {
    pub object: u64,
    /// The byte range they cover (`Stream::fetching`).
    pub range: (u64, u64),
    pub bps: Vec<BlockPointer>,
    /// The open txg when they were looked up.
    pub open_txg: u64,
}

#[derive(Debug, Default)]
struct Inner {
    streams: HashMap<u64, Stream>,
    queue: VecDeque<Prefetch>,
    /// Set by `shut_down`: nothing more is queued or fetched.
    stopped: bool,
}

/// The streams of a store and its prefetch queue.
#[derive(Debug, Default)]
pub(crate) struct ReadAhead {
    /// Largest window in bytes; 0 turns read-ahead off.
    max: u64,
    inner: Mutex<Inner>,
    /// Signalled when a prefetch is queued, lands, or the store stops.
    changed: Condvar,
}

impl ReadAhead {
    pub(crate) fn new(max: u64) -> ReadAhead {
        ReadAhead {
            max,
            ..Default::default()
        }
    }

    /// Whether the store fetches ahead at all (and so runs a prefetch thread).
    pub(crate) fn enabled(&self) -> bool {
        self.max > 0
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a read of `len` bytes at `offset` of `object` (`size` bytes long); the
    /// byte range to fetch ahead, if any. That range is marked fetching: the caller must
    /// pass it to `queue` or `cancel`.
    pub(crate) fn note_read(
        &self,
        object: u64,
        offset: u64,
        len: u64,
        size: u64,
    ) -> Option<(u64, u64)> {
        if self.max == 0 || len == 0 {
            return None;
        }
        let end = offset.saturating_add(len);
        let mut inner = self.lock();
        let streams = &mut inner.streams;
        // (Requests of one stream may arrive a little out of order: a mount's kernel
        // read-ahead sends several at once, served by several threads.)
        let continues = |s: &Stream| offset.abs_diff(s.next) <= REORDER;
        let Some(mut s) = streams.get(&object).copied().filter(continues) else {
            if streams.len() >= MAX_STREAMS && !streams.contains_key(&object) {
                streams.clear();
            }
            let fresh = Stream {
                next: end,
                ahead: end,
                window: FIRST_WINDOW.min(self.max),
                fetching: [None; MAX_IN_FLIGHT],
            };
            let replaced = streams.insert(object, fresh);
            drop(inner);
            // (Readers waiting for a fetch of a stream forgotten here stop waiting.)
            if replaced.is_some_and(|s| s.fetching.iter().any(Option::is_some)) {
                self.changed.notify_all();
            }
            return None;
        };
        s.next = s.next.max(end);
        s.ahead = s.ahead.max(end);
        let mut fetch = None;
        let slot = s.fetching.iter().position(Option::is_none);
        if let Some(slot) = slot.filter(|_| s.ahead - end < s.window / 2 && s.ahead < size) {
            let to = end.saturating_add(s.window).min(size);
            fetch = (to > s.ahead).then_some((s.ahead, to));
            s.ahead = to;
            s.window = s.window.saturating_mul(2).min(self.max);
            s.fetching[slot] = fetch;
        }
        streams.insert(object, s);
        fetch
    }

    /// Hands a range `note_read` returned to the prefetch thread.
    pub(crate) fn queue(&self, job: Prefetch) {
        let mut inner = self.lock();
        if inner.stopped {
            drop(inner);
            return self.landed(&job);
        }
        inner.queue.push_back(job);
        drop(inner);
        self.changed.notify_all();
    }

    /// Gives up a range `note_read` returned and that will not be queued, or one the
    /// prefetch thread is done with (read, dropped): readers waiting for it go on.
    pub(crate) fn cancel(&self, object: u64, range: (u64, u64)) {
        let mut inner = self.lock();
        if let Some(s) = inner.streams.get_mut(&object) {
            for f in s.fetching.iter_mut().filter(|f| **f == Some(range)) {
                *f = None;
            }
        }
        drop(inner);
        self.changed.notify_all();
    }

    /// Called by the prefetch thread when it is done with `job`.
    pub(crate) fn landed(&self, job: &Prefetch) {
        self.cancel(job.object, job.range);
    }

    /// Waits while a prefetch of part of `[offset, offset + len)` of `object` is queued or
    /// being read (call without holding any other lock).
    pub(crate) fn wait_for_fetch(&self, object: u64, offset: u64, len: u64) {
        if self.max == 0 {
            return;
        }
        let end = offset.saturating_add(len);
        let mut inner = self.lock();
        let overlaps = |inner: &Inner| {
            let fetching = inner.streams.get(&object).map(|s| s.fetching);
            fetching
                .iter()
                .flatten()
                .flatten()
                .any(|&(from, to)| from < end && offset < to)
        };
        while overlaps(&inner) {
            inner = self.changed.wait(inner).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The prefetch thread's next job, waiting for one; `None` once shut down.
    pub(crate) fn next_job(&self) -> Option<Prefetch> {
        let mut inner = self.lock();
        loop {
            if inner.stopped {
                return None;
            }
            if let Some(job) = inner.queue.pop_front() {
                return Some(job);
            }
            inner = self.changed.wait(inner).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Stops the prefetch thread: queued prefetches are dropped and nobody waits for them.
    pub(crate) fn shut_down(&self) {
        let mut inner = self.lock();
        inner.stopped = true;
        inner.queue.clear();
        for s in inner.streams.values_mut() {
            s.fetching = [None; MAX_IN_FLIGHT];
        }
        drop(inner);
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    const MIB: u64 = 1 << 20;

    /// `note_read`, and the fetch it asks for landing at once.
    fn read(ra: &ReadAhead, object: u64, offset: u64, len: u64, size: u64) -> Option<(u64, u64)> {
        let fetch = ra.note_read(object, offset, len, size);
        if let Some(range) = fetch {
            ra.cancel(object, range);
        }
        fetch
    }

    #[test]
    fn a_stream_fetches_ahead_in_growing_windows_up_to_the_max() {
        let ra = ReadAhead::new(4 * MIB);
        let size = 100 * MIB;
        assert_eq!(read(&ra, 7, 0, MIB, size), None, "one read is no stream");
        assert_eq!(read(&ra, 7, MIB, MIB, size), Some((2 * MIB, 3 * MIB)));
        assert_eq!(read(&ra, 7, 2 * MIB, MIB, size), Some((3 * MIB, 5 * MIB)));
        // 1 MiB ahead of 4M is less than half the 4 MiB window: refilled to 4M + 4M.
        assert_eq!(read(&ra, 7, 3 * MIB, MIB, size), Some((5 * MIB, 8 * MIB)));
        assert_eq!(read(&ra, 7, 4 * MIB, MIB, size), None, "3 MiB ahead");
        assert_eq!(read(&ra, 7, 5 * MIB, MIB, size), None, "2 MiB ahead");
        let refill = read(&ra, 7, 6 * MIB, MIB, size);
        assert_eq!(
            refill,
            Some((8 * MIB, 11 * MIB)),
            "the window stays at the max"
        );
        assert_eq!(read(&ra, 7, 7 * MIB, MIB, size), None);
    }

    #[test]
    fn a_jump_starts_a_new_stream_and_nothing_is_fetched_past_the_end() {
        let ra = ReadAhead::new(8 * MIB);
        read(&ra, 1, 0, MIB, 10 * MIB);
        assert_eq!(read(&ra, 1, 5 * MIB, MIB, 10 * MIB), None, "a jump");
        assert_eq!(
            read(&ra, 1, 6 * MIB, MIB, 10 * MIB),
            Some((7 * MIB, 8 * MIB))
        );
        assert_eq!(read(&ra, 1, 7 * MIB, MIB, 8 * MIB), None, "the end");
        let off = ReadAhead::new(0);
        off.note_read(2, 0, MIB, 10 * MIB);
        assert_eq!(off.note_read(2, MIB, MIB, 10 * MIB), None, "max 0 is off");
    }

    #[test]
    fn reads_a_little_out_of_order_continue_the_stream() {
        let ra = ReadAhead::new(8 * MIB);
        let size = 100 * MIB;
        read(&ra, 4, 0, MIB, size);
        // Two threads serve a mount's requests: [2M, 3M) may come before [1M, 2M).
        assert_eq!(read(&ra, 4, 2 * MIB, MIB, size), Some((3 * MIB, 4 * MIB)));
        assert_eq!(read(&ra, 4, MIB, MIB, size), None, "the stream goes on");
        assert_eq!(read(&ra, 4, 3 * MIB, MIB, size), Some((4 * MIB, 6 * MIB)));
        // Far from it, a read starts a new stream.
        assert_eq!(read(&ra, 4, 40 * MIB, MIB, size), None);
        assert_eq!(
            read(&ra, 4, 41 * MIB, MIB, size),
            Some((42 * MIB, 43 * MIB))
        );
    }

    #[test]
    fn at_most_two_fetches_of_a_stream_are_in_flight() {
        let ra = ReadAhead::new(8 * MIB);
        let size = 100 * MIB;
        ra.note_read(3, 0, MIB, size);
        let first = ra.note_read(3, MIB, MIB, size);
        assert_eq!(first, Some((2 * MIB, 3 * MIB)));
        let second = ra.note_read(3, 2 * MIB, MIB, size);
        assert_eq!(
            second,
            Some((3 * MIB, 5 * MIB)),
            "the next one waits behind it"
        );
        // Half a window or less ahead, but two fetches have not landed.
        assert_eq!(ra.note_read(3, 3 * MIB, MIB, size), None);
        assert_eq!(ra.note_read(3, 4 * MIB, MIB, size), None);
        ra.cancel(3, first.unwrap_or_default());
        // (The read itself covers [5M, 6M); the 4 MiB window follows it.)
        assert_eq!(
            ra.note_read(3, 5 * MIB, MIB, size),
            Some((6 * MIB, 10 * MIB))
        );
    }

    /// Starts a thread that waits for a fetch of `[offset, offset + len)` of object 5.
    fn waiter(
        ra: &Arc<ReadAhead>,
        offset: u64,
        len: u64,
    ) -> (std::thread::JoinHandle<()>, Arc<AtomicBool>) {
        let done = Arc::new(AtomicBool::new(false));
        let (ra, flag) = (Arc::clone(ra), Arc::clone(&done));
        let h = std::thread::spawn(move || {
            ra.wait_for_fetch(5, offset, len);
            flag.store(true, Ordering::SeqCst);
        });
        (h, done)
    }

    #[test]
    fn a_read_of_a_range_being_fetched_waits_until_it_lands() {
        let ra = Arc::new(ReadAhead::new(8 * MIB));
        ra.note_read(5, 0, MIB, 100 * MIB);
        let range = ra.note_read(5, MIB, MIB, 100 * MIB).expect("a fetch");
        // A read elsewhere does not wait.
        ra.wait_for_fetch(5, 0, MIB);
        ra.wait_for_fetch(6, range.0, MIB);
        let (h, done) = waiter(&ra, range.0, 4096);
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !done.load(Ordering::SeqCst),
            "it waits while the fetch is in flight"
        );
        ra.queue(Prefetch {
            object: 5,
            range,
            bps: Vec::new(),
            open_txg: 1,
        });
        let job = ra.next_job().expect("queued");
        assert_eq!(job.range, range);
        assert!(!done.load(Ordering::SeqCst), "taken is not landed");
        ra.landed(&job);
        h.join().expect("waiter");
        assert!(done.load(Ordering::SeqCst));
    }

    #[test]
    fn shutting_down_drops_the_queue_and_frees_the_waiters() {
        let ra = Arc::new(ReadAhead::new(8 * MIB));
        ra.note_read(5, 0, MIB, 100 * MIB);
        let range = ra.note_read(5, MIB, MIB, 100 * MIB).expect("a fetch");
        ra.queue(Prefetch {
            object: 5,
            range,
            bps: Vec::new(),
            open_txg: 1,
        });
        let (h, done) = waiter(&ra, range.0, MIB);
        ra.shut_down();
        h.join().expect("waiter");
        assert!(done.load(Ordering::SeqCst));
        assert!(
            ra.next_job().is_none(),
            "the queue is gone and the thread stops"
        );
    }
}
