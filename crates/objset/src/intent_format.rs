//! The intent log on disk: its blocks, its records, and the head the root block names
//! (the log itself is `crate::intent_log`).
//!
//! ```text
//!  root block of txg T ── log head (at the block's end, `LogHead`) ─┐
//!                                                                   ▼
//!  ┌ log block, seq 0 ───────┐   ┌ log block, seq 1 ───────┐   ┌ seq 2 (allocated, not
//!  │ chain T, next ──────────┼──►│ chain T, next ──────────┼──►│ yet written: whatever
//!  │ records (writes of      │   │ records                 │   │ it holds fails the
//!  │ txg T+1, in order)      │   │                         │   │ checksum or the chain)
//!  └─────────────────────────┘   └─────────────────────────┘   └───────────────────────
//!
//!  log block (psize bytes: a multiple of the sector, at most MAX_LOG_BLOCK)
//!   0  magic u64 "CAIRNLOG"
//!   8  chain u64          the txg of the root block that names the head; every block of
//!                         the chain carries it, so a block left from an older chain ends it
//!  16  seq u64            0 for the head, +1 per block
//!  24  next vdev u32 | next psize u32
//!  32  next offset u64
//!  40  next asize u64     the block after this one, allocated before this one is written
//!  48  payload u32 | records u32
//!  56  reserved u64 (0)
//!  64  blake3 of the whole block with these 32 bytes zeroed
//!  96  records, back to back, then zeros
//!
//!  record: kind u8 | 0 ×3 | length u32 (the whole record) | object u64 | then by kind:
//!   1 WRITE        offset u64 | data (length − 24 bytes)
//!   2 WRITE_BLOCK  offset u64 | bytes u64 | block pointer (128 B): the data in a block of
//!                  its own (large writes, logbias=throughput)
//!   3 TRUNCATE     size u64
//!   4 PUNCH        offset u64 | bytes u64
//!   5 ATTR         mode u32 | uid u32 | gid u32 | 0 u32 | atime u64 | mtime u64 |
//!                  ctime u64: a file's attributes as they were at the commit (after its
//!                  writes in the same commit, so replay keeps their mtime)
//!   6 CREATE       parent u64 | mode u32 | uid u32 | gid u32 | kind u8 | 0 u8 |
//!                  name bytes u16 | rdev u64 | target bytes u32 | 0 u32 | name | target:
//!                  the record's object is a node `posix::make_node` made (a file,
//!                  directory, symbolic link with its target, or special file) named
//!                  `name` in directory `parent`
//!   7 RENAME       from dir u64 | to dir u64 | mode u8 (0 replace, 1 no-replace, 2
//!                  exchange) | 0 u8 | from bytes u16 | to bytes u16 | 0 u16 | from | to:
//!                  the record's object is the one renamed
//!   8 LINK         dir u64 | name bytes u16 | 0 u16 | 0 u32 | name: the record's object
//!                  gets one more name
//! ```
//! As in ZFS's ZIL, the end of the chain is the first block that does not verify: a block
//! torn by a power cut, or one never written. Nothing written after it was acknowledged
//! (a log commit returns only once its blocks and every earlier one are on stable storage).

use cairn_pool::io::bp::{BlockPointer, Dva, BP_SIZE};

use crate::codec::{DecodeError, Reader, Writer};
use crate::dir::{RenameMode, NAME_MAX, XATTR_NAME_MAX, XATTR_SIZE_MAX};
use crate::dnode::ObjectKind;

pub(crate) const LOG_MAGIC: u64 = 0x474f_4c4e_5249_4143; // "CAIRNLOG"
/// Bytes before the first record.
pub(crate) const LOG_HEADER: usize = 96;
const CHECKSUM_AT: usize = 64;
/// Largest log block.
pub(crate) const MAX_LOG_BLOCK: usize = 128 << 10;
/// Bytes of a record before its data.
pub(crate) const RECORD_HEADER: usize = 16;
const _: () = assert!(LOG_HEADER == CHECKSUM_AT + 32);
const _: () = assert!(MAX_LOG_BLOCK <= u32::MAX as usize);

