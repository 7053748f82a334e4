//! Reading a snapshot: its dnodes (override lists, then the live object table, as
//! `crate::snapshot` explains), then files and directories from them. Read-only: nothing
//! here changes the store. Reads use an indirect-block cache of their own, since a snapshot's
//! object X and the live object X are different trees.

use cairn_pool::Pool;

use crate::core::{State, StoreCore};
use crate::dir::{DirEntry, Directory, DIR_BLOCK};
use crate::dir2::{is_dir2, name_hash, BlockSource, HashedDir};
use crate::dircache::read_dir_blocks;
use crate::dnode::{Dnode, ObjectKind};
use crate::error::StoreError;
use crate::object::{read_object, IndirectCache, ObjectState};
use crate::object_io::{read_dnode, MAX_WHOLE_OBJECT};
use crate::snapshot::SnapshotRecord;
use crate::snapshot_ops::split_snapshot_name;

/// A snapshot to read from: `pool/ds@name`, its dataset, txg and root object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotView {
    pub name: String,
    pub dataset: u32,
    pub snapshot: String,
    pub txg: u64,
    /// The dataset's root directory (file system) or data object (volume).
    pub root: u64,
}

/// The blocks of one object as a snapshot holds them (for DIR2 directories).
struct SnapBlocks<'a> {
    pool: &'a Pool,
    cache: IndirectCache,
    id: u64,
    obj: ObjectState,
}

impl BlockSource for SnapBlocks<'_> {
    fn read_blocks(&mut self, first: u64, count: usize) -> Result<Vec<u8>, StoreError> {
        read_dir_blocks(self.pool, &mut self.cache, self.id, &self.obj, first, count)
    }
}

impl StoreCore {
    /// Opens `pool/ds@name` for reading.
    pub fn snapshot_view(&self, full: &str) -> Result<SnapshotView, StoreError> {
        let (ds_name, snap) = split_snapshot_name(full)?;
        let st = self.lock();
        let ds = st
            .datasets
            .by_name(ds_name)
            .ok_or_else(|| StoreError::NoSuchDataset(ds_name.into()))?;
        let rec = st
            .datasets
            .snapshots
            .find(ds.id, snap)
            .ok_or_else(|| StoreError::NotFound(full.into()))?;
        Ok(SnapshotView {
            name: full.to_string(),
            dataset: ds.id,
            snapshot: snap.to_string(),
            txg: rec.txg,
            root: if rec.root != 0 { rec.root } else { ds.object },
        })
    }

    /// Object `id` as the snapshot shows it (`NotFound` if it is not part of it).
    pub fn snapshot_dnode(&self, v: &SnapshotView, id: u64) -> Result<Dnode, StoreError> {
        let mut st = self.lock();
        let rec = record(&st, v)?;
        snapshot_dnode_locked(&self.pool, &mut st, &rec, id)?
            .ok_or_else(|| StoreError::NotFound(format!("{}: object {id}", v.name)))
    }

    /// Object `id` as the snapshot shows it, or `None` if it is not part of it.
    pub(crate) fn snapshot_dnode_if_any(
        &self,
        v: &SnapshotView,
        id: u64,
    ) -> Result<Option<Dnode>, StoreError> {
        let mut st = self.lock();
        let rec = record(&st, v)?;
        snapshot_dnode_locked(&self.pool, &mut st, &rec, id)
    }

