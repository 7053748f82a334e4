//! The root block: what an uberblock points to, the top of every txg's tree.
//!
//! ```text
//!  offset  size  field
//!       0     8  magic "CAIRNOS1" (ROOT_MAGIC)
//!       8     4  version (1; 2 when the pool has snapshots, see `crate::snapshot`; 3 when
//!                it has clones, see `crate::clone`; 4 when the intent log is in use)
//!      12     4  version 4: feature flags (1 snapshots, 2 clones, 4 intent log, 8 log
//!                records of kind ATTR may be in the chain, 16 promoted snapshots: the
//!                snapshot section is "SNP2", 32 ATTR records may name directories,
//!                symbolic links and special files, 64 CREATE records may be in the
//!                chain, 128 RENAME and LINK records may be, 256 REMOVE and XATTR
//!                records may be); else 0
//!      16     8  txg
//!      24     8  next object id
//!      32   256  object-table dnode (DNODE_SIZE)
//!     288     8  space map length in bytes
//!     296     8  n = space map chunk pointers (≤ MAX_SPACE_MAP_CHUNKS)
//!     304 n×128  space map chunk block pointers
//!       …        error log (decode_error_log), then zeros
//!  16320    64  version 4 with the log flag: the intent log's head (`LogHead`,
//!                `crate::intent_format`); the block ends at ROOT_BLOCK_SIZE (16 KiB)
//! ```
//! Written uncompressed, blake3-checksummed, with one more copy than other metadata.

use std::collections::BTreeMap;

use cairn_pool::io::bp::{BlockPointer, BP_SIZE};

use crate::codec::{DecodeError, Reader, Writer};
use crate::dnode::{Dnode, DNODE_SIZE};
use crate::error::StoreError;
use crate::intent_format::{LogHead, LOG_HEAD_SIZE};

pub(crate) const ROOT_MAGIC: u64 = 0x3153_4f4e_5249_4143; // "CAIRNOS1"
/// The root block holds the object-table dnode and up to `MAX_SPACE_MAP_CHUNKS` pointers.
pub(crate) const ROOT_BLOCK_SIZE: usize = 16 << 10;
/// Most space map chunks a root block points to.
pub(crate) const MAX_SPACE_MAP_CHUNKS: usize = 120;
/// Error log in the root block: header and entry sizes (see `decode_error_log`).
const ERRLOG_MAGIC: u32 = 0x474f_4c45; // "ELOG"
const ERRLOG_HEADER: usize = 16;
const ERRLOG_ENTRY: usize = 20;

/// The decoded root block.
pub(crate) struct RootBlock {
    pub(crate) txg: u64,
    pub(crate) next_object: u64,
    pub(crate) meta: Dnode,
    pub(crate) space_map_len: u64,
    pub(crate) space_map_bps: Vec<BlockPointer>,
    /// The error log (see `decode_error_log`) and how many entries did not fit.
    pub(crate) damaged: BTreeMap<(u32, u64), u64>,
    pub(crate) damaged_unlisted: u64,
    /// The pool has snapshots: written as version 2, which older cairn builds refuse
    /// (they would free the blocks snapshots keep).
    pub(crate) snapshots: bool,
    /// The pool has clones: version 3, which builds without clones refuse (they would free
    /// the origin's blocks a clone stops using).
    pub(crate) clones: bool,
    /// The intent log's chain for the txg after this one (`crate::intent_log`): version 4,
    /// which builds without the log refuse (they would drop acknowledged writes).
    pub(crate) log: Option<LogHead>,
    /// A snapshot came to its dataset by `promote` (`crate::promote`): the dataset table's
    /// snapshot section records roots ("SNP2"), which builds without promote cannot read.
    pub(crate) promoted: bool,
}

