//! I/O statistics of a leaf, for `cairn iostat`: operations, bytes, time spent in the
//! device, requests in flight, and latency histograms — counted by `MeteredLeaf`, a
//! wrapper (`crate::metered`) every child of a top-level vdev puts around its device (`Child::new`), so every
//! request (data, labels, flushes) is counted once, whatever issued it.
//!
//! ```text
//!  Child::new(leaf) ──► MeteredLeaf { inner: leaf, stats: Arc<IoStats> }
//!                          read_at / read_vectored_at   → ops[R] bytes[R] wait_ns[R] hist[R]
//!                          write_at / write_vectored_at → ops[W] bytes[W] wait_ns[W] hist[W]
//!                          (both)                       → queue_ns: time since the
//!                                                         request was ready to go
//!                          flush                        → flushes
//!                          in_flight: requests inside the device right now
//!                          total_hist[R/W]: queue + disk wait (iostat -w total_wait)
//!                          classes[c]: the same per I/O class (`crate::class_stats`),
//!                                      c = io_class::for_request(dir) (iostat -q, -w)
//! ```
//! The latency histogram has power-of-two buckets: bucket `i` counts requests that took
//! [2^i, 2^(i+1)) ns (bucket 0 also takes 0 ns), as `zpool iostat -w` shows them.
//! Counters only grow; `IoCounts` snapshots subtract to give an interval's figures.

use std::ops::{Add, Sub};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::class_stats::{snapshot_all, zip_classes, ClassMap, ClassStats};
use crate::io_class::{IoClass, CLASSES};
use crate::latency_hist::zip_hist;

pub use crate::latency_hist::{bucket_of, HIST_BUCKETS};

/// Only requests this small (and flushes) move `IoStats::recent_ns`: a large one's time
/// is mostly its transfer (a 1 MiB write into tmpfs takes ~200 µs), which says nothing of
/// how long a small request waits for the device.
const LATENCY_SAMPLE_MAX_BYTES: u64 = 64 << 10;

pub(crate) const READ: usize = 0;
pub(crate) const WRITE: usize = 1;

/// Live counters of one leaf.
#[derive(Debug)]
pub struct IoStats {
    ops: [AtomicU64; 2],
    bytes: [AtomicU64; 2],
    wait_ns: [AtomicU64; 2],
    queue_ns: [AtomicU64; 2],
    pub(crate) flushes: AtomicU64,
    pub(crate) in_flight: AtomicU64,
    /// How long a small request (read or write of at most `LATENCY_SAMPLE_MAX_BYTES`, or a
    /// flush) takes in this device lately: each one moves it an eighth of the way to its
    /// own time (TCP's smoothed round-trip time,
    /// RFC 6298). Not in `IoCounts`: it decides how requests are issued
    /// (`TopVdev::fans_out`), it is not a statistic.
    recent_ns: AtomicU64,
    hist: [[AtomicU64; HIST_BUCKETS]; 2],
    total_hist: [[AtomicU64; HIST_BUCKETS]; 2],
    pub(crate) classes: [ClassStats; CLASSES],
}

/// A snapshot of `IoStats` (or a sum or difference of them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoCounts {
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Time requests spent inside the device (sum over requests).
    pub read_wait_ns: u64,
    pub write_wait_ns: u64,
    /// Time requests waited before they went to the device (sum over requests): for an
    /// I/O thread, or behind the earlier requests of the same job (`threads::queue_wait`).
    #[serde(default)]
    pub read_queue_ns: u64,
    #[serde(default)]
    pub write_queue_ns: u64,
    pub flushes: u64,
    /// Requests inside the device when the snapshot was taken (not summed over time).
    #[serde(default)]
    pub in_flight: u64,
    #[serde(default)]
    pub read_hist: Vec<u64>,
    #[serde(default)]
    pub write_hist: Vec<u64>,
    /// Histograms of queue + disk wait (zpool's total_wait).
    #[serde(default)]
    pub read_total_hist: Vec<u64>,
    #[serde(default)]
    pub write_total_hist: Vec<u64>,
    /// The same figures per I/O class (none in records from before classes were counted).
    #[serde(default)]
    pub classes: ClassMap,
}

impl Default for IoStats {
    fn default() -> Self {
        IoStats {
            ops: Default::default(),
            bytes: Default::default(),
            wait_ns: Default::default(),
            queue_ns: Default::default(),
            flushes: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            recent_ns: AtomicU64::new(0),
            hist: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            total_hist: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            classes: Default::default(),
        }
    }
}

impl IoStats {
    /// A request took `ns` in the device: the recent time moves an eighth towards it.
    /// (Two requests finishing at once may each apply their step to the same old value,
    /// and one step is lost: an estimate, not a count.)
    pub(crate) fn note_latency(&self, ns: u64) {
        let old = self.recent_ns.load(Ordering::Relaxed);
        let new = old - old / 8 + ns / 8;
        self.recent_ns.store(new, Ordering::Relaxed);
    }

    /// How long a request takes in this device lately (0 before the first).
    pub(crate) fn recent_latency_ns(&self) -> u64 {
        self.recent_ns.load(Ordering::Relaxed)
    }

    /// The counter of `class`'s jobs queued for this leaf (`threads::on_leaf_io`).
    pub(crate) fn pending_counter(&self, class: IoClass) -> &AtomicU64 {
        &self.classes[class.index()].pending
    }

