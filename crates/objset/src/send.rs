//! `cairn send [-R] [-i @a | -I @a] POOL/DS@b`: snapshots as streams (`crate::stream`).
//!
//! A full stream walks the snapshot whole. An incremental from `@a` to `@b` reads only what
//! changed, which the snapshot records already say:
//! ```text
//!  @a (txg 10)          @x (txg 20)          @b (txg 30)
//!   │ override list of @a │ override list of @x │        ← dnodes changed after @a, after @x
//!   └──── changed objects = ids on the lists of @a … the snapshot before @b ────┘
//!  new objects: not on any list (they did not exist at @a) but named by a changed
//!               directory or a changed object's xattr field → found from the changed ones
//!  an object's changed blocks: walk its tree in @b from the root, skipping every pointer
//!               born at or before @a's txg (it and everything below it are shared with @a)
//! ```
//! So an incremental's cost follows the change: the objects that changed, the blocks born
//! since `@a`, and the entries of the directories that changed (sent whole). A clone's
//! incremental from its origin (another dataset's snapshot) finds its changed objects
//! another way (`crate::clone_send`), then sends them as here.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;

use cairn_pool::io::bp::BlockPointer;
use cairn_pool::Pool;

use crate::codec::Writer;
use crate::core::StoreCore;
use crate::dataset::Dataset;
use crate::dnode::{Dnode, ObjectKind, BPS_PER_INDIRECT_SHIFT};
use crate::error::StoreError;
use crate::object::decode_indirect;
use crate::receive::RESUME_TOKEN_PROP;
use crate::snapshot_ops::split_snapshot_name;
use crate::snapshot_read::SnapshotView;
use crate::stream::{
    object_record, Header, Position, ResumeToken, Sender, StreamStats, DATA, DATA_CHUNK, DIR, FREE,
    HOLE, OBJECT,
};

/// What `cairn send` sends besides the snapshot named.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendOptions {
    /// `-i @a` / `-I @a`: an incremental from this earlier snapshot of the same dataset
    /// (`a`, `@a` or `POOL/DS@a`).
    pub from: Option<String>,
    /// `-I`: every snapshot between `from` and the one named, a stream each.
    pub intermediates: bool,
    /// `-R`: the dataset and its descendants that have the snapshot, with all their
    /// snapshots up to it; with `from`, each one's incremental (`-i`) or incrementals
    /// (`-I`) from it.
    pub replicate: bool,
}

/// One stream of a send: dataset `dataset` from snapshot `from` (`None`: full; a full
/// `DS@SNAP` name, of the dataset or, for a clone, its origin) to `to`; `path` is where it
/// sits below the dataset named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    pub dataset: String,
    pub from: Option<String>,
    pub to: String,
    pub path: String,
    /// `send -t`: the token naming where the stream resumes.
    pub resume: Option<ResumeToken>,
}

/// Bytes read at a time from a file being sent whole (its blocks are fetched together).
const READ_AHEAD: usize = 8 * DATA_CHUNK;

/// Objects of a snapshot with their dnodes, in id order.
type ObjectList = Vec<(u64, Dnode)>;

/// What an incremental sends: objects (with whether `@a` had them), in id order, and the
/// ids that `@a` had and `@b` does not.
#[derive(Default)]
pub(crate) struct ChangeSet {
    pub objects: BTreeMap<u64, (Dnode, bool)>,
    pub freed: Vec<u64>,
}

/// A stretch of an object's blocks that changed: one block of data, or blocks that are
/// holes now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BlockChange {
    Data(u64),
    Hole { first: u64, count: u64 },
}

impl StoreCore {
    /// `cairn send`: the streams `opts` asks for, one after the other, on `out`.
    pub fn send(
        &self,
        snapshot: &str,
        opts: &SendOptions,
        out: &mut dyn Write,
    ) -> Result<StreamStats, StoreError> {
        let mut total = StreamStats::default();
        for step in self.send_plan(snapshot, opts)? {
            total.add(&self.send_stream(&step, out)?);
        }
        Ok(total)
    }

