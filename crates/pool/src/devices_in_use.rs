//! `offline`, `online`, `clear` and `replace` on a pool in use: the service that holds the
//! pool runs them for a client (`cairn serve`), while readers, writers, txg syncs and
//! resilvers go on.
//!
//! These change no vdev's shape: they flip a leaf's state flags (atomics every I/O reads),
//! or put a new device in a leaf's slot (`Slot::take_replacement`), and write the config to
//! the labels. `attach`, `detach`, `add` and `remove` publish a new vdev tree
//! (`crate::reshape_in_use`), and so do `online` and `replace` of a leaf a hot spare
//! stands in for (`crate::spare_groups_in_use`).
//!
//! A device replaced in use keeps the leaf's GUID. The GUID sum in the uberblocks then
//! stays the same, so the uberblocks written before the new config reached the labels
//! still belong to the pool (a new GUID would orphan them until the next txg: a crash in
//! between would leave no uberblock to import). The old device's labels are cleared, so
//! an import never finds two devices for the leaf.
//!
//! Invariants, for a leaf that comes back (online, or clear of a fault) while txgs run:
//! - It is marked stale before it takes I/O again, so no read trusts it until the resilver
//!   has written what it missed (or a checksum proves a block good).
//! - Its DTL gains every txg that may have written to the pool without it: the txg being
//!   synced or filled now (newest on disk + 1) and the one after it (background writes of
//!   the open txg can reach the leaves before its sync), and `missed_write` makes whatever
//!   txg syncs next join it too. A txg in that range it did receive in full costs only a
//!   resilver that finds its blocks already right.
//! - Going offline needs nothing more: a leaf that cannot take writes when a txg ends
//!   gets that txg in its DTL (`Child::note_txg_synced`).
//! - One device operation runs at a time, and none while hot spares are put in
//!   (`spare_lock`).

use std::sync::atomic::Ordering;

use cairn_vdev::label_io::{clear_leaf_labels, read_leaf_labels};
use cairn_vdev::{Child, LeafOptions, Slot, VdevError, DTL_EVERYTHING};

use crate::devices::{DeviceOutcome, SpareSide};
use crate::error::PoolError;
use crate::leaves::open_leaf;
use crate::pool::{refuse_if_in_use, Pool};

impl Pool {
    /// `cairn offline [-t] POOL DEVICE` while the pool is in use.
    pub fn offline_in_use(
        &self,
        device: &str,
        temporary: bool,
    ) -> Result<DeviceOutcome, PoolError> {
        let _one_at_a_time = self.spare_lock.lock().unwrap_or_else(|p| p.into_inner());
        let (t, c) = self.find_plain_leaf("offline", device)?;
        self.check_may_go_offline(t, c, device)?;
        let child = &self.tops[t].children[c];
        child.offline_temporary.store(temporary, Ordering::Relaxed);
        child.offline.store(true, Ordering::Relaxed);
        self.publish_config()?;
        Ok(DeviceOutcome::Done)
    }

    /// `cairn online POOL DEVICE` while the pool is in use: the leaf takes I/O again and,
    /// when it missed txgs, waits stale for the resilver (the service runs it). A leaf a
    /// hot spare stands in for takes its slot back first (the spare is AVAIL again), as
    /// in-process.
    pub fn online_in_use(&self, device: &str) -> Result<DeviceOutcome, PoolError> {
        let _one_at_a_time = self.spare_lock.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((t, c, SpareSide::Failed)) = self.find_in_spare_group(device) {
            let opened = self.tops[t].children[c]
                .replaced()
                .is_some_and(|failed| failed.leaf.is_some());
            if !opened {
                return Err(self.not_opened_in_service(device));
            }
            let _no_resilver = self.hold_off_resilvers("online", device)?;
            // Nothing leaves the pool: the spare goes back to the spares list.
            self.detach_spare_side_in_use(device, t, c, SpareSide::Spare)?
                .clear_labels();
        }
        let (t, c) = self.find_plain_leaf("online", device)?;
        let child = &self.tops[t].children[c];
        if child.leaf.is_none() {
            return Err(self.not_opened_in_service(device));
        }
        self.bring_back(child);
        child.offline.store(false, Ordering::SeqCst);
        child.offline_temporary.store(false, Ordering::Relaxed);
        child.spare_declined.store(false, Ordering::Relaxed);
        self.publish_config()?;
        Ok(outcome_of(child))
    }

    fn not_opened_in_service(&self, device: &str) -> PoolError {
        Self::device_error(
            "online",
            device,
            format!(
                "it could not be opened when the service opened the pool; restart the service (or stop it and run `cairn online {} {device}`)",
                self.name()
            ),
        )
    }

