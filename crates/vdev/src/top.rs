//! Top-level vdevs (disk, mirror, raidz) and block I/O on them.
//!
//! A block lives at a byte `offset` in a top-level vdev's address space (the pool's allocator
//! hands these out) and is `psize` bytes long, a multiple of the sector size. For a disk or a
//! mirror the block sits at the same place on every child; for RAID-Z the geometry crate's
//! `raidz_map` says which column goes where:
//!
//! ```text
//!   raidz2, width 6, 8 data sectors:     child:  0    1    2    3    4    5
//!                                                P0   Q0   D0   D2   D4   D6
//!                                                P1   Q1   D1   D3   D5   D7
//! ```
//! Reads fetch only data columns; parity is read when a column is missing, fails, or the
//! caller's checksum says the assembled block is wrong (then every combination of up to
//! `parity` columns is tried, as OpenZFS's `vdev_raidz_combrec` does).
//!
//! Mirror reads choose a side with the pool's `readpolicy` (`crate::readpolicy`, the same
//! decision functions the bench lab runs on simulated disks):
//!
//! ```text
//!   read_copies ─► sides' watermarks (no lock held) ─► lock MirrorReads.state:
//!                  set_resync per side, choose, issued(side) ─► unlock ─► read_at
//!                  ─► lock: completed(side) ─► unlock ─► verify, fall back, self-heal
//! ```
//! Batched reads of file and volume data (`read_batch`, crate::batch) ask the policy too,
//! once per run of adjacent blocks (`batch_side`), as for one request of that size.
//! Rules that keep it correct:
//! - The policy only orders the sides; every side is still read through
//!   `Child::readable_for`, so a policy can never make a side serve a block it does not
//!   hold. A side being resilvered is eligible for a read only where the running resilver
//!   already wrote it (`Child::resilvered`, dropped on any failed write to the side), and
//!   only for policies that read from resyncing sides (md, nearest, auto); for the others it
//!   is tried only after every readable side failed, as before.
//! - Unusable sides (offline, faulted, removed, missing) have watermark 0: never chosen.
//! - One small mutex per vdev guards the per-side state (in flight, head position, recent
//!   read ends, centroid, load); it is held only to choose and record, never across I/O,
//!   and no other lock is taken while it is held. Every `issued` is paired with one
//!   `completed`, whatever the I/O's outcome, so in-flight counts return to 0.
//! - The policy itself is an atomic: `set_read_policy` takes effect on the next read.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cairn_geometry::{raidz_map, RaidzMap, VdevShape, LEAF_DATA_START};
use cairn_parity::RaidzParity;

use crate::config::{top_display_name, TopConfig};
use crate::error::VdevError;
use crate::leaf::Leaf;
use crate::readpolicy::{MirrorState, Policy};

/// Per-leaf error counters, as `zpool status` shows them.
#[derive(Debug, Default)]
pub struct LeafStats {
    pub read_errors: AtomicU64,
    pub write_errors: AtomicU64,
    pub checksum_errors: AtomicU64,
}

