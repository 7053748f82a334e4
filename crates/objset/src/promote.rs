//! `cairn promote POOL/CLONE`: the clone takes over its origin's history, and the dataset
//! it was cloned from becomes a clone of it (as `zfs promote`), so the old dataset can be
//! destroyed and the clone keeps the snapshots.
//!
//! ```text
//!  before                                        after (T = txg of @b)
//!  tank/fs    @a ── @b ── @c ── head             tank/fs    @c ── head      origin tank/test@b
//!                    └───────────┐               tank/test  @a ── @b ── @t ── head
//!  tank/test  (origin tank/fs@b) @t ── head
//! ```
//! What moves:
//! - The records of the origin's snapshots up to the origin snapshot (@a, @b), with their
//!   dead lists unchanged (the history they count is the clone's history too).
//! - Their override lists, whose dnodes the clone now owns. Those dnodes keep their ids,
//!   which are not the clone's (a clone has copies of them under ids of its own,
//!   `crate::clone`), so each moved record names the root object it shows
//!   (`SnapshotRecord::root`). The origin snapshot is *sealed* first: every dnode it shows
//!   is copied into its own override list, because the live objects of those ids stay with
//!   tank/fs and go on changing. A read of @a or @b therefore never reaches the live table.
//! - Blocks. Every block of @b is born at or before T. The clone had let go of some of
//!   them without listing them (they were the origin's, `cairn:origin-released`); each now
//!   goes on the dead list of the first of the clone's snapshots, or its head, that no
//!   longer holds it — where it would be had the clone always owned @b. Found by walking
//!   the block pointers of @b, then of the clone's snapshots and head: the time grows with
//!   the number of block pointers (indirect blocks are read, data blocks are not).
//! - tank/fs drops its dead-list entries born at or before T: they are its origin's now,
//!   counted in `cairn:origin-released` as for any clone.
//! - Clones of @a or @b name tank/test as their origin's dataset. tank/fs gets a clone map
//!   (`crate::clone_send`) that maps each object to itself, since its objects are the ones
//!   @b shows: `send -i tank/test@b tank/fs@c` works as for any clone.
//!
//! One txg: a crash leaves the pool before or after the promote. Limits: the origin must
//! not itself be a clone (promote it first); a clone's snapshot name that the origin's
//! moved snapshots also use is refused; the moved snapshots cannot be rolled back to, and
//! only the newest (the one the dataset was cloned from) is the base of an incremental or
//! a diff to a snapshot taken after the promote, through the clone map
//! (`crate::clone_send`).

use std::collections::{HashMap, HashSet};

use cairn_pool::io::bp::{BlockPointer, Dva};
use cairn_pool::Pool;

use crate::core::{State, StoreCore};
use crate::dataset::{ORIGIN_PROP, ORIGIN_RELEASED_PROP, POOL_OBJECTS};
use crate::dnode::ObjectKind;
use crate::error::StoreError;
use crate::object::decode_indirect;
use crate::object_io::read_dnode;
use crate::snapshot::{BlockList, SnapshotRecord};
use crate::snapshot_read::snapshot_dnode_locked;

/// What a promote did (for `cairn promote -v` and the tests).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PromoteReport {
    /// Snapshot names that moved to the clone, oldest first.
    pub moved: Vec<String>,
    /// Bytes of the origin snapshot the clone had let go of, now on its dead lists.
    pub adopted: u64,
    /// Bytes the old origin dropped from its dead lists (now its origin's).
    pub released: u64,
}

/// Who gives and who takes.
struct Plan {
    clone: u32,
    origin: u32,
    /// The origin snapshot (the newest that moves).
    at: SnapshotRecord,
    /// The origin's snapshots up to and including `at`, oldest first.
    moving: Vec<SnapshotRecord>,
}

