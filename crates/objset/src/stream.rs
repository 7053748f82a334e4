//! `cairn send` / `cairn receive`: a snapshot as a byte stream, and back into a dataset of
//! another (or the same) pool. Full streams only so far (README: limits).
//!
//! ```text
//!  header   "CAIRNSTR" u64 | version u32 | kind u8 (1 file system, 2 volume) |
//!           snapshot name str | guid u64 | txg u64 | root src id u64 | nprops u64 |
//!           (key str, value str)…
//!  record   type u8 | length u32 | payload | check 16 B
//!           check = blake3(previous check ‖ type ‖ length ‖ payload)[..16], the first
//!           previous check being the header's own: any flipped, missing, reordered or
//!           extra byte breaks the chain.
//!    OBJECT 1  src id u64 | kind u8 | block_size u32 | size u64 | mode u32 | uid u32 |
//!              gid u32 | nlink u32 | mtime u64 | ctime u64 | atime u64 | rdev u64 |
//!              xattr src id u64
//!    DATA   2  src id u64 | offset u64 | bytes (≤ 1 MiB; all-zero ranges are not sent)
//!    DIR    3  dir src id u64 | n u64 | (name str, child src id u64, kind u8)…
//!    END    4  records before it u64
//! ```
//! The sender walks the snapshot (objects, then every directory's entries); object ids are
//! the sender's and the receiver maps each to a new object of its own. A receive creates
//! the named dataset, and on any error (a broken chain, a bad record, a full pool) destroys
//! it again: the target is as it was.

use std::collections::HashMap;
use std::io::{Read, Write};

use crate::codec::{Reader, Writer};
use crate::core::StoreCore;
use crate::dataset::DatasetKind;
use crate::dir::DirEntry;
use crate::dnode::{Dnode, ObjectKind};
use crate::error::StoreError;
use crate::fs::Resolved;
use crate::snapshot_read::SnapshotView;

const MAGIC: u64 = 0x5254_534e_5249_4143; // "CAIRNSTR"
const VERSION: u32 = 1;
const CHECK: usize = 16;
const DATA_CHUNK: usize = 1 << 20;
/// The largest record a receiver accepts (a DIR record of many names is the largest).
const MAX_RECORD: u32 = 64 << 20;
const OBJECT: u8 = 1;
const DATA: u8 = 2;
const DIR: u8 = 3;
const END: u8 = 4;

/// Objects of a snapshot with their dnodes, in id order.
type ObjectList = Vec<(u64, Dnode)>;

/// What a send or a receive moved.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StreamStats {
    pub objects: u64,
    pub data_bytes: u64,
    pub records: u64,
    pub stream_bytes: u64,
}

fn bad(why: impl Into<String>) -> StoreError {
    StoreError::BadStream(why.into())
}

/// Writes records, chaining their checks.
struct Sender<'a> {
    out: &'a mut dyn Write,
    check: [u8; CHECK],
    stats: StreamStats,
}

impl Sender<'_> {
    fn io(e: std::io::Error) -> StoreError {
        StoreError::LocalIo {
            path: "the stream".into(),
            source: e,
        }
    }

    fn record(&mut self, kind: u8, payload: &[u8]) -> Result<(), StoreError> {
        let len = (payload.len() as u32).to_le_bytes();
        let check = chain(&self.check, kind, &len, payload);
        self.out.write_all(&[kind]).map_err(Self::io)?;
        self.out.write_all(&len).map_err(Self::io)?;
        self.out.write_all(payload).map_err(Self::io)?;
        self.out.write_all(&check).map_err(Self::io)?;
        self.check = check;
        self.stats.records += 1;
        self.stats.stream_bytes += (1 + 4 + payload.len() + CHECK) as u64;
        Ok(())
    }
}

fn chain(prev: &[u8; CHECK], kind: u8, len: &[u8; 4], payload: &[u8]) -> [u8; CHECK] {
    let mut h = blake3::Hasher::new();
    h.update(prev).update(&[kind]).update(len).update(payload);
    h.finalize().as_bytes()[..CHECK]
        .try_into()
        .expect("16 bytes")
}

