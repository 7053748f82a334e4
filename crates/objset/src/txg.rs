//! The txg sync: how the open transaction group becomes the pool's new committed state.

use std::sync::atomic::Ordering;

use cairn_pool::io::alloc::encode_space_map;
use cairn_pool::io::bp::{BlockKind, BlockPointer, Dva};
use cairn_pool::io::pipeline::{prepare, WriteProps};

use crate::core::{State, StoreCore, DATASET_TABLE_OBJECT, FREE_DELAY_TXGS};
use crate::dataset::POOL_OBJECTS;
use crate::dnode::{Dnode, DNODE_SIZE};
use crate::error::StoreError;
use crate::object::{sync_object, SyncCtx};
use crate::object_io::write_meta;
use crate::props::{default_data_props, raw_props};
use crate::root::{RootBlock, MAX_SPACE_MAP_CHUNKS, ROOT_BLOCK_SIZE};

/// Space map chunk size; halved (down to `MIN_SPACE_MAP_CHUNK`) when free space is too
/// fragmented to hold chunks this large.
const SPACE_MAP_CHUNK: usize = 128 << 10;
const MIN_SPACE_MAP_CHUNK: usize = 16 << 10;

/// One txg sync in progress: what its steps share.
///
/// ```text
///  release_deferred_frees    frees of txg−2 go back to the allocator
///  flush_dirty_dirs          directories changed in memory are encoded into their objects
///  write_dirty_objects       every dirty object but the tables (new blocks only), and the
///                            datasets' space accounting; blocks a snapshot holds go to
///                            their dataset's head dead list (`crate::snapshot`)
///  write_dead_lists          what the dead lists gained, appended to their objects
///  write_dataset_table       the dataset table (object 1), if it changed
///  save_overrides            the committed dnode of each object first changed since its
///                            dataset's newest snapshot, into that snapshot's override list
///  write_object_table        dirty dnodes into the object table (object 0), then its blocks
///  write_space_map_and_root  space map chunks and the root block (allocated first, so the
///                            map includes it)
///  commit                    flush every leaf; DTLs and spares into the labels; the
///                            uberblock on every leaf — the commit point; the open txg + 1
/// ```
/// Blocks the tree no longer points to (old copies, the previous root and space map) are
/// collected in `freed` and deferred to txg + 2.
struct TxgSync<'a> {
    store: &'a StoreCore,
    st: &'a mut State,
    txg: u64,
    metadata_copies: usize,
    freed: Vec<Dva>,
}

