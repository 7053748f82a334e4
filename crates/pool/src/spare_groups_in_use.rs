//! `detach`, `online` and `replace` in a `spare-N` group while the pool is in use: the
//! service that holds the pool runs them, as zpool does, while readers, writers and txg
//! syncs go on.
//!
//! ```text
//!  before                          detach s0 (the spare)          detach d1 (the failed leaf)
//!  raidz2-0                        raidz2-0                       raidz2-0
//!    spare-1  Slot{leaf d1,          d1  Slot::of(d1)               s0  Slot::of(s0)
//!      d1       spare s0}            (s0 AVAIL again;               (s0 leaves the spares;
//!      s0                             d1 resilvered once back)       d1's labels cleared)
//! ```
//! `online d1` is `detach s0`, then `online` of the leaf that has its slot back;
//! `replace d1 NEW` puts NEW in the slot under d1's GUID, stale with everything to copy,
//! and s0 is AVAIL again at once.
//!
//! Invariants:
//! - The new vdev tree's slot holds the same device (`Slot::of` takes the `Arc<Child>`
//!   the old slot holds), so I/O still in flight on an older tree updates the same
//!   states, DTL and counters.
//! - The spares' state follows from the tree (`spares_as_the_tree_says` in
//!   `crate::pool`): publishing the tree is the change, so a config written at any
//!   moment names each device once, as a leaf or as a spare.
//! - A leaf given its slot back missed every txg since it failed (the spare took its
//!   writes, its DTL stopped growing): its DTL is widened to everything from its first
//!   missed txg on (everything when none is recorded), so it is stale until a resilver
//!   has copied all of that.
//! - Resilvers are held off while the tree changes (the caller's `hold_off_resilvers`):
//!   they address leaves by slot.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use cairn_vdev::{Child, Slot, DTL_EVERYTHING};

use crate::devices::SpareSide;
use crate::error::PoolError;
use crate::pool::Pool;
use crate::reshape_in_use::LeftDevices;

impl Pool {
    /// `cairn detach POOL DEVICE` in use, where DEVICE is a side of the `spare-N` group
    /// in slot `c` of vdev `t`. Detaching the spare gives the slot back to the leaf it
    /// stood in for (AVAIL again); detaching that leaf keeps the spare in the slot for good
    /// (it leaves the spares list). The caller holds `spare_lock`, holds resilvers off,
    /// and syncs a txg before it clears the labels of what is returned.
    pub(crate) fn detach_spare_side_in_use(
        &self,
        device: &str,
        t: usize,
        c: usize,
        which: SpareSide,
    ) -> Result<LeftDevices, PoolError> {
        let Some((failed, spare)) = self.tops[t].children[c].spare_group() else {
            return Err(Self::device_error(
                "detach",
                device,
                "its spare group changed meanwhile; retry",
            ));
        };
        let mut tops = self.tree_over_same_slots();
        let mut tconfig = tops[t].config.clone();
        let mut kids = tops[t].children.clone();
        let left = match which {
            SpareSide::Spare => {
                self.check_gives_back(device, t, c, &failed)?;
                tconfig.leaves[c] = self.given_back_config(device, &failed, &spare)?;
                kids[c] = Arc::new(Slot::of(failed.clone()));
                if let Some(leaf) = &spare.leaf {
                    self.returned_spares
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((spare.guid, leaf.clone()));
                }
                Vec::new()
            }
            SpareSide::Failed => {
                // The live config already names the spare in the slot.
                tconfig.leaves[c] = self.live_config().vdevs[t].leaves[c].clone();
                if tconfig.leaves[c].guid != spare.guid {
                    return Err(Self::device_error(
                        "detach",
                        device,
                        "the pool's config does not name the spare in this slot; export and import the pool, then retry",
                    ));
                }
                kids[c] = Arc::new(Slot::of(spare.clone()));
                failed.offline.store(true, Ordering::SeqCst);
                vec![Child::new(
                    failed.guid,
                    failed.path.clone(),
                    failed.leaf.clone(),
                )]
            }
        };
        let parent = tops[t].display_name();
        tops[t] = self.top_over(tconfig, kids);
        self.publish_tree(tops)?;
        self.write_spare_labels();
        let gone = match which {
            SpareSide::Spare => &spare.path,
            SpareSide::Failed => &failed.path,
        };
        self.post_vdev_event("vdev_remove", gone, &parent);
        Ok(LeftDevices::new(left))
    }

