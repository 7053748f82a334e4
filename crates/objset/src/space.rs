//! Space as the store sees it: allocated bytes in `zfs list` units, AVAIL, and the
//! reservation every write makes before it dirties blocks (ENOSPC only after the open txg
//! and the deferred frees had their chance, as ZFS's write throttle waits for txgs).

use crate::core::{State, StoreCore, FREE_DELAY_TXGS};
use crate::error::StoreError;

impl StoreCore {
    // ---- space --------------------------------------------------------------------------

    /// Bytes allocated in `zfs list` units (asize × deflate ratio / 512, per vdev).
    pub(crate) fn deflated_alloc(&self, st: &State) -> u64 {
        self.deflated(st.alloc.vdevs.iter().map(|v| v.allocated_bytes()))
    }

    /// Raw allocated bytes per top-level vdev, in zfs list units.
    fn deflated(&self, per_top: impl Iterator<Item = u64>) -> u64 {
        per_top
            .zip(self.pool.deflate_ratios())
            .map(|(bytes, ratio)| (bytes >> 9) * ratio)
            .sum()
    }

    /// The pool's free-space fragmentation in percent, as zpool's `fragmentation`: every
    /// free segment weighs its bytes by how badly its size serves allocations (ZFS's
    /// `zfs_frag_table`: 100 for 512 B–1 KiB, falling to 0 from 16 MiB up). `None` when
    /// nothing is free.
    pub fn fragmentation_percent(&self) -> Option<u64> {
        const TABLE: [u64; 16] = [
            100, 100, 98, 95, 90, 80, 70, 60, 50, 40, 30, 20, 15, 10, 5, 0,
        ];
        let st = self.lock();
        let (mut weighted, mut free) = (0u128, 0u128);
        for v in &st.alloc.vdevs {
            let mut seg = |len: u64| {
                if len > 0 {
                    let bucket = (63 - len.max(512).leading_zeros() as usize - 9).min(15);
                    weighted += u128::from(len) * u128::from(TABLE[bucket]);
                    free += u128::from(len);
                }
            };
            let mut at = 0u64;
            for (off, len) in v.allocated_extents() {
                seg(off.saturating_sub(at));
                at = at.max(off + len);
            }
            seg(v.size().saturating_sub(at));
        }
        (free > 0).then(|| (weighted / free) as u64)
    }

    /// Pool space now: (zpool SIZE, ALLOC raw, AVAIL as zfs list).
    pub fn space(&self) -> PoolUsage {
        let geo = self.pool.space();
        let (alloc, used, dirty) = match self.lock_for_report() {
            Some(st) => (
                st.alloc.allocated_bytes(),
                self.deflated_alloc(&st),
                st.dirty_bytes,
            ),
            // Suspended (a sync waits for `cairn clear`): the last committed txg's figures.
            None => {
                let per_top = self.pool.allocated_per_top();
                let used = self.deflated(per_top.iter().copied());
                (per_top.iter().sum(), used, 0)
            }
        };
        PoolUsage {
            size: geo.size,
            alloc,
            used,
            avail: geo.dspace.saturating_sub(geo.slop).saturating_sub(used),
            dirty,
        }
    }

    /// Whether `more` bytes fit next to what is allocated and dirty, outside the slop.
    fn space_fits(&self, st: &State, more: u64) -> bool {
        let geo = self.pool.space();
        // (Blocks written early are in the allocation already.)
        let unallocated = st.dirty_bytes.saturating_sub(st.presync.allocated_bytes);
        let used = self.deflated_alloc(st) + unallocated + more;
        used <= geo.dspace.saturating_sub(geo.slop)
    }

    /// Reserves room for `more` bytes of new data. Every dirty block needs new space
    /// (copy-on-write), and overwritten blocks stay allocated for two more txgs; so when the
    /// space does not fit, sync the open txg and let deferred frees drain (up to three
    /// syncs, like ZFS's write throttle waiting for txgs) before answering ENOSPC. The slop
    /// reserve keeps deletes and syncs possible on a full pool.
    pub(crate) fn reserve_space(&self, st: &mut State, more: u64) -> Result<(), StoreError> {
        for _ in 0..=FREE_DELAY_TXGS {
            if self.space_fits(st, more) {
                return Ok(());
            }
            if (st.dirty_bytes == 0 && st.deferred.is_empty()) || !self.sync_allowed_midway() {
                break;
            }
            self.sync_locked(st)?;
        }
        if self.space_fits(st, more) {
            Ok(())
        } else {
            Err(StoreError::NoSpace(self.pool.name().to_string()))
        }
    }
}

/// Space of the pool as the store sees it.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct PoolUsage {
    pub size: u64,
    /// Raw allocated bytes (zpool list ALLOC).
    pub alloc: u64,
    /// Allocated, in zfs list units.
    pub used: u64,
    pub avail: u64,
    /// Dirty bytes waiting for the next sync.
    pub dirty: u64,
}
