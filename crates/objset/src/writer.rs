//! The background writers: while a txg is open, whole dirty data blocks are compressed,
//! checksummed and written by other threads (each with a batch of its own, so one batch's
//! checksums overlap another's parity and leaf writes), and the sync at the end of the txg
//! only links them into the tree. The writers never commit: txgs end exactly where they
//! would without them (the sync, and `Store::sync`, decide), and a crash loses exactly the
//! open txg.
//!
//! ```text
//!  writers ──► ObjectState.dirty ──take──► .syncing (Arc, still readable) ──write──► .written (BP)
//!                    ▲                         │                                        │
//!                    └─── sync takes back ◄────┘            sync links into the tree ◄──┘
//! ```
//! Before each sync (`StoreCore::sync`) the same path drains the txg: it takes every dirty
//! data block, also those written in pieces that the writers leave alone, in batches,
//! so that the sync, which holds the state lock, finds them written (`drain_before_sync`).
//! While a drain pass runs, writers are paced (`StoreCore::drain_delay`, a pause after the
//! write, without the lock) once they have dirtied most of what would let the next pass be
//! at most half this one: the passes then converge, and the sync is left little to write.
//!
//! Rules that keep it correct:
//! - A block that changes again (write, punch, truncate, delete) is forgotten: dropped from
//!   `syncing`, or its written copy goes to the deferred frees. What stays in `written` is
//!   current when the sync links it.
//! - A batch lands only if no sync took it back meanwhile (`Presync::generation`); a sync
//!   that finds batches in flight puts their blocks back into `dirty` and defers their space.
//! - Batches hold disjoint blocks (taking moves them out of `dirty`), and land in any order:
//!   a block lands only if `syncing` still holds the very buffer its batch took.
//! - A batch writes while holding the read gate shared, so the space of a batch taken back
//!   cannot be released (and reused) before its writes end. No writer holds the gate while
//!   it waits for the state lock (a sync takes the lock, then the gate).
//! - Space: from its allocation on, a batch's blocks count as allocated and no longer as
//!   dirty data to allocate (`Presync::allocated_bytes`), so the space check counts them
//!   once; a block changed again counts again, as its written copy stays allocated.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use cairn_pool::io::bp::{BlockPointer, Dva};
use cairn_pool::io::compress::Compression;
use cairn_pool::io::pipeline::{prepare_shared, release_all, PreparedBlock, WriteProps};
use cairn_pool::PoolError;

use crate::core::{DrainPace, State, StoreCore, DATASET_TABLE_OBJECT};
use crate::object::{stored_block_size, ObjectState};
use crate::object_io::defer_free;

/// Batches of waiting dirty data at which writers pause until the background writer
/// catches up.
const MAX_BACKLOG_BATCHES: u64 = 4;

/// One block of a batch.
struct Item {
    object: u64,
    blkid: u64,
    /// The dirty block as `syncing` holds it (`block_size` bytes).
    data: Arc<Vec<u8>>,
    /// What is stored of it: less than `data` for the one block of a short object.
    stored_len: usize,
    props: WriteProps,
}

/// Blocks taken from the open txg.
struct Batch {
    id: u64,
    generation: u64,
    txg: u64,
    items: Vec<Item>,
}

impl Batch {
    /// Dirty bytes the batch holds (as `State::dirty_bytes` counted them).
    fn bytes(&self) -> u64 {
        self.items.iter().map(|i| i.data.len() as u64).sum()
    }

    /// Bytes the batch stores.
    fn stored_bytes(&self) -> u64 {
        self.items.iter().map(|i| i.stored_len as u64).sum()
    }
}

fn backlog(st: &State) -> u64 {
    st.dirty_bytes.saturating_sub(st.presync.taken_bytes)
}

impl StoreCore {
    /// The writer thread's loop: wait for enough dirty data, take a batch, write it.
    pub(crate) fn background_writer(&self) {
        loop {
            let batch = {
                let mut st = self.lock();
                loop {
                    if self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if st.presync.in_flight < self.writer_threads()
                        && backlog(&st) >= self.config.background_batch
                    {
                        break;
                    }
                    st = self.presync_cv.wait(st).unwrap_or_else(|p| p.into_inner());
                }
                let batch = self.take_batch(&mut st);
                // Writers waiting for the backlog to shrink look again.
                self.presync_cv.notify_all();
                batch
            };
            if let Some(batch) = batch {
                let _written = self.write_background_batch(batch);
            }
        }
    }

