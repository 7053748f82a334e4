//! A leaf's counters of one I/O class (`crate::io_class`): what `iostat -q` (requests in
//! the device) and `-w` (queue and disk wait histograms per class) show. Part of
//! `IoStats`; like its other counters they are atomics only, and only grow (but `active`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::io_class::{IoClass, CLASSES};
use crate::latency_hist::{bucket_of, zip_hist, HIST_BUCKETS};

/// Live counters of one class of one leaf.
#[derive(Debug)]
pub(crate) struct ClassStats {
    ops: AtomicU64,
    bytes: AtomicU64,
    disk_ns: AtomicU64,
    queue_ns: AtomicU64,
    /// Requests of the class inside the device right now.
    pub(crate) active: AtomicU64,
    /// Jobs of the class for this leaf queued for an I/O thread and not started yet.
    pub(crate) pending: AtomicU64,
    disk_hist: [AtomicU64; HIST_BUCKETS],
    queue_hist: [AtomicU64; HIST_BUCKETS],
}

/// A snapshot of one class's counters (or a sum or difference of them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassCounts {
    pub ops: u64,
    pub bytes: u64,
    /// Time in the device and waiting before it (sums over requests).
    pub disk_ns: u64,
    pub queue_ns: u64,
    /// Requests inside the device when the snapshot was taken (not summed over time).
    pub active: u64,
    /// Jobs for the leaf waiting for an I/O thread when the snapshot was taken (`iostat
    /// -q`'s pend; not summed over time).
    #[serde(default)]
    pub pending: u64,
    pub disk_hist: Vec<u64>,
    /// Requests issued outside I/O thread jobs count as 0 ns here (the first bucket).
    pub queue_hist: Vec<u64>,
}

/// Per-class snapshots by class (`sync_read`, … in `--json`).
pub type ClassMap = BTreeMap<IoClass, ClassCounts>;

impl Default for ClassStats {
    fn default() -> Self {
        ClassStats {
            ops: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            disk_ns: AtomicU64::new(0),
            queue_ns: AtomicU64::new(0),
            active: AtomicU64::new(0),
            pending: AtomicU64::new(0),
            disk_hist: std::array::from_fn(|_| AtomicU64::new(0)),
            queue_hist: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl ClassStats {
    /// One finished request: `disk_ns` in the device after `queue_ns` waiting (0 for one
    /// issued by its caller's own thread: it waited for nothing, and counting it keeps
    /// every histogram's sum equal to `ops`, as zpool's are).
    pub(crate) fn record(&self, bytes: u64, disk_ns: u64, queue_ns: u64) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.disk_ns.fetch_add(disk_ns, Ordering::Relaxed);
        self.disk_hist[bucket_of(disk_ns)].fetch_add(1, Ordering::Relaxed);
        self.queue_ns.fetch_add(queue_ns, Ordering::Relaxed);
        self.queue_hist[bucket_of(queue_ns)].fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> ClassCounts {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ClassCounts {
            ops: get(&self.ops),
            bytes: get(&self.bytes),
            disk_ns: get(&self.disk_ns),
            queue_ns: get(&self.queue_ns),
            active: get(&self.active),
            pending: get(&self.pending),
            disk_hist: self.disk_hist.iter().map(get).collect(),
            queue_hist: self.queue_hist.iter().map(get).collect(),
        }
    }
}

/// Snapshots of every class of a leaf.
pub(crate) fn snapshot_all(classes: &[ClassStats; CLASSES]) -> ClassMap {
    IoClass::ALL
        .iter()
        .map(|&c| (c, classes[c.index()].snapshot()))
        .collect()
}

/// `a` and `b` combined class by class with `f` (a class missing on one side — an older
/// pool record has none — counts as zeros); `active` and `pending` are `a`'s plus `b`'s if
/// `add_active`, else `a`'s (a difference covers an interval, and what is queued now is
/// `a`'s).
pub(crate) fn zip_classes(
    a: &ClassMap,
    b: &ClassMap,
    add_active: bool,
    f: impl Fn(u64, u64) -> u64 + Copy,
) -> ClassMap {
    let zero = ClassCounts::default();
    let keys: std::collections::BTreeSet<IoClass> = a.keys().chain(b.keys()).copied().collect();
    keys.into_iter()
        .map(|k| {
            let (x, y) = (a.get(&k).unwrap_or(&zero), b.get(&k).unwrap_or(&zero));
            let counts = ClassCounts {
                ops: f(x.ops, y.ops),
                bytes: f(x.bytes, y.bytes),
                disk_ns: f(x.disk_ns, y.disk_ns),
                queue_ns: f(x.queue_ns, y.queue_ns),
                active: x.active + if add_active { y.active } else { 0 },
                pending: x.pending + if add_active { y.pending } else { 0 },
                disk_hist: zip_hist(&x.disk_hist, &y.disk_hist, f),
                queue_hist: zip_hist(&x.queue_hist, &y.queue_hist, f),
            };
            (k, counts)
        })
        .collect()
}