impl TxgSync<'_> {
    /// Writes the dirty blocks of object `id` (0: the object table itself). Blocks it stops
    /// using go to the deferred frees, or to its dataset's head dead list when a snapshot
    /// holds them (`crate::snapshot`).
    fn write_object(&mut self, id: u64, props: WriteProps) -> Result<(), StoreError> {
        let dataset = match id {
            0 => POOL_OBJECTS,
            id => self.st.objects[&id].dnode.dataset,
        };
        let pool_object = id <= DATASET_TABLE_OBJECT || dataset == POOL_OBJECTS;
        let (floor, origin_floor) = if pool_object {
            (0, 0)
        } else {
            let origin = match self.st.datasets.origin_of(dataset) {
                Some(r) => r.txg,
                None => self
                    .st
                    .snaps
                    .destroyed_clones
                    .get(&dataset)
                    .copied()
                    .unwrap_or(0),
            };
            (self.st.datasets.snapshots.floor(dataset), origin)
        };
        let mut dead = Vec::new();
        let State {
            alloc,
            cache,
            objects,
            meta,
            ..
        } = &mut *self.st;
        let obj = if id == 0 {
            meta
        } else {
            objects.get_mut(&id).expect("listed")
        };
        let mut ctx = SyncCtx {
            pool: &self.store.pool,
            alloc,
            freed: &mut self.freed,
            dead_floor: floor,
            dead: &mut dead,
            origin_floor,
            origin_released: 0,
            cache,
            txg: self.txg,
            metadata_copies: self.metadata_copies,
        };
        sync_object(&mut ctx, id, obj, props)?;
        let released = ctx.origin_released;
        if released > 0 {
            self.count_origin_released(dataset, released);
        }
        if !dead.is_empty() {
            let head = self.st.datasets.snapshots.heads.get(&dataset).copied();
            let list = head.and_then(|h| self.st.snaps.dead.get_mut(&h));
            let list = list.ok_or_else(|| {
                StoreError::corrupt(
                    "dataset table",
                    format!("dataset {dataset} has snapshots but no head dead list"),
                )
            })?;
            list.bps.extend(dead);
        }
        Ok(())
    }

    /// Adds to a clone's count of its origin's bytes it no longer uses.
    fn count_origin_released(&mut self, dataset: u32, bytes: u64) {
        use crate::dataset::ORIGIN_RELEASED_PROP;
        if let Some(ds) = self.st.datasets.by_id_mut(dataset) {
            let before: u64 = ds
                .props
                .get(ORIGIN_RELEASED_PROP)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let now = before.saturating_add(bytes);
            ds.props
                .insert(ORIGIN_RELEASED_PROP.into(), now.to_string());
            self.st.datasets_dirty = true;
        }
    }

    /// Appends what each dead list gained to its object (or rewrites a list a destroy or
    /// rollback changed), then writes those objects.
    fn write_dead_lists(&mut self) -> Result<(), StoreError> {
        let mut changed: Vec<(u64, bool, Vec<u8>)> = Vec::new();
        for (&obj, list) in self.st.snaps.dead.iter_mut() {
            if list.rewrite {
                changed.push((obj, true, list.encode_from(0)));
            } else if list.persisted < list.bps.len() {
                changed.push((obj, false, list.encode_from(list.persisted)));
            } else {
                continue;
            }
            list.persisted = list.bps.len();
            list.rewrite = false;
        }
        self.write_list_objects(changed)
    }

    /// Writes list objects: (object, rewrite whole, bytes to write: all of it, or what to
    /// append). Their blocks are pool metadata.
    fn write_list_objects(&mut self, changed: Vec<(u64, bool, Vec<u8>)>) -> Result<(), StoreError> {
        let props = BlockKind::Metadata.metadata_props(0, self.metadata_copies);
        for (obj, rewrite, bytes) in changed {
            let at = if rewrite {
                self.store.truncate_locked(self.st, obj, 0)?;
                0
            } else {
                self.store.object_mut(self.st, obj)?.dnode.size
            };
            self.store.write_locked(self.st, obj, at, &bytes)?;
            self.write_object(obj, props)?;
        }
        Ok(())
    }

    /// Saves the committed dnode of every object this txg changes for the first time since
    /// its dataset's newest snapshot into that snapshot's override list, then writes the
    /// override lists that grew. Runs before any dnode of this txg reaches the table.
    fn save_overrides(&mut self) -> Result<(), StoreError> {
        let snaps = &self.st.datasets.snapshots;
        if snaps.records.is_empty() {
            return Ok(());
        }
        let mut wanted: Vec<(u64, u64)> = Vec::new();
        for (&id, o) in &self.st.objects {
            let dn = &o.dnode;
            if !o.dnode_dirty || id <= DATASET_TABLE_OBJECT || dn.dataset == POOL_OBJECTS {
                continue;
            }
            let Some(newest) = snaps.newest(dn.dataset) else {
                continue;
            };
            let saved = self.st.snaps.overrides.get(&newest.override_object);
            if dn.created_txg <= newest.txg
                && !self.st.snaps.restored.contains(&id)
                && saved.is_some_and(|l| !l.dnodes.contains_key(&id))
            {
                wanted.push((id, newest.override_object));
            }
        }
        for (id, list) in wanted {
            let old = crate::object_io::read_dnode(&self.store.pool, self.st, id)?;
            if old.kind == crate::dnode::ObjectKind::Free {
                continue;
            }
            let list = self.st.snaps.overrides.get_mut(&list).expect("checked");
            list.dnodes.insert(id, old);
            list.pending.push(id);
        }
        let mut changed = Vec::new();
        for (&obj, list) in self.st.snaps.overrides.iter_mut() {
            if list.rewrite {
                changed.push((obj, true, list.encode_entries(list.dnodes.keys())));
            } else if !list.pending.is_empty() {
                changed.push((obj, false, list.encode_entries(list.pending.iter())));
            } else {
                continue;
            }
            list.pending.clear();
            list.rewrite = false;
        }
        self.write_list_objects(changed)
    }

    fn release_deferred_frees(&mut self) {
        let txg = self.txg;
        let (release, keep): (Vec<_>, Vec<_>) = self
            .st
            .deferred
            .drain(..)
            .partition(|(f, _)| *f + FREE_DELAY_TXGS <= txg);
        self.st.deferred = keep;
        for (_, dva) in &release {
            self.st.alloc.free(dva);
        }
    }

    fn write_dirty_objects(&mut self) -> Result<(), StoreError> {
        let props_by_dataset = self.store.write_props(self.st);
        let ids: Vec<u64> = self
            .st
            .objects
            .iter()
            .filter(|(&id, o)| id != DATASET_TABLE_OBJECT && o.is_dirty())
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            let dn = self.st.objects[&id].dnode;
            let before = (dn.used, dn.logical, dn.physical);
            let props = props_by_dataset
                .get(&dn.dataset)
                .copied()
                .unwrap_or_else(default_data_props);
            self.write_object(id, props)?;
            let dn = self.st.objects[&id].dnode;
            let after = (dn.used, dn.logical, dn.physical);
            if let Some(ds) = self.st.datasets.by_id_mut(dn.dataset) {
                ds.used = ds.used.saturating_add(after.0).saturating_sub(before.0);
                ds.logical = ds.logical.saturating_add(after.1).saturating_sub(before.1);
                ds.physical = ds.physical.saturating_add(after.2).saturating_sub(before.2);
                self.st.datasets_dirty |= after != before;
            }
        }
        Ok(())
    }

    fn write_dataset_table(&mut self) -> Result<(), StoreError> {
        if !self.st.datasets_dirty && !self.st.unlinked_dirty {
            return Ok(());
        }
        let bytes = self.st.datasets.encode();
        self.store
            .truncate_locked(self.st, DATASET_TABLE_OBJECT, 0)?;
        self.store
            .write_locked(self.st, DATASET_TABLE_OBJECT, 0, &bytes)?;
        let props = BlockKind::Metadata.metadata_props(0, self.metadata_copies);
        self.write_object(DATASET_TABLE_OBJECT, props)?;
        self.st.datasets_dirty = false;
        self.st.unlinked_dirty = false;
        Ok(())
    }

    fn write_object_table(&mut self) -> Result<(), StoreError> {
        let mut dnode_ids: Vec<u64> = self
            .st
            .objects
            .iter()
            .filter(|(_, o)| o.dnode_dirty)
            .map(|(&id, _)| id)
            .collect();
        dnode_ids.sort_unstable();
        for id in &dnode_ids {
            let obj = self.st.objects.get_mut(id).expect("listed");
            let dnode = if obj.freeing { Dnode::FREE } else { obj.dnode };
            obj.dnode_dirty = false;
            let mut bytes = [0u8; DNODE_SIZE];
            dnode.encode(&mut bytes);
            write_meta(&self.store.pool, self.st, *id, &bytes)?;
        }
        let meta_props = WriteProps {
            kind: BlockKind::Dnodes,
            ..BlockKind::Dnodes.metadata_props(0, self.metadata_copies)
        };
        if self.st.meta.is_dirty() {
            self.write_object(0, meta_props)?;
        }
        self.st.meta.dnode_dirty = false;
        // An id is used again only if no snapshot may show it: a rollback may put a
        // snapshotted dataset's object back under its id, and a snapshot that came by
        // `promote` shows ids of another dataset, which may free them meanwhile.
        let promoted = self.st.datasets.snapshots.has_promoted();
        for id in &dnode_ids {
            if self.st.objects.get(id).is_some_and(|o| o.freeing) {
                let obj = self.st.objects.remove(id).expect("checked");
                if self.st.datasets.snapshots.floor(obj.dnode.dataset) == 0 && !promoted {
                    self.st.free_objects.insert(*id);
                }
            }
        }
        Ok(())
    }

    /// Defers the previous root block and space map, allocates the new root block (so the
    /// map includes it), writes the space map, then the root block.
    fn write_space_map_and_root(
        &mut self,
    ) -> Result<(BlockPointer, Vec<BlockPointer>), StoreError> {
        let (store, txg, copies) = (self.store, self.txg, self.metadata_copies);
        self.freed.extend(self.st.root_bp.copies().copied());
        for bp in std::mem::take(&mut self.st.space_map_bps) {
            self.freed.extend(bp.copies().copied());
        }
        let freed = std::mem::take(&mut self.freed);
        self.st.deferred.extend(freed.into_iter().map(|d| (txg, d)));
        let sector = store.pool.max_sector();
        let root_copies = (copies + 1).min(3);
        let root_size = (ROOT_BLOCK_SIZE as u64).next_multiple_of(sector);
        let root_dvas = store
            .pool
            .allocate(&mut self.st.alloc, root_size, root_copies, true)?;
        let (map_len, map_bps) = store.write_space_map(self.st, txg, sector, copies)?;
        let root = RootBlock {
            txg,
            next_object: self.st.next_object,
            meta: self.st.meta.dnode,
            space_map_len: map_len,
            space_map_bps: map_bps.clone(),
            damaged: self.st.damaged.clone(),
            damaged_unlisted: self.st.damaged_unlisted,
            snapshots: !self.st.datasets.snapshots.is_empty(),
            clones: self
                .st
                .datasets
                .datasets
                .iter()
                .any(|d| d.props.contains_key(crate::dataset::ORIGIN_PROP)),
            log: self.st.log.next_head(),
            promoted: self.st.datasets.snapshots.has_promoted(),
        };
        let block = prepare(
            &root.encode(),
            raw_props(BlockKind::ObjsetRoot, root_copies),
            sector,
        );
        debug_assert_eq!(block.physical.len() as u64, root_size);
        let pool = &store.pool;
        let root_bp = pool.write_or_suspend(|| pool.write_kept(root_dvas, &block, txg))?;
        Ok((root_bp, map_bps))
    }

    /// Everything durable, then the uberblock: the commit point.
    fn commit(self, root_bp: BlockPointer, map_bps: Vec<BlockPointer>) -> Result<u64, StoreError> {
        let (pool, st, txg) = (&self.store.pool, self.st, self.txg);
        // Each step waits while the pool is suspended (`cairn_pool::suspension`); the flush
        // may fail instead, where the sync is undone (nothing names this txg's blocks yet).
        pool.write_or_suspend(|| pool.flush())?;
        // Leaves that missed this txg get it in their DTL before the txg is committed.
        pool.retry_while_suspended(|| pool.record_synced_txg(txg))?;
        // A leaf that failed for good gets a hot spare in its slot now (its config reaches
        // the labels first; this txg's uberblock already names the spare).
        pool.retry_while_suspended(|| pool.take_over_failed_leaves())?;
        let root = root_bp.to_bytes();
        pool.retry_while_suspended(|| pool.write_uberblock(txg, &root))?;
        self.store.log_after_commit(st);
        pool.note_allocated(st.alloc.vdevs.iter().map(|v| v.allocated_bytes()).collect());
        st.root_bp = root_bp;
        st.space_map_bps = map_bps;
        st.txg = txg + 1;
        self.store.open_txg_now.store(txg + 1, Ordering::SeqCst);
        st.damaged_dirty = false;
        st.dirty_bytes = 0;
        st.presync.taken_bytes = 0;
        st.presync.allocated_bytes = 0;
        st.presync.candidates.clear();
        st.objects.retain(|_, o| o.is_dirty());
        st.dirs.trim();
        st.pending.clear();
        st.snaps.restored.clear();
        Ok(txg)
    }
}

