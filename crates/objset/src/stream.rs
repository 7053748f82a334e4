//! `cairn send` / `cairn receive`: the stream's wire format. `crate::send` writes it,
//! `crate::receive` reads it back into a dataset.
//!
//! ```text
//!  header   "CAIRNSTR" u64 | version u32 | kind u8 (1 file system, 2 volume) |
//!           snapshot name str | guid u64 | txg u64 | root src id u64 | nprops u64 |
//!           (key str, value str)… |
//!           v2: from guid u64 (0: a full stream) | dataset path str ("" the sent dataset,
//!               "a/b" a descendant of it, in a replication stream) | sender's dataset
//!               name str | resumed u8 (1: `send -t`) [| phase u8 | object u64 | offset u64]
//!           v3: clone u8 (1: an incremental from a clone's origin; CLONE_IDS records
//!               follow). Only such a stream is written as version 3, so every other
//!               stream stays readable by a cairn that knows version 2.
//!  record   type u8 | length u32 | payload | check 16 B
//!           check = blake3(previous check ‖ type ‖ length ‖ payload)[..16], the first
//!           previous check being the header's own: any flipped, missing, reordered or
//!           extra byte breaks the chain.
//!    OBJECT 1  src id u64 | kind u8 | block_size u32 | size u64 | mode u32 | uid u32 |
//!              gid u32 | nlink u32 | mtime u64 | ctime u64 | atime u64 | rdev u64 |
//!              xattr src id u64
//!    DATA   2  src id u64 | offset u64 | bytes (≤ 1 MiB; all-zero ranges are not sent)
//!    DIR    3  dir src id u64 | n u64 | (name str, child src id u64, kind u8)… — the
//!              directory's whole list of entries
//!    END    4  records before it u64
//!    FREE   5  src id u64 — the object is gone (incremental streams)
//!    HOLE   6  src id u64 | offset u64 | length u64 — reads as zeros (incremental)
//!    CLONE_IDS 7  n u64 | n × (src id u64, origin's src id u64) — (v3, before the
//!              objects) the object of the clone that each object of its origin snapshot
//!              became: the receiver's clone of its copy of the origin names them so
//! ```
//! Object ids are the sender's; the receiver maps each to an object of its own and keeps
//! the map in the dataset (`crate::receive`), so a later incremental names objects the
//! same way. Records come in this order: objects (each followed by its data and holes) in
//! id order, directories in id order, frees, end. Several streams may follow each other
//! (`send -I`, `send -R`): each has its header and its own chain.
//!
//! Resuming (`receive -s`, `send -t`): records have a position — OBJECT and DATA/HOLE
//! (phase 0, object, offset), DIR (1, dir, 0), FREE (2, object, 0). A receive cut short
//! with `-s` keeps what it applied and a token naming the position after it; the resumed
//! stream sends only records from there on (and the OBJECT record of the object it starts
//! in, so its attributes are applied again).

use std::collections::BTreeMap;
use std::io::{Read, Write};

use crate::codec::{Reader, Writer};
use crate::dataset::DatasetKind;
use crate::dnode::{Dnode, ObjectKind};
use crate::error::StoreError;

pub(crate) const MAGIC: u64 = 0x5254_534e_5249_4143; // "CAIRNSTR"
/// The version written; version 1 (no origin, no dataset path) is still read.
pub(crate) const VERSION: u32 = 2;
/// The version of a stream from a clone's origin (`Header::clone`); the newest read.
pub(crate) const CLONE_VERSION: u32 = 3;
const CHECK: usize = 16;
/// The largest DATA record's bytes (a block is at most 1 MiB).
pub(crate) const DATA_CHUNK: usize = 1 << 20;
/// The largest record a receiver accepts (a DIR record of many names is the largest).
const MAX_RECORD: u32 = 64 << 20;
pub(crate) const OBJECT: u8 = 1;
pub(crate) const DATA: u8 = 2;
pub(crate) const DIR: u8 = 3;
pub(crate) const END: u8 = 4;
pub(crate) const FREE: u8 = 5;
pub(crate) const HOLE: u8 = 6;
pub(crate) const CLONE_IDS: u8 = 7;
/// Pairs in one CLONE_IDS record (1 MiB).
pub(crate) const CLONE_IDS_PER_RECORD: usize = 1 << 16;

