//! Batched rebuild for resilver: many blocks of one top-level vdev at once, every column
//! that is not on a resilver target read in one pass with one thread per leaf (adjacent
//! columns coalesced into large sequential reads), then the targets' columns rebuilt from
//! parity (or taken from another mirror side) and checked against the block checksum.
//! Blocks that do not verify go through `rebuild_pieces`, which tries every reconstruction.

use cairn_geometry::{raidz_map, RaidzMap, VdevShape, LEAF_DATA_START};

use crate::batch::ReadJob;
use crate::error::VdevError;
use crate::top::{split_columns_mut, TopVdev};

/// One block to rebuild: offset and psize in the vdev, and the children that miss it.
#[derive(Clone, Debug)]
pub struct RebuildRequest {
    pub offset: u64,
    pub psize: u64,
    pub targets: Vec<usize>,
}

/// What a target child gets: `(child, leaf offset, bytes)`.
pub type Piece = (usize, u64, Vec<u8>);

/// Checks the data of request `i`.
pub type BatchVerifier<'a> = &'a (dyn Fn(usize, &[u8]) -> bool + Sync);

impl TopVdev {
    /// Rebuilds many blocks; one result per request, in order.
    pub fn rebuild_batch(
        &self,
        requests: &[RebuildRequest],
        verify: BatchVerifier<'_>,
    ) -> Vec<Result<Vec<Piece>, VdevError>> {
        // Addresses come from block pointers: only checked ones take the fast path; the
        // others get their error from `rebuild_pieces`.
        let valid: Vec<usize> = (0..requests.len())
            .filter(|&i| {
                let r = &requests[i];
                !r.targets.is_empty() && self.check_address(r.offset, r.psize).is_ok()
            })
            .collect();
        let checked: Vec<RebuildRequest> = valid.iter().map(|&i| requests[i].clone()).collect();
        let verify_checked = |k: usize, b: &[u8]| verify(valid[k], b);
        let done = match self.config.shape {
            VdevShape::Raidz { width, parity } => {
                self.rebuild_raidz_batch(&checked, width, parity, &verify_checked)
            }
            _ => self.rebuild_copies_batch(&checked, &verify_checked),
        };
        let mut fast: Vec<Option<Vec<Piece>>> = vec![None; requests.len()];
        for (k, pieces) in done.into_iter().enumerate() {
            fast[valid[k]] = pieces;
        }
        fast.into_iter()
            .zip(requests)
            .enumerate()
            .map(|(i, (done, r))| match done {
                Some(pieces) => Ok(pieces),
                None => self.rebuild_pieces(r.offset, r.psize, &r.targets, &|b| verify(i, b)),
            })
            .collect()
    }

    /// Mirrors: one readable copy per block (alternating sides), verified.
    fn rebuild_copies_batch(
        &self,
        requests: &[RebuildRequest],
        verify: BatchVerifier<'_>,
    ) -> Vec<Option<Vec<Piece>>> {
        let mut outs: Vec<Vec<u8>> = requests
            .iter()
            .map(|r| vec![0u8; r.psize as usize])
            .collect();
        let arrived = {
            let mut blocks: Vec<(u64, &mut [u8])> = requests
                .iter()
                .zip(outs.iter_mut())
                .map(|(r, o)| (r.offset, o.as_mut_slice()))
                .collect();
            self.read_batch(&mut blocks)
        };
        outs.into_iter()
            .zip(requests)
            .zip(arrived)
            .enumerate()
            .map(|(i, ((data, r), ok))| {
                (ok && verify(i, &data)).then(|| {
                    // Each target but the last gets a copy; the last takes the buffer.
                    let at = LEAF_DATA_START + r.offset;
                    let (last, rest) = r.targets.split_last().expect("a block has targets");
                    let mut pieces: Vec<Piece> =
                        rest.iter().map(|&c| (c, at, data.clone())).collect();
                    pieces.push((*last, at, data));
                    pieces
                })
            })
            .collect()
    }

    /// RAID-Z: every readable non-target column of every block in one pass, then per block
    /// the missing columns rebuilt (the targets' among them).
    fn rebuild_raidz_batch(
        &self,
        requests: &[RebuildRequest],
        width: usize,
        nparity: usize,
        verify: BatchVerifier<'_>,
    ) -> Vec<Option<Vec<Piece>>> {
        let mut batch = RaidzBatch::new(requests, width, nparity, self.ashift());
        self.read_raidz_columns(requests, &mut batch);
        (0..requests.len())
            .map(|i| self.rebuild_raidz_block(&mut batch, i, &requests[i].targets, nparity, verify))
            .collect()
    }

