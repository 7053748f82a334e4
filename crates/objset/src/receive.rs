//! `cairn receive [-F] POOL/DS < stream`: streams (`crate::stream`) back into datasets.
//!
//! A full stream makes a new dataset; an incremental updates one that holds the stream's
//! origin snapshot (same guid), or (`-o origin=`, or a stream from a clone's origin) is made
//! a new clone of the snapshot it starts from (`crate::receive_clone`). A stream from a
//! clone's origin into a dataset that has that origin (the sender promoted the clone, and
//! this dataset received the origin's history) updates it in place, its objects found
//! through the stream's clone ids and this dataset's receive map. Each ends with the sent
//! snapshot taken (same name, same guid), so the next incremental can start from it.
//!
//! The sender's object ids are not ours (the object table is shared by every dataset of a
//! pool). The receiver keeps the mapping in an object of the dataset — its *receive map*,
//! named by the dataset's internal property `cairn:receive-map`:
//! ```text
//!  "RCVM" u32 | n u64 | n × (sender id u64, our id u64)      ascending sender ids
//!  m u64 | m × (our owner id u64, sender id of its xattr object u64)   (a partial receive:
//!                                 owners whose xattr object has not arrived yet)
//! ```
//! It is written before the snapshot is taken, so a snapshot (and a rollback to it) holds
//! the map of that moment.
//!
//! Resumable (`-s`): a stream that stops part-way keeps what arrived — attributes applied,
//! the map saved — and the dataset's `receive_resume_token` names the sender's snapshot and
//! the stream position after the last record applied; `cairn send -t TOKEN` sends the rest,
//! `cairn receive -A` discards it (destroys the new dataset, or rolls back to the origin).
//! Until then the dataset takes no other stream.
//!
//! Otherwise all or nothing: whatever fails — a broken chain, a bad record, a full pool, a mismatched
//! origin — every stream this receive started is undone (a dataset it made is destroyed,
//! a dataset it updated is rolled back to the snapshot it had), so the target is as it was.
//! (`-F` may first have rolled a target back, discarding what was newer: that stays.)

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;

use crate::codec::Reader;
use crate::core::StoreCore;
use crate::dataset::Dataset;
use crate::dir::DirEntry;
use crate::dnode::ObjectKind;
use crate::error::StoreError;
use crate::fs::Resolved;
use crate::id_map::{IdMap, RECEIVE_MAGIC};
use crate::snapshot_read::SnapshotView;
use crate::stream::{
    bad, decode_object, decode_u64s, Attrs, Header, Input, Position, ResumeToken, StreamStats,
    CLONE_IDS, DATA, DIR, END, FREE, HOLE, OBJECT,
};

pub use crate::dataset::{RECEIVE_MAP_PROP, RECEIVING_PROP, RESUME_TOKEN_PROP};

/// What `cairn receive` may do to an existing target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiveOptions {
    /// `-F`: roll the target back to the stream's origin first, destroying newer
    /// snapshots and changes made since.
    pub force: bool,
    /// `-s`: a stream that stops part-way keeps what arrived, to be resumed.
    pub resumable: bool,
    /// `-o origin=POOL/DS@SNAP`: receive an incremental as a new clone of this snapshot
    /// (its guid must be the stream's origin's; `crate::receive_clone`).
    pub origin: Option<String>,
}

/// How to undo a stream already (or partly) received.
pub(crate) enum Undo {
    /// A dataset the receive made.
    Destroy(String),
    /// A dataset the receive updated: back to this snapshot.
    RollBack(String),
}

/// A stream being received: the dataset and the sender's ids mapped to ours.
pub(crate) struct Receiving {
    dataset: u32,
    root: u64,
    root_src: u64,
    pub map: HashMap<u64, u64>,
    /// Received as a clone from a clone's origin: the sender's origin ids → our clone's
    /// objects, for the CLONE_IDS records (`crate::receive_clone`).
    pub origin_ids: Option<HashMap<u64, u64>>,
    /// (our owner, sender's xattr object) links left from a partial receive.
    xattr_links: Vec<(u64, u64)>,
    /// Objects this stream sent (each may come once), with their attributes.
    attrs: Vec<(u64, Attrs)>,
    sent: HashSet<u64>,
    /// The stream position after the last record applied.
    next: Position,
}

