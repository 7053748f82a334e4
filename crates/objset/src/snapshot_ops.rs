//! Taking, destroying and rolling back snapshots, and their space (the rules are in
//! `crate::snapshot`). Each operation is one txg: it syncs what was open first, so the
//! snapshot shows a committed txg, then commits its own change before it returns.

use cairn_pool::io::bp::{BlockPointer, Dva};
use cairn_pool::Pool;

use crate::core::{now_ns, State, StoreCore};
use crate::dataset::{validate_component, POOL_OBJECTS};
use crate::dnode::{Dnode, ObjectKind};
use crate::error::StoreError;
use crate::object::{decode_indirect, ObjectState};
use crate::object_io::{load_object_bytes, read_dnode};
use crate::snapshot::{BlockList, DnodeList, SnapshotRecord};

/// Block size of list objects (dead lists and override lists grow by appends).
const LIST_BLOCK: u32 = 16 << 10;

/// A snapshot as `cairn list -t snapshot` shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnapshotInfo {
    /// `pool/ds@name`.
    pub name: String,
    pub txg: u64,
    pub created_ns: u64,
    pub guid: u64,
    /// What destroying it would free.
    pub used: u64,
    pub referenced: u64,
    pub logical: u64,
    pub physical: u64,
    /// Tags of its user holds.
    #[serde(default)]
    pub holds: Vec<String>,
}

/// Splits `pool/ds@name` into its dataset and snapshot name, checking the name.
pub fn split_snapshot_name(full: &str) -> Result<(&str, &str), StoreError> {
    let (ds, snap) = full.split_once('@').ok_or_else(|| {
        StoreError::BadName(full.into(), "a snapshot is named POOL/DATASET@NAME".into())
    })?;
    validate_component(snap)?;
    Ok((ds, snap))
}

/// The record of `pool/ds@name`.
fn find_snapshot(st: &State, full: &str) -> Result<SnapshotRecord, StoreError> {
    let (ds_name, snap) = split_snapshot_name(full)?;
    let ds = st
        .datasets
        .by_name(ds_name)
        .ok_or_else(|| StoreError::NoSuchDataset(ds_name.into()))?;
    st.datasets
        .snapshots
        .find(ds.id, snap)
        .cloned()
        .ok_or_else(|| StoreError::NotFound(full.into()))
}

/// Reads every list the dataset table names into memory (at open).
pub(crate) fn load_lists(pool: &Pool, st: &mut State) -> Result<(), StoreError> {
    let section = st.datasets.snapshots.clone();
    let dead = section.heads.values().copied();
    for obj in dead.chain(section.records.iter().map(|r| r.dead_object)) {
        let list = BlockList::decode(&load_object_bytes(pool, st, obj)?)
            .map_err(|e| StoreError::corrupt_object("dead list", obj, e))?;
        st.snaps.dead.insert(obj, list);
    }
    for r in &section.records {
        let obj = r.override_object;
        let list = DnodeList::decode(&load_object_bytes(pool, st, obj)?)
            .map_err(|e| StoreError::corrupt_object("override list", obj, e))?;
        st.snaps.overrides.insert(obj, list);
    }
    Ok(())
}

impl StoreCore {
    fn new_list_object(&self, st: &mut State) -> Result<u64, StoreError> {
        self.create_object_locked(st, ObjectKind::Table, POOL_OBJECTS, LIST_BLOCK)
    }

    /// `cairn snapshot [-r] POOL/DS@NAME…`: every snapshot named (and with `recursive`,
    /// the same name on every descendant) shows the same committed txg. Returns their names.
    pub fn snapshot_create(
        &self,
        names: &[String],
        recursive: bool,
    ) -> Result<Vec<String>, StoreError> {
        let mut st = self.wait_for_writer(self.lock());
        let mut wanted: Vec<(u32, String, String)> = Vec::new();
        for full in names {
            let (ds_name, snap) = split_snapshot_name(full)?;
            let ds = st
                .datasets
                .by_name(ds_name)
                .ok_or_else(|| StoreError::NoSuchDataset(ds_name.into()))?;
            let mut ids = vec![ds.id];
            if recursive {
                ids.extend(descendants(&st.datasets, ds.id));
            }
            for id in ids {
                let name = st.datasets.by_id(id).expect("listed").name.clone();
                let full = format!("{name}@{snap}");
                if st.datasets.snapshots.find(id, snap).is_some()
                    || wanted.iter().any(|w| w.2 == full)
                {
                    return Err(StoreError::DatasetExists(full));
                }
                wanted.push((id, snap.to_string(), full));
            }
        }
        self.sync_locked(&mut st)?;
        let txg = st.txg - 1;
        for (id, snap, _) in &wanted {
            self.add_snapshot_locked(&mut st, *id, snap, txg)?;
        }
        st.datasets_dirty = true;
        self.sync_locked(&mut st)?;
        Ok(wanted.into_iter().map(|w| w.2).collect())
    }

