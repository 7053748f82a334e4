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
//! - When tank/fs is itself a clone, tank/test takes over its origin; blocks born at or
//!   before that origin's txg are its, listed by nobody, and each side's
//!   `cairn:origin-released` is counted from the blocks its head still holds.
//!
//! One txg: a crash leaves the pool before or after the promote. A rollback to a moved
//! snapshot copies it in, as a clone (`crate::rollback_moved`). An incremental or a diff
//! from a moved snapshot to one taken after the promote goes through the clone map
//! (`crate::clone_send`). Limit: a clone's snapshot name that the origin's moved snapshots
//! also use is refused.

use std::collections::HashMap;

use cairn_pool::io::bp::{BlockPointer, Dva};

use crate::block_sets::old_blocks;
use crate::core::{State, StoreCore};
use crate::dataset::{ORIGIN_PROP, ORIGIN_RELEASED_PROP, POOL_OBJECTS};
use crate::dnode::ObjectKind;
use crate::error::StoreError;
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

/// What the clone let go of (`released_by_clone`): blocks per dead list (`None`: its
/// head's), and the bytes of the grand origin its head still holds.
#[derive(Default)]
struct Adoption {
    lists: Vec<(Option<u64>, Vec<BlockPointer>)>,
    grand_shared: u64,
}

/// Who gives and who takes.
struct Plan {
    clone: u32,
    origin: u32,
    /// The origin snapshot (the newest that moves).
    at: SnapshotRecord,
    /// The origin's snapshots up to and including `at`, oldest first.
    moving: Vec<SnapshotRecord>,
    /// The origin's own origin, when it is a clone: the clone takes it over, and its
    /// blocks (born at or before its txg) stay with it, listed by nobody.
    grand: Option<(String, SnapshotRecord)>,
}

impl Plan {
    /// Blocks born at or before this txg belong to the grand origin.
    fn grand_txg(&self) -> u64 {
        self.grand.as_ref().map_or(0, |(_, r)| r.txg)
    }
}

