//! The I/O pipeline (docs/design.md): checksum → compress → allocate → map → issue on
//! writes; issue → verify → reconstruct → self-heal on reads.
//!
//! `prepare` is pure CPU work (compression, padding, checksum) so callers can run it on
//! several threads; `Pool::write_prepared` allocates and issues; `Pool::read_bp` verifies
//! every read against the checksum in the block pointer and repairs bad copies (both in
//! `crate::block_io`: this module does not depend on the pool).

use std::sync::Arc;

use crate::error::PoolError;
use crate::io::alloc::Allocator;
use crate::io::bp::{BlockKind, BlockPointer, Dva};
use crate::io::checksum::ChecksumKind;
use crate::io::compress::{compress, decompress_owned, Compression, CompressionSetting};

/// How to store a block.
#[derive(Clone, Copy, Debug)]
pub struct WriteProps {
    pub compression: CompressionSetting,
    pub checksum: ChecksumKind,
    pub copies: usize,
    pub kind: BlockKind,
    pub level: u8,
}

/// A block ready to be allocated and written: physical bytes padded to the sector (shared,
/// so a block that does not compress is written from the caller's buffer without a copy).
#[derive(Clone, Debug)]
pub struct PreparedBlock {
    pub physical: Arc<Vec<u8>>,
    pub lsize: u32,
    pub compression: Compression,
    pub checksum: [u8; 32],
    pub props: WriteProps,
}

impl PreparedBlock {
    /// The pointer to this block once its copies are written at `dvas` in `txg`.
    pub fn pointer(&self, dvas: [Dva; 3], txg: u64) -> BlockPointer {
        BlockPointer {
            dvas,
            lsize: self.lsize,
            psize: self.physical.len() as u32,
            compression: self.compression,
            checksum_kind: self.props.checksum,
            kind: self.props.kind,
            level: self.props.level,
            birth: txg,
            checksum: self.checksum,
        }
    }
}

/// Compresses (if it saves ≥ 1/8), pads to `sector` and checksums a logical block.
pub fn prepare(data: &[u8], props: WriteProps, sector: u64) -> PreparedBlock {
    assert!(!data.is_empty(), "blocks are never empty");
    match compress(props.compression, data) {
        Some(c) => finish_prepare(c, data.len(), props.compression.algorithm, props, sector),
        None => finish_prepare(data.to_vec(), data.len(), Compression::Off, props, sector),
    }
}

/// `prepare` for a block the caller gives up: stored as is without a copy when it does not
/// compress.
pub fn prepare_owned(data: Vec<u8>, props: WriteProps, sector: u64) -> PreparedBlock {
    assert!(!data.is_empty(), "blocks are never empty");
    let lsize = data.len();
    match compress(props.compression, &data) {
        Some(c) => finish_prepare(c, lsize, props.compression.algorithm, props, sector),
        None => finish_prepare(data, lsize, Compression::Off, props, sector),
    }
}

/// `prepare` for a block that others may still read: stored from the shared buffer without
/// a copy when it does not compress and is a whole number of sectors.
pub fn prepare_shared(data: &Arc<Vec<u8>>, props: WriteProps, sector: u64) -> PreparedBlock {
    assert!(!data.is_empty(), "blocks are never empty");
    match compress(props.compression, data) {
        Some(c) => finish_prepare(c, data.len(), props.compression.algorithm, props, sector),
        None if (data.len() as u64).is_multiple_of(sector) => PreparedBlock {
            physical: Arc::clone(data),
            lsize: data.len() as u32,
            compression: Compression::Off,
            checksum: props.checksum.digest(data),
            props,
        },
        None => finish_prepare(data.to_vec(), data.len(), Compression::Off, props, sector),
    }
}

fn finish_prepare(
    mut physical: Vec<u8>,
    lsize: usize,
    compression: Compression,
    props: WriteProps,
    sector: u64,
) -> PreparedBlock {
    let padded = (physical.len() as u64).div_ceil(sector) * sector;
    physical.resize(padded as usize, 0);
    let checksum = props.checksum.digest(&physical);
    PreparedBlock {
        physical: Arc::new(physical),
        lsize: lsize as u32,
        compression,
        checksum,
        props,
    }
}

/// Outcome of reading or scrubbing a block, for counters and `scrub` reports.
#[derive(Clone, Debug, Default)]
pub struct BlockHealth {
    /// Bytes rewritten with good data.
    pub repaired_bytes: u64,
    /// Whether any copy or column was wrong or unreadable.
    pub had_errors: bool,
}

impl BlockKind {
    /// Props for metadata of this kind: lz4, blake3, `copies` copies.
    pub fn metadata_props(self, level: u8, copies: usize) -> WriteProps {
        WriteProps {
            compression: CompressionSetting::LZ4,
            checksum: ChecksumKind::Blake3,
            copies,
            kind: self,
            level,
        }
    }
}

/// Frees every DVA of a batch.
pub fn release_all(alloc: &mut Allocator, all: &[[Dva; 3]]) {
    for d in all.iter().flat_map(|d| d.iter()).filter(|d| !d.is_empty()) {
        alloc.free(d);
    }
}

/// A block to read and the buffer its logical bytes go to.
pub type ReadTarget<'a> = (BlockPointer, &'a mut [u8]);
/// The scratch buffer of a block read through one (None: read in place), and whether the
/// batched read brought its bytes.
pub(crate) type ScratchRead = (Option<Vec<u8>>, bool);

/// The logical bytes of a verified physical block (uncompressed: the same buffer, cut to
/// size; no copy).
pub(crate) fn into_logical(bp: &BlockPointer, physical: Vec<u8>) -> Result<Vec<u8>, PoolError> {
    decompress_owned(bp.compression, physical, bp.lsize as usize)
        .map_err(|e| PoolError::Corrupt(e.to_string()))
}

/// Copies `data` to the front of `out`, zero-filling what `data` does not cover.
pub(crate) fn fill_from(out: &mut [u8], data: &[u8]) {
    let n = data.len().min(out.len());
    let (head, tail) = out.split_at_mut(n);
    head.copy_from_slice(&data[..n]);
    tail.fill(0);
}
