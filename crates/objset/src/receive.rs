//! `cairn receive [-F] POOL/DS < stream`: streams (`crate::stream`) back into datasets.
//!
//! A full stream makes a new dataset; an incremental updates one that holds the stream's
//! origin snapshot (same guid). Each ends with the sent snapshot taken (same name, same
//! guid), so the next incremental can start from it.
//!
//! The sender's object ids are not ours (the object table is shared by every dataset of a
//! pool). The receiver keeps the mapping in an object of the dataset — its *receive map*,
//! named by the dataset's internal property `cairn:receive-map`:
//! ```text
//!  "RCVM" u32 | n u64 | n × (sender id u64, our id u64)      ascending sender ids
//! ```
//! It is written before the snapshot is taken, so a snapshot (and a rollback to it) holds
//! the map of that moment.
//!
//! All or nothing: whatever fails — a broken chain, a bad record, a full pool, a mismatched
//! origin — every stream this receive started is undone (a dataset it made is destroyed,
//! a dataset it updated is rolled back to the snapshot it had), so the target is as it was.
//! (`-F` may first have rolled a target back, discarding what was newer: that stays.)

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;

use crate::codec::{Reader, Writer};
use crate::core::StoreCore;
use crate::dataset::Dataset;
use crate::dir::DirEntry;
use crate::dnode::ObjectKind;
use crate::error::StoreError;
use crate::fs::Resolved;
use crate::stream::{
    bad, decode_object, decode_u64s, Attrs, Header, Input, StreamStats, DATA, DIR, END, FREE, HOLE,
    OBJECT,
};

/// The dataset property naming the receive map's object (internal: never sent, not shown).
pub const RECEIVE_MAP_PROP: &str = "cairn:receive-map";
const MAP_MAGIC: u32 = 0x4d56_4352; // "RCVM"
const MAP_BLOCK: u32 = 128 << 10;

/// What `cairn receive` may do to an existing target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiveOptions {
    /// `-F`: roll the target back to the stream's origin first, destroying newer
    /// snapshots and changes made since.
    pub force: bool,
}

/// How to undo a stream already (or partly) received.
enum Undo {
    /// A dataset the receive made.
    Destroy(String),
    /// A dataset the receive updated: back to this snapshot.
    RollBack(String),
}

