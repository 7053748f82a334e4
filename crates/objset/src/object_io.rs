//! Objects in the open txg: create, load, write (with read-modify-write of partial
//! blocks), truncate, punch holes, free; and the object table (object 0) that holds every
//! object's dnode.

use cairn_pool::io::bp::BlockPointer;
use cairn_pool::Pool;

use crate::core::{now_ns, Prefetched, State, StoreCore};
use crate::dnode::{Dnode, ObjectKind, DNODE_SIZE};
use crate::error::StoreError;
use crate::object::{
    block_base, block_for_update, read_for_update, read_object, BlockBase, ObjectState,
};

impl StoreCore {
    // ---- objects ----------------------------------------------------------------------

    pub(crate) fn create_object_locked(
        &self,
        st: &mut State,
        kind: ObjectKind,
        dataset: u32,
        block_size: u32,
    ) -> Result<u64, StoreError> {
        st.log.unlogged.insert(dataset);
        let id = take_object_id(st);
        install_object(st, id, kind, dataset, block_size);
        Ok(id)
    }

    /// Log replay: takes id `id` for the node a CREATE record made. It is free in the
    /// txg the log replays onto: the record was logged after that txg's sync began, and a
    /// freed id is used again only after the txg that freed it commits.
    pub(crate) fn claim_object_id(&self, st: &mut State, id: u64) -> Result<(), StoreError> {
        if id >= st.next_object {
            // (The ids between stay unused until an import finds them free.)
            st.next_object = id + 1;
            return Ok(());
        }
        let free = !st.objects.contains_key(&id)
            && read_dnode(&self.pool, st, id)?.kind == ObjectKind::Free;
        if !free {
            return Err(StoreError::corrupt_object(
                "intent log",
                id,
                "a CREATE record names an object that exists".to_string(),
            ));
        }
        st.free_objects.remove(&id);
        Ok(())
    }