impl LeafStats {
    pub fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.read_errors.load(Ordering::Relaxed),
            self.write_errors.load(Ordering::Relaxed),
            self.checksum_errors.load(Ordering::Relaxed),
        )
    }
    /// Zeroes the error counters (`cairn clear`).
    pub fn reset(&self) {
        for counter in [&self.read_errors, &self.write_errors, &self.checksum_errors] {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

/// I/O errors (EIO, not checksum mismatches) after which a leaf is FAULTED.
pub const FAULT_AFTER_ERRORS: u64 = 10;

/// A leaf slot in a top-level vdev: the device when it could be opened, and its counters.
#[derive(Debug)]
pub struct Child {
    pub guid: u64,
    pub path: String,
    /// `None` when the device could not be opened (missing, damaged label, wrong pool).
    pub leaf: Option<Arc<dyn Leaf>>,
    /// Why the device is not available, for `status`.
    pub unavailable_reason: Option<String>,
    pub offline: AtomicBool,
    /// The offline lasts until the next import (`offline -t`).
    pub offline_temporary: AtomicBool,
    /// The administrator gave this leaf its slot back from a hot spare: no spare takes
    /// its place again until it is onlined or replaced.
    pub spare_declined: AtomicBool,
    /// Set when the device vanished under I/O (ENXIO/ENODEV): zpool's REMOVED.
    pub removed: AtomicBool,
    /// Set after `FAULT_AFTER_ERRORS` I/O errors: no more I/O goes to the device.
    pub faulted: AtomicBool,
    /// Set while the leaf misses blocks it is being resilvered with: it takes writes, but
    /// reads do not trust it (they reconstruct from the other children instead).
    pub stale: AtomicBool,
    /// A write to this leaf failed since the last txg sync (the txg joins its DTL).
    pub missed_write: AtomicBool,
    /// Txg ranges whose writes this leaf missed (see `dtl`).
    pub dtl: Mutex<Vec<(u64, u64)>>,
    /// Leaf byte ranges `[start, end)` the running resilver has written to this stale leaf:
    /// reads may use the leaf there. Dropped when a write to the leaf fails.
    resilvered: Mutex<Vec<(u64, u64)>>,
    /// I/O errors since the last `clear`, for faulting.
    io_errors: AtomicU64,
    pub stats: LeafStats,
    /// I/O counted before this process opened the leaf (since import, from the state
    /// directory), to which the metered leaf's own counts add.
    pub io_base: Mutex<crate::iostat::IoCounts>,
}

impl Child {
    /// A child over `leaf`, whose requests are counted from now on (`crate::iostat`).
    pub fn new(guid: u64, path: String, leaf: Option<Arc<dyn Leaf>>) -> Child {
        Child {
            guid,
            path,
            leaf: leaf.map(crate::metered::MeteredLeaf::wrap),
            unavailable_reason: None,
            offline: AtomicBool::new(false),
            offline_temporary: AtomicBool::new(false),
            spare_declined: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            faulted: AtomicBool::new(false),
            stale: AtomicBool::new(false),
            missed_write: AtomicBool::new(false),
            dtl: Mutex::new(Vec::new()),
            resilvered: Mutex::new(Vec::new()),
            io_errors: AtomicU64::new(0),
            stats: LeafStats::default(),
            io_base: Mutex::new(Default::default()),
        }
    }

    /// I/O since import: what earlier processes counted and this one's requests.
    pub fn io_counts(&self) -> crate::iostat::IoCounts {
        let base = self
            .io_base
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match self.leaf.as_ref().and_then(|l| l.io_stats()) {
            Some(stats) => &base + &stats.snapshot(),
            None => base,
        }
    }
    /// The device, if it can take writes.
    pub(crate) fn usable(&self) -> Option<&Arc<dyn Leaf>> {
        if self.offline.load(Ordering::Relaxed)
            || self.removed.load(Ordering::Relaxed)
            || self.faulted.load(Ordering::Relaxed)
        {
            return None;
        }
        self.leaf.as_ref()
    }
    /// The device, if reads may trust it (usable and not being resilvered).
    pub(crate) fn readable(&self) -> Option<&Arc<dyn Leaf>> {
        if self.stale.load(Ordering::Relaxed) {
            return None;
        }
        self.usable()
    }

    /// The device, if reads of `len` bytes at `leaf_offset` may use it: readable, or stale
    /// but already resilvered there.
    pub(crate) fn readable_for(&self, leaf_offset: u64, len: u64) -> Option<&Arc<dyn Leaf>> {
        if !self.stale.load(Ordering::Relaxed) {
            return self.usable();
        }
        let ranges = self.resilvered.lock().unwrap_or_else(|p| p.into_inner());
        let i = ranges.partition_point(|r| r.1 <= leaf_offset);
        let covered = ranges
            .get(i)
            .is_some_and(|r| r.0 <= leaf_offset && leaf_offset.saturating_add(len) <= r.1);
        drop(ranges);
        if covered {
            self.usable()
        } else {
            None
        }
    }

    /// Records that current data reached `[start, start + len)` of this leaf: the resilver
    /// wrote it, or a write did while the leaf is stale (it takes every new write, so a
    /// block written since the resilver began is whole on it: reads may use it at once).
    pub(crate) fn note_resilvered(&self, start: u64, len: u64) {
        let mut ranges = self.resilvered.lock().unwrap_or_else(|p| p.into_inner());
        crate::dtl::add_range(&mut ranges, (start, start.saturating_add(len)));
    }

    /// Marks the leaf as missing blocks (it takes writes, reads do not trust it). What an
    /// earlier resilver or write left current on it is forgotten: while it was away (offline,
    /// faulted) its ranges may have been freed and written elsewhere.
    pub fn mark_stale(&self) {
        self.forget_resilvered();
        self.stale.store(true, Ordering::SeqCst);
    }

    /// For a leaf a hot spare stood in for, taking its slot back: while the spare served,
    /// the writes went to the spare and this leaf's DTL stopped growing, so it is widened
    /// to every txg from its first missed one on (everything when none is recorded), and
    /// the leaf is stale until a resilver has copied all of that. Returns the DTL.
    pub fn missed_since_it_failed(&self) -> Vec<(u64, u64)> {
        let mut dtl = self.dtl_ranges();
        let missed_from = crate::dtl::first_txg(&dtl).unwrap_or(0);
        crate::dtl::add_range(&mut dtl, (missed_from, crate::config::DTL_EVERYTHING.1));
        self.set_dtl(dtl.clone());
        self.mark_stale();
        dtl
    }

    /// Forgets what the resilver wrote (it finished, or a write failed).
    pub fn forget_resilvered(&self) {
        self.resilvered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Counts an I/O error; a device that is gone is marked removed so I/O stops going to it,
    /// one that keeps failing is faulted.
    pub(crate) fn note_error(&self, counter: &AtomicU64, err: &std::io::Error) {
        counter.fetch_add(1, Ordering::Relaxed);
        if std::ptr::eq(counter, &self.stats.write_errors) {
            self.missed_write.store(true, Ordering::Relaxed);
            // A block the leaf did not take may sit where the resilver wrote before.
            self.forget_resilvered();
        }
        if matches!(err.raw_os_error(), Some(libc::ENXIO) | Some(libc::ENODEV)) {
            self.removed.store(true, Ordering::Relaxed);
        } else if self.io_errors.fetch_add(1, Ordering::Relaxed) + 1 >= FAULT_AFTER_ERRORS {
            self.faulted.store(true, Ordering::Relaxed);
        }
    }
    /// Whether the device takes writes.
    pub fn is_usable(&self) -> bool {
        self.usable().is_some()
    }
    /// Whether reads may use the device.
    pub fn is_readable(&self) -> bool {
        self.readable().is_some()
    }
    /// Forgets errors and lifts a fault (`cairn clear`).
    pub fn clear_fault(&self) {
        self.io_errors.store(0, Ordering::Relaxed);
        self.faulted.store(false, Ordering::Relaxed);
        self.removed.store(false, Ordering::Relaxed);
    }
    /// The DTL ranges now.
    pub fn dtl_ranges(&self) -> Vec<(u64, u64)> {
        self.dtl.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    /// Replaces the DTL.
    pub fn set_dtl(&self, ranges: Vec<(u64, u64)>) {
        *self.dtl.lock().unwrap_or_else(|p| p.into_inner()) = ranges;
    }
    /// Records that the leaf missed `txg` if it could not take writes or a write failed in
    /// it; returns whether the DTL changed.
    pub fn note_txg_synced(&self, txg: u64) -> bool {
        let missed = self.missed_write.swap(false, Ordering::Relaxed);
        if self.is_usable() && !missed {
            return false;
        }
        let mut dtl = self.dtl.lock().unwrap_or_else(|p| p.into_inner());
        if crate::dtl::contains(&dtl, txg) {
            return false;
        }
        crate::dtl::add_txg(&mut dtl, txg);
        true
    }
}

/// A leaf's place in a top-level vdev: the configured leaf and, once a hot spare stands in
/// for it, the spare (zpool's `spare-N` group).
///
/// ```text
///   raidz2-0
///     d0            slot 0: Slot { leaf: d0, spare: — }
///     spare-1       slot 1: Slot { leaf: d1 (FAULTED), spare: s0 }   I/O goes to s0
///       d1
///       s0
/// ```
/// A slot dereferences to the device that serves it: the spare once one took over, or the
/// device `cairn replace` put in while the pool was in use, else the leaf. Both are put in
/// through a shared reference (`take_spare`, `take_replacement`), so a running pool swaps
/// one in while readers and writers hold the vdev; a reader sees either device, and both
/// are safe (the old one takes no more I/O, the new one is stale until resilvered). A slot
/// takes one of them at most: a spare does not go into a slot with a replacement, nor a
/// replacement into one with a spare (the pool puts both in under one lock).
#[derive(Debug)]
pub struct Slot {
    leaf: Arc<Child>,
    spare: OnceLock<Arc<Child>>,
    replacement: OnceLock<Arc<Child>>,
}

impl Slot {
    /// A slot served by its own leaf.
    pub fn new(leaf: Child) -> Slot {
        Slot::of(Arc::new(leaf))
    }

    /// A slot served by `leaf`, a device another slot (of an older vdev tree) may name
    /// too: its states, DTL and counters stay one, whichever slot I/O goes through.
    pub fn of(leaf: Arc<Child>) -> Slot {
        Slot {
            leaf,
            spare: OnceLock::new(),
            replacement: OnceLock::new(),
        }
    }

    /// A slot of its own leaf, to share between versions of a vdev tree.
    pub fn shared(leaf: Child) -> Arc<Slot> {
        Arc::new(Slot::new(leaf))
    }

    /// A slot where `spare` stands in for the failed `leaf`.
    pub fn with_spare(leaf: Child, spare: Child) -> Slot {
        Slot {
            leaf: Arc::new(leaf),
            spare: OnceLock::from(Arc::new(spare)),
            replacement: OnceLock::new(),
        }
    }

    /// The hot spare standing in for the slot's leaf, if any.
    pub fn spare(&self) -> Option<&Child> {
        self.spare.get().map(|c| &**c)
    }

    /// The failed leaf a hot spare stands in for (`None` when no spare is in).
    pub fn replaced(&self) -> Option<&Child> {
        self.spare.get().map(|_| &*self.leaf)
    }

    /// The failed leaf and the hot spare standing in for it, as handles a slot of a new
    /// vdev tree can take (`Slot::of`), if a spare is in.
    pub fn spare_group(&self) -> Option<(Arc<Child>, Arc<Child>)> {
        let spare = self.spare.get()?;
        Some((self.leaf.clone(), spare.clone()))
    }

    /// The device a replace put in while the pool was in use, if any.
    pub fn replacement(&self) -> Option<&Child> {
        self.replacement.get().map(|c| &**c)
    }

    /// The device serving the slot and the spare standing in for its leaf, if any (a
    /// replaced leaf is dropped: its replacement serves the slot).
    pub fn into_parts(self) -> (Arc<Child>, Option<Arc<Child>>) {
        match self.replacement.into_inner() {
            Some(replacement) => (replacement, None),
            None => (self.leaf, self.spare.into_inner()),
        }
    }

    /// Puts `spare` in to serve the slot from now on; false (and `spare` is dropped) when a
    /// spare or a replacement is already in.
    pub fn take_spare(&self, spare: Child) -> bool {
        self.replacement.get().is_none() && self.spare.set(Arc::new(spare)).is_ok()
    }

    /// Puts `device` in to serve the slot from now on in place of its leaf (`cairn replace`
    /// on a pool in use); false (and `device` is dropped) when a spare or a replacement is
    /// already in.
    pub fn take_replacement(&self, device: Child) -> bool {
        self.spare.get().is_none() && self.replacement.set(Arc::new(device)).is_ok()
    }
}

impl From<Child> for Slot {
    fn from(leaf: Child) -> Slot {
        Slot::new(leaf)
    }
}

impl Deref for Slot {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.replacement
            .get()
            .or(self.spare.get())
            .unwrap_or(&self.leaf)
    }
}

impl Slot {
    /// The device serving the slot, to change in place: `None` when another slot (of an
    /// older vdev tree) shares it.
    pub fn serving_mut(&mut self) -> Option<&mut Child> {
        if let Some(replacement) = self.replacement.get_mut() {
            return Arc::get_mut(replacement);
        }
        match self.spare.get_mut() {
            Some(spare) => Arc::get_mut(spare),
            None => Arc::get_mut(&mut self.leaf),
        }
    }
}

/// The read policy of a mirror and what it knows about each side (see the module comment).
#[derive(Debug)]
struct MirrorReads {
    /// Index into `Policy::ALL`.
    policy: AtomicU8,
    state: Mutex<MirrorState>,
}

impl MirrorReads {
    fn new(children: &[Arc<Slot>]) -> MirrorReads {
        let nonrot: Vec<bool> = children
            .iter()
            .map(|slot| {
                let child: &Child = slot;
                child.leaf.as_ref().is_none_or(|l| l.nonrot())
            })
            .collect();
        MirrorReads {
            policy: AtomicU8::new(policy_index(Policy::default())),
            state: Mutex::new(MirrorState::new(&nonrot)),
        }
    }

    fn policy(&self) -> Policy {
        let i = self.policy.load(Ordering::Relaxed) as usize;
        Policy::ALL.get(i).copied().unwrap_or_default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, MirrorState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Chooses a side for a read of `len` bytes at `leaf_offset` and records it as issued.
    /// `marks[c]` is side c's resync watermark for this read (`DiskView::resync`).
    fn choose(&self, marks: &[Option<u64>], leaf_offset: u64, len: u64) -> Option<usize> {
        let policy = self.policy();
        let mut st = self.state();
        for (c, &m) in marks.iter().enumerate() {
            st.set_resync(c, m);
        }
        st.choose_rotated(policy, leaf_offset, len)
    }
}

fn policy_index(p: Policy) -> u8 {
    Policy::ALL.iter().position(|&q| q == p).unwrap_or(0) as u8
}

/// What happened during one block I/O besides success.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IoReport {
    /// Children (indices) that were unavailable or returned an error.
    pub failed_children: Vec<usize>,
    /// Children whose data did not match the checksum.
    pub checksum_failed_children: Vec<usize>,
    /// Children rewritten with good data (self-heal).
    pub repaired_children: Vec<usize>,
    /// Whether parity reconstruction (or another mirror side) supplied the data.
    pub reconstructed: bool,
    /// Bytes rewritten by self-heal.
    pub repaired_bytes: u64,
}

/// Checks an assembled block (the object store passes its checksum test).
pub type Verifier<'a> = &'a dyn Fn(&[u8]) -> bool;

/// Blocks (and read batches) at least this large issue their columns on parallel
/// threads; smaller ones run on the caller: handing a few KiB to another thread costs
/// more than reading them on fast leaves (a thread wake-up is 10–30 µs on a VM).
pub(crate) const PARALLEL_MIN_BYTES: u64 = 64 << 10;
/// Unless a child's requests take this long lately (`IoStats::recent_latency_ns`): then
/// every request to more than one child goes out side by side, whatever its size (and
/// flushes too), as a thread hand-off is small against the request it overlaps — a
/// disk, an SSD's flush, a remote leaf. Below it (tmpfs, the page cache, a fast NVMe
/// write) small requests stay on the caller.
pub(crate) const SLOW_LEAF_NS: u64 = 100_000;

/// A top-level vdev with its children.
#[derive(Debug)]
pub struct TopVdev {
    pub config: TopConfig,
    /// One slot per configured leaf; each dereferences to the device serving it. Slots are
    /// shared: a pool in use that changes a vdev's shape (attach, detach) builds a new
    /// `TopVdev` over the same slots, so I/O still in flight on the old one updates the
    /// same leaf states and counters.
    pub children: Vec<Arc<Slot>>,
    mirror: MirrorReads,
    parity: &'static RaidzParity,
}

impl TopVdev {
    pub fn new(config: TopConfig, children: Vec<Child>) -> TopVdev {
        TopVdev::from_slots(
            config,
            children
                .into_iter()
                .map(|c| Arc::new(Slot::new(c)))
                .collect(),
        )
    }

    /// A top-level vdev over slots (some may hold a hot spare).
    pub fn from_slots(config: TopConfig, children: Vec<Arc<Slot>>) -> TopVdev {
        assert_eq!(
            config.leaves.len(),
            children.len(),
            "one child per configured leaf"
        );
        TopVdev {
            mirror: MirrorReads::new(&children),
            config,
            children,
            parity: cairn_parity::default_parity(),
        }
    }

    /// The mirror read policy in force (pool property `readpolicy`).
    pub fn read_policy(&self) -> Policy {
        self.mirror.policy()
    }

    /// Sets the mirror read policy; the next read uses it.
    pub fn set_read_policy(&self, policy: Policy) {
        self.mirror
            .policy
            .store(policy_index(policy), Ordering::Relaxed);
    }

    /// What the read policy knows about each side now (in flight, head position, …).
    pub fn read_views(&self) -> Vec<crate::readpolicy::DiskView> {
        self.mirror.state().views().to_vec()
    }

    pub(crate) fn parity(&self) -> &RaidzParity {
        self.parity
    }

    pub fn shape(&self) -> VdevShape {
        self.config.shape
    }
    pub fn ashift(&self) -> u32 {
        self.config.ashift
    }
    pub fn sector(&self) -> u64 {
        1 << self.config.ashift
    }
    /// A separate intent-log device (`TopConfig::log`).
    pub fn is_log(&self) -> bool {
        self.config.log
    }
    /// A placeholder where a log device was removed (`TopConfig::hole`).
    pub fn is_hole(&self) -> bool {
        self.config.hole
    }
    /// `raidz2-0`, `mirror-1`, the leaf's path for a single disk, `hole-N` for a hole.
    pub fn display_name(&self) -> String {
        top_display_name(self.config.shape, self.config.id).unwrap_or_else(|| {
            self.children
                .first()
                .map_or_else(|| format!("hole-{}", self.config.id), |c| c.path.clone())
        })
    }
    /// Bytes a block of `psize` bytes occupies on this vdev.
    pub fn block_asize(&self, psize: u64) -> u64 {
        self.config.shape.block_asize(psize, self.config.ashift)
    }
    /// The I/O counters of child `c`'s device, if metered.
    pub(crate) fn leaf_stats(&self, c: usize) -> Option<&crate::iostat::IoStats> {
        let child: &Child = self.children.get(c)?;
        child.leaf.as_ref()?.io_stats().map(|s| &**s)
    }

    /// Whether requests of `bytes` in all to `jobs` children go out side by side
    /// (`PARALLEL_MIN_BYTES`, `SLOW_LEAF_NS`).
    pub(crate) fn fans_out(&self, bytes: u64, jobs: usize) -> bool {
        jobs > 1 && (bytes >= PARALLEL_MIN_BYTES || self.has_slow_child())
    }

    fn has_slow_child(&self) -> bool {
        (0..self.children.len()).any(|c| {
            self.leaf_stats(c)
                .is_some_and(|s| s.recent_latency_ns() >= SLOW_LEAF_NS)
        })
    }

    /// Number of children reads cannot use (missing, offline, faulted or resilvering).
    pub fn unusable_children(&self) -> usize {
        self.children.iter().filter(|c| !c.is_readable()).count()
    }
    /// Whether every block can still be read (missing children within redundancy).
    pub fn can_serve(&self) -> bool {
        self.unusable_children() <= self.config.shape.redundancy()
    }

    pub(crate) fn check_address(&self, offset: u64, psize: u64) -> Result<(), VdevError> {
        let sector = self.sector();
        let fits = offset
            .checked_add(self.block_asize(psize))
            .is_some_and(|end| end <= self.config.asize);
        if psize == 0 || !psize.is_multiple_of(sector) || !offset.is_multiple_of(sector) || !fits {
            return Err(VdevError::BadBlockAddress {
                vdev: self.display_name(),
                offset,
                psize,
                sector,
            });
        }
        Ok(())
    }

    /// Writes a block (psize = `data.len()`) at `offset`. Succeeds when enough columns or
    /// copies were written to read the block back; failed children are reported.
    pub fn write_block(&self, offset: u64, data: &[u8]) -> Result<IoReport, VdevError> {
        self.check_address(offset, data.len() as u64)?;
        match self.config.shape {
            VdevShape::Raidz { width, parity } => {
                let map = raidz_map(offset, data.len() as u64, width, parity, self.ashift());
                self.write_raidz(&map, data)
            }
            _ => self.write_copies(offset, data),
        }
    }

    /// Reads a block of `out.len()` bytes at `offset`, reconstructing around failed children
    /// and, when `verify` is given, around children that return wrong data.
    pub fn read_block(
        &self,
        offset: u64,
        out: &mut [u8],
        verify: Option<Verifier<'_>>,
    ) -> Result<IoReport, VdevError> {
        self.read_block_as(offset, out, verify, false)
    }

    /// Reads a block that may never have been written, or whose write a crash may have cut:
    /// the intent log's blocks at import, which ZFS too reads speculatively. No checksum
    /// error is charged: when nothing verifies the block is absent, and a block that
    /// verifies only after a repair may be one whose write the crash cut part-way (some
    /// columns or sides written, the others not: the write hole), which is no device's
    /// fault (ZFS reports no checksum error for a speculative read either).
    pub fn read_block_speculative(
        &self,
        offset: u64,
        out: &mut [u8],
        verify: Verifier<'_>,
    ) -> Result<IoReport, VdevError> {
        self.read_block_as(offset, out, Some(verify), true)
    }

    fn read_block_as(
        &self,
        offset: u64,
        out: &mut [u8],
        verify: Option<Verifier<'_>>,
        speculative: bool,
    ) -> Result<IoReport, VdevError> {
        self.check_address(offset, out.len() as u64)?;
        match self.config.shape {
            VdevShape::Raidz { width, parity } => {
                let map = raidz_map(offset, out.len() as u64, width, parity, self.ashift());
                self.read_raidz(&map, offset, out, verify, speculative)
            }
            _ => self.read_copies(offset, out, verify, speculative),
        }
    }

    /// Scrubs a block: reads every copy (mirror) or every column including parity (raidz),
    /// checks the data against `verify` and the parity against the data, rewrites whatever
    /// is wrong, and returns the good data.
    pub fn scrub_block(
        &self,
        offset: u64,
        psize: u64,
        verify: Verifier<'_>,
    ) -> Result<(Vec<u8>, IoReport), VdevError> {
        self.check_address(offset, psize)?;
        let mut out = vec![0u8; psize as usize];
        let report = match self.config.shape {
            VdevShape::Raidz { width, parity } => {
                let map = raidz_map(offset, psize, width, parity, self.ashift());
                self.scrub_raidz(&map, offset, &mut out, verify)?
            }
            _ => self.scrub_copies(offset, &mut out, verify)?,
        };
        Ok((out, report))
    }

    fn scrub_copies(
        &self,
        offset: u64,
        out: &mut [u8],
        verify: Verifier<'_>,
    ) -> Result<IoReport, VdevError> {
        let leaf_offset = LEAF_DATA_START + offset;
        let mut report = IoReport::default();
        let mut good = false;
        let mut buf = vec![0u8; out.len()];
        let mut wrong = Vec::new();
        for (c, child) in self.children.iter().enumerate() {
            let Some(leaf) = child.readable() else {
                report.failed_children.push(c);
                continue;
            };
            match leaf.read_at(&mut buf, leaf_offset) {
                Err(e) => {
                    child.note_error(&child.stats.read_errors, &e);
                    report.failed_children.push(c);
                    wrong.push(c);
                }
                Ok(()) if !verify(&buf) => {
                    child.stats.checksum_errors.fetch_add(1, Ordering::Relaxed);
                    report.checksum_failed_children.push(c);
                    wrong.push(c);
                }
                Ok(()) => {
                    if !good {
                        out.copy_from_slice(&buf);
                        good = true;
                    }
                }
            }
        }
        if !good {
            return Err(VdevError::Unrecoverable {
                vdev: self.display_name(),
                offset,
            });
        }
        report.reconstructed = !wrong.is_empty();
        for c in wrong {
            if let Some(leaf) = self.children[c].usable() {
                if leaf.write_at(out, leaf_offset).is_ok() {
                    report.repaired_children.push(c);
                    report.repaired_bytes += out.len() as u64;
                }
            }
        }
        Ok(report)
    }

    fn scrub_raidz(
        &self,
        map: &RaidzMap,
        offset: u64,
        out: &mut [u8],
        verify: Verifier<'_>,
    ) -> Result<IoReport, VdevError> {
        // Data (with reconstruction and combinatorial repair) as a verified read does it.
        let mut report = self.read_raidz(map, offset, out, Some(verify), false)?;
        // Then the parity: regenerate it from the good data and compare with the disks.
        let mut expected: Vec<Vec<u8>> = map
            .parity_columns()
            .iter()
            .map(|c| vec![0u8; c.size as usize])
            .collect();
        {
            let mut scratch = out.to_vec();
            let mut cols: Vec<&mut [u8]> = expected.iter_mut().map(|b| b.as_mut_slice()).collect();
            cols.extend(split_columns_mut(&mut scratch, map.data_columns()));
            self.parity.generate(map.parity, &mut cols)?;
        }
        for (i, col) in map.parity_columns().iter().enumerate() {
            let child = &self.children[col.child];
            let Some(leaf) = child.readable() else {
                continue;
            };
            let mut on_disk = vec![0u8; col.size as usize];
            let matches = match leaf.read_at(&mut on_disk, LEAF_DATA_START + col.offset) {
                Ok(()) => on_disk == expected[i],
                Err(e) => {
                    child.note_error(&child.stats.read_errors, &e);
                    false
                }
            };
            if !matches {
                child.stats.checksum_errors.fetch_add(1, Ordering::Relaxed);
                report.checksum_failed_children.push(col.child);
                if leaf
                    .write_at(&expected[i], LEAF_DATA_START + col.offset)
                    .is_ok()
                {
                    report.repaired_children.push(col.child);
                    report.repaired_bytes += col.size;
                }
            }
        }
        Ok(report)
    }

    /// Flushes every usable child. A child whose flush fails missed this txg (its error
    /// is counted); the flush fails only when no child could flush.
    pub fn flush(&self) -> Result<(), VdevError> {
        let flush_one = |c: usize| -> Option<Result<(), VdevError>> {
            let child = &self.children[c];
            let leaf = child.usable()?;
            Some(leaf.flush().map_err(|e| {
                child.note_error(&child.stats.write_errors, &e);
                VdevError::io(&child.path, e)
            }))
        };
        let children: Vec<usize> = (0..self.children.len()).collect();
        let results = if self.fans_out(0, children.len()) {
            crate::threads::on_io_threads(children, flush_one)
        } else {
            children.into_iter().map(flush_one).collect()
        };
        let mut flushed = 0;
        let mut last_err = None;
        for r in results.into_iter().flatten() {
            match r {
                Ok(()) => flushed += 1,
                Err(e) => last_err = Some(e),
            }
        }
        match last_err {
            Some(e) if flushed == 0 => Err(e),
            _ => Ok(()),
        }
    }

    /// Resilvers one block onto the `targets` children (which must be marked stale, so the
    /// read rebuilds their part from the others). Returns the bytes written.
    pub fn resilver_block(
        &self,
        offset: u64,
        psize: u64,
        targets: &[usize],
        verify: Verifier<'_>,
    ) -> Result<u64, VdevError> {
        let mut written = 0;
        for (c, at, bytes) in self.rebuild_pieces(offset, psize, targets, verify)? {
            self.write_leaf_piece(c, at, &bytes)?;
            written += bytes.len() as u64;
        }
        Ok(written)
    }

    /// Reads a block from the readable children (verified against the checksum) and
    /// returns the pieces that belong on `targets`: `(child, leaf offset, bytes)`.
    pub fn rebuild_pieces(
        &self,
        offset: u64,
        psize: u64,
        targets: &[usize],
        verify: Verifier<'_>,
    ) -> Result<Vec<(usize, u64, Vec<u8>)>, VdevError> {
        self.check_address(offset, psize)?;
        let mut data = vec![0u8; psize as usize];
        match self.config.shape {
            VdevShape::Raidz { width, parity } => {
                let map = raidz_map(offset, psize, width, parity, self.ashift());
                if !self.read_raidz_one_round(&map, &mut data, verify) {
                    self.read_raidz(&map, offset, &mut data, Some(verify), false)?;
                }
                self.columns_of(&map, &data, targets)
            }
            _ => {
                self.read_copies(offset, &mut data, Some(verify), false)?;
                Ok(targets
                    .iter()
                    .map(|&c| (c, LEAF_DATA_START + offset, data.clone()))
                    .collect())
            }
        }
    }

    /// Reads every readable column (data and parity) at once and rebuilds the others: one
    /// round trip instead of data-then-parity. False when that does not give a block that
    /// verifies (the caller then takes the full reconstruction path).
    fn read_raidz_one_round(&self, map: &RaidzMap, out: &mut [u8], verify: Verifier<'_>) -> bool {
        let p = map.parity;
        let mut parity_bufs: Vec<Vec<u8>> = map
            .parity_columns()
            .iter()
            .map(|c| vec![0u8; c.size as usize])
            .collect();
        let bad: Vec<bool> = {
            let mut jobs: Vec<(usize, u64, &mut [u8])> = map
                .parity_columns()
                .iter()
                .zip(parity_bufs.iter_mut())
                .map(|(col, buf)| (col.child, LEAF_DATA_START + col.offset, buf.as_mut_slice()))
                .collect();
            let data_cols = split_columns_mut(out, map.data_columns());
            jobs.extend(
                map.data_columns()
                    .iter()
                    .zip(data_cols)
                    .map(|(col, buf)| (col.child, LEAF_DATA_START + col.offset, buf)),
            );
            self.issue_reads(jobs)
        };
        let missing: Vec<usize> = (0..bad.len()).filter(|&c| bad[c]).collect();
        if missing.len() > p {
            return false;
        }
        if !missing.is_empty()
            && self
                .reconstruct(map, &mut parity_bufs, out, &missing)
                .is_err()
        {
            return false;
        }
        verify(out)
    }

    /// Writes one rebuilt piece to a child (counting a failure against it).
    pub fn write_leaf_piece(
        &self,
        c: usize,
        leaf_offset: u64,
        bytes: &[u8],
    ) -> Result<(), VdevError> {
        let child = &self.children[c];
        let Some(leaf) = child.usable() else {
            return Err(VdevError::io(
                &child.path,
                std::io::Error::from_raw_os_error(libc::ENXIO),
            ));
        };
        leaf.write_at(bytes, leaf_offset).map_err(|e| {
            child.note_error(&child.stats.write_errors, &e);
            VdevError::io(&child.path, e)
        })
    }

    /// Writes rebuilt pieces that follow each other on a child as one request.
    pub fn write_leaf_run(
        &self,
        c: usize,
        leaf_offset: u64,
        bufs: &[&[u8]],
    ) -> Result<(), VdevError> {
        let child = &self.children[c];
        let Some(leaf) = child.usable() else {
            return Err(VdevError::io(
                &child.path,
                std::io::Error::from_raw_os_error(libc::ENXIO),
            ));
        };
        leaf.write_vectored_at(bufs, leaf_offset).map_err(|e| {
            child.note_error(&child.stats.write_errors, &e);
            VdevError::io(&child.path, e)
        })?;
        child.note_resilvered(leaf_offset, bufs.iter().map(|b| b.len() as u64).sum());
        Ok(())
    }

    /// The columns (parity regenerated) of a block that live on `targets`.
    fn columns_of(
        &self,
        map: &RaidzMap,
        data: &[u8],
        targets: &[usize],
    ) -> Result<Vec<(usize, u64, Vec<u8>)>, VdevError> {
        let mut parity_bufs: Vec<Vec<u8>> = map
            .parity_columns()
            .iter()
            .map(|c| vec![0u8; c.size as usize])
            .collect();
        let mut scratch = data.to_vec();
        {
            let mut cols: Vec<&mut [u8]> =
                parity_bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            cols.extend(split_columns_mut(&mut scratch, map.data_columns()));
            self.parity.generate(map.parity, &mut cols)?;
        }
        let mut out = Vec::new();
        let mut pos = 0usize;
        for (i, col) in map.columns.iter().enumerate() {
            let bytes = if i < map.parity {
                parity_bufs[i].clone()
            } else {
                let b = data[pos..pos + col.size as usize].to_vec();
                pos += col.size as usize;
                b
            };
            if targets.contains(&col.child) {
                out.push((col.child, LEAF_DATA_START + col.offset, bytes));
            }
        }
        Ok(out)
    }

    // ---- disk and mirror -------------------------------------------------------------

    fn write_copies(&self, offset: u64, data: &[u8]) -> Result<IoReport, VdevError> {
        let jobs: Vec<(usize, u64, &[u8])> = (0..self.children.len())
            .map(|c| (c, LEAF_DATA_START + offset, data))
            .collect();
        let len = data.len() as u64;
        for &(c, at, _) in &jobs {
            self.mirror.state().issued(c, at, len, false);
        }
        let failed = self.issue_writes(&jobs, len);
        for &(c, at, _) in &jobs {
            self.mirror.state().completed(c, at);
        }
        if failed.len() == self.children.len() {
            return Err(VdevError::TooManyFailures {
                vdev: self.display_name(),
                offset,
                failed: failed.len(),
                parity: self.config.shape.redundancy(),
            });
        }
        Ok(IoReport {
            failed_children: failed,
            ..IoReport::default()
        })
    }

    /// The sides to try for a read, best first: the policy's choice, then the others.
    fn read_order(&self, leaf_offset: u64, len: u64) -> Vec<usize> {
        let n = self.children.len();
        let marks: Vec<Option<u64>> = (0..n)
            .map(|c| self.side_watermark(c, leaf_offset, len))
            .collect();
        let first = self.mirror.choose(&marks, leaf_offset, len).unwrap_or(0);
        (0..n).map(|i| (first + i) % n).collect()
    }

    /// The side a batched read of `len` bytes (a run of adjacent blocks) of a mirror (or
    /// disk) goes to: the pool's read policy's choice among the sides that hold the whole
    /// run — a side being resilvered too where the resilver already wrote all of it
    /// (`Child::readable_for`, as for single blocks) — recorded as issued (the caller
    /// records the completion). A block this fast path cannot read goes through
    /// `read_block`.
    pub(crate) fn batch_side(&self, leaf_offset: u64, len: u64) -> Option<usize> {
        if self.children.len() == 1 {
            return self.children[0].is_readable().then_some(0);
        }
        let c = self
            .read_order(leaf_offset, len)
            .into_iter()
            .find(|&c| self.children[c].readable_for(leaf_offset, len).is_some())?;
        self.mirror.state().issued(c, leaf_offset, len, true);
        Some(c)
    }

    /// Records the completion of batched mirror reads (`batch_side`'s choices).
    pub(crate) fn batch_reads_completed(&self, issued: &[(usize, u64)]) {
        if issued.is_empty() {
            return;
        }
        let mut state = self.mirror.state();
        for &(c, at) in issued {
            state.completed(c, at);
        }
    }

    /// Side `c`'s resync watermark for a read of `[leaf_offset, leaf_offset + len)`:
    /// `None` for a side that holds everything, above the read for a resilvering side that
    /// already holds it, 0 for one that cannot serve it.
    fn side_watermark(&self, c: usize, leaf_offset: u64, len: u64) -> Option<u64> {
        let child = &self.children[c];
        if child.usable().is_none() {
            return Some(0);
        }
        if !child.stale.load(Ordering::Relaxed) {
            return None;
        }
        match child.readable_for(leaf_offset, len) {
            Some(_) => Some(leaf_offset.saturating_add(len)),
            None => Some(0),
        }
    }

    /// Mirror read: the sides in the read policy's order until one returns data that
    /// verifies; the sides that failed or returned wrong data are then rewritten with it.
    /// `speculative`: sides that did not verify are not charged (`read_block_speculative`).
    fn read_copies(
        &self,
        offset: u64,
        out: &mut [u8],
        verify: Option<Verifier<'_>>,
        speculative: bool,
    ) -> Result<IoReport, VdevError> {
        let leaf_offset = LEAF_DATA_START + offset;
        let mut report = IoReport::default();
        if self
            .read_first_good_copy(leaf_offset, out, verify, &mut report)
            .is_none()
        {
            if !speculative {
                self.charge_checksum_errors(&report);
            }
            return Err(self.no_good_copy(offset, verify.is_some(), &report));
        }
        if !speculative {
            self.charge_checksum_errors(&report);
        }
        // A side that cannot take I/O (missing, offline, faulted) counts as failed, whichever
        // side the policy chose, as a missing raidz column does.
        for (c, child) in self.children.iter().enumerate() {
            if child.usable().is_none() && !report.failed_children.contains(&c) {
                report.failed_children.push(c);
            }
        }
        report.reconstructed =
            !report.failed_children.is_empty() || !report.checksum_failed_children.is_empty();
        self.repair_copies(leaf_offset, out, &mut report);
        Ok(report)
    }

    /// Reads the sides in the read policy's order into `out` until one returns data that
    /// verifies, and returns that side; the sides tried before it are noted in `report` as
    /// failed or as checksum-failed.
    fn read_first_good_copy(
        &self,
        leaf_offset: u64,
        out: &mut [u8],
        verify: Option<Verifier<'_>>,
        report: &mut IoReport,
    ) -> Option<usize> {
        for c in self.read_order(leaf_offset, out.len() as u64) {
            let child = &self.children[c];
            let Some(leaf) = child.readable_for(leaf_offset, out.len() as u64) else {
                report.failed_children.push(c);
                continue;
            };
            self.mirror
                .state()
                .issued(c, leaf_offset, out.len() as u64, true);
            let result = leaf.read_at(out, leaf_offset);
            self.mirror.state().completed(c, leaf_offset);
            if let Err(e) = result {
                child.note_error(&child.stats.read_errors, &e);
                report.failed_children.push(c);
                continue;
            }
            if verify.is_some_and(|v| !v(out)) {
                report.checksum_failed_children.push(c);
                continue;
            }
            return Some(c);
        }
        None
    }

    /// Charges a checksum error to each side that returned data that did not verify.
    fn charge_checksum_errors(&self, report: &IoReport) {
        for &c in &report.checksum_failed_children {
            let child = &self.children[c];
            child.stats.checksum_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The error of a mirror read at `offset` that found no good side: unrecoverable if a
    /// side returned data that did not verify, else too many failures.
    fn no_good_copy(&self, offset: u64, verified: bool, report: &IoReport) -> VdevError {
        if verified && !report.checksum_failed_children.is_empty() {
            VdevError::Unrecoverable {
                vdev: self.display_name(),
                offset,
            }
        } else {
            VdevError::TooManyFailures {
                vdev: self.display_name(),
                offset,
                failed: report.failed_children.len() + report.checksum_failed_children.len(),
                parity: self.config.shape.redundancy(),
            }
        }
    }

    /// Self-heal: writes the good copy `out` over the sides that returned wrong data or an
    /// error (and are readable), noting the ones rewritten in `report`.
    fn repair_copies(&self, leaf_offset: u64, out: &[u8], report: &mut IoReport) {
        let to_repair: Vec<usize> = report
            .checksum_failed_children
            .iter()
            .chain(
                report
                    .failed_children
                    .iter()
                    .filter(|&&c| self.children[c].is_readable()),
            )
            .copied()
            .collect();
        for c in to_repair {
            if let Some(leaf) = self.children[c].usable() {
                if leaf.write_at(out, leaf_offset).is_ok() {
                    report.repaired_children.push(c);
                    report.repaired_bytes += out.len() as u64;
                }
            }
        }
    }

    // ---- RAID-Z ----------------------------------------------------------------------

    fn write_raidz(&self, map: &RaidzMap, data: &[u8]) -> Result<IoReport, VdevError> {
        let parity_len = map.columns[0].size as usize;
        let mut parity_bufs: Vec<Vec<u8>> = vec![vec![0u8; parity_len]; map.parity];
        {
            let mut pcols: Vec<&mut [u8]> =
                parity_bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            let mut dcols: Vec<&[u8]> = Vec::with_capacity(map.data_columns().len());
            let mut rest: &[u8] = data;
            for col in map.data_columns() {
                let (head, tail) = rest.split_at(col.size as usize);
                dcols.push(head);
                rest = tail;
            }
            self.parity.generate_split(map.parity, &mut pcols, &dcols)?;
        }
        let mut jobs: Vec<(usize, u64, &[u8])> = Vec::with_capacity(map.columns.len());
        for (i, col) in map.parity_columns().iter().enumerate() {
            jobs.push((col.child, LEAF_DATA_START + col.offset, &parity_bufs[i]));
        }
        let mut pos = 0usize;
        for col in map.data_columns() {
            let len = col.size as usize;
            jobs.push((
                col.child,
                LEAF_DATA_START + col.offset,
                &data[pos..pos + len],
            ));
            pos += len;
        }
        let failed = self.issue_writes(&jobs, data.len() as u64);
        if failed.len() > map.parity {
            return Err(VdevError::TooManyFailures {
                vdev: self.display_name(),
                offset: map.columns[0].offset,
                failed: failed.len(),
                parity: map.parity,
            });
        }
        Ok(IoReport {
            failed_children: failed,
            ..IoReport::default()
        })
    }

    fn read_raidz(
        &self,
        map: &RaidzMap,
        offset: u64,
        out: &mut [u8],
        verify: Option<Verifier<'_>>,
        speculative: bool,
    ) -> Result<IoReport, VdevError> {
        let ncols = map.columns.len();
        let p = map.parity;
        let mut report = IoReport::default();
        let mut parity_bufs: Vec<Vec<u8>> = Vec::new();
        // bad[c]: column c could not be read.
        let mut bad = vec![false; ncols];
        {
            let mut data_cols = split_columns_mut(out, map.data_columns());
            let jobs: Vec<(usize, u64, &mut [u8])> = map
                .data_columns()
                .iter()
                .zip(data_cols.iter_mut())
                .map(|(col, buf)| (col.child, LEAF_DATA_START + col.offset, &mut **buf))
                .collect();
            for (j, failed) in self.issue_reads(jobs).into_iter().enumerate() {
                bad[p + j] = failed;
            }
        }
        if bad.iter().any(|&b| b) {
            self.read_parity(map, &mut parity_bufs, &mut bad);
            let missing: Vec<usize> = (0..ncols).filter(|&c| bad[c]).collect();
            if missing.len() > p {
                return Err(self.too_many(map, offset, missing.len()));
            }
            self.reconstruct(map, &mut parity_bufs, out, &missing)?;
            report.reconstructed = true;
        }
        for c in (0..ncols).filter(|&c| bad[c]) {
            report.failed_children.push(map.columns[c].child);
        }
        if let Some(verify) = verify {
            if !verify(out) {
                if parity_bufs.is_empty() {
                    self.read_parity(map, &mut parity_bufs, &mut bad);
                }
                let culprits =
                    self.combinatorial_reconstruct(map, &mut parity_bufs, out, &bad, verify);
                let Some(culprits) = culprits else {
                    // No combination verifies: the damage is beyond parity, and which column
                    // is wrong cannot be told — every child of the row gets a checksum error
                    // (as ZFS charges them all), so `status` shows where to look. A
                    // speculative read has found a block that was never written.
                    for col in map.columns.iter().filter(|_| !speculative) {
                        let child = &self.children[col.child];
                        child.stats.checksum_errors.fetch_add(1, Ordering::Relaxed);
                    }
                    return Err(VdevError::Unrecoverable {
                        vdev: self.display_name(),
                        offset,
                    });
                };
                report.reconstructed = true;
                for &c in &culprits {
                    let child = &self.children[map.columns[c].child];
                    if !speculative {
                        child.stats.checksum_errors.fetch_add(1, Ordering::Relaxed);
                    }
                    report.checksum_failed_children.push(map.columns[c].child);
                }
                self.repair_columns(map, &mut parity_bufs, out, &culprits, &mut report);
            }
        }
        // Self-heal columns whose read failed on a device that is still there.
        let errored: Vec<usize> = (0..ncols)
            .filter(|&c| bad[c] && self.children[map.columns[c].child].is_readable())
            .collect();
        if !errored.is_empty() && !parity_bufs.is_empty() {
            self.repair_columns(map, &mut parity_bufs, out, &errored, &mut report);
        }
        Ok(report)
    }

    fn too_many(&self, map: &RaidzMap, offset: u64, failed: usize) -> VdevError {
        VdevError::TooManyFailures {
            vdev: self.display_name(),
            offset,
            failed,
            parity: map.parity,
        }
    }

    /// Reads the parity columns into `bufs` (allocating them), marking failures in `bad`.
    fn read_parity(&self, map: &RaidzMap, bufs: &mut Vec<Vec<u8>>, bad: &mut [bool]) {
        *bufs = map
            .parity_columns()
            .iter()
            .map(|c| vec![0u8; c.size as usize])
            .collect();
        let jobs: Vec<(usize, u64, &mut [u8])> = map
            .parity_columns()
            .iter()
            .zip(bufs.iter_mut())
            .map(|(col, buf)| (col.child, LEAF_DATA_START + col.offset, buf.as_mut_slice()))
            .collect();
        for (c, failed) in self.issue_reads(jobs).into_iter().enumerate() {
            bad[c] = failed;
        }
    }

    /// Rebuilds `missing` columns in place (parity into `parity_bufs`, data into `out`).
    pub(crate) fn reconstruct(
        &self,
        map: &RaidzMap,
        parity_bufs: &mut [Vec<u8>],
        out: &mut [u8],
        missing: &[usize],
    ) -> Result<(), VdevError> {
        let mut cols: Vec<&mut [u8]> = parity_bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
        cols.extend(split_columns_mut(out, map.data_columns()));
        self.parity.reconstruct(map.parity, &mut cols, missing)?;
        Ok(())
    }

    /// Tries every set of up to the remaining redundancy of readable columns as "wrong",
    /// rebuilding them from the rest until the block verifies. Returns the wrong columns.
    fn combinatorial_reconstruct(
        &self,
        map: &RaidzMap,
        parity_bufs: &mut [Vec<u8>],
        out: &mut [u8],
        bad: &[bool],
        verify: Verifier<'_>,
    ) -> Option<Vec<usize>> {
        let already: Vec<usize> = (0..bad.len()).filter(|&c| bad[c]).collect();
        let budget = map.parity.checked_sub(already.len())?;
        let suspects: Vec<usize> = (0..bad.len()).filter(|&c| !bad[c]).collect();
        let original_out = out.to_vec();
        let original_parity = parity_bufs.to_vec();
        for k in 1..=budget {
            let mut found = None;
            for_each_combination(suspects.len(), k, &mut |combo| {
                let set: Vec<usize> = combo.iter().map(|&i| suspects[i]).collect();
                let mut missing = already.clone();
                missing.extend(&set);
                out.copy_from_slice(&original_out);
                for (b, o) in parity_bufs.iter_mut().zip(&original_parity) {
                    b.copy_from_slice(o);
                }
                if self.reconstruct(map, parity_bufs, out, &missing).is_ok() && verify(out) {
                    found = Some(set);
                    return false;
                }
                true
            });
            if found.is_some() {
                return found;
            }
        }
        out.copy_from_slice(&original_out);
        None
    }

    /// Writes the (now correct) contents of `columns` back to their children.
    fn repair_columns(
        &self,
        map: &RaidzMap,
        parity_bufs: &mut [Vec<u8>],
        out: &mut [u8],
        columns: &[usize],
        report: &mut IoReport,
    ) {
        // Parity buffers hold what was read; regenerate so repaired parity is right.
        if parity_bufs.len() == map.parity {
            let mut cols: Vec<&mut [u8]> =
                parity_bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            cols.extend(split_columns_mut(out, map.data_columns()));
            if self.parity.generate(map.parity, &mut cols).is_err() {
                return;
            }
        }
        let data_start: Vec<usize> = map
            .data_columns()
            .iter()
            .scan(0usize, |pos, c| {
                let s = *pos;
                *pos += c.size as usize;
                Some(s)
            })
            .collect();
        for &c in columns {
            let col = map.columns[c];
            let child = &self.children[col.child];
            let Some(leaf) = child.usable() else { continue };
            let buf: &[u8] = if c < map.parity {
                &parity_bufs[c]
            } else {
                let s = data_start[c - map.parity];
                &out[s..s + col.size as usize]
            };
            if leaf.write_at(buf, LEAF_DATA_START + col.offset).is_ok() {
                report.repaired_children.push(col.child);
                report.repaired_bytes += col.size;
            }
        }
    }

    // ---- issuing I/O to children -----------------------------------------------------

    /// Writes each `(child, leaf_offset, bytes)`; returns the children that failed.
    fn issue_writes(&self, jobs: &[(usize, u64, &[u8])], block_bytes: u64) -> Vec<usize> {
        let write_one = |&(c, off, buf): &(usize, u64, &[u8])| -> bool {
            let child = &self.children[c];
            match child.usable() {
                None => false,
                Some(leaf) => match leaf.write_at(buf, off) {
                    Ok(()) => {
                        if child.stale.load(Ordering::Relaxed) {
                            child.note_resilvered(off, buf.len() as u64);
                        }
                        true
                    }
                    Err(e) => {
                        child.note_error(&child.stats.write_errors, &e);
                        false
                    }
                },
            }
        };
        let results: Vec<bool> = if self.fans_out(block_bytes, jobs.len()) {
            crate::threads::on_leaf_io(
                false,
                jobs.iter().collect(),
                |j| self.leaf_stats(j.0),
                write_one,
            )
        } else {
            jobs.iter().map(write_one).collect()
        };
        jobs.iter()
            .zip(results)
            .filter(|(_, ok)| !ok)
            .map(|(j, _)| j.0)
            .collect()
    }

    /// Reads each `(child, leaf_offset, buffer)`; returns per job whether it failed.
    fn issue_reads(&self, jobs: Vec<(usize, u64, &mut [u8])>) -> Vec<bool> {
        let total: usize = jobs.iter().map(|j| j.2.len()).sum();
        let read_one = |(c, off, buf): (usize, u64, &mut [u8])| -> bool {
            let child = &self.children[c];
            match child.readable_for(off, buf.len() as u64) {
                None => true,
                Some(leaf) => match leaf.read_at(buf, off) {
                    Ok(()) => false,
                    Err(e) => {
                        child.note_error(&child.stats.read_errors, &e);
                        true
                    }
                },
            }
        };
        if self.fans_out(total as u64, jobs.len()) {
            crate::threads::on_leaf_io(true, jobs, |j| self.leaf_stats(j.0), read_one)
        } else {
            jobs.into_iter().map(read_one).collect()
        }
    }
}

/// Splits a block buffer into its data columns (column-major fill: column p holds the
/// first bytes of the block).
pub(crate) fn split_columns_mut<'a>(
    mut buf: &'a mut [u8],
    columns: &[cairn_geometry::RaidzColumn],
) -> Vec<&'a mut [u8]> {
    let mut out = Vec::with_capacity(columns.len());
    for col in columns {
        let (head, tail) = buf.split_at_mut(col.size as usize);
        out.push(head);
        buf = tail;
    }
    debug_assert!(buf.is_empty(), "data columns cover the whole block");
    out
}

/// Calls `f` with every k-subset of `0..n` (as sorted indices) until it returns false.
fn for_each_combination(n: usize, k: usize, f: &mut dyn FnMut(&[usize]) -> bool) {
    if k > n {
        return;
    }
    let mut idx: Vec<usize> = (0..k).collect();
    loop {
        if !f(&idx) {
            return;
        }
        // Rightmost index that can still move right; none left means we are done.
        let Some(i) = (0..k).rev().find(|&i| idx[i] < n - k + i) else {
            return;
        };
        idx[i] += 1;
        for j in i + 1..k {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// A leaf in memory that takes `delay` per request (writes and flushes) and counts
    /// how many of its requests and its sibling's are in flight at once.
    #[derive(Debug)]
    struct SlowLeaf {
        delay: Duration,
        in_flight: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
        data: Mutex<Vec<u8>>,
    }

    impl SlowLeaf {
        fn request(&self) {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(self.delay);
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }

    impl Leaf for SlowLeaf {
        fn path(&self) -> &str {
            "slow"
        }
        fn size(&self) -> u64 {
            self.data.lock().unwrap().len() as u64
        }
        fn physical_sector_size(&self) -> u32 {
            4096
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            self.request();
            let d = self.data.lock().unwrap();
            buf.copy_from_slice(&d[offset as usize..offset as usize + buf.len()]);
            Ok(())
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
            self.request();
            let mut d = self.data.lock().unwrap();
            d[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            self.request();
            Ok(())
        }
    }

    /// A mirror of two `SlowLeaf`s sharing one in-flight count; returns it and the
    /// highest count seen.
    fn slow_mirror(delay: Duration) -> (TopVdev, Arc<AtomicUsize>) {
        let (in_flight, most) = (Arc::default(), Arc::<AtomicUsize>::default());
        let size = LEAF_DATA_START + (4 << 20);
        let children: Vec<Child> = (0..2)
            .map(|i| {
                let leaf = SlowLeaf {
                    delay,
                    in_flight: Arc::clone(&in_flight),
                    most: Arc::clone(&most),
                    data: Mutex::new(vec![0; size as usize]),
                };
                Child::new(i + 1, format!("slow{i}"), Some(Arc::new(leaf)))
            })
            .collect();
        let config = TopConfig {
            shape: VdevShape::Mirror { children: 2 },
            asize: 4 << 20,
            leaves: (0..2)
                .map(|i| crate::config::LeafConfig::new(i + 1, format!("slow{i}"), size))
                .collect(),
            ..TopConfig::hole(0, 12)
        };
        let config = TopConfig {
            hole: false,
            ..config
        };
        (TopVdev::new(config, children), most)
    }

    /// Small writes and flushes of a mirror go to its sides one after the other while its
    /// leaves are fast, and side by side once a leaf's requests take `SLOW_LEAF_NS` or
    /// more (a log commit on disks then costs one device round trip, not one per side).
    #[test]
    fn small_requests_go_out_side_by_side_only_to_slow_leaves() {
        let (fast, most) = slow_mirror(Duration::ZERO);
        for i in 0..20 {
            fast.write_block(i * 4096, &[7u8; 4096]).unwrap();
            fast.flush().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 1, "fast leaves: one at a time");
        assert!(!fast.has_slow_child());

        let (slow, most) = slow_mirror(Duration::from_millis(2));
        slow.write_block(0, &[7u8; 4096]).unwrap(); // the first teaches the estimate
        assert!(slow.has_slow_child());
        most.store(0, Ordering::SeqCst);
        slow.flush().unwrap();
        assert_eq!(
            most.load(Ordering::SeqCst),
            2,
            "a flush of both sides at once"
        );
        most.store(0, Ordering::SeqCst);
        slow.write_block(4096, &[8u8; 4096]).unwrap();
        assert_eq!(
            most.load(Ordering::SeqCst),
            2,
            "a 4 KiB write to both sides at once"
        );
        let mut back = vec![0u8; 4096];
        slow.read_block(4096, &mut back, None).unwrap();
        assert_eq!(back, vec![8u8; 4096]);
    }

    #[test]
    fn combinations_are_complete() {
        let mut seen = Vec::new();
        for_each_combination(5, 2, &mut |c| {
            seen.push(c.to_vec());
            true
        });
        assert_eq!(seen.len(), 10);
        assert_eq!(seen[0], vec![0, 1]);
        assert_eq!(seen[9], vec![3, 4]);
        let mut n = 0;
        for_each_combination(4, 4, &mut |_| {
            n += 1;
            true
        });
        assert_eq!(n, 1);
    }
}