impl StoreCore {
    /// `cairn receive`: every stream on `input` into `target` (a replication stream's
    /// descendants below it). All or nothing (see the module's comment).
    pub fn receive(
        &self,
        target: &str,
        opts: &ReceiveOptions,
        input: &mut dyn Read,
    ) -> Result<StreamStats, StoreError> {
        crate::dataset::validate_dataset_name(target)?;
        let mut input = Input::new(input);
        let mut undo = Vec::new();
        let result = self.receive_streams(target, opts, &mut input, &mut undo);
        if result.is_err() {
            for step in undo.iter().rev() {
                // Best effort: the error that stopped the receive is the one to report.
                let _ = match step {
                    Undo::Destroy(name) => self.dataset_destroy(name, true),
                    Undo::RollBack(snap) => self.snapshot_rollback(snap, true).map(|()| {
                        let ds = snap.split_once('@').map_or(snap.as_str(), |(d, _)| d);
                        if let Some(id) = self.datasets().by_name(ds).map(|d| d.id) {
                            self.set_receiving_mark(id, None);
                        }
                    }),
                };
            }
        }
        result
    }

    fn receive_streams(
        &self,
        target: &str,
        opts: &ReceiveOptions,
        input: &mut Input<'_>,
        undo: &mut Vec<Undo>,
    ) -> Result<StreamStats, StoreError> {
        let mut total = StreamStats::default();
        while let Some(h) = input.next_header()? {
            let name = match h.path.as_str() {
                "" => target.to_string(),
                path => format!("{target}/{path}"),
            };
            let mut rx = match h.resume {
                Some(at) => self.start_resumed(&name, &h, at)?,
                None if h.from_guid == 0 && opts.origin.is_some() => {
                    return Err(StoreError::NotPermitted(
                        "-o origin= receives an incremental as a clone; this stream is full".into(),
                    ))
                }
                None if h.from_guid == 0 => self.start_full(&name, &h, undo)?,
                None if h.clone && self.has_snapshot_guid(&name, h.from_guid) => {
                    // Across a promote on the sender: our dataset has the origin.
                    let mut rx = self.start_incremental(&name, &h, opts, undo)?;
                    rx.origin_ids = Some(std::mem::take(&mut rx.map));
                    rx
                }
                None if h.clone || self.receives_as_clone(&name, opts) => {
                    self.start_clone(&name, &h, opts, undo)?
                }
                None => self.start_incremental(&name, &h, opts, undo)?,
            };
            // Before any of the stream lands: a txg holding part of it holds the mark too.
            self.set_receiving_mark(rx.dataset, Some(h.from_guid));
            let mut stats = match self.receive_records(&mut rx, input) {
                Ok(stats) => stats,
                Err(e) if opts.resumable || h.resume.is_some() => {
                    // Keep this stream's part, and the streams before it.
                    undo.clear();
                    self.set_receiving_mark(rx.dataset, None);
                    return Err(self.keep_partial(&name, &h, &rx, e));
                }
                Err(e) => return Err(e),
            };
            stats.streams = 1;
            self.apply_attrs(&rx, false)?;
            self.save_receive_map(&rx, Vec::new())?;
            self.set_resume_token(rx.dataset, None);
            let snap = format!("{name}@{}", h.snapshot);
            self.snapshot_create(std::slice::from_ref(&snap), false)?;
            // The mark goes in the txg that gives the snapshot its guid: the stream's end.
            self.set_receiving_mark(rx.dataset, None);
            self.set_snapshot_guid(rx.dataset, &h.snapshot, h.guid)?;
            total.add(&stats);
        }
        if total.streams == 0 {
            return Err(bad("it is empty"));
        }
        total.stream_bytes = input.bytes;
        Ok(total)
    }

    /// Whether dataset `name` exists and has the snapshot with `guid`.
    fn has_snapshot_guid(&self, name: &str, guid: u64) -> bool {
        let table = self.datasets();
        table
            .by_name(name)
            .is_some_and(|d| table.snapshots.of(d.id).any(|r| r.guid == guid))
    }

