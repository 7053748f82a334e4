//! `cairn clone POOL/DS@SNAP POOL/NEW`: a writable dataset that starts as a snapshot and
//! shares its blocks.
//!
//! ```text
//!  origin  tank/fs@monday (txg 40)        clone  tank/test, origin_floor = 40
//!   file 9 ─ root bp ─┬─ block A (born 12)     file 31 (a copy of 9's dnode) ─ same root bp
//!                     └─ block B (born 35)
//!  the clone overwrites A:  A' born 52 in the clone's tree; A is born ≤ 40, so it is the
//!  origin's: not freed, not on a dead list of the clone, only no longer counted by it
//!  (`cairn:origin-released` grows by A's size)
//! ```
//! Objects are numbered pool-wide, so a clone gets objects of its own: a copy of each
//! dnode of the snapshot (same block trees), and new directories listing the new ids (a
//! directory's entries name objects). Taking a clone therefore costs time in proportion to
//! the number of files and the size of the directories, not to the data. The copy is
//! made under the state lock, so one txg holds all of it (no sync sees half a clone).
//! Which copy each object became is kept (the clone map, `crate::id_map`) for
//! `send -i ORIGIN CLONE@SNAP`.
//! The origin snapshot cannot be destroyed while a clone of it exists; `promote`
//! (`crate::promote`) turns the roles around.
//!
//! Space: a clone's REFER starts at the snapshot's; its USED counts only what it does not
//! share with the origin (REFER − (snapshot's REFER − what it stopped using)).

use std::collections::HashMap;

use crate::core::{State, StoreCore};
use crate::dataset::{
    DatasetKind, CLONE_MAP_PROP, ORIGIN_PROP, ORIGIN_RELEASED_PROP, POOL_OBJECTS,
};
use crate::dir::DirEntry;
use crate::dnode::{Dnode, ObjectKind};
use crate::error::StoreError;
use crate::id_map::{IdMap, CLONE_MAGIC};
use crate::object::ObjectState;
use crate::snapshot_read::SnapshotView;

impl StoreCore {
    /// `cairn clone SNAPSHOT TARGET`: a new dataset showing the snapshot, writable.
    pub fn clone_create(&self, snapshot: &str, target: &str) -> Result<(), StoreError> {
        crate::dataset::validate_dataset_name(target)?;
        let v = self.snapshot_view(snapshot)?;
        let table = self.datasets();
        let origin = table.by_id(v.dataset).expect("a view names its dataset");
        let rec = table
            .snapshots
            .find(v.dataset, &v.snapshot)
            .cloned()
            .expect("a view names its snapshot");
        let pool_of = |n: &str| n.split(['/', '@']).next().unwrap_or("").to_string();
        if pool_of(target) != pool_of(snapshot) {
            return Err(StoreError::BadName(
                target.into(),
                "a clone is made in the pool of its snapshot (to copy to another pool, use send | receive)".into(),
            ));
        }
        let root = self.snapshot_dnode(&v, v.root)?;
        let volsize = (origin.kind == DatasetKind::Volume).then_some(root.size);
        let mut props = std::collections::BTreeMap::new();
        if origin.kind == DatasetKind::Volume {
            if let Some(bs) = origin.props.get("volblocksize") {
                props.insert("volblocksize".to_string(), bs.clone());
            }
        }
        self.dataset_create(target, origin.kind, props, volsize, false)?;
        let made = self.copy_snapshot_into(&v, target, &rec, &root);
        if made.is_err() {
            let _ = self.dataset_destroy(target, true);
        }
        made
    }

    /// Gives the new dataset `target` copies of the snapshot's objects, in one txg (the
    /// state lock is held throughout, so no sync sees half a copy).
    fn copy_snapshot_into(
        &self,
        v: &SnapshotView,
        target: &str,
        rec: &crate::snapshot::SnapshotRecord,
        root: &Dnode,
    ) -> Result<(), StoreError> {
        let mut st = self.lock();
        let ds = st.datasets.by_name(target).cloned().expect("just created");
        let mut copy = Copy::new(v.root, ds.object);
        self.copy_snapshot_locked(&mut st, v, root, ds.id, &mut copy)?;
        let d = st.datasets.by_id_mut(ds.id).expect("just created");
        d.props.insert(ORIGIN_PROP.into(), v.name.clone());
        // The snapshot's directory blocks are not the clone's: it has new directories.
        d.props
            .insert(ORIGIN_RELEASED_PROP.into(), copy.dirs.0.to_string());
        copy.set_space(d, rec);
        st.datasets_dirty = true;
        drop(st);
        self.save_clone_map(ds.id, copy.map)
    }

