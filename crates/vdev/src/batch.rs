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

use std::sync::atomic::Ordering;

use cairn_geometry::{raidz_map, RaidzMap, VdevShape, LEAF_DATA_START};

use crate::error::VdevError;
use crate::top::{IoReport, TopVdev};

/// Largest single coalesced request.
const MAX_RUN_BYTES: u64 = 8 << 20;
/// On a rotating leaf, reads this close together become one request that also reads the
/// bytes between them (OpenZFS's `zfs_vdev_read_gap_limit`, 32 KiB): one command instead
/// of two costs a few KiB of transfer against a command's overhead and a missed
/// revolution. Between a raidz's data columns the gaps are its parity columns and skip
/// sectors. Leaves without a head (SSD, tmpfs, page cache) read only what is asked.
const READ_GAP_LIMIT: u64 = 32 << 10;

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
            |(c, _)| self.leaf_stats(*c),
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
            match leaf.write_vectored_at(&bufs, list[start].0) {
                Err(e) => {
                    child.note_error(&child.stats.write_errors, &e);
                    failed.extend(list[start..end].iter().map(|j| j.2));
                }
                // (A stale leaf may serve what it was just written: `Child::note_resilvered`.)
                Ok(()) if child.stale.load(Ordering::Relaxed) => {
                    child.note_resilvered(list[start].0, next - list[start].0);
                }
                Ok(()) => {}
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
        // Mirror sides chosen (side, leaf offset of the run): issued now, completed after.
        let mut issued: Vec<(usize, u64)> = Vec::new();
        let sides = match shape {
            VdevShape::Raidz { .. } => Vec::new(),
            _ => self.mirror_sides(blocks, &ok, &mut issued),
        };
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
                _ => match sides[i] {
                    Some(c) => jobs[c].push((LEAF_DATA_START + *off, &mut **out, i)),
                    None => ok[i] = false,
                },
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
        let failed: Vec<Vec<usize>> = if !self.fans_out(total, lists.len()) {
            lists.into_iter().map(read_list).collect()
        } else {
            crate::threads::on_leaf_io(true, lists, |(c, _)| self.leaf_stats(*c), read_list)
        };
        self.batch_reads_completed(&issued);
        for b in failed.into_iter().flatten() {
            ok[b] = false;
        }
        ok
    }

    /// The side each block of a batched mirror (or disk) read goes to. Blocks that follow
    /// each other form one run (up to `MAX_RUN_BYTES`), and the read policy chooses once
    /// per run, as it would for one request of that size: a policy then never splits a
    /// sequential request into alternating blocks that no side can read in one command.
    fn mirror_sides(
        &self,
        blocks: &[(u64, &mut [u8])],
        ok: &[bool],
        issued: &mut Vec<(usize, u64)>,
    ) -> Vec<Option<usize>> {
        let mut order: Vec<usize> = (0..blocks.len()).filter(|&i| ok[i]).collect();
        order.sort_by_key(|&i| blocks[i].0);
        let mut sides = vec![None; blocks.len()];
        let mut k = 0;
        while k < order.len() {
            let start = blocks[order[k]].0;
            let mut end = start + blocks[order[k]].1.len() as u64;
            let mut j = k + 1;
            while let Some(&b) = order.get(j) {
                let len = blocks[b].1.len() as u64;
                if blocks[b].0 != end || end + len - start > MAX_RUN_BYTES {
                    break;
                }
                end += len;
                j += 1;
            }
            let side = self.batch_side(LEAF_DATA_START + start, end - start);
            if let Some(c) = side.filter(|_| self.children.len() > 1) {
                issued.push((c, LEAF_DATA_START + start));
            }
            for &b in &order[k..j] {
                sides[b] = side;
            }
            k = j;
        }
        sides
    }

    pub(crate) fn read_child_jobs(&self, c: usize, mut list: Vec<ReadJob<'_>>) -> Vec<usize> {
        let child = &self.children[c];
        // A side being resilvered serves the jobs only if it already holds every one.
        let holds_all = || {
            list.iter()
                .all(|j| child.readable_for(j.0, j.1.len() as u64).is_some())
        };
        let Some(leaf) = child
            .readable()
            .or_else(|| holds_all().then(|| child.usable()).flatten())
        else {
            return list.iter().map(|j| j.2).collect();
        };
        list.sort_unstable_by_key(|j| j.0);
        let gap_limit = if leaf.nonrot() { 0 } else { READ_GAP_LIMIT };
        let mut failed = Vec::new();
        let mut rest: &mut [ReadJob<'_>] = &mut list;
        while !rest.is_empty() {
            let end = read_run_len(rest, gap_limit);
            let (run, tail) = std::mem::take(&mut rest).split_at_mut(end);
            if let Err(e) = read_run(leaf.as_ref(), run) {
                child.note_error(&child.stats.read_errors, &e);
                failed.extend(run.iter().map(|j| j.2));
            }
            rest = tail;
        }
        failed
    }
}