const KIND_WRITE: u8 = 1;
const KIND_WRITE_BLOCK: u8 = 2;
const KIND_TRUNCATE: u8 = 3;
const KIND_PUNCH: u8 = 4;
const KIND_ATTR: u8 = 5;
const KIND_CREATE: u8 = 6;
const KIND_RENAME: u8 = 7;
const KIND_LINK: u8 = 8;
const KIND_REMOVE: u8 = 9;
const KIND_XATTR: u8 = 10;
/// Bytes of a CREATE, RENAME and LINK record between its header and its names.
const CREATE_FIXED: usize = 40;
const RENAME_FIXED: usize = 24;
const LINK_FIXED: usize = 16;
/// Bytes of a REMOVE and an XATTR record between its header and its name.
const REMOVE_FIXED: usize = 16;
const XATTR_FIXED: usize = 16;

/// One logged operation. Object ids are pool-wide, so a record needs no dataset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Record {
    Write {
        object: u64,
        offset: u64,
        data: Vec<u8>,
    },
    WriteBlock {
        object: u64,
        offset: u64,
        bytes: u64,
        bp: BlockPointer,
    },
    Truncate {
        object: u64,
        size: u64,
    },
    Punch {
        object: u64,
        offset: u64,
        bytes: u64,
    },
    Attr {
        object: u64,
        attrs: LoggedAttrs,
    },
    Create {
        object: u64,
        create: LoggedCreate,
    },
    Rename {
        object: u64,
        rename: LoggedRename,
    },
    Link {
        object: u64,
        dir: u64,
        name: String,
    },
    Remove {
        object: u64,
        dir: u64,
        name: String,
        rmdir: bool,
    },
    Xattr {
        object: u64,
        xattr: LoggedXattr,
    },
}

/// An extended attribute an XATTR record sets or removes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LoggedXattr {
    /// The object keeping the attributes (`Dnode::xattr`) when the change was made.
    pub holder: u64,
    /// 1 to `XATTR_NAME_MAX` bytes of UTF-8.
    pub name: String,
    /// None: removed. At most `XATTR_SIZE_MAX` bytes.
    pub value: Option<Vec<u8>>,
}

/// A rename a RENAME record repeats (its object is the one `from` names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LoggedRename {
    pub from_dir: u64,
    pub from: String,
    pub to_dir: u64,
    pub to: String,
    pub mode: RenameMode,
}

/// The node a CREATE record makes (its object id is the record's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LoggedCreate {
    pub parent: u64,
    /// File, Directory, Symlink or Special.
    pub kind: ObjectKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
    /// 1 to `NAME_MAX` bytes of UTF-8.
    pub name: String,
    /// A symbolic link's target; empty for the other kinds.
    pub target: Vec<u8>,
}

/// The kinds of node a CREATE record makes.
fn creatable(kind: ObjectKind) -> bool {
    matches!(
        kind,
        ObjectKind::File | ObjectKind::Directory | ObjectKind::Symlink | ObjectKind::Special
    )
}

/// The attributes an ATTR record sets (times in ns since the epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LoggedAttrs {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime_ns: u64,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
}

impl Record {
    /// Encoded length.
    pub(crate) fn len(&self) -> usize {
        RECORD_HEADER
            + match self {
                Record::Write { data, .. } => 8 + data.len(),
                Record::WriteBlock { .. } => 16 + BP_SIZE,
                Record::Truncate { .. } => 8,
                Record::Punch { .. } => 16,
                Record::Attr { .. } => 40,
                Record::Create { create, .. } => {
                    CREATE_FIXED + create.name.len() + create.target.len()
                }
                Record::Rename { rename: r, .. } => RENAME_FIXED + r.from.len() + r.to.len(),
                Record::Link { name, .. } => LINK_FIXED + name.len(),
                Record::Remove { name, .. } => REMOVE_FIXED + name.len(),
                Record::Xattr { xattr: x, .. } => {
                    XATTR_FIXED + x.name.len() + x.value.as_ref().map_or(0, Vec::len)
                }
            }
    }

    pub(crate) fn object(&self) -> u64 {
        match self {
            Record::Write { object, .. }
            | Record::WriteBlock { object, .. }
            | Record::Truncate { object, .. }
            | Record::Punch { object, .. }
            | Record::Attr { object, .. }
            | Record::Create { object, .. }
            | Record::Rename { object, .. }
            | Record::Link { object, .. }
            | Record::Remove { object, .. }
            | Record::Xattr { object, .. } => *object,
        }
    }