    /// Data blocks the background writer wrote and handed to a sync since the store opened.
    pub fn background_blocks_landed(&self) -> u64 {
        self.lock().presync.landed_blocks
    }

    /// Lets writers go on unless the background writer is behind (then they wait for it),
    /// and wakes it when there is work. Before a sync, waits for a batch in flight. Before
    /// its threads run (the log replay at open), nobody would take the backlog: no wait.
    pub(crate) fn throttle<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        if !self.config.background_writer || !self.writers_running.load(Ordering::SeqCst) {
            return st;
        }
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return st;
            }
            // A sync is near: let the batch in flight land first.
            let sync_near = st.presync.in_flight > 0 && self.over_dirty_limit(&st);
            // Far behind: wait until the writer took more (it wakes everyone after a take,
            // and takes nothing only by marking the backlog taken).
            let behind = backlog(&st) >= MAX_BACKLOG_BATCHES * self.config.background_batch;
            if !sync_near && !behind {
                break;
            }
            self.presync_cv.notify_all();
            st = self.presync_cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        self.nudge_writer(&st);
        st
    }

    /// Wakes the background writer when enough dirty data waits.
    pub(crate) fn nudge_writer(&self, st: &State) {
        if self.config.background_writer
            && st.presync.in_flight < self.writer_threads()
            && backlog(st) >= self.config.background_batch
        {
            self.presync_cv.notify_all();
        }
    }

    fn writer_threads(&self) -> usize {
        self.config.background_writers.max(1)
    }

    /// Waits until no background batch is in flight (a sync then has all blocks at hand).
    pub(crate) fn wait_for_writer<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
    ) -> MutexGuard<'a, State> {
        while st.presync.in_flight > 0 && !self.stop.load(Ordering::SeqCst) {
            st = self.presync_cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st
    }

    /// Called by a sync that could not wait: the batches in flight go back into `dirty` (the
    /// sync writes them itself) and their space is deferred; they will not land.
    pub(crate) fn take_back_background_batch(&self, st: &mut State) {
        if st.presync.in_flight == 0 {
            return;
        }
        st.presync.generation += 1;
        let txg = st.txg;
        let inflight = std::mem::take(&mut st.presync.inflight);
        st.deferred
            .extend(inflight.into_values().flatten().map(|d| (txg, d)));
        for obj in st.objects.values_mut() {
            for (blkid, data) in std::mem::take(&mut obj.syncing) {
                obj.dirty
                    .entry(blkid)
                    .or_insert_with(|| Arc::try_unwrap(data).unwrap_or_else(|a| a.to_vec()));
            }
        }
    }

    /// Moves about `background_batch` bytes of whole dirty blocks into `syncing`.
    fn take_batch(&self, st: &mut State) -> Option<Batch> {
        let props = self.write_props(st);
        let mut taking = Taking::new(self.config.background_batch);
        // (In id order; an object stays a candidate only if the batch filled up in it.)
        while let Some(id) = st.presync.candidates.pop_first() {
            if id == DATASET_TABLE_OBJECT {
                continue;
            }
            if taking.take_object(st, id, &props, ObjectState::may_presync) {
                // (It may have more whole blocks.)
                st.presync.candidates.insert(id);
                break;
            }
        }
        if taking.items.is_empty() {
            // Nothing it may take: rest until the next txg.
            st.presync.taken_bytes = st.dirty_bytes;
            return None;
        }
        Some(taking.start(st))
    }

    /// Before a sync: writes the open txg's dirty data blocks, whole or written in pieces,
    /// the way the background writer writes whole ones, without the state lock. The sync
    /// that follows then only links them, so requests wait for its metadata and the last
    /// few blocks instead of for every dirty block of the txg (random writes into large
    /// blocks leave all their blocks to the sync: up to ~2 s of stalled requests per sync
    /// on tmpfs before this). Writers go on meanwhile; a block they change again is
    /// forgotten by the usual rules, so the drain runs again over what they dirtied
    /// during the pass before (as a live migration copies again what changed), up to
    /// `DRAIN_PASSES` times. Each pass is bounded by the bytes it could take at its
    /// start; the drain stops when a sync ran meanwhile or a batch could not be written.
    pub(crate) fn drain_before_sync(&self) {
        if !self.config.background_writer {
            return;
        }
        let txg = self.lock().txg;
        let mut before = u64::MAX;
        for _pass in 0..DRAIN_PASSES {
            match self.drain_pass(txg, before / 2) {
                Some(bytes) => before = bytes,
                None => break,
            }
        }
        self.lock().presync.drain_pace = None;
    }

    /// How long a writer pauses (after its write, without the lock) so that the drain pass
    /// in progress converges (ZFS's write throttle, `dmu_tx_delay`, by the same shape of
    /// curve: no delay while the writers have dirtied less than ¾ of the pass's limit,
    /// then `DRAIN_DELAY_SCALE × excess / room left`, at most `MAX_DRAIN_DELAY`). Without
    /// it, 4 KiB random writes at queue depth 32 dirty blocks as fast as a pass writes
    /// them, and the sync writes the rest holding the lock: every request waited up to a
    /// second (docs/bench/small-io.md).
    pub(crate) fn drain_delay(&self, st: &State) -> Option<std::time::Duration> {
        pace_delay(st.presync.drain_pace?, st.dirty_bytes)
    }

    /// One pass of the drain, if at least `background_batch` and at most `most` bytes are
    /// there to take (a pass that would not be much shorter than the one before is left
    /// to the sync: writers dirty blocks as fast as it writes them). Returns the bytes it
    /// set out to take; None when the drain should stop.
    fn drain_pass(&self, txg: u64, most: u64) -> Option<u64> {
        let (ids, bytes) = {
            let mut st = self.lock();
            let (ids, bytes) = drainable(&st);
            if st.txg != txg || bytes < self.config.background_batch || bytes > most {
                return None;
            }
            st.presync.drain_pace = Some(DrainPace {
                dirty_at_start: st.dirty_bytes,
                limit: bytes / 2,
            });
            (ids, bytes)
        };
        let mut budget = bytes;
        let mut next = 0;
        while budget > 0 && !self.stop.load(Ordering::SeqCst) {
            let batch = {
                let mut st = self.lock();
                if st.txg != txg {
                    return None;
                }
                self.take_drain_batch(&mut st, &ids, &mut next)
            };
            let Some(batch) = batch else {
                break;
            };
            budget = budget.saturating_sub(batch.stored_bytes());
            if !self.write_background_batch(batch) {
                return None;
            }
        }
        Some(bytes)
    }

    /// Moves about `background_batch` bytes of drainable dirty blocks into `syncing`, from
    /// the objects `ids[*next..]` in order (so one drain looks at each object once).
    fn take_drain_batch(&self, st: &mut State, ids: &[u64], next: &mut usize) -> Option<Batch> {
        let props = self.write_props(st);
        let mut taking = Taking::new(self.config.background_batch);
        while let Some(&id) = ids.get(*next) {
            if taking.take_object(st, id, &props, ObjectState::may_drain) {
                // (It may have more: look at it again first.)
                break;
            }
            *next += 1;
        }
        if taking.items.is_empty() {
            return None;
        }
        Some(taking.start(st))
    }

    /// Compresses and checksums a batch (two threads), allocates under the lock, writes
    /// without it, and lands the pointers in `written`. False when space or a write
    /// failed (the blocks went back to `dirty`).
    fn write_background_batch(&self, batch: Batch) -> bool {
        let _io = cairn_vdev::io_class::enter(cairn_vdev::io_class::IoClass::AsyncWrite);
        let sector = self.pool().max_sector();
        let prepared = prepare_items(&batch.items, sector);
        let mut blocks: Vec<PreparedBlock> = Vec::new();
        let mut slot: Vec<Option<usize>> = Vec::with_capacity(prepared.len());
        for p in prepared {
            slot.push(p.as_ref().map(|_| blocks.len()));
            blocks.extend(p);
        }
        let dvas = {
            let mut st = self.lock();
            if st.presync.generation != batch.generation {
                self.finish(st);
                return true;
            }
            match self.pool().allocate_batch(&mut st.alloc, &blocks) {
                Ok(d) => {
                    let dvas = d.iter().flatten().filter(|x| !x.is_empty()).copied();
                    st.presync.inflight.insert(batch.id, dvas.collect());
                    st.presync.allocated_bytes += batch.bytes();
                    d
                }
                Err(_) => {
                    // Full: give the blocks back; the sync reports ENOSPC its own way.
                    give_back(&mut st, &batch.items);
                    st.presync.taken_bytes = st.dirty_bytes;
                    self.finish(st);
                    return false;
                }
            }
        };
        let results = {
            let _gate = self.read_gate.read().unwrap_or_else(|p| p.into_inner());
            self.pool().write_blocks_at(&blocks, &dvas, batch.txg)
        };
        let mut st = self.lock();
        if st.presync.generation != batch.generation {
            // A sync took the batch back and deferred its space.
            self.finish(st);
            return true;
        }
        st.presync.inflight.remove(&batch.id);
        let all_written = land(&mut st, &batch, &slot, &results, &dvas);
        self.finish(st);
        all_written
    }

    fn finish(&self, mut st: MutexGuard<'_, State>) {
        st.presync.in_flight -= 1;
        self.presync_cv.notify_all();
    }
}