impl StoreCore {
    /// `cairn promote POOL/CLONE` (see the module's diagram).
    pub fn promote(&self, clone: &str) -> Result<PromoteReport, StoreError> {
        let mut st = self.wait_for_writer(self.lock());
        let plan = plan(&st, clone)?;
        self.sync_locked(&mut st)?;
        self.seal(&mut st, &plan.at)?;
        let shown = self.snapshot_blocks(&st, &plan.at)?;
        let grand_blocks: HashMap<Dva, BlockPointer> = shown
            .iter()
            .filter(|(_, bp)| bp.birth <= plan.grand_txg())
            .map(|(k, bp)| (*k, *bp))
            .collect();
        // Every read first: an error leaves the tables as they were (sealing only adds
        // what the snapshot shows anyway).
        let adoption = self.released_by_clone(&mut st, &plan, shown)?;
        let grand_gone = self.grand_released_by_origin(&mut st, &plan, grand_blocks)?;
        let identity = (self.shown_root(&st, &plan.at) == self.dataset_root(&st, plan.origin))
            .then(|| sealed_ids(&st, &plan.at));
        let adopted = self.adopt(&mut st, &plan, adoption.lists)?;
        move_records(&mut st, &plan);
        let released = self.release_to_origin(&mut st, &plan, grand_gone)?;
        rename_origins(&mut st, &plan, adoption.grand_shared);
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

    /// Every block of the (sealed) snapshot `at`, by its first copy.
    fn snapshot_blocks(
        &self,
        st: &State,
        at: &SnapshotRecord,
    ) -> Result<HashMap<Dva, BlockPointer>, StoreError> {
        let mut blocks = HashMap::new();
        for dn in st.snaps.overrides[&at.override_object].dnodes.values() {
            if dn.dataset == at.dataset && dn.created_txg <= at.txg {
                old_blocks(&self.pool, &dn.root, dn.levels, at.txg, &mut blocks)?;
            }
        }
        Ok(blocks)
    }

    /// Each block of the origin snapshot (`held`) that the clone let go of, by the dead
    /// list it goes on: that of the first of the clone's snapshots (or its head, `None`)
    /// without it — but for the grand origin's, which stay its. Also the bytes of the
    /// grand origin the clone's head still holds.
    fn released_by_clone(
        &self,
        st: &mut State,
        plan: &Plan,
        mut held: HashMap<Dva, BlockPointer>,
    ) -> Result<Adoption, StoreError> {
        let (txg, grand_txg) = (plan.at.txg, plan.grand_txg());
        let own: Vec<SnapshotRecord> = st.datasets.snapshots.of(plan.clone).cloned().collect();
        let mut adoption = Adoption::default();
        for rec in own.iter().map(Some).chain([None]) {
            let still = self.old_blocks_of(st, plan.clone, rec, txg)?;
            if rec.is_none() {
                adoption.grand_shared = still
                    .values()
                    .filter(|bp| bp.birth <= grand_txg)
                    .map(|bp| self.pool.deflated_size(bp))
                    .sum();
            }
            let (keep, gone): (HashMap<Dva, BlockPointer>, _) =
                held.into_iter().partition(|(k, _)| still.contains_key(k));
            held = keep;
            let gone = gone.into_values().filter(|bp| bp.birth > grand_txg);
            adoption
                .lists
                .push((rec.map(|r| r.dead_object), gone.collect()));
        }
        Ok(adoption)
    }

    /// Puts the adopted blocks on the clone's dead lists (making its head list if it had
    /// none); returns their bytes.
    fn adopt(
        &self,
        st: &mut State,
        plan: &Plan,
        lists: Vec<(Option<u64>, Vec<BlockPointer>)>,
    ) -> Result<u64, StoreError> {
        let head = match st.datasets.snapshots.heads.get(&plan.clone) {
            Some(&h) => h,
            None => {
                let h = self.new_dead_list(st)?;
                st.datasets.snapshots.heads.insert(plan.clone, h);
                h
            }
        };
        let mut adopted = 0;
        for (list, bps) in lists {
            let list = st.snaps.dead.entry(list.unwrap_or(head)).or_default();
            for bp in bps {
                adopted += self.pool.deflated_size(&bp);
                list.bps.push(bp);
            }
        }
        Ok(adopted)
    }

    /// When the old origin was a clone itself: the bytes of the grand origin's blocks of
    /// the origin snapshot (`grand_blocks`) its head no longer holds (it never listed them,
    /// and now counts them as released from its new origin).
    fn grand_released_by_origin(
        &self,
        st: &mut State,
        plan: &Plan,
        grand_blocks: HashMap<Dva, BlockPointer>,
    ) -> Result<u64, StoreError> {
        if grand_blocks.is_empty() {
            return Ok(0);
        }
        let holds = self.old_blocks_of(st, plan.origin, None, plan.grand_txg())?;
        Ok(grand_blocks
            .iter()
            .filter(|(k, _)| !holds.contains_key(k))
            .map(|(_, bp)| self.pool.deflated_size(bp))
            .sum())
    }

    /// A new, empty dead-list object.
    fn new_dead_list(&self, st: &mut State) -> Result<u64, StoreError> {
        let obj = self.create_object_locked(st, ObjectKind::Table, POOL_OBJECTS, 16 << 10)?;
        st.snaps.dead.insert(obj, BlockList::default());
        Ok(obj)
    }

    /// The old origin's dead-list entries born at or before the origin snapshot leave its
    /// lists (they are its origin's blocks now); their bytes, with `unlisted` (blocks it let
    /// go of without listing them: `grand_released_by_origin`), are what it counts as
    /// released, and are returned. A dataset left without snapshots loses its head list.
    fn release_to_origin(
        &self,
        st: &mut State,
        plan: &Plan,
        unlisted: u64,
    ) -> Result<u64, StoreError> {
        let snaps = &st.datasets.snapshots;
        let lists: Vec<u64> = snaps
            .of(plan.origin)
            .map(|r| r.dead_object)
            .chain(snaps.heads.get(&plan.origin).copied())
            .collect();
        let mut released = unlisted;
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
    let grand = table
        .origin_of(o.id)
        .cloned()
        .map(|r| (o.props[ORIGIN_PROP].clone(), r));
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
        grand,
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

/// Origins named by dataset: the clone has none now (or the old origin's own, with
/// `grand_shared` of its bytes still held), the old origin has the origin snapshot (now
/// the clone's), and clones of the moved snapshots follow them.
fn rename_origins(st: &mut State, plan: &Plan, grand_shared: u64) {
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
    match &plan.grand {
        Some((name, rec)) => {
            c.props.insert(ORIGIN_PROP.into(), name.clone());
            let released = rec.referenced.saturating_sub(grand_shared);
            c.props
                .insert(ORIGIN_RELEASED_PROP.into(), released.to_string());
        }
        None => {
            c.props.remove(ORIGIN_PROP);
            c.props.remove(ORIGIN_RELEASED_PROP);
        }
    }
    let o = st.datasets.by_id_mut(plan.origin).expect("planned");
    o.props
        .insert(ORIGIN_PROP.into(), format!("{clone}@{}", plan.at.name));
}