/// Root block versions: 1, 2 (snapshots in use), 3 (clones in use), 4 (feature flags at
/// byte 12; written only when the intent log is in use, so other pools stay readable by
/// older builds).
pub(crate) const ROOT_VERSION: u32 = 1;
pub(crate) const ROOT_VERSION_SNAPSHOTS: u32 = 2;
pub(crate) const ROOT_VERSION_CLONES: u32 = 3;
pub(crate) const ROOT_VERSION_FLAGS: u32 = 4;
const FLAG_SNAPSHOTS: u32 = 1;
const FLAG_CLONES: u32 = 2;
const FLAG_LOG: u32 = 4;
/// The log chain may hold ATTR records (`crate::intent_format`). Set with every log head:
/// a build that knows the log but not ATTR would end the chain at such a record and drop
/// the acknowledged writes after it; the unknown flag makes it refuse the pool instead.
/// A log head without it (written before ATTR) still imports.
const FLAG_LOG_ATTR: u32 = 8;
/// Some snapshot shows another dataset's objects (see `RootBlock::promoted`).
const FLAG_PROMOTED: u32 = 16;
/// ATTR records of the chain may name directories, symbolic links and special files. Set
/// with every log head: a build that logs only files' attributes would skip those records
/// at replay and lose the acknowledged changes; the unknown flag makes it refuse the pool.
const FLAG_LOG_ATTR_ANY: u32 = 32;
/// The chain may hold CREATE records (`crate::intent_format`). Set with every log head: a
/// build without them would end the chain at one and drop the acknowledged changes after
/// it; the unknown flag makes it refuse the pool instead.
const FLAG_LOG_CREATE: u32 = 64;
/// The chain may hold RENAME and LINK records (as `FLAG_LOG_CREATE`).
const FLAG_LOG_RENAME: u32 = 128;
/// The chain may hold REMOVE and XATTR records (as `FLAG_LOG_CREATE`).
const FLAG_LOG_REMOVE: u32 = 256;
/// Every flag a log head is written with.
const FLAGS_LOG: u32 = FLAG_LOG
    | FLAG_LOG_ATTR
    | FLAG_LOG_ATTR_ANY
    | FLAG_LOG_CREATE
    | FLAG_LOG_RENAME
    | FLAG_LOG_REMOVE;
/// Where the log head is: the end of the block.
const LOG_HEAD_AT: usize = ROOT_BLOCK_SIZE - LOG_HEAD_SIZE;