    /// `cairn send -t TOKEN`: the rest of a stream that `receive -s` kept a part of.
    pub fn send_resume(&self, token: &str, out: &mut dyn Write) -> Result<StreamStats, StoreError> {
        let t = ResumeToken::decode(token)?;
        let (dataset, to) = split_snapshot_name(&t.to)?;
        let from = if t.from_guid == 0 {
            None
        } else {
            let table = self.datasets();
            let ds = table
                .by_name(dataset)
                .ok_or_else(|| StoreError::NoSuchDataset(dataset.into()))?;
            // Its own snapshot, or (a clone's incremental) its origin.
            let own = table.snapshots.of(ds.id).find(|r| r.guid == t.from_guid);
            let own = own.map(|r| format!("{dataset}@{}", r.name));
            let origin = table
                .origin_of(ds.id)
                .filter(|r| r.guid == t.from_guid)
                .and_then(|_| ds.props.get(crate::dataset::ORIGIN_PROP).cloned());
            let origin = own.or(origin).ok_or_else(|| {
                StoreError::NotFound(format!(
                    "the snapshot of {dataset} the resumed incremental starts from (guid {:016x}): it was destroyed, so the receive cannot be resumed; `cairn receive -A` discards it",
                    t.from_guid
                ))
            })?;
            Some(origin)
        };
        let step = Step {
            dataset: dataset.to_string(),
            from,
            to: to.to_string(),
            path: String::new(),
            resume: Some(t),
        };
        self.send_stream(&step, out)
    }

    /// The streams of a send, parents before children, oldest snapshot first.
    fn send_plan(&self, snapshot: &str, opts: &SendOptions) -> Result<Vec<Step>, StoreError> {
        let (ds_name, to) = split_snapshot_name(snapshot)?;
        if let Some(origin) = opts
            .from
            .as_deref()
            .filter(|f| is_other_dataset(ds_name, f))
        {
            return self.clone_plan(ds_name, to, origin, opts);
        }
        let from = match &opts.from {
            Some(f) => Some(origin_name(ds_name, f)?),
            None => None,
        };
        let table = self.datasets();
        let top = table
            .by_name(ds_name)
            .ok_or_else(|| StoreError::NoSuchDataset(ds_name.into()))?;
        let datasets: Vec<&Dataset> = if opts.replicate {
            subtree(&table.datasets, top)
        } else {
            vec![top]
        };
        let mut steps = Vec::new();
        for d in datasets {
            let names: Vec<&str> = table.snapshots.of(d.id).map(|r| r.name.as_str()).collect();
            let Some(end) = names.iter().position(|n| *n == to) else {
                if d.id == top.id {
                    return Err(StoreError::NotFound(snapshot.into()));
                }
                continue; // (-R: a descendant made after the snapshot is not sent)
            };
            let start = match &from {
                Some(f) => {
                    let i = names
                        .iter()
                        .position(|n| n == f)
                        .ok_or_else(|| missing_origin(&table, d, f))?;
                    if i >= end {
                        return Err(StoreError::BadName(
                            format!("{}@{f}", d.name),
                            format!("the origin must be older than @{to}"),
                        ));
                    }
                    Some(i)
                }
                None => None,
            };
            let path = d
                .name
                .strip_prefix(ds_name)
                .unwrap_or("")
                .trim_start_matches('/');
            let step = |from: Option<usize>, to: usize| Step {
                dataset: d.name.clone(),
                from: from.map(|i| format!("{}@{}", d.name, names[i])),
                to: names[to].to_string(),
                path: path.to_string(),
                resume: None,
            };
            // -I, or -R without an origin (every snapshot from the first on); -R -i sends
            // one incremental per dataset, as zfs does.
            let every = opts.intermediates || (opts.replicate && from.is_none());
            match (start, every) {
                (None, false) => steps.push(step(None, end)),
                (Some(i), false) => steps.push(step(Some(i), end)),
                (None, true) => {
                    steps.push(step(None, 0));
                    steps.extend((1..=end).map(|k| step(Some(k - 1), k)));
                }
                (Some(i), true) => steps.extend((i + 1..=end).map(|k| step(Some(k - 1), k))),
            }
        }
        Ok(steps)
    }

