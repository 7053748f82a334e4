//! Directories in the open txg: read once, changed in memory, written at sync.
//!
//! A directory is stored in one of two formats (`crate::dir`): DIR1, one sorted list no
//! larger than one 16 KiB block, or DIR2 (`crate::dir2`), hashed over many blocks.
//!
//! ```text
//!  DirCache: object id ─► Small  (DIR1)  the whole map, decoded          ─► encoded whole
//!                     └─► Hashed (DIR2)  header + table blocks + leaves  ─► dirty blocks
//!                                        read so far, dirty or clean         only
//! ```
//! This module holds the cache and reads directory blocks; the operations on it, which
//! take the store's `State`, are in `crate::dir_ops`.
//!
//! Callers go through `dir_lookup`, `dir_insert`, `dir_remove`, `dir_is_empty`,
//! `dir_len` and `dir_list`, never through the object bytes. A DIR1 directory whose
//! encoding grows past one block becomes DIR2 in memory (`maybe_convert`) and the next
//! sync rewrites its object whole, once; from then on every operation reads and dirties
//! O(1) blocks and `flush_dirty_dirs` (the first step of the sync) writes only the dirty
//! blocks, at their offsets. Invariants:
//!
//! - a cached directory, or a cached block of one, marked dirty is newer than its
//!   object's data;
//! - a freed directory leaves the cache (`forget`), so a reused object id starts clean;
//! - after a sync everything cached is clean, and clean state may be dropped at any time
//!   (`trim`, and a DIR2 directory's own leaf cap, `dir2::MAX_CACHED_LEAVES`) — it is read
//!   again from the object on next use.

use std::collections::HashMap;

use cairn_pool::Pool;

use crate::dir::{Directory, DIR_BLOCK};
use crate::dir2::{BlockSource, HashedDir};
use crate::error::StoreError;
use crate::object::{read_object, IndirectCache, ObjectState};

/// Clean entries kept after a sync beyond this many in all are dropped.
const KEEP_CLEAN_ENTRIES: usize = 1 << 20;

#[derive(Clone, Default)]
pub(crate) struct DirCache {
    pub(crate) dirs: HashMap<u64, CachedDir>,
}

#[derive(Clone)]
pub(crate) enum CachedDir {
    /// DIR1: the whole directory.
    Small(SmallDir),
    /// DIR2: what has been read of it.
    Hashed(Box<HashedDir>),
}

#[derive(Clone)]
pub(crate) struct SmallDir {
    pub(crate) dir: Directory,
    /// `dir.encoded_len()`, kept up to date.
    pub(crate) bytes: usize,
    pub(crate) dirty: bool,
    /// A conversion to DIR2 failed (not tried again while it is cached).
    pub(crate) stays_dir1: bool,
}

impl CachedDir {
    pub(crate) fn is_dirty(&self) -> bool {
        match self {
            CachedDir::Small(s) => s.dirty,
            CachedDir::Hashed(h) => h.is_dirty(),
        }
    }

    fn cached_entries(&self) -> usize {
        match self {
            CachedDir::Small(s) => s.dir.entries.len(),
            CachedDir::Hashed(h) => h.cached_entries(),
        }
    }
}

impl DirCache {
    pub fn any_dirty(&self) -> bool {
        self.dirs.values().any(|d| d.is_dirty())
    }

    /// The directories changed in the open txg.
    pub fn dirty_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.dirs
            .iter()
            .filter(|(_, d)| d.is_dirty())
            .map(|(&id, _)| id)
    }

    /// Drops a freed directory.
    pub fn forget(&mut self, id: u64) {
        self.dirs.remove(&id);
    }

    /// Drops clean directories and leaves when the cache holds too many entries.
    pub fn trim(&mut self) {
        let total: usize = self.dirs.values().map(CachedDir::cached_entries).sum();
        if total > KEEP_CLEAN_ENTRIES {
            self.dirs.retain(|_, d| d.is_dirty());
            for d in self.dirs.values_mut() {
                if let CachedDir::Hashed(h) = d {
                    h.drop_clean();
                }
            }
        }
    }
}

/// The blocks of directory object `id` as the open txg sees them.
pub(crate) struct ObjectBlocks<'a> {
    pub(crate) pool: &'a Pool,
    pub(crate) objects: &'a HashMap<u64, ObjectState>,
    pub(crate) cache: &'a mut IndirectCache,
    pub(crate) id: u64,
}

impl ObjectBlocks<'_> {
    pub(crate) fn object(&self) -> Result<&ObjectState, StoreError> {
        self.objects
            .get(&self.id)
            .ok_or_else(|| not_loaded(self.id))
    }
}

impl BlockSource for ObjectBlocks<'_> {
    fn read_blocks(&mut self, first: u64, count: usize) -> Result<Vec<u8>, StoreError> {
        let obj = self
            .objects
            .get(&self.id)
            .ok_or_else(|| not_loaded(self.id))?;
        read_dir_blocks(self.pool, self.cache, self.id, obj, first, count)
    }
}

fn not_loaded(id: u64) -> StoreError {
    StoreError::corrupt_object("directory", id, "its dnode is not loaded".to_string())
}

/// `count` blocks of directory object `id` from block `first` on (checked against its size).
pub(crate) fn read_dir_blocks(
    pool: &Pool,
    cache: &mut IndirectCache,
    id: u64,
    obj: &ObjectState,
    first: u64,
    count: usize,
) -> Result<Vec<u8>, StoreError> {
    let size = obj.dnode.size;
    let end = first
        .checked_add(count as u64)
        .and_then(|e| e.checked_mul(DIR_BLOCK as u64));
    if end.is_none_or(|e| e > size) || obj.dnode.block_size as usize != DIR_BLOCK {
        return Err(StoreError::corrupt_object(
            "directory",
            id,
            format!(
                "blocks {first}..{} of {} bytes are past its end ({size} bytes, blocks of {})",
                first.saturating_add(count as u64),
                DIR_BLOCK,
                obj.dnode.block_size
            ),
        ));
    }
    let mut buf = vec![0u8; count * DIR_BLOCK];
    read_object(pool, cache, id, obj, first * DIR_BLOCK as u64, &mut buf)?;
    Ok(buf)
}