/// What a send or a receive moved.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StreamStats {
    /// Streams (one per snapshot sent: `-I` and `-R` send several).
    pub streams: u64,
    pub objects: u64,
    pub freed_objects: u64,
    pub data_bytes: u64,
    pub records: u64,
    pub stream_bytes: u64,
}

impl StreamStats {
    pub(crate) fn add(&mut self, o: &StreamStats) {
        self.streams += o.streams;
        self.objects += o.objects;
        self.freed_objects += o.freed_objects;
        self.data_bytes += o.data_bytes;
        self.records += o.records;
        self.stream_bytes += o.stream_bytes;
    }
}

pub(crate) fn bad(why: impl Into<String>) -> StoreError {
    StoreError::BadStream(why.into())
}

/// What a stream's header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: DatasetKind,
    /// The snapshot sent (the part after `@`), its guid and txg on the sender.
    pub snapshot: String,
    pub guid: u64,
    pub txg: u64,
    /// The sender's id of the dataset's root object.
    pub root: u64,
    pub props: BTreeMap<String, String>,
    /// The guid of the snapshot an incremental starts from; 0 for a full stream.
    pub from_guid: u64,
    /// Where the dataset sits below the one sent ("" for itself).
    pub path: String,
    /// The dataset's name on the sender (for resume tokens).
    pub source: String,
    /// A resumed stream (`send -t`): it starts at this position.
    pub resume: Option<Position>,
    /// An incremental from a clone's origin (another dataset's snapshot): CLONE_IDS
    /// records say which of the clone's objects each of the origin's became.
    pub clone: bool,
}

/// A place in a stream (see "Resuming" above); ordered as records are sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    pub phase: u8,
    pub object: u64,
    pub offset: u64,
}

impl Position {
    pub const OBJECTS: u8 = 0;
    pub const DIRS: u8 = 1;
    pub const FREES: u8 = 2;

    /// Whether a resumed stream starting here sends object `id`'s OBJECT record.
    pub fn sends_object(&self, id: u64) -> bool {
        self.phase == Self::OBJECTS && id >= self.object
    }

    /// Whether it sends a record at `phase`/`object`/`offset`.
    pub fn sends(&self, phase: u8, object: u64, offset: u64) -> bool {
        Position {
            phase,
            object,
            offset,
        } >= *self
    }
}

impl Header {
    pub fn encode(&self) -> Vec<u8> {
        let mut h = Writer::new();
        let version = if self.clone { CLONE_VERSION } else { VERSION };
        h.u64(MAGIC).u32(version).u8(match self.kind {
            DatasetKind::Filesystem => 1,
            DatasetKind::Volume => 2,
        });
        h.str(&self.snapshot)
            .u64(self.guid)
            .u64(self.txg)
            .u64(self.root);
        h.u64(self.props.len() as u64);
        for (k, val) in &self.props {
            h.str(k).str(val);
        }
        h.u64(self.from_guid).str(&self.path).str(&self.source);
        match self.resume {
            None => h.u8(0),
            Some(p) => h.u8(1).u8(p.phase).u64(p.object).u64(p.offset),
        };
        if self.clone {
            h.u8(1);
        }
        h.buf
    }
}

/// Writes records, chaining their checks.
pub(crate) struct Sender<'a> {
    out: &'a mut dyn Write,
    check: [u8; CHECK],
    pub stats: StreamStats,
    /// A resumed stream sends only records from here on.
    resume: Option<Position>,
}