    /// One stream: its header, its records, its end.
    fn send_stream(&self, step: &Step, out: &mut dyn Write) -> Result<StreamStats, StoreError> {
        let vb = self.snapshot_view(&format!("{}@{}", step.dataset, step.to))?;
        let va = match &step.from {
            Some(a) => Some(self.snapshot_view(a)?),
            None => None,
        };
        // From a snapshot that came by `promote` to one taken after it: their objects are
        // numbered apart, so the stream goes as from a clone's origin (`crate::clone_send`).
        let through_clone_map = va
            .as_ref()
            .is_some_and(|a| a.dataset != vb.dataset || a.root != vb.root);
        let table = self.datasets();
        let ds = table.by_id(vb.dataset).expect("a view names its dataset");
        let guid_of = |v: &SnapshotView| {
            table
                .snapshots
                .find(v.dataset, &v.snapshot)
                .map_or(0, |r| r.guid)
        };
        let mut props = ds.props.clone();
        props.retain(|k, _| !crate::dataset::is_internal_property(k) && k != RESUME_TOKEN_PROP);
        let header = Header {
            kind: ds.kind,
            snapshot: vb.snapshot.clone(),
            guid: guid_of(&vb),
            txg: vb.txg,
            root: vb.root,
            props,
            from_guid: va.as_ref().map_or(0, guid_of),
            path: step.path.clone(),
            source: step.dataset.clone(),
            resume: step.resume.as_ref().map(|t| t.at),
            clone: through_clone_map,
        };
        if let Some(t) = &step.resume {
            // The snapshots must be the very ones the token names.
            if (header.guid, header.from_guid) != (t.to_guid, t.from_guid) {
                return Err(StoreError::NotFound(format!(
                    "{} as the resume token names it (guid {:016x}): it was destroyed or replaced, so the receive cannot be resumed; `cairn receive -A` discards it",
                    t.to, t.to_guid
                )));
            }
        }
        let mut s = Sender::start(out, &header)?;
        match &va {
            None => self.send_full(&vb, &mut s)?,
            Some(va) => self.send_changes(va, &vb, &mut s)?,
        }
        s.finish()
    }

    fn send_full(&self, v: &SnapshotView, s: &mut Sender<'_>) -> Result<(), StoreError> {
        let (objects, dirs) = self.collect(v)?;
        for (id, dn) in &objects {
            if !s.sends_object(*id) {
                continue;
            }
            s.record(OBJECT, &object_record(*id, dn))?;
            s.stats.objects += 1;
            if dn.kind != ObjectKind::Directory {
                self.send_data(v, *id, dn, s)?;
            }
        }
        for dir in dirs {
            if s.sends(Position::DIRS, dir, 0) {
                self.send_dir(v, dir, s)?;
            }
        }
        Ok(())
    }

    fn send_changes(
        &self,
        va: &SnapshotView,
        vb: &SnapshotView,
        s: &mut Sender<'_>,
    ) -> Result<(), StoreError> {
        let changes = if va.dataset == vb.dataset && va.root == vb.root {
            self.changes(va, vb)?
        } else {
            self.clone_changes(va, vb, s)?
        };
        for (&id, (dn, existed)) in &changes.objects {
            if !s.sends_object(id) {
                continue;
            }
            s.record(OBJECT, &object_record(id, dn))?;
            s.stats.objects += 1;
            match (dn.kind, existed) {
                (ObjectKind::Directory, _) => {}
                (_, true) => self.send_changed_data(vb, id, dn, va.txg, s)?,
                (_, false) => self.send_data(vb, id, dn, s)?,
            }
        }
        for (&id, (dn, _)) in &changes.objects {
            if dn.kind == ObjectKind::Directory && s.sends(Position::DIRS, id, 0) {
                self.send_dir(vb, id, s)?;
            }
        }
        for id in changes.freed {
            if !s.sends(Position::FREES, id, 0) {
                continue;
            }
            s.record(FREE, &id.to_le_bytes())?;
            s.stats.freed_objects += 1;
        }
        Ok(())
    }

    /// Every object of the snapshot (id order) and its directories.
    pub(crate) fn collect(&self, v: &SnapshotView) -> Result<(ObjectList, Vec<u64>), StoreError> {
        let mut seen: HashMap<u64, Dnode> = HashMap::new();
        let mut dirs = Vec::new();
        let mut queue = vec![v.root];
        while let Some(id) = queue.pop() {
            if seen.contains_key(&id) {
                continue;
            }
            let dn = self.snapshot_dnode(v, id)?;
            if dn.xattr != 0 {
                queue.push(dn.xattr);
            }
            if dn.kind == ObjectKind::Directory {
                dirs.push(id);
                for (_, e) in self.snapshot_read_dir(v, id)? {
                    queue.push(e.object);
                }
            }
            seen.insert(id, dn);
        }
        let mut objects: Vec<(u64, Dnode)> = seen.into_iter().collect();
        objects.sort_by_key(|(id, _)| *id);
        dirs.sort_unstable();
        Ok((objects, dirs))
    }

