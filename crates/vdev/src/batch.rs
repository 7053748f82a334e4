//! Batched block I/O: many blocks of one top-level vdev at once, one thread per leaf.
//!
//! ```text
//!  blocks ─► columns/copies ─► per-leaf job lists ─► sort by offset ─► coalesce adjacent
//!                                                     ─► one pwritev/preadv per run
//! ```
//! A txg sync writes its blocks contiguously, so the columns each leaf receives are mostly
//! adjacent: they become a few large sequential requests (docs/design.md "large sequential
//! runs aggregated per leaf"). Reads take the fast path only — data columns, no parity —
//! and report per block whether it arrived; the caller verifies checksums and sends any
//! block that failed through `read_block`, which reconstructs and self-heals.

use cairn_geometry::{raidz_map, RaidzMap, VdevShape, LEAF_DATA_START};

use crate::error::VdevError;
use crate::top::{IoReport, TopVdev, PARALLEL_MIN_BYTES};

/// Largest single coalesced request.
const MAX_RUN_BYTES: u64 = 8 << 20;

/// A column or copy to write: (leaf offset, bytes, index of its block).
type WriteJob<'a> = (u64, &'a [u8], usize);
/// A column or copy to read into.
pub(crate) type ReadJob<'a> = (u64, &'a mut [u8], usize);
/// A block's RAID-Z map with its freshly generated parity columns.
type MapWithParity = (RaidzMap, Vec<Vec<u8>>);

impl TopVdev {
    /// Writes many blocks; returns one result per block, like `write_block` would.
    pub fn write_batch(&self, blocks: &[(u64, &[u8])]) -> Vec<Result<IoReport, VdevError>> {
        let mut results: Vec<Result<IoReport, VdevError>> = blocks
            .iter()
            .map(|(off, data)| {
                self.check_address(*off, data.len() as u64)
                    .map(|_| IoReport::default())
            })
            .collect();
        let parity = match self.config.shape {
            VdevShape::Raidz { width, parity } => {
                self.batch_parity(blocks, width, parity, &mut results)
            }
            _ => Vec::new(),
        };
        let mut jobs: Vec<Vec<WriteJob<'_>>> = vec![Vec::new(); self.children.len()];
        for (i, (off, data)) in blocks.iter().enumerate() {
            if results[i].is_err() {
                continue;
            }
            match &parity.get(i).and_then(|p| p.as_ref()) {
                Some((map, pbufs)) => {
                    for (c, col) in map.parity_columns().iter().enumerate() {
                        jobs[col.child].push((LEAF_DATA_START + col.offset, &pbufs[c], i));
                    }
                    let mut pos = 0usize;
                    for col in map.data_columns() {
                        let len = col.size as usize;
                        jobs[col.child].push((
                            LEAF_DATA_START + col.offset,
                            &data[pos..pos + len],
                            i,
                        ));
                        pos += len;
                    }
                }
                None => {
                    for child_jobs in jobs.iter_mut() {
                        child_jobs.push((LEAF_DATA_START + off, data, i));
                    }
                }
            }
        }
        let failed = self.issue_write_jobs(jobs);
        self.judge(blocks.iter().map(|b| b.0), failed, &mut results);
        results
    }

    /// Parity of every block (two threads), or the error for blocks that could not get it.
    fn batch_parity(
        &self,
        blocks: &[(u64, &[u8])],
        width: usize,
        nparity: usize,
        results: &mut [Result<IoReport, VdevError>],
    ) -> Vec<Option<MapWithParity>> {
        let one = |(off, data): &(u64, &[u8])| -> Result<MapWithParity, VdevError> {
            let map = raidz_map(*off, data.len() as u64, width, nparity, self.ashift());
            let mut pbufs: Vec<Vec<u8>> = map
                .parity_columns()
                .iter()
                .map(|c| vec![0u8; c.size as usize])
                .collect();
            let mut pcols: Vec<&mut [u8]> = pbufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            let mut dcols: Vec<&[u8]> = Vec::with_capacity(map.data_columns().len());
            let mut rest: &[u8] = data;
            for col in map.data_columns() {
                let (head, tail) = rest.split_at(col.size as usize);
                dcols.push(head);
                rest = tail;
            }
            // Parity straight from the caller's buffer: no copy of the data.
            self.parity().generate_split(nparity, &mut pcols, &dcols)?;
            Ok((map, pbufs))
        };
        let computed: Vec<Result<MapWithParity, VdevError>> =
            crate::threads::split_cpu(blocks.iter().collect(), 4, one);
        computed
            .into_iter()
            .enumerate()
            .map(|(i, r)| match r {
                Ok(v) if results[i].is_ok() => Some(v),
                Ok(_) => None,
                Err(e) => {
                    results[i] = Err(e);
                    None
                }
            })
            .collect()
    }

    /// Runs each child's jobs on its own thread; returns, per child, the failed block indices.
    fn issue_write_jobs(&self, jobs: Vec<Vec<WriteJob<'_>>>) -> Vec<Vec<usize>> {
        crate::threads::on_leaf_io(
            false,
            jobs.into_iter().enumerate().collect(),
            |(c, list)| self.write_child_jobs(c, list),
        )
    }