    fn encode_into(&self, w: &mut Writer) {
        let kind = match self {
            Record::Write { .. } => KIND_WRITE,
            Record::WriteBlock { .. } => KIND_WRITE_BLOCK,
            Record::Truncate { .. } => KIND_TRUNCATE,
            Record::Punch { .. } => KIND_PUNCH,
            Record::Attr { .. } => KIND_ATTR,
            Record::Create { .. } => KIND_CREATE,
            Record::Rename { .. } => KIND_RENAME,
            Record::Link { .. } => KIND_LINK,
            Record::Remove { .. } => KIND_REMOVE,
            Record::Xattr { .. } => KIND_XATTR,
        };
        w.u8(kind)
            .u8(0)
            .u16(0)
            .u32(self.len() as u32)
            .u64(self.object());
        match self {
            Record::Write { offset, data, .. } => {
                w.u64(*offset).raw(data);
            }
            Record::WriteBlock {
                offset, bytes, bp, ..
            } => {
                w.u64(*offset).u64(*bytes).raw(&bp.to_bytes());
            }
            Record::Truncate { size, .. } => {
                w.u64(*size);
            }
            Record::Punch { offset, bytes, .. } => {
                w.u64(*offset).u64(*bytes);
            }
            Record::Attr { attrs: a, .. } => {
                w.u32(a.mode).u32(a.uid).u32(a.gid).u32(0);
                w.u64(a.atime_ns).u64(a.mtime_ns).u64(a.ctime_ns);
            }
            Record::Create { create: c, .. } => {
                w.u64(c.parent).u32(c.mode).u32(c.uid).u32(c.gid);
                w.u8(c.kind as u8).u8(0).u16(c.name.len() as u16);
                w.u64(c.rdev).u32(c.target.len() as u32).u32(0);
                w.raw(c.name.as_bytes()).raw(&c.target);
            }
            Record::Rename { rename: r, .. } => {
                w.u64(r.from_dir).u64(r.to_dir).u8(r.mode as u8).u8(0);
                w.u16(r.from.len() as u16).u16(r.to.len() as u16).u16(0);
                w.raw(r.from.as_bytes()).raw(r.to.as_bytes());
            }
            Record::Link { dir, name, .. } => {
                w.u64(*dir).u16(name.len() as u16).u16(0).u32(0);
                w.raw(name.as_bytes());
            }
            Record::Remove {
                dir, name, rmdir, ..
            } => {
                w.u64(*dir)
                    .u8(u8::from(*rmdir))
                    .u8(0)
                    .u16(name.len() as u16)
                    .u32(0);
                w.raw(name.as_bytes());
            }
            Record::Xattr { xattr: x, .. } => {
                let value = x.value.as_deref().unwrap_or_default();
                w.u64(x.holder).u8(u8::from(x.value.is_some())).u8(0);
                w.u16(x.name.len() as u16).u32(value.len() as u32);
                w.raw(x.name.as_bytes()).raw(value);
            }
        }
    }

    /// A name of `len` bytes: 1 to `NAME_MAX` bytes of UTF-8.
    fn decode_name(b: &mut Reader<'_>, len: usize, at: usize) -> Result<String, DecodeError> {
        let bad = |what: String| DecodeError::bad_value("log record name", at, what);
        if !(1..=NAME_MAX).contains(&len) {
            return Err(bad(format!("{len} bytes")));
        }
        std::str::from_utf8(b.fixed(len)?)
            .map(str::to_string)
            .map_err(|_| bad("not UTF-8".into()))
    }

    /// A LINK record's body.
    fn decode_link(b: &mut Reader<'_>, object: u64, at: usize) -> Result<Record, DecodeError> {
        let dir = b.u64()?;
        let len = b.u16()? as usize;
        let (_, _) = (b.u16()?, b.u32()?);
        Ok(Record::Link {
            object,
            dir,
            name: Record::decode_name(b, len, at)?,
        })
    }

    /// An ATTR record's body.
    fn decode_attrs(b: &mut Reader<'_>) -> Result<LoggedAttrs, DecodeError> {
        let (mode, uid, gid, _) = (b.u32()?, b.u32()?, b.u32()?, b.u32()?);
        Ok(LoggedAttrs {
            mode,
            uid,
            gid,
            atime_ns: b.u64()?,
            mtime_ns: b.u64()?,
            ctime_ns: b.u64()?,
        })
    }

