//! Scrub: walk every block reachable from the current root and check every copy and every
//! parity column, rewriting whatever is wrong (docs/design.md).
//!
//! Order: the root block and space map, then the object table; then object by object, each
//! object's blocks sorted by disk offset so the leaves are read mostly sequentially. The
//! store lock is held while one object is scrubbed, so no txg can free (and reuse) a block
//! between reading its pointer and checking it.

use std::time::{Duration, Instant};

use cairn_pool::io::bp::BlockPointer;
use cairn_pool::io::pipeline::BlockHealth;
use cairn_pool::LeafIdentity;

use crate::core::{State, StoreCore};
use crate::dnode::{Dnode, ObjectKind};
use crate::error::StoreError;
use crate::object::decode_indirect;

/// How far a scrub got: kept in the labels with the pool's scan state.
pub use cairn_vdev::scan::ScrubProgress;

/// What the progress callback asks the scrub to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScrubControl {
    Continue,
    /// Stop now and keep the resume point.
    Pause,
    /// Stop now and forget the scrub.
    Stop,
}

/// How a scrub ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScrubEnd {
    Finished,
    Paused,
    Stopped,
}

/// Data blocks scrubbed per slice (and per hold of the state lock): 1024, a multiple of an
/// indirect block's 128, so each indirect block is scrubbed by one slice.
const SCRUB_SLICE: u64 = 1024;

impl StoreCore {
    /// Scrubs the pool, from the start or on from where a paused scrub stopped. `report`
    /// is called about every `every` and decides whether to go on. The pool's events say
    /// when it started and how it ended.
    pub fn scrub(
        &self,
        resume: Option<&ScrubProgress>,
        every: Duration,
        report: &mut dyn FnMut(&ScrubProgress) -> ScrubControl,
    ) -> Result<(ScrubProgress, ScrubEnd), StoreError> {
        self.scrub_in_slices(resume, every, SCRUB_SLICE, report)
    }

    /// `scrub` with objects scrubbed `slice` blocks at a time (default `SCRUB_SLICE`; each
    /// indirect block is still scrubbed once, by the slice its first block id is in): each
    /// slice holds the store lock while it reads, and `report` is called only between
    /// slices, so a rate-limited scrub takes small slices to pace itself evenly and to
    /// keep other users of the store waiting for the lock briefly.
    pub fn scrub_in_slices(
        &self,
        resume: Option<&ScrubProgress>,
        every: Duration,
        slice: u64,
        report: &mut dyn FnMut(&ScrubProgress) -> ScrubControl,
    ) -> Result<(ScrubProgress, ScrubEnd), StoreError> {
        let slice = slice.max(1);
        // Every leaf read of the scrub (and of the I/O threads it hands reads to) is a
        // scrub read in `iostat -q`/`-w`; its repair writes are async writes.
        let _io = cairn_vdev::io_class::enter(cairn_vdev::io_class::IoClass::Scrub);
        let class = match resume {
            Some(_) => "sysevent.fs.zfs.scrub_resume",
            None => "sysevent.fs.zfs.scrub_start",
        };
        self.pool().post_event(class, None, &[]);
        let result = self.scrub_pass(resume, every, slice, report);
        let (class, details) = match &result {
            Ok((p, end)) => {
                let class = match end {
                    ScrubEnd::Finished => "sysevent.fs.zfs.scrub_finish",
                    ScrubEnd::Paused => "sysevent.fs.zfs.scrub_paused",
                    ScrubEnd::Stopped => "sysevent.fs.zfs.scrub_abort",
                };
                let details = vec![
                    ("examined_bytes", p.examined_bytes.to_string()),
                    ("repaired_bytes", p.repaired_bytes.to_string()),
                    ("errors", p.errors.to_string()),
                ];
                (class, details)
            }
            Err(e) => (
                "sysevent.fs.zfs.scrub_abort",
                vec![("error", e.to_string())],
            ),
        };
        self.pool().post_event(class, None, &details);
        result
    }

