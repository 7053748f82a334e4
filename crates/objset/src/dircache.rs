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

use crate::core::{State, StoreCore};
use crate::dir::{dir1_entry_len, DirEntry, DirStats, Directory, DIR_BLOCK};
use crate::dir2::{is_dir2, name_hash, BlockSource, HashedDir};
use crate::dnode::ObjectKind;
use crate::error::StoreError;
use crate::object::{read_object, IndirectCache, ObjectState};
use crate::object_io::{load_object_bytes, read_dnode};

/// Clean entries kept after a sync beyond this many in all are dropped.
const KEEP_CLEAN_ENTRIES: usize = 1 << 20;

#[derive(Default)]
pub(crate) struct DirCache {
    dirs: HashMap<u64, CachedDir>,
}

enum CachedDir {
    /// DIR1: the whole directory.
    Small(SmallDir),
    /// DIR2: what has been read of it.
    Hashed(Box<HashedDir>),
}

struct SmallDir {
    dir: Directory,
    /// `dir.encoded_len()`, kept up to date.
    bytes: usize,
    dirty: bool,
    /// A conversion to DIR2 failed (not tried again while it is cached).
    stays_dir1: bool,
}

impl CachedDir {
    fn is_dirty(&self) -> bool {
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
struct ObjectBlocks<'a> {
    pool: &'a Pool,
    objects: &'a HashMap<u64, ObjectState>,
    cache: &'a mut IndirectCache,
    id: u64,
}

impl ObjectBlocks<'_> {
    fn object(&self) -> Result<&ObjectState, StoreError> {
        self.objects
            .get(&self.id)
            .ok_or_else(|| StoreError::Corrupt(format!("directory object {} not loaded", self.id)))
    }
}

impl BlockSource for ObjectBlocks<'_> {
    fn read_blocks(&mut self, first: u64, count: usize) -> Result<Vec<u8>, StoreError> {
        let obj = self.objects.get(&self.id).ok_or_else(|| {
            StoreError::Corrupt(format!("directory object {} not loaded", self.id))
        })?;
        read_dir_blocks(self.pool, self.cache, self.id, obj, first, count)
    }
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
        return Err(StoreError::Corrupt(format!(
            "directory object {id}: blocks {first}..{} of {} bytes are past its end ({size} bytes, blocks of {})",
            first.saturating_add(count as u64),
            DIR_BLOCK,
            obj.dnode.block_size
        )));
    }
    let mut buf = vec![0u8; count * DIR_BLOCK];
    read_object(pool, cache, id, obj, first * DIR_BLOCK as u64, &mut buf)?;
    Ok(buf)
}

/// Loads the dnode of directory `id` (it leaves memory after each sync).
fn ensure_object(pool: &Pool, st: &mut State, id: u64) -> Result<(), StoreError> {
    if !st.objects.contains_key(&id) {
        let dnode = read_dnode(pool, st, id)?;
        st.objects.insert(id, ObjectState::new(dnode));
    }
    let kind = st.objects[&id].dnode.kind;
    if kind != ObjectKind::Directory {
        return Err(StoreError::NotADirectory(format!(
            "object {id} (a {})",
            crate::fs::kind_name(kind)
        )));
    }
    Ok(())
}

/// Loads directory `id` into the cache if it is not there: a DIR1 directory whole, a DIR2
/// directory's header.
fn load(pool: &Pool, st: &mut State, id: u64) -> Result<(), StoreError> {
    ensure_object(pool, st, id)?;
    if st.dirs.dirs.contains_key(&id) {
        return Ok(());
    }
    let obj = &st.objects[&id];
    let size = obj.dnode.size;
    let mut first = vec![0u8; size.min(DIR_BLOCK as u64) as usize];
    read_object(pool, &mut st.cache, id, obj, 0, &mut first)?;
    let cached = if is_dir2(&first) {
        if obj.dnode.block_size as usize != DIR_BLOCK || first.len() < DIR_BLOCK {
            return Err(StoreError::Corrupt(format!(
                "directory object {id}: DIR2 in blocks of {} bytes, {size} in all",
                obj.dnode.block_size
            )));
        }
        CachedDir::Hashed(Box::new(HashedDir::open(id, &first, name_hash)?))
    } else {
        let bytes = if size as usize <= first.len() {
            first
        } else {
            // A DIR1 directory larger than one block (written before DIR2 existed).
            load_object_bytes(pool, st, id)?
        };
        let dir = Directory::decode(&bytes)
            .map_err(|e| StoreError::Corrupt(format!("directory object {id}: {e}")))?;
        CachedDir::Small(SmallDir {
            bytes: dir.encoded_len(),
            dir,
            dirty: false,
            stays_dir1: false,
        })
    };
    st.dirs.dirs.insert(id, cached);
    Ok(())
}