    /// Loads an object's state (dnode from the object table) into memory.
    pub(crate) fn object_mut<'a>(
        &self,
        st: &'a mut State,
        id: u64,
    ) -> Result<&'a mut ObjectState, StoreError> {
        if !st.objects.contains_key(&id) {
            let dnode = read_dnode(&self.pool, st, id)?;
            if dnode.kind == ObjectKind::Free {
                return Err(StoreError::corrupt_object(
                    "dnode",
                    id,
                    "the object is free".to_string(),
                ));
            }
            st.objects.insert(id, ObjectState::new(dnode));
        }
        Ok(st.objects.get_mut(&id).expect("inserted"))
    }

    pub fn dnode(&self, id: u64) -> Result<Dnode, StoreError> {
        let mut st = self.lock();
        Ok(self.object_mut(&mut st, id)?.dnode)
    }

    /// Writes `data` at `offset` of an object in the open txg.
    pub(crate) fn write_locked(
        &self,
        st: &mut State,
        id: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<(), StoreError> {
        self.write_locked_with(st, id, offset, data, &mut Prefetched::new())
    }

    /// Blocks a write of `len` bytes at `offset` covers only in part, are not dirty, and
    /// whose current contents are on disk and not in `prefetched` yet: what a
    /// read-modify-write must read first. Only the first and the last block of a range can
    /// be partial.
    pub(crate) fn blocks_to_prefetch(
        &self,
        st: &mut State,
        id: u64,
        offset: u64,
        len: usize,
        prefetched: &Prefetched,
    ) -> Result<Vec<(u64, BlockPointer)>, StoreError> {
        let bs = u64::from(self.object_mut(st, id)?.dnode.block_size);
        let end = offset + len as u64;
        let mut partial: Vec<u64> = Vec::new();
        if len == 0 {
            return Ok(Vec::new());
        }
        if !offset.is_multiple_of(bs) || end - offset < bs {
            partial.push(offset / bs);
        }
        if !end.is_multiple_of(bs) && (end - 1) / bs != offset / bs {
            partial.push((end - 1) / bs);
        }
        let State { objects, cache, .. } = st;
        let obj = objects.get(&id).expect("loaded");
        let mut wanted = Vec::new();
        for blkid in partial {
            if obj.dirty.contains_key(&blkid) {
                continue;
            }
            if let BlockBase::Disk(bp) = block_base(&self.pool, cache, id, obj, blkid)? {
                if prefetched.get(&blkid).is_none_or(|(p, _)| *p != bp) {
                    wanted.push((blkid, bp));
                }
            }
        }
        Ok(wanted)
    }

    /// `write_locked`, taking the current contents of partly written blocks from
    /// `prefetched` when they were read from the block the object still points to.
    pub(crate) fn write_locked_with(
        &self,
        st: &mut State,
        id: u64,
        offset: u64,
        data: &[u8],
        prefetched: &mut Prefetched,
    ) -> Result<(), StoreError> {
        let obj = self.object_mut(st, id)?;
        let bs = u64::from(obj.dnode.block_size);
        let mut added = 0u64;
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let blkid = pos / bs;
            let within = (pos % bs) as usize;
            let n = (bs as usize - within).min(data.len() - done);
            let whole = within == 0 && n == bs as usize;
            let present = st
                .objects
                .get(&id)
                .expect("loaded")
                .dirty
                .contains_key(&blkid);
            // A partial write to a block not yet dirty starts from its current contents.
            let base = if present || whole {
                None
            } else {
                let obj = st.objects.get(&id).expect("loaded");
                Some(
                    match block_base(&self.pool, &mut st.cache, id, obj, blkid)? {
                        BlockBase::Zeros => vec![0u8; bs as usize],
                        BlockBase::Syncing => obj.syncing[&blkid].as_ref().clone(),
                        BlockBase::Disk(bp) => match prefetched.remove(&blkid) {
                            Some((read_from, mut block)) if read_from == bp => {
                                block.resize(bs as usize, 0);
                                block
                            }
                            _ => read_for_update(&self.pool, &bp, bs as usize)?,
                        },
                    },
                )
            };
            let obj = st.objects.get_mut(&id).expect("loaded");
            if !present {
                obj.punched.remove(&blkid);
                added += bs;
                if let Some(bp) = obj.forget_presynced(blkid) {
                    defer_free(st, &bp);
                }
            }
            let obj = st.objects.get_mut(&id).expect("loaded");

            let piece = &data[done..done + n];
            if whole {
                // A whole block: take the data as is (no zero fill, no second copy).
                obj.dirty.insert(blkid, piece.to_vec());
                obj.written_whole.insert(blkid);
                st.presync.candidates.insert(id);
            } else {
                obj.written_whole.remove(&blkid);
                let block = obj
                    .dirty
                    .entry(blkid)
                    .or_insert_with(|| base.unwrap_or_default());
                block[within..within + n].copy_from_slice(piece);
            }
            done += n;
        }
        let obj = st.objects.get_mut(&id).expect("loaded");
        let end = offset + data.len() as u64;
        if end > obj.dnode.size {
            obj.dnode.size = end;
        }
        obj.dnode.mtime_ns = now_ns();
        obj.dnode.ctime_ns = obj.dnode.mtime_ns;
        obj.dnode_dirty = true;
        st.dirty_bytes += added;
        Ok(())
    }

    /// Sets an object's size; shrinking frees blocks past the end at sync.
    pub(crate) fn truncate_locked(
        &self,
        st: &mut State,
        id: u64,
        size: u64,
    ) -> Result<(), StoreError> {
        let obj = self.object_mut(st, id)?;
        let bs = u64::from(obj.dnode.block_size);
        obj.dnode_dirty = true;
        if size >= obj.dnode.size {
            obj.dnode.size = size;
            return Ok(());
        }
        let keep_blocks = size.div_ceil(bs);
        forget_presynced(st, id, keep_blocks..);
        let obj = st.objects.get_mut(&id).expect("loaded");
        obj.dirty.retain(|&b, _| b < keep_blocks);
        obj.punched.retain(|&b| b < keep_blocks);
        obj.truncate_from = Some(
            obj.truncate_from
                .map_or(keep_blocks, |f| f.min(keep_blocks)),
        );
        obj.dnode.size = size;
        // Zero the tail of the last kept block so a later extension reads zeros.
        let tail = size % bs;
        if tail != 0 {
            let last = keep_blocks - 1;
            self.write_locked(st, id, last * bs + tail, &vec![0u8; (bs - tail) as usize])?;
            st.objects.get_mut(&id).expect("loaded").dnode.size = size;
        }
        Ok(())
    }

    /// Makes [offset, offset+len) read as zeros, freeing whole blocks inside it.
    pub(crate) fn punch_locked(
        &self,
        st: &mut State,
        id: u64,
        offset: u64,
        len: u64,
    ) -> Result<(), StoreError> {
        let obj = self.object_mut(st, id)?;
        let bs = u64::from(obj.dnode.block_size);
        let size = obj.dnode.size;
        let end = (offset + len).min(size);
        if offset >= end {
            return Ok(());
        }
        let first_full = offset.div_ceil(bs);
        let last_full = end / bs; // exclusive
        if first_full < last_full {
            forget_presynced(st, id, first_full..last_full);
            let obj = st.objects.get_mut(&id).expect("loaded");
            for b in first_full..last_full {
                if obj.dirty.remove(&b).is_some() {
                    st.dirty_bytes = st.dirty_bytes.saturating_sub(bs);
                }
                obj.punched.insert(b);
            }
            obj.dnode_dirty = true;
        }
        // Partial blocks at either end are zeroed by writing.
        let head_end = (first_full * bs).min(end);
        if offset < head_end {
            self.write_locked(st, id, offset, &vec![0u8; (head_end - offset) as usize])?;
        }
        let tail_start = (last_full * bs).max(head_end);
        if tail_start < end {
            self.write_locked(st, id, tail_start, &vec![0u8; (end - tail_start) as usize])?;
        }
        Ok(())
    }

    /// Deletes an object (and the object holding its extended attributes): its blocks are
    /// freed at sync and its id reused afterwards. Its dataset's log is blocked until the
    /// next txg (a replay would not repeat the free).
    pub(crate) fn free_object_locked(&self, st: &mut State, id: u64) -> Result<(), StoreError> {
        let dataset = self.object_mut(st, id)?.dnode.dataset;
        st.log.unlogged.insert(dataset);
        self.free_nameless_locked(st, id)
    }

    /// `free_object_locked` without blocking the log: only for an object no name leads
    /// to (nlink 0) whose last name went in a change a replay repeats (a REMOVE or RENAME
    /// record, which frees it too) or in a committed txg (then it is in the unlinked set,
    /// which the next open frees). A replay never touches it again after that: a freed id
    /// is used again only after its txg commits.
    pub(crate) fn free_nameless_locked(&self, st: &mut State, id: u64) -> Result<(), StoreError> {
        let xattr = self.object_mut(st, id)?.dnode.xattr;
        if xattr != 0 && xattr != id {
            // (Only an Xattrs object, and not its own attributes: damage cannot make a loop.)
            if self.object_mut(st, xattr)?.dnode.kind == ObjectKind::Xattrs {
                self.release_object_locked(st, xattr)?;
            }
        }
        self.release_object_locked(st, id)
    }

    /// An object's dnode, unless it is gone (free, or freed in the open txg).
    pub(crate) fn live_dnode(&self, id: u64) -> Option<Dnode> {
        let mut st = self.lock();
        let o = self.object_mut(&mut st, id).ok()?;
        (!o.freeing).then_some(o.dnode)
    }

    /// Frees one object (not its attributes' object); blocks its dataset's log.
    pub(crate) fn free_one_object_locked(&self, st: &mut State, id: u64) -> Result<(), StoreError> {
        let dataset = self.object_mut(st, id)?.dnode.dataset;
        st.log.unlogged.insert(dataset);
        self.release_object_locked(st, id)
    }

    fn release_object_locked(&self, st: &mut State, id: u64) -> Result<(), StoreError> {
        let dataset = self.object_mut(st, id)?.dnode.dataset;
        crate::unlinked::note_unlinked(st, dataset, id, false);
        forget_presynced(st, id, ..);
        st.dirs.forget(id);
        let obj = st.objects.get_mut(&id).expect("loaded");
        let held = obj.dirty_bytes();
        obj.freeing = true;
        obj.dirty.clear();
        obj.dnode_dirty = true;
        st.dirty_bytes = st.dirty_bytes.saturating_sub(held);
        // A freed object leaves the error log (its id may be reused by a new object).
        let logged = st.damaged.len();
        st.damaged.retain(|&(_, object), _| object != id);
        st.damaged_dirty |= st.damaged.len() != logged;
        Ok(())
    }

    /// Sets an object's mtime and ctime to now (its data or entries changed).
    pub(crate) fn touch_changed(&self, st: &mut State, id: u64) -> Result<(), StoreError> {
        let obj = self.object_mut(st, id)?;
        let now = now_ns();
        obj.dnode.mtime_ns = now;
        obj.dnode.ctime_ns = now;
        obj.dnode_dirty = true;
        Ok(())
    }

    /// Whether the open txg holds enough dirty data to sync now.
    pub(crate) fn over_dirty_limit(&self, st: &State) -> bool {
        st.dirty_bytes >= self.config.dirty_max
    }
}

