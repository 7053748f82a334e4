//! `cairn send -i POOL/DS@O POOL/CLONE@S`: an incremental from a clone's origin (with `-I`,
//! followed by an incremental per later snapshot of the clone).
//!
//! A clone starts as copies of its origin's dnodes under new ids (`crate::clone`), and its
//! clone map says which copy each origin object became. What changed since:
//! ```text
//!  origin DS@O (txg 40)                 clone CLONE@S
//!   object 9  ── clone map ──▶ object 31: same block tree → unchanged, not sent
//!   object 12 ── clone map ──▶ object 33: a block born at txg 52 → OBJECT, that block
//!   object 15 ── clone map ──▶ object 34: gone from CLONE@S → FREE 34
//!                              object 40: not on the map → new, sent whole
//!  directories: a clone's are its own, so their lists are compared through the map
//! ```
//! No override list covers a clone before its first snapshot, so the objects are found by
//! walking CLONE@S's namespace (`collect`, as a full send does) and comparing each dnode
//! with its origin's; the blocks of a changed object come from the same birth-txg walk as
//! any incremental (`send_changed_data`, from the origin's txg). The cost is one dnode per
//! object and every directory read twice, with data read only where it changed.
//!
//! The stream names the clone's objects; CLONE_IDS records (first) give the origin's id of
//! each, so a receiver can clone its copy of the origin and know every object
//! (`crate::receive_clone`).
//!
//! Across a promote (`crate::promote`) the same goes from any snapshot that came with it
//! (`promoted_map`): objects of an older one that the map does not name, gone before the
//! map's snapshot, are named by `gone_id` in CLONE_IDS and freed.

use std::collections::{HashMap, HashSet};

use crate::core::StoreCore;
use crate::dataset::ORIGIN_PROP;
use crate::dnode::{Dnode, ObjectKind};
use crate::error::StoreError;
use crate::send::{ChangeSet, SendOptions, Step};
use crate::snapshot_read::SnapshotView;
use crate::stream::{Sender, CLONE_IDS, CLONE_IDS_PER_RECORD};

impl StoreCore {
    /// The one stream of `send -i ORIGIN DS@TO`, where `origin` is `ds_name`'s origin.
    pub(crate) fn clone_plan(
        &self,
        ds_name: &str,
        to: &str,
        origin: &str,
        opts: &SendOptions,
    ) -> Result<Vec<Step>, StoreError> {
        let table = self.datasets();
        let ds = table
            .by_name(ds_name)
            .ok_or_else(|| StoreError::NoSuchDataset(ds_name.into()))?;
        match ds.props.get(ORIGIN_PROP) {
            Some(o) if o == origin => {}
            Some(o) => {
                return Err(StoreError::BadName(
                    origin.into(),
                    format!("the origin must be a snapshot of {ds_name}, or its origin {o}"),
                ))
            }
            None => {
                return Err(StoreError::BadName(
                    origin.into(),
                    format!(
                        "the origin must be a snapshot of {ds_name} ({ds_name} is not a clone)"
                    ),
                ))
            }
        }
        if opts.replicate {
            return Err(StoreError::NotPermitted(format!(
                "-R does not start from a clone's origin; send `-I {origin} {ds_name}@{to}`"
            )));
        }
        let names: Vec<&str> = table.snapshots.of(ds.id).map(|r| r.name.as_str()).collect();
        let end = names
            .iter()
            .position(|n| *n == to)
            .ok_or_else(|| StoreError::NotFound(format!("{ds_name}@{to}")))?;
        let step = |from: String, to: &str| Step {
            dataset: ds_name.to_string(),
            from: Some(from),
            to: to.to_string(),
            path: String::new(),
            resume: None,
        };
        if !opts.intermediates {
            return Ok(vec![step(origin.to_string(), to)]);
        }
        // -I: from the origin to the clone's first snapshot, then one incremental per
        // snapshot of the clone up to `to` (the receiver makes the clone with the first).
        let mut steps = vec![step(origin.to_string(), names[0])];
        steps.extend((1..=end).map(|k| step(format!("{ds_name}@{}", names[k - 1]), names[k])));
        Ok(steps)
    }