    /// `-o origin=` into a dataset that does not exist yet: the incremental makes a clone.
    fn receives_as_clone(&self, name: &str, opts: &ReceiveOptions) -> bool {
        opts.origin.is_some() && self.datasets().by_name(name).is_none()
    }

    /// A full stream: a new dataset with the stream's properties.
    fn start_full(
        &self,
        name: &str,
        h: &Header,
        undo: &mut Vec<Undo>,
    ) -> Result<Receiving, StoreError> {
        if let Some(ds) = self.datasets().by_name(name) {
            refuse_partial(ds)?;
            return Err(StoreError::DatasetExists(format!(
                "{name} (a full stream makes a new dataset; to update {name}, send an incremental \
                 (-i/-I) from a snapshot it has)"
            )));
        }
        let volsize = h.props.get("volsize").and_then(|v| v.parse().ok());
        let mut props = h.props.clone();
        props.remove("volsize");
        props.retain(|k, _| !crate::dataset::is_internal_property(k) && k != RESUME_TOKEN_PROP);
        self.dataset_create(name, h.kind, props, volsize, false)?;
        undo.push(Undo::Destroy(name.to_string()));
        let ds = self
            .datasets()
            .by_name(name)
            .cloned()
            .expect("just created");
        Ok(Receiving::new(&ds, h.root, IdMap::default()))
    }

    /// An incremental: the target must hold the origin, as its newest snapshot and
    /// unchanged since (or `-F` rolls it back to it).
    fn start_incremental(
        &self,
        name: &str,
        h: &Header,
        opts: &ReceiveOptions,
        undo: &mut Vec<Undo>,
    ) -> Result<Receiving, StoreError> {
        let table = self.datasets();
        let ds = table.by_name(name).cloned().ok_or_else(|| {
            StoreError::NoSuchDataset(format!(
                "{name} (an incremental stream updates a dataset that received its origin; \
                 receive a full stream first)"
            ))
        })?;
        refuse_partial(&ds)?;
        let snaps: Vec<_> = table.snapshots.of(ds.id).cloned().collect();
        if let Some(s) = snaps.iter().find(|s| s.guid == h.guid) {
            return Err(StoreError::DatasetExists(format!(
                "{name}@{} (this stream's snapshot is already here)",
                s.name
            )));
        }
        let origin = snaps
            .iter()
            .find(|s| s.guid == h.from_guid)
            .ok_or_else(|| {
                bad(format!(
                "{name} has no snapshot the incremental starts from (guid {:016x}); send a full \
                 stream, or an incremental from a snapshot {name} has",
                h.from_guid
            ))
            })?;
        let origin_name = format!("{name}@{}", origin.name);
        let newer: Vec<&str> = snaps
            .iter()
            .filter(|s| s.txg > origin.txg)
            .map(|s| s.name.as_str())
            .collect();
        let written = self.snapshot_space(ds.id).1;
        if !newer.is_empty() || written > 0 {
            if !opts.force {
                let what = if newer.is_empty() {
                    format!("{written} bytes were written since {origin_name}")
                } else {
                    format!(
                        "it has snapshots newer than {origin_name}: @{}",
                        newer.join(", @")
                    )
                };
                return Err(StoreError::NotPermitted(format!(
                    "{name} has changed ({what}); `cairn receive -F` rolls it back first"
                )));
            }
            self.snapshot_rollback(&origin_name, true)?;
        }
        undo.push(Undo::RollBack(origin_name));
        let map = self.load_receive_map(&ds, None)?;
        Ok(Receiving::new(&ds, h.root, map))
    }