    /// A REMOVE record's body.
    fn decode_remove(b: &mut Reader<'_>, object: u64, at: usize) -> Result<Record, DecodeError> {
        let dir = b.u64()?;
        let rmdir = match b.u8()? {
            0 => false,
            1 => true,
            other => {
                let what = format!("rmdir flag {other}");
                return Err(DecodeError::bad_value("log REMOVE record", at, what));
            }
        };
        let _ = b.u8()?;
        let len = b.u16()? as usize;
        let _ = b.u32()?;
        Ok(Record::Remove {
            object,
            dir,
            name: Record::decode_name(b, len, at)?,
            rmdir,
        })
    }

    /// An XATTR record's body (names are as long as file names: `XATTR_NAME_MAX`).
    fn decode_xattr(b: &mut Reader<'_>, at: usize) -> Result<LoggedXattr, DecodeError> {
        const _: () = assert!(XATTR_NAME_MAX == NAME_MAX);
        let bad = |what: String| DecodeError::bad_value("log XATTR record", at, what);
        let holder = b.u64()?;
        let set = b.u8()?;
        let _ = b.u8()?;
        let name_len = b.u16()? as usize;
        let value_len = b.u32()? as usize;
        let name = Record::decode_name(b, name_len, at)?;
        if set > 1 || (set == 0 && value_len > 0) {
            return Err(bad(format!("set flag {set} with {value_len} value bytes")));
        }
        if value_len > XATTR_SIZE_MAX {
            return Err(bad(format!("a value of {value_len} bytes")));
        }
        let value = b.fixed(value_len)?.to_vec();
        Ok(LoggedXattr {
            holder,
            name,
            value: (set == 1).then_some(value),
        })
    }

    /// The body of a RENAME record.
    fn decode_rename(b: &mut Reader<'_>, at: usize) -> Result<LoggedRename, DecodeError> {
        let (from_dir, to_dir) = (b.u64()?, b.u64()?);
        let mode_code = b.u8()?;
        let _ = b.u8()?;
        let (from_len, to_len) = (b.u16()? as usize, b.u16()? as usize);
        let _ = b.u16()?;
        let mode = RenameMode::from_u8(mode_code).ok_or_else(|| {
            DecodeError::bad_value("log RENAME record", at, format!("mode {mode_code}"))
        })?;
        Ok(LoggedRename {
            from_dir,
            from: Record::decode_name(b, from_len, at)?,
            to_dir,
            to: Record::decode_name(b, to_len, at)?,
            mode,
        })
    }

    /// The body of a CREATE record (after its header).
    fn decode_create(b: &mut Reader<'_>, at: usize) -> Result<LoggedCreate, DecodeError> {
        let bad = |what: String| DecodeError::bad_value("log CREATE record", at, what);
        let (parent, mode, uid, gid) = (b.u64()?, b.u32()?, b.u32()?, b.u32()?);
        let kind_code = b.u8()?;
        let _ = b.u8()?;
        let name_len = b.u16()? as usize;
        let rdev = b.u64()?;
        let target_len = b.u32()? as usize;
        let _ = b.u32()?;
        let kind = ObjectKind::from_u8(kind_code)
            .filter(|k| creatable(*k))
            .ok_or_else(|| bad(format!("node kind {kind_code}")))?;
        let name = Record::decode_name(b, name_len, at)?;
        if target_len > 0 && kind != ObjectKind::Symlink {
            return Err(bad(format!("a {} with a target", kind.name())));
        }
        let target = b.fixed(target_len)?.to_vec();
        Ok(LoggedCreate {
            parent,
            kind,
            mode,
            uid,
            gid,
            rdev,
            name,
            target,
        })
    }