fn header_check(header: &[u8]) -> [u8; CHECK] {
    blake3::hash(header).as_bytes()[..CHECK]
        .try_into()
        .expect("16 bytes")
}

fn object_record(id: u64, d: &Dnode) -> Vec<u8> {
    let mut w = Writer::new();
    w.u64(id).u8(d.kind as u8).u32(d.block_size).u64(d.size);
    w.u32(d.mode).u32(d.uid).u32(d.gid).u32(d.nlink);
    w.u64(d.mtime_ns)
        .u64(d.ctime_ns)
        .u64(d.atime_ns)
        .u64(d.rdev)
        .u64(d.xattr);
    w.buf
}

impl StoreCore {
    /// `cairn send POOL/DS@SNAP`: the snapshot as a full stream on `out`.
    pub fn send(&self, snapshot: &str, out: &mut dyn Write) -> Result<StreamStats, StoreError> {
        let v = self.snapshot_view(snapshot)?;
        let table = self.datasets();
        let ds = table.by_id(v.dataset).expect("a view names its dataset");
        let guid = self
            .snapshots(Some(&ds.name))?
            .into_iter()
            .find(|s| s.name == snapshot)
            .map_or(0, |s| s.guid);
        let mut h = Writer::new();
        h.u64(MAGIC).u32(VERSION).u8(match ds.kind {
            DatasetKind::Filesystem => 1,
            DatasetKind::Volume => 2,
        });
        h.str(&v.snapshot).u64(guid).u64(v.txg).u64(v.root);
        h.u64(ds.props.len() as u64);
        for (k, val) in &ds.props {
            h.str(k).str(val);
        }
        out.write_all(&h.buf).map_err(Sender::io)?;
        let mut s = Sender {
            out,
            check: header_check(&h.buf),
            stats: StreamStats::default(),
        };
        s.stats.stream_bytes = h.buf.len() as u64;
        let (objects, dirs) = self.collect(&v)?;
        for (id, dn) in &objects {
            s.record(OBJECT, &object_record(*id, dn))?;
            s.stats.objects += 1;
            if dn.kind != ObjectKind::Directory {
                self.send_data(&v, *id, dn, &mut s)?;
            }
        }
        for dir in dirs {
            let entries = self.snapshot_read_dir(&v, dir)?;
            let mut w = Writer::new();
            w.u64(dir).u64(entries.len() as u64);
            for (name, e) in &entries {
                w.str(name).u64(e.object).u8(e.kind as u8);
            }
            s.record(DIR, &w.buf)?;
        }
        let n = s.stats.records;
        s.record(END, &n.to_le_bytes())?;
        s.out.flush().map_err(Sender::io)?;
        Ok(s.stats)
    }

    /// Every object of the snapshot (id order) and its directories.
    fn collect(&self, v: &SnapshotView) -> Result<(ObjectList, Vec<u64>), StoreError> {
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

    fn send_data(
        &self,
        v: &SnapshotView,
        id: u64,
        dn: &Dnode,
        s: &mut Sender<'_>,
    ) -> Result<(), StoreError> {
        let mut buf = vec![0u8; DATA_CHUNK];
        let mut off = 0u64;
        while off < dn.size {
            let n = self.snapshot_read(v, id, off, &mut buf)?;
            if n == 0 {
                break;
            }
            if buf[..n].iter().any(|&b| b != 0) {
                let mut w = Writer::new();
                w.u64(id).u64(off).raw(&buf[..n]);
                s.record(DATA, &w.buf)?;
                s.stats.data_bytes += n as u64;
            }
            off += n as u64;
        }
        Ok(())
    }
}

/// What the stream's header says.
struct Header {
    kind: DatasetKind,
    snapshot: String,
    guid: u64,
    root: u64,
    props: std::collections::BTreeMap<String, String>,
}

/// Reads exactly what the stream holds, keeping the header's bytes for its check.
struct Input<'a> {
    input: &'a mut dyn Read,
    kept: Vec<u8>,
    bytes: u64,
}