    /// A resumed stream: the target holds the part its token names.
    fn start_resumed(&self, name: &str, h: &Header, at: Position) -> Result<Receiving, StoreError> {
        let ds = self
            .datasets()
            .by_name(name)
            .cloned()
            .ok_or_else(|| StoreError::NoSuchDataset(name.into()))?;
        let token = ds
            .props
            .get(RESUME_TOKEN_PROP)
            .map(|t| ResumeToken::decode(t))
            .transpose()?;
        match token {
            Some(t) if (t.to_guid, t.from_guid, t.at) == (h.guid, h.from_guid, at) => {}
            Some(t) => {
                return Err(bad(format!(
                    "it resumes another receive than the one {name} holds (resume with `cairn send -t {}`)",
                    t.encode()
                )))
            }
            None => {
                return Err(bad(format!(
                    "it resumes a receive, and {name} holds no partial receive"
                )))
            }
        }
        let map = self.load_receive_map(&ds, None)?;
        let mut rx = Receiving::new(&ds, h.root, map);
        rx.next = at;
        Ok(rx)
    }

    /// `receive -s`: what arrived stays, with a token for `send -t`; returns the error to
    /// report.
    fn keep_partial(&self, name: &str, h: &Header, rx: &Receiving, why: StoreError) -> StoreError {
        let why = match why {
            StoreError::BadStream(m) => format!("not a valid send stream: {m}"),
            e => e.to_string(),
        };
        let kept = self
            .apply_attrs(rx, true)
            .and_then(|owed| self.save_receive_map(rx, owed));
        if let Err(e) = kept {
            return StoreError::ReceiveKept {
                why,
                resume: format!(
                    "but saving it failed ({e}); `cairn receive -A {name}` discards it"
                ),
            };
        }
        let token = ResumeToken {
            to: format!("{}@{}", h.source, h.snapshot),
            to_guid: h.guid,
            from_guid: h.from_guid,
            at: rx.next,
        }
        .encode();
        self.set_resume_token(rx.dataset, Some(&token));
        StoreError::ReceiveKept {
            why,
            resume: format!(
                "`cairn send -t {token} | cairn receive -s {name}` sends the rest (the token is {name}'s receive_resume_token); `cairn receive -A {name}` discards it"
            ),
        }
    }

    /// Marks a dataset as receiving a stream (`Some(origin guid)`, 0 for a new dataset) or
    /// not (`None`); written with the open txg.
    fn set_receiving_mark(&self, dataset: u32, origin: Option<u64>) {
        let mut st = self.lock();
        let Some(ds) = st.datasets.by_id_mut(dataset) else {
            return;
        };
        let changed = match origin {
            Some(g) => ds
                .props
                .insert(RECEIVING_PROP.into(), g.to_string())
                .is_none(),
            None => ds.props.remove(RECEIVING_PROP).is_some(),
        };
        st.datasets_dirty |= changed;
    }

    /// At import: undoes every receive a crash cut (datasets still marked receiving): a
    /// dataset the stream was making is destroyed, one it was updating rolls back to the
    /// stream's origin. Returns how many.
    pub(crate) fn undo_interrupted_receives(&self) -> Result<usize, StoreError> {
        let table = self.datasets();
        let marked: Vec<(String, u32, u64)> = table
            .datasets
            .iter()
            .filter_map(|d| {
                let g = d.props.get(RECEIVING_PROP)?.parse().unwrap_or(0);
                Some((d.name.clone(), d.id, g))
            })
            .collect();
        for (name, id, origin) in &marked {
            let snap = table.snapshots.of(*id).find(|r| r.guid == *origin);
            match snap {
                Some(r) if *origin != 0 => {
                    self.snapshot_rollback(&format!("{name}@{}", r.name), true)?;
                    self.set_receiving_mark(*id, None);
                    self.sync()?;
                }
                // A dataset the stream made (or whose origin is gone: nothing to go back to).
                _ => self.dataset_destroy(name, true)?,
            }
            self.pool.post_event(
                "receive_undone",
                None,
                &[
                    ("dataset", name.clone()),
                    ("origin_guid", origin.to_string()),
                ],
            );
        }
        Ok(marked.len())
    }

    fn set_resume_token(&self, dataset: u32, token: Option<&str>) {
        let mut st = self.lock();
        let ds = st.datasets.by_id_mut(dataset).expect("receiving into it");
        let changed = match token {
            Some(t) => {
                ds.props
                    .insert(RESUME_TOKEN_PROP.into(), t.into())
                    .as_deref()
                    != Some(t)
            }
            None => ds.props.remove(RESUME_TOKEN_PROP).is_some(),
        };
        st.datasets_dirty |= changed;
    }