    fn decode(r: &mut Reader<'_>) -> Result<Record, DecodeError> {
        let at = r.position();
        let kind = r.u8()?;
        let _ = r.fixed(3)?;
        let len = r.u32()? as usize;
        let object = r.u64()?;
        let body = len
            .checked_sub(RECORD_HEADER)
            .ok_or_else(|| DecodeError::bad_value("log record", at, format!("length {len}")))?;
        let mut b = Reader::new(r.fixed(body)?, "log record");
        let record = match kind {
            KIND_WRITE => {
                let offset = b.u64()?;
                let data = b.fixed(body.saturating_sub(8))?.to_vec();
                Record::Write {
                    object,
                    offset,
                    data,
                }
            }
            KIND_WRITE_BLOCK => {
                let offset = b.u64()?;
                let bytes = b.u64()?;
                let bp = b.nested(BP_SIZE, BlockPointer::decode)?;
                Record::WriteBlock {
                    object,
                    offset,
                    bytes,
                    bp,
                }
            }
            KIND_TRUNCATE => Record::Truncate {
                object,
                size: b.u64()?,
            },
            KIND_PUNCH => Record::Punch {
                object,
                offset: b.u64()?,
                bytes: b.u64()?,
            },
            KIND_ATTR => Record::Attr {
                object,
                attrs: Record::decode_attrs(&mut b)?,
            },
            KIND_CREATE => Record::Create {
                object,
                create: Record::decode_create(&mut b, at)?,
            },
            KIND_RENAME => Record::Rename {
                object,
                rename: Record::decode_rename(&mut b, at)?,
            },
            KIND_LINK => Record::decode_link(&mut b, object, at)?,
            KIND_REMOVE => Record::decode_remove(&mut b, object, at)?,
            KIND_XATTR => Record::Xattr {
                object,
                xattr: Record::decode_xattr(&mut b, at)?,
            },
            other => {
                return Err(DecodeError::bad_value(
                    "log record",
                    at,
                    format!("kind {other}"),
                ))
            }
        };
        if !b.is_at_end() {
            return Err(DecodeError::bad_value(
                "log record",
                at,
                format!("length {len} does not match its kind {kind}"),
            ));
        }
        Ok(record)
    }
}

/// Where a log block is: one DVA (log blocks have one copy; the vdev's parity or mirror
/// protects them) and its physical size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LogBlockAddr {
    pub dva: Dva,
    pub psize: u32,
}

impl LogBlockAddr {
    pub(crate) fn is_empty(&self) -> bool {
        self.dva.is_empty() || self.psize == 0
    }
}

/// A log block's header, as decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LogBlock {
    pub chain: u64,
    pub seq: u64,
    pub next: LogBlockAddr,
    pub records: Vec<Record>,
}

/// Payload bytes a log block of `psize` bytes holds.
pub(crate) fn capacity(psize: usize) -> usize {
    psize.saturating_sub(LOG_HEADER)
}

impl LogBlock {
    /// Encodes into exactly `psize` bytes (the records must fit: `capacity(psize)`).
    pub(crate) fn encode(&self, psize: usize) -> Vec<u8> {
        let mut w = Writer::new();
        let payload: usize = self.records.iter().map(Record::len).sum();
        assert!(
            payload <= capacity(psize),
            "log records overflow their block"
        );
        w.u64(LOG_MAGIC)
            .u64(self.chain)
            .u64(self.seq)
            .u32(self.next.dva.vdev)
            .u32(self.next.psize)
            .u64(self.next.dva.offset)
            .u64(self.next.dva.asize)
            .u32(payload as u32)
            .u32(self.records.len() as u32)
            .u64(0)
            .raw(&[0u8; 32]);
        for r in &self.records {
            r.encode_into(&mut w);
        }
        w.buf.resize(psize, 0);
        let sum = blake3::hash(&w.buf);
        w.buf[CHECKSUM_AT..LOG_HEADER].copy_from_slice(sum.as_bytes());
        w.buf
    }

    /// Whether `buf` is a log block whose checksum holds (for reads that reconstruct).
    pub(crate) fn verifies(buf: &[u8]) -> bool {
        if buf.len() < LOG_HEADER || buf[..8] != LOG_MAGIC.to_le_bytes() {
            return false;
        }
        Self::checksum(buf).as_bytes() == &buf[CHECKSUM_AT..LOG_HEADER]
    }

    /// The block's checksum: over the whole block, its checksum field read as zeros.
    fn checksum(buf: &[u8]) -> blake3::Hash {
        let mut h = blake3::Hasher::new();
        h.update(&buf[..CHECKSUM_AT]);
        h.update(&[0u8; 32]);
        h.update(&buf[LOG_HEADER..]);
        h.finalize()
    }

    /// Gives `buf` (at least a header long) the magic and a checksum that holds, so that
    /// a fuzzer's bytes reach the record decoder (`crate::fuzz_entry`).
    pub(crate) fn seal(buf: &mut [u8]) {
        buf[..8].copy_from_slice(&LOG_MAGIC.to_le_bytes());
        let sum = Self::checksum(buf);
        buf[CHECKSUM_AT..LOG_HEADER].copy_from_slice(sum.as_bytes());
    }