impl StoreCore {
    /// `cairn promote POOL/CLONE` (see the module's diagram).
    pub fn promote(&self, clone: &str) -> Result<PromoteReport, StoreError> {
        let mut st = self.wait_for_writer(self.lock());
        let plan = plan(&st, clone)?;
        self.sync_locked(&mut st)?;
        self.seal(&mut st, &plan.at)?;
        let adopted = self.adopt_released_blocks(&mut st, &plan)?;
        let identity = (self.shown_root(&st, &plan.at) == self.dataset_root(&st, plan.origin))
            .then(|| sealed_ids(&st, &plan.at));
        move_records(&mut st, &plan);
        let released = self.release_to_origin(&mut st, &plan)?;
        rename_origins(&mut st, &plan);
        st.datasets_dirty = true;
        self.sync_locked(&mut st)?;
        drop(st);
        if let Some(ids) = identity {
            // (After the promote's txg: a crash between the two leaves tank/fs without a
            // clone map, so that only a full send of it works, as for clones made before
            // clone maps.)
            self.save_clone_map(plan.origin, ids)?;
            self.sync()?;
        }
        Ok(PromoteReport {
            moved: plan.moving.iter().map(|r| r.name.clone()).collect(),
            adopted,
            released,
        })
    }

    fn dataset_root(&self, st: &State, id: u32) -> u64 {
        st.datasets.by_id(id).map_or(0, |d| d.object)
    }

    /// The root object snapshot `rec` shows.
    fn shown_root(&self, st: &State, rec: &SnapshotRecord) -> u64 {
        match rec.root {
            0 => self.dataset_root(st, rec.dataset),
            root => root,
        }
    }

    /// Copies every dnode the snapshot shows into its own override list.
    fn seal(&self, st: &mut State, at: &SnapshotRecord) -> Result<(), StoreError> {
        let mut shown = Vec::new();
        for id in 2..st.next_object {
            if let Some(dn) = snapshot_dnode_locked(&self.pool, st, at, id)? {
                shown.push((id, dn));
            }
        }
        let list = st.snaps.overrides.entry(at.override_object).or_default();
        for (id, dn) in shown {
            if let std::collections::btree_map::Entry::Vacant(e) = list.dnodes.entry(id) {
                e.insert(dn);
                list.pending.push(id);
            }
        }
        Ok(())
    }

    /// Puts each block of the origin snapshot that the clone let go of on the dead list
    /// of the first of its snapshots (or its head) without it. Returns their bytes.
    fn adopt_released_blocks(&self, st: &mut State, plan: &Plan) -> Result<u64, StoreError> {
        let txg = plan.at.txg;
        let mut held = HashMap::new();
        let shown = st.snaps.overrides[&plan.at.override_object].dnodes.clone();
        for dn in shown.values() {
            if dn.dataset == plan.at.dataset && dn.created_txg <= txg {
                old_blocks(&self.pool, &dn.root, dn.levels, txg, &mut held)?;
            }
        }
        let own: Vec<SnapshotRecord> = st.datasets.snapshots.of(plan.clone).cloned().collect();
        let head = match st.datasets.snapshots.heads.get(&plan.clone) {
            Some(&h) => h,
            None => {
                let h = self.new_dead_list(st)?;
                st.datasets.snapshots.heads.insert(plan.clone, h);
                h
            }
        };
        let mut adopted = 0;
        for (list, rec) in own
            .iter()
            .map(|r| (r.dead_object, Some(r)))
            .chain([(head, None)])
        {
            let still = self.old_blocks_of(st, plan.clone, rec, txg)?;
            let (keep, gone): (HashMap<Dva, BlockPointer>, _) =
                held.into_iter().partition(|(k, _)| still.contains(k));
            held = keep;
            let list = st.snaps.dead.entry(list).or_default();
            for bp in gone.into_values() {
                adopted += self.pool.deflated_size(&bp);
                list.bps.push(bp);
            }
        }
        Ok(adopted)
    }

    /// A new, empty dead-list object.
    fn new_dead_list(&self, st: &mut State) -> Result<u64, StoreError> {
        let obj = self.create_object_locked(st, ObjectKind::Table, POOL_OBJECTS, 16 << 10)?;
        st.snaps.dead.insert(obj, BlockList::default());
        Ok(obj)
    }

