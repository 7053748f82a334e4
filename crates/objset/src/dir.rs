//! Directories: a map from names to objects, stored as the directory object's data, in one
//! of two formats (docs/format.md, "Directories (DIR1, DIR2)").
//!
//! - **DIR1** (here): the whole directory as one sorted list. Used while its encoding fits
//!   in one directory block (`DIR_BLOCK`, 16 KiB: some 500 names of 20 bytes); changed in
//!   memory and rewritten whole at the txg sync, which costs at most that one block.
//! - **DIR2** (`crate::dir2`): hashed (extendible hashing), for directories that outgrew
//!   one block. Each operation reads and dirties O(1) blocks; a sync writes only the
//!   blocks that changed.
//!
//! ```text
//!  DIR1:  magic u32 "DIR1" | count u64 | (name str, object u64, kind u8)…   sorted by name
//!         (str = length u32 | UTF-8 bytes; an empty object is an empty directory)
//! ```
//! A directory becomes DIR2 when a change makes its DIR1 encoding larger than one block
//! (`crate::dircache`); it never goes back (an emptied DIR2 directory stays DIR2).

use std::collections::BTreeMap;

use crate::codec::{DecodeError, Reader, Writer};
use crate::dnode::ObjectKind;

const DIR_MAGIC: u32 = 0x3152_4944; // "DIR1"

/// Longest file name, in bytes (as Linux's NAME_MAX); `posix` refuses longer ones.
pub const NAME_MAX: usize = 255;
/// Longest extended attribute name and value, in bytes (Linux's XATTR_NAME_MAX and
/// XATTR_SIZE_MAX, beside NAME_MAX in linux/limits.h); `crate::xattr` refuses longer ones.
pub const XATTR_NAME_MAX: usize = 255;
pub const XATTR_SIZE_MAX: usize = 64 << 10;

/// How a rename treats an existing target (Linux renameat2 flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RenameMode {
    Replace = 0,
    NoReplace = 1,
    Exchange = 2,
}

impl RenameMode {
    pub(crate) fn from_u8(v: u8) -> Option<RenameMode> {
        Some(match v {
            0 => RenameMode::Replace,
            1 => RenameMode::NoReplace,
            2 => RenameMode::Exchange,
            _ => return None,
        })
    }
}

/// Block size of directory objects (DIR2 needs it; a DIR1 directory in an object of
/// another block size stays DIR1).
pub const DIR_BLOCK: usize = 16 << 10;

/// Bytes of the DIR1 header (magic, count).
pub const DIR1_HEADER: usize = 12;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub object: u64,
    pub kind: ObjectKind,
}

/// The kind of an entry from its byte on disk (only what a directory may name).
pub(crate) fn entry_kind(b: u8) -> Option<ObjectKind> {
    match b {
        1 => Some(ObjectKind::File),
        2 => Some(ObjectKind::Directory),
        5 => Some(ObjectKind::Symlink),
        6 => Some(ObjectKind::Special),
        _ => None,
    }
}

/// Bytes one entry takes in DIR1.
pub fn dir1_entry_len(name: &str) -> usize {
    4 + name.len() + 8 + 1
}

/// How a directory is stored, and what the next sync writes of it (`StoreCore::dir_stats`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirStats {
    /// DIR2 (hashed) rather than DIR1 (one sorted list).
    pub hashed: bool,
    pub entries: u64,
    /// DIR2 leaves (0 for DIR1).
    pub leaves: u64,
    /// Blocks in use: DIR2's next block id, DIR1's encoded size in blocks.
    pub blocks: u64,
    /// Blocks the next sync writes for it (DIR1: all of them if it changed).
    pub dirty_blocks: u64,
    /// DIR2 leaves held in memory.
    pub cached_leaves: u64,
    /// The directory object's size as the open txg sees it.
    pub object_size: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Directory {
    pub entries: BTreeMap<String, DirEntry>,
}

impl Directory {
    /// Bytes `encode` returns.
    pub fn encoded_len(&self) -> usize {
        DIR1_HEADER
            + self
                .entries
                .keys()
                .map(|n| dir1_entry_len(n))
                .sum::<usize>()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u32(DIR_MAGIC).u64(self.entries.len() as u64);
        for (name, e) in &self.entries {
            w.str(name).u64(e.object).u8(e.kind as u8);
        }
        w.buf
    }

    pub fn decode(buf: &[u8]) -> Result<Directory, DecodeError> {
        let mut r = Reader::new(buf, "directory");
        if buf.is_empty() {
            return Ok(Directory::default());
        }
        r.magic(&DIR_MAGIC.to_le_bytes())?;
        let n = r.count(13)?;
        let mut entries = BTreeMap::new();
        for _ in 0..n {
            let name = r.str()?;
            let object = r.u64()?;
            let k = r.u8()?;
            let kind = entry_kind(k).ok_or_else(|| r.err(format!("entry kind {k}")))?;
            if name.is_empty() || name.contains('/') {
                return Err(r.err(format!("bad entry name {name:?}")));
            }
            entries.insert(name, DirEntry { object, kind });
        }
        Ok(Directory { entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut d = Directory::default();
        d.entries.insert(
            "a.txt".into(),
            DirEntry {
                object: 5,
                kind: ObjectKind::File,
            },
        );
        d.entries.insert(
            "sub".into(),
            DirEntry {
                object: 9,
                kind: ObjectKind::Directory,
            },
        );
        assert_eq!(d.encoded_len(), d.encode().len());
        assert_eq!(Directory::decode(&d.encode()).unwrap(), d);
        assert!(Directory::decode(&[1, 2, 3]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = Directory::decode(&bytes);
        }
    }
}