    /// Makes dataset `dataset` show snapshot `v`: its root object (`copy.map[v.root]`)
    /// takes the snapshot root `root`, and every object below gets a copy (directories
    /// with new entries). On an error the objects made so far are in `copy.map`.
    pub(crate) fn copy_snapshot_locked(
        &self,
        st: &mut State,
        v: &SnapshotView,
        root: &Dnode,
        dataset: u32,
        copy: &mut Copy,
    ) -> Result<(), StoreError> {
        let to = copy.map[&v.root];
        self.take_dnode(st, to, root, dataset, copy)?;
        self.copy_xattr_object(st, v, root, dataset, copy)?;
        if root.kind == ObjectKind::Directory {
            self.copy_directory(st, v, v.root, to, dataset, copy)?;
        }
        self.link_xattrs(st, &copy.map, v)
    }

    /// Keeps which object of the clone each object of the origin snapshot became: an
    /// incremental from the origin (`crate::clone_send`) names the clone's objects by it.
    /// `dataset_destroy` frees it with the dataset.
    pub(crate) fn save_clone_map(
        &self,
        dataset: u32,
        ids: HashMap<u64, u64>,
    ) -> Result<(), StoreError> {
        let map = IdMap {
            ids,
            xattr_links: Vec::new(),
        };
        // A pool object, not one of the dataset's: no snapshot keeps it and no rollback
        // frees it (maps made before 2026-11-26 are the clone's own objects; both read and
        // free the same way).
        let object = self.write_id_map(POOL_OBJECTS, None, CLONE_MAGIC, &map)?;
        let mut st = self.lock();
        let d = st.datasets.by_id_mut(dataset).expect("just created");
        let old = d.props.insert(CLONE_MAP_PROP.into(), object.to_string());
        st.datasets_dirty = true;
        // (A dataset promoted and then made a clone again had one already.)
        if let Some(old) = old.and_then(|o| o.parse().ok()) {
            self.free_object_locked(&mut st, old)?;
        }
        Ok(())
    }

    /// The clone map of clone `dataset` (see `save_clone_map`): origin ids → its ids.
    pub(crate) fn load_clone_map(&self, dataset: u32) -> Result<HashMap<u64, u64>, StoreError> {
        let table = self.datasets();
        let ds = table
            .by_id(dataset)
            .ok_or_else(|| StoreError::NotFound(format!("dataset {dataset}")))?;
        let Some(object) = ds.props.get(CLONE_MAP_PROP).and_then(|v| v.parse().ok()) else {
            return Err(StoreError::NotPermitted(format!(
                "{} was cloned by a cairn that kept no clone map, so what changed since its \
                 origin cannot be told apart; send a full stream of it instead",
                ds.name
            )));
        };
        Ok(self.read_id_map(dataset, object, CLONE_MAGIC, None)?.ids)
    }

    /// Object `id` of the clone becomes snapshot dnode `dn`: a file, volume or xattr object
    /// takes its block tree; a directory only its attributes (its entries are copied).
    fn take_dnode(
        &self,
        st: &mut State,
        id: u64,
        dn: &Dnode,
        dataset: u32,
        copy: &mut Copy,
    ) -> Result<(), StoreError> {
        if dn.kind != ObjectKind::Directory {
            adopt(st, id, dn, dataset);
            return Ok(());
        }
        let d = &mut self.object_mut(st, id)?.dnode;
        (d.mode, d.uid, d.gid, d.nlink) = (dn.mode, dn.uid, dn.gid, dn.nlink);
        (d.mtime_ns, d.ctime_ns, d.atime_ns, d.xattr) =
            (dn.mtime_ns, dn.ctime_ns, dn.atime_ns, dn.xattr);
        self.object_mut(st, id)?.dnode_dirty = true;
        let (u, l, p) = &mut copy.dirs;
        (*u, *l, *p) = (
            u.saturating_add(dn.used),
            l.saturating_add(dn.logical),
            p.saturating_add(dn.physical),
        );
        Ok(())
    }

    /// The copy of `dn`'s xattr object, if it has one not copied yet.
    fn copy_xattr_object(
        &self,
        st: &mut State,
        v: &SnapshotView,
        dn: &Dnode,
        dataset: u32,
        copy: &mut Copy,
    ) -> Result<(), StoreError> {
        if dn.xattr == 0 || copy.map.contains_key(&dn.xattr) {
            return Ok(());
        }
        let x = snapshot_dnode_of(self, st, v, dn.xattr)?;
        let xid = self.create_object_locked(st, x.kind, dataset, x.block_size)?;
        adopt(st, xid, &x, dataset);
        copy.map.insert(dn.xattr, xid);
        Ok(())
    }