    /// Records snapshot `snap` of dataset `id` at committed txg `txg`: it takes the head's
    /// dead list, and the head starts an empty one.
    fn add_snapshot_locked(
        &self,
        st: &mut State,
        id: u32,
        snap: &str,
        txg: u64,
    ) -> Result<(), StoreError> {
        let dead_object = match st.datasets.snapshots.heads.get(&id) {
            Some(&head) => head,
            None => {
                let obj = self.new_list_object(st)?;
                st.snaps.dead.insert(obj, BlockList::default());
                obj
            }
        };
        let head = self.new_list_object(st)?;
        st.snaps.dead.insert(head, BlockList::default());
        let override_object = self.new_list_object(st)?;
        st.snaps
            .overrides
            .insert(override_object, DnodeList::default());
        let ds = st.datasets.by_id(id).expect("checked");
        let record = SnapshotRecord {
            dataset: id,
            name: snap.to_string(),
            txg,
            created_ns: now_ns(),
            guid: snapshot_guid(id, snap, txg),
            referenced: ds.used,
            logical: ds.logical,
            physical: ds.physical,
            dead_object,
            override_object,
            holds: Vec::new(),
            root: 0,
        };
        st.datasets.snapshots.heads.insert(id, head);
        st.datasets.snapshots.insert(record);
        Ok(())
    }

    /// `cairn hold TAG DS@SNAP…` (`add`) and `cairn release TAG DS@SNAP…`: with `recursive`,
    /// the same snapshot name in every descendant that has it. All or nothing, one txg.
    pub fn snapshot_hold(
        &self,
        names: &[String],
        tag: &str,
        recursive: bool,
        add: bool,
    ) -> Result<(), StoreError> {
        if tag.is_empty() || tag.len() > 255 {
            return Err(StoreError::BadName(
                tag.into(),
                "a tag has 1 to 255 bytes".into(),
            ));
        }
        let mut st = self.wait_for_writer(self.lock());
        let mut targets = Vec::new();
        for full in names {
            let (ds, snap) = split_snapshot_name(full)?;
            let id = st
                .datasets
                .by_name(ds)
                .ok_or_else(|| StoreError::NoSuchDataset(ds.into()))?
                .id;
            if st.datasets.snapshots.find(id, snap).is_none() {
                return Err(StoreError::NotFound(full.clone()));
            }
            targets.push((id, snap.to_string()));
            if recursive {
                for c in descendants(&st.datasets, id) {
                    if st.datasets.snapshots.find(c, snap).is_some() {
                        targets.push((c, snap.to_string()));
                    }
                }
            }
        }
        for (id, snap) in &targets {
            let rec = st.datasets.snapshots.find(*id, snap).expect("checked");
            let held = rec.holds.iter().any(|t| t == tag);
            if held == add {
                let what = if add { "already has" } else { "has no" };
                return Err(StoreError::NotPermitted(format!(
                    "{snap} {what} a hold '{tag}'"
                )));
            }
        }
        for (id, snap) in targets {
            let rec = st.datasets.snapshots.records.iter_mut();
            let rec = rec
                .into_iter()
                .find(|r| r.dataset == id && r.name == snap)
                .expect("checked");
            if add {
                rec.holds.push(tag.to_string());
                rec.holds.sort();
            } else {
                rec.holds.retain(|t| t != tag);
            }
        }
        st.datasets_dirty = true;
        self.sync_locked(&mut st)?;
        Ok(())
    }

    /// Gives a received snapshot the guid it had where it was sent from (an incremental
    /// stream names the snapshot it starts from by guid).
    pub(crate) fn set_snapshot_guid(
        &self,
        id: u32,
        snap: &str,
        guid: u64,
    ) -> Result<(), StoreError> {
        let mut st = self.wait_for_writer(self.lock());
        let rec = st
            .datasets
            .snapshots
            .records
            .iter_mut()
            .find(|r| r.dataset == id && r.name == snap);
        rec.ok_or_else(|| StoreError::NotFound(snap.into()))?.guid = guid;
        st.datasets_dirty = true;
        self.sync_locked(&mut st)?;
        Ok(())
    }

