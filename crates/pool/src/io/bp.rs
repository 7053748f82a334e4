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

use cairn_codec::{DecodeError, Reader};

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

    /// Decodes a block pointer; never panics on any input. Errors say which field, at
    /// which byte of the pointer, is damaged.
    pub fn decode(buf: &[u8]) -> Result<BlockPointer, DecodeError> {
        const WHAT: &str = "block pointer";
        if buf.len() < BP_SIZE {
            return Err(DecodeError::truncated(
                WHAT,
                buf.len(),
                format!("{} bytes of {BP_SIZE}", buf.len()),
            ));
        }
        let mut r = Reader::new(&buf[..BP_SIZE], WHAT);
        let mut dvas = [Dva::default(); 3];
        for d in &mut dvas {
            let vdev = r.u32()?;
            let _reserved = r.u32()?;
            *d = Dva {
                vdev,
                offset: r.u64()?,
                asize: r.u64()?,
            };
        }
        let (lsize, psize) = (r.u32()?, r.u32()?);
        let codes = r.fixed(4)?;
        let _zero = r.u32()?;
        let birth = r.u64()?;
        let mut checksum = [0u8; 32];
        checksum.copy_from_slice(r.fixed(32)?);
        if birth == 0 {
            return Ok(BlockPointer::HOLE);
        }
        // Byte 80 + i of the pointer holds code i.
        let unknown = |i: usize, field: &str| {
            DecodeError::bad_value(WHAT, 80 + i, format!("unknown {field} code {}", codes[i]))
        };
        let compression =
            Compression::from_u8(codes[0]).ok_or_else(|| unknown(0, "compression"))?;
        let checksum_kind =
            ChecksumKind::from_u8(codes[1]).ok_or_else(|| unknown(1, "checksum"))?;
        let kind = BlockKind::from_u8(codes[2]).ok_or_else(|| unknown(2, "kind"))?;
        if lsize == 0 || psize == 0 || lsize > (16 << 20) || psize > (16 << 20) {
            return Err(DecodeError::bad_value(
                WHAT,
                72,
                format!("inconsistent sizes (lsize {lsize}, psize {psize})"),
            ));
        }
        let bp = BlockPointer {
            dvas,
            lsize,
            psize,
            compression,
            checksum_kind,
            kind,
            level: codes[3],
            birth,
            checksum,
        };
        if bp.copies().next().is_none() {
            return Err(DecodeError::bad_value(WHAT, 0, "no copies"));
        }
        Ok(bp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_codec::DecodeKind;

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

    #[test]
    fn errors_say_which_field_is_corrupt_and_where() {
        let mut b = BlockPointer {
            lsize: 4096,
            psize: 4096,
            birth: 5,
            dvas: [
                Dva {
                    vdev: 0,
                    offset: 0,
                    asize: 4096,
                },
                Dva::default(),
                Dva::default(),
            ],
            ..BlockPointer::HOLE
        }
        .to_bytes();
        assert!(BlockPointer::decode(&b).is_ok());
        let e = BlockPointer::decode(&b[..100]).unwrap_err();
        assert_eq!((e.offset, e.kind), (100, DecodeKind::Truncated));
        b[82] = 9;
        let e = BlockPointer::decode(&b).unwrap_err();
        assert_eq!((e.offset, e.kind), (82, DecodeKind::BadValue));
        assert_eq!(e.to_string(), "corrupt block pointer: unknown kind code 9");
        b[82] = 1;
        b[16..24].fill(0);
        let e = BlockPointer::decode(&b).unwrap_err();
        assert_eq!(e.to_string(), "corrupt block pointer: no copies");
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = BlockPointer::decode(&bytes);
        }
    }
}
