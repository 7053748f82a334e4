//! Directories in the open txg: decoded once, changed in memory, encoded at sync.
//!
//! A directory is stored as one sorted list (`crate::dir`). Rewriting that list on every
//! create or unlink costs O(entries) per operation; instead the first use decodes it into
//! `DirCache`, operations change the map (O(log n)), and the txg sync encodes each changed
//! directory once (`flush_dirty`, the first step of the sync). Invariants:
//!
//! - a cached directory marked `dirty` is newer than its object's data; everything that
//!   reads a directory goes through `dir_ref` / `dir_mut`, never through the object bytes;
//! - a freed directory leaves the cache (`forget`), so a reused object id starts clean;
//! - after a sync every cached directory is clean, and clean ones may be dropped at any
//!   time (`trim`) — they are rebuilt from the object on next use.

use std::collections::HashMap;

use crate::core::{State, StoreCore};
use crate::dir::Directory;
use crate::error::StoreError;
use crate::object_io::load_object_bytes;

/// Clean directories kept after a sync beyond this many entries in all are dropped.
const KEEP_CLEAN_ENTRIES: usize = 1 << 20;

#[derive(Default)]
pub(crate) struct DirCache {
    dirs: HashMap<u64, CachedDir>,
}

struct CachedDir {
    dir: Directory,
    dirty: bool,
}

impl DirCache {
    pub fn any_dirty(&self) -> bool {
        self.dirs.values().any(|d| d.dirty)
    }

    /// Drops a freed directory.
    pub fn forget(&mut self, id: u64) {
        self.dirs.remove(&id);
    }

    /// Drops clean directories when the cache holds too many entries.
    pub fn trim(&mut self) {
        let total: usize = self.dirs.values().map(|d| d.dir.entries.len()).sum();
        if total > KEEP_CLEAN_ENTRIES {
            self.dirs.retain(|_, d| d.dirty);
        }
    }
}

/// Loads directory `id` into the cache (decoding its object) if it is not there.
fn load(pool: &cairn_pool::Pool, st: &mut State, id: u64) -> Result<(), StoreError> {
    if !st.dirs.dirs.contains_key(&id) {
        let bytes = load_object_bytes(pool, st, id)?;
        let dir = Directory::decode(&bytes)
            .map_err(|e| StoreError::Corrupt(format!("directory object {id}: {e}")))?;
        st.dirs.dirs.insert(id, CachedDir { dir, dirty: false });
    }
    Ok(())
}

/// The directory `id` as the open txg sees it.
pub(crate) fn dir_ref<'a>(
    pool: &cairn_pool::Pool,
    st: &'a mut State,
    id: u64,
) -> Result<&'a Directory, StoreError> {
    load(pool, st, id)?;
    Ok(&st.dirs.dirs[&id].dir)
}

impl StoreCore {
    /// The directory `id`, to change: marked dirty (the next sync writes it).
    pub(crate) fn dir_mut<'a>(
        &self,
        st: &'a mut State,
        id: u64,
    ) -> Result<&'a mut Directory, StoreError> {
        load(&self.pool, st, id)?;
        let cached = st.dirs.dirs.get_mut(&id).expect("loaded");
        cached.dirty = true;
        Ok(&mut cached.dir)
    }

    /// Encodes every changed directory into its object (the first step of a txg sync).
    pub(crate) fn flush_dirty_dirs(&self, st: &mut State) -> Result<(), StoreError> {
        let mut ids: Vec<u64> = st
            .dirs
            .dirs
            .iter()
            .filter(|(_, d)| d.dirty)
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            let cached = st.dirs.dirs.get_mut(&id).expect("listed");
            cached.dirty = false;
            let bytes = cached.dir.encode();
            let obj = self.object_mut(st, id)?;
            let times = (obj.dnode.mtime_ns, obj.dnode.ctime_ns);
            self.truncate_locked(st, id, 0)?;
            self.write_locked(st, id, 0, &bytes)?;
            // Encoding is not a change of the directory: keep the times its operations set.
            let obj = self.object_mut(st, id)?;
            (obj.dnode.mtime_ns, obj.dnode.ctime_ns) = times;
        }
        Ok(())
    }
}