    /// The dead list after snapshot `idx` (the next snapshot's, or the head's) and the txg
    /// of the snapshot before it (0: none).
    fn neighbours(st: &State, rec: &SnapshotRecord) -> (u64, u64) {
        let snaps = &st.datasets.snapshots;
        let mine: Vec<&SnapshotRecord> = snaps.of(rec.dataset).collect();
        let at = mine
            .iter()
            .position(|r| r.name == rec.name)
            .expect("listed");
        let prev_txg = if at == 0 { 0 } else { mine[at - 1].txg };
        let next = mine
            .get(at + 1)
            .map(|r| r.dead_object)
            .unwrap_or_else(|| snaps.heads[&rec.dataset]);
        (next, prev_txg)
    }

    /// What destroying `rec` frees: the blocks on the next dead list born after the
    /// previous snapshot.
    fn unique_bytes(&self, st: &State, rec: &SnapshotRecord) -> u64 {
        let (next, prev_txg) = Self::neighbours(st, rec);
        st.snaps.dead.get(&next).map_or(0, |l| {
            l.bytes(|bp| {
                if bp.birth > prev_txg {
                    self.pool.deflated_size(bp)
                } else {
                    0
                }
            })
        })
    }

    /// Every snapshot of the pool (or of one dataset), oldest first within a dataset.
    pub fn snapshots(&self, dataset: Option<&str>) -> Result<Vec<SnapshotInfo>, StoreError> {
        let st = self.lock();
        let only = match dataset {
            Some(name) => Some(
                st.datasets
                    .by_name(name)
                    .ok_or_else(|| StoreError::NoSuchDataset(name.into()))?
                    .id,
            ),
            None => None,
        };
        let mut out = Vec::new();
        for r in &st.datasets.snapshots.records {
            if only.is_some_and(|id| id != r.dataset) {
                continue;
            }
            let ds = st
                .datasets
                .by_id(r.dataset)
                .map_or("?", |d| d.name.as_str());
            out.push(SnapshotInfo {
                name: format!("{ds}@{}", r.name),
                txg: r.txg,
                created_ns: r.created_ns,
                guid: r.guid,
                used: self.unique_bytes(&st, r),
                referenced: r.referenced,
                logical: r.logical,
                physical: r.physical,
                holds: r.holds.clone(),
            });
        }
        Ok(out)
    }

    /// (usedbysnapshots, written) of a dataset: the bytes only its snapshots hold (every
    /// dead list of it), and what its head references that its newest snapshot does not.
    pub fn snapshot_space(&self, dataset: u32) -> (u64, u64) {
        let st = self.lock();
        snapshot_space_locked(&self.pool, &st, dataset)
    }

    /// `written@SNAP`: what the dataset references now that snapshot `full` does not —
    /// the bytes born after it. ZFS's formula: referenced now, less the snapshot's
    /// referenced, plus what the snapshot held and the dataset has since freed (those
    /// blocks are on the dead lists after it, born at or before its txg).
    pub fn written_since(&self, full: &str) -> Result<u64, StoreError> {
        let st = self.lock();
        let rec = find_snapshot(&st, full)?;
        let snaps = &st.datasets.snapshots;
        let later = snaps
            .of(rec.dataset)
            .filter(|r| r.txg > rec.txg)
            .map(|r| r.dead_object)
            .chain(snaps.heads.get(&rec.dataset).copied());
        let killed = later
            .filter_map(|o| st.snaps.dead.get(&o))
            .map(|l| {
                l.bytes(|bp| match bp.birth <= rec.txg {
                    true => self.pool.deflated_size(bp),
                    false => 0,
                })
            })
            .fold(0, u64::saturating_add);
        let referenced = st.datasets.by_id(rec.dataset).map_or(0, |d| d.used);
        Ok((referenced + killed).saturating_sub(rec.referenced))
    }

