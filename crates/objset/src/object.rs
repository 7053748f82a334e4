//! One object's block tree: looking up, reading, and rewriting (copy-on-write) its blocks.
//!
//! ```text
//!   dnode.root ──► L2 indirect [128 BPs] ──► L1 indirect [128 BPs] ──► data block (blkid)
//!                                       └──► L1 …                 └──► data block …
//!   blkid → slot at level L: (blkid >> 7·(L−1)) & 127, indirect index at level L: blkid >> 7·L
//! ```
//! During a txg the object's new contents live in memory (`ObjectState::dirty`); at sync
//! `sync_object` writes every dirty data block to new space, rewrites the indirect blocks on
//! the path to it (bottom-up), points the dnode at the new root, and hands every replaced
//! block to the deferred-free list. A live block is never overwritten.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use cairn_pool::io::alloc::Allocator;
use cairn_pool::io::bp::{BlockKind, BlockPointer, Dva, BP_SIZE};
use cairn_pool::io::pipeline::{prepare, prepare_owned, PreparedBlock, WriteProps};
use cairn_pool::{Pool, PoolError};

use crate::dnode::{levels_for, Dnode, BPS_PER_INDIRECT, BPS_PER_INDIRECT_SHIFT, MAX_LEVELS};
use crate::error::StoreError;

/// In-memory state of an object during the open txg.
#[derive(Clone, Debug)]
pub struct ObjectState {
    pub dnode: Dnode,
    /// Full new contents of modified data blocks (each `block_size` bytes).
    pub dirty: BTreeMap<u64, Vec<u8>>,
    /// Blocks to turn into holes (trim, punch).
    pub punched: BTreeSet<u64>,
    /// Set when the object shrank: blocks from this blkid on are freed at sync.
    pub truncate_from: Option<u64>,
    /// The object is being deleted: free everything at sync.
    pub freeing: bool,
    /// The dnode changed and must be written to the object table.
    pub dnode_dirty: bool,
    /// Whole data blocks the background writer took from `dirty` and is compressing,
    /// checksumming and writing now (still read from here until they land in `written`).
    pub syncing: BTreeMap<u64, Arc<Vec<u8>>>,
    /// Data blocks of the open txg already written by the background writer, not yet
    /// linked into the tree (the sync links them; a hole = the block was all zeros).
    pub written: BTreeMap<u64, BlockPointer>,
    /// Dirty blocks whose last write covered them whole (streaming writes). Only these go
    /// to the background writer: a block written in pieces (random small writes) is likely
    /// to be written again in the same txg, and writing it early would cost a second
    /// write and, for the next piece, a read back.
    pub written_whole: BTreeSet<u64>,
}

impl ObjectState {
    pub fn new(dnode: Dnode) -> ObjectState {
        ObjectState {
            dnode,
            dirty: BTreeMap::new(),
            punched: BTreeSet::new(),
            truncate_from: None,
            freeing: false,
            dnode_dirty: false,
            syncing: BTreeMap::new(),
            written: BTreeMap::new(),
            written_whole: BTreeSet::new(),
        }
    }

    /// Whether the background writer may take block `blkid` now: a whole block of an
    /// object that lives on (not a short single-block object, whose stored size follows
    /// the object size, and not an object being deleted).
    pub fn may_presync(&self, blkid: u64) -> bool {
        self.may_drain(blkid)
            && (blkid != 0 || self.dnode.levels > 1)
            && self.written_whole.contains(&blkid)
    }

    /// Whether the drain before a sync may write block `blkid` early: any dirty block
    /// (each holds the block's whole new contents) of an object that lives on. The single
    /// block of a short object is stored short, as the sync would store it now; if the
    /// object grows past one block before the sync, the sync rewrites it whole
    /// (`sync_object`).
    pub fn may_drain(&self, _blkid: u64) -> bool {
        !self.freeing
    }

    /// Forgets what the background writer did for `blkid` because the block changes again;
    /// returns the pointer of a block it already wrote (to be freed).
    pub fn forget_presynced(&mut self, blkid: u64) -> Option<BlockPointer> {
        self.syncing.remove(&blkid);
        self.written.remove(&blkid).filter(|bp| !bp.is_hole())
    }