    /// Decodes a block that `verifies`; its records are checked one by one.
    pub(crate) fn decode(buf: &[u8]) -> Result<LogBlock, DecodeError> {
        if !LogBlock::verifies(buf) {
            return Err(DecodeError::bad_value("log block", 0, "checksum or magic"));
        }
        let mut r = Reader::new(buf, "log block");
        let _magic = r.u64()?;
        let chain = r.u64()?;
        let seq = r.u64()?;
        let vdev = r.u32()?;
        let psize = r.u32()?;
        let offset = r.u64()?;
        let asize = r.u64()?;
        let payload = r.u32()? as usize;
        let count = r.u32()? as usize;
        let next = LogBlockAddr {
            dva: Dva {
                vdev,
                offset,
                asize,
            },
            psize,
        };
        if payload > capacity(buf.len()) || count > payload / RECORD_HEADER {
            return Err(DecodeError::bad_value(
                "log block",
                48,
                format!(
                    "{payload} payload bytes and {count} records in {} bytes",
                    buf.len()
                ),
            ));
        }
        let body = &buf[LOG_HEADER..LOG_HEADER + payload];
        let mut rr = Reader::new(body, "log block");
        let mut records = Vec::with_capacity(count);
        for _ in 0..count {
            records.push(Record::decode(&mut rr)?);
        }
        if !rr.is_at_end() {
            return Err(rr.err("bytes after the last record"));
        }
        Ok(LogBlock {
            chain,
            seq,
            next,
            records,
        })
    }
}

/// What the root block says of the log: the chain id and where its head block is.
///
/// ```text
///  the last LOG_HEAD_SIZE bytes of a version-4 root block with the log flag:
///   0  magic u32 "ILOG" | head psize u32
///   8  chain u64
///  16  head vdev u32 | 0 u32
///  24  head offset u64
///  32  head asize u64
///  40  zeros
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogHead {
    pub chain: u64,
    pub head: LogBlockAddr,
}

pub(crate) const LOG_HEAD_SIZE: usize = 64;
const LOG_HEAD_MAGIC: u32 = 0x474f_4c49; // "ILOG"

impl LogHead {
    pub(crate) fn encode(&self) -> [u8; LOG_HEAD_SIZE] {
        let mut w = Writer::new();
        w.u32(LOG_HEAD_MAGIC)
            .u32(self.head.psize)
            .u64(self.chain)
            .u32(self.head.dva.vdev)
            .u32(0)
            .u64(self.head.dva.offset)
            .u64(self.head.dva.asize);
        let mut out = [0u8; LOG_HEAD_SIZE];
        out[..w.buf.len()].copy_from_slice(&w.buf);
        out
    }

