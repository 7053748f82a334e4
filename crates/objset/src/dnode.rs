//! Dnodes: the fixed-size descriptor of an object (file, directory, volume, table).
//!
//! ```text
//!  Dnode (256 bytes, little-endian)
//!  0   kind u8 | levels u8 | 2 B zero | dataset u32
//!  8   block_size u32 | 4 B zero
//!  16  size u64          logical bytes
//!  24  used u64          space charged (zfs list units: asize × deflate / 512)
//!  32  logical u64       Σ lsize of its blocks (compressratio numerator)
//!  40  physical u64      Σ psize of its blocks
//!  48  mtime_ns u64 | 56 ctime_ns u64
//!  64  mode u32 | uid u32 | gid u32 | nlink u32
//!  80  atime_ns u64      (0 in pools written before file systems were mounted)
//!  88  rdev u64          device number of a block or character device node
//!  96  xattr u64         object holding the extended attributes (0: none)
//!  104 created_txg u64   txg that created the object (0 in pools written before snapshots:
//!                        such an object counts as older than every snapshot)
//!  112 16 B reserved (zero)
//!  128 root block pointer (128 B)
//! ```
//! `levels` counts the data level: 1 = the root pointer is the (only) data block; each
//! level above holds indirect blocks of `BPS_PER_INDIRECT` pointers.

use cairn_pool::io::bp::{BlockPointer, BP_SIZE};

use crate::codec::{DecodeError, Reader};

pub const DNODE_SIZE: usize = 256;
/// Block pointers per indirect block (16 KiB logical).
pub const BPS_PER_INDIRECT_SHIFT: u32 = 7;
pub const BPS_PER_INDIRECT: usize = 1 << BPS_PER_INDIRECT_SHIFT;
pub const INDIRECT_BLOCK_SIZE: usize = BPS_PER_INDIRECT * BP_SIZE;
/// Dnodes per block of the object table.
pub const DNODES_PER_BLOCK: u64 = 64;
pub const DNODE_BLOCK_SIZE: u32 = (DNODES_PER_BLOCK as usize * DNODE_SIZE) as u32;
pub const MAX_LEVELS: u8 = 10;

/// What an object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ObjectKind {
    Free = 0,
    File = 1,
    Directory = 2,
    Volume = 3,
    /// Pool-internal tables (dataset table, object table).
    Table = 4,
    /// A symbolic link: its data is the target.
    Symlink = 5,
    /// A FIFO, socket or device node: what it is, is in `mode`'s file-type bits.
    Special = 6,
    /// The extended attributes of one object (`crate::xattr`).
    Xattrs = 7,
}

/// A node to create (`posix::make_node`).
#[derive(Clone, Copy, Debug)]
pub struct NewNode {
    pub kind: ObjectKind,
    /// Permission bits and file type (`S_IF*`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
}