/// Passes of the drain before a sync: each writes what writers dirtied during the one
/// before, so it ends with what they dirtied in a fraction of the first pass's time.
const DRAIN_PASSES: usize = 4;

/// The write throttle's curve during a drain (`StoreCore::drain_delay`): the delay when the
/// writers have dirtied ⅞ of a pass's limit, and the most any write waits.
const DRAIN_DELAY_SCALE: std::time::Duration = std::time::Duration::from_micros(200);
const MAX_DRAIN_DELAY: std::time::Duration = std::time::Duration::from_millis(10);

/// `StoreCore::drain_delay` for a pass paced by `pace` when the txg holds `dirty_bytes`.
fn pace_delay(pace: DrainPace, dirty_bytes: u64) -> Option<std::time::Duration> {
    let dirtied = dirty_bytes.saturating_sub(pace.dirty_at_start);
    let free_run = pace.limit / 4 * 3;
    if dirtied <= free_run {
        return None;
    }
    let delay = if dirtied >= pace.limit {
        MAX_DRAIN_DELAY
    } else {
        let excess = (dirtied - free_run) as f64;
        let room = (pace.limit - dirtied) as f64;
        DRAIN_DELAY_SCALE
            .mul_f64(excess / room)
            .min(MAX_DRAIN_DELAY)
    };
    Some(delay)
}