    /// `cairn destroy POOL/DS@NAME`: frees what only this snapshot held; returns those bytes.
    pub fn snapshot_destroy(&self, full: &str) -> Result<u64, StoreError> {
        let mut st = self.wait_for_writer(self.lock());
        let rec = find_snapshot(&st, full)?;
        let freed = self.destroy_snapshot_locked(&mut st, &rec)?;
        self.sync_locked(&mut st)?;
        Ok(freed)
    }

    fn destroy_snapshot_locked(
        &self,
        st: &mut State,
        rec: &SnapshotRecord,
    ) -> Result<u64, StoreError> {
        let ds_name = st
            .datasets
            .by_id(rec.dataset)
            .map_or("?".to_string(), |d| d.name.clone());
        let clones = st.datasets.clones_of(&format!("{ds_name}@{}", rec.name));
        if !clones.is_empty() {
            return Err(StoreError::NotPermitted(format!(
                "{ds_name}@{} has clones ({}); destroy them first, or `cairn promote` one",
                rec.name,
                clones.join(", ")
            )));
        }
        if !rec.holds.is_empty() {
            let ds = st
                .datasets
                .by_id(rec.dataset)
                .map_or("?", |d| d.name.as_str());
            return Err(StoreError::NotPermitted(format!(
                "{ds}@{} is held ({}); `cairn release TAG {ds}@{}` first",
                rec.name,
                rec.holds.join(", "),
                rec.name
            )));
        }
        let (next, prev_txg) = Self::neighbours(st, rec);
        let mine = st.snaps.dead.remove(&rec.dead_object).unwrap_or_default();
        let list = st.snaps.dead.entry(next).or_default();
        let (free, keep): (Vec<BlockPointer>, Vec<BlockPointer>) =
            list.bps.drain(..).partition(|bp| bp.birth > prev_txg);
        list.bps = keep;
        list.bps.extend(mine.bps);
        list.rewrite = true;
        let txg = st.txg;
        let mut freed = 0u64;
        for bp in &free {
            freed += self.pool.deflated_size(bp);
            st.deferred.extend(bp.copies().map(|d| (txg, *d)));
        }
        merge_overrides_into_previous(st, rec);
        for obj in [rec.dead_object, rec.override_object] {
            self.free_object_locked(st, obj)?;
        }
        let snaps = &mut st.datasets.snapshots;
        snaps
            .records
            .retain(|r| !(r.dataset == rec.dataset && r.name == rec.name));
        if snaps.of(rec.dataset).next().is_none() {
            // No snapshot left: the head's list is empty (everything on it was born after
            // "the previous snapshot", txg 0, and was freed above).
            let head = snaps.heads.remove(&rec.dataset).expect("had snapshots");
            debug_assert!(st.snaps.dead.get(&head).is_none_or(|l| l.bps.is_empty()));
            st.snaps.dead.remove(&head);
            self.free_object_locked(st, head)?;
        }
        st.datasets_dirty = true;
        Ok(freed)
    }

    /// Destroys every snapshot of dataset `id` (before the dataset itself goes).
    pub(crate) fn destroy_all_snapshots_locked(
        &self,
        st: &mut State,
        id: u32,
    ) -> Result<(), StoreError> {
        while let Some(rec) = st.datasets.snapshots.newest(id).cloned() {
            self.destroy_snapshot_locked(st, &rec)?;
        }
        Ok(())
    }

    /// `cairn rollback [-r] POOL/DS@NAME`: the dataset becomes what the snapshot shows.
    /// Only to the newest snapshot, unless `destroy_newer` destroys the ones after it (as
    /// `zfs rollback -r`). The dataset must not be in use (mounted or exported). A
    /// snapshot that came by `promote` is copied in (`crate::rollback_moved`).
    pub fn snapshot_rollback(&self, full: &str, destroy_newer: bool) -> Result<(), StoreError> {
        let mut st = self.wait_for_writer(self.lock());
        let rec = find_snapshot(&st, full)?;
        let (ds_name, id) = (full.split_once('@').expect("checked").0, rec.dataset);
        let newer: Vec<SnapshotRecord> = st
            .datasets
            .snapshots
            .of(id)
            .skip_while(|r| r.name != rec.name)
            .skip(1)
            .cloned()
            .collect();
        if !newer.is_empty() && !destroy_newer {
            let names: Vec<String> = newer
                .iter()
                .map(|r| format!("{ds_name}@{}", r.name))
                .collect();
            return Err(StoreError::NotPermitted(format!(
                "'{full}' is not the newest snapshot (newer: {}); `cairn rollback -r` destroys them",
                names.join(", ")
            )));
        }
        for r in newer.iter().rev() {
            self.destroy_snapshot_locked(&mut st, r)?;
        }
        self.sync_locked(&mut st)?;
        if rec.root != 0 {
            // It came by `promote` and shows objects under other ids than the dataset's.
            let ids = self.rollback_to_moved(&mut st, full, &rec)?;
            drop(st);
            self.save_clone_map(rec.dataset, ids)?;
            return self.sync().map(|_| ());
        }
        self.restore_locked(&mut st, &rec)?;
        self.sync_locked(&mut st)?;
        self.settle_rolled_back(&mut st, &rec)
    }