impl ObjectKind {
    /// The kind as `cairn ls`, `stat` and error messages name it.
    pub fn name(self) -> &'static str {
        match self {
            ObjectKind::File => "file",
            ObjectKind::Directory => "dir",
            ObjectKind::Volume => "volume",
            ObjectKind::Table => "table",
            ObjectKind::Free => "free",
            ObjectKind::Symlink => "symlink",
            ObjectKind::Special => "special",
            ObjectKind::Xattrs => "xattrs",
        }
    }

    pub(crate) fn from_u8(v: u8) -> Option<ObjectKind> {
        Some(match v {
            0 => ObjectKind::Free,
            1 => ObjectKind::File,
            2 => ObjectKind::Directory,
            3 => ObjectKind::Volume,
            4 => ObjectKind::Table,
            5 => ObjectKind::Symlink,
            6 => ObjectKind::Special,
            7 => ObjectKind::Xattrs,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dnode {
    pub kind: ObjectKind,
    pub levels: u8,
    pub dataset: u32,
    pub block_size: u32,
    pub size: u64,
    pub used: u64,
    pub logical: u64,
    pub physical: u64,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub atime_ns: u64,
    pub rdev: u64,
    pub xattr: u64,
    /// The txg that created the object (a snapshot shows only objects created at or before
    /// its txg; `crate::snapshot`).
    pub created_txg: u64,
    pub root: BlockPointer,
}

impl Dnode {
    pub fn new(kind: ObjectKind, dataset: u32, block_size: u32, now_ns: u64) -> Dnode {
        Dnode {
            kind,
            levels: 1,
            dataset,
            block_size,
            size: 0,
            used: 0,
            logical: 0,
            physical: 0,
            mtime_ns: now_ns,
            ctime_ns: now_ns,
            mode: 0,
            uid: 0,
            gid: 0,
            nlink: 1,
            atime_ns: now_ns,
            rdev: 0,
            xattr: 0,
            created_txg: 0,
            root: BlockPointer::HOLE,
        }
    }

    pub const FREE: Dnode = Dnode {
        kind: ObjectKind::Free,
        levels: 1,
        dataset: 0,
        block_size: 0,
        size: 0,
        used: 0,
        logical: 0,
        physical: 0,
        mtime_ns: 0,
        ctime_ns: 0,
        mode: 0,
        uid: 0,
        gid: 0,
        nlink: 0,
        atime_ns: 0,
        rdev: 0,
        xattr: 0,
        created_txg: 0,
        root: BlockPointer::HOLE,
    };

    pub fn encode(&self, out: &mut [u8]) {
        assert!(out.len() >= DNODE_SIZE);
        let out = &mut out[..DNODE_SIZE];
        out.fill(0);
        if self.kind == ObjectKind::Free {
            return;
        }
        out[0] = self.kind as u8;
        out[1] = self.levels;
        out[4..8].copy_from_slice(&self.dataset.to_le_bytes());
        out[8..12].copy_from_slice(&self.block_size.to_le_bytes());
        let put =
            |out: &mut [u8], o: usize, v: u64| out[o..o + 8].copy_from_slice(&v.to_le_bytes());
        put(out, 16, self.size);
        put(out, 24, self.used);
        put(out, 32, self.logical);
        put(out, 40, self.physical);
        put(out, 48, self.mtime_ns);
        put(out, 56, self.ctime_ns);
        out[64..68].copy_from_slice(&self.mode.to_le_bytes());
        out[68..72].copy_from_slice(&self.uid.to_le_bytes());
        out[72..76].copy_from_slice(&self.gid.to_le_bytes());
        out[76..80].copy_from_slice(&self.nlink.to_le_bytes());
        put(out, 80, self.atime_ns);
        put(out, 88, self.rdev);
        put(out, 96, self.xattr);
        put(out, 104, self.created_txg);
        self.root.encode(&mut out[128..256]);
    }

    /// Decodes a dnode; errors say which field, at which byte of the dnode, is damaged.
    pub fn decode(buf: &[u8]) -> Result<Dnode, DecodeError> {
        const WHAT: &str = "dnode";
        if buf.len() < DNODE_SIZE {
            return Err(DecodeError::truncated(
                WHAT,
                buf.len(),
                format!("{} bytes of {DNODE_SIZE}", buf.len()),
            ));
        }
        let mut r = Reader::new(&buf[..DNODE_SIZE], WHAT);
        let k = r.u8()?;
        let kind = ObjectKind::from_u8(k)
            .ok_or_else(|| DecodeError::bad_value(WHAT, 0, format!("kind {k}")))?;
        if kind == ObjectKind::Free {
            return Ok(Dnode::FREE);
        }
        let levels = r.u8()?;
        if levels == 0 || levels > MAX_LEVELS {
            return Err(DecodeError::bad_value(WHAT, 1, format!("{levels} levels")));
        }
        let _zero = r.u16()?;
        let dataset = r.u32()?;
        let block_size = r.u32()?;
        if !(512..=(1 << 20)).contains(&block_size) || block_size % 512 != 0 {
            return Err(DecodeError::bad_value(
                WHAT,
                8,
                format!("block size {block_size}"),
            ));
        }
        let _zero = r.u32()?;
        let mut d = Dnode {
            kind,
            levels,
            dataset,
            block_size,
            size: r.u64()?,
            used: r.u64()?,
            logical: r.u64()?,
            physical: r.u64()?,
            mtime_ns: r.u64()?,
            ctime_ns: r.u64()?,
            mode: r.u32()?,
            uid: r.u32()?,
            gid: r.u32()?,
            nlink: r.u32()?,
            atime_ns: r.u64()?,
            rdev: r.u64()?,
            xattr: r.u64()?,
            created_txg: r.u64()?,
            root: BlockPointer::HOLE,
        };
        let _reserved = r.fixed(16)?;
        d.root = r.nested(BP_SIZE, BlockPointer::decode)?;
        Ok(d)
    }

    /// Number of data blocks the object's size covers.
    pub fn block_count(&self) -> u64 {
        self.size.div_ceil(u64::from(self.block_size))
    }
}

/// Levels needed to address blocks `0..nblocks`.
pub fn levels_for(nblocks: u64) -> u8 {
    let mut levels = 1u8;
    let mut span = 1u64;
    while span < nblocks {
        span = span.saturating_mul(BPS_PER_INDIRECT as u64);
        levels += 1;
    }
    levels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_levels() {
        let mut d = Dnode::new(ObjectKind::File, 3, 131072, 99);
        d.size = 12345;
        d.mode = 0o100644;
        d.atime_ns = 7;
        d.rdev = 0x0801;
        d.xattr = 42;
        let mut b = [0u8; DNODE_SIZE];
        d.encode(&mut b);
        assert_eq!(Dnode::decode(&b).unwrap(), d);
        assert_eq!(
            Dnode::decode(&[0u8; DNODE_SIZE]).unwrap().kind,
            ObjectKind::Free
        );
        assert_eq!(levels_for(0), 1);
        assert_eq!(levels_for(1), 1);
        assert_eq!(levels_for(2), 2);
        assert_eq!(levels_for(128), 2);
        assert_eq!(levels_for(129), 3);
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = Dnode::decode(&bytes);
        }
    }
}
