//! The pool's block I/O, the pool side of the pipeline (`crate::io::pipeline`): allocate
//! and issue prepared blocks (`write_prepared`, `write_prepared_batch`, `write_blocks_at`),
//! read them verified against their checksums, repairing bad copies (`read_bp`,
//! `read_bps_into`, `read_physical`), and scrub one block (`scrub_bp`).

use std::sync::Arc;

use cairn_vdev::VdevError;

use crate::error::PoolError;
use crate::io::alloc::Allocator;
use crate::io::bp::{BlockPointer, Dva};
use crate::io::compress::Compression;
use crate::io::pipeline::{
    fill_from, into_logical, release_all, BlockHealth, PreparedBlock, ReadTarget, ScratchRead,
};
use crate::pool::Pool;

impl Pool {
    /// Largest sector of any top-level vdev: blocks are padded to it.
    pub fn max_sector(&self) -> u64 {
        self.tops.iter().map(|t| t.sector()).max().unwrap_or(512)
    }

    /// Whether a leaf open now has a moving head (a hard disk, or a simulated one): the
    /// store then reads ahead of sequential streams.
    pub fn has_rotating_leaf(&self) -> bool {
        self.tops
            .iter()
            .flat_map(|t| t.children.iter())
            .filter_map(|c| c.leaf.as_ref())
            .any(|l| !l.nonrot())
    }

    /// Allocates space for every copy and writes them. On failure nothing stays allocated.
    pub fn write_prepared(
        &self,
        alloc: &mut Allocator,
        block: &PreparedBlock,
        txg: u64,
    ) -> Result<BlockPointer, PoolError> {
        let dvas = self.allocate(
            alloc,
            block.physical.len() as u64,
            block.props.copies,
            block.props.kind.is_metadata(),
        )?;
        self.write_at_dvas(alloc, dvas, block, txg)
    }

    /// Allocates `copies` DVAs for a block of `psize` physical bytes (metadata apart from
    /// data, see `io::alloc`).
    pub fn allocate(
        &self,
        alloc: &mut Allocator,
        psize: u64,
        copies: usize,
        metadata: bool,
    ) -> Result<[Dva; 3], PoolError> {
        alloc
            .alloc_block(
                copies.clamp(1, 3),
                &|v| self.tops[v].block_asize(psize),
                metadata,
            )
            .ok_or_else(|| PoolError::NoSpace(self.name().to_string()))
    }

    /// One copy's space for an intent-log block of `psize` bytes: on a log device that can
    /// take writes when the pool has one, else where data goes.
    pub fn allocate_log(&self, alloc: &mut Allocator, psize: u64) -> Result<[Dva; 3], PoolError> {
        let on_log = alloc.alloc_log(&|v| self.tops[v].block_asize(psize), &|v| {
            self.tops[v].can_serve() && self.tops[v].unusable_children() == 0
        });
        match on_log {
            Some(d) => Ok([d, Dva::default(), Dva::default()]),
            None => self.allocate(alloc, psize, 1, false),
        }
    }

    /// Writes a prepared block to DVAs allocated earlier; frees them if no copy was written.
    pub fn write_at_dvas(
        &self,
        alloc: &mut Allocator,
        dvas: [Dva; 3],
        block: &PreparedBlock,
        txg: u64,
    ) -> Result<BlockPointer, PoolError> {
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
        Ok(block.pointer(dvas, txg))
    }

    /// Writes a prepared block to DVAs allocated earlier and keeps them allocated whatever
    /// happens (a space map already counts them; the write may be retried).
    pub fn write_kept(
        &self,
        dvas: [Dva; 3],
        block: &PreparedBlock,
        txg: u64,
    ) -> Result<BlockPointer, PoolError> {
        let mut results = self.write_blocks_at(std::slice::from_ref(block), &[dvas], txg);
        results.pop().expect("one result per block")
    }

    /// Allocates and writes many prepared blocks, grouped per top-level vdev so every leaf
    /// gets few, large, sequential requests. All or nothing: on failure every allocation of
    /// the batch is released.
    pub fn write_prepared_batch(
        &self,
        alloc: &mut Allocator,
        blocks: &[PreparedBlock],
        txg: u64,
    ) -> Result<Vec<BlockPointer>, PoolError> {
        let all_dvas = self.allocate_batch(alloc, blocks)?;
        let results = self.write_blocks_at(blocks, &all_dvas, txg);
        if let Some(i) = results.iter().position(|r| r.is_err()) {
            release_all(alloc, &all_dvas);
            let mut results = results;
            return Err(results.swap_remove(i).expect_err("failed"));
        }
        Ok(results.into_iter().map(|r| r.expect("all ok")).collect())
    }