    /// `cairn receive -A DS`: discards a partial receive — the dataset it was making, or
    /// what it applied since the incremental's origin.
    pub fn receive_abort(&self, name: &str) -> Result<(), StoreError> {
        let table = self.datasets();
        let ds = table
            .by_name(name)
            .ok_or_else(|| StoreError::NoSuchDataset(name.into()))?;
        let token = ds.props.get(RESUME_TOKEN_PROP).ok_or_else(|| {
            StoreError::NotFound(format!(
                "a partial receive in {name} (it has no receive_resume_token)"
            ))
        })?;
        let t = ResumeToken::decode(token)?;
        // A full stream, or an incremental received as a new clone (its origin is not a
        // snapshot of its own): the receive was making the dataset.
        let made = table
            .origin_of(ds.id)
            .is_some_and(|o| o.guid == t.from_guid);
        if t.from_guid == 0 || made {
            return self.dataset_destroy(name, true);
        }
        let origin = table
            .snapshots
            .of(ds.id)
            .find(|r| r.guid == t.from_guid)
            .ok_or_else(|| {
                StoreError::corrupt(
                    "dataset table",
                    format!("{name}: its partial receive's origin is gone"),
                )
            })?;
        self.snapshot_rollback(&format!("{name}@{}", origin.name), true)?;
        self.set_resume_token(ds.id, None);
        Ok(())
    }

    fn receive_records(
        &self,
        rx: &mut Receiving,
        input: &mut Input<'_>,
    ) -> Result<StreamStats, StoreError> {
        let mut stats = StreamStats::default();
        loop {
            let (kind, payload) = input.record()?;
            match kind {
                OBJECT => {
                    let src = self.receive_object(rx, &payload)?;
                    rx.next = at(Position::OBJECTS, src, 0);
                    stats.objects += 1;
                }
                DATA => {
                    let [src, off, len] = self.receive_data(rx, &payload)?;
                    stats.data_bytes += len;
                    rx.next = at(Position::OBJECTS, src, off.saturating_add(len));
                }
                HOLE => {
                    let [src, off, len] = self.receive_hole(rx, &payload)?;
                    rx.next = at(Position::OBJECTS, src, off.saturating_add(len));
                }
                DIR => {
                    let dir = self.receive_dir(rx, &payload)?;
                    rx.next = at(Position::DIRS, dir.saturating_add(1), 0);
                }
                CLONE_IDS => Self::receive_clone_ids(rx, &payload)?,
                FREE => {
                    let src = self.receive_free(rx, &payload)?;
                    rx.next = at(Position::FREES, src.saturating_add(1), 0);
                    stats.freed_objects += 1;
                }
                END if payload == stats.records.to_le_bytes() => break,
                END => return Err(bad("its end record counts other records than it holds")),
                k => return Err(bad(format!("record type {k}"))),
            }
            stats.records += 1;
        }
        stats.records += 1;
        Ok(stats)
    }

    /// Returns the sender's id of the object.
    fn receive_object(&self, rx: &mut Receiving, p: &[u8]) -> Result<u64, StoreError> {
        let (src, attrs) = decode_object(p)?;
        if !rx.sent.insert(src) {
            return Err(bad(format!("object {src} is sent twice")));
        }
        let id = match rx.map.get(&src) {
            Some(&id) => id,
            None if src == rx.root_src => rx.root,
            None => {
                let mut st = self.lock();
                let d = &attrs.dnode;
                self.create_object_locked(&mut st, d.kind, rx.dataset, d.block_size)?
            }
        };
        let kind_here = self.dnode(id)?.kind;
        if kind_here != attrs.dnode.kind {
            return Err(bad(format!(
                "object {src} is a {:?} here, a {:?} in the stream",
                kind_here, attrs.dnode.kind
            )));
        }
        rx.map.insert(src, id);
        rx.attrs.push((id, attrs));
        Ok(src)
    }