    /// Reads every column of the batch that is on a readable child and not on a target of
    /// its block, one thread per leaf (adjacent columns coalesced); the columns read are no
    /// longer missing.
    fn read_raidz_columns(&self, requests: &[RebuildRequest], batch: &mut RaidzBatch) {
        let RaidzBatch {
            maps,
            data,
            parity,
            missing,
        } = batch;
        let mut jobs: Vec<Vec<ReadJob<'_>>> =
            (0..self.children.len()).map(|_| Vec::new()).collect();
        // planned[child]: the (block, column) of each of the child's jobs.
        let mut planned: Vec<Vec<(usize, usize)>> = vec![Vec::new(); self.children.len()];
        for (i, (out, par)) in data.iter_mut().zip(parity.iter_mut()).enumerate() {
            let map = &maps[i];
            let bufs = par
                .iter_mut()
                .map(|b| b.as_mut_slice())
                .chain(split_columns_mut(out, map.data_columns()));
            for (col_index, (col, buf)) in map.columns.iter().zip(bufs).enumerate() {
                let child = &self.children[col.child];
                if requests[i].targets.contains(&col.child) || !child.is_readable() {
                    continue;
                }
                jobs[col.child].push((LEAF_DATA_START + col.offset, buf, i));
                planned[col.child].push((i, col_index));
                missing[i][col_index] = false;
            }
        }
        let lists: Vec<(usize, Vec<_>)> = jobs
            .into_iter()
            .enumerate()
            .filter(|(_, list)| !list.is_empty())
            .collect();
        let failed: Vec<(usize, Vec<usize>)> = crate::threads::on_leaf_io(
            true,
            lists,
            |(c, _)| self.leaf_stats(*c),
            |(c, list)| (c, self.read_child_jobs(c, list)),
        );
        for (c, blocks) in failed {
            for (i, col_index) in planned[c]
                .iter()
                .copied()
                .filter(|(i, _)| blocks.contains(i))
            {
                missing[i][col_index] = true;
            }
        }
    }

    /// Block `i` of the batch with its missing columns reconstructed from parity, verified:
    /// the columns of its `targets`, or None if it cannot be rebuilt or does not verify.
    fn rebuild_raidz_block(
        &self,
        batch: &mut RaidzBatch,
        i: usize,
        targets: &[usize],
        nparity: usize,
        verify: BatchVerifier<'_>,
    ) -> Option<Vec<Piece>> {
        let gone: Vec<usize> = (0..batch.missing[i].len())
            .filter(|&c| batch.missing[i][c])
            .collect();
        if gone.len() > nparity {
            return None;
        }
        if !gone.is_empty()
            && self
                .reconstruct(
                    &batch.maps[i],
                    &mut batch.parity[i],
                    &mut batch.data[i],
                    &gone,
                )
                .is_err()
        {
            return None;
        }
        if !verify(i, &batch.data[i]) {
            return None;
        }
        Some(target_pieces(
            &batch.maps[i],
            &batch.parity[i],
            &batch.data[i],
            targets,
        ))
    }
}

/// The blocks of a RAID-Z rebuild batch: per block its map, its data and parity buffers,
/// and which of its columns were not read.
struct RaidzBatch {
    maps: Vec<RaidzMap>,
    data: Vec<Vec<u8>>,
    parity: Vec<Vec<Vec<u8>>>,
    /// missing[i][col]: column `col` of block i was not read.
    missing: Vec<Vec<bool>>,
}

impl RaidzBatch {
    /// The maps and zeroed buffers of `requests`, every column missing.
    fn new(requests: &[RebuildRequest], width: usize, nparity: usize, ashift: u32) -> RaidzBatch {
        let maps: Vec<RaidzMap> = requests
            .iter()
            .map(|r| raidz_map(r.offset, r.psize, width, nparity, ashift))
            .collect();
        let data = requests
            .iter()
            .map(|r| vec![0u8; r.psize as usize])
            .collect();
        let parity = maps
            .iter()
            .map(|m| {
                m.parity_columns()
                    .iter()
                    .map(|c| vec![0u8; c.size as usize])
                    .collect()
            })
            .collect();
        let missing = maps.iter().map(|m| vec![true; m.columns.len()]).collect();
        RaidzBatch {
            maps,
            data,
            parity,
            missing,
        }
    }
}

/// The columns of a rebuilt block that live on `targets`.
fn target_pieces(map: &RaidzMap, parity: &[Vec<u8>], data: &[u8], targets: &[usize]) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut pos = 0usize;
    for (i, col) in map.columns.iter().enumerate() {
        let len = col.size as usize;
        let bytes = if i < map.parity {
            &parity[i][..]
        } else {
            pos += len;
            &data[pos - len..pos]
        };
        if targets.contains(&col.child) {
            pieces.push((col.child, LEAF_DATA_START + col.offset, bytes.to_vec()));
        }
    }
    pieces
}