    /// What changed in clone snapshot `vb` since its origin `va` (see the module's
    /// comment); sends the CLONE_IDS records first.
    pub(crate) fn clone_changes(
        &self,
        va: &SnapshotView,
        vb: &SnapshotView,
        s: &mut Sender<'_>,
    ) -> Result<ChangeSet, StoreError> {
        let (map, gone) = if va.dataset == vb.dataset {
            self.promoted_map(va, vb.root)?
        } else {
            let map = self.load_clone_map(vb.dataset)?;
            if !map.contains_key(&va.root) {
                // The map is from another snapshot: the clone was cloned from a clone that
                // it was promoted over (`crate::promote`), and took over that one's origin.
                return Err(StoreError::NotPermitted(format!(
                    "{}'s clone map is not from {} (it was promoted over the clone it was \
                     cloned from); send a full stream of {}",
                    vb.name, va.name, vb.name
                )));
            }
            (map, Vec::new())
        };
        // Objects of `va` gone before the map's snapshot are named by ids of their own,
        // freed below.
        let mut named = map.clone();
        named.extend(gone.iter().map(|&o| (o, gone_id(o))));
        send_clone_ids(&named, s)?;
        let back: HashMap<u64, u64> = map.iter().map(|(&o, &c)| (c, o)).collect();
        let (objects, _) = self.collect(vb)?;
        let mut set = ChangeSet::default();
        let present: HashSet<u64> = objects.iter().map(|(id, _)| *id).collect();
        for (id, dn) in objects {
            let Some(&o) = back.get(&id) else {
                set.objects.insert(id, (dn, false));
                continue;
            };
            let a = self.snapshot_dnode(va, o)?;
            if a.kind != dn.kind {
                // (An id the clone freed and used again: the receiver's copy is of
                // another kind, so the stream cannot name it. Not expected: ids of live
                // objects are not reused while the snapshot's copies exist.)
                return Err(StoreError::corrupt_object(
                    "clone map",
                    id,
                    format!(
                        "{}: a {:?}, its origin's object {o} a {:?}",
                        vb.name, dn.kind, a.kind
                    ),
                ));
            }
            if self.differs_from_origin(va, vb, &back, (o, &a), (id, &dn))? {
                set.objects.insert(id, (dn, true));
            }
        }
        set.freed = map
            .values()
            .filter(|c| !present.contains(c))
            .copied()
            .chain(gone.iter().map(|&o| gone_id(o)))
            .collect();
        set.freed.sort_unstable();
        Ok(set)
    }

    /// `send -i DS@B DS@T` where `@B` came to DS by `promote` and `@T` was taken after:
    /// DS's clone map (made when DS was cloned, or rolled back to `@B`) must be from
    /// exactly `@B`'s objects to DS's own. Otherwise (a map replaced by a later promote)
    /// the stream cannot name what changed.
    fn check_promoted_map(
        &self,
        va: &SnapshotView,
        vb: &SnapshotView,
        map: &HashMap<u64, u64>,
    ) -> Result<(), StoreError> {
        let own_root = self.datasets().by_id(vb.dataset).map(|d| d.object);
        let (objects, _) = self.collect(va)?;
        let fits = own_root == Some(vb.root)
            && objects.len() == map.len()
            && objects.iter().all(|(id, _)| map.contains_key(id));
        if fits {
            return Ok(());
        }
        Err(promoted_apart(&va.name, &vb.name))
    }

