//! Block pointers: how every block in the pool is found and verified.
//!
//! ```text
//!  BlockPointer (128 bytes, little-endian)
//!  0   DVA 0: vdev u32 | reserved u32 | offset u64 | asize u64      (24 B)
//!  24  DVA 1                                                          (24 B)
//!  48  DVA 2                                                          (24 B)
//!  72  lsize u32 | psize u32                                          logical / physical bytes
//!  80  compression u8 | checksum u8 | kind u8 | level u8 | 4 B zero
//!  88  birth txg u64
//!  96  checksum of the physical bytes (256 bits)
//! ```
//! A DVA with asize 0 is unused; a pointer whose birth txg is 0 is a hole (no block: reads
//! as zeros). Parents hold their children's checksums, so the tree under an uberblock is a
//! Merkle tree (docs/design.md).

use crate::io::checksum::ChecksumKind;
use crate::io::compress::Compression;

/// Encoded size of a block pointer.
pub const BP_SIZE: usize = 128;

/// Data virtual address: where one copy of a block lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dva {
    /// Top-level vdev index.
    pub vdev: u32,
    /// Byte offset in that vdev's address space.
    pub offset: u64,
    /// Allocated bytes (including parity and padding); 0 = unused slot.
    pub asize: u64,
}

impl Dva {
    pub fn is_empty(&self) -> bool {
        self.asize == 0
    }
}

/// What a block holds (for scrub and for decoding).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BlockKind {
    Data = 1,
    Indirect = 2,
    Dnodes = 3,
    ObjsetRoot = 4,
    Metadata = 5,
}

impl BlockKind {
    fn from_u8(v: u8) -> Option<BlockKind> {
        Some(match v {
            1 => BlockKind::Data,
            2 => BlockKind::Indirect,
            3 => BlockKind::Dnodes,
            4 => BlockKind::ObjsetRoot,
            5 => BlockKind::Metadata,
            _ => return None,
        })
    }
    /// Metadata gets extra copies.
    pub fn is_metadata(self) -> bool {
        self != BlockKind::Data
    }
}

/// A pointer to a block: its copies, sizes, encoding, birth and checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockPointer {
    pub dvas: [Dva; 3],
    pub lsize: u32,
    pub psize: u32,
    pub compression: Compression,
    pub checksum_kind: ChecksumKind,
    pub kind: BlockKind,
    pub level: u8,
    pub birth: u64,
    pub checksum: [u8; 32],
}

/// Why 128 bytes are not a valid block pointer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BpError {
    #[error("block pointer: buffer of {0} bytes is too short")]
    Truncated(usize),
    #[error("block pointer: unknown {field} code {value}")]
    UnknownCode { field: &'static str, value: u8 },
    #[error("block pointer: inconsistent sizes (lsize {lsize}, psize {psize})")]
    BadSizes { lsize: u32, psize: u32 },
    #[error("block pointer: no copies")]
    NoCopies,
}

impl BlockPointer {
    /// The hole: no block; reads as zeros.
    pub const HOLE: BlockPointer = BlockPointer {
        dvas: [Dva {
            vdev: 0,
            offset: 0,
            asize: 0,
        }; 3],
        lsize: 0,
        psize: 0,
        compression: Compression::Off,
        checksum_kind: ChecksumKind::Blake3,
        kind: BlockKind::Data,
        level: 0,
        birth: 0,
        checksum: [0; 32],
    };

    pub fn is_hole(&self) -> bool {
        self.birth == 0
    }

    /// The copies in use.
    pub fn copies(&self) -> impl Iterator<Item = &Dva> {
        self.dvas.iter().filter(|d| !d.is_empty())
    }

    /// Allocated bytes of all copies.
    pub fn total_asize(&self) -> u64 {
        self.copies().map(|d| d.asize).sum()
    }

    pub fn encode(&self, out: &mut [u8]) {
        assert!(out.len() >= BP_SIZE, "block pointer buffer too small");
        let out = &mut out[..BP_SIZE];
        out.fill(0);
        if self.is_hole() {
            return;
        }
        for (i, d) in self.dvas.iter().enumerate() {
            let o = i * 24;
            out[o..o + 4].copy_from_slice(&d.vdev.to_le_bytes());
            out[o + 8..o + 16].copy_from_slice(&d.offset.to_le_bytes());
            out[o + 16..o + 24].copy_from_slice(&d.asize.to_le_bytes());
        }
        out[72..76].copy_from_slice(&self.lsize.to_le_bytes());
        out[76..80].copy_from_slice(&self.psize.to_le_bytes());
        out[80] = self.compression as u8;
        out[81] = self.checksum_kind as u8;
        out[82] = self.kind as u8;
        out[83] = self.level;
        out[88..96].copy_from_slice(&self.birth.to_le_bytes());
        out[96..128].copy_from_slice(&self.checksum);
    }

    pub fn to_bytes(&self) -> [u8; BP_SIZE] {
        let mut b = [0u8; BP_SIZE];
        self.encode(&mut b);
        b
    }

    /// Decodes a block pointer; never panics on any input.
    pub fn decode(buf: &[u8]) -> Result<BlockPointer, BpError> {
        if buf.len() < BP_SIZE {
            return Err(BpError::Truncated(buf.len()));
        }
        let b = &buf[..BP_SIZE];
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let birth = u64_at(88);
        if birth == 0 {
            return Ok(BlockPointer::HOLE);
        }
        let mut dvas = [Dva::default(); 3];
        for (i, d) in dvas.iter_mut().enumerate() {
            let o = i * 24;
            *d = Dva {
                vdev: u32_at(o),
                offset: u64_at(o + 8),
                asize: u64_at(o + 16),
            };
        }
        let code = |field: &'static str, value: u8| BpError::UnknownCode { field, value };
        let compression = Compression::from_u8(b[80]).ok_or(code("compression", b[80]))?;
        let checksum_kind = ChecksumKind::from_u8(b[81]).ok_or(code("checksum", b[81]))?;
        let kind = BlockKind::from_u8(b[82]).ok_or(code("kind", b[82]))?;
        let (lsize, psize) = (u32_at(72), u32_at(76));
        if lsize == 0 || psize == 0 || lsize > (16 << 20) || psize > (16 << 20) {
            return Err(BpError::BadSizes { lsize, psize });
        }
        let mut checksum = [0u8; 32];
        checksum.copy_from_slice(&b[96..128]);
        let bp = BlockPointer {
            dvas,
            lsize,
            psize,
            compression,
            checksum_kind,
            kind,
            level: b[83],
            birth,
            checksum,
        };
        if bp.copies().next().is_none() {
            return Err(BpError::NoCopies);
        }
        Ok(bp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_hole() {
        let bp = BlockPointer {
            dvas: [
                Dva {
                    vdev: 1,
                    offset: 4096,
                    asize: 8192,
                },
                Dva {
                    vdev: 0,
                    offset: 1 << 30,
                    asize: 8192,
                },
                Dva::default(),
            ],
            lsize: 131072,
            psize: 4096,
            compression: Compression::Lz4,
            checksum_kind: ChecksumKind::Sha256,
            kind: BlockKind::Indirect,
            level: 2,
            birth: 77,
            checksum: [9; 32],
        };
        assert_eq!(BlockPointer::decode(&bp.to_bytes()).unwrap(), bp);
        assert!(BlockPointer::decode(&[0u8; BP_SIZE]).unwrap().is_hole());
        assert_eq!(BlockPointer::HOLE.to_bytes(), [0u8; BP_SIZE]);
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = BlockPointer::decode(&bytes);
        }
    }
}