    pub fn is_dirty(&self) -> bool {
        self.dnode_dirty
            || !self.dirty.is_empty()
            || !self.punched.is_empty()
            || self.truncate_from.is_some()
            || self.freeing
            || !self.syncing.is_empty()
            || !self.written.is_empty()
    }

    /// Bytes of dirty data held in memory.
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty.values().map(|b| b.len() as u64).sum()
    }
}

/// Decoded indirect blocks, shared between lookups: (object, level, index) → pointers.
pub type IndirectCache = HashMap<(u64, u8, u64), Arc<Vec<BlockPointer>>>;

/// Entries kept (bounds memory: ~16 KiB each); a new one beyond evicts one.
const INDIRECT_CACHE_MAX: usize = 8192;

/// Makes room for one more entry in a full cache by evicting one: the first the map's
/// (hash-ordered, so arbitrary) iteration gives. A random-read workload over a map larger
/// than the cache then keeps most of it, where dropping the whole cache made the next
/// 8,192 lookups each read their indirect block again.
fn make_room(cache: &mut IndirectCache) {
    while cache.len() >= INDIRECT_CACHE_MAX {
        let Some(key) = cache.keys().next().copied() else {
            return;
        };
        cache.remove(&key);
    }
}

pub fn decode_indirect(buf: &[u8]) -> Result<Vec<BlockPointer>, StoreError> {
    if buf.len() != BPS_PER_INDIRECT * BP_SIZE {
        return Err(StoreError::corrupt(
            "indirect block",
            format!("{} bytes, not {}", buf.len(), BPS_PER_INDIRECT * BP_SIZE),
        ));
    }
    buf.chunks_exact(BP_SIZE)
        .map(|c| BlockPointer::decode(c).map_err(|e| StoreError::corrupt("indirect block", e)))
        .collect()
}

pub fn encode_indirect(bps: &[BlockPointer]) -> Vec<u8> {
    let mut out = vec![0u8; BPS_PER_INDIRECT * BP_SIZE];
    for (i, bp) in bps.iter().enumerate() {
        bp.encode(&mut out[i * BP_SIZE..(i + 1) * BP_SIZE]);
    }
    out
}

/// Reads (through the cache) the indirect block `bp` = (object, level, index).
pub fn load_indirect(
    pool: &Pool,
    cache: &mut IndirectCache,
    key: (u64, u8, u64),
    bp: &BlockPointer,
) -> Result<Arc<Vec<BlockPointer>>, StoreError> {
    if let Some(v) = cache.get(&key) {
        return Ok(v.clone());
    }
    let v = if bp.is_hole() {
        Arc::new(vec![BlockPointer::HOLE; BPS_PER_INDIRECT])
    } else {
        if bp.kind != BlockKind::Indirect {
            return Err(StoreError::corrupt_object(
                "block pointer",
                key.0,
                format!("expected an indirect block, found {:?}", bp.kind),
            ));
        }
        Arc::new(decode_indirect(&pool.read_bp(bp)?)?)
    };
    make_room(cache);
    cache.insert(key, v.clone());
    Ok(v)
}

/// The pointer of data block `blkid` as last synced.
pub fn lookup_bp(
    pool: &Pool,
    cache: &mut IndirectCache,
    object: u64,
    dnode: &Dnode,
    blkid: u64,
) -> Result<BlockPointer, StoreError> {
    let top = dnode.levels - 1;
    if top == 0 {
        return Ok(if blkid == 0 {
            dnode.root
        } else {
            BlockPointer::HOLE
        });
    }
    if blkid >> (BPS_PER_INDIRECT_SHIFT * u32::from(top)) != 0 {
        return Ok(BlockPointer::HOLE);
    }
    let mut bp = dnode.root;
    for level in (1..=top).rev() {
        if bp.is_hole() {
            return Ok(BlockPointer::HOLE);
        }
        let index = blkid >> (BPS_PER_INDIRECT_SHIFT * u32::from(level));
        let entries = load_indirect(pool, cache, (object, level, index), &bp)?;
        let slot = (blkid >> (BPS_PER_INDIRECT_SHIFT * u32::from(level - 1))) as usize
            & (BPS_PER_INDIRECT - 1);
        bp = entries[slot];
    }
    Ok(bp)
}

