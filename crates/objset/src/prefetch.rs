//! The prefetch thread: reads what `crate::readahead` queued into the block cache, beside
//! the readers (the rules are written there).

use std::sync::atomic::Ordering;

use cairn_vdev::io_class::{self, IoClass};

use crate::core::StoreCore;
use crate::readahead::Prefetch;

impl StoreCore {
    /// The prefetch thread's loop; returns once `readahead.shut_down` was called.
    pub(crate) fn prefetch_worker(&self) {
        // Counted as async reads, as zpool counts prefetch.
        let _class = io_class::enter(IoClass::AsyncRead);
        while let Some(job) = self.readahead.next_job() {
            self.prefetch(&job);
            self.readahead.landed(&job);
        }
    }

    /// Reads `job`'s blocks into the block cache unless they may have been freed since they
    /// were looked up; errors are left to the reads that need the blocks.
    fn prefetch(&self, job: &Prefetch) {
        let _gate = self.read_gate.read().unwrap_or_else(|p| p.into_inner());
        // Their space is released at the start of the sync of `open_txg + 2`; holding the
        // gate, no sync runs, and this one has not begun while the open txg is below it.
        if self.open_txg_now.load(Ordering::SeqCst) > job.open_txg + 1 {
            return;
        }
        let _ = self.pool().read_bps_shared(&job.bps);
    }
}

#[cfg(test)]
mod tests {
    use cairn_pool::{CreateOptions, Home, Pool};

    use crate::core::State;
    use crate::object::disk_blocks;
    use crate::readahead::Prefetch;
    use crate::Store;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_prefetch_looked_up_before_two_syncs_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("home"));
        let mut tokens = vec!["raidz1".to_string()];
        for k in 0..3 {
            let path = dir.path().join(format!("d{k}"));
            std::fs::File::create(&path)
                .unwrap()
                .set_len(64 * MIB)
                .unwrap();
            tokens.push(path.display().to_string());
        }
        Pool::create(&home, "tank", &tokens, CreateOptions::default()).unwrap();
        let store = Store::open(Pool::open(&home, "tank").unwrap()).unwrap();
        store.create_file("tank/f", false).unwrap();
        let f = store.resolve("tank/f").unwrap();
        let data: Vec<u8> = (0..MIB).map(|i| (i % 251) as u8).collect();
        store.write(&f, 0, &data).unwrap();
        store.close().unwrap();
        // Cold cache: the blocks are only on disk.
        let store = Store::open(Pool::open(&home, "tank").unwrap()).unwrap();
        let f = store.resolve("tank/f").unwrap();
        let (bps, open_txg) = {
            let mut st = store.lock();
            store.object_mut(&mut st, f.object).unwrap();
            let txg = st.txg;
            let State { objects, cache, .. } = &mut *st;
            let obj = &objects[&f.object];
            (
                disk_blocks(store.pool(), cache, f.object, obj, 0, MIB).unwrap(),
                txg,
            )
        };
        assert!(!bps.is_empty());
        let job = |open_txg| Prefetch {
            object: f.object,
            range: (0, MIB),
            bps: bps.clone(),
            open_txg,
        };
        let cached = || {
            bps.iter()
                .filter(|bp| store.pool().cache.get(bp).is_some())
                .count()
        };
        store.sync().unwrap();
        store.sync().unwrap();
        store.prefetch(&job(open_txg));
        assert_eq!(cached(), 0, "looked up two syncs ago: dropped");
        store.prefetch(&job(open_txg + 1));
        assert_eq!(cached(), bps.len(), "one sync ago: read");
        store.close().unwrap();
    }
}