impl RootBlock {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let flags = u32::from(self.snapshots) * FLAG_SNAPSHOTS
            + u32::from(self.clones) * FLAG_CLONES
            + u32::from(self.log.is_some()) * FLAGS_LOG
            + u32::from(self.promoted) * FLAG_PROMOTED;
        let with_flags = self.log.is_some() || self.promoted;
        let (version, flags) = match (with_flags, self.clones, self.snapshots) {
            (true, _, _) => (ROOT_VERSION_FLAGS, flags),
            (false, true, _) => (ROOT_VERSION_CLONES, 0),
            (false, false, true) => (ROOT_VERSION_SNAPSHOTS, 0),
            (false, false, false) => (ROOT_VERSION, 0),
        };
        w.u64(ROOT_MAGIC)
            .u32(version)
            .u32(flags)
            .u64(self.txg)
            .u64(self.next_object);
        let mut d = [0u8; DNODE_SIZE];
        self.meta.encode(&mut d);
        w.buf.extend_from_slice(&d);
        w.u64(self.space_map_len)
            .u64(self.space_map_bps.len() as u64);
        for bp in &self.space_map_bps {
            w.buf.extend_from_slice(&bp.to_bytes());
        }
        // The error log fills the rest of the block; entries beyond it are only counted.
        let room = (LOG_HEAD_AT - w.buf.len() - ERRLOG_HEADER) / ERRLOG_ENTRY;
        let listed = self.damaged.len().min(room);
        let unlisted = self.damaged_unlisted + (self.damaged.len() - listed) as u64;
        w.u32(ERRLOG_MAGIC).u32(listed as u32).u64(unlisted);
        for (&(ds, obj), &seen) in self.damaged.iter().take(listed) {
            w.u32(ds).u64(obj).u64(seen);
        }
        assert!(w.buf.len() <= LOG_HEAD_AT, "root block overflows");
        w.buf.resize(LOG_HEAD_AT, 0);
        match &self.log {
            Some(head) => w.buf.extend_from_slice(&head.encode()),
            None => w.buf.resize(ROOT_BLOCK_SIZE, 0),
        }
        w.buf
    }

    /// Decodes a root block: damage is corrupt metadata, a newer magic digit, version or
    /// feature flag "upgrade cairn" (`StoreError::NewerFormat`).
    pub(crate) fn decode(buf: &[u8]) -> Result<RootBlock, StoreError> {
        let corrupt = |e: DecodeError| StoreError::corrupt("root block", e);
        let mut r = Reader::new(buf, "root block");
        r.magic(&ROOT_MAGIC.to_le_bytes()).map_err(corrupt)?;
        let version = r
            .version(ROOT_VERSION, ROOT_VERSION_FLAGS)
            .map_err(corrupt)?;
        let flags = match version {
            ROOT_VERSION_FLAGS => r.u32().map_err(corrupt)?,
            v => {
                let _ = r.u32().map_err(corrupt)?;
                u32::from(v >= ROOT_VERSION_SNAPSHOTS) * FLAG_SNAPSHOTS
                    + u32::from(v >= ROOT_VERSION_CLONES) * FLAG_CLONES
            }
        };
        let known = FLAG_SNAPSHOTS | FLAG_CLONES | FLAGS_LOG | FLAG_PROMOTED;
        if flags & !known != 0 {
            return Err(StoreError::NewerFormat(format!(
                "root block feature flags {flags:#x}"
            )));
        }
        let txg = r.u64().map_err(corrupt)?;
        let next_object = r.u64().map_err(corrupt)?;
        let meta = r.nested(DNODE_SIZE, Dnode::decode).map_err(corrupt)?;
        let space_map_len = r.u64().map_err(corrupt)?;
        let n = r.u64().map_err(corrupt)? as usize;
        if n > MAX_SPACE_MAP_CHUNKS {
            return Err(StoreError::corrupt(
                "root block",
                format!("{n} space map chunks (at most {MAX_SPACE_MAP_CHUNKS})"),
            ));
        }
        let mut space_map_bps = Vec::with_capacity(n);
        for _ in 0..n {
            space_map_bps.push(r.nested(BP_SIZE, BlockPointer::decode).map_err(corrupt)?);
        }
        let at = r.position();
        let (damaged, damaged_unlisted) =
            decode_error_log(&buf[at..]).map_err(|e| corrupt(e.within("root block", at)))?;
        let log = match flags & FLAG_LOG {
            0 => None,
            _ => Some(
                LogHead::decode(buf.get(LOG_HEAD_AT..).unwrap_or(&[]))
                    .map_err(|e| corrupt(e.within("root block", LOG_HEAD_AT)))?,
            ),
        };
        Ok(RootBlock {
            txg,
            next_object,
            meta,
            space_map_len,
            space_map_bps,
            damaged,
            damaged_unlisted,
            snapshots: flags & FLAG_SNAPSHOTS != 0,
            clones: flags & FLAG_CLONES != 0,
            log,
            promoted: flags & FLAG_PROMOTED != 0,
        })
    }
}

/// The error log after the space map pointers of a root block (ZFS keeps its errlog in
/// the MOS; ours must fit in the root block, so entries beyond its room are only counted).
/// Root blocks written before the log existed hold zeros there: an empty log.
///
/// ```text
///  u32 magic "ELOG" | u32 listed | u64 unlisted | listed × (u32 dataset, u64 object, u64 txg)
/// ```
type ErrorLogEntries = BTreeMap<(u32, u64), u64>;

fn decode_error_log(buf: &[u8]) -> Result<(ErrorLogEntries, u64), DecodeError> {
    let mut r = Reader::new(buf, "error log");
    let mut log = BTreeMap::new();
    match r.u32()? {
        0 => return Ok((log, 0)),
        ERRLOG_MAGIC => {}
        other => return Err(r.err(format!("bad magic {other:#x}"))),
    }
    let listed = r.u32()? as usize;
    let unlisted = r.u64()?;
    if listed > buf.len() / ERRLOG_ENTRY {
        return Err(r.err(format!("{listed} entries in {} bytes", buf.len())));
    }
    for _ in 0..listed {
        let key = (r.u32()?, r.u64()?);
        log.insert(key, r.u64()?);
    }
    Ok((log, unlisted))
}