    /// Reads from object `id` of the snapshot; returns the bytes read (0 at its end).
    pub fn snapshot_read(
        &self,
        v: &SnapshotView,
        id: u64,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, StoreError> {
        let dnode = self.snapshot_dnode(v, id)?;
        if dnode.kind == ObjectKind::Directory {
            return Err(StoreError::IsADirectory(format!("{}: object {id}", v.name)));
        }
        // Its blocks stay until the snapshot is destroyed, and a destroy's frees wait for
        // readers behind the read gate.
        let _gate = self.read_gate.read().unwrap_or_else(|p| p.into_inner());
        let obj = ObjectState::new(dnode);
        read_object(&self.pool, &mut IndirectCache::new(), id, &obj, offset, buf)
    }

    /// A reader of object `id` of the snapshot that keeps its indirect blocks between
    /// reads (for reading a whole object in order, as `send` does).
    pub(crate) fn snapshot_object_reader(
        &self,
        v: &SnapshotView,
        id: u64,
    ) -> Result<SnapshotObjectReader, StoreError> {
        let dnode = self.snapshot_dnode(v, id)?;
        if dnode.kind == ObjectKind::Directory {
            return Err(StoreError::IsADirectory(format!("{}: object {id}", v.name)));
        }
        Ok(SnapshotObjectReader {
            id,
            obj: ObjectState::new(dnode),
            cache: IndirectCache::new(),
        })
    }

    /// The entries of directory `dir` in the snapshot, in name order.
    pub fn snapshot_read_dir(
        &self,
        v: &SnapshotView,
        dir: u64,
    ) -> Result<Vec<(String, DirEntry)>, StoreError> {
        let dnode = self.snapshot_dnode(v, dir)?;
        let _gate = self.read_gate.read().unwrap_or_else(|p| p.into_inner());
        self.snapshot_dir_entries(dir, dnode)
    }

    /// The entries of snapshot directory `dir` whose dnode is `dnode`, in name order. The
    /// caller keeps its blocks from being freed meanwhile: it holds the read gate or the
    /// state lock (without which no sync runs).
    pub(crate) fn snapshot_dir_entries(
        &self,
        dir: u64,
        dnode: Dnode,
    ) -> Result<Vec<(String, DirEntry)>, StoreError> {
        match open_dir(&self.pool, dir, dnode)? {
            SnapDir::Small(d) => Ok(d.entries.into_iter().collect()),
            SnapDir::Hashed(mut h) => {
                let (dir, src) = &mut *h;
                dir.list(src)
            }
        }
    }

    /// Entry `name` of directory `dir` in the snapshot, and its dnode.
    pub fn snapshot_lookup(
        &self,
        v: &SnapshotView,
        dir: u64,
        name: &str,
    ) -> Result<(u64, Dnode), StoreError> {
        let dnode = self.snapshot_dnode(v, dir)?;
        let entry = {
            let _gate = self.read_gate.read().unwrap_or_else(|p| p.into_inner());
            match open_dir(&self.pool, dir, dnode)? {
                SnapDir::Small(d) => d.entries.get(name).copied(),
                SnapDir::Hashed(mut h) => {
                    let (dir, src) = &mut *h;
                    dir.lookup(src, name)?
                }
            }
        };
        let entry = entry.ok_or_else(|| StoreError::NotFound(format!("{}/{name}", v.name)))?;
        Ok((entry.object, self.snapshot_dnode(v, entry.object)?))
    }

    /// Follows `path` (components below the dataset's root) in the snapshot.
    pub fn snapshot_resolve(
        &self,
        v: &SnapshotView,
        path: &[&str],
    ) -> Result<(u64, Dnode), StoreError> {
        let mut at = (v.root, self.snapshot_dnode(v, v.root)?);
        for (i, name) in path.iter().enumerate() {
            if at.1.kind != ObjectKind::Directory {
                return Err(StoreError::NotADirectory(format!(
                    "{}/{}",
                    v.name,
                    path[..i].join("/")
                )));
            }
            at = self.snapshot_lookup(v, at.0, name)?;
        }
        Ok(at)
    }
}

/// See `StoreCore::snapshot_object_reader`.
pub(crate) struct SnapshotObjectReader {
    id: u64,
    obj: ObjectState,
    cache: IndirectCache,
}

impl SnapshotObjectReader {
    /// Reads at `offset`; returns the bytes read (0 at the end).
    pub fn read(
        &mut self,
        store: &StoreCore,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, StoreError> {
        // (The snapshot's blocks stay until it is destroyed; a destroy's frees wait for
        // readers behind the read gate.)
        let _gate = store.read_gate.read().unwrap_or_else(|p| p.into_inner());
        read_object(
            &store.pool,
            &mut self.cache,
            self.id,
            &self.obj,
            offset,
            buf,
        )
    }
}

fn record(st: &State, v: &SnapshotView) -> Result<SnapshotRecord, StoreError> {
    st.datasets
        .snapshots
        .find(v.dataset, &v.snapshot)
        .filter(|r| r.txg == v.txg)
        .cloned()
        .ok_or_else(|| StoreError::NotFound(format!("{} (destroyed)", v.name)))
}

/// Object `id` as snapshot `rec` shows it: the first override list from `rec` on that
/// holds it, else the live table; `None` unless it belongs to the dataset and existed then.
pub(crate) fn snapshot_dnode_locked(
    pool: &Pool,
    st: &mut State,
    rec: &SnapshotRecord,
    id: u64,
) -> Result<Option<Dnode>, StoreError> {
    let saved = st
        .datasets
        .snapshots
        .of(rec.dataset)
        .skip_while(|r| r.name != rec.name)
        .find_map(|r| {
            st.snaps
                .overrides
                .get(&r.override_object)
                .and_then(|l| l.dnodes.get(&id).copied())
        });
    let dnode = match saved {
        Some(d) => d,
        None if id < st.next_object => read_dnode(pool, st, id)?,
        None => return Ok(None),
    };
    let part_of_it = dnode.kind != ObjectKind::Free
        && dnode.dataset == rec.dataset
        && dnode.created_txg <= rec.txg;
    Ok(part_of_it.then_some(dnode))
}

enum SnapDir<'a> {
    Small(Directory),
    Hashed(Box<(HashedDir, SnapBlocks<'a>)>),
}

/// Decodes directory `id` of a snapshot (DIR1 whole; DIR2 by its header, leaves on demand).
fn open_dir(pool: &Pool, id: u64, dnode: Dnode) -> Result<SnapDir<'_>, StoreError> {
    if dnode.kind != ObjectKind::Directory {
        return Err(StoreError::NotADirectory(format!("object {id}")));
    }
    if dnode.size > MAX_WHOLE_OBJECT {
        return Err(StoreError::corrupt_object(
            "directory",
            id,
            format!("{} bytes", dnode.size),
        ));
    }
    let obj = ObjectState::new(dnode);
    let mut cache = IndirectCache::new();
    let mut first = vec![0u8; dnode.size.min(DIR_BLOCK as u64) as usize];
    read_object(pool, &mut cache, id, &obj, 0, &mut first)?;
    if is_dir2(&first) {
        let hashed = HashedDir::open(id, &first, name_hash)?;
        let src = SnapBlocks {
            pool,
            cache,
            id,
            obj,
        };
        return Ok(SnapDir::Hashed(Box::new((hashed, src))));
    }
    let mut bytes = vec![0u8; dnode.size as usize];
    read_object(pool, &mut cache, id, &obj, 0, &mut bytes)?;
    let dir =
        Directory::decode(&bytes).map_err(|e| StoreError::corrupt_object("directory", id, e))?;
    Ok(SnapDir::Small(dir))
}