impl Input<'_> {
    fn take(&mut self, n: usize) -> Result<Vec<u8>, StoreError> {
        let mut buf = vec![0u8; n];
        self.input
            .read_exact(&mut buf)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => bad("it ends early (cut short?)"),
                _ => StoreError::LocalIo {
                    path: "the stream".into(),
                    source: e,
                },
            })?;
        self.bytes += n as u64;
        Ok(buf)
    }

    fn kept(&mut self, n: usize) -> Result<Vec<u8>, StoreError> {
        let b = self.take(n)?;
        self.kept.extend_from_slice(&b);
        Ok(b)
    }

    fn u64(&mut self) -> Result<u64, StoreError> {
        Ok(u64::from_le_bytes(self.kept(8)?.try_into().expect("8")))
    }

    fn str(&mut self) -> Result<String, StoreError> {
        let n = u32::from_le_bytes(self.kept(4)?.try_into().expect("4"));
        if n > 4096 {
            return Err(bad(format!("a header string of {n} bytes")));
        }
        String::from_utf8(self.kept(n as usize)?).map_err(|_| bad("a header string is not UTF-8"))
    }

    fn header(&mut self) -> Result<Header, StoreError> {
        if self.u64()? != MAGIC {
            return Err(bad("it does not start with a cairn send stream header"));
        }
        let version = u32::from_le_bytes(self.kept(4)?.try_into().expect("4"));
        if version > VERSION {
            return Err(StoreError::NewerFormat(format!(
                "send stream version {version}"
            )));
        }
        let kind = match self.kept(1)?[0] {
            1 => DatasetKind::Filesystem,
            2 => DatasetKind::Volume,
            k => return Err(bad(format!("dataset kind {k}"))),
        };
        let snapshot = self.str()?;
        crate::dataset::validate_component(&snapshot)?;
        let (guid, _txg, root) = (self.u64()?, self.u64()?, self.u64()?);
        let n = self.u64()?;
        if n > 1024 {
            return Err(bad(format!("{n} properties")));
        }
        let mut props = std::collections::BTreeMap::new();
        for _ in 0..n {
            let k = self.str()?;
            props.insert(k, self.str()?);
        }
        Ok(Header {
            kind,
            snapshot,
            guid,
            root,
            props,
        })
    }

    /// The next record, its check verified against the chain.
    fn record(&mut self, check: &mut [u8; CHECK]) -> Result<(u8, Vec<u8>), StoreError> {
        let kind = self.take(1)?[0];
        let len: [u8; 4] = self.take(4)?.try_into().expect("4");
        let n = u32::from_le_bytes(len);
        if n > MAX_RECORD {
            return Err(bad(format!("a record of {n} bytes")));
        }
        let payload = self.take(n as usize)?;
        let got = self.take(CHECK)?;
        let want = chain(check, kind, &len, &payload);
        if got != want {
            return Err(bad(format!(
                "record at byte {} fails its check (the stream is damaged)",
                self.bytes
            )));
        }
        *check = want;
        Ok((kind, payload))
    }
}

/// An object's attributes, applied once its data is in.
struct Attrs {
    dnode: Dnode,
    xattr_src: u64,
}

