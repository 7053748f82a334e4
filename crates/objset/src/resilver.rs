//! Resilver: copy to stale leaves (replaced, attached, back from offline or a fault) the
//! blocks they miss, found by walking the block tree from the root (docs/design.md).
//!
//! Each stale leaf has a dirty time log: the txg ranges it missed. A block needs copying
//! when its birth txg is in the DTL of a stale leaf of its vdev; a subtree whose pointer
//! was born before the earliest DTL txg is skipped whole (a parent is never older than its
//! children), so a leaf that was away for a few txgs costs only those txgs' blocks.
//!
//! Blocks are gathered in batches, sorted by vdev offset and rebuilt (read from the other
//! children, verified against the checksum) on one thread while a second writes the stale
//! leaves' columns in that order, so each new leaf is written sequentially. The store lock
//! is held per batch: no txg can free and reuse a block between finding and copying it,
//! and between batches the pool serves reads and writes. The resume point is written to the
//! labels every `checkpoint_every`, so an interrupted resilver continues where it was.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cairn_pool::io::bp::BlockPointer;
use cairn_pool::{LeafSlot, PoolError, StaleLeaf};
use cairn_vdev::io_class::IoClass;
use cairn_vdev::rebuild::{Piece, RebuildRequest};
use cairn_vdev::scan::ResilverRecord;
use cairn_vdev::{dtl, ResilverCheckpoint, ResilverTarget};

use crate::core::{State, StoreCore};
use crate::dnode::{Dnode, ObjectKind};
use crate::error::StoreError;
use crate::object::decode_indirect;
use crate::scrub::{read_synced_dnode, ScrubControl};

/// Tunables of a resilver.
#[derive(Clone, Copy, Debug)]
pub struct ResilverOptions {
    /// Upper bound on bytes written per second (None: as fast as the leaves go).
    pub rate: Option<u64>,
    /// How often progress is reported and the resume point persisted.
    pub checkpoint_every: Duration,
    /// Bytes of blocks gathered (under the store lock) before they are copied: larger
    /// batches keep the leaves busier, smaller ones hold the lock for less time.
    pub batch_bytes: u64,
    /// The p99 of foreground reads to keep to: the resilver copies batches of at most
    /// `BUDGETED_BATCH` and pauses between them while reads are slower
    /// (`crate::read_latency::ScrubPacer`).
    pub latency_budget: Option<Duration>,
}

/// The batch of a resilver with a latency budget: the store lock is held for about one
/// such copy at a time.
const BUDGETED_BATCH: u64 = 1 << 20;

impl Default for ResilverOptions {
    fn default() -> Self {
        ResilverOptions {
            rate: None,
            checkpoint_every: Duration::from_secs(5),
            batch_bytes: 64 << 20,
            latency_budget: None,
        }
    }
}

/// Where a resilver is.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ResilverProgress {
    /// Bytes allocated in the pool when the resilver started (the scan's upper bound).
    pub total_bytes: u64,
    /// Bytes of objects walked (or skipped whole as older than every DTL).
    pub examined_bytes: u64,
    /// Bytes written to stale leaves.
    pub repaired_bytes: u64,
    /// Block copies rebuilt and written.
    pub blocks_repaired: u64,
    /// Blocks that could not be rebuilt (damaged beyond redundancy).
    pub errors: u64,
    pub next_object: u64,
    /// Next block id inside `next_object`.
    pub next_block: u64,
    pub started: u64,
    pub elapsed_secs: f64,
}

impl ResilverProgress {
    /// Bytes written per second in this run.
    pub fn rate(&self) -> f64 {
        if self.elapsed_secs > 0.0 {
            self.repaired_bytes as f64 / self.elapsed_secs
        } else {
            0.0
        }
    }
    /// Fraction done, 0..=1 (by bytes examined).
    pub fn fraction(&self) -> f64 {
        if self.total_bytes == 0 {
            return 1.0;
        }
        (self.examined_bytes as f64 / self.total_bytes as f64).min(1.0)
    }