    fn scrub_pass(
        &self,
        resume: Option<&ScrubProgress>,
        every: Duration,
        slice: u64,
        report: &mut dyn FnMut(&ScrubProgress) -> ScrubControl,
    ) -> Result<(ScrubProgress, ScrubEnd), StoreError> {
        let synced_txg = self.sync()?;
        let resume_from = resume.map_or(0, |r| r.next_object);
        let readable_at_start = self.pool().readable_leaves();
        let start = Instant::now();
        // A resumed scrub goes on counting from where it paused.
        let before = resume.cloned().unwrap_or_default();
        let mut p = ScrubProgress {
            total_bytes: self.space().alloc,
            next_object: resume_from,
            next_block: before.next_block,
            scanned_txg: resume.map_or(synced_txg, |r| r.scanned_txg),
            examined_bytes: before.examined_bytes,
            repaired_bytes: before.repaired_bytes,
            errors: before.errors,
            blocks: before.blocks,
            elapsed_secs: before.elapsed_secs,
        };
        // The first report comes after the first slice, so a request to pause or stop (and
        // a rate) is honoured even by a scrub that would finish within `every`.
        let mut last_report = start.checked_sub(every).unwrap_or(start);
        if resume_from == 0 {
            let mut st = self.lock();
            let mut roots = vec![st.root_bp];
            roots.extend(st.space_map_bps.iter().copied());
            // Blocks only snapshots hold: each is on one dead list (`crate::snapshot`).
            roots.extend(st.snaps.dead_blocks());
            for bp in roots {
                self.scrub_one(&mut st, &bp, None, &mut p);
            }
            let meta = st.meta.dnode;
            self.scrub_tree(&mut st, 0, &meta, &mut p)?;
            p.next_object = 1;
        }
        let last = self.lock().next_object;
        while p.next_object < last {
            let id = p.next_object;
            match self.scrub_slice(id, p.next_block, slice, &mut p)? {
                Some(next) => p.next_block = next,
                None => {
                    p.next_object = id + 1;
                    p.next_block = 0;
                }
            }
            p.elapsed_secs = before.elapsed_secs + start.elapsed().as_secs_f64();
            if last_report.elapsed() >= every {
                last_report = Instant::now();
                match report(&p) {
                    ScrubControl::Continue => {}
                    ScrubControl::Pause => return Ok((p, ScrubEnd::Paused)),
                    ScrubControl::Stop => return Ok((p, ScrubEnd::Stopped)),
                }
            }
        }
        p.elapsed_secs = before.elapsed_secs + start.elapsed().as_secs_f64();
        if resume_from == 0 && p.errors == 0 {
            self.settle_dtls(synced_txg, &readable_at_start)?;
        }
        self.settle_error_log(p.scanned_txg);
        report(&p);
        Ok((p, ScrubEnd::Finished))
    }

    /// After a completed scrub: an object in the error log that the scrub read whole (it
    /// was last seen damaged before the scrub's txg and not again) leaves the log, as in
    /// ZFS, where a completed scrub rebuilds the errlog from what it finds.
    fn settle_error_log(&self, scanned_txg: u64) {
        if scanned_txg == 0 {
            return;
        }
        let mut st = self.lock();
        let before = st.damaged.len();
        st.damaged.retain(|_, seen| *seen > scanned_txg);
        if st.damaged.len() != before || st.damaged_unlisted != 0 {
            // Unlisted entries were counted, not named: the scrub has seen them all again.
            st.damaged_unlisted = 0;
            st.damaged_dirty = true;
        }
    }

    /// After a whole scrub without errors, every block born up to `scanned_txg` is correct
    /// on every leaf the scrub read (it rewrote what was wrong): DTL ranges of those leaves
    /// up to that txg are settled, as a completed scrub does in ZFS. Without this, a leaf
    /// that once missed a write would be distrusted at the next import although whole.
    fn settle_dtls(&self, scanned_txg: u64, readable: &[LeafIdentity]) -> Result<(), StoreError> {
        let mut changed = false;
        for &leaf in readable {
            changed |= self.pool().settle_dtl(leaf, scanned_txg);
        }
        if changed {
            self.pool()
                .write_config_labels(0)
                .map_err(StoreError::Pool)?;
        }
        Ok(())
    }

    /// Scrubs one block; returns its health, or None if it is beyond repair.
    fn scrub_one(
        &self,
        st: &mut State,
        bp: &BlockPointer,
        owner: Option<(u32, u64)>,
        p: &mut ScrubProgress,
    ) -> Option<BlockHealth> {
        let health = self.scrub_one_unlocked(bp, p);
        if health.is_none() {
            if let Some((ds, obj)) = owner {
                self.mark_damaged(st, ds, obj);
            }
        }
        health
    }

    /// Scrubs one block without the state lock (the caller holds the read gate); None if
    /// it is beyond repair (the caller marks its object damaged).
    fn scrub_one_unlocked(&self, bp: &BlockPointer, p: &mut ScrubProgress) -> Option<BlockHealth> {
        if bp.is_hole() {
            return Some(BlockHealth::default());
        }
        p.blocks += 1;
        p.examined_bytes += bp.total_asize();
        match self.pool().scrub_bp(bp) {
            Ok(h) => {
                p.repaired_bytes += h.repaired_bytes;
                Some(h)
            }
            Err(_) => {
                p.errors += 1;
                None
            }
        }
    }