    /// One finished request of `class` in direction `dir`, started in the device at
    /// `started` after waiting `queued` (if it was issued from an I/O thread job).
    pub(crate) fn record(
        &self,
        dir: usize,
        class: IoClass,
        bytes: u64,
        started: Instant,
        queued: Option<Duration>,
    ) {
        let nanos = |d: Duration| d.as_nanos().min(u128::from(u64::MAX)) as u64;
        let ns = nanos(started.elapsed());
        let queue_ns = queued.map(nanos);
        if let Some(q) = queue_ns {
            self.queue_ns[dir].fetch_add(q, Ordering::Relaxed);
        }
        self.ops[dir].fetch_add(1, Ordering::Relaxed);
        self.bytes[dir].fetch_add(bytes, Ordering::Relaxed);
        self.wait_ns[dir].fetch_add(ns, Ordering::Relaxed);
        if bytes <= LATENCY_SAMPLE_MAX_BYTES {
            self.note_latency(ns);
        }
        self.hist[dir][bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        let queue_ns = queue_ns.unwrap_or(0);
        self.total_hist[dir][bucket_of(ns.saturating_add(queue_ns))]
            .fetch_add(1, Ordering::Relaxed);
        self.classes[class.index()].record(bytes, ns, queue_ns);
    }

    pub fn snapshot(&self) -> IoCounts {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IoCounts {
            read_ops: get(&self.ops[READ]),
            write_ops: get(&self.ops[WRITE]),
            read_bytes: get(&self.bytes[READ]),
            write_bytes: get(&self.bytes[WRITE]),
            read_wait_ns: get(&self.wait_ns[READ]),
            write_wait_ns: get(&self.wait_ns[WRITE]),
            read_queue_ns: get(&self.queue_ns[READ]),
            write_queue_ns: get(&self.queue_ns[WRITE]),
            flushes: get(&self.flushes),
            in_flight: get(&self.in_flight),
            read_hist: self.hist[READ].iter().map(get).collect(),
            write_hist: self.hist[WRITE].iter().map(get).collect(),
            read_total_hist: self.total_hist[READ].iter().map(get).collect(),
            write_total_hist: self.total_hist[WRITE].iter().map(get).collect(),
            classes: snapshot_all(&self.classes),
        }
    }
}

impl Add for &IoCounts {
    type Output = IoCounts;
    fn add(self, o: &IoCounts) -> IoCounts {
        IoCounts {
            read_ops: self.read_ops + o.read_ops,
            write_ops: self.write_ops + o.write_ops,
            read_bytes: self.read_bytes + o.read_bytes,
            write_bytes: self.write_bytes + o.write_bytes,
            read_wait_ns: self.read_wait_ns + o.read_wait_ns,
            write_wait_ns: self.write_wait_ns + o.write_wait_ns,
            read_queue_ns: self.read_queue_ns + o.read_queue_ns,
            write_queue_ns: self.write_queue_ns + o.write_queue_ns,
            flushes: self.flushes + o.flushes,
            in_flight: self.in_flight + o.in_flight,
            read_hist: zip_hist(&self.read_hist, &o.read_hist, |a, b| a + b),
            write_hist: zip_hist(&self.write_hist, &o.write_hist, |a, b| a + b),
            read_total_hist: zip_hist(&self.read_total_hist, &o.read_total_hist, |a, b| a + b),
            write_total_hist: zip_hist(&self.write_total_hist, &o.write_total_hist, |a, b| a + b),
            classes: zip_classes(&self.classes, &o.classes, true, |a, b| a + b),
        }
    }
}

impl Sub for &IoCounts {
    type Output = IoCounts;
    /// The interval between two snapshots (`self` the later); in flight is the later's.
    fn sub(self, o: &IoCounts) -> IoCounts {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        IoCounts {
            read_ops: d(self.read_ops, o.read_ops),
            write_ops: d(self.write_ops, o.write_ops),
            read_bytes: d(self.read_bytes, o.read_bytes),
            write_bytes: d(self.write_bytes, o.write_bytes),
            read_wait_ns: d(self.read_wait_ns, o.read_wait_ns),
            write_wait_ns: d(self.write_wait_ns, o.write_wait_ns),
            read_queue_ns: d(self.read_queue_ns, o.read_queue_ns),
            write_queue_ns: d(self.write_queue_ns, o.write_queue_ns),
            flushes: d(self.flushes, o.flushes),
            in_flight: self.in_flight,
            read_hist: zip_hist(&self.read_hist, &o.read_hist, d),
            write_hist: zip_hist(&self.write_hist, &o.write_hist, d),
            read_total_hist: zip_hist(&self.read_total_hist, &o.read_total_hist, d),
            write_total_hist: zip_hist(&self.write_total_hist, &o.write_total_hist, d),
            classes: zip_classes(&self.classes, &o.classes, false, d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_from_before_classes_loads_and_adds() {
        // The fields an older pool record holds: no total_wait histograms, no classes.
        let old = r#"{"read_ops":2,"write_ops":1,"read_bytes":8192,"write_bytes":4096,
            "read_wait_ns":10,"write_wait_ns":20,"flushes":0}"#;
        let base: IoCounts = serde_json::from_str(old).unwrap();
        assert!(base.classes.is_empty() && base.read_total_hist.is_empty());
        let stats = IoStats::default();
        stats.record(READ, IoClass::Scrub, 4096, Instant::now(), None);
        let now = &base + &stats.snapshot();
        assert_eq!(now.read_ops, 3);
        assert_eq!(now.classes[&IoClass::Scrub].ops, 1);
        assert_eq!(now.classes[&IoClass::SyncRead].ops, 0);
        assert_eq!((&now - &base).classes[&IoClass::Scrub].bytes, 4096);
    }
}