fn decode_object(p: &[u8]) -> Result<(u64, Attrs), StoreError> {
    let mut r = Reader::new(p, "stream object record");
    let e = |x: crate::codec::DecodeError| bad(x.to_string());
    let id = r.u64().map_err(e)?;
    let kind = match r.u8().map_err(e)? {
        1 => ObjectKind::File,
        2 => ObjectKind::Directory,
        3 => ObjectKind::Volume,
        5 => ObjectKind::Symlink,
        6 => ObjectKind::Special,
        7 => ObjectKind::Xattrs,
        k => return Err(bad(format!("object kind {k}"))),
    };
    let block_size = r.u32().map_err(e)?;
    if !block_size.is_power_of_two() || !(512..=1 << 20).contains(&block_size) {
        return Err(bad(format!("block size {block_size}")));
    }
    let mut d = Dnode::new(kind, 0, block_size, 0);
    d.size = r.u64().map_err(e)?;
    (d.mode, d.uid, d.gid, d.nlink) = (
        r.u32().map_err(e)?,
        r.u32().map_err(e)?,
        r.u32().map_err(e)?,
        r.u32().map_err(e)?,
    );
    (d.mtime_ns, d.ctime_ns, d.atime_ns, d.rdev) = (
        r.u64().map_err(e)?,
        r.u64().map_err(e)?,
        r.u64().map_err(e)?,
        r.u64().map_err(e)?,
    );
    let xattr_src = r.u64().map_err(e)?;
    Ok((
        id,
        Attrs {
            dnode: d,
            xattr_src,
        },
    ))
}

/// A receive in progress: the new dataset and the sender's ids mapped to ours.
struct Receiving {
    dataset: u32,
    root: u64,
    root_src: u64,
    map: HashMap<u64, u64>,
    attrs: Vec<(u64, Attrs)>,
}

impl StoreCore {
    /// `cairn receive POOL/NEW < stream`: a full stream into a new dataset, which then has
    /// the sent snapshot (same name and guid). On any error the new dataset is destroyed.
    pub fn receive(&self, target: &str, input: &mut dyn Read) -> Result<StreamStats, StoreError> {
        crate::dataset::validate_dataset_name(target)?;
        if self.datasets().by_name(target).is_some() {
            return Err(StoreError::DatasetExists(format!(
                "{target} (a full stream is received into a new dataset; incremental streams and -F are not built yet)"
            )));
        }
        let mut input = Input {
            input,
            kept: Vec::new(),
            bytes: 0,
        };
        let h = input.header()?;
        let volsize = h.props.get("volsize").and_then(|v| v.parse().ok());
        let mut props = h.props.clone();
        props.remove("volsize");
        self.dataset_create(target, h.kind, props, volsize, false)?;
        let result = self.receive_into(target, &h, &mut input);
        match result {
            Ok(stats) => Ok(stats),
            Err(e) => {
                let _ = self.dataset_destroy(target, true);
                Err(e)
            }
        }
    }

    fn receive_into(
        &self,
        target: &str,
        h: &Header,
        input: &mut Input<'_>,
    ) -> Result<StreamStats, StoreError> {
        let ds = self
            .datasets()
            .by_name(target)
            .cloned()
            .expect("just created");
        let mut rx = Receiving {
            dataset: ds.id,
            root: ds.object,
            root_src: h.root,
            map: HashMap::new(),
            attrs: Vec::new(),
        };
        let mut check = header_check(&input.kept);
        let mut stats = StreamStats::default();
        loop {
            let (kind, payload) = input.record(&mut check)?;
            match kind {
                OBJECT => {
                    self.receive_object(&mut rx, &payload)?;
                    stats.objects += 1;
                }
                DATA => stats.data_bytes += self.receive_data(&rx, &payload)?,
                DIR => self.receive_dir(&rx, &payload)?,
                END if payload == stats.records.to_le_bytes() => break,
                END => return Err(bad("its end record counts other records than it holds")),
                k => return Err(bad(format!("record type {k}"))),
            }
            stats.records += 1;
        }
        self.apply_attrs(&rx)?;
        stats.records += 1;
        stats.stream_bytes = input.bytes;
        let snap = format!("{target}@{}", h.snapshot);
        self.snapshot_create(std::slice::from_ref(&snap), false)?;
        self.set_snapshot_guid(rx.dataset, &h.snapshot, h.guid)?;
        Ok(stats)
    }