    /// After the sync that freed what the rollback dropped, the dataset's space is the
    /// snapshot's again. (Set before it, the sync would take the dropped objects' bytes off
    /// a second time.) A clone also holds again origin blocks it had let go of since the
    /// snapshot: what it shares with its origin is counted afresh from its tree (the
    /// running count, `cairn:origin-released`, only grows).
    fn settle_rolled_back(&self, st: &mut State, rec: &SnapshotRecord) -> Result<(), StoreError> {
        let ds = st.datasets.by_id_mut(rec.dataset).expect("rolled back");
        (ds.used, ds.logical, ds.physical) = (rec.referenced, rec.logical, rec.physical);
        st.datasets_dirty = true;
        let recounted = match st.datasets.origin_of(rec.dataset).cloned() {
            Some(origin) => self
                .shared_with_origin_walked(st, rec.dataset, origin.txg)
                .map(|shared| Some(origin.referenced.saturating_sub(shared))),
            None => Ok(None),
        };
        if let Ok(Some(released)) = &recounted {
            let ds = st.datasets.by_id_mut(rec.dataset).expect("rolled back");
            ds.props.insert(
                crate::dataset::ORIGIN_RELEASED_PROP.into(),
                released.to_string(),
            );
        }
        // (The space is set even when the walk failed; the error is still reported.)
        self.sync_locked(st)?;
        recounted.map(|_| ())
    }

    /// Puts back every object of the dataset that changed since `rec` (the newest snapshot,
    /// nothing dirty): objects created later are freed, changed or freed ones get their saved
    /// dnode back after the blocks born since are freed. Everything on the head's dead list
    /// is referenced again.
    fn restore_locked(&self, st: &mut State, rec: &SnapshotRecord) -> Result<(), StoreError> {
        for id in 2..st.next_object {
            let dn = read_dnode(&self.pool, st, id)?;
            if dn.kind != ObjectKind::Free && dn.dataset == rec.dataset && dn.created_txg > rec.txg
            {
                self.free_one_object_locked(st, id)?;
            }
        }
        let saved = st
            .snaps
            .overrides
            .get_mut(&rec.override_object)
            .map(std::mem::take)
            .unwrap_or_default();
        let txg = st.txg;
        // (A list merged from a destroyed later snapshot may name objects created after
        // this one: they are not part of it.)
        for (&id, dn) in saved
            .dnodes
            .iter()
            .filter(|(_, d)| d.created_txg <= rec.txg)
        {
            let now = read_dnode(&self.pool, st, id)?;
            if now.kind != ObjectKind::Free && now.dataset == rec.dataset {
                let mut freed = Vec::new();
                free_born_after(&self.pool, &now.root, now.levels, rec.txg, &mut freed)?;
                st.deferred.extend(freed.into_iter().map(|d| (txg, d)));
            }
            restore_object(st, id, *dn);
        }
        let list = st.snaps.overrides.entry(rec.override_object).or_default();
        list.rewrite = true;
        let head = st.datasets.snapshots.heads[&rec.dataset];
        let head = st.snaps.dead.entry(head).or_default();
        head.bps.clear();
        head.rewrite = true;
        Ok(())
    }
}

/// The previous snapshot read the dnodes on `rec`'s override list through it: they become
/// its own. (Not into a snapshot that came by `promote` from a snapshot taken since: its
/// objects are other ones, and it already holds each of them, `crate::promote`.)
fn merge_overrides_into_previous(st: &mut State, rec: &SnapshotRecord) {
    let saved = st.snaps.overrides.remove(&rec.override_object);
    let prev = st
        .datasets
        .snapshots
        .of(rec.dataset)
        .take_while(|r| r.name != rec.name)
        .last()
        .filter(|r| r.root == rec.root)
        .map(|r| r.override_object);
    if let (Some(prev), Some(saved)) = (prev, saved) {
        let into = st.snaps.overrides.entry(prev).or_default();
        for (id, dn) in saved.dnodes {
            if let std::collections::btree_map::Entry::Vacant(e) = into.dnodes.entry(id) {
                e.insert(dn);
                into.pending.push(id);
            }
        }
    }
}