/// The objects with blocks a drain may take, in id order, and the bytes it would store.
fn drainable(st: &State) -> (Vec<u64>, u64) {
    let mut ids = Vec::new();
    let mut bytes = 0u64;
    for (&id, obj) in &st.objects {
        if id == DATASET_TABLE_OBJECT {
            continue;
        }
        let n: u64 = obj
            .dirty
            .iter()
            .filter(|(&b, _)| obj.may_drain(b))
            .map(|(&b, _)| stored_block_size(&obj.dnode, b) as u64)
            .sum();
        if n > 0 {
            ids.push(id);
            bytes += n;
        }
    }
    ids.sort_unstable();
    (ids, bytes)
}

/// A batch being taken from the open txg.
struct Taking {
    items: Vec<Item>,
    /// Dirty bytes taken (as `State::dirty_bytes` counted them).
    bytes: u64,
    /// Bytes to store, which `limit` bounds.
    stored: u64,
    limit: u64,
}

impl Taking {
    fn new(limit: u64) -> Taking {
        Taking {
            items: Vec::new(),
            bytes: 0,
            stored: 0,
            limit,
        }
    }

    /// Moves the dirty blocks of object `id` that `may_take` allows into `syncing` and the
    /// batch, until the batch is full; returns whether it is.
    fn take_object(
        &mut self,
        st: &mut State,
        id: u64,
        props: &HashMap<u32, WriteProps>,
        may_take: fn(&ObjectState, u64) -> bool,
    ) -> bool {
        let Some(obj) = st.objects.get_mut(&id) else {
            return false;
        };
        let Some(&p) = props.get(&obj.dnode.dataset) else {
            return false;
        };
        let blkids: Vec<u64> = obj
            .dirty
            .keys()
            .copied()
            .filter(|&b| may_take(obj, b))
            .collect();
        for blkid in blkids {
            let data = Arc::new(obj.dirty.remove(&blkid).expect("listed"));
            obj.written_whole.remove(&blkid);
            let stored_len = stored_block_size(&obj.dnode, blkid);
            self.bytes += data.len() as u64;
            self.stored += stored_len as u64;
            obj.syncing.insert(blkid, Arc::clone(&data));
            self.items.push(Item {
                object: id,
                blkid,
                data,
                stored_len,
                props: p,
            });
            if self.stored >= self.limit {
                return true;
            }
        }
        false
    }

    /// Counts the batch as taken and in flight.
    fn start(self, st: &mut State) -> Batch {
        st.presync.taken_bytes += self.bytes;
        st.presync.in_flight += 1;
        st.presync.next_batch += 1;
        Batch {
            id: st.presync.next_batch,
            generation: st.presync.generation,
            txg: st.txg,
            items: self.items,
        }
    }
}