    /// `cairn clear POOL [DEVICE]` while the pool is in use: error counters reset, faults
    /// lifted (an offline leaf stays offline).
    pub fn clear_in_use(&self, device: Option<&str>) -> Result<DeviceOutcome, PoolError> {
        let outcome = self
            .clear_leaves_in_use(device)
            .map_err(|e| match self.io_suspended() {
                Some(_) => self.still_suspended(e),
                None => e,
            })?;
        // A suspended pool's waiting writes go again now (`crate::suspension`), after the
        // spare lock is released: the txg they finish takes it.
        self.resume_io()?;
        Ok(outcome)
    }

    fn clear_leaves_in_use(&self, device: Option<&str>) -> Result<DeviceOutcome, PoolError> {
        let _one_at_a_time = self.spare_lock.lock().unwrap_or_else(|p| p.into_inner());
        let picked = self.leaves_named(device)?;
        let mut outcome = DeviceOutcome::Done;
        for (t, c) in picked {
            let child = &self.tops[t].children[c];
            if child.faulted.load(Ordering::Relaxed) || child.removed.load(Ordering::Relaxed) {
                self.bring_back(child);
            } else if !child.dtl_ranges().is_empty() && child.is_usable() {
                // It missed txgs (as `clear_device`): the resilver copies them.
                child.mark_stale();
            }
            child.stats.reset();
            if outcome_of(child) == DeviceOutcome::NeedsResilver {
                outcome = DeviceOutcome::NeedsResilver;
            }
        }
        self.publish_config()?;
        Ok(outcome)
    }

    /// `cairn replace POOL OLD [NEW]` while the pool is in use: NEW (or a new device at
    /// OLD's path) serves OLD's slot from now on, stale with everything to copy; the
    /// service's resilver fills it. The same device again (its path still opens the file
    /// or disk the pool holds) is resilvered in place with everything.
    pub fn replace_in_use(
        &self,
        old: &str,
        new: Option<&str>,
        force: bool,
    ) -> Result<DeviceOutcome, PoolError> {
        let _one_at_a_time = self.spare_lock.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((t, c, SpareSide::Failed)) = self.find_in_spare_group(old) {
            let leaf = self.open_replacement("replace", old, new, t, c, force)?;
            self.replace_in_spare_group_in_use(old, t, c, leaf)?;
            return Ok(DeviceOutcome::NeedsResilver);
        }
        let (t, c) = self.find_plain_leaf("replace", old)?;
        let slot = &self.tops[t].children[c];
        let spec = new.unwrap_or(&slot.path).to_string();
        if spec != slot.path && self.find_leaf(&spec).is_ok() {
            return Err(Self::device_error(
                "replace",
                &spec,
                "it is already part of this pool",
            ));
        }
        let leaf = match open_leaf(&spec, LeafOptions::default()) {
            Ok(leaf) => leaf,
            Err(VdevError::Locked { .. }) if spec == slot.path && slot.leaf.is_some() => {
                // The very device the slot holds: copy everything to it again.
                self.bring_back(slot);
                slot.set_dtl(vec![DTL_EVERYTHING]);
                slot.offline.store(false, Ordering::SeqCst);
                self.publish_config()?;
                return Ok(DeviceOutcome::NeedsResilver);
            }
            Err(e) => return Err(e.into()),
        };
        refuse_if_in_use(leaf.as_ref(), &self.home, force)?;
        self.check_fits("replace", t, c, leaf.as_ref())?;
        let device = Child::new(slot.guid, leaf.path().to_string(), Some(leaf));
        device.mark_stale();
        device.set_dtl(vec![DTL_EVERYTHING]);
        let old_leaf = slot.leaf.clone();
        if !slot.take_replacement(device) {
            return Err(Self::device_error(
                "replace",
                old,
                format!(
                    "it was replaced once since the service opened the pool; restart the service (or stop it and run `cairn replace {} {old} …`)",
                    self.name()
                ),
            ));
        }
        self.publish_config()?;
        if let Some(old_leaf) = old_leaf {
            // It takes no more I/O; cleared, no import mistakes it for the leaf.
            let _ = clear_leaf_labels(old_leaf.as_ref());
        }
        Ok(DeviceOutcome::NeedsResilver)
    }

    /// Opens NEW to replace the failed leaf `old` in a spare group (slot `c` of vdev `t`):
    /// not another device of this pool or another pool's (unless `force` allows), big
    /// enough. Without NEW, or with the failed leaf's own path, a new device at that path
    /// (a disk swapped in place).
    fn open_replacement(
        &self,
        op: &'static str,
        old: &str,
        new: Option<&str>,
        t: usize,
        c: usize,
        force: bool,
    ) -> Result<std::sync::Arc<dyn cairn_vdev::Leaf>, PoolError> {
        let failed_path = self.tops[t].children[c].replaced().map(|f| f.path.clone());
        let Some(new) = new.map(str::to_string).or(failed_path) else {
            return Err(Self::device_error(
                op,
                old,
                "its spare group changed meanwhile; retry",
            ));
        };
        let in_place = self.find_in_spare_group(&new) == Some((t, c, SpareSide::Failed));
        if !in_place && (self.find_leaf(&new).is_ok() || self.find_in_spare_group(&new).is_some()) {
            return Err(Self::device_error(
                op,
                &new,
                "it is already part of this pool",
            ));
        }
        let leaf = match open_leaf(&new, LeafOptions::default()) {
            Err(VdevError::Locked { .. }) if in_place => {
                return Err(Self::device_error(
                    op,
                    old,
                    format!(
                        "the failed device is still there and open: `cairn online {} {old}` brings it back, or name a new device",
                        self.name()
                    ),
                ))
            }
            opened => opened?,
        };
        refuse_if_in_use(leaf.as_ref(), &self.home, force)?;
        self.check_fits(op, t, c, leaf.as_ref())?;
        Ok(leaf)
    }