/// Everything a sync needs besides the object: the pool, allocator, frees, cache.
pub struct SyncCtx<'a> {
    pub pool: &'a Pool,
    pub alloc: &'a mut Allocator,
    /// Frees of this txg (released to the allocator three txgs later).
    pub freed: &'a mut Vec<Dva>,
    /// Blocks born at or before this txg outlive the object's dataset head: a snapshot
    /// holds them, so they go to `dead` instead of `freed` (0: no snapshot; `crate::snapshot`).
    pub dead_floor: u64,
    pub dead: &'a mut Vec<BlockPointer>,
    /// A clone's origin txg: blocks born at or before it belong to the origin snapshot,
    /// which keeps them; the clone only stops counting them (0: not a clone; `crate::clone`).
    pub origin_floor: u64,
    /// Bytes of such blocks this sync stopped using.
    pub origin_released: u64,
    pub cache: &'a mut IndirectCache,
    pub txg: u64,
    /// Metadata copies (2, or more with `copies`).
    pub metadata_copies: usize,
}

impl SyncCtx<'_> {
    fn free_bp(&mut self, bp: &BlockPointer, dnode: &mut Dnode) {
        if bp.is_hole() {
            return;
        }
        dnode.used = dnode.used.saturating_sub(self.pool.deflated_size(bp));
        dnode.logical = dnode.logical.saturating_sub(u64::from(bp.lsize));
        dnode.physical = dnode.physical.saturating_sub(u64::from(bp.psize));
        if bp.birth <= self.origin_floor {
            self.origin_released += self.pool.deflated_size(bp);
        } else if bp.birth <= self.dead_floor {
            self.dead.push(*bp);
        } else {
            self.freed.extend(bp.copies().copied());
        }
    }

    fn account_new(&self, bp: &BlockPointer, dnode: &mut Dnode) {
        dnode.used += self.pool.deflated_size(bp);
        dnode.logical += u64::from(bp.lsize);
        dnode.physical += u64::from(bp.psize);
    }

    /// Allocates and writes one block; waits while the pool is suspended, or fails at once
    /// where the sync is undone (`cairn_pool::suspension`, `crate::txg`).
    fn write(&mut self, block: &PreparedBlock) -> Result<BlockPointer, StoreError> {
        let (pool, alloc, txg) = (self.pool, &mut *self.alloc, self.txg);
        Ok(pool.write_or_suspend(|| pool.write_prepared(alloc, block, txg))?)
    }
}

/// Indirect blocks being rewritten in this sync: (level, index) → pointers.
type DirtyIndirects = BTreeMap<(u8, u64), Vec<BlockPointer>>;

/// Loads the chain of indirect blocks down to (level, index) into `dirty`.
fn ensure_dirty(
    ctx: &mut SyncCtx<'_>,
    object: u64,
    dnode: &Dnode,
    dirty: &mut DirtyIndirects,
    level: u8,
    index: u64,
) -> Result<(), StoreError> {
    if dirty.contains_key(&(level, index)) {
        return Ok(());
    }
    let top = dnode.levels - 1;
    let bp = if level == top {
        debug_assert_eq!(index, 0);
        dnode.root
    } else {
        let parent = index >> BPS_PER_INDIRECT_SHIFT;
        ensure_dirty(ctx, object, dnode, dirty, level + 1, parent)?;
        dirty[&(level + 1, parent)][index as usize & (BPS_PER_INDIRECT - 1)]
    };
    let entries = load_indirect(ctx.pool, ctx.cache, (object, level, index), &bp)?;
    dirty.insert((level, index), entries.as_ref().clone());
    Ok(())
}

/// Replaces the pointer of data block `blkid`, returning the old one.
fn set_data_bp(
    ctx: &mut SyncCtx<'_>,
    object: u64,
    dnode: &mut Dnode,
    dirty: &mut DirtyIndirects,
    blkid: u64,
    bp: BlockPointer,
) -> Result<BlockPointer, StoreError> {
    if dnode.levels == 1 {
        assert_eq!(blkid, 0, "single-level objects have one block");
        return Ok(std::mem::replace(&mut dnode.root, bp));
    }
    let index = blkid >> BPS_PER_INDIRECT_SHIFT;
    ensure_dirty(ctx, object, dnode, dirty, 1, index)?;
    let slot = blkid as usize & (BPS_PER_INDIRECT - 1);
    let entries = dirty.get_mut(&(1, index)).expect("just loaded");
    Ok(std::mem::replace(&mut entries[slot], bp))
}

