//! `cairn rollback DS@SNAP` where SNAP came to DS by `promote` (`crate::promote`): the
//! snapshot shows objects under the ids of the dataset it was taken of, not DS's, so the
//! ordinary rollback (which puts DS's saved dnodes back) cannot be used. DS is given a copy
//! of the snapshot instead, as a clone is (`crate::clone`), in place of what it holds:
//!
//! ```text
//!  tank/test  @a ── @b (moved: objects 9, 12 of tank/fs's ids) ── head: root 40, files 41, 42
//!  rollback -r tank/test@b  (@t, newer, destroyed first)
//!  tank/test  @a ── @b ── head: root 40 (its id kept), files 57, 58 = copies of 9, 12
//!    blocks of 41, 42 born after @b ....... freed
//!    blocks of 41, 42 born at or before @b . @b's: the copies hold them again
//!    @b's directory blocks ................ no longer held by the head (it has new
//!                                           directories): its dead list, so that
//!                                           destroying @b frees them
//! ```
//! One txg, in three steps under the state lock: read what the old objects free (nothing
//! changes yet); copy the snapshot in (on an error the copies are dropped and the root
//! object put back, so the dataset is as it was); drop the old objects (no reads). The
//! clone map (`crate::clone_send`) then names the copies, so `send -i @b` and `diff @b`
//! work as before; it is saved in the next txg (a crash in between leaves the dataset with
//! no map: only full sends of it, as for clones made before clone maps). A receive map of
//! the dataset names its old objects and goes with them: a received dataset rolled back so
//! takes a full stream before the next incremental.

use std::collections::HashMap;

use cairn_pool::io::bp::{BlockPointer, Dva};

use crate::block_sets::old_blocks;
use crate::clone::Copy;
use crate::core::{now_ns, State, StoreCore};
use crate::dataset::{CLONE_MAP_PROP, ORIGIN_RELEASED_PROP, POOL_OBJECTS, RECEIVE_MAP_PROP};
use crate::dnode::{Dnode, ObjectKind};
use crate::error::StoreError;
use crate::object_io::read_dnode;
use crate::snapshot::SnapshotRecord;
use crate::snapshot_ops::{free_born_after, restore_object};
use crate::snapshot_read::{snapshot_dnode_locked, SnapshotView};

/// What the rollback reads before it changes anything.
struct Plan {
    view: SnapshotView,
    /// The snapshot's root dnode.
    shown_root: Dnode,
    /// The dataset's root object (its id stays) and its dnode now.
    root: (u64, Dnode),
    /// The dataset's other objects now.
    old: Vec<(u64, Dnode)>,
    /// Blocks of the dataset's objects born after the snapshot: freed.
    born_after: Vec<Dva>,
    /// The clone map object to free (a pool object; one of the dataset's own is in `old`).
    old_map: Option<u64>,
    /// The dataset's own origin, when it is a clone: blocks born at or before its txg are
    /// that snapshot's, listed by nobody.
    origin: Option<SnapshotRecord>,
}

/// The blocks of the snapshot the copies do not hold, born after the origin (the head's
/// dead list), and the bytes of the origin's blocks they hold.
struct Unheld {
    dead: Vec<BlockPointer>,
    origin_shared: u64,
}

impl StoreCore {
    /// Rolls dataset `rec.dataset` back to `rec`, which came to it by promote (see the
    /// module's diagram). The newer snapshots are gone and nothing is dirty. Returns the
    /// clone map to save once the caller lets go of the state lock.
    pub(crate) fn rollback_to_moved(
        &self,
        st: &mut State,
        full: &str,
        rec: &SnapshotRecord,
    ) -> Result<HashMap<u64, u64>, StoreError> {
        let plan = self.plan_rollback(st, full, rec)?;
        let mut copy = Copy::new(rec.root, plan.root.0);
        let fresh_root = empty_like(&plan.shown_root, rec.dataset, st.txg);
        restore_object(st, plan.root.0, fresh_root);
        let copied = self
            .copy_snapshot_locked(st, &plan.view, &plan.shown_root, rec.dataset, &mut copy)
            .and_then(|()| self.unheld_by_copy(st, rec, &plan, &copy));
        let unheld = match copied {
            Ok(u) => u,
            Err(e) => {
                self.undo_copy(st, &plan, &copy)?;
                return Err(e);
            }
        };
        self.drop_old_objects(st, &plan)?;
        self.settle_moved(st, rec, &plan, &copy, unheld)?;
        self.sync_locked(st)?;
        Ok(copy.map)
    }