impl<'a> Sender<'a> {
    /// Starts a stream: writes its header.
    pub fn start(out: &'a mut dyn Write, header: &Header) -> Result<Sender<'a>, StoreError> {
        let bytes = header.encode();
        out.write_all(&bytes).map_err(Self::io)?;
        let mut stats = StreamStats {
            streams: 1,
            ..StreamStats::default()
        };
        stats.stream_bytes = bytes.len() as u64;
        Ok(Sender {
            out,
            check: header_check(&bytes),
            stats,
            resume: header.resume,
        })
    }

    /// Whether object `id`'s OBJECT record is sent (all are, unless resuming).
    pub fn sends_object(&self, id: u64) -> bool {
        self.resume.is_none_or(|p| p.sends_object(id))
    }

    /// Whether the record at this position is sent.
    pub fn sends(&self, phase: u8, object: u64, offset: u64) -> bool {
        self.resume.is_none_or(|p| p.sends(phase, object, offset))
    }

    /// Where object `id`'s data starts (0, unless a resumed stream starts inside it).
    pub fn data_start(&self, id: u64) -> u64 {
        match self.resume {
            Some(p) if p.phase == Position::OBJECTS && p.object == id => p.offset,
            _ => 0,
        }
    }

    fn io(e: std::io::Error) -> StoreError {
        StoreError::LocalIo {
            path: "the stream".into(),
            source: e,
        }
    }

    pub fn record(&mut self, kind: u8, payload: &[u8]) -> Result<(), StoreError> {
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

    /// Ends the stream: the END record counts the records before it.
    pub fn finish(mut self) -> Result<StreamStats, StoreError> {
        let n = self.stats.records;
        self.record(END, &n.to_le_bytes())?;
        self.out.flush().map_err(Self::io)?;
        Ok(self.stats)
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

pub(crate) fn object_record(id: u64, d: &Dnode) -> Vec<u8> {
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

/// Reads exactly what the stream holds, keeping the header's bytes for its check.
pub(crate) struct Input<'a> {
    input: &'a mut dyn Read,
    kept: Vec<u8>,
    /// Bytes read so far (all streams).
    pub bytes: u64,
    check: [u8; CHECK],
}

impl<'a> Input<'a> {
    pub fn new(input: &'a mut dyn Read) -> Input<'a> {
        Input {
            input,
            kept: Vec::new(),
            bytes: 0,
            check: [0; CHECK],
        }
    }

    fn take(&mut self, n: usize) -> Result<Vec<u8>, StoreError> {
        let mut buf = vec![0u8; n];
        self.input
            .read_exact(&mut buf)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => bad("it ends early (cut short?)"),
                _ => Sender::io(e),
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

    /// The next stream's header, or `None` at a clean end of input (between streams).
    pub fn next_header(&mut self) -> Result<Option<Header>, StoreError> {
        let mut first = [0u8; 1];
        loop {
            match self.input.read(&mut first) {
                Ok(0) => return Ok(None),
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Sender::io(e)),
            }
        }
        self.bytes += 1;
        self.kept = first.to_vec();
        let h = self.header_after_first_byte()?;
        self.check = header_check(&self.kept);
        Ok(Some(h))
    }

    fn header_after_first_byte(&mut self) -> Result<Header, StoreError> {
        let mut magic = self.kept.clone();
        magic.extend(self.kept(7)?);
        if u64::from_le_bytes(magic.try_into().expect("8")) != MAGIC {
            return Err(bad("it does not start with a cairn send stream header"));
        }
        let version = u32::from_le_bytes(self.kept(4)?.try_into().expect("4"));
        if version > CLONE_VERSION {
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
        let (guid, txg, root) = (self.u64()?, self.u64()?, self.u64()?);
        let n = self.u64()?;
        if n > 1024 {
            return Err(bad(format!("{n} properties")));
        }
        let mut props = BTreeMap::new();
        for _ in 0..n {
            let k = self.str()?;
            props.insert(k, self.str()?);
        }
        let (from_guid, path, source, resume) = if version >= 2 {
            (
                self.u64()?,
                self.str()?,
                self.str()?,
                self.resume_position()?,
            )
        } else {
            (0, String::new(), String::new(), None)
        };
        let clone = match (version >= CLONE_VERSION)
            .then(|| self.kept(1))
            .transpose()?
        {
            None => false,
            Some(b) if b[0] <= 1 => b[0] == 1,
            Some(b) => return Err(bad(format!("clone flag {}", b[0]))),
        };
        if !path.is_empty() {
            path.split('/')
                .try_for_each(crate::dataset::validate_component)?;
        }
        Ok(Header {
            kind,
            snapshot,
            guid,
            txg,
            root,
            props,
            from_guid,
            path,
            source,
            resume,
            clone,
        })
    }

    fn resume_position(&mut self) -> Result<Option<Position>, StoreError> {
        match self.kept(1)?[0] {
            0 => Ok(None),
            1 => {
                let phase = self.kept(1)?[0];
                if phase > Position::FREES {
                    return Err(bad(format!("resume phase {phase}")));
                }
                let (object, offset) = (self.u64()?, self.u64()?);
                Ok(Some(Position {
                    phase,
                    object,
                    offset,
                }))
            }
            f => Err(bad(format!("resume flag {f}"))),
        }
    }

    /// The next record, its check verified against the chain.
    pub fn record(&mut self) -> Result<(u8, Vec<u8>), StoreError> {
        let kind = self.take(1)?[0];
        let len: [u8; 4] = self.take(4)?.try_into().expect("4");
        let n = u32::from_le_bytes(len);
        if n > MAX_RECORD {
            return Err(bad(format!("a record of {n} bytes")));
        }
        let payload = self.take(n as usize)?;
        let got = self.take(CHECK)?;
        let want = chain(&self.check, kind, &len, &payload);
        // (Fuzzing builds take any check: a sender that means harm can compute it, so the
        // records behind it must be safe to decode and apply whatever they hold.)
        if got != want && !cfg!(fuzzing) {
            return Err(bad(format!(
                "record at byte {} fails its check (the stream is damaged)",
                self.bytes
            )));
        }
        self.check = want;
        Ok((kind, payload))
    }
}

/// An object's attributes, applied once its data is in.
pub(crate) struct Attrs {
    pub dnode: Dnode,
    pub xattr_src: u64,
}

pub(crate) fn decode_object(p: &[u8]) -> Result<(u64, Attrs), StoreError> {
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

/// What `receive -s` keeps of a stream cut short, for `send -t` (shown as the dataset's
/// `receive_resume_token`): `1-` and hex of
/// ```text
///  to snapshot str (sender's POOL/DS@B) | to guid u64 | from guid u64 (0: full) | phase u8 | object u64 | offset u64 | check 4 B (blake3 of the rest)
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResumeToken {
    pub to: String,
    pub to_guid: u64,
    pub from_guid: u64,
    pub at: Position,
}

impl ResumeToken {
    pub fn encode(&self) -> String {
        let mut w = Writer::new();
        w.str(&self.to).u64(self.to_guid).u64(self.from_guid);
        w.u8(self.at.phase).u64(self.at.object).u64(self.at.offset);
        let check = blake3::hash(&w.buf);
        w.raw(&check.as_bytes()[..4]);
        let hex: String = w.buf.iter().map(|b| format!("{b:02x}")).collect();
        format!("1-{hex}")
    }

    pub fn decode(token: &str) -> Result<ResumeToken, StoreError> {
        let unusable = |why: &str| {
            StoreError::BadStream(format!(
                "the resume token is not usable ({why}); copy it whole from `cairn get receive_resume_token DS` on the receiving side"
            ))
        };
        let hex = token
            .trim()
            .strip_prefix("1-")
            .ok_or_else(|| unusable("it does not start with 1-"))?;
        if hex.len() % 2 != 0 || hex.len() < 8 || !hex.is_ascii() {
            return Err(unusable("bad length"));
        }
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
            .collect::<Result<_, _>>()
            .map_err(|_| unusable("not hex"))?;
        let (body, check) = bytes.split_at(bytes.len() - 4);
        if blake3::hash(body).as_bytes()[..4] != *check {
            return Err(unusable("its check fails"));
        }
        let mut r = Reader::new(body, "resume token");
        let e = |_| unusable("it is cut short");
        let t = ResumeToken {
            to: r.str().map_err(e)?,
            to_guid: r.u64().map_err(e)?,
            from_guid: r.u64().map_err(e)?,
            at: Position {
                phase: r.u8().map_err(e)?,
                object: r.u64().map_err(e)?,
                offset: r.u64().map_err(e)?,
            },
        };
        Ok(t)
    }
}

/// Fixed-size fields of a DATA (id, offset) or HOLE (id, offset, length) record.
pub(crate) fn decode_u64s<const N: usize>(p: &[u8], what: &str) -> Result<[u64; N], StoreError> {
    if p.len() < 8 * N {
        return Err(bad(format!("a {what} record without its header")));
    }
    let mut out = [0u64; N];
    for (i, v) in out.iter_mut().enumerate() {
        *v = u64::from_le_bytes(p[8 * i..8 * i + 8].try_into().expect("8"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> Header {
        Header {
            kind: DatasetKind::Filesystem,
            snapshot: "s".into(),
            guid: 1,
            txg: 2,
            root: 3,
            props: BTreeMap::new(),
            from_guid: 0,
            path: String::new(),
            source: "tank/fs".into(),
            resume: None,
            clone: false,
        }
    }

    #[test]
    fn only_a_clone_stream_is_version_3_and_its_flag_reads_back() {
        let mut h = header();
        assert_eq!(h.encode()[8..12], VERSION.to_le_bytes());
        h.clone = true;
        h.from_guid = 5;
        let bytes = h.encode();
        assert_eq!(bytes[8..12], CLONE_VERSION.to_le_bytes());
        let mut slice = &bytes[..];
        assert_eq!(Input::new(&mut slice).next_header().unwrap(), Some(h));
        let mut flag2 = bytes.clone();
        *flag2.last_mut().unwrap() = 2;
        let mut slice = &flag2[..];
        assert!(Input::new(&mut slice).next_header().is_err());
    }

    #[test]
    fn a_header_reads_back_and_a_version_1_header_still_reads() {
        let mut h = header();
        h.from_guid = 77;
        h.path = "a/b".into();
        h.resume = Some(Position {
            phase: 1,
            object: 9,
            offset: 4096,
        });
        h.props.insert("compression".into(), "zstd".into());
        let bytes = h.encode();
        let mut slice = &bytes[..];
        assert_eq!(Input::new(&mut slice).next_header().unwrap(), Some(h));
        let mut v1 = Writer::new();
        v1.u64(MAGIC)
            .u32(1)
            .u8(2)
            .str("s")
            .u64(1)
            .u64(2)
            .u64(3)
            .u64(0);
        let mut slice = &v1.buf[..];
        let got = Input::new(&mut slice).next_header().unwrap().unwrap();
        assert_eq!(
            (got.kind, got.from_guid, got.path.as_str()),
            (DatasetKind::Volume, 0, "")
        );
        let mut empty: &[u8] = &[];
        assert_eq!(Input::new(&mut empty).next_header().unwrap(), None);
    }

    #[test]
    fn a_token_reads_back_and_a_damaged_one_is_refused() {
        let t = ResumeToken {
            to: "tank/fs@b".into(),
            to_guid: 5,
            from_guid: 6,
            at: Position {
                phase: 0,
                object: 12,
                offset: 1 << 20,
            },
        };
        let s = t.encode();
        assert_eq!(ResumeToken::decode(&s).unwrap(), t);
        let mut bad = s.clone().into_bytes();
        bad[10] = if bad[10] == b'0' { b'1' } else { b'0' };
        let e = ResumeToken::decode(std::str::from_utf8(&bad).unwrap()).unwrap_err();
        assert!(e.to_string().contains("check"), "{e}");
        assert!(ResumeToken::decode(&s[..s.len() - 2]).is_err());
        assert!(ResumeToken::decode("xyz").is_err());
    }

    proptest! {
        #[test]
        fn any_token_text_is_refused_or_read_without_a_panic(text in ".{0,80}") {
            let _ = ResumeToken::decode(&text);
            let _ = ResumeToken::decode(&format!("1-{text}"));
        }

        /// Whatever bytes arrive, reading headers and records returns errors, never panics.
        #[test]
        fn any_bytes_are_refused_without_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut slice = &bytes[..];
            let mut input = Input::new(&mut slice);
            if let Ok(Some(_)) = input.next_header() {
                while input.record().is_ok() {}
            }
            let _ = decode_object(&bytes);
            let _ = decode_u64s::<3>(&bytes, "hole");
        }

        /// A valid header followed by random records: every record fails its check.
        #[test]
        fn records_without_the_chain_fail(tail in proptest::collection::vec(any::<u8>(), 21..300)) {
            let mut bytes = header().encode();
            bytes.extend_from_slice(&tail);
            let mut slice = &bytes[..];
            let mut input = Input::new(&mut slice);
            prop_assert!(input.next_header().unwrap().is_some());
            prop_assert!(input.record().is_err());
        }
    }
}