/// Frees every data block from `from` on, walking only the parts of the tree that exist.
fn free_from(
    ctx: &mut SyncCtx<'_>,
    object: u64,
    dnode: &mut Dnode,
    dirty: &mut DirtyIndirects,
    from: u64,
) -> Result<(), StoreError> {
    if dnode.levels == 1 {
        if from == 0 {
            let old = std::mem::replace(&mut dnode.root, BlockPointer::HOLE);
            ctx.free_bp(&old, dnode);
        }
        return Ok(());
    }
    free_subtree(ctx, object, dnode, dirty, dnode.levels - 1, 0, from)
}

fn free_subtree(
    ctx: &mut SyncCtx<'_>,
    object: u64,
    dnode: &mut Dnode,
    dirty: &mut DirtyIndirects,
    level: u8,
    index: u64,
    from: u64,
) -> Result<(), StoreError> {
    let span_child = 1u64 << (BPS_PER_INDIRECT_SHIFT * u32::from(level - 1));
    let first_blk = index << (BPS_PER_INDIRECT_SHIFT * u32::from(level));
    let end_blk = first_blk + (span_child << BPS_PER_INDIRECT_SHIFT);
    if end_blk <= from {
        return Ok(());
    }
    let bp_here = if level == dnode.levels - 1 {
        dnode.root
    } else {
        dirty
            .get(&(level + 1, index >> BPS_PER_INDIRECT_SHIFT))
            .map(|e| e[index as usize & (BPS_PER_INDIRECT - 1)])
            .unwrap_or(BlockPointer::HOLE)
    };
    if bp_here.is_hole() && !dirty.contains_key(&(level, index)) {
        return Ok(());
    }
    ensure_dirty(ctx, object, dnode, dirty, level, index)?;
    for slot in 0..BPS_PER_INDIRECT {
        let child_first = first_blk + slot as u64 * span_child;
        if child_first + span_child <= from {
            continue;
        }
        if level == 1 {
            let entries = dirty.get_mut(&(1, index)).expect("loaded");
            let old = std::mem::replace(&mut entries[slot], BlockPointer::HOLE);
            ctx.free_bp(&old, dnode);
        } else {
            let child = (index << BPS_PER_INDIRECT_SHIFT) + slot as u64;
            free_subtree(ctx, object, dnode, dirty, level - 1, child, from)?;
        }
    }
    Ok(())
}

/// Size of data block `blkid` as stored: objects of one block store only what they use
/// (rounded to 512 B), larger objects store whole blocks.
pub(crate) fn stored_block_size(dnode: &Dnode, blkid: u64) -> usize {
    let bs = u64::from(dnode.block_size);
    if dnode.levels == 1 && blkid == 0 && dnode.size <= bs {
        dnode.size.clamp(1, bs).next_multiple_of(512) as usize
    } else {
        bs as usize
    }
}

/// Writes an object's dirty state: data blocks, then indirect blocks bottom-up, then the
/// new root into the dnode. Old blocks go to `ctx.freed`.
pub fn sync_object(
    ctx: &mut SyncCtx<'_>,
    object: u64,
    st: &mut ObjectState,
    props: WriteProps,
) -> Result<(), StoreError> {
    let mut dirty: DirtyIndirects = BTreeMap::new();
    let mut dnode = st.dnode;
    if st.freeing {
        free_from(ctx, object, &mut dnode, &mut dirty, 0)?;
        st.dirty.clear();
        st.punched.clear();
    } else if let Some(from) = st.truncate_from {
        free_from(ctx, object, &mut dnode, &mut dirty, from)?;
    }
    // Grow the tree so every block is addressable (a new top level holds the old root).
    debug_assert!(
        st.syncing.is_empty(),
        "the background writer is done before a sync"
    );
    let highest = st
        .dirty
        .keys()
        .next_back()
        .max(st.written.keys().next_back())
        .map(|b| b + 1)
        .unwrap_or(0);
    let need = levels_for(dnode.block_count().max(highest).max(1));
    if need > MAX_LEVELS {
        return Err(StoreError::TooLarge(object));
    }
    grow_tree(ctx, object, st, &mut dnode, &mut dirty, need)?;
    // Blocks the background writer already wrote: link them (each was forgotten again if
    // it changed after it was taken, so what is here is current).
    for (blkid, bp) in std::mem::take(&mut st.written) {
        if !bp.is_hole() {
            ctx.account_new(&bp, &mut dnode);
        }
        let old = set_data_bp(ctx, object, &mut dnode, &mut dirty, blkid, bp)?;
        ctx.free_bp(&old, &mut dnode);
    }
    for blkid in std::mem::take(&mut st.punched) {
        if !st.dirty.contains_key(&blkid) {
            let old = set_data_bp(
                ctx,
                object,
                &mut dnode,
                &mut dirty,
                blkid,
                BlockPointer::HOLE,
            )?;
            ctx.free_bp(&old, &mut dnode);
        }
    }
    st.written_whole.clear();
    write_data_blocks(ctx, object, st, &mut dnode, &mut dirty, props)?;
    write_indirects(ctx, object, &mut dnode, dirty)?;
    st.dnode = dnode;
    st.truncate_from = None;
    st.dnode_dirty = true;
    Ok(())
}