    /// Copies directory `from` (of the snapshot) into `to` (of the clone), depth first.
    fn copy_directory(
        &self,
        st: &mut State,
        v: &SnapshotView,
        from: u64,
        to: u64,
        dataset: u32,
        copy: &mut Copy,
    ) -> Result<(), StoreError> {
        let dnode = snapshot_dnode_of(self, st, v, from)?;
        for (name, entry) in self.snapshot_dir_entries(from, dnode)? {
            let (child, new) = match copy.map.get(&entry.object) {
                Some(&id) => (id, false),
                None => (self.copy_object(st, v, entry.object, dataset, copy)?, true),
            };
            let e = DirEntry {
                object: child,
                kind: entry.kind,
            };
            self.dir_insert(st, to, &name, e)?;
            if new && entry.kind == ObjectKind::Directory {
                self.copy_directory(st, v, entry.object, child, dataset, copy)?;
            }
        }
        Ok(())
    }

    /// A new object of the clone for snapshot object `id` (and its xattr object).
    fn copy_object(
        &self,
        st: &mut State,
        v: &SnapshotView,
        id: u64,
        dataset: u32,
        copy: &mut Copy,
    ) -> Result<u64, StoreError> {
        let dn = snapshot_dnode_of(self, st, v, id)?;
        let new = self.create_object_locked(st, dn.kind, dataset, dn.block_size)?;
        copy.map.insert(id, new);
        self.take_dnode(st, new, &dn, dataset, copy)?;
        self.copy_xattr_object(st, v, &dn, dataset, copy)?;
        Ok(new)
    }

    /// Points each copied object's xattr field at the copy of its xattr object.
    fn link_xattrs(
        &self,
        st: &mut State,
        map: &HashMap<u64, u64>,
        v: &SnapshotView,
    ) -> Result<(), StoreError> {
        for &new in map.values() {
            let old_xattr = self.object_mut(st, new)?.dnode.xattr;
            if old_xattr == 0 {
                continue;
            }
            let linked = map.get(&old_xattr).copied().ok_or_else(|| {
                StoreError::corrupt_object(
                    "snapshot",
                    old_xattr,
                    format!("{}: named as extended attributes but not found", v.name),
                )
            })?;
            let o = self.object_mut(st, new)?;
            o.dnode.xattr = linked;
            o.dnode_dirty = true;
        }
        Ok(())
    }
}

/// What a clone copy has done: snapshot ids → the clone's, and the space of the snapshot's
/// directories (used, logical, physical), which the clone does not share.
pub(crate) struct Copy {
    pub(crate) map: HashMap<u64, u64>,
    pub(crate) dirs: (u64, u64, u64),
}

impl Copy {
    /// A copy whose root `from` (the snapshot's) becomes object `to`.
    pub(crate) fn new(from: u64, to: u64) -> Copy {
        Copy {
            map: HashMap::from([(from, to)]),
            dirs: (0, 0, 0),
        }
    }

    /// The copy's space before the sync writes its directories (which adds theirs): the
    /// snapshot's, less its directories.
    pub(crate) fn set_space(
        &self,
        ds: &mut crate::dataset::Dataset,
        rec: &crate::snapshot::SnapshotRecord,
    ) {
        let (used, logical, physical) = self.dirs;
        (ds.used, ds.logical, ds.physical) = (
            rec.referenced.saturating_sub(used),
            rec.logical.saturating_sub(logical),
            rec.physical.saturating_sub(physical),
        );
    }
}

/// Snapshot object `id`, under the state lock already held.
fn snapshot_dnode_of(
    store: &StoreCore,
    st: &mut State,
    v: &SnapshotView,
    id: u64,
) -> Result<Dnode, StoreError> {
    let rec = st
        .datasets
        .snapshots
        .find(v.dataset, &v.snapshot)
        .cloned()
        .ok_or_else(|| StoreError::NotFound(v.name.clone()))?;
    crate::snapshot_read::snapshot_dnode_locked(store.pool(), st, &rec, id)?
        .ok_or_else(|| StoreError::NotFound(format!("{}: object {id}", v.name)))
}

/// Object `id` of the clone takes `dnode` (its block tree, attributes, size), as new in
/// the open txg.
fn adopt(st: &mut State, id: u64, dnode: &Dnode, dataset: u32) {
    let mut d = *dnode;
    d.dataset = dataset;
    d.created_txg = st.txg;
    let mut obj = ObjectState::new(d);
    obj.dnode_dirty = true;
    st.dirs.forget(id);
    st.cache.retain(|&(o, _, _), _| o != id);
    st.objects.insert(id, obj);
}