    /// Refuses to give slot `c` of vdev `t` back to `failed` when the vdev could not serve
    /// every block without the spare (its other leaves missing beyond its redundancy).
    fn check_gives_back(
        &self,
        device: &str,
        t: usize,
        c: usize,
        failed: &Child,
    ) -> Result<(), PoolError> {
        let top = &self.tops[t];
        let others_unusable = (top.children.iter().enumerate())
            .filter(|&(i, slot)| i != c && !slot.is_usable())
            .count();
        let unusable = others_unusable + usize::from(!failed.is_usable());
        if unusable > top.shape().redundancy() {
            return Err(Self::device_error(
                "detach",
                device,
                "no valid replicas: its vdev cannot serve every block without this spare",
            ));
        }
        Ok(())
    }

    /// The config of `failed` taking its slot back from `spare`: as recorded when the spare
    /// took over, declining spares from now on, and missing every txg since it failed.
    fn given_back_config(
        &self,
        device: &str,
        failed: &Child,
        spare: &Child,
    ) -> Result<cairn_vdev::LeafConfig, PoolError> {
        let mut config = self.recorded_failed_config("detach", device, spare)?;
        failed.spare_declined.store(true, Ordering::Relaxed);
        config.spare_declined = true;
        config.dtl = failed.missed_since_it_failed();
        Ok(config)
    }

    /// The config of the leaf `spare` stands in for, as recorded when it took over.
    fn recorded_failed_config(
        &self,
        op: &'static str,
        device: &str,
        spare: &Child,
    ) -> Result<cairn_vdev::LeafConfig, PoolError> {
        (self.live_config().spares.into_iter())
            .find(|s| s.guid == spare.guid)
            .and_then(|s| s.replacing)
            .ok_or_else(|| {
                Self::device_error(
                    op,
                    device,
                    "the pool's config does not name the leaf this spare stands in for; export and import the pool, then retry",
                )
            })
    }

    /// `cairn replace POOL FAILED NEW` in use, FAILED the leaf a hot spare stands in for
    /// in slot `c` of vdev `t` (as in-process): `leaf`, opened from NEW and checked by the
    /// caller, takes the slot under FAILED's GUID (as `replace_in_use` keeps it), stale
    /// with everything to copy (the service's resilver fills it), and the spare goes back
    /// to the spares list at once. The caller holds `spare_lock`.
    pub(crate) fn replace_in_spare_group_in_use(
        &self,
        old: &str,
        t: usize,
        c: usize,
        leaf: Arc<dyn cairn_vdev::Leaf>,
    ) -> Result<(), PoolError> {
        let _no_resilver = self.hold_off_resilvers("replace", old)?;
        let Some((failed, spare)) = self.tops[t].children[c].spare_group() else {
            return Err(Self::device_error(
                "replace",
                old,
                "its spare group changed meanwhile; retry",
            ));
        };
        let mut config = self.recorded_failed_config("replace", old, &spare)?;
        let device = Child::new(failed.guid, leaf.path().to_string(), Some(leaf));
        device.mark_stale();
        device.set_dtl(vec![DTL_EVERYTHING]);
        config.path = device.path.clone();
        config.dtl = vec![DTL_EVERYTHING];
        (config.offline, config.offline_temporary) = (false, false);
        (config.faulted, config.spare_declined) = (false, false);
        let mut tops = self.tree_over_same_slots();
        let mut tconfig = tops[t].config.clone();
        let mut kids = tops[t].children.clone();
        tconfig.leaves[c] = config;
        kids[c] = Slot::shared(device);
        if let Some(spare_leaf) = &spare.leaf {
            self.returned_spares
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((spare.guid, spare_leaf.clone()));
        }
        tops[t] = self.top_over(tconfig, kids);
        self.publish_tree(tops)?;
        self.write_spare_labels();
        if let Some(old_leaf) = &failed.leaf {
            // It took no I/O while the spare served; cleared, no import mistakes it for
            // the leaf.
            let _ = cairn_vdev::label_io::clear_leaf_labels(old_leaf.as_ref());
        }
        Ok(())
    }
}