    /// What changed from `va` to `vb` (see the module's diagram).
    fn changes(&self, va: &SnapshotView, vb: &SnapshotView) -> Result<ChangeSet, StoreError> {
        let listed = self.overridden_between(va, vb);
        let mut set = ChangeSet::default();
        let mut seen: HashSet<u64> = HashSet::new();
        for id in listed {
            seen.insert(id);
            let a = self.snapshot_dnode_if_any(va, id)?;
            match (a, self.snapshot_dnode_if_any(vb, id)?) {
                (_, Some(b)) => {
                    set.objects.insert(id, (b, a.is_some()));
                }
                (Some(_), None) => set.freed.push(id),
                (None, None) => {}
            }
        }
        let mut queue: Vec<u64> = set.objects.keys().copied().collect();
        while let Some(id) = queue.pop() {
            let dn = set.objects[&id].0;
            let mut named = Vec::new();
            if dn.xattr != 0 {
                named.push(dn.xattr);
            }
            if dn.kind == ObjectKind::Directory {
                named.extend(
                    self.snapshot_read_dir(vb, id)?
                        .into_iter()
                        .map(|(_, e)| e.object),
                );
            }
            for child in named {
                // Unlisted and in @a: unchanged. Unlisted and not in @a: new.
                if !seen.insert(child) || self.snapshot_dnode_if_any(va, child)?.is_some() {
                    continue;
                }
                let dn = self.snapshot_dnode(vb, child)?;
                set.objects.insert(child, (dn, false));
                queue.push(child);
            }
        }
        set.freed.sort_unstable();
        Ok(set)
    }

    /// Ids on the override lists of `va` and every later snapshot before `vb`: each dnode
    /// of the dataset that changed or was freed after `va` (objects created since are not
    /// on them).
    fn overridden_between(&self, va: &SnapshotView, vb: &SnapshotView) -> Vec<u64> {
        let st = self.lock();
        let mut ids: Vec<u64> = st
            .datasets
            .snapshots
            .of(va.dataset)
            .filter(|r| r.txg >= va.txg && r.txg < vb.txg)
            .filter_map(|r| st.snaps.overrides.get(&r.override_object))
            .flat_map(|l| l.dnodes.keys().copied())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// The blocks of object `id` born after `since`, and the holes among them, as DATA and
    /// HOLE records (within the object's size in `v`; the receiver sets the size last).
    fn send_changed_data(
        &self,
        v: &SnapshotView,
        id: u64,
        dn: &Dnode,
        since: u64,
        s: &mut Sender<'_>,
    ) -> Result<(), StoreError> {
        let changes = {
            // The snapshot's blocks stay until it is destroyed; a destroy waits for readers.
            let _gate = self.read_gate.read().unwrap_or_else(|p| p.into_inner());
            changed_blocks(&self.pool, dn, since)?
        };
        let bs = u64::from(dn.block_size);
        let mut buf = vec![0u8; dn.block_size as usize];
        for change in changes {
            let (first, count) = match change {
                BlockChange::Data(b) => (b, 1),
                BlockChange::Hole { first, count } => (first, count),
            };
            let off = first.saturating_mul(bs);
            if off >= dn.size || !s.sends(Position::OBJECTS, id, off) {
                continue;
            }
            let len = count.saturating_mul(bs).min(dn.size - off);
            if let BlockChange::Data(_) = change {
                let n = self.snapshot_read(v, id, off, &mut buf[..len as usize])?;
                if buf[..n].iter().any(|&b| b != 0) {
                    data_record(s, id, off, &buf[..n])?;
                    continue;
                }
            }
            let mut w = Writer::new();
            w.u64(id).u64(off).u64(len);
            s.record(HOLE, &w.buf)?;
        }
        Ok(())
    }

    /// Every non-zero byte of object `id` as DATA records.
    fn send_data(
        &self,
        v: &SnapshotView,
        id: u64,
        dn: &Dnode,
        s: &mut Sender<'_>,
    ) -> Result<(), StoreError> {
        let mut reader = self.snapshot_object_reader(v, id)?;
        let mut buf =
            vec![0u8; READ_AHEAD.min(dn.size.next_multiple_of(DATA_CHUNK as u64) as usize)];
        let mut off = s.data_start(id);
        while off < dn.size {
            let n = reader.read(self, off, &mut buf)?;
            if n == 0 {
                break;
            }
            for (i, part) in buf[..n].chunks(DATA_CHUNK).enumerate() {
                if part.iter().any(|&b| b != 0) {
                    data_record(s, id, off + (i * DATA_CHUNK) as u64, part)?;
                }
            }
            off += n as u64;
        }
        Ok(())
    }

    fn send_dir(&self, v: &SnapshotView, dir: u64, s: &mut Sender<'_>) -> Result<(), StoreError> {
        let entries = self.snapshot_read_dir(v, dir)?;
        let mut w = Writer::new();
        w.u64(dir).u64(entries.len() as u64);
        for (name, e) in &entries {
            w.str(name).u64(e.object).u8(e.kind as u8);
        }
        s.record(DIR, &w.buf)
    }
}

fn data_record(s: &mut Sender<'_>, id: u64, off: u64, bytes: &[u8]) -> Result<(), StoreError> {
    let mut w = Writer::new();
    w.u64(id).u64(off).raw(bytes);
    s.record(DATA, &w.buf)?;
    s.stats.data_bytes += bytes.len() as u64;
    Ok(())
}

/// `a`, `@a` or `DS@a` (of the dataset sent) → `a`.
fn origin_name(ds_name: &str, from: &str) -> Result<String, StoreError> {
    let name = match from.split_once('@') {
        Some(("", snap)) => snap,
        Some((ds, snap)) if ds == ds_name => snap,
        Some((ds, _)) => {
            return Err(StoreError::BadName(
                from.into(),
                format!("the origin must be a snapshot of {ds_name}, or its origin ({ds} is not)"),
            ))
        }
        None => from,
    };
    crate::dataset::validate_component(name)?;
    Ok(name.to_string())
}

/// Whether `from` (`a`, `@a` or `DS@a`) names a snapshot of another dataset than `ds_name`
/// (then it must be the clone's origin: `crate::clone_send`).
fn is_other_dataset(ds_name: &str, from: &str) -> bool {
    from.split_once('@')
        .is_some_and(|(ds, _)| !ds.is_empty() && ds != ds_name)
}

/// The error for an origin `@f` that dataset `d` does not have; a clone whose origin
/// snapshot is `@f` is told to name it in full (the short form means its own snapshot).
fn missing_origin(table: &crate::dataset::DatasetTable, d: &Dataset, f: &str) -> StoreError {
    let origin = d.props.get(crate::dataset::ORIGIN_PROP);
    match origin {
        Some(o) if table.origin_of(d.id).is_some_and(|r| r.name == f) => StoreError::NotFound(
            format!(
                "{}@{f}: {} has no snapshot @{f}; its origin is {o}: to send what changed since it was cloned, name the origin in full (`send -i {o} {}@…`)",
                d.name, d.name, d.name
            ),
        ),
        _ => StoreError::NotFound(format!(
            "{}@{f} (the incremental's origin must be a snapshot of each dataset sent)",
            d.name
        )),
    }
}

/// `top` and its descendants, parents first.
fn subtree<'a>(all: &'a [Dataset], top: &'a Dataset) -> Vec<&'a Dataset> {
    let mut out = vec![top];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i].id;
        let mut children: Vec<&Dataset> = all.iter().filter(|d| d.parent == parent).collect();
        children.sort_by(|a, b| a.name.cmp(&b.name));
        out.extend(children);
        i += 1;
    }
    out
}