/// Decodes a root block from arbitrary bytes and drops it (the fuzz target's entry: the
/// decoder itself stays private to the store).
#[doc(hidden)]
pub fn fuzz_decode(bytes: &[u8]) {
    let _ = RootBlock::decode(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dnode::{ObjectKind, DNODE_BLOCK_SIZE};

    fn root_with(chunks: usize, damaged: usize) -> RootBlock {
        RootBlock {
            txg: 7,
            next_object: 42,
            meta: Dnode::new(ObjectKind::Table, 0, DNODE_BLOCK_SIZE, 1),
            space_map_len: 100,
            space_map_bps: vec![BlockPointer::HOLE; chunks],
            damaged: (0..damaged as u64).map(|i| ((1, i + 2), 5 + i)).collect(),
            damaged_unlisted: 0,
            snapshots: false,
            clones: false,
            log: None,
            promoted: false,
        }
    }

    #[test]
    fn versions_say_snapshots_and_a_newer_one_asks_for_an_upgrade() {
        let mut root = root_with(1, 0);
        assert!(!RootBlock::decode(&root.encode()).unwrap().snapshots);
        root.snapshots = true;
        let bytes = root.encode();
        assert_eq!(bytes[8], ROOT_VERSION_SNAPSHOTS as u8);
        assert!(RootBlock::decode(&bytes).unwrap().snapshots);
        root.clones = true;
        let bytes = root.encode();
        assert_eq!(bytes[8], ROOT_VERSION_CLONES as u8);
        let back = RootBlock::decode(&bytes).unwrap();
        assert!(back.snapshots && back.clones);
        let mut newer = bytes.clone();
        newer[8] = 5;
        let e = RootBlock::decode(&newer)
            .err()
            .expect("version 5 is refused");
        assert!(e.to_string().contains("upgrade cairn"), "{e}");
        let mut newer_magic = bytes.clone();
        newer_magic[7] = b'2';
        let e = RootBlock::decode(&newer_magic)
            .err()
            .expect("CAIRNOS2 is refused");
        assert!(matches!(e, StoreError::NewerFormat(_)), "{e}");
        assert!(e.to_string().contains("upgrade cairn"), "{e}");
        let mut zero = bytes.clone();
        zero[8] = 0;
        let e = RootBlock::decode(&zero).err().expect("version 0");
        assert!(e.is_corrupt(), "{e}");
        let mut unknown_flag = bytes.clone();
        unknown_flag[8] = 4;
        unknown_flag[13] = 2; // flag 512
        assert!(RootBlock::decode(&unknown_flag).is_err());
    }

    #[test]
    fn a_log_head_makes_version_4_with_flags_and_round_trips() {
        use crate::intent_format::LogBlockAddr;
        let mut root = root_with(2, 3);
        root.snapshots = true;
        root.log = Some(LogHead {
            chain: 0xfeed,
            head: LogBlockAddr {
                dva: cairn_pool::io::bp::Dva {
                    vdev: 0,
                    offset: 1 << 20,
                    asize: 12288,
                },
                psize: 8192,
            },
        });
        let bytes = root.encode();
        assert_eq!(bytes.len(), ROOT_BLOCK_SIZE);
        assert_eq!(bytes[8], ROOT_VERSION_FLAGS as u8);
        let flags = |b: &[u8]| u32::from_le_bytes(b[12..16].try_into().unwrap());
        assert_eq!(flags(&bytes), FLAG_SNAPSHOTS | FLAGS_LOG);
        assert_eq!(FLAGS_LOG, 4 | 8 | 32 | 64 | 128 | 256);
        let back = RootBlock::decode(&bytes).unwrap();
        assert_eq!(back.log, root.log);
        // A log head written before REMOVE records (no flag 256), before RENAME records
        // (no flag 128), before CREATE records (no flag 64), before ATTR records of
        // directories (no flag 32), or before ATTR records at all (no flag 8), still
        // imports.
        let mut before_remove = bytes.clone();
        before_remove[13] = 0;
        assert_eq!(
            flags(&before_remove),
            FLAG_SNAPSHOTS | FLAGS_LOG & !FLAG_LOG_REMOVE
        );
        assert_eq!(RootBlock::decode(&before_remove).unwrap().log, root.log);
        let mut before_rename = before_remove.clone();
        before_rename[12] &= !(FLAG_LOG_RENAME as u8);
        assert_eq!(RootBlock::decode(&before_rename).unwrap().log, root.log);
        let mut before_create = before_remove.clone();
        before_create[12] &= !((FLAG_LOG_CREATE | FLAG_LOG_RENAME) as u8);
        assert_eq!(RootBlock::decode(&before_create).unwrap().log, root.log);
        let mut files_only = before_remove.clone();
        files_only[12] = (FLAG_SNAPSHOTS | FLAG_LOG | FLAG_LOG_ATTR) as u8;
        assert_eq!(RootBlock::decode(&files_only).unwrap().log, root.log);
        let mut before_attr = before_remove.clone();
        before_attr[12] = (FLAG_SNAPSHOTS | FLAG_LOG) as u8;
        assert_eq!(RootBlock::decode(&before_attr).unwrap().log, root.log);
        assert!(back.snapshots && !back.clones);
        assert_eq!(back.damaged, root.damaged);
        root.log = None;
        let back = RootBlock::decode(&root.encode()).unwrap();
        assert!(back.log.is_none() && back.snapshots);
    }

    #[test]
    fn promoted_snapshots_make_version_4_with_their_flag() {
        let mut root = root_with(1, 0);
        root.snapshots = true;
        root.clones = true;
        root.promoted = true;
        let bytes = root.encode();
        assert_eq!(bytes[8], ROOT_VERSION_FLAGS as u8);
        assert_eq!(
            bytes[12] as u32,
            FLAG_SNAPSHOTS | FLAG_CLONES | FLAG_PROMOTED
        );
        let back = RootBlock::decode(&bytes).unwrap();
        assert!(back.promoted && back.clones && back.log.is_none());
        root.promoted = false;
        assert_eq!(root.encode()[8], ROOT_VERSION_CLONES as u8);
    }

    #[test]
    fn error_log_round_trips_in_the_root_block() {
        let root = root_with(3, 10);
        let back = RootBlock::decode(&root.encode()).unwrap();
        assert_eq!(back.damaged, root.damaged);
        assert_eq!(back.damaged_unlisted, 0);
        assert_eq!(back.space_map_bps.len(), 3);
    }

    #[test]
    fn a_full_error_log_counts_what_it_cannot_name() {
        // With every space-map chunk in use, the log has the least room.
        let root = root_with(MAX_SPACE_MAP_CHUNKS, 5000);
        let back = RootBlock::decode(&root.encode()).unwrap();
        assert!(!back.damaged.is_empty() && back.damaged.len() < 5000);
        assert_eq!(back.damaged.len() as u64 + back.damaged_unlisted, 5000);
    }

    #[test]
    fn a_root_block_from_before_the_error_log_has_an_empty_log() {
        let mut bytes = root_with(2, 0).encode();
        let at = 32 + DNODE_SIZE + 16 + 2 * BP_SIZE;
        bytes[at..].fill(0);
        let back = RootBlock::decode(&bytes).unwrap();
        assert!(back.damaged.is_empty());
    }

    proptest::proptest! {
        #[test]
        fn error_log_decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = decode_error_log(&bytes);
        }

        #[test]
        fn damaged_root_block_never_panics(at in 0usize..ROOT_BLOCK_SIZE, junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..64)) {
            let mut bytes = root_with(2, 30).encode();
            let end = (at + junk.len()).min(bytes.len());
            bytes[at..end].copy_from_slice(&junk[..end - at]);
            let _ = RootBlock::decode(&bytes);
        }
    }
}