/// An id for a new object: a freed one, else the next never used.
pub(crate) fn take_object_id(st: &mut State) -> u64 {
    match st.free_objects.pop_first() {
        Some(id) => id,
        None => {
            let id = st.next_object;
            st.next_object += 1;
            id
        }
    }
}

/// A new, empty object under id `id`, dirty in the open txg.
pub(crate) fn install_object(
    st: &mut State,
    id: u64,
    kind: ObjectKind,
    dataset: u32,
    block_size: u32,
) {
    assert!(block_size.is_power_of_two() && (512..=1 << 20).contains(&block_size));
    let mut dnode = Dnode::new(kind, dataset, block_size, now_ns());
    dnode.created_txg = st.txg;
    let mut obj = ObjectState::new(dnode);
    obj.dnode_dirty = true;
    st.objects.insert(id, obj);
}

/// Reads dnode `id` from the object table (object 0).
pub(crate) fn read_dnode(pool: &Pool, st: &mut State, id: u64) -> Result<Dnode, StoreError> {
    if id >= st.next_object {
        return Err(StoreError::corrupt_object(
            "dnode",
            id,
            format!("no such object (the table ends at {})", st.next_object),
        ));
    }
    let mut buf = [0u8; DNODE_SIZE];
    let n = read_object(
        pool,
        &mut st.cache,
        0,
        &st.meta,
        id * DNODE_SIZE as u64,
        &mut buf,
    )?;
    if n < DNODE_SIZE {
        return Ok(Dnode::FREE);
    }
    Dnode::decode(&buf).map_err(|e| StoreError::corrupt_object("dnode", id, e))
}