/// Adds levels to an object's tree until it has `need` (a new top level holds the old
/// root). A single short block becomes block 0 of a multi-block object: it is rewritten
/// whole.
fn grow_tree(
    ctx: &mut SyncCtx<'_>,
    object: u64,
    st: &mut ObjectState,
    dnode: &mut Dnode,
    dirty: &mut DirtyIndirects,
    need: u8,
) -> Result<(), StoreError> {
    if dnode.levels == 1 && need > 1 {
        // The single block written early was stored short: link it, so that the rewrite
        // below starts from it.
        if let Some(bp) = st.written.remove(&0) {
            if !bp.is_hole() {
                ctx.account_new(&bp, dnode);
            }
            let old = set_data_bp(ctx, object, dnode, dirty, 0, bp)?;
            ctx.free_bp(&old, dnode);
        }
    }
    if dnode.levels == 1 && need > 1 && !dnode.root.is_hole() && dnode.root.lsize < dnode.block_size
    {
        // A single short block becomes block 0 of a multi-block object: rewrite it whole.
        // (A whole one, as the drain writes the first block of a file still being
        // written, serves as it is.)
        if let std::collections::btree_map::Entry::Vacant(e) = st.dirty.entry(0) {
            let mut data = ctx.pool.read_bp(&dnode.root)?;
            data.resize(dnode.block_size as usize, 0);
            e.insert(data);
        }
    }
    while dnode.levels < need {
        let mut entries = vec![BlockPointer::HOLE; BPS_PER_INDIRECT];
        entries[0] = std::mem::replace(&mut dnode.root, BlockPointer::HOLE);
        dirty.insert((dnode.levels, 0), entries);
        dnode.levels += 1;
    }
    Ok(())
}

/// Bytes of dirty data prepared and written per batch (bounds the extra memory of a sync).
const SYNC_BATCH_BYTES: usize = 64 << 20;

/// Compresses and checksums dirty blocks on two threads, then allocates and writes them in
/// batches, each batch as a few large requests per leaf.
fn write_data_blocks(
    ctx: &mut SyncCtx<'_>,
    object: u64,
    st: &mut ObjectState,
    dnode: &mut Dnode,
    dirty: &mut DirtyIndirects,
    props: WriteProps,
) -> Result<(), StoreError> {
    let sector = ctx.pool.max_sector();
    let zero_is_hole = props.compression.algorithm != cairn_pool::io::compress::Compression::Off;
    let mut blocks = std::mem::take(&mut st.dirty).into_iter().peekable();
    while blocks.peek().is_some() {
        let mut batch: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut bytes = 0usize;
        while let Some((blkid, mut data)) = blocks.next_if(|_| bytes < SYNC_BATCH_BYTES) {
            data.truncate(stored_block_size(dnode, blkid));
            bytes += data.len();
            batch.push((blkid, data));
        }
        let prepared = prepare_parallel(batch, props, sector, zero_is_hole);
        let mut order: Vec<(u64, bool)> = Vec::with_capacity(prepared.len());
        let mut to_write: Vec<PreparedBlock> = Vec::with_capacity(prepared.len());
        for (blkid, block) in prepared {
            order.push((blkid, block.is_some()));
            to_write.extend(block);
        }
        let (pool, alloc, txg) = (ctx.pool, &mut *ctx.alloc, ctx.txg);
        let written = pool.write_or_suspend(|| pool.write_prepared_batch(alloc, &to_write, txg))?;
        drop(to_write);
        let mut written = written.into_iter();
        for (blkid, stored) in order {
            let bp = if stored {
                written.next().expect("one pointer per block")
            } else {
                BlockPointer::HOLE
            };
            if !bp.is_hole() {
                ctx.account_new(&bp, dnode);
            }
            let old = set_data_bp(ctx, object, dnode, dirty, blkid, bp)?;
            ctx.free_bp(&old, dnode);
        }
    }
    Ok(())
}