/// How many jobs from the start of `jobs` (sorted by offset) one request reads: adjacent
/// ones, or ones at most `gap_limit` bytes apart, up to `MAX_RUN_BYTES`.
fn read_run_len(jobs: &[ReadJob<'_>], gap_limit: u64) -> usize {
    let start = jobs[0].0;
    let mut next = start + jobs[0].1.len() as u64;
    let mut end = 1;
    while let Some(j) = jobs.get(end) {
        let len = j.1.len() as u64;
        if j.0 < next || j.0 - next > gap_limit || j.0 + len - start > MAX_RUN_BYTES {
            break;
        }
        next = j.0 + len;
        end += 1;
    }
    end
}

/// Reads one run of jobs with one vectored request; the bytes between jobs go to a
/// scratch buffer.
fn read_run(leaf: &dyn crate::leaf::Leaf, run: &mut [ReadJob<'_>]) -> std::io::Result<()> {
    let at = run[0].0;
    let gaps: Vec<u64> = run
        .windows(2)
        .map(|w| w[1].0 - (w[0].0 + w[0].1.len() as u64))
        .collect();
    let mut scratch = vec![0u8; gaps.iter().sum::<u64>() as usize];
    let mut spare: &mut [u8] = &mut scratch;
    let mut bufs: Vec<&mut [u8]> = Vec::with_capacity(run.len() * 2);
    for (k, job) in run.iter_mut().enumerate() {
        if k > 0 && gaps[k - 1] > 0 {
            let (gap, tail) = std::mem::take(&mut spare).split_at_mut(gaps[k - 1] as usize);
            bufs.push(gap);
            spare = tail;
        }
        bufs.push(&mut *job.1);
    }
    leaf.read_vectored_at(&mut bufs, at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A leaf over memory that records each request's (offset, length).
    #[derive(Debug)]
    struct Recording {
        bytes: Vec<u8>,
        requests: Mutex<Vec<(u64, u64)>>,
    }

    impl crate::leaf::Leaf for Recording {
        fn path(&self) -> &str {
            "recording"
        }
        fn size(&self) -> u64 {
            self.bytes.len() as u64
        }
        fn physical_sector_size(&self) -> u32 {
            512
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            let at = offset as usize;
            buf.copy_from_slice(&self.bytes[at..at + buf.len()]);
            Ok(())
        }
        fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> std::io::Result<()> {
            let len: usize = bufs.iter().map(|b| b.len()).sum();
            self.requests.lock().unwrap().push((offset, len as u64));
            let mut at = offset;
            for b in bufs.iter_mut() {
                self.read_at(b, at)?;
                at += b.len() as u64;
            }
            Ok(())
        }
        fn write_at(&self, _: &[u8], _: u64) -> std::io::Result<()> {
            unreachable!("reads only")
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Jobs 4 KiB long at `offsets` (sorted), reading into fresh buffers.
    fn jobs(offsets: &[u64]) -> Vec<Vec<u8>> {
        offsets.iter().map(|_| vec![0u8; 4096]).collect()
    }

    #[test]
    fn reads_within_the_gap_limit_become_one_request_that_skips_the_gap_bytes() {
        let bytes: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
        let leaf = Recording {
            bytes: bytes.clone(),
            requests: Mutex::new(Vec::new()),
        };
        // 0 and 4K adjacent; 16K after an 8 KiB gap; 200K after a 180 KiB gap.
        let offsets = [0u64, 4096, 16384, 204800];
        let mut bufs = jobs(&offsets);
        let mut list: Vec<ReadJob<'_>> = offsets
            .iter()
            .zip(bufs.iter_mut())
            .enumerate()
            .map(|(i, (&o, b))| (o, b.as_mut_slice(), i))
            .collect();
        assert_eq!(
            read_run_len(&list, 0),
            2,
            "without a gap limit: the adjacent two"
        );
        let n = read_run_len(&list, READ_GAP_LIMIT);
        assert_eq!(n, 3, "the 8 KiB gap is bridged, the 180 KiB one is not");
        read_run(&leaf, &mut list[..n]).unwrap();
        read_run(&leaf, &mut list[n..]).unwrap();
        assert_eq!(
            *leaf.requests.lock().unwrap(),
            [(0, 20480), (204800, 4096)],
            "one request through the gap, then the far job"
        );
        for (&o, b) in offsets.iter().zip(&bufs) {
            assert_eq!(b[..], bytes[o as usize..o as usize + 4096], "job at {o}");
        }
    }

    #[test]
    fn a_run_stops_at_overlap_and_at_the_largest_request() {
        let mut a = vec![0u8; 4096];
        let mut b = vec![0u8; 4096];
        let list: Vec<ReadJob<'_>> = vec![(0, &mut a, 0), (2048, &mut b, 1)];
        assert_eq!(read_run_len(&list, READ_GAP_LIMIT), 1, "overlapping jobs");
        let mut big = vec![0u8; MAX_RUN_BYTES as usize];
        let mut c = vec![0u8; 4096];
        let list: Vec<ReadJob<'_>> = vec![(0, &mut big, 0), (MAX_RUN_BYTES, &mut c, 1)];
        assert_eq!(
            read_run_len(&list, READ_GAP_LIMIT),
            1,
            "past the largest run"
        );
    }
}