    /// `autoreplace=on`: the paths of leaves that are missing, faulted or removed where a
    /// blank device (no cairn label: a new disk, a new file) now opens. The service puts
    /// each in its leaf's place (`replace_in_use` with no new device) every second.
    pub fn autoreplace_candidates(&self) -> Vec<String> {
        if !self.props().autoreplace {
            return Vec::new();
        }
        let failed = |slot: &Slot| {
            slot.leaf.is_none()
                || slot.faulted.load(Ordering::Relaxed)
                || slot.removed.load(Ordering::Relaxed)
        };
        self.tops
            .iter()
            .flat_map(|top| top.children.iter())
            .filter(|slot| failed(slot) && !slot.offline.load(Ordering::Relaxed))
            .filter(|slot| slot.spare().is_none() && slot.replacement().is_none())
            .filter(|slot| is_blank(&slot.path))
            .map(|slot| slot.path.clone())
            .collect()
    }

    /// A leaf of a plain slot (no hot spare in it); a device of a `spare-N` group is
    /// refused with what to do (`crate::spare_groups_in_use` has what runs there).
    fn find_plain_leaf(&self, op: &'static str, device: &str) -> Result<(usize, usize), PoolError> {
        let (t, c) = match self.find_in_spare_group(device) {
            Some((t, c, _)) => (t, c),
            None => self.find_leaf(device)?,
        };
        let slot = &self.tops[t].children[c];
        if let (Some(failed), Some(spare)) = (slot.replaced(), slot.spare()) {
            let pool = self.name();
            return Err(Self::device_error(
                op,
                device,
                format!(
                    "hot spare '{}' stands in for '{}' there, and the service does not {op} inside a spare group: `cairn detach {pool} {}` gives the slot back to the failed leaf (then {op} it), `cairn detach {pool} {}` keeps the spare there for good",
                    spare.path, failed.path, spare.path, failed.path
                ),
            ));
        }
        Ok((t, c))
    }

    /// Readies a leaf that was offline or faulted to take I/O again (the invariants at the
    /// top): stale, its DTL widened, its fault lifted. An offline leaf stays offline until
    /// the caller (`online`) says otherwise, after this.
    fn bring_back(&self, child: &Child) {
        let newest = self.uberblocks().first().map_or(0, |u| u.txg);
        {
            // Txgs newest + 1 and newest + 2 (a range is `[start, end)`).
            let mut dtl = child.dtl.lock().unwrap_or_else(|p| p.into_inner());
            cairn_vdev::dtl::add_range(&mut dtl, in_flight_txgs(newest));
        }
        child.mark_stale();
        child.missed_write.store(true, Ordering::SeqCst);
        child.clear_fault();
    }

    /// Writes the live config to every label and the pool record: what an import sees.
    fn publish_config(&self) -> Result<(), PoolError> {
        self.write_config_labels(0)?;
        self.save_record()
    }
}

/// Whether the device at `path` opens and holds no cairn label (a new disk, a new file).
fn is_blank(path: &str) -> bool {
    let Ok(leaf) = open_leaf(path, LeafOptions::inspect()) else {
        return false;
    };
    let labels = read_leaf_labels(leaf.as_ref());
    labels.best_config().is_none() && labels.uberblocks.is_empty()
}

/// The txgs that may be writing to the pool when the newest on disk is `newest`: the one
/// being synced or filled (`newest + 1`) and the open one after it (`newest + 2`), as a DTL
/// range `[start, end)`.
fn in_flight_txgs(newest: u64) -> (u64, u64) {
    (newest + 1, newest + 3)
}

fn outcome_of(child: &Child) -> DeviceOutcome {
    if child.stale.load(Ordering::Relaxed) && !child.dtl_ranges().is_empty() {
        DeviceOutcome::NeedsResilver
    } else {
        DeviceOutcome::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_txgs_in_flight_are_the_next_two() {
        let mut dtl = Vec::new();
        cairn_vdev::dtl::add_range(&mut dtl, in_flight_txgs(41));
        for (txg, missed) in [(41, false), (42, true), (43, true), (44, false)] {
            assert_eq!(cairn_vdev::dtl::contains(&dtl, txg), missed, "txg {txg}");
        }
    }
}
