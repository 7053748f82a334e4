//! The I/O pipeline (DESIGN.md §4): checksum → compress → allocate → map → issue on
//! writes; issue → verify → reconstruct → self-heal on reads.
//!
//! `prepare` is pure CPU work (compression, padding, checksum) so callers can run it on
//! several threads; `Pool::write_prepared` allocates and issues; `Pool::read_bp` verifies
//! every read against the checksum in the block pointer and repairs bad copies.

use cairn_vdev::VdevError;

use crate::error::PoolError;
use crate::io::alloc::Allocator;
use crate::io::bp::{BlockKind, BlockPointer, Dva};
use crate::io::checksum::ChecksumKind;
use crate::io::compress::{compress, decompress, Compression, CompressionSetting};
use crate::pool::Pool;

/// How to store a block.
#[derive(Clone, Copy, Debug)]
pub struct WriteProps {
    pub compression: CompressionSetting,
    pub checksum: ChecksumKind,
    pub copies: usize,
    pub kind: BlockKind,
    pub level: u8,
}

/// A block ready to be allocated and written: physical bytes padded to the sector.
#[derive(Clone, Debug)]
pub struct PreparedBlock {
    pub physical: Vec<u8>,
    pub lsize: u32,
    pub compression: Compression,
    pub checksum: [u8; 32],
    pub props: WriteProps,
}