    /// Allocates every copy of every block; all or nothing.
    pub fn allocate_batch(
        &self,
        alloc: &mut Allocator,
        blocks: &[PreparedBlock],
    ) -> Result<Vec<[Dva; 3]>, PoolError> {
        let mut all_dvas: Vec<[Dva; 3]> = Vec::with_capacity(blocks.len());
        for b in blocks {
            match self.allocate(
                alloc,
                b.physical.len() as u64,
                b.props.copies,
                b.props.kind.is_metadata(),
            ) {
                Ok(d) => all_dvas.push(d),
                Err(e) => {
                    release_all(alloc, &all_dvas);
                    return Err(e);
                }
            }
        }
        Ok(all_dvas)
    }

    /// Writes blocks to DVAs allocated earlier (no allocator needed: callers may run this
    /// without the lock that guards it), grouped per top-level vdev. A block succeeds when
    /// at least one copy was written; the caller frees the DVAs of the blocks that failed.
    pub fn write_blocks_at(
        &self,
        blocks: &[PreparedBlock],
        all_dvas: &[[Dva; 3]],
        txg: u64,
    ) -> Vec<Result<BlockPointer, PoolError>> {
        assert_eq!(blocks.len(), all_dvas.len(), "one DVA set per block");
        let mut per_vdev: Vec<Vec<(u64, &[u8])>> = vec![Vec::new(); self.tops.len()];
        let mut owner: Vec<Vec<usize>> = vec![Vec::new(); self.tops.len()];
        for (i, (b, dvas)) in blocks.iter().zip(all_dvas).enumerate() {
            for d in dvas.iter().filter(|d| !d.is_empty()) {
                per_vdev[d.vdev as usize].push((d.offset, b.physical.as_slice()));
                owner[d.vdev as usize].push(i);
            }
        }
        let mut copies_written = vec![0usize; blocks.len()];
        let mut last_err: Vec<Option<VdevError>> = (0..blocks.len()).map(|_| None).collect();
        let lists: Vec<_> = per_vdev
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.is_empty())
            .collect();
        let bytes: usize = lists
            .iter()
            .flat_map(|(_, l)| l.iter())
            .map(|(_, b)| b.len())
            .sum();
        let written = per_top(lists, bytes, |v, list| self.tops[v].write_batch(list));
        for (v, results) in written {
            for (k, r) in results.into_iter().enumerate() {
                match r {
                    Ok(_) => copies_written[owner[v][k]] += 1,
                    Err(e) => last_err[owner[v][k]] = Some(e),
                }
            }
        }
        blocks
            .iter()
            .zip(all_dvas)
            .zip(copies_written.into_iter().zip(last_err))
            .map(|((b, dvas), (written, err))| {
                if written == 0 {
                    return Err(PoolError::Vdev(err.expect("a copy failed")));
                }
                Ok(b.pointer(*dvas, txg))
            })
            .collect()
    }

    /// Reads many blocks into the caller's buffers (`out` is the block's logical bytes; a
    /// shorter or longer buffer gets the first bytes, zero-filled past the block's end).
    /// Uncompressed blocks whose buffer is exactly their size are read straight into it and
    /// verified there (no allocation, no copy); the others go through a scratch buffer.
    /// One batched read per vdev, verification on two threads, and
    /// `read_bp` (reconstruction, other copies, self-heal) for any block that did not
    /// arrive or verify.
    ///
    /// Blocks in the block cache are answered from it; a read of one or two blocks (random
    /// access) puts what it read into the cache.
    pub fn read_bps_into(
        &self,
        blocks: &mut [(BlockPointer, &mut [u8])],
    ) -> Vec<Result<(), PoolError>> {
        let mut results: Vec<Option<Result<(), PoolError>>> = blocks
            .iter_mut()
            .map(|(bp, out)| {
                let data = self.cache.get(bp)?;
                fill_from(out, &data);
                Some(Ok(()))
            })
            .collect();
        let mut misses: Vec<ReadTarget<'_>> = blocks
            .iter_mut()
            .zip(&results)
            .filter(|(_, r)| r.is_none())
            .map(|((bp, out), _)| (*bp, &mut **out))
            .collect();
        if !misses.is_empty() {
            let read = self.read_bps_uncached(&mut misses);
            let remember = misses.len() <= 2;
            let mut read = read.into_iter();
            for ((bp, out), slot) in misses
                .iter()
                .zip(results.iter_mut().filter(|r| r.is_none()))
            {
                let r = read.next().expect("one result per block");
                if remember && r.is_ok() && out.len() == bp.lsize as usize {
                    self.cache.insert(bp, Arc::new(out.to_vec()));
                }
                *slot = Some(r);
            }
        }
        results
            .into_iter()
            .map(|r| r.expect("every block answered"))
            .collect()
    }

    /// Whole blocks for callers that want a part of each (a 4 KiB read of a 16 KiB block):
    /// from the block cache, or read, verified and put into the cache as they are. The
    /// cache keeps the buffer the leaves read into (no second copy); a block read in part
    /// is likely read again for its other parts, so these are always remembered.
    pub fn read_bps_shared(&self, bps: &[BlockPointer]) -> Vec<Result<Arc<Vec<u8>>, PoolError>> {
        let mut answers: Vec<Option<Result<Arc<Vec<u8>>, PoolError>>> =
            bps.iter().map(|bp| self.cache.get(bp).map(Ok)).collect();
        let mut misses: Vec<(BlockPointer, Vec<u8>)> = bps
            .iter()
            .zip(&answers)
            .filter(|(_, a)| a.is_none())
            .map(|(bp, _)| (*bp, vec![0u8; bp.lsize as usize]))
            .collect();
        if misses.is_empty() {
            return answers.into_iter().flatten().collect();
        }
        let read = {
            let mut targets: Vec<ReadTarget<'_>> = misses
                .iter_mut()
                .map(|(bp, buf)| (*bp, buf.as_mut_slice()))
                .collect();
            self.read_bps_uncached(&mut targets)
        };
        let mut fresh = misses.into_iter().zip(read);
        for slot in answers.iter_mut().filter(|a| a.is_none()) {
            let ((bp, data), r) = fresh.next().expect("one result per missed block");
            *slot = Some(r.map(|()| {
                let data = Arc::new(data);
                self.cache.insert(&bp, Arc::clone(&data));
                data
            }));
        }
        answers.into_iter().flatten().collect()
    }

    fn read_bps_uncached(
        &self,
        blocks: &mut [(BlockPointer, &mut [u8])],
    ) -> Vec<Result<(), PoolError>> {
        let direct = |bp: &BlockPointer, out: &[u8]| {
            bp.compression == Compression::Off
                && bp.psize as usize == out.len()
                && bp.lsize as usize == out.len()
        };
        let mut scratch: Vec<Option<Vec<u8>>> = blocks
            .iter()
            .map(|(bp, out)| (!direct(bp, out)).then(|| vec![0u8; bp.psize as usize]))
            .collect();
        let mut arrived = vec![false; blocks.len()];
        {
            let mut per_vdev: Vec<Vec<(u64, &mut [u8])>> =
                (0..self.tops.len()).map(|_| Vec::new()).collect();
            let mut owner: Vec<Vec<usize>> = vec![Vec::new(); self.tops.len()];
            for (i, ((bp, out), extra)) in blocks.iter_mut().zip(scratch.iter_mut()).enumerate() {
                let d = bp.dvas[0];
                let target: &mut [u8] = match extra {
                    Some(v) => v.as_mut_slice(),
                    None => out,
                };
                if let Some(list) = per_vdev.get_mut(d.vdev as usize) {
                    list.push((d.offset, target));
                    owner[d.vdev as usize].push(i);
                }
            }
            let bytes: usize = per_vdev.iter().flatten().map(|(_, b)| b.len()).sum();
            let lists: Vec<_> = per_vdev
                .iter_mut()
                .enumerate()
                .filter(|(_, l)| !l.is_empty())
                .collect();
            let read = per_top(lists, bytes, |v, list| self.tops[v].read_batch(list));
            for (v, oks) in read {
                for (k, ok) in oks.into_iter().enumerate() {
                    arrived[owner[v][k]] = ok;
                }
            }
        }
        let finish = |((bp, out), (extra, ok)): (&mut ReadTarget<'_>, ScratchRead)|
         -> Result<(), PoolError> {
            let physical: &[u8] = extra.as_deref().unwrap_or(out);
            if ok && bp.checksum_kind.digest(physical) == bp.checksum {
                match extra {
                    None => return Ok(()),
                    Some(data) => {
                        fill_from(out, &into_logical(bp, data)?);
                        return Ok(());
                    }
                }
            }
            fill_from(out, &self.read_bp(bp)?);
            Ok(())
        };
        let items: Vec<(&mut ReadTarget<'_>, ScratchRead)> = blocks
            .iter_mut()
            .zip(scratch.into_iter().zip(arrived))
            .collect();
        cairn_vdev::threads::split_cpu(items, 4, finish)
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
        let data = self.settle_copies(good, &bad, last_err, &mut health)?;
        Ok((data, health))
    }

    /// The good copy of a block (or the last copy's error), after rewriting every copy that
    /// could not be read or was wrong with it: self-heal across copies.
    fn settle_copies(
        &self,
        good: Option<Vec<u8>>,
        bad: &[Dva],
        last_err: Option<VdevError>,
        health: &mut BlockHealth,
    ) -> Result<Vec<u8>, PoolError> {
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
                    health.repaired_bytes += data.len() as u64;
                }
            }
        }
        Ok(data)
    }

    /// Reads a block and returns its logical bytes.
    pub fn read_bp(&self, bp: &BlockPointer) -> Result<Vec<u8>, PoolError> {
        Ok(self.read_bp_with_health(bp)?.0)
    }

    pub fn read_bp_with_health(
        &self,
        bp: &BlockPointer,
    ) -> Result<(Vec<u8>, BlockHealth), PoolError> {
        if let Some(data) = self.cache.get(bp) {
            return Ok((data.as_ref().clone(), BlockHealth::default()));
        }
        // Not put into the cache: single-block reads here are read-modify-writes and tree
        // blocks (cached decoded elsewhere); copying them in cost more than it saved.
        let (physical, health) = self.read_physical(bp)?;
        Ok((into_logical(bp, physical)?, health))
    }

    /// Reads a block the intent log names at import, which a crash may have cut while it
    /// was written (`TopVdev::read_block_speculative`: no device is charged). Copies are
    /// not healed: the block is read once, and freed once its log is replayed.
    pub fn read_bp_speculative(&self, bp: &BlockPointer) -> Result<Vec<u8>, PoolError> {
        let verify = |buf: &[u8]| bp.checksum_kind.digest(buf) == bp.checksum;
        let mut last_err = VdevError::Unrecoverable {
            vdev: "the block's vdevs".into(),
            offset: 0,
        };
        for dva in bp.copies() {
            let Some(top) = self.tops.get(dva.vdev as usize) else {
                continue;
            };
            let mut buf = vec![0u8; bp.psize as usize];
            match top.read_block_speculative(dva.offset, &mut buf, &verify) {
                Ok(_) => return into_logical(bp, buf),
                Err(e) => last_err = e,
            }
        }
        Err(PoolError::Vdev(last_err))
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
        self.settle_copies(good, &bad, last_err, &mut health)?;
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

/// Batches this large or larger go to several top-level vdevs at once.
const PER_TOP_PARALLEL_BYTES: usize = 256 << 10;

/// Runs `io` for each top-level vdev's list (`(vdev, list)`), returning `(vdev, result)`:
/// for a batch worth it, the vdevs at once (`on_own_threads`: each still fans its leaves
/// out), so a pool of many vdevs keeps all its disks busy; else one after the other.
fn per_top<T: Send, R: Send>(
    lists: Vec<(usize, T)>,
    bytes: usize,
    io: impl Fn(usize, T) -> R + Sync,
) -> Vec<(usize, R)> {
    let run = |(v, l): (usize, T)| (v, io(v, l));
    if bytes < PER_TOP_PARALLEL_BYTES {
        return lists.into_iter().map(run).collect();
    }
    cairn_vdev::threads::on_own_threads(lists, run)
}