/// The blocks of `dnode`'s tree born after `since`, in block order: data blocks, and the
/// holes inside indirect blocks born after it (a hole there may be new). A hole root makes
/// the whole object a hole.
fn changed_blocks(pool: &Pool, dnode: &Dnode, since: u64) -> Result<Vec<BlockChange>, StoreError> {
    let mut out = Vec::new();
    if dnode.root.is_hole() {
        out.push(BlockChange::Hole {
            first: 0,
            count: u64::MAX,
        });
        return Ok(out);
    }
    walk_born_after(pool, &dnode.root, dnode.levels, 0, since, &mut out)?;
    Ok(out)
}

fn walk_born_after(
    pool: &Pool,
    bp: &BlockPointer,
    levels: u8,
    first: u64,
    since: u64,
    out: &mut Vec<BlockChange>,
) -> Result<(), StoreError> {
    if bp.birth <= since {
        return Ok(());
    }
    if levels <= 1 {
        out.push(BlockChange::Data(first));
        return Ok(());
    }
    // Data blocks under each child pointer of this indirect block.
    let span = 1u64 << (BPS_PER_INDIRECT_SHIFT * u32::from(levels - 2));
    for (i, child) in decode_indirect(&pool.read_bp(bp)?)?.iter().enumerate() {
        let at = first + i as u64 * span;
        if !child.is_hole() {
            walk_born_after(pool, child, levels - 1, at, since, out)?;
        } else if let Some(BlockChange::Hole { first, count }) = out.last_mut() {
            if *first + *count == at {
                *count += span;
            } else {
                out.push(BlockChange::Hole {
                    first: at,
                    count: span,
                });
            }
        } else {
            out.push(BlockChange::Hole {
                first: at,
                count: span,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_is_named_three_ways_and_only_of_the_dataset_sent() {
        for f in ["a", "@a", "tank/fs@a"] {
            assert_eq!(origin_name("tank/fs", f).unwrap(), "a");
        }
        assert!(origin_name("tank/fs", "tank/other@a").is_err());
        assert!(origin_name("tank/fs", "@").is_err());
    }
}