    fn checkpoint(&self, targets: &Targets) -> ResilverCheckpoint {
        ResilverCheckpoint {
            started: self.started,
            next_object: self.next_object,
            next_block: self.next_block,
            examined_bytes: self.examined_bytes,
            repaired_bytes: self.repaired_bytes,
            total_bytes: self.total_bytes,
            targets: targets.resume_keys(),
        }
    }
}

/// How a resilver ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResilverEnd {
    /// Every stale leaf holds all its data again.
    Finished,
    /// No leaf needed a resilver.
    NothingToDo,
    /// Stopped by the caller; the resume point is on disk.
    Paused,
}

/// Stale leaves per top-level vdev with their DTLs at the start.
struct Targets {
    /// vdev → stale leaves.
    per_vdev: BTreeMap<usize, Vec<StaleLeaf>>,
    /// Earliest missed txg of any target.
    first_txg: u64,
}

impl Targets {
    /// Each target's device and DTL, as a resume point records them.
    fn resume_keys(&self) -> Vec<ResilverTarget> {
        self.per_vdev
            .values()
            .flatten()
            .map(|t| ResilverTarget {
                guid: t.guid,
                dtl: t.dtl.clone(),
            })
            .collect()
    }

    /// Whether a resilver may go on from `cp`: it was copying to every leaf this one
    /// copies to, with the same DTL (else blocks before its position were never copied).
    fn may_resume(&self, cp: &ResilverCheckpoint) -> bool {
        cp.targets.is_empty() || self.resume_keys().iter().all(|t| cp.targets.contains(t))
    }

    /// The paths of the leaves being resilvered.
    fn paths(&self, store: &StoreCore) -> Vec<String> {
        self.per_vdev
            .values()
            .flatten()
            .map(|target| store.pool().leaf_path(target.slot))
            .collect()
    }

    fn find(store: &StoreCore) -> Option<Targets> {
        let mut per_vdev: BTreeMap<usize, Vec<StaleLeaf>> = BTreeMap::new();
        for leaf in store.pool().stale_leaves() {
            per_vdev.entry(leaf.slot.top).or_default().push(leaf);
        }
        let first_txg = per_vdev
            .values()
            .flatten()
            .filter_map(|target| dtl::first_txg(&target.dtl))
            .min()
            .unwrap_or(0);
        (!per_vdev.is_empty()).then_some(Targets {
            per_vdev,
            first_txg,
        })
    }