/// Runs `f` on directory `id` (loaded) and the blocks of its object.
fn with_dir<R>(
    pool: &Pool,
    st: &mut State,
    id: u64,
    f: impl FnOnce(&mut CachedDir, &mut ObjectBlocks<'_>) -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    load(pool, st, id)?;
    let State {
        objects,
        cache,
        dirs,
        ..
    } = st;
    let mut src = ObjectBlocks {
        pool,
        objects,
        cache,
        id,
    };
    f(dirs.dirs.get_mut(&id).expect("loaded"), &mut src)
}

/// A DIR1 directory that outgrew one block becomes DIR2 (all of it in memory, dirty). One
/// that DIR2 cannot hold (a name longer than 255 bytes, from before names were checked)
/// stays DIR1.
fn maybe_convert(d: &mut CachedDir, id: u64, block_size: usize) {
    let CachedDir::Small(s) = d else { return };
    if s.bytes <= DIR_BLOCK || block_size != DIR_BLOCK || s.stays_dir1 {
        return;
    }
    let entries = s.dir.entries.iter().map(|(n, e)| (n.clone(), *e));
    match HashedDir::from_entries(id, name_hash, entries) {
        Ok(h) => *d = CachedDir::Hashed(Box::new(h)),
        Err(_) => s.stays_dir1 = true,
    }
}

/// The entry `name` of directory `id`.
pub(crate) fn lookup(
    pool: &Pool,
    st: &mut State,
    id: u64,
    name: &str,
) -> Result<Option<DirEntry>, StoreError> {
    with_dir(pool, st, id, |d, src| match d {
        CachedDir::Small(s) => Ok(s.dir.entries.get(name).copied()),
        CachedDir::Hashed(h) => h.lookup(src, name),
    })
}

/// Every entry of directory `id`, sorted by name.
pub(crate) fn list(
    pool: &Pool,
    st: &mut State,
    id: u64,
) -> Result<Vec<(String, DirEntry)>, StoreError> {
    with_dir(pool, st, id, |d, src| match d {
        CachedDir::Small(s) => Ok(s.dir.entries.iter().map(|(n, e)| (n.clone(), *e)).collect()),
        CachedDir::Hashed(h) => h.list(src),
    })
}

impl StoreCore {
    /// The entry `name` of directory `dir`.
    pub(crate) fn dir_lookup(
        &self,
        st: &mut State,
        dir: u64,
        name: &str,
    ) -> Result<Option<DirEntry>, StoreError> {
        lookup(&self.pool, st, dir, name)
    }

    /// Adds (or replaces) `name` in directory `dir`; returns the entry it replaced. The
    /// caller sets the directory's times (`touch_changed`).
    pub(crate) fn dir_insert(
        &self,
        st: &mut State,
        dir: u64,
        name: &str,
        entry: DirEntry,
    ) -> Result<Option<DirEntry>, StoreError> {
        with_dir(&self.pool, st, dir, |d, src| {
            let old = match d {
                CachedDir::Hashed(h) => return h.insert(src, name, entry),
                CachedDir::Small(s) => {
                    let old = s.dir.entries.insert(name.to_string(), entry);
                    if old.is_none() {
                        s.bytes += dir1_entry_len(name);
                    }
                    s.dirty = true;
                    old
                }
            };
            let block_size = src.object()?.dnode.block_size as usize;
            maybe_convert(d, dir, block_size);
            Ok(old)
        })
    }

    /// Removes `name` from directory `dir`; returns its entry.
    pub(crate) fn dir_remove(
        &self,
        st: &mut State,
        dir: u64,
        name: &str,
    ) -> Result<Option<DirEntry>, StoreError> {
        with_dir(&self.pool, st, dir, |d, src| match d {
            CachedDir::Small(s) => {
                let old = s.dir.entries.remove(name);
                if old.is_some() {
                    s.bytes -= dir1_entry_len(name);
                    s.dirty = true;
                }
                Ok(old)
            }
            CachedDir::Hashed(h) => h.remove(src, name),
        })
    }

    /// The number of entries of directory `dir`.
    pub(crate) fn dir_len(&self, st: &mut State, dir: u64) -> Result<u64, StoreError> {
        with_dir(&self.pool, st, dir, |d, _| {
            Ok(match d {
                CachedDir::Small(s) => s.dir.entries.len() as u64,
                CachedDir::Hashed(h) => h.len(),
            })
        })
    }

    pub(crate) fn dir_is_empty(&self, st: &mut State, dir: u64) -> Result<bool, StoreError> {
        Ok(self.dir_len(st, dir)? == 0)
    }

    /// Every entry of directory `dir`, sorted by name (reads every block of a DIR2
    /// directory: for listings, not for single names).
    pub(crate) fn dir_list(
        &self,
        st: &mut State,
        dir: u64,
    ) -> Result<Vec<(String, DirEntry)>, StoreError> {
        list(&self.pool, st, dir)
    }

    /// How directory `dir` is stored and what the next sync writes of it.
    pub fn dir_stats(&self, dir: u64) -> Result<DirStats, StoreError> {
        let mut st = self.lock();
        with_dir(&self.pool, &mut st, dir, |d, src| {
            Ok(match d {
                CachedDir::Small(s) => {
                    let blocks = s.bytes.div_ceil(DIR_BLOCK) as u64;
                    DirStats {
                        hashed: false,
                        entries: s.dir.entries.len() as u64,
                        leaves: 0,
                        blocks,
                        dirty_blocks: if s.dirty { blocks } else { 0 },
                        cached_leaves: 0,
                        object_size: src.object()?.dnode.size,
                    }
                }
                CachedDir::Hashed(h) => DirStats {
                    hashed: true,
                    entries: h.len(),
                    leaves: h.header().leaves,
                    blocks: h.header().next_block,
                    dirty_blocks: h.dirty_blocks() as u64,
                    cached_leaves: h.cached_leaves() as u64,
                    object_size: src.object()?.dnode.size,
                },
            })
        })
    }

    /// Writes every changed directory into its object (the first step of a txg sync): a
    /// DIR1 directory whole, a DIR2 directory's dirty blocks only.
    pub(crate) fn flush_dirty_dirs(&self, st: &mut State) -> Result<(), StoreError> {
        let mut ids: Vec<u64> = st
            .dirs
            .dirs
            .iter()
            .filter(|(_, d)| d.is_dirty())
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            let obj = self.object_mut(st, id)?;
            let times = (obj.dnode.mtime_ns, obj.dnode.ctime_ns);
            let block_size = obj.dnode.block_size as usize;
            let d = st.dirs.dirs.get_mut(&id).expect("listed");
            // (A DIR1 directory of more than one block from before DIR2, changed by removals.)
            maybe_convert(d, id, block_size);
            match d {
                CachedDir::Small(s) => {
                    s.dirty = false;
                    let bytes = s.dir.encode();
                    self.truncate_locked(st, id, 0)?;
                    self.write_locked(st, id, 0, &bytes)?;
                }
                CachedDir::Hashed(h) => {
                    let dirty = h.take_dirty();
                    if dirty.rewrite_all {
                        self.truncate_locked(st, id, 0)?;
                    }
                    for (blkid, data) in &dirty.blocks {
                        self.write_locked(st, id, blkid * DIR_BLOCK as u64, data)?;
                    }
                }
            }
            // Writing is not a change of the directory: keep the times its operations set.
            let obj = self.object_mut(st, id)?;
            (obj.dnode.mtime_ns, obj.dnode.ctime_ns) = times;
        }
        Ok(())
    }
}