/// Puts the pointers of a written batch into `written` (blocks changed meanwhile are
/// freed again); false when a write failed (those blocks go back to `dirty`).
fn land(
    st: &mut State,
    batch: &Batch,
    slot: &[Option<usize>],
    results: &[Result<BlockPointer, PoolError>],
    dvas: &[[Dva; 3]],
) -> bool {
    let mut failed: Vec<[Dva; 3]> = Vec::new();
    for (item, slot) in batch.items.iter().zip(slot) {
        let result = match *slot {
            None => Ok(BlockPointer::HOLE),
            Some(i) => results[i].as_ref().map(|bp| *bp).map_err(|_| dvas[i]),
        };
        let current = st.objects.get(&item.object).is_some_and(|o| {
            o.syncing
                .get(&item.blkid)
                .is_some_and(|d| Arc::ptr_eq(d, &item.data))
        });
        match result {
            Ok(bp) if current => {
                let obj = st.objects.get_mut(&item.object).expect("current");
                obj.syncing.remove(&item.blkid);
                obj.written.insert(item.blkid, bp);
                st.presync.landed_blocks += 1;
            }
            // Changed meanwhile: the copy written is not needed.
            Ok(bp) => defer_free(st, &bp),
            Err(d) => {
                failed.push(d);
                // (Counted at the allocation: no sync ran since, `generation` says.)
                debug_assert!(st.presync.allocated_bytes >= item.data.len() as u64);
                st.presync.allocated_bytes = st
                    .presync
                    .allocated_bytes
                    .saturating_sub(item.data.len() as u64);
                if current {
                    give_back(st, std::slice::from_ref(item));
                }
            }
        }
    }
    // Never linked and never readable: free at once.
    release_all(&mut st.alloc, &failed);
    failed.is_empty()
}

/// Puts blocks of a batch back into `dirty` (the sync writes them).
fn give_back(st: &mut State, items: &[Item]) {
    for item in items {
        if let Some(obj) = st.objects.get_mut(&item.object) {
            if obj
                .syncing
                .get(&item.blkid)
                .is_some_and(|d| Arc::ptr_eq(d, &item.data))
            {
                obj.syncing.remove(&item.blkid);
                obj.dirty
                    .entry(item.blkid)
                    .or_insert_with(|| item.data.as_ref().clone());
            }
        }
    }
}

/// `prepare_shared` on two threads; `None` = all zeros with compression on (a hole).
fn prepare_items(items: &[Item], sector: u64) -> Vec<Option<PreparedBlock>> {
    let one = |item: &Item| {
        let zero_is_hole = item.props.compression.algorithm != Compression::Off;
        let stored = &item.data[..item.stored_len];
        if zero_is_hole && stored.iter().all(|&b| b == 0) {
            None
        } else if item.stored_len < item.data.len() {
            // (The short block of a small object: a copy of its few bytes.)
            Some(prepare_shared(
                &Arc::new(stored.to_vec()),
                item.props,
                sector,
            ))
        } else {
            Some(prepare_shared(&item.data, item.props, sector))
        }
    };
    cairn_vdev::threads::split_cpu(items.iter().collect(), 4, one)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The throttle's curve: free while the writers stay under ¾ of the pass's limit,
    /// then rising with what they dirtied, `DRAIN_DELAY_SCALE` at ⅞, capped at and past
    /// the limit; what was dirty before the pass began does not count.
    #[test]
    fn writers_are_paced_only_as_a_drain_pass_nears_its_limit() {
        let pace = DrainPace {
            dirty_at_start: 1 << 30,
            limit: 64 << 20,
        };
        let at = |dirtied: u64| pace_delay(pace, (1 << 30) + dirtied);
        assert_eq!(pace_delay(pace, 0), None);
        assert_eq!(at(0), None);
        assert_eq!(at(48 << 20), None);
        let near = at(56 << 20).expect("paced at 7/8");
        assert!(near.abs_diff(DRAIN_DELAY_SCALE) < Duration::from_micros(1));
        let mut last = Duration::ZERO;
        for mib in 49..64 {
            let d = at(mib << 20).expect("paced past 3/4");
            assert!(d >= last && d <= MAX_DRAIN_DELAY, "{mib} MiB: {d:?}");
            last = d;
        }
        assert_eq!(at(64 << 20), Some(MAX_DRAIN_DELAY));
        assert_eq!(at(1 << 40), Some(MAX_DRAIN_DELAY));
    }
}