/// `prepare` on up to two threads (the machine class has two cores). `None` = all zeros,
/// stored as a hole.
fn prepare_parallel(
    jobs: Vec<(u64, Vec<u8>)>,
    props: WriteProps,
    sector: u64,
    zero_is_hole: bool,
) -> Vec<(u64, Option<PreparedBlock>)> {
    let one = |(blkid, data): (u64, Vec<u8>)| {
        if zero_is_hole && data.iter().all(|&b| b == 0) {
            (blkid, None)
        } else {
            (blkid, Some(prepare_owned(data, props, sector)))
        }
    };
    let bytes: usize = jobs.iter().map(|j| j.1.len()).sum();
    let min_items = if bytes < (1 << 20) { usize::MAX } else { 4 };
    cairn_vdev::threads::split_cpu(jobs, min_items, one)
}

/// Writes dirty indirect blocks from level 1 up, linking each into its parent.
fn write_indirects(
    ctx: &mut SyncCtx<'_>,
    object: u64,
    dnode: &mut Dnode,
    mut dirty: DirtyIndirects,
) -> Result<(), StoreError> {
    let top = dnode.levels - 1;
    let sector = ctx.pool.max_sector();
    for level in 1..=top {
        let keys: Vec<(u8, u64)> = dirty
            .range((level, 0)..=(level, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            let entries = dirty.remove(&key).expect("key listed");
            let new_bp = if entries.iter().all(|b| b.is_hole()) {
                BlockPointer::HOLE
            } else {
                let props = BlockKind::Indirect.metadata_props(level, ctx.metadata_copies);
                let block = prepare(&encode_indirect(&entries), props, sector);
                let bp = ctx.write(&block)?;
                ctx.account_new(&bp, dnode);
                bp
            };
            ctx.cache.insert((object, level, key.1), Arc::new(entries));
            let old = if level == top {
                std::mem::replace(&mut dnode.root, new_bp)
            } else {
                let parent = (level + 1, key.1 >> BPS_PER_INDIRECT_SHIFT);
                ensure_dirty(ctx, object, dnode, &mut dirty, parent.0, parent.1)?;
                let slot = key.1 as usize & (BPS_PER_INDIRECT - 1);
                let entries = dirty.get_mut(&parent).expect("loaded");
                std::mem::replace(&mut entries[slot], new_bp)
            };
            ctx.free_bp(&old, dnode);
        }
    }
    Ok(())
}

/// Reads `buf.len()` bytes at `offset` of an object (dirty data first, then disk). Blocks
/// that come from disk are fetched in one batch.
pub fn read_object(
    pool: &Pool,
    cache: &mut IndirectCache,
    object: u64,
    st: &ObjectState,
    offset: u64,
    buf: &mut [u8],
) -> Result<usize, StoreError> {
    let plan = plan_read(pool, cache, object, st, offset, buf)?;
    plan.fetch(pool, buf)?;
    Ok(plan.len)
}

/// A read split in two: what memory and the tree could answer (already copied into the
/// buffer), and the on-disk blocks still to fetch, which need no lock.
pub struct ReadPlan {
    pub len: usize,
    offset: u64,
    block_size: u64,
    /// (block id, pointer) of blocks to read from disk.
    wanted: Vec<(u64, BlockPointer)>,
}

/// Fills `buf` from dirty data and holes, and lists the blocks that must come from disk.
pub fn plan_read(
    pool: &Pool,
    cache: &mut IndirectCache,
    object: u64,
    st: &ObjectState,
    offset: u64,
    buf: &mut [u8],
) -> Result<ReadPlan, StoreError> {
    let size = st.dnode.size;
    let bs = u64::from(st.dnode.block_size);
    let mut plan = ReadPlan {
        len: 0,
        offset,
        block_size: bs,
        wanted: Vec::new(),
    };
    if offset >= size {
        return Ok(plan);
    }
    plan.len = (buf.len() as u64).min(size - offset) as usize;
    let mut done = 0usize;
    while done < plan.len {
        let pos = offset + done as u64;
        let blkid = pos / bs;
        let within = (pos % bs) as usize;
        let n = (bs as usize - within).min(plan.len - done);
        let out = &mut buf[done..done + n];
        match block_source(pool, cache, object, st, blkid)? {
            BlockSource::Memory(block) => out.copy_from_slice(&block[within..within + n]),
            BlockSource::Zeros => out.fill(0),
            BlockSource::Disk(bp) => plan.wanted.push((blkid, bp)),
        }
        done += n;
    }
    Ok(plan)
}

/// Where a block's current contents are.
enum BlockSource<'a> {
    /// Dirty or being synced.
    Memory(&'a [u8]),
    /// A hole, punched, or past a truncate.
    Zeros,
    Disk(BlockPointer),
}

fn block_source<'a>(
    pool: &Pool,
    cache: &mut IndirectCache,
    object: u64,
    st: &'a ObjectState,
    blkid: u64,
) -> Result<BlockSource<'a>, StoreError> {
    if let Some(block) = st.dirty.get(&blkid) {
        return Ok(BlockSource::Memory(block));
    }
    if let Some(block) = st.syncing.get(&blkid) {
        return Ok(BlockSource::Memory(block));
    }
    if !st.written.contains_key(&blkid)
        && (st.punched.contains(&blkid) || st.truncate_from.is_some_and(|f| blkid >= f))
    {
        // (A block written early is newer than any punch or truncate: those forget it.)
        return Ok(BlockSource::Zeros);
    }
    let bp = match st.written.get(&blkid) {
        Some(bp) => *bp,
        None => lookup_bp(pool, cache, object, &st.dnode, blkid)?,
    };
    Ok(match bp.is_hole() {
        true => BlockSource::Zeros,
        false => BlockSource::Disk(bp),
    })
}