    /// The file or volume object a DATA or HOLE record names.
    fn data_object(&self, rx: &Receiving, src: u64) -> Result<Resolved, StoreError> {
        let object = rx.mapped(src)?;
        let kind = self.dnode(object)?.kind;
        if kind == ObjectKind::Directory {
            return Err(bad(format!("data for directory {src}")));
        }
        Ok(Resolved {
            dataset: rx.dataset,
            object,
            kind,
        })
    }

    /// Returns the sender's id, the offset and the bytes written.
    fn receive_data(&self, rx: &Receiving, p: &[u8]) -> Result<[u64; 3], StoreError> {
        let [src, off] = decode_u64s::<2>(p, "data")?;
        let r = self.data_object(rx, src)?;
        // (A read-only target is still received into, as `zfs receive` does.)
        self.write_unchecked(&r, off, &p[16..])?;
        Ok([src, off, (p.len() - 16) as u64])
    }

    fn receive_hole(&self, rx: &Receiving, p: &[u8]) -> Result<[u64; 3], StoreError> {
        let [src, off, len] = decode_u64s::<3>(p, "hole")?;
        let r = self.data_object(rx, src)?;
        let mut st = self.lock();
        self.punch_locked(&mut st, r.object, off, len)?;
        self.maybe_sync(&mut st)?;
        Ok([src, off, len])
    }

    /// A directory's whole list: entries not on it go, entries on it are put in. Returns
    /// the sender's id of the directory.
    fn receive_dir(&self, rx: &Receiving, p: &[u8]) -> Result<u64, StoreError> {
        let e = |x: crate::codec::DecodeError| bad(x.to_string());
        let mut r = Reader::new(p, "stream directory record");
        let src = r.u64().map_err(e)?;
        let dir = rx.mapped(src)?;
        let n = r.count(13).map_err(e)?;
        let mut wanted = BTreeMap::new();
        for _ in 0..n {
            let name = r.str().map_err(e)?;
            let object = rx.mapped(r.u64().map_err(e)?)?;
            let kind = crate::dir::entry_kind(r.u8().map_err(e)?)
                .ok_or_else(|| bad("a directory entry of an unknown kind"))?;
            if name.is_empty()
                || name.contains(['/', '\0'])
                || name == "."
                || name == ".."
                || name.len() > 255
            {
                return Err(bad(format!("the name {name:?}")));
            }
            wanted.insert(name, DirEntry { object, kind });
        }
        let mut st = self.lock();
        if self.object_mut(&mut st, dir)?.dnode.kind != ObjectKind::Directory {
            return Err(bad("entries for an object that is not a directory"));
        }
        let current: BTreeMap<String, DirEntry> =
            self.dir_list(&mut st, dir)?.into_iter().collect();
        for (name, entry) in &current {
            if wanted.get(name) != Some(entry) {
                self.dir_remove(&mut st, dir, name)?;
            }
        }
        for (name, entry) in wanted {
            if current.get(&name) != Some(&entry) {
                self.dir_insert(&mut st, dir, &name, entry)?;
            }
        }
        Ok(src)
    }

    /// Returns the sender's id of the object freed.
    fn receive_free(&self, rx: &mut Receiving, p: &[u8]) -> Result<u64, StoreError> {
        let [src] = decode_u64s::<1>(p, "free")?;
        let id = rx.mapped(src)?;
        if id == rx.root || rx.sent.contains(&src) {
            return Err(bad(format!("object {src} is freed while in use")));
        }
        rx.map.remove(&src);
        let mut st = self.lock();
        self.free_one_object_locked(&mut st, id)?;
        Ok(src)
    }

