//! `attach`, `detach`, `add` and `remove` on a store in use (the pool service runs them
//! for its clients): the pool publishes a new vdev tree (`cairn_pool::reshape_in_use`),
//! the allocator learns of vdevs that came or go, and a txg sync commits the change.
//!
//! ```text
//!  attach   pool: new tree ─► sync                       (the service's resilver fills NEW)
//!  detach   pool: new tree ─► sync ─► clear the old side's labels
//!  add      pool: new tree ─► allocator: new vdevs ─► sync
//!  expand   devices measured ─► pool: new tree ─► sync ─► allocator: vdevs regrown ─► sync
//!  remove   allocator: vdev retired ─► log retired (syncs) ─► pool: new tree
//!           ─► allocator: vdev dropped (the last) or a hole ─► sync ─► clear its labels
//! ```
//!
//! The allocator never names a vdev the tree in use lacks: it gains vdevs after the tree
//! does, and a removed vdev is retired (nothing allocated there) before the tree loses it.
//! One change runs at a time in a process (`ONE_AT_A_TIME`), so the allocator's vdevs and
//! the tree's match again when it ends.

use std::sync::Mutex;

use cairn_pool::devices::DeviceOutcome;
use cairn_pool::io::alloc::VdevAllocator;

use crate::core::StoreCore;
use crate::error::StoreError;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

impl StoreCore {
    /// `cairn attach POOL EXISTING NEW` in use.
    pub fn attach_in_use(
        &self,
        existing: &str,
        new: &str,
        force: bool,
    ) -> Result<DeviceOutcome, StoreError> {
        let _one = one_at_a_time();
        let outcome = self.pool().attach_in_use(existing, new, force)?;
        self.sync()?;
        Ok(outcome)
    }

    /// `cairn detach POOL DEVICE` in use.
    pub fn detach_in_use(&self, device: &str) -> Result<(), StoreError> {
        let _one = one_at_a_time();
        let left = self.pool().detach_in_use(device)?;
        self.sync()?;
        left.clear_labels();
        Ok(())
    }

    /// `cairn add POOL VDEV…` in use (data and log vdevs); returns the pool's notes.
    pub fn add_in_use(&self, tokens: &[String], force: bool) -> Result<Vec<String>, StoreError> {
        let _one = one_at_a_time();
        let (added, notes) = self.pool().add_in_use(tokens, force)?;
        {
            let tops = self.pool().tops();
            let mut st = self.lock();
            for v in added {
                assert_eq!(
                    st.alloc.vdevs.len(),
                    v,
                    "the allocator has one entry per vdev"
                );
                let top = &tops[v];
                let mut vdev = VdevAllocator::new(top.config.asize, top.ashift());
                vdev.log = top.is_log();
                st.alloc.vdevs.push(vdev);
            }
        }
        self.sync()?;
        Ok(notes)
    }

    /// `cairn online -e` and `autoexpand=on` in use: vdevs whose devices grew take the
    /// room; (vdev, old asize, new asize) per vdev grown. Labels go to the devices' new
    /// ends (a txg sync, before the allocator may hand out the room where the old end
    /// labels were).
    pub fn expand_in_use(&self) -> Result<Vec<(usize, u64, u64)>, StoreError> {
        let _one = one_at_a_time();
        let grown = self.pool().expand_in_use()?;
        if grown.is_empty() {
            return Ok(grown);
        }
        self.sync()?;
        {
            let mut st = self.lock();
            for &(t, _, asize) in &grown {
                // An extent the new layout cannot hold leaves the vdev as it was until the
                // next open (which lays the allocator out afresh).
                if let Ok(vdev) = st.alloc.vdevs[t].regrown(asize) {
                    st.alloc.vdevs[t] = vdev;
                }
            }
        }
        self.sync()?;
        Ok(grown)
    }

    /// `cairn remove POOL DEV` (a log device) in use.
    pub fn remove_log_in_use(&self, device: &str) -> Result<(), StoreError> {
        let _one = one_at_a_time();
        let t = self.pool().removable_log(device)?;
        self.lock().alloc.vdevs[t].retired = true;
        let left = self
            .release_log_devices()
            .and_then(|()| Ok(self.pool().remove_log_in_use(device)?));
        let left = match left {
            Ok(left) => left,
            Err(e) => {
                self.lock().alloc.vdevs[t].retired = false;
                return Err(e);
            }
        };
        {
            let mut st = self.lock();
            assert_eq!(
                st.alloc.vdevs[t].allocated_bytes(),
                0,
                "its log was retired"
            );
            // The tree lost the vdev (it was the last) or holds a hole there (retired
            // for good, with no space).
            if self.pool().tops().len() == t {
                st.alloc.vdevs.pop();
            } else {
                st.alloc.vdevs[t] = hole_allocator(&self.pool().tops()[t]);
            }
        }
        self.sync()?;
        left.clear_labels();
        Ok(())
    }
}

/// The allocator's entry for a hole vdev (`TopConfig::hole`): a retired log device with
/// no space, so nothing is ever allocated there.
pub(crate) fn hole_allocator(top: &cairn_vdev::TopVdev) -> VdevAllocator {
    let mut vdev = VdevAllocator::new(0, top.ashift());
    vdev.log = true;
    vdev.retired = true;
    vdev
}