/// The on-disk blocks holding bytes `[from, to)` of an object (read-ahead: dirty blocks
/// and holes are left out).
pub(crate) fn disk_blocks(
    pool: &Pool,
    cache: &mut IndirectCache,
    object: u64,
    st: &ObjectState,
    from: u64,
    to: u64,
) -> Result<Vec<BlockPointer>, StoreError> {
    let bs = u64::from(st.dnode.block_size).max(1);
    let last = to.min(st.dnode.size).div_ceil(bs);
    let mut bps = Vec::new();
    for blkid in from / bs..last {
        if let BlockSource::Disk(bp) = block_source(pool, cache, object, st, blkid)? {
            bps.push(bp);
        }
    }
    Ok(bps)
}

impl ReadPlan {
    /// Reads the listed blocks (verified, self-healing) into their places in `buf`. A block
    /// wholly inside the range is read straight into `buf`; of a block the range covers in
    /// part, the part is copied from the block as the block cache holds it (read into the
    /// cache first if need be: one buffer, no scratch copy).
    pub fn fetch(&self, pool: &Pool, buf: &mut [u8]) -> Result<(), StoreError> {
        let mut targets: Vec<(BlockPointer, &mut [u8])> = Vec::with_capacity(self.wanted.len());
        // Partly covered blocks: (pointer, where their part starts in the block, where it
        // goes in `buf`, its length).
        let mut partial: Vec<(BlockPointer, usize, usize, usize)> = Vec::new();
        let mut rest: &mut [u8] = buf;
        let mut rest_at = self.offset;
        for (blkid, bp) in &self.wanted {
            let block_start = blkid * self.block_size;
            // The part of this block inside the requested range.
            let from = self.offset.max(block_start);
            let to = (self.offset + self.len as u64).min(block_start + self.block_size);
            let (_, after) = std::mem::take(&mut rest).split_at_mut((from - rest_at) as usize);
            let (out, after) = after.split_at_mut((to - from) as usize);
            rest = after;
            rest_at = to;
            let within = (from - block_start) as usize;
            if within == 0 && out.len() == bp.lsize as usize {
                targets.push((*bp, out));
            } else {
                partial.push((*bp, within, (from - self.offset) as usize, out.len()));
            }
        }
        if !targets.is_empty() {
            for r in pool.read_bps_into(&mut targets) {
                r?;
            }
        }
        drop(targets);
        if partial.is_empty() {
            return Ok(());
        }
        let bps: Vec<BlockPointer> = partial.iter().map(|p| p.0).collect();
        for ((_, within, at, len), block) in partial.iter().zip(pool.read_bps_shared(&bps)) {
            copy_part(&mut buf[*at..*at + *len], &block?, *within);
        }
        Ok(())
    }
}