    /// Scrubs an object's whole tree: indirect blocks as they are walked, then the data
    /// blocks in disk order.
    /// Scrubs block ids `[from, from + slice)` of object `id` under the state lock
    /// (a tree damaged beyond redundancy counts as an error of its object); the block id to
    /// go on from, or `None` when the object is done.
    fn scrub_slice(
        &self,
        id: u64,
        from: u64,
        slice: u64,
        p: &mut ScrubProgress,
    ) -> Result<Option<u64>, StoreError> {
        let mut st = self.lock();
        let dnode = read_synced_dnode(self, &mut st, id)?;
        if dnode.kind == ObjectKind::Free {
            return Ok(None);
        }
        let owner = Some((dnode.dataset, id));
        let mut data: Vec<BlockPointer> = Vec::new();
        let walked = crate::walk::walk_range(self.pool(), &dnode, from, slice, &mut |bp, _| {
            if bp.level == 0 {
                data.push(*bp);
                return true;
            }
            self.scrub_one(&mut st, bp, owner, p).is_some()
        });
        // In vdev-offset order: the slice's data blocks are read as one sweep — without the
        // store lock, as reads fetch blocks (so the pool's users wait for the scrub only
        // while it walks the slice's indirect blocks): the read gate, taken before the lock
        // is released, keeps a sync from freeing them for reuse meanwhile.
        data.sort_by_key(|b| b.dvas[0]);
        let gate = self.read_gate.read().unwrap_or_else(|p| p.into_inner());
        drop(st);
        let mut lost = false;
        for bp in &data {
            lost |= self.scrub_one_unlocked(bp, p).is_none();
        }
        drop(gate);
        let mut st = self.lock();
        if lost {
            self.mark_damaged(&mut st, dnode.dataset, id);
        }
        match walked {
            Ok(next) => Ok(next),
            Err(_) => {
                p.errors += 1;
                self.mark_damaged(&mut st, dnode.dataset, id);
                Ok(None)
            }
        }
    }

    fn scrub_tree(
        &self,
        st: &mut State,
        id: u64,
        dnode: &Dnode,
        p: &mut ScrubProgress,
    ) -> Result<(), StoreError> {
        let owner = Some((dnode.dataset, id));
        let mut data: Vec<BlockPointer> = Vec::new();
        let mut stack: Vec<BlockPointer> = vec![dnode.root];
        while let Some(bp) = stack.pop() {
            if bp.is_hole() {
                continue;
            }
            if bp.level == 0 {
                data.push(bp);
                continue;
            }
            if self.scrub_one(st, &bp, owner, p).is_none() {
                continue;
            }
            let entries = decode_indirect(&self.pool().read_bp(&bp)?)?;
            stack.extend(entries.into_iter().rev().filter(|b| !b.is_hole()));
        }
        data.sort_by_key(|b| b.dvas[0]);
        for bp in data {
            self.scrub_one(st, &bp, owner, p);
        }
        Ok(())
    }
}

impl StoreCore {
    /// Every data block pointer of an object as synced, by block id (for tests and tools).
    pub fn object_blocks(&self, object: u64) -> Result<Vec<(u64, BlockPointer)>, StoreError> {
        self.sync()?;
        let mut st = self.lock();
        let dnode = read_synced_dnode(self, &mut st, object)?;
        let mut out = Vec::new();
        let mut stack = vec![(dnode.root, 0u64)];
        while let Some((bp, first)) = stack.pop() {
            if bp.is_hole() {
                continue;
            }
            if bp.level == 0 {
                out.push((first, bp));
                continue;
            }
            let span = 1u64 << (crate::dnode::BPS_PER_INDIRECT_SHIFT * u32::from(bp.level - 1));
            let entries = decode_indirect(&self.pool().read_bp(&bp)?)?;
            for (i, e) in entries.into_iter().enumerate() {
                stack.push((e, first + i as u64 * span));
            }
        }
        out.sort_by_key(|(b, _)| *b);
        Ok(out)
    }
}

/// The synced dnode of `id` (straight from the object table).
pub(crate) fn read_synced_dnode(
    store: &StoreCore,
    st: &mut State,
    id: u64,
) -> Result<Dnode, StoreError> {
    crate::object_io::read_dnode(store.pool(), st, id)
}