impl StoreCore {
    /// Commits the open txg; returns its number. A failed sync leaves the on-disk pool at
    /// the previous txg (reopen the store to continue from there).
    pub fn sync(&self) -> Result<u64, StoreError> {
        self.refuse_if_suspended()?;
        self.drain_before_sync();
        let mut st = self.wait_for_writer(self.lock());
        self.sync_locked(&mut st)
    }

    /// Writes the open txg's dirty data blocks now, without committing them (what a sync
    /// does first, without the state lock: `drain_before_sync`). A crash still loses
    /// exactly the open txg.
    pub fn write_early(&self) {
        self.drain_before_sync();
    }

    /// Under `failmode=continue`, while the pool is suspended: new writes and flushes fail
    /// at once with the reason (the txg they would join waits for `cairn clear`).
    pub(crate) fn refuse_if_suspended(&self) -> Result<(), StoreError> {
        match self.pool.refuses_new_writes() {
            Some(why) => Err(StoreError::Pool(cairn_pool::PoolError::Unavailable {
                pool: self.pool.name().to_string(),
                why,
            })),
            None => Ok(()),
        }
    }

    /// The sync itself, under the state lock.
    pub(crate) fn sync_locked(&self, st: &mut State) -> Result<u64, StoreError> {
        // A txg's writes are async writes in `iostat -q`/`-w`, even when a scrub or an
        // intent log commit is what asked for the sync.
        let _io = cairn_vdev::io_class::enter(cairn_vdev::io_class::IoClass::AsyncWrite);
        // Under failmode=continue a pool that cannot take writes is suspended before
        // anything changes: the sync fails at once and the store stays readable.
        if self.pool.suspend_unless_writable().is_err() {
            self.refuse_if_suspended()?;
        }
        self.take_back_background_batch(st);
        // Blocks freed two txgs ago are no longer referenced by any kept uberblock. Wait for
        // readers still fetching blocks they looked up earlier (and for a background batch
        // still writing into space it was given).
        let _no_readers = self.read_gate.write().unwrap_or_else(|p| p.into_inner());
        // Under failmode=continue a device lost part-way undoes the sync: the state it
        // started from is put back (blocks written meanwhile are in space it counts free,
        // named by nothing on disk), so lookups and reads go on while the pool is
        // suspended, and after `cairn clear` the next sync writes it all. The copy costs
        // time and memory in proportion to the state (dirty data, cached metadata, lists).
        let syncing = self.pool.begin_sync();
        let before = syncing.undoable.then(|| st.clone());
        let synced = self.write_txg(st);
        match (synced, before) {
            (Err(e), Some(before)) if self.pool.io_suspended().is_some() => {
                *st = before;
                Err(self.refuse_if_suspended().err().unwrap_or(e))
            }
            (synced, _) => synced,
        }
    }

