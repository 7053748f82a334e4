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

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use cairn_pool::io::bp::{BlockPointer, Dva};
use cairn_pool::io::compress::Compression;
use cairn_pool::io::pipeline::{prepare_shared, release_all, PreparedBlock, WriteProps};

use crate::core::{State, StoreCore, DATASET_TABLE_OBJECT};
use crate::object_io::defer_free;

/// Batches of waiting dirty data at which writers pause until the background writer
/// catches up.
const MAX_BACKLOG_BATCHES: u64 = 4;

/// One block of a batch.
struct Item {
    object: u64,
    blkid: u64,
    data: Arc<Vec<u8>>,
    props: WriteProps,
}

/// Blocks taken from the open txg.
struct Batch {
    id: u64,
    generation: u64,
    txg: u64,
    items: Vec<Item>,
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
                self.write_background_batch(batch);
            }
        }
    }

    /// Data blocks the background writer wrote and handed to a sync since the store opened.
    pub fn background_blocks_landed(&self) -> u64 {
        self.lock().presync.landed_blocks
    }

    /// Lets writers go on unless the background writer is behind (then they wait for it),
    /// and wakes it when there is work. Before a sync, waits for a batch in flight.
    pub(crate) fn throttle<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        if !self.config.background_writer {
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
        let mut items = Vec::new();
        let mut bytes = 0u64;
        // (In id order; an object stays a candidate only if the batch filled up in it.)
        while let Some(id) = st.presync.candidates.pop_first() {
            if id == DATASET_TABLE_OBJECT {
                continue;
            }
            let Some(obj) = st.objects.get_mut(&id) else {
                continue;
            };
            let Some(&p) = props.get(&obj.dnode.dataset) else {
                continue;
            };
            let blkids: Vec<u64> = obj
                .dirty
                .keys()
                .copied()
                .filter(|&b| obj.may_presync(b))
                .collect();
            for blkid in blkids {
                let data = Arc::new(obj.dirty.remove(&blkid).expect("listed"));
                obj.written_whole.remove(&blkid);
                bytes += data.len() as u64;
                obj.syncing.insert(blkid, Arc::clone(&data));
                items.push(Item {
                    object: id,
                    blkid,
                    data,
                    props: p,
                });
                if bytes >= self.config.background_batch {
                    break;
                }
            }
            if bytes >= self.config.background_batch {
                // (It may have more whole blocks.)
                st.presync.candidates.insert(id);
                break;
            }
        }
        if items.is_empty() {
            // Nothing it may take: rest until the next txg.
            st.presync.taken_bytes = st.dirty_bytes;
            return None;
        }
        st.presync.taken_bytes += bytes;
        st.presync.in_flight += 1;
        st.presync.next_batch += 1;
        Some(Batch {
            id: st.presync.next_batch,
            generation: st.presync.generation,
            txg: st.txg,
            items,
        })
    }

    /// Compresses and checksums a batch (two threads), allocates under the lock, writes
    /// without it, and lands the pointers in `written`.
    fn write_background_batch(&self, batch: Batch) {
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
                return self.finish(st);
            }
            match self.pool().allocate_batch(&mut st.alloc, &blocks) {
                Ok(d) => {
                    let dvas = d.iter().flatten().filter(|x| !x.is_empty()).copied();
                    st.presync.inflight.insert(batch.id, dvas.collect());
                    d
                }
                Err(_) => {
                    // Full: give the blocks back; the sync reports ENOSPC its own way.
                    give_back(&mut st, &batch.items);
                    st.presync.taken_bytes = st.dirty_bytes;
                    return self.finish(st);
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
            return self.finish(st);
        }
        st.presync.inflight.remove(&batch.id);
        let mut failed: Vec<[Dva; 3]> = Vec::new();
        for (item, slot) in batch.items.iter().zip(slot) {
            let result = match slot {
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
                Ok(bp) => defer_free(&mut st, &bp),
                Err(d) => {
                    failed.push(d);
                    if current {
                        give_back(&mut st, std::slice::from_ref(item));
                    }
                }
            }
        }
        // Never linked and never readable: free at once.
        release_all(&mut st.alloc, &failed);
        self.finish(st)
    }

    fn finish(&self, mut st: MutexGuard<'_, State>) {
        st.presync.in_flight -= 1;
        self.presync_cv.notify_all();
    }
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
        if zero_is_hole && item.data.iter().all(|&b| b == 0) {
            None
        } else {
            Some(prepare_shared(&item.data, item.props, sector))
        }
    };
    cairn_vdev::threads::split_cpu(items.iter().collect(), 4, one)
}