    /// Everything the rollback reads, before anything changes.
    fn plan_rollback(
        &self,
        st: &mut State,
        full: &str,
        rec: &SnapshotRecord,
    ) -> Result<Plan, StoreError> {
        let ds = st
            .datasets
            .by_id(rec.dataset)
            .cloned()
            .expect("a snapshot names its dataset");
        let shown_root =
            snapshot_dnode_locked(&self.pool, st, rec, rec.root)?.ok_or_else(|| {
                StoreError::corrupt_object(
                    "snapshot",
                    rec.root,
                    format!("{full}: its root object is missing"),
                )
            })?;
        let mut old = Vec::new();
        let mut born_after = Vec::new();
        let mut root = None;
        for id in 2..st.next_object {
            let dn = read_dnode(&self.pool, st, id)?;
            if dn.kind == ObjectKind::Free || dn.dataset != rec.dataset {
                continue;
            }
            free_born_after(&self.pool, &dn.root, dn.levels, rec.txg, &mut born_after)?;
            if id == ds.object {
                root = Some((id, dn));
            } else {
                old.push((id, dn));
            }
        }
        let root = root.ok_or_else(|| {
            StoreError::corrupt_object(
                "dataset",
                ds.object,
                format!("{}: its root object is missing", ds.name),
            )
        })?;
        let old_map = match ds.props.get(CLONE_MAP_PROP).and_then(|v| v.parse().ok()) {
            Some(map) => Some(map).filter(|_| {
                read_dnode(&self.pool, st, map)
                    .is_ok_and(|d| d.dataset == POOL_OBJECTS && d.kind != ObjectKind::Free)
            }),
            None => None,
        };
        if let Some(map) = old_map {
            // Loaded now, so that freeing it later reads nothing.
            self.object_mut(st, map)?;
        }
        let view = SnapshotView {
            name: full.to_string(),
            dataset: rec.dataset,
            snapshot: rec.name.clone(),
            txg: rec.txg,
            root: rec.root,
        };
        Ok(Plan {
            view,
            shown_root,
            root,
            old,
            born_after,
            old_map,
            origin: st.datasets.origin_of(rec.dataset).cloned(),
        })
    }

    /// The snapshot's blocks that the copies do not hold (its directories', mostly).
    fn unheld_by_copy(
        &self,
        st: &mut State,
        rec: &SnapshotRecord,
        plan: &Plan,
        copy: &Copy,
    ) -> Result<Unheld, StoreError> {
        let shown = self.old_blocks_of(st, rec.dataset, Some(rec), rec.txg)?;
        let mut held = HashMap::new();
        for &id in copy.map.values() {
            let dn = self.object_mut(st, id)?.dnode;
            old_blocks(&self.pool, &dn.root, dn.levels, rec.txg, &mut held)?;
        }
        let origin_txg = plan.origin.as_ref().map_or(0, |o| o.txg);
        let origin_shared = held
            .values()
            .filter(|bp| bp.birth <= origin_txg)
            .map(|bp| self.pool.deflated_size(bp))
            .sum();
        let dead = shown
            .into_iter()
            .filter(|(k, bp)| !held.contains_key(k) && bp.birth > origin_txg)
            .map(|(_, bp)| bp)
            .collect();
        Ok(Unheld {
            dead,
            origin_shared,
        })
    }

    /// After a failed copy: the copies go and the root object is what it was. A copy was
    /// made in this txg; its blocks are the snapshot's, so it is emptied before it is
    /// freed (the sync would put them on the dataset's dead list).
    fn undo_copy(&self, st: &mut State, plan: &Plan, copy: &Copy) -> Result<(), StoreError> {
        for &id in copy.map.values().filter(|&&id| id != plan.root.0) {
            if let Some(dn) = st.objects.get(&id).map(|o| o.dnode) {
                restore_object(st, id, emptied(dn));
                // (Not `free_object_locked`: a copy's xattr field may still name the
                // snapshot's object, which is not the copy's to free.)
                self.free_one_object_locked(st, id)?;
            }
        }
        restore_object(st, plan.root.0, plan.root.1);
        Ok(())
    }

    /// The dataset's old objects leave (their blocks born after the snapshot are freed;
    /// the older ones are the snapshot's), with no read that could fail half-way.
    fn drop_old_objects(&self, st: &mut State, plan: &Plan) -> Result<(), StoreError> {
        for &(id, dn) in &plan.old {
            // Emptied first, so that the sync walks no tree: its blocks are settled here.
            restore_object(st, id, emptied(dn));
            self.free_one_object_locked(st, id)?;
        }
        let txg = st.txg;
        st.deferred
            .extend(plan.born_after.iter().map(|d| (txg, *d)));
        Ok(())
    }

    /// The head's dead list, the space (the snapshot's, less its directories, to which
    /// the sync adds the new ones), what a clone shares with its origin, the clone map.
    fn settle_moved(
        &self,
        st: &mut State,
        rec: &SnapshotRecord,
        plan: &Plan,
        copy: &Copy,
        unheld: Unheld,
    ) -> Result<(), StoreError> {
        let head = st.datasets.snapshots.heads[&rec.dataset];
        let list = st.snaps.dead.entry(head).or_default();
        list.bps = unheld.dead;
        list.rewrite = true;
        let ds = st.datasets.by_id_mut(rec.dataset).expect("planned");
        copy.set_space(ds, rec);
        if let Some(origin) = &plan.origin {
            let released = origin.referenced.saturating_sub(unheld.origin_shared);
            ds.props
                .insert(ORIGIN_RELEASED_PROP.into(), released.to_string());
        }
        ds.props.remove(CLONE_MAP_PROP);
        // A receive map is one of the old objects, and names them: the dataset takes no
        // incremental stream until a full one (`crate::receive`).
        ds.props.remove(RECEIVE_MAP_PROP);
        st.datasets_dirty = true;
        if let Some(map) = plan.old_map {
            self.free_object_locked(st, map)?;
        }
        Ok(())
    }
}

/// A dataset root to copy snapshot root `shown` into: a directory starts empty (the copy
/// fills it); anything else takes the snapshot's dnode whole in the copy.
fn empty_like(shown: &Dnode, dataset: u32, txg: u64) -> Dnode {
    let mut d = Dnode::new(shown.kind, dataset, shown.block_size, now_ns());
    d.created_txg = txg;
    d
}

/// `dn` with no blocks (its blocks are accounted for elsewhere).
fn emptied(dn: Dnode) -> Dnode {
    Dnode {
        root: BlockPointer::HOLE,
        levels: 1,
        size: 0,
        used: 0,
        logical: 0,
        physical: 0,
        ..dn
    }
}
