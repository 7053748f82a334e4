//! Directory operations in the open txg (`dir_lookup`, `dir_insert`, `dir_remove`, …) and
//! the sync step that writes dirty directories (`flush_dirty_dirs`), over the cache of
//! `crate::dircache` (whose comment states the invariants these keep).

use cairn_pool::Pool;

use crate::core::{State, StoreCore};
use crate::dir::{dir1_entry_len, DirEntry, DirStats, Directory, DIR_BLOCK};
use crate::dir2::{is_dir2, name_hash, HashedDir};
use crate::dircache::{CachedDir, ObjectBlocks, SmallDir};
use crate::dnode::ObjectKind;
use crate::error::StoreError;
use crate::object::{read_object, ObjectState};
use crate::object_io::{load_object_bytes, read_dnode};

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
            kind.name()
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
            return Err(StoreError::corrupt_object(
                "directory",
                id,
                format!(
                    "DIR2 in blocks of {} bytes, {size} in all",
                    obj.dnode.block_size
                ),
            ));
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
            .map_err(|e| StoreError::corrupt_object("directory", id, e))?;
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
        st.log.dir_changes.entry(dir).or_default().all += 1;
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
        st.log.dir_changes.entry(dir).or_default().all += 1;
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