    /// The steps of `TxgSync` in order (under the state lock and the read gate).
    fn write_txg(&self, st: &mut State) -> Result<u64, StoreError> {
        let mut sync = TxgSync {
            store: self,
            txg: st.txg,
            metadata_copies: self.config.metadata_copies.min(3),
            freed: Vec::new(),
            st,
        };
        sync.release_deferred_frees();
        self.log_before_sync(sync.st)?;
        self.flush_dirty_dirs(sync.st)?;
        sync.write_dirty_objects()?;
        sync.write_dead_lists()?;
        sync.write_dataset_table()?;
        sync.save_overrides()?;
        sync.write_object_table()?;
        let (root_bp, map_bps) = sync.write_space_map_and_root()?;
        // (Destroyed clones' objects were written above: their origins are needed no more.)
        sync.st.snaps.destroyed_clones.clear();
        sync.commit(root_bp, map_bps)
    }

    /// Encodes the space map (which must include its own chunks), writes it uncompressed.
    fn write_space_map(
        &self,
        st: &mut State,
        txg: u64,
        sector: u64,
        copies: usize,
    ) -> Result<(u64, Vec<BlockPointer>), StoreError> {
        let mut slack = 64 * 16 + 4096;
        let mut chunk_size = SPACE_MAP_CHUNK;
        for _attempt in 0..16 {
            let estimate = encode_space_map(&st.alloc, &st.deferred).len() + slack;
            let chunks = estimate.div_ceil(chunk_size);
            if chunks > MAX_SPACE_MAP_CHUNKS {
                return Err(StoreError::corrupt(
                    "space map",
                    format!("{estimate} bytes do not fit in {MAX_SPACE_MAP_CHUNKS} chunks of {chunk_size} bytes (pool too fragmented)"),
                ));
            }
            let mut sizes = Vec::with_capacity(chunks);
            let mut left = estimate;
            for _ in 0..chunks {
                let n = left.min(chunk_size);
                sizes.push((n as u64).next_multiple_of(sector) as usize);
                left -= n;
            }
            let mut dvas = Vec::with_capacity(chunks);
            let mut fragmented = false;
            for &sz in &sizes {
                match self.pool.allocate(&mut st.alloc, sz as u64, copies, true) {
                    Ok(d) => dvas.push(d),
                    Err(cairn_pool::PoolError::NoSpace(_)) if chunk_size > MIN_SPACE_MAP_CHUNK => {
                        fragmented = true;
                        break;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let map = encode_space_map(&st.alloc, &st.deferred);
            let capacity: usize = sizes.iter().sum();
            if fragmented || map.len() > capacity {
                for d in dvas.iter().flat_map(|d| d.iter()).filter(|d| !d.is_empty()) {
                    st.alloc.free(d);
                }
                if fragmented {
                    chunk_size /= 2;
                } else {
                    slack *= 4;
                }
                continue;
            }
            let mut bps = Vec::with_capacity(chunks);
            let mut pos = 0;
            for (sz, dva) in sizes.iter().zip(dvas) {
                let mut chunk = vec![0u8; *sz];
                let n = map.len().saturating_sub(pos).min(*sz);
                chunk[..n].copy_from_slice(&map[pos..pos + n]);
                pos += n;
                let block = prepare(&chunk, raw_props(BlockKind::Metadata, copies), sector);
                let pool = &self.pool;
                bps.push(pool.write_or_suspend(|| pool.write_kept(dva, &block, txg))?);
            }
            return Ok((map.len() as u64, bps));
        }
        Err(StoreError::NoSpace(self.pool.name().to_string()))
    }
}