/// Compresses (if it saves ≥ 1/8), pads to `sector` and checksums a logical block.
pub fn prepare(data: &[u8], props: WriteProps, sector: u64) -> PreparedBlock {
    assert!(!data.is_empty(), "blocks are never empty");
    let (mut physical, compression) = match compress(props.compression, data) {
        Some(c) => (c, props.compression.algorithm),
        None => (data.to_vec(), Compression::Off),
    };
    let padded = (physical.len() as u64).div_ceil(sector) * sector;
    physical.resize(padded as usize, 0);
    let checksum = props.checksum.digest(&physical);
    PreparedBlock {
        physical,
        lsize: data.len() as u32,
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

impl Pool {
    /// Largest sector of any top-level vdev: blocks are padded to it.
    pub fn max_sector(&self) -> u64 {
        self.tops.iter().map(|t| t.sector()).max().unwrap_or(512)
    }

    /// Allocates space for every copy and writes them. On failure nothing stays allocated.
    pub fn write_prepared(
        &self,
        alloc: &mut Allocator,
        block: &PreparedBlock,
        txg: u64,
    ) -> Result<BlockPointer, PoolError> {
        let dvas = self.allocate(alloc, block.physical.len() as u64, block.props.copies)?;
        self.write_at_dvas(alloc, dvas, block, txg)
    }

    /// Allocates `copies` DVAs for a block of `psize` physical bytes.
    pub fn allocate(
        &self,
        alloc: &mut Allocator,
        psize: u64,
        copies: usize,
    ) -> Result<[Dva; 3], PoolError> {
        alloc
            .alloc_block(copies.clamp(1, 3), &|v| self.tops[v].block_asize(psize))
            .ok_or_else(|| PoolError::NoSpace(self.name().to_string()))
    }

    /// Writes a prepared block to DVAs allocated earlier; frees them if no copy was written.
    pub fn write_at_dvas(
        &self,
        alloc: &mut Allocator,
        dvas: [Dva; 3],
        block: &PreparedBlock,
        txg: u64,
    ) -> Result<BlockPointer, PoolError> {
        let psize = block.physical.len() as u64;
        let mut written = 0;
        let mut last_err = None;
        for d in dvas.iter().filter(|d| !d.is_empty()) {
            match self.tops[d.vdev as usize].write_block(d.offset, &block.physical) {
                Ok(_) => written += 1,
                Err(e) => last_err = Some(e),
            }
        }
        if written == 0 {
            for d in dvas.iter().filter(|d| !d.is_empty()) {
                alloc.free(d);
            }
            return Err(PoolError::Vdev(last_err.expect("a write failed")));
        }
        Ok(BlockPointer {
            dvas,
            lsize: block.lsize,
            psize: psize as u32,
            compression: block.compression,
            checksum_kind: block.props.checksum,
            kind: block.props.kind,
            level: block.props.level,
            birth: txg,
            checksum: block.checksum,
        })
    }

    /// Reads the physical bytes of a block, verified; repairs copies that were bad.
    pub fn read_physical(&self, bp: &BlockPointer) -> Result<(Vec<u8>, BlockHealth), PoolError> {
        let verify = |buf: &[u8]| bp.checksum_kind.digest(buf) == bp.checksum;
        let mut health = BlockHealth::default();
        let mut bad: Vec<Dva> = Vec::new();
        let mut good: Option<Vec<u8>> = None;
        let mut last_err: Option<VdevError> = None;
        for dva in bp.copies() {
            let Some(top) = self.tops.get(dva.vdev as usize) else {
                last_err = Some(VdevError::BadBlockAddress {
                    vdev: format!("vdev {}", dva.vdev),
                    offset: dva.offset,
                    psize: u64::from(bp.psize),
                    sector: 0,
                });
                continue;
            };
            let mut buf = vec![0u8; bp.psize as usize];
            match top.read_block(dva.offset, &mut buf, Some(&verify)) {
                Ok(report) => {
                    health.had_errors |= report.reconstructed;
                    health.repaired_bytes += report.repaired_bytes;
                    good = Some(buf);
                    break;
                }
                Err(e) => {
                    health.had_errors = true;
                    bad.push(*dva);
                    last_err = Some(e);
                }
            }
        }
        let Some(data) = good else {
            return Err(PoolError::Vdev(last_err.unwrap_or(
                VdevError::Unrecoverable {
                    vdev: "pool".into(),
                    offset: 0,
                },
            )));
        };
        // Self-heal: rewrite copies that could not be read or were wrong.
        for dva in bad {
            if let Some(top) = self.tops.get(dva.vdev as usize) {
                if top.write_block(dva.offset, &data).is_ok() {
                    health.repaired_bytes += u64::from(bp.psize);
                }
            }
        }
        Ok((data, health))
    }

    /// Reads a block and returns its logical bytes.
    pub fn read_bp(&self, bp: &BlockPointer) -> Result<Vec<u8>, PoolError> {
        Ok(self.read_bp_with_health(bp)?.0)
    }

    pub fn read_bp_with_health(
        &self,
        bp: &BlockPointer,
    ) -> Result<(Vec<u8>, BlockHealth), PoolError> {
        let (physical, health) = self.read_physical(bp)?;
        let logical = decompress(bp.compression, &physical, bp.lsize as usize)
            .map_err(|e| PoolError::Corrupt(e.to_string()))?;
        Ok((logical, health))
    }

    /// Scrubs one block: every copy and every parity column is read and checked, and
    /// whatever is wrong is rewritten.
    pub fn scrub_bp(&self, bp: &BlockPointer) -> Result<BlockHealth, PoolError> {
        let verify = |buf: &[u8]| bp.checksum_kind.digest(buf) == bp.checksum;
        let mut health = BlockHealth::default();
        let mut good: Option<Vec<u8>> = None;
        let mut bad: Vec<Dva> = Vec::new();
        let mut last_err = None;
        for dva in bp.copies() {
            let Some(top) = self.tops.get(dva.vdev as usize) else {
                continue;
            };
            match top.scrub_block(dva.offset, u64::from(bp.psize), &verify) {
                Ok((data, report)) => {
                    health.had_errors |= report.reconstructed
                        || !report.checksum_failed_children.is_empty()
                        || !report.failed_children.is_empty();
                    health.repaired_bytes += report.repaired_bytes;
                    good.get_or_insert(data);
                }
                Err(e) => {
                    health.had_errors = true;
                    bad.push(*dva);
                    last_err = Some(e);
                }
            }
        }
        let Some(data) = good else {
            return Err(PoolError::Vdev(last_err.unwrap_or(
                VdevError::Unrecoverable {
                    vdev: "pool".into(),
                    offset: 0,
                },
            )));
        };
        for dva in bad {
            if let Some(top) = self.tops.get(dva.vdev as usize) {
                if top.write_block(dva.offset, &data).is_ok() {
                    health.repaired_bytes += u64::from(bp.psize);
                }
            }
        }
        Ok(health)
    }

    /// Space charged for a block in `zfs list` units: asize × deflate ratio / 512.
    pub fn deflated_size(&self, bp: &BlockPointer) -> u64 {
        bp.copies()
            .map(|d| {
                let ratio = self
                    .tops
                    .get(d.vdev as usize)
                    .map(|t| t.shape().deflate_ratio(t.ashift()))
                    .unwrap_or(512);
                (d.asize >> 9) * ratio
            })
            .sum()
    }
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