    fn receive_object(&self, rx: &mut Receiving, p: &[u8]) -> Result<(), StoreError> {
        let (src, attrs) = decode_object(p)?;
        if rx.map.contains_key(&src) {
            return Err(bad(format!("object {src} is sent twice")));
        }
        let id = if src == rx.root_src {
            rx.root
        } else {
            let mut st = self.lock();
            let d = &attrs.dnode;
            self.create_object_locked(&mut st, d.kind, rx.dataset, d.block_size)?
        };
        let kind_here = self.dnode(id)?.kind;
        if kind_here != attrs.dnode.kind {
            return Err(bad(format!(
                "the root is a {:?} here, a {:?} in the stream",
                kind_here, attrs.dnode.kind
            )));
        }
        rx.map.insert(src, id);
        rx.attrs.push((id, attrs));
        Ok(())
    }

    fn mapped(rx: &Receiving, src: u64) -> Result<u64, StoreError> {
        rx.map
            .get(&src)
            .copied()
            .ok_or_else(|| bad(format!("object {src} is used before it is sent")))
    }

    fn receive_data(&self, rx: &Receiving, p: &[u8]) -> Result<u64, StoreError> {
        if p.len() < 16 {
            return Err(bad("a data record without its header"));
        }
        let src = u64::from_le_bytes(p[..8].try_into().expect("8"));
        let off = u64::from_le_bytes(p[8..16].try_into().expect("8"));
        let id = Self::mapped(rx, src)?;
        let kind = self.dnode(id)?.kind;
        if kind == ObjectKind::Directory {
            return Err(bad(format!("data for directory {src}")));
        }
        let r = Resolved {
            dataset: rx.dataset,
            object: id,
            kind,
        };
        self.write(&r, off, &p[16..])?;
        Ok((p.len() - 16) as u64)
    }

    fn receive_dir(&self, rx: &Receiving, p: &[u8]) -> Result<(), StoreError> {
        let e = |x: crate::codec::DecodeError| bad(x.to_string());
        let mut r = Reader::new(p, "stream directory record");
        let dir = Self::mapped(rx, r.u64().map_err(e)?)?;
        let n = r.count(13).map_err(e)?;
        let mut st = self.lock();
        for _ in 0..n {
            let name = r.str().map_err(e)?;
            let child = Self::mapped(rx, r.u64().map_err(e)?)?;
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
            if self.object_mut(&mut st, dir)?.dnode.kind != ObjectKind::Directory {
                return Err(bad("entries for an object that is not a directory"));
            }
            self.dir_insert(
                &mut st,
                dir,
                &name,
                DirEntry {
                    object: child,
                    kind,
                },
            )?;
        }
        Ok(())
    }

    /// Sizes, owners, modes, times, links and extended-attribute objects, once every byte
    /// is in (writes would move the times).
    fn apply_attrs(&self, rx: &Receiving) -> Result<(), StoreError> {
        let mut st = self.lock();
        for (id, a) in &rx.attrs {
            let xattr = match a.xattr_src {
                0 => 0,
                src => Self::mapped(rx, src)?,
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever bytes arrive, reading a header and records returns errors, never panics.
        #[test]
        fn any_bytes_are_refused_without_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut slice = &bytes[..];
            let mut input = Input { input: &mut slice, kept: Vec::new(), bytes: 0 };
            if input.header().is_ok() {
                let mut check = header_check(&input.kept);
                while input.record(&mut check).is_ok() {}
            }
            let _ = decode_object(&bytes);
        }

        /// A valid header followed by random records: every record fails its check.
        #[test]
        fn records_without_the_chain_fail(tail in proptest::collection::vec(any::<u8>(), 21..300)) {
            let mut h = Writer::new();
            h.u64(MAGIC).u32(VERSION).u8(1).str("s").u64(1).u64(2).u64(3).u64(0);
            let mut bytes = h.buf.clone();
            bytes.extend_from_slice(&tail);
            let mut slice = &bytes[..];
            let mut input = Input { input: &mut slice, kept: Vec::new(), bytes: 0 };
            prop_assert!(input.header().is_ok());
            let mut check = header_check(&input.kept);
            prop_assert!(input.record(&mut check).is_err());
        }
    }
}
