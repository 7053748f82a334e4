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