    fn write_child_jobs(&self, c: usize, mut list: Vec<WriteJob<'_>>) -> Vec<usize> {
        let child = &self.children[c];
        let Some(leaf) = child.usable() else {
            return list.iter().map(|j| j.2).collect();
        };
        list.sort_unstable_by_key(|j| j.0);
        let mut failed = Vec::new();
        let mut start = 0;
        while start < list.len() {
            let mut end = start + 1;
            let mut next = list[start].0 + list[start].1.len() as u64;
            while end < list.len() && list[end].0 == next && next - list[start].0 < MAX_RUN_BYTES {
                next += list[end].1.len() as u64;
                end += 1;
            }
            let bufs: Vec<&[u8]> = list[start..end].iter().map(|j| j.1).collect();
            if let Err(e) = leaf.write_vectored_at(&bufs, list[start].0) {
                child.note_error(&child.stats.write_errors, &e);
                failed.extend(list[start..end].iter().map(|j| j.2));
            }
            start = end;
        }
        failed
    }

    /// Turns per-child failures into per-block results (within redundancy = success).
    fn judge(
        &self,
        offsets: impl Iterator<Item = u64>,
        failed: Vec<Vec<usize>>,
        results: &mut [Result<IoReport, VdevError>],
    ) {
        for (c, blocks) in failed.into_iter().enumerate() {
            for b in blocks {
                if let Ok(r) = &mut results[b] {
                    if !r.failed_children.contains(&c) {
                        r.failed_children.push(c);
                    }
                }
            }
        }
        let tolerated = match self.config.shape {
            VdevShape::Raidz { parity, .. } => parity,
            _ => self.children.len() - 1,
        };
        for (r, offset) in results.iter_mut().zip(offsets) {
            let too_many = matches!(r, Ok(rep) if rep.failed_children.len() > tolerated);
            if too_many {
                let failed = r.as_ref().map(|x| x.failed_children.len()).unwrap_or(0);
                *r = Err(VdevError::TooManyFailures {
                    vdev: self.display_name(),
                    offset,
                    failed,
                    parity: self.config.shape.redundancy(),
                });
            }
        }
    }

    /// Reads many blocks' data columns (raidz) or one copy (mirror) straight into `outs`;
    /// returns per block whether every piece arrived. No parity, no checksum: the caller
    /// verifies and retries failures through `read_block`.
    pub fn read_batch(&self, blocks: &mut [(u64, &mut [u8])]) -> Vec<bool> {
        let n = self.children.len();
        let mut ok: Vec<bool> = blocks
            .iter()
            .map(|(off, out)| self.check_address(*off, out.len() as u64).is_ok())
            .collect();
        let total: u64 = blocks.iter().map(|(_, out)| out.len() as u64).sum();
        let mut jobs: Vec<Vec<ReadJob<'_>>> = (0..n).map(|_| Vec::new()).collect();
        let shape = self.config.shape;
        for (i, (off, out)) in blocks.iter_mut().enumerate() {
            if !ok[i] {
                continue;
            }
            match shape {
                VdevShape::Raidz { width, parity } => {
                    let map = raidz_map(*off, out.len() as u64, width, parity, self.ashift());
                    let mut rest: &mut [u8] = out;
                    for col in map.data_columns() {
                        let (head, tail) =
                            std::mem::take(&mut rest).split_at_mut(col.size as usize);
                        jobs[col.child].push((LEAF_DATA_START + col.offset, head, i));
                        rest = tail;
                    }
                }
                _ => {
                    // Alternate mirror sides per 1 MiB region: both sides stream sequentially.
                    let first = ((*off >> 20) as usize) % n;
                    let c = (0..n)
                        .map(|k| (first + k) % n)
                        .find(|&c| self.children[c].is_readable());
                    match c {
                        Some(c) => jobs[c].push((LEAF_DATA_START + *off, &mut **out, i)),
                        None => ok[i] = false,
                    }
                }
            }
        }
        let lists: Vec<(usize, Vec<ReadJob<'_>>)> = jobs
            .into_iter()
            .enumerate()
            .filter(|(_, list)| !list.is_empty())
            .collect();
        let read_list = |(c, list): (usize, Vec<ReadJob<'_>>)| self.read_child_jobs(c, list);
        // A small batch (a random read of a block or two) reads its leaves one after the
        // other on this thread, as `read_block` does for a small block: no thread hand-off.
        let failed: Vec<Vec<usize>> = if total < PARALLEL_MIN_BYTES {
            lists.into_iter().map(read_list).collect()
        } else {
            crate::threads::on_leaf_io(true, lists, read_list)
        };
        for b in failed.into_iter().flatten() {
            ok[b] = false;
        }
        ok
    }

    pub(crate) fn read_child_jobs(&self, c: usize, mut list: Vec<ReadJob<'_>>) -> Vec<usize> {
        let child = &self.children[c];
        let Some(leaf) = child.readable() else {
            return list.iter().map(|j| j.2).collect();
        };
        list.sort_unstable_by_key(|j| j.0);
        let mut failed = Vec::new();
        let mut rest: &mut [ReadJob<'_>] = &mut list;
        while !rest.is_empty() {
            let mut end = 1;
            let mut next = rest[0].0 + rest[0].1.len() as u64;
            while end < rest.len() && rest[end].0 == next && next - rest[0].0 < MAX_RUN_BYTES {
                next += rest[end].1.len() as u64;
                end += 1;
            }
            let (run, tail) = std::mem::take(&mut rest).split_at_mut(end);
            let at = run[0].0;
            let mut bufs: Vec<&mut [u8]> = run.iter_mut().map(|j| &mut *j.1).collect();
            if let Err(e) = leaf.read_vectored_at(&mut bufs, at) {
                child.note_error(&child.stats.read_errors, &e);
                failed.extend(run.iter().map(|j| j.2));
            }
            rest = tail;
        }
        failed
    }
}
