//! `MeteredLeaf`: the wrapper every child of a top-level vdev puts around its device
//! (`Child::new`), counting each request in the leaf's `IoStats` (`crate::iostat`).

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::iostat::{IoStats, READ, WRITE};
use crate::leaf::Leaf;

/// A leaf whose requests are counted in `stats`.
#[derive(Debug)]
pub struct MeteredLeaf {
    inner: Arc<dyn Leaf>,
    stats: Arc<IoStats>,
}

impl MeteredLeaf {
    /// `leaf` counted, unless it is counted already (then it is returned as it is).
    pub fn wrap(leaf: Arc<dyn Leaf>) -> Arc<dyn Leaf> {
        if leaf.io_stats().is_some() {
            return leaf;
        }
        Arc::new(MeteredLeaf {
            inner: leaf,
            stats: Arc::default(),
        })
    }

    fn timed<T>(
        &self,
        dir: usize,
        bytes: u64,
        op: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        let class = crate::io_class::for_request(dir == READ);
        let active = &self.stats.classes[class.index()].active;
        self.stats.in_flight.fetch_add(1, Ordering::Relaxed);
        active.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let queued = crate::threads::queue_wait(started);
        let result = op();
        active.fetch_sub(1, Ordering::Relaxed);
        self.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        crate::threads::mark_ready(Instant::now());
        if result.is_ok() {
            self.stats.record(dir, class, bytes, started, queued);
        }
        result
    }
}

impl Leaf for MeteredLeaf {
    fn refresh_size(&self) -> io::Result<u64> {
        self.inner.refresh_size()
    }
    fn path(&self) -> &str {
        self.inner.path()
    }
    fn release(&self) {
        self.inner.release()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn physical_sector_size(&self) -> u32 {
        self.inner.physical_sector_size()
    }
    fn nonrot(&self) -> bool {
        self.inner.nonrot()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let n = buf.len() as u64;
        self.timed(READ, n, || self.inner.read_at(buf, offset))
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.timed(WRITE, buf.len() as u64, || self.inner.write_at(buf, offset))
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let n = bufs.iter().map(|b| b.len() as u64).sum();
        self.timed(WRITE, n, || self.inner.write_vectored_at(bufs, offset))
    }
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let n = bufs.iter().map(|b| b.len() as u64).sum();
        self.timed(READ, n, || self.inner.read_vectored_at(bufs, offset))
    }
    fn flush(&self) -> io::Result<()> {
        let started = Instant::now();
        let result = self.inner.flush();
        if result.is_ok() {
            self.stats.flushes.fetch_add(1, Ordering::Relaxed);
            let ns = started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
            self.stats.note_latency(ns);
        }
        result
    }
    fn io_stats(&self) -> Option<&Arc<IoStats>> {
        Some(&self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metered_file_counts_each_request_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d");
        std::fs::File::create(&path)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let file: Arc<dyn Leaf> = Arc::new(
            crate::leaf::FileLeaf::open(&path, crate::leaf::LeafOptions::default()).unwrap(),
        );
        let leaf = MeteredLeaf::wrap(file);
        let again = MeteredLeaf::wrap(Arc::clone(&leaf));
        assert!(Arc::ptr_eq(&leaf, &again), "not wrapped twice");
        leaf.write_at(&[1u8; 8192], 0).unwrap();
        leaf.write_vectored_at(&[&[2u8; 4096], &[3u8; 4096]], 8192)
            .unwrap();
        let mut buf = [0u8; 4096];
        leaf.read_at(&mut buf, 0).unwrap();
        leaf.flush().unwrap();
        let s = leaf.io_stats().unwrap().snapshot();
        assert_eq!((s.write_ops, s.write_bytes), (2, 16384));
        assert_eq!((s.read_ops, s.read_bytes), (1, 4096));
        assert_eq!(s.flushes, 1);
        assert_eq!(s.in_flight, 0);
        assert_eq!(s.read_hist.iter().sum::<u64>(), 1);
        assert_eq!(s.write_hist.iter().sum::<u64>(), 2);
        let later = &s + &s;
        assert_eq!(&later - &s, s);
        // Outside an I/O thread job nothing waited in a queue.
        assert_eq!((s.read_queue_ns, s.write_queue_ns), (0, 0));
    }

    #[test]
    fn a_request_counts_the_time_it_waited_since_its_job_was_queued() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d");
        std::fs::File::create(&path)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let file: Arc<dyn Leaf> = Arc::new(
            crate::leaf::FileLeaf::open(&path, crate::leaf::LeafOptions::default()).unwrap(),
        );
        let leaf = MeteredLeaf::wrap(file);
        // Two jobs; each waits 30 ms before its first request (as if every I/O thread
        // were busy), then issues two reads back to back.
        crate::threads::on_io_threads(vec![0u64, 1], |i| {
            std::thread::sleep(std::time::Duration::from_millis(30));
            let mut buf = [0u8; 4096];
            leaf.read_at(&mut buf, i * 8192).unwrap();
            leaf.read_at(&mut buf, i * 8192 + 4096).unwrap();
        });
        let s = leaf.io_stats().unwrap().snapshot();
        assert_eq!(s.read_ops, 4);
        assert!(s.read_queue_ns >= 60_000_000, "{}", s.read_queue_ns);
        assert!(s.read_queue_ns < 2_000_000_000, "{}", s.read_queue_ns);
        assert_eq!(s.write_queue_ns, 0);
    }