    /// Sizes, owners, modes, times, links and extended-attribute objects, once every byte
    /// is in (writes would move the times). A partial receive (`partial`) may not have an
    /// xattr object yet: the links it still owes are returned, to be kept in the map.
    fn apply_attrs(&self, rx: &Receiving, partial: bool) -> Result<Vec<(u64, u64)>, StoreError> {
        let mut owed = Vec::new();
        let mut st = self.lock();
        for &(owner, src) in &rx.xattr_links {
            match rx.map.get(&src) {
                Some(&xattr) => self.object_mut(&mut st, owner)?.dnode.xattr = xattr,
                None if partial => owed.push((owner, src)),
                None => return Err(bad(format!("object {src} is used and never sent"))),
            }
            self.object_mut(&mut st, owner)?.dnode_dirty = true;
        }
        for (id, a) in &rx.attrs {
            let xattr = match (a.xattr_src, rx.map.get(&a.xattr_src)) {
                (0, _) => 0,
                (_, Some(&x)) => x,
                (src, None) if partial => {
                    owed.push((*id, src));
                    0
                }
                (src, None) => return Err(bad(format!("object {src} is used and never sent"))),
            };
            if a.dnode.kind != ObjectKind::Directory {
                self.truncate_locked(&mut st, *id, a.dnode.size)?;
            }
            let d = &mut self.object_mut(&mut st, *id)?.dnode;
            let s = &a.dnode;
            (d.mode, d.uid, d.gid, d.nlink, d.rdev) = (s.mode, s.uid, s.gid, s.nlink, s.rdev);
            (d.mtime_ns, d.ctime_ns, d.atime_ns, d.xattr) =
                (s.mtime_ns, s.ctime_ns, s.atime_ns, xattr);
            self.object_mut(&mut st, *id)?.dnode_dirty = true;
        }
        Ok(owed)
    }

    /// The receive map of `ds` (empty if it has none: it was not received), as it is now
    /// or as snapshot `at` of it holds it.
    pub(crate) fn load_receive_map(
        &self,
        ds: &Dataset,
        at: Option<&SnapshotView>,
    ) -> Result<IdMap, StoreError> {
        let Some(object) = map_object(ds) else {
            return Err(bad(format!(
                "{} has the origin snapshot but no receive map (it was not made by `cairn \
                 receive`); send a full stream into a new dataset",
                ds.name
            )));
        };
        self.read_id_map(ds.id, object, RECEIVE_MAGIC, at)
    }

    /// Writes the map into the dataset (making its object the first time), with the
    /// xattr links a partial receive still owes.
    fn save_receive_map(&self, rx: &Receiving, owed: Vec<(u64, u64)>) -> Result<(), StoreError> {
        let ds = self
            .datasets()
            .by_id(rx.dataset)
            .cloned()
            .expect("receiving into it");
        let map = IdMap {
            ids: rx.map.clone(),
            xattr_links: owed,
        };
        let object = self.write_id_map(ds.id, map_object(&ds), RECEIVE_MAGIC, &map)?;
        if map_object(&ds).is_none() {
            let mut st = self.lock();
            let d = st.datasets.by_id_mut(ds.id).expect("receiving into it");
            d.props.insert(RECEIVE_MAP_PROP.into(), object.to_string());
            st.datasets_dirty = true;
        }
        Ok(())
    }
}

impl Receiving {
    pub(crate) fn new(ds: &Dataset, root_src: u64, map: IdMap) -> Receiving {
        Receiving {
            dataset: ds.id,
            root: ds.object,
            root_src,
            map: map.ids,
            xattr_links: map.xattr_links,
            origin_ids: None,
            attrs: Vec::new(),
            sent: HashSet::new(),
            next: Position::default(),
        }
    }

    fn mapped(&self, src: u64) -> Result<u64, StoreError> {
        self.map
            .get(&src)
            .copied()
            .ok_or_else(|| bad(format!("object {src} is used before it is sent")))
    }
}

fn at(phase: u8, object: u64, offset: u64) -> Position {
    Position {
        phase,
        object,
        offset,
    }
}

/// A dataset holding a partial receive takes no other stream.
pub(crate) fn refuse_partial(ds: &Dataset) -> Result<(), StoreError> {
    match ds.props.get(RESUME_TOKEN_PROP) {
        Some(token) => Err(StoreError::NotPermitted(format!(
            "{} holds a partial receive: resume it (`cairn send -t {token} | cairn receive -s {}`) or discard it (`cairn receive -A {}`)",
            ds.name, ds.name, ds.name
        ))),
        None => Ok(()),
    }
}

fn map_object(ds: &Dataset) -> Option<u64> {
    ds.props.get(RECEIVE_MAP_PROP).and_then(|v| v.parse().ok())
}