/// Copies the part of `block` from `within` into `out`. A block stored shorter than the
/// object's block size (the single block of a file that was small when written, since
/// extended) reads as zeros past its end.
fn copy_part(out: &mut [u8], block: &[u8], within: usize) {
    let stored = block.get(within..).unwrap_or(&[]);
    let avail = stored.len().min(out.len());
    out[..avail].copy_from_slice(&stored[..avail]);
    out[avail..].fill(0);
}

/// Where the current contents of a block come from, for a read-modify-write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockBase {
    /// A hole, punched or past a truncation: zeros.
    Zeros,
    /// In memory, taken by the background writer (`ObjectState::syncing`).
    Syncing,
    /// On disk at this pointer.
    Disk(BlockPointer),
}

/// Where the current contents of block `blkid` are (its dirty copy aside).
pub fn block_base(
    pool: &Pool,
    cache: &mut IndirectCache,
    object: u64,
    st: &ObjectState,
    blkid: u64,
) -> Result<BlockBase, StoreError> {
    if st.syncing.contains_key(&blkid) {
        return Ok(BlockBase::Syncing);
    }
    let bp = match st.written.get(&blkid) {
        // Written early: newer than any punch or truncate (those forget it).
        Some(bp) => *bp,
        None if st.punched.contains(&blkid) || st.truncate_from.is_some_and(|f| blkid >= f) => {
            return Ok(BlockBase::Zeros);
        }
        None => lookup_bp(pool, cache, object, &st.dnode, blkid)?,
    };
    Ok(if bp.is_hole() {
        BlockBase::Zeros
    } else {
        BlockBase::Disk(bp)
    })
}

/// Reads a block for an update: `block_size` bytes, verified.
pub fn read_for_update(
    pool: &Pool,
    bp: &BlockPointer,
    block_size: usize,
) -> Result<Vec<u8>, StoreError> {
    let mut data = pool.read_bp(bp)?;
    data.resize(block_size, 0);
    Ok(data)
}

/// The current contents of block `blkid` (for read-modify-write), `block_size` bytes.
pub fn block_for_update(
    pool: &Pool,
    cache: &mut IndirectCache,
    object: u64,
    st: &ObjectState,
    blkid: u64,
) -> Result<Vec<u8>, StoreError> {
    let bs = st.dnode.block_size as usize;
    match block_base(pool, cache, object, st, blkid)? {
        BlockBase::Zeros => Ok(vec![0u8; bs]),
        BlockBase::Syncing => Ok(st.syncing[&blkid].as_ref().clone()),
        BlockBase::Disk(bp) => read_for_update(pool, &bp, bs),
    }
}

impl From<PoolError> for StoreError {
    fn from(e: PoolError) -> Self {
        StoreError::Pool(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_indirect_cache_evicts_one_entry_not_all() {
        let mut cache = IndirectCache::new();
        let entry = Arc::new(Vec::new());
        for index in 0..INDIRECT_CACHE_MAX as u64 {
            make_room(&mut cache);
            cache.insert((1, 1, index), entry.clone());
        }
        assert_eq!(cache.len(), INDIRECT_CACHE_MAX);
        make_room(&mut cache);
        cache.insert((1, 1, u64::MAX), entry);
        assert_eq!(cache.len(), INDIRECT_CACHE_MAX);
        assert!(cache.contains_key(&(1, 1, u64::MAX)));
    }
}