    /// Children of `vdev` that miss a block born in `birth`.
    fn children_missing(&self, vdev: usize, birth: u64) -> Vec<usize> {
        self.per_vdev
            .get(&vdev)
            .map(|l| {
                l.iter()
                    .filter(|target| dtl::contains(&target.dtl, birth))
                    .map(|target| target.slot.child)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// One block copy to rebuild onto some children of a vdev.
struct CopyJob {
    vdev: usize,
    offset: u64,
    children: Vec<usize>,
    bp: BlockPointer,
}

/// Blocks found so far, waiting to be written.
#[derive(Default)]
struct Batch {
    jobs: Vec<CopyJob>,
    bytes: u64,
}

/// Data blocks gathered per slice of an object: 1024, a multiple of an indirect block's
/// 128, so each indirect block is copied by one slice.
const RESILVER_SLICE: u64 = 1024;

impl StoreCore {
    /// Resilvers every stale leaf, resuming a persisted resilver. `report` is called about
    /// every `opts.checkpoint_every` and may pause (the resume point stays on disk).
    pub fn resilver(
        &self,
        opts: ResilverOptions,
        report: &mut dyn FnMut(&ResilverProgress) -> ScrubControl,
    ) -> Result<(ResilverProgress, ResilverEnd), StoreError> {
        // A resilver's reads are scrub-class reads, as zpool counts them.
        let _io = cairn_vdev::io_class::enter(IoClass::Scrub);
        let Some(_running) = self.pool().enter_resilver() else {
            // A device change holds resilvers off: the caller starts it again later.
            return Ok((ResilverProgress::default(), ResilverEnd::Paused));
        };
        let result = self.resilver_pass(opts, report);
        let (class, details) = match &result {
            Ok((_, ResilverEnd::NothingToDo)) => return result,
            Ok((p, end)) => {
                let class = match end {
                    ResilverEnd::Paused => "sysevent.fs.zfs.resilver_paused",
                    _ => "sysevent.fs.zfs.resilver_finish",
                };
                let details = vec![
                    ("repaired_bytes", p.repaired_bytes.to_string()),
                    ("errors", p.errors.to_string()),
                ];
                (class, details)
            }
            Err(e) => (
                "sysevent.fs.zfs.resilver_abort",
                vec![("error", e.to_string())],
            ),
        };
        self.pool().post_event(class, None, &details);
        result
    }

    /// One resilver from start (or the resume point) to end, in named steps: find the
    /// stale leaves, announce, copy the pool's metadata, copy every object, finish.
    fn resilver_pass(
        &self,
        opts: ResilverOptions,
        report: &mut dyn FnMut(&ResilverProgress) -> ScrubControl,
    ) -> Result<(ResilverProgress, ResilverEnd), StoreError> {
        self.sync()?;
        let Some(targets) = Targets::find(self) else {
            if self.pool().resilver_checkpoint().is_some() {
                self.pool().set_resilver_checkpoint(None)?;
            }
            return Ok((ResilverProgress::default(), ResilverEnd::NothingToDo));
        };
        let start = Instant::now();
        let mut p = self.start_resilver(&targets)?;
        self.copy_pool_metadata(&targets, opts, &mut p)?;
        if p.next_object == 0 {
            p.next_object = 1;
        }
        if self.copy_objects(&targets, opts, report, start, &mut p)? == ScrubControl::Pause {
            return Ok((p, ResilverEnd::Paused));
        }
        p.examined_bytes = p.total_bytes.max(p.examined_bytes);
        p.elapsed_secs = start.elapsed().as_secs_f64();
        self.finish_resilver(&targets, &p)?;
        report(&p);
        Ok((p, ResilverEnd::Finished))
    }

    /// Posts `resilver_start` and returns the progress to go on from: the resume point on
    /// disk, or a fresh start; the resume point is then (re)written.
    fn start_resilver(&self, targets: &Targets) -> Result<ResilverProgress, StoreError> {
        let resumed = self
            .pool()
            .resilver_checkpoint()
            .filter(|cp| targets.may_resume(cp));
        let leaves: Vec<String> = targets.paths(self);
        self.pool().post_event(
            "sysevent.fs.zfs.resilver_start",
            None,
            &[
                ("leaves", leaves.join(" ")),
                ("resumed", resumed.is_some().to_string()),
            ],
        );
        let p = match &resumed {
            Some(cp) => ResilverProgress {
                total_bytes: cp.total_bytes,
                examined_bytes: cp.examined_bytes,
                repaired_bytes: 0,
                next_object: cp.next_object,
                next_block: cp.next_block,
                started: cp.started,
                ..ResilverProgress::default()
            },
            None => ResilverProgress {
                total_bytes: self.space().alloc,
                started: crate::core::now_ns() / 1_000_000_000,
                ..ResilverProgress::default()
            },
        };
        self.pool()
            .set_resilver_checkpoint(Some(p.checkpoint(targets)))?;
        Ok(p)
    }

    /// Copies what the stale leaves miss of the pool's metadata (root block, space maps,
    /// object table) and of the blocks only snapshots hold. Pool metadata is rewritten
    /// every txg, so it is walked on every (re)start.
    fn copy_pool_metadata(
        &self,
        targets: &Targets,
        opts: ResilverOptions,
        p: &mut ResilverProgress,
    ) -> Result<(), StoreError> {
        let mut st = self.lock();
        let mut batch = Batch::default();
        let mut roots = vec![st.root_bp];
        roots.extend(st.space_map_bps.iter().copied());
        for bp in roots {
            add_block(targets, &bp, &mut batch);
        }
        let meta = st.meta.dnode;
        self.gather_tree(&mut st, targets, &meta, &mut batch)?;
        self.write_batch(&mut batch, p)?;
        // Blocks only snapshots hold: each is on one dead list (`crate::snapshot`).
        for bp in st.snaps.dead_blocks() {
            add_block(targets, &bp, &mut batch);
            if batch.bytes >= opts.batch_bytes {
                self.write_batch(&mut batch, p)?;
            }
        }
        self.write_batch(&mut batch, p)
    }

    /// Copies what the stale leaves miss of every object from `p.next_object` on, at
    /// `opts.rate`, writing the resume point and reporting every `opts.checkpoint_every`.
    /// Returns `Pause` when the report asked to stop (the resume point is on disk).
    fn copy_objects(
        &self,
        targets: &Targets,
        opts: ResilverOptions,
        report: &mut dyn FnMut(&ResilverProgress) -> ScrubControl,
        start: Instant,
        p: &mut ResilverProgress,
    ) -> Result<ScrubControl, StoreError> {
        let mut last_report = Instant::now();
        let mut batch = Batch::default();
        let mut pacer = opts
            .latency_budget
            .map(crate::read_latency::ScrubPacer::new);
        let batch_bytes = match pacer {
            Some(_) => opts.batch_bytes.min(BUDGETED_BATCH),
            None => opts.batch_bytes,
        };
        let last = self.lock().next_object;
        while p.next_object < last {
            {
                let mut st = self.lock();
                // Gather slices of objects until the batch is full, then copy it under the
                // same lock; the resume point is (object, block id).
                while p.next_object < last && batch.bytes < batch_bytes {
                    let id = p.next_object;
                    match self.gather_slice(&mut st, targets, id, &mut batch, p)? {
                        Some(next) => p.next_block = next,
                        None => {
                            p.next_object = id + 1;
                            p.next_block = 0;
                        }
                    }
                }
                self.write_batch(&mut batch, p)?;
            }
            p.elapsed_secs = start.elapsed().as_secs_f64();
            throttle(opts.rate, p.repaired_bytes, start);
            if let Some(pacer) = &mut pacer {
                std::thread::sleep(pacer.pause_for(&self.read_latency));
            }
            // A device change waiting (`Pool::hold_scans`) pauses it at once.
            let held = self.pool().scans_held();
            if held || last_report.elapsed() >= opts.checkpoint_every {
                last_report = Instant::now();
                self.pool()
                    .set_resilver_checkpoint(Some(p.checkpoint(targets)))?;
                if held || report(p) != ScrubControl::Continue {
                    return Ok(ScrubControl::Pause);
                }
            }
        }
        Ok(ScrubControl::Continue)
    }

    /// Walks an object's tree, skipping subtrees born before every DTL, and adds the blocks
    /// stale leaves miss to `batch`.
    /// Adds what the stale leaves miss of block ids `[next_block, +RESILVER_SLICE)` of
    /// object `id` to the batch; the block id to go on from, or `None` when the object is
    /// done (a subtree older than every DTL is skipped whole, by birth txg).
    fn gather_slice(
        &self,
        st: &mut State,
        targets: &Targets,
        id: u64,
        batch: &mut Batch,
        p: &mut ResilverProgress,
    ) -> Result<Option<u64>, StoreError> {
        let dnode = read_synced_dnode(self, st, id)?;
        if dnode.kind == ObjectKind::Free {
            return Ok(None);
        }
        if p.next_block == 0 {
            p.examined_bytes += dnode.used;
        }
        if dnode.root.birth < targets.first_txg {
            return Ok(None);
        }
        let walked = crate::walk::walk_range(
            self.pool(),
            &dnode,
            p.next_block,
            RESILVER_SLICE,
            &mut |bp, _| {
                if bp.birth < targets.first_txg {
                    return false;
                }
                add_block(targets, bp, batch);
                true
            },
        );
        walked.or_else(|_| {
            p.errors += 1;
            Ok(None)
        })
    }

    fn gather_tree(
        &self,
        _st: &mut State,
        targets: &Targets,
        dnode: &Dnode,
        batch: &mut Batch,
    ) -> Result<(), StoreError> {
        let mut stack: Vec<BlockPointer> = vec![dnode.root];
        while let Some(bp) = stack.pop() {
            if bp.is_hole() || bp.birth < targets.first_txg {
                continue;
            }
            add_block(targets, &bp, batch);
            if bp.level > 0 {
                let entries = decode_indirect(&self.pool().read_bp(&bp)?)?;
                stack.extend(entries.into_iter().filter(|b| !b.is_hole()));
            }
        }
        Ok(())
    }

    /// Rebuilds the batch's blocks in vdev-offset order, a chunk at a time, on one thread
    /// and writes the stale leaves' parts on another (adjacent parts coalesced), so reading
    /// the good leaves overlaps writing the new ones.
    fn write_batch(&self, batch: &mut Batch, p: &mut ResilverProgress) -> Result<(), StoreError> {
        let mut jobs = std::mem::take(&mut batch.jobs);
        batch.bytes = 0;
        jobs.sort_by_key(|j| (j.vdev, j.offset));
        let pool = self.pool();
        let chunks = chunks_by_vdev(&jobs);
        let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, usize, Vec<Piece>)>(4);
        let errors = std::sync::atomic::AtomicU64::new(0);
        let (bytes, blocks, failure) = std::thread::scope(|s| {
            let writer = s.spawn(move || write_pieces(pool, rx));
            // Two rebuilders: one reads the good leaves while the other reconstructs and
            // verifies; the writer puts their chunks back in order.
            for worker in 0..REBUILDERS {
                let tx = tx.clone();
                let (chunks, errors) = (&chunks, &errors);
                s.spawn(move || {
                    // A thread of its own: it does not inherit the resilver's scope.
                    let _io = cairn_vdev::io_class::enter(IoClass::Scrub);
                    for (index, chunk) in chunks.iter().enumerate().skip(worker).step_by(REBUILDERS)
                    {
                        let (vdev, pieces, failed) = rebuild_chunk(pool, chunk);
                        errors.fetch_add(failed, Ordering::Relaxed);
                        if tx.send((index, vdev, pieces)).is_err() {
                            break;
                        }
                    }
                });
            }
            drop(tx);
            writer.join().unwrap_or((0, 0, None))
        });
        let errors = errors.into_inner();
        p.repaired_bytes += bytes;
        p.blocks_repaired += blocks;
        p.errors += errors;
        if let Some(e) = failure {
            return Err(StoreError::Pool(e));
        }
        Ok(())
    }

    /// Marks the targets whole again: their DTL ranges at the start are dropped (txgs missed
    /// meanwhile stay), and the config without a resume point goes to the labels. A slot
    /// whose device changed meanwhile (a hot spare took over) is left stale: the spare
    /// needs a resilver of its own. The resilver's record (`status`'s `scan:` line) is
    /// written with that config.
    fn finish_resilver(&self, targets: &Targets, p: &ResilverProgress) -> Result<(), StoreError> {
        let _st = self.lock();
        for target in targets.per_vdev.values().flatten() {
            self.pool().finish_leaf_resilver(target);
        }
        self.pool().record_finished_resilver(ResilverRecord {
            repaired_bytes: p.repaired_bytes,
            errors: p.errors,
            elapsed_secs: p.elapsed_secs,
            ended: crate::core::now_ns() / 1_000_000_000,
        })?;
        Ok(())
    }
}

/// Bytes of blocks rebuilt together (one read pass over the good leaves).
const CHUNK_BYTES: u64 = 2 << 20;
/// Largest coalesced write to a stale leaf.
const MAX_WRITE_RUN: u64 = 4 << 20;

/// Consecutive jobs of one vdev, about `CHUNK_BYTES` each.
fn chunks_by_vdev(jobs: &[CopyJob]) -> Vec<&[CopyJob]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0u64;
    for (i, job) in jobs.iter().enumerate() {
        if i > start && (job.vdev != jobs[start].vdev || bytes >= CHUNK_BYTES) {
            out.push(&jobs[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += u64::from(job.bp.psize);
    }
    if start < jobs.len() {
        out.push(&jobs[start..]);
    }
    out
}

/// Pieces that follow each other on one leaf, written as one request.
struct Run {
    child: usize,
    start: u64,
    len: u64,
    bufs: Vec<Vec<u8>>,
}

/// Threads rebuilding chunks at once.
const REBUILDERS: usize = 2;

/// Rebuilds one chunk: (vdev, pieces for the stale leaves, blocks that failed).
fn rebuild_chunk(pool: &cairn_pool::Pool, chunk: &[CopyJob]) -> (usize, Vec<Piece>, u64) {
    let vdev = chunk[0].vdev;
    let requests: Vec<RebuildRequest> = chunk
        .iter()
        .map(|j| RebuildRequest {
            offset: j.offset,
            psize: u64::from(j.bp.psize),
            targets: j.children.clone(),
        })
        .collect();
    let verify = |i: usize, b: &[u8]| {
        let bp = &chunk[i].bp;
        bp.checksum_kind.digest(b) == bp.checksum
    };
    let mut pieces = Vec::new();
    let mut failed = 0;
    for result in pool.rebuild_batch(vdev, &requests, &verify) {
        match result {
            Ok(p) => pieces.extend(p),
            Err(_) => failed += 1,
        }
    }
    (vdev, pieces, failed)
}

/// Writes rebuilt chunks in chunk order (whatever order they arrive in), merging pieces
/// that continue each other on the same leaf into one write. Returns (bytes written,
/// pieces written, first failure).
fn write_pieces(
    pool: &cairn_pool::Pool,
    rx: std::sync::mpsc::Receiver<(usize, usize, Vec<Piece>)>,
) -> (u64, u64, Option<PoolError>) {
    let mut waiting: BTreeMap<usize, (usize, Vec<Piece>)> = BTreeMap::new();
    let mut next = 0usize;
    let in_order = rx.into_iter().flat_map(|(index, vdev, pieces)| {
        waiting.insert(index, (vdev, pieces));
        let mut ready = Vec::new();
        while let Some(chunk) = waiting.remove(&next) {
            ready.push(chunk);
            next += 1;
        }
        ready
    });
    let mut written = 0u64;
    let mut count = 0u64;
    let mut failure = None;
    let mut flush = |vdev: usize, run: Run| {
        let bufs: Vec<&[u8]> = run.bufs.iter().map(|b| b.as_slice()).collect();
        let slot = LeafSlot {
            top: vdev,
            child: run.child,
        };
        match pool.write_leaf_run(slot, run.start, &bufs) {
            Ok(()) => written += run.len,
            Err(e) => failure = Some(PoolError::Vdev(e)),
        }
    };
    for (vdev, pieces) in in_order {
        // Pieces come sorted by vdev offset; per child they are then in leaf order.
        let mut runs: BTreeMap<usize, Run> = BTreeMap::new();
        for (child, at, bytes) in pieces {
            count += 1;
            if let Some(run) = runs.get(&child) {
                if run.start + run.len != at || run.len >= MAX_WRITE_RUN {
                    flush(vdev, runs.remove(&child).expect("present"));
                }
            }
            let run = runs.entry(child).or_insert_with(|| Run {
                child,
                start: at,
                len: 0,
                bufs: Vec::new(),
            });
            run.len += bytes.len() as u64;
            run.bufs.push(bytes);
        }
        for (_, run) in runs {
            flush(vdev, run);
        }
    }
    (written, count, failure)
}

/// Queues the copies of `bp` that stale leaves miss.
fn add_block(targets: &Targets, bp: &BlockPointer, batch: &mut Batch) {
    if bp.is_hole() {
        return;
    }
    for dva in bp.copies() {
        let vdev = dva.vdev as usize;
        let children = targets.children_missing(vdev, bp.birth);
        if children.is_empty() {
            continue;
        }
        batch.bytes += u64::from(bp.psize);
        batch.jobs.push(CopyJob {
            vdev,
            offset: dva.offset,
            children,
            bp: *bp,
        });
    }
}

/// Sleeps so that `bytes` written since `start` stay within `rate` bytes per second.
fn throttle(rate: Option<u64>, bytes: u64, start: Instant) {
    let Some(rate) = rate.filter(|&r| r > 0) else {
        return;
    };
    let due = Duration::from_secs_f64(bytes as f64 / rate as f64);
    if let Some(wait) = due.checked_sub(start.elapsed()) {
        std::thread::sleep(wait);
    }
}