    /// The blocks born at or before `txg` that dataset `ds` holds in snapshot `rec` (or
    /// its head, `None`), by their first copy.
    fn old_blocks_of(
        &self,
        st: &mut State,
        ds: u32,
        rec: Option<&SnapshotRecord>,
        txg: u64,
    ) -> Result<HashSet<Dva>, StoreError> {
        let mut found = HashMap::new();
        for id in 2..st.next_object {
            let dn = match rec {
                Some(r) => snapshot_dnode_locked(&self.pool, st, r, id)?,
                None => Some(read_dnode(&self.pool, st, id)?)
                    .filter(|d| d.kind != ObjectKind::Free && d.dataset == ds),
            };
            if let Some(dn) = dn {
                old_blocks(&self.pool, &dn.root, dn.levels, txg, &mut found)?;
            }
        }
        Ok(found.into_keys().collect())
    }

    /// The old origin's dead-list entries born at or before the origin snapshot leave its
    /// lists (they are its origin's blocks now); returns their bytes, which it counts as
    /// released. A dataset left without snapshots loses its head list.
    fn release_to_origin(&self, st: &mut State, plan: &Plan) -> Result<u64, StoreError> {
        let snaps = &st.datasets.snapshots;
        let lists: Vec<u64> = snaps
            .of(plan.origin)
            .map(|r| r.dead_object)
            .chain(snaps.heads.get(&plan.origin).copied())
            .collect();
        let mut released = 0u64;
        for obj in lists {
            let list = st.snaps.dead.entry(obj).or_default();
            let before = list.bps.len();
            list.bps.retain(|bp| {
                let origin_block = bp.birth <= plan.at.txg;
                if origin_block {
                    released += self.pool.deflated_size(bp);
                }
                !origin_block
            });
            list.rewrite |= list.bps.len() != before;
        }
        if st.datasets.snapshots.of(plan.origin).next().is_none() {
            if let Some(head) = st.datasets.snapshots.heads.remove(&plan.origin) {
                debug_assert!(st.snaps.dead.get(&head).is_none_or(|l| l.bps.is_empty()));
                st.snaps.dead.remove(&head);
                self.free_object_locked(st, head)?;
            }
        }
        let o = st.datasets.by_id_mut(plan.origin).expect("planned");
        o.props
            .insert(ORIGIN_RELEASED_PROP.into(), released.to_string());
        Ok(released)
    }
}

/// Checks that `clone` can be promoted and finds what moves.
fn plan(st: &State, clone: &str) -> Result<Plan, StoreError> {
    let table = &st.datasets;
    let c = table
        .by_name(clone)
        .ok_or_else(|| StoreError::NoSuchDataset(clone.into()))?;
    let Some(origin_name) = c.props.get(ORIGIN_PROP) else {
        return Err(StoreError::NotPermitted(format!(
            "{clone} is not a clone (it has no origin); only a clone can be promoted"
        )));
    };
    let at = table.origin_of(c.id).cloned().ok_or_else(|| {
        StoreError::corrupt(
            "dataset table",
            format!("{clone}: origin {origin_name} is missing"),
        )
    })?;
    let o = table
        .by_id(at.dataset)
        .expect("an origin names its dataset");
    if let Some(oo) = o.props.get(ORIGIN_PROP) {
        return Err(StoreError::NotPermitted(format!(
            "{} is itself a clone (of {oo}); promoting a clone of a clone is not built: \
             `cairn promote {}` first",
            o.name, o.name
        )));
    }
    let moving: Vec<SnapshotRecord> = table
        .snapshots
        .of(o.id)
        .filter(|r| r.txg <= at.txg)
        .cloned()
        .collect();
    let taken: Vec<String> = moving
        .iter()
        .filter(|r| table.snapshots.find(c.id, &r.name).is_some())
        .map(|r| format!("{clone}@{}", r.name))
        .collect();
    if !taken.is_empty() {
        return Err(StoreError::NotPermitted(format!(
            "{} of {} would move to {clone}, which has snapshots of those names ({}); \
             destroy them first",
            moving.len(),
            o.name,
            taken.join(", ")
        )));
    }
    Ok(Plan {
        clone: c.id,
        origin: o.id,
        at,
        moving,
    })
}