    /// The clone map for a diff or an incremental from `va`, which came to its dataset by
    /// `promote`, to the dataset's own `to_root` (a snapshot taken after, or the head).
    /// The map names exactly the objects of the newest snapshot that came with `va`
    /// (`check_promoted_map`); an object keeps its id from one snapshot of a dataset to the
    /// next (ids are not reused while snapshots may show them), so the map names `va`'s
    /// objects too, but for those gone before that snapshot, returned apart. Restricted
    /// to `va`'s objects.
    pub(crate) fn promoted_map(
        &self,
        va: &SnapshotView,
        to_root: u64,
    ) -> Result<(HashMap<u64, u64>, Vec<u64>), StoreError> {
        let map = self.load_clone_map(va.dataset)?;
        let vb = SnapshotView {
            root: to_root,
            ..va.clone()
        };
        let newest = self
            .datasets()
            .snapshots
            .of(va.dataset)
            .filter(|r| r.root == va.root)
            .last()
            .map(|r| r.name.clone());
        let ds_name = va.name.split_once('@').map_or("", |(d, _)| d);
        let newest = match newest {
            Some(n) if n != va.snapshot => self.snapshot_view(&format!("{ds_name}@{n}"))?,
            _ => va.clone(),
        };
        self.check_promoted_map(&newest, &vb, &map)?;
        if newest == *va {
            return Ok((map, Vec::new()));
        }
        let (objects, _) = self.collect(va)?;
        let shown: HashSet<u64> = objects.iter().map(|(id, _)| *id).collect();
        let mut gone: Vec<u64> = shown
            .iter()
            .filter(|o| !map.contains_key(o))
            .copied()
            .collect();
        gone.sort_unstable();
        let map = map.into_iter().filter(|(o, _)| shown.contains(o)).collect();
        Ok((map, gone))
    }

    /// Whether clone object `b` (of `vb`) is not what origin object `a` (of `va`) was:
    /// attributes, extended attributes object, block tree or (directories) entries.
    fn differs_from_origin(
        &self,
        va: &SnapshotView,
        vb: &SnapshotView,
        back: &HashMap<u64, u64>,
        (a_id, a): (u64, &Dnode),
        (b_id, b): (u64, &Dnode),
    ) -> Result<bool, StoreError> {
        let attrs = |d: &Dnode| {
            (
                (d.mode, d.uid, d.gid, d.nlink, d.rdev),
                (d.mtime_ns, d.ctime_ns, d.atime_ns),
            )
        };
        let xattr_same = match b.xattr {
            0 => a.xattr == 0,
            x => back.get(&x) == Some(&a.xattr),
        };
        if attrs(a) != attrs(b) || !xattr_same {
            return Ok(true);
        }
        if b.kind != ObjectKind::Directory {
            // A copy shares its origin's tree until it writes: any write moves the root.
            return Ok((a.size, a.block_size, a.root) != (b.size, b.block_size, b.root));
        }
        let mut theirs = self.snapshot_read_dir(va, a_id)?;
        let mut ours = self.snapshot_read_dir(vb, b_id)?;
        theirs.sort_by(|x, y| x.0.cmp(&y.0));
        ours.sort_by(|x, y| x.0.cmp(&y.0));
        let same = theirs.len() == ours.len()
            && theirs.iter().zip(&ours).all(|((na, ea), (nb, eb))| {
                na == nb && ea.kind == eb.kind && back.get(&eb.object) == Some(&ea.object)
            });
        Ok(!same)
    }
}

/// Snapshot `from` came to its dataset by `promote` and `to` is from after it: their
/// objects have different ids (`crate::promote`), and the dataset's clone map is not from
/// the snapshots that came with `from`.
pub(crate) fn promoted_apart(from: &str, to: &str) -> StoreError {
    StoreError::NotPermitted(format!(
        "{from} came to its dataset by `promote`, {to} is from after it, and their objects \
         are numbered apart, but the dataset's clone map is not from {from}'s snapshots (a \
         later promote replaced it, or a cairn that kept no clone map made the clone): send \
         a full stream of {to}"
    ))
}

/// The id a stream gives object `origin` of a moved snapshot that the clone map does not
/// name (gone before the map's snapshot; `promoted_map`): far above any object id, so no
/// other stream names it.
pub(crate) fn gone_id(origin: u64) -> u64 {
    u64::MAX - origin
}

/// CLONE_IDS records: every (clone id, origin id) pair of the clone map, in clone id order.
fn send_clone_ids(map: &HashMap<u64, u64>, s: &mut Sender<'_>) -> Result<(), StoreError> {
    let mut pairs: Vec<(u64, u64)> = map.iter().map(|(&o, &c)| (c, o)).collect();
    pairs.sort_unstable();
    for chunk in pairs.chunks(CLONE_IDS_PER_RECORD) {
        let mut w = crate::codec::Writer::new();
        w.u64(chunk.len() as u64);
        for &(c, o) in chunk {
            w.u64(c).u64(o);
        }
        s.record(CLONE_IDS, &w.buf)?;
    }
    Ok(())
}