/// Writes dnode bytes for `id` into the object table's dirty blocks.
pub(crate) fn write_meta(
    pool: &Pool,
    st: &mut State,
    id: u64,
    bytes: &[u8; DNODE_SIZE],
) -> Result<(), StoreError> {
    let bs = u64::from(st.meta.dnode.block_size);
    let offset = id * DNODE_SIZE as u64;
    let blkid = offset / bs;
    if !st.meta.dirty.contains_key(&blkid) {
        let block = block_for_update(pool, &mut st.cache, 0, &st.meta, blkid)?;
        st.meta.dirty.insert(blkid, block);
    }
    let within = (offset % bs) as usize;
    st.meta.dirty.get_mut(&blkid).expect("inserted")[within..within + DNODE_SIZE]
        .copy_from_slice(bytes);
    st.meta.dnode.size = st.meta.dnode.size.max(offset + DNODE_SIZE as u64);
    Ok(())
}

/// Largest object read whole into memory (tables, directories, the pool history): a size
/// read from disk beyond it is damage, not a reason to allocate that much.
pub const MAX_WHOLE_OBJECT: u64 = 1 << 30;

/// Whole contents of an object (tables, directories).
pub(crate) fn load_object_bytes(
    pool: &Pool,
    st: &mut State,
    id: u64,
) -> Result<Vec<u8>, StoreError> {
    if !st.objects.contains_key(&id) {
        let dnode = read_dnode(pool, st, id)?;
        st.objects.insert(id, ObjectState::new(dnode));
    }
    let obj = st.objects.get(&id).expect("loaded");
    let size = obj.dnode.size;
    if size > MAX_WHOLE_OBJECT || size > pool.space().size {
        return Err(StoreError::corrupt_object(
            "dnode",
            id,
            format!("size {size} is more than a table or directory can hold"),
        ));
    }
    let mut buf = vec![0u8; size as usize];
    read_object(pool, &mut st.cache, id, obj, 0, &mut buf)?;
    Ok(buf)
}

/// Hands the copies of a block that was written but never linked to the deferred frees of
/// the open txg (a reader may still be fetching it; the read gate covers the release).
pub(crate) fn defer_free(st: &mut State, bp: &BlockPointer) {
    let txg = st.txg;
    st.deferred.extend(bp.copies().map(|d| (txg, *d)));
}

/// Forgets what the background writer did for `blocks` of object `id`, which change again.
pub(crate) fn forget_presynced(
    st: &mut State,
    id: u64,
    blocks: impl std::ops::RangeBounds<u64> + Clone,
) {
    let Some(obj) = st.objects.get_mut(&id) else {
        return;
    };
    let mut keys: Vec<u64> = obj.syncing.range(blocks.clone()).map(|(k, _)| *k).collect();
    keys.extend(obj.written.range(blocks).map(|(k, _)| *k));
    let freed: Vec<BlockPointer> = keys
        .into_iter()
        .filter_map(|b| obj.forget_presynced(b))
        .collect();
    for bp in &freed {
        defer_free(st, bp);
    }
}