/// Replaces object `id`'s state in the open txg by `dnode` (forgetting what was cached).
pub(crate) fn restore_object(st: &mut State, id: u64, dnode: Dnode) {
    st.dirs.forget(id);
    st.cache.retain(|&(o, _, _), _| o != id);
    let mut obj = ObjectState::new(dnode);
    obj.dnode_dirty = true;
    st.objects.insert(id, obj);
    st.snaps.restored.insert(id);
}

/// Collects the copies of every block of a tree born after `txg`. A block born at or
/// before it is shared with the snapshot of that txg, and so is everything below it (a
/// block is never older than its children), so the walk skips it whole.
pub(crate) fn free_born_after(
    pool: &Pool,
    bp: &BlockPointer,
    levels: u8,
    txg: u64,
    out: &mut Vec<Dva>,
) -> Result<(), StoreError> {
    if bp.is_hole() || bp.birth <= txg {
        return Ok(());
    }
    out.extend(bp.copies().copied());
    if levels > 1 {
        for child in decode_indirect(&pool.read_bp(bp)?)? {
            free_born_after(pool, &child, levels - 1, txg, out)?;
        }
    }
    Ok(())
}

/// (usedbysnapshots, written) of dataset `id` (see `StoreCore::snapshot_space`).
pub(crate) fn snapshot_space_locked(pool: &Pool, st: &State, id: u32) -> (u64, u64) {
    let snaps = &st.datasets.snapshots;
    let Some(&head) = snaps.heads.get(&id) else {
        let used = st.datasets.by_id(id).map_or(0, |d| d.used);
        return (0, used);
    };
    let charge = |bp: &BlockPointer| pool.deflated_size(bp);
    let lists = snaps.of(id).map(|r| r.dead_object).chain([head]);
    let by_snapshots = lists
        .filter_map(|o| st.snaps.dead.get(&o))
        .map(|l| l.bytes(charge))
        .fold(0, u64::saturating_add);
    let head_dead = st.snaps.dead.get(&head).map_or(0, |l| l.bytes(charge));
    let referenced = st.datasets.by_id(id).map_or(0, |d| d.used);
    let newest = snaps.newest(id).map_or(0, |r| r.referenced);
    let written = (referenced + head_dead).saturating_sub(newest);
    (by_snapshots, written)
}

/// A snapshot's identity: unique in practice (the name, dataset, txg and the clock).
fn snapshot_guid(dataset: u32, name: &str, txg: u64) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(&dataset.to_le_bytes()).update(name.as_bytes());
    h.update(&txg.to_le_bytes()).update(&now_ns().to_le_bytes());
    u64::from_le_bytes(h.finalize().as_bytes()[..8].try_into().expect("8 bytes"))
}

/// Bytes only snapshots hold, over dataset `id` and all its descendants (part of USED).
/// `snapshot_used_subtree`, computed once per open txg (dead lists change only at a sync,
/// or in a destroy or rollback, which sync): what a `quota` check adds on every write.
pub(crate) fn snapshot_used_subtree_cached(pool: &Pool, st: &mut State, id: u32) -> u64 {
    if let Some(&(txg, bytes)) = st.snaps.subtree_bytes.get(&id) {
        if txg == st.txg {
            return bytes;
        }
    }
    let bytes = snapshot_used_subtree(pool, st, id);
    st.snaps.subtree_bytes.insert(id, (st.txg, bytes));
    bytes
}

pub(crate) fn snapshot_used_subtree(pool: &Pool, st: &State, id: u32) -> u64 {
    let own = snapshot_space_locked(pool, st, id).0;
    st.datasets
        .children(id)
        .map(|c| snapshot_used_subtree(pool, st, c.id))
        .fold(own, u64::saturating_add)
}

/// Every dataset below `id`, depth first.
fn descendants(table: &crate::dataset::DatasetTable, id: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for c in table.children(id) {
        out.push(c.id);
        out.extend(descendants(table, c.id));
    }
    out
}