    fn metered_file(dir: &tempfile::TempDir) -> Arc<dyn Leaf> {
        let path = dir.path().join("d");
        std::fs::File::create(&path)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        MeteredLeaf::wrap(Arc::new(
            crate::leaf::FileLeaf::open(&path, crate::leaf::LeafOptions::default()).unwrap(),
        ))
    }

    /// Ops per class, `IoClass::ALL` order.
    fn class_ops(leaf: &Arc<dyn Leaf>) -> Vec<u64> {
        let s = leaf.io_stats().unwrap().snapshot();
        IoClass::ALL.iter().map(|c| s.classes[c].ops).collect()
    }

    use crate::io_class::{self, IoClass};

    #[test]
    fn requests_are_counted_in_their_class_also_on_io_threads() {
        let dir = tempfile::tempdir().unwrap();
        let leaf = metered_file(&dir);
        let mut buf = [0u8; 4096];
        // No scope: reads are sync, writes async.
        leaf.read_at(&mut buf, 0).unwrap();
        leaf.write_at(&buf, 0).unwrap();
        {
            let _log = io_class::enter(IoClass::SyncWrite);
            leaf.write_at(&buf, 4096).unwrap();
        }
        {
            let _trim = io_class::enter(IoClass::Trim);
            leaf.write_at(&buf, 8192).unwrap();
        }
        {
            // Four jobs of a scrub: three run on I/O threads and must count as scrub
            // reads there too; a repair write in the same scope is an async write.
            let _scrub = io_class::enter(IoClass::Scrub);
            crate::threads::on_leaf_io(
                true,
                vec![0u64, 1, 2, 3],
                |_| None,
                |i| {
                    let mut b = [0u8; 4096];
                    leaf.read_at(&mut b, i * 4096).unwrap();
                },
            );
            crate::threads::on_io_threads(vec![0u64, 1], |i| {
                let _read_ahead = io_class::enter(IoClass::AsyncRead);
                let mut b = [0u8; 4096];
                leaf.read_at(&mut b, i * 4096).unwrap();
            });
            leaf.write_at(&buf, 12288).unwrap();
        }
        // sync_read, sync_write, async_read, async_write, scrub, trim
        assert_eq!(class_ops(&leaf), [1, 1, 2, 2, 4, 1]);
        let s = leaf.io_stats().unwrap().snapshot();
        let scrub = &s.classes[&IoClass::Scrub];
        assert_eq!(scrub.bytes, 4 * 4096);
        assert_eq!(scrub.disk_hist.iter().sum::<u64>(), 4);
        // Every scrub read came from an I/O thread job, so each waited in a queue.
        assert_eq!(scrub.queue_hist.iter().sum::<u64>(), 4);
        assert!(scrub.queue_ns > 0);
        assert!(s.classes.values().all(|c| c.active == 0));
        assert_eq!(s.read_total_hist.iter().sum::<u64>(), s.read_ops);
        assert_eq!(s.write_total_hist.iter().sum::<u64>(), s.write_ops);
        // The totals are the sums of the classes.
        let sum: u64 = s.classes.values().map(|c| c.ops).sum();
        assert_eq!(sum, s.read_ops + s.write_ops);
    }

    #[test]
    fn jobs_waiting_for_an_io_thread_are_pending_in_their_class_and_leaf() {
        let dir = tempfile::tempdir().unwrap();
        let leaf = metered_file(&dir);
        let stats = leaf.io_stats().unwrap();
        let leaf_pending = || stats.snapshot().classes[&IoClass::Scrub].pending;
        let n = crate::threads::io_threads() + 16;
        let _scrub = io_class::enter(IoClass::Scrub);
        let seen = crate::threads::on_leaf_io(
            true,
            (0..n).collect(),
            |_| Some(&**stats),
            |i| {
                // Every thread busy: the jobs queued behind them wait.
                std::thread::sleep(std::time::Duration::from_millis(if i == 0 {
                    30
                } else {
                    100
                }));
                (
                    crate::threads::pending_by_class()[IoClass::Scrub.index()],
                    leaf_pending(),
                )
            },
        );
        assert!(seen[0].0 >= 8, "pending scrub jobs seen: {:?}", seen[0]);
        assert!(
            seen[0].1 >= 8,
            "pending scrub jobs of the leaf: {:?}",
            seen[0]
        );
        assert_eq!(leaf_pending(), 0);
        assert_eq!(
            crate::threads::pending_by_class()[IoClass::Scrub.index()],
            0
        );
    }
}