/// A stream being received: the dataset and the sender's ids mapped to ours.
struct Receiving {
    dataset: u32,
    root: u64,
    root_src: u64,
    map: HashMap<u64, u64>,
    /// Objects this stream sent (each may come once), with their attributes.
    attrs: Vec<(u64, Attrs)>,
    sent: HashSet<u64>,
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
                    Undo::RollBack(snap) => self.snapshot_rollback(snap, true),
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
            let mut rx = if h.from_guid == 0 {
                self.start_full(&name, &h, undo)?
            } else {
                self.start_incremental(&name, &h, opts, undo)?
            };
            let mut stats = self.receive_records(&mut rx, input)?;
            stats.streams = 1;
            self.apply_attrs(&rx)?;
            self.save_receive_map(&rx)?;
            let snap = format!("{name}@{}", h.snapshot);
            self.snapshot_create(std::slice::from_ref(&snap), false)?;
            self.set_snapshot_guid(rx.dataset, &h.snapshot, h.guid)?;
            total.add(&stats);
        }
        if total.streams == 0 {
            return Err(bad("it is empty"));
        }
        total.stream_bytes = input.bytes;
        Ok(total)
    }

    /// A full stream: a new dataset with the stream's properties.
    fn start_full(
        &self,
        name: &str,
        h: &Header,
        undo: &mut Vec<Undo>,
    ) -> Result<Receiving, StoreError> {
        if self.datasets().by_name(name).is_some() {
            return Err(StoreError::DatasetExists(format!(
                "{name} (a full stream makes a new dataset; to update {name}, send an incremental \
                 (-i/-I) from a snapshot it has)"
            )));
        }
        let volsize = h.props.get("volsize").and_then(|v| v.parse().ok());
        let mut props = h.props.clone();
        props.remove("volsize");
        props.remove(RECEIVE_MAP_PROP);
        self.dataset_create(name, h.kind, props, volsize, false)?;
        undo.push(Undo::Destroy(name.to_string()));
        let ds = self
            .datasets()
            .by_name(name)
            .cloned()
            .expect("just created");
        Ok(Receiving::new(&ds, h.root, HashMap::new()))
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
        let map = self.load_receive_map(&ds)?;
        Ok(Receiving::new(&ds, h.root, map))
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
                    self.receive_object(rx, &payload)?;
                    stats.objects += 1;
                }
                DATA => stats.data_bytes += self.receive_data(rx, &payload)?,
                HOLE => self.receive_hole(rx, &payload)?,
                DIR => self.receive_dir(rx, &payload)?,
                FREE => {
                    self.receive_free(rx, &payload)?;
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

    fn receive_object(&self, rx: &mut Receiving, p: &[u8]) -> Result<(), StoreError> {
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
        Ok(())
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

    fn receive_data(&self, rx: &Receiving, p: &[u8]) -> Result<u64, StoreError> {
        let [src, off] = decode_u64s::<2>(p, "data")?;
        let r = self.data_object(rx, src)?;
        // (A read-only target is still received into, as `zfs receive` does.)
        self.write_unchecked(&r, off, &p[16..])?;
        Ok((p.len() - 16) as u64)
    }

    fn receive_hole(&self, rx: &Receiving, p: &[u8]) -> Result<(), StoreError> {
        let [src, off, len] = decode_u64s::<3>(p, "hole")?;
        let r = self.data_object(rx, src)?;
        let mut st = self.lock();
        self.punch_locked(&mut st, r.object, off, len)?;
        self.maybe_sync(&mut st)
    }

    /// A directory's whole list: entries not on it go, entries on it are put in.
    fn receive_dir(&self, rx: &Receiving, p: &[u8]) -> Result<(), StoreError> {
        let e = |x: crate::codec::DecodeError| bad(x.to_string());
        let mut r = Reader::new(p, "stream directory record");
        let dir = rx.mapped(r.u64().map_err(e)?)?;
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
        Ok(())
    }

    fn receive_free(&self, rx: &mut Receiving, p: &[u8]) -> Result<(), StoreError> {
        let [src] = decode_u64s::<1>(p, "free")?;
        let id = rx.mapped(src)?;
        if id == rx.root || rx.sent.contains(&src) {
            return Err(bad(format!("object {src} is freed while in use")));
        }
        rx.map.remove(&src);
        let mut st = self.lock();
        self.free_one_object_locked(&mut st, id)
    }

    /// Sizes, owners, modes, times, links and extended-attribute objects, once every byte
    /// is in (writes would move the times).
    fn apply_attrs(&self, rx: &Receiving) -> Result<(), StoreError> {
        let mut st = self.lock();
        for (id, a) in &rx.attrs {
            let xattr = match a.xattr_src {
                0 => 0,
                src => rx.mapped(src)?,
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
        Ok(())
    }

    /// The receive map of `ds` (empty if it has none: it was not received).
    fn load_receive_map(&self, ds: &Dataset) -> Result<HashMap<u64, u64>, StoreError> {
        let Some(object) = map_object(ds) else {
            return Err(bad(format!(
                "{} has the origin snapshot but no receive map (it was not made by `cairn \
                 receive`); send a full stream into a new dataset",
                ds.name
            )));
        };
        let r = Resolved {
            dataset: ds.id,
            object,
            kind: ObjectKind::File,
        };
        let size = self.object_dnode(&r)?.size;
        if size > 16 << 30 {
            return Err(StoreError::Corrupt(format!(
                "{}: receive map of {size} bytes",
                ds.name
            )));
        }
        let mut bytes = vec![0u8; size as usize];
        let n = self.read(&r, 0, &mut bytes)?;
        decode_map(&bytes[..n])
            .map_err(|e| StoreError::Corrupt(format!("{}: receive map: {e}", ds.name)))
    }

    /// Writes the map into the dataset (making its object the first time).
    fn save_receive_map(&self, rx: &Receiving) -> Result<(), StoreError> {
        let ds = self
            .datasets()
            .by_id(rx.dataset)
            .cloned()
            .expect("receiving into it");
        let object = match map_object(&ds) {
            Some(o) => o,
            None => {
                let mut st = self.lock();
                let o = self.create_object_locked(&mut st, ObjectKind::File, ds.id, MAP_BLOCK)?;
                let d = st.datasets.by_id_mut(ds.id).expect("receiving into it");
                d.props.insert(RECEIVE_MAP_PROP.into(), o.to_string());
                st.datasets_dirty = true;
                o
            }
        };
        let bytes = encode_map(&rx.map);
        let r = Resolved {
            dataset: ds.id,
            object,
            kind: ObjectKind::File,
        };
        self.write_unchecked(&r, 0, &bytes)?;
        let mut st = self.lock();
        self.truncate_locked(&mut st, object, bytes.len() as u64)
    }
}

impl Receiving {
    fn new(ds: &Dataset, root_src: u64, map: HashMap<u64, u64>) -> Receiving {
        Receiving {
            dataset: ds.id,
            root: ds.object,
            root_src,
            map,
            attrs: Vec::new(),
            sent: HashSet::new(),
        }
    }

    fn mapped(&self, src: u64) -> Result<u64, StoreError> {
        self.map
            .get(&src)
            .copied()
            .ok_or_else(|| bad(format!("object {src} is used before it is sent")))
    }
}

fn map_object(ds: &Dataset) -> Option<u64> {
    ds.props.get(RECEIVE_MAP_PROP).and_then(|v| v.parse().ok())
}

fn encode_map(map: &HashMap<u64, u64>) -> Vec<u8> {
    let mut pairs: Vec<(u64, u64)> = map.iter().map(|(&s, &o)| (s, o)).collect();
    pairs.sort_unstable();
    let mut w = Writer::new();
    w.u32(MAP_MAGIC).u64(pairs.len() as u64);
    for (s, o) in pairs {
        w.u64(s).u64(o);
    }
    w.buf
}

fn decode_map(bytes: &[u8]) -> Result<HashMap<u64, u64>, crate::codec::DecodeError> {
    let mut r = Reader::new(bytes, "receive map");
    if r.u32()? != MAP_MAGIC {
        return Err(r.err("bad magic"));
    }
    let n = r.count(16)?;
    let mut map = HashMap::with_capacity(n);
    for _ in 0..n {
        let (s, o) = (r.u64()?, r.u64()?);
        map.insert(s, o);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_map_reads_back(pairs in proptest::collection::hash_map(any::<u64>(), any::<u64>(), 0..50)) {
            prop_assert_eq!(decode_map(&encode_map(&pairs)).unwrap(), pairs);
        }

        #[test]
        fn any_bytes_decode_to_a_map_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_map(&bytes);
        }
    }
}