    pub(crate) fn decode(buf: &[u8]) -> Result<LogHead, DecodeError> {
        let mut r = Reader::new(buf, "log head");
        r.magic(&LOG_HEAD_MAGIC.to_le_bytes())?;
        let psize = r.u32()?;
        let chain = r.u64()?;
        let vdev = r.u32()?;
        let _ = r.u32()?;
        let offset = r.u64()?;
        let asize = r.u64()?;
        if !(LOG_HEADER..=MAX_LOG_BLOCK).contains(&(psize as usize)) || asize == 0 {
            return Err(DecodeError::bad_value(
                "log head",
                4,
                format!("head block of {psize} bytes, asize {asize}"),
            ));
        }
        Ok(LogHead {
            chain,
            head: LogBlockAddr {
                dva: Dva {
                    vdev,
                    offset,
                    asize,
                },
                psize,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> LogBlock {
        LogBlock {
            chain: 9,
            seq: 3,
            next: LogBlockAddr {
                dva: Dva {
                    vdev: 1,
                    offset: 8192,
                    asize: 12288,
                },
                psize: 8192,
            },
            records: vec![
                Record::Write {
                    object: 5,
                    offset: 4096,
                    data: vec![7; 100],
                },
                Record::Truncate { object: 6, size: 3 },
                Record::Punch {
                    object: 5,
                    offset: 0,
                    bytes: 512,
                },
                Record::WriteBlock {
                    object: 8,
                    offset: 1 << 20,
                    bytes: 1 << 17,
                    bp: BlockPointer::HOLE,
                },
                Record::Attr {
                    object: 5,
                    attrs: LoggedAttrs {
                        mode: 0o100644,
                        uid: 1000,
                        gid: 100,
                        atime_ns: 1,
                        mtime_ns: 1_700_000_000_123_456_789,
                        ctime_ns: u64::MAX,
                    },
                },
                Record::Create {
                    object: 12,
                    create: LoggedCreate {
                        parent: 4,
                        kind: ObjectKind::Symlink,
                        mode: 0o120777,
                        uid: 7,
                        gid: 8,
                        rdev: 0,
                        name: "läuft".into(),
                        target: b"../target".to_vec(),
                    },
                },
                Record::Rename {
                    object: 12,
                    rename: LoggedRename {
                        from_dir: 4,
                        from: "läuft".into(),
                        to_dir: 5,
                        to: "x".repeat(255),
                        mode: RenameMode::Exchange,
                    },
                },
                Record::Link {
                    object: 7,
                    dir: 5,
                    name: "second name".into(),
                },
                Record::Create {
                    object: 13,
                    create: LoggedCreate {
                        parent: 4,
                        kind: ObjectKind::Special,
                        mode: 0o020600,
                        uid: 0,
                        gid: 0,
                        rdev: 0x0801,
                        name: "sda1".into(),
                        target: Vec::new(),
                    },
                },
                Record::Remove {
                    object: 13,
                    dir: 4,
                    name: "sda1".into(),
                    rmdir: false,
                },
                Record::Remove {
                    object: 14,
                    dir: 4,
                    name: "empty dir".into(),
                    rmdir: true,
                },
                Record::Xattr {
                    object: 7,
                    xattr: LoggedXattr {
                        holder: 15,
                        name: "user.DOSATTRIB".into(),
                        value: Some(vec![0, 1, 2, 3]),
                    },
                },
                Record::Xattr {
                    object: 7,
                    xattr: LoggedXattr {
                        holder: 15,
                        name: "security.NTACL".into(),
                        value: None,
                    },
                },
            ],
        }
    }

    #[test]
    fn a_log_block_round_trips_and_any_flipped_bit_ends_the_chain() {
        let block = sample();
        let bytes = block.encode(8192);
        assert_eq!(bytes.len(), 8192);
        assert_eq!(LogBlock::decode(&bytes).unwrap(), block);
        for at in [0, 9, 30, 70, 100, 500, 8191] {
            let mut bad = bytes.clone();
            bad[at] ^= 1;
            assert!(LogBlock::decode(&bad).is_err(), "flip at {at} accepted");
        }
        // A torn block (only its first half written, over zeros).
        let mut full = block.clone();
        full.records.push(Record::Write {
            object: 1,
            offset: 0,
            data: vec![9; 6000],
        });
        let bytes = full.encode(8192);
        assert_eq!(LogBlock::decode(&bytes).unwrap(), full);
        let mut torn = vec![0u8; 8192];
        torn[..4096].copy_from_slice(&bytes[..4096]);
        assert!(LogBlock::decode(&torn).is_err());
    }

    #[test]
    fn the_log_head_round_trips_and_refuses_nonsense() {
        let head = LogHead {
            chain: 77,
            head: sample().next,
        };
        let bytes = head.encode();
        assert_eq!(LogHead::decode(&bytes).unwrap(), head);
        assert!(LogHead::decode(&[0u8; LOG_HEAD_SIZE]).is_err());
        let mut huge = bytes;
        huge[4..8].copy_from_slice(&(1u32 << 30).to_le_bytes());
        assert!(LogHead::decode(&huge).is_err());
    }

    #[test]
    fn record_lengths_are_what_encoding_writes() {
        for r in sample().records {
            let mut w = Writer::new();
            r.encode_into(&mut w);
            assert_eq!(w.buf.len(), r.len());
        }
    }

    /// A CREATE record that would make something `make_node` never made, and a RENAME with
    /// an empty name or an unknown mode, are refused.
    #[test]
    fn namespace_records_with_impossible_contents_are_refused() {
        let good = LoggedCreate {
            parent: 4,
            kind: ObjectKind::File,
            mode: 0o100644,
            uid: 1,
            gid: 2,
            rdev: 0,
            name: "f".into(),
            target: Vec::new(),
        };
        let decode = |c: &LoggedCreate| {
            let mut block = sample();
            block.records = vec![Record::Create {
                object: 9,
                create: c.clone(),
            }];
            LogBlock::decode(&block.encode(8192))
        };
        assert!(decode(&good).is_ok());
        let volume = LoggedCreate {
            kind: ObjectKind::Volume,
            ..good.clone()
        };
        let file_with_target = LoggedCreate {
            target: b"x".to_vec(),
            ..good.clone()
        };
        let no_name = LoggedCreate {
            name: String::new(),
            ..good.clone()
        };
        let long_name = LoggedCreate {
            name: "n".repeat(256),
            ..good.clone()
        };
        for (bad, why) in [
            (volume, "volume"),
            (file_with_target, "file with a target"),
            (no_name, "empty name"),
            (long_name, "256-byte name"),
        ] {
            assert!(decode(&bad).is_err(), "{why} accepted");
        }
        let mut block = sample();
        block.records = vec![Record::Create {
            object: 9,
            create: good,
        }];
        let mut bytes = block.encode(8192);
        let name_at = LOG_HEADER + RECORD_HEADER + CREATE_FIXED;
        bytes[name_at] = 0xff; // not UTF-8
        LogBlock::seal(&mut bytes);
        assert!(
            LogBlock::decode(&bytes).is_err(),
            "a name not UTF-8 accepted"
        );
        let rename = |mode, from: &str| Record::Rename {
            object: 9,
            rename: LoggedRename {
                from_dir: 1,
                from: from.into(),
                to_dir: 1,
                to: "t".into(),
                mode,
            },
        };
        block.records = vec![rename(RenameMode::NoReplace, "")];
        assert!(LogBlock::decode(&block.encode(8192)).is_err(), "empty name");
        block.records = vec![rename(RenameMode::NoReplace, "f")];
        let mut bytes = block.encode(8192);
        assert!(LogBlock::decode(&bytes).is_ok());
        bytes[LOG_HEADER + RECORD_HEADER + 16] = 3; // no such mode
        LogBlock::seal(&mut bytes);
        assert!(LogBlock::decode(&bytes).is_err(), "rename mode 3 accepted");
    }

    /// A REMOVE with an unknown rmdir flag, and an XATTR whose value is too long or is
    /// given for a removal, are refused.
    #[test]
    fn remove_and_xattr_records_with_impossible_contents_are_refused() {
        let encode = |r: Record| {
            let mut block = sample();
            block.records = vec![r];
            block.encode(8192)
        };
        let remove = Record::Remove {
            object: 9,
            dir: 1,
            name: "f".into(),
            rmdir: false,
        };
        let mut bytes = encode(remove);
        assert!(LogBlock::decode(&bytes).is_ok());
        bytes[LOG_HEADER + RECORD_HEADER + 8] = 2; // rmdir flag 2
        LogBlock::seal(&mut bytes);
        assert!(LogBlock::decode(&bytes).is_err(), "rmdir flag 2 accepted");

        let xattr = |value: Option<Vec<u8>>| Record::Xattr {
            object: 9,
            xattr: LoggedXattr {
                holder: 10,
                name: "user.x".into(),
                value,
            },
        };
        let huge = vec![1u8; XATTR_SIZE_MAX + 1];
        let mut block = sample();
        block.records = vec![xattr(Some(huge))];
        assert!(
            LogBlock::decode(&block.encode(MAX_LOG_BLOCK)).is_err(),
            "a value over XATTR_SIZE_MAX accepted"
        );
        let mut bytes = encode(xattr(Some(b"v".to_vec())));
        assert!(LogBlock::decode(&bytes).is_ok());
        bytes[LOG_HEADER + RECORD_HEADER + 8] = 0; // a removal that carries a value
        LogBlock::seal(&mut bytes);
        assert!(LogBlock::decode(&bytes).is_err(), "a removal with a value");
        assert_eq!(
            LogBlock::decode(&encode(xattr(None))).unwrap().records,
            vec![xattr(None)]
        );
    }

    proptest::proptest! {
        #[test]
        fn log_block_decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let _ = LogBlock::decode(&bytes);
            let _ = LogHead::decode(&bytes);
        }

        /// Blocks whose checksum holds but whose fields are junk (a buggy or hostile
        /// writer): the decoder must still refuse them without panicking.
        #[test]
        fn checksummed_junk_never_panics(junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let mut buf = vec![0u8; 4096];
            buf[..8].copy_from_slice(&LOG_MAGIC.to_le_bytes());
            let n = junk.len().min(4096 - 8);
            buf[8..8 + n].copy_from_slice(&junk[..n]);
            buf[CHECKSUM_AT..LOG_HEADER].fill(0);
            let sum = blake3::hash(&buf);
            buf[CHECKSUM_AT..LOG_HEADER].copy_from_slice(sum.as_bytes());
            let _ = LogBlock::decode(&buf);
        }
    }
}