/// The ids the sealed snapshot shows, each to itself (the old origin's clone map).
fn sealed_ids(st: &State, at: &SnapshotRecord) -> HashMap<u64, u64> {
    st.snaps.overrides[&at.override_object]
        .dnodes
        .iter()
        .filter(|(_, d)| d.dataset == at.dataset && d.created_txg <= at.txg)
        .map(|(&id, _)| (id, id))
        .collect()
}

/// The moving records become the clone's: they name the root they show (0 when that is
/// the clone's own, as after promoting back) and their dnodes are the clone's.
fn move_records(st: &mut State, plan: &Plan) {
    let origin_root = st.datasets.by_id(plan.origin).map_or(0, |d| d.object);
    let clone_root = st.datasets.by_id(plan.clone).map_or(0, |d| d.object);
    for rec in &plan.moving {
        if let Some(list) = st.snaps.overrides.get_mut(&rec.override_object) {
            for dn in list.dnodes.values_mut() {
                if dn.dataset == plan.origin {
                    dn.dataset = plan.clone;
                }
            }
            list.rewrite = true;
        }
        let snaps = &mut st.datasets.snapshots;
        snaps
            .records
            .retain(|r| !(r.dataset == plan.origin && r.name == rec.name));
        let shown = if rec.root != 0 { rec.root } else { origin_root };
        let mut moved = rec.clone();
        moved.dataset = plan.clone;
        moved.root = if shown == clone_root { 0 } else { shown };
        snaps.insert(moved);
    }
}

/// Origins named by dataset: the clone has none now, the old origin has the origin
/// snapshot (now the clone's), and clones of the moved snapshots follow them.
fn rename_origins(st: &mut State, plan: &Plan) {
    let name_of = |id: u32| {
        st.datasets
            .by_id(id)
            .map_or(String::new(), |d| d.name.clone())
    };
    let (origin, clone) = (name_of(plan.origin), name_of(plan.clone));
    let renamed: HashMap<String, String> = plan
        .moving
        .iter()
        .map(|r| {
            (
                format!("{origin}@{}", r.name),
                format!("{clone}@{}", r.name),
            )
        })
        .collect();
    for d in st.datasets.datasets.iter_mut() {
        if let Some(new) = d.props.get(ORIGIN_PROP).and_then(|o| renamed.get(o)) {
            d.props.insert(ORIGIN_PROP.into(), new.clone());
        }
    }
    let c = st.datasets.by_id_mut(plan.clone).expect("planned");
    c.props.remove(ORIGIN_PROP);
    c.props.remove(ORIGIN_RELEASED_PROP);
    let o = st.datasets.by_id_mut(plan.origin).expect("planned");
    o.props
        .insert(ORIGIN_PROP.into(), format!("{clone}@{}", plan.at.name));
}

/// Adds every block of the tree under `bp` born at or before `txg` to `out`, by its first
/// copy. Blocks born later are walked for the older blocks below them (a new indirect
/// block may point at old children); an old block's subtree is all old.
fn old_blocks(
    pool: &Pool,
    bp: &BlockPointer,
    levels: u8,
    txg: u64,
    out: &mut HashMap<Dva, BlockPointer>,
) -> Result<(), StoreError> {
    let Some(&first) = bp.copies().next() else {
        return Ok(()); // a hole (or data held in the pointer): no space of its own
    };
    if bp.birth <= txg && out.insert(first, *bp).is_some() {
        return Ok(()); // walked already
    }
    if levels > 1 {
        for child in decode_indirect(&pool.read_bp(bp)?)? {
            old_blocks(pool, &child, levels - 1, txg, out)?;
        }
    }
    Ok(())
}
