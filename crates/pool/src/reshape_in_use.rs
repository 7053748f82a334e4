//! `attach`, `detach`, `add` and `remove` on a pool in use: the service that holds the
//! pool runs them for a client while readers, writers and txg syncs go on. Each builds a
//! new vdev tree over the same slots and publishes it (`crate::vdev_tree`); I/O in flight
//! finishes on the tree it started on.
//!
//! ```text
//!  check (plan_*) ─► new tree ─► remember the GUID sum ─► publish ─► config to labels
//!                                 before the change
//!  then the store:  sync a txg (its uberblock carries the new GUID sum)
//!                   ─► a device that left: its labels cleared, its lock released
//! ```
//!
//! Invariants:
//! - One vdev change at a time, and none while hot spares are put in (`spare_lock`):
//!   every tree swap happens under it.
//! - The uberblocks written before the change still belong to the pool: the GUID sum of
//!   the tree before is kept in the config (`prior_guid_sums`), so a crash between the
//!   new config reaching the labels and the next txg leaves an importable pool.
//! - An attached device is stale with everything to copy before any reader can see it;
//!   the service's resilver (which syncs first, so writes in flight on the old tree are
//!   in its walk) fills it.
//! - A device that leaves (detach, remove) takes no new I/O from an old tree either: it is
//!   marked offline there at once, and its labels are cleared only after the caller has
//!   synced a txg (no write issued through the old tree is in flight any more).
//! - Resilvers address leaves by slot (vdev, child index): `detach` and `remove`, which
//!   move slots, pause a running resilver (it resumes, or finds nothing left to do,
//!   after) and hold resilvers off until the new tree is in use (`hold_off_resilvers`).
//!   `attach` and `add` only append, so slots in use keep their meaning.
//! - A scrub goes on through a device change: it reads each block through the tree of
//!   the moment, and names the leaves whose DTLs it settles at its end by device, not by
//!   slot (`Pool::readable_leaves`); a device that left meanwhile is skipped.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use cairn_vdev::label_io::clear_leaf_labels;
use cairn_vdev::{Child, Slot, TopConfig, TopVdev};

use crate::devices::DeviceOutcome;
use crate::error::PoolError;
use crate::pool::Pool;

/// Devices that left the pool in use: their labels are cleared (and their locks
/// released) once the caller has synced a txg after the change.
#[must_use = "clear the labels after the next txg sync"]
pub struct LeftDevices(Vec<Child>);

impl LeftDevices {
    pub(crate) fn new(devices: Vec<Child>) -> LeftDevices {
        LeftDevices(devices)
    }

    /// Clears the labels of every device that left, so it can be used again.
    pub fn clear_labels(self) {
        for child in &self.0 {
            if let Some(leaf) = &child.leaf {
                let _ = clear_leaf_labels(leaf.as_ref());
                leaf.release();
            }
        }
    }
}

impl Pool {
    /// `cairn attach POOL EXISTING NEW` while the pool is in use: NEW serves the mirror at
    /// once, stale with everything to copy (the service's resilver fills it).
    pub fn attach_in_use(
        &self,
        existing: &str,
        new: &str,
        force: bool,
    ) -> Result<DeviceOutcome, PoolError> {
        let _one_at_a_time = self.spare_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.refuse_spare_group("attach", existing)?;
        let (t, config, child) = self.plan_attach(existing, new, force)?;
        let path = child.path.clone();
        let mut tops = self.tree_over_same_slots();
        let mut kids = tops[t].children.clone();
        kids.push(Slot::shared(child));
        tops[t] = self.top_over(config, kids);
        self.publish_tree(tops)?;
        self.post_vdev_event("vdev_attach", &path, existing);
        Ok(DeviceOutcome::NeedsResilver)
    }

    /// `cairn detach POOL DEVICE` while the pool is in use. The caller syncs a txg, then
    /// clears the returned device's labels.
    pub fn detach_in_use(&self, device: &str) -> Result<LeftDevices, PoolError> {
        let _one_at_a_time = self.spare_lock.lock().unwrap_or_else(|p| p.into_inner());
        let _no_resilver = self.hold_off_resilvers("detach", device)?;
        if let Some((t, c, which)) = self.find_in_spare_group(device) {
            return self.detach_spare_side_in_use(device, t, c, which);
        }
        let (t, c, config) = self.plan_detach(device)?;
        let mut tops = self.tree_over_same_slots();
        let mut kids = tops[t].children.clone();
        let gone = kids.remove(c);
        let parent = tops[t].display_name();
        tops[t] = self.top_over(config, kids);
        gone.offline.store(true, Ordering::SeqCst);
        self.publish_tree(tops)?;
        self.forget_needless_resilver()?;
        self.post_vdev_event("vdev_remove", &gone.path, &parent);
        Ok(LeftDevices(vec![take_child(&gone)]))
    }

    /// `cairn add POOL VDEV…` (data and log vdevs, hot spares) while the pool is in use;
    /// returns the indices of the new top-level vdevs (the store gives them space to
    /// allocate from) and the notes on them.
    pub fn add_in_use(
        &self,
        tokens: &[String],
        force: bool,
    ) -> Result<(std::ops::Range<usize>, Vec<String>), PoolError> {
        let _one_at_a_time = self.spare_lock.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, spares) = crate::spec::split_spares(tokens)?;
        self.add_spares_in_use(&spares, force)?;
        if tokens.is_empty() {
            let none = self.tops.len()..self.tops.len();
            return Ok((none, Vec::new()));
        }
        let mut notes = Vec::new();
        let added = self.new_tops(&tokens, force, &mut notes)?;
        let mut tops = self.tree_over_same_slots();
        let first = tops.len();
        tops.extend(added);
        let range = first..tops.len();
        let mut config = self.live_config();
        config.vdevs = tops.iter().map(|t| t.config.clone()).collect();
        config.validate().map_err(PoolError::BadSpec)?;
        self.publish_tree(tops)?;
        self.post_add_events(range.start);
        Ok((range, notes))
    }

    /// `add POOL spare DEV…` while the pool is in use: the spares are AVAIL at once (the
    /// service puts them in for failed leaves). All or none: every device is checked and
    /// opened before any is added. Called under `spare_lock`.
    fn add_spares_in_use(&self, devices: &[String], force: bool) -> Result<(), PoolError> {
        let mut new = Vec::with_capacity(devices.len());
        for (i, dev) in devices.iter().enumerate() {
            if devices[..i].contains(dev) {
                return Err(Self::device_error("add spare", dev, "it is named twice"));
            }
            new.push(self.new_spare(dev, force)?);
        }
        self.added_spares
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(new);
        if !devices.is_empty() {
            self.write_config_labels(0)?;
            self.write_spare_labels();
            self.save_record()?;
        }
        Ok(())
    }

    /// `cairn remove POOL DEV` (a log device) while the pool is in use. The store must
    /// have stopped allocating on it and retired its log (`StoreCore::remove_log_in_use`).
    pub fn remove_log_in_use(&self, device: &str) -> Result<LeftDevices, PoolError> {
        let _one_at_a_time = self.spare_lock.lock().unwrap_or_else(|p| p.into_inner());
        let _no_resilver = self.hold_off_resilvers("remove", device)?;
        let t = self.removable_log(device)?;
        let mut tops = self.tree_over_same_slots();
        let gone = crate::devices::take_out_top(&mut tops, t);
        for child in gone.children.iter() {
            child.offline.store(true, Ordering::SeqCst);
        }
        let name = gone.display_name();
        self.publish_tree(tops)?;
        self.forget_needless_resilver()?;
        self.post_event("sysevent.fs.zfs.vdev_remove", Some(&name), &[]);
        Ok(LeftDevices(gone.children.iter().map(take_child).collect()))
    }

    /// `cairn online -e` and `autoexpand=on` while the pool is in use: every device is
    /// measured again, and each vdev whose devices all grew takes the room. Returns
    /// (vdev, old asize, new asize) per vdev grown; the store then lets its allocator
    /// cover them (`StoreCore::expand_in_use`).
    pub fn expand_in_use(&self) -> Result<Vec<(usize, u64, u64)>, PoolError> {
        let _one_at_a_time = self.spare_lock.lock().unwrap_or_else(|p| p.into_inner());
        for top in self.tops.iter() {
            for leaf in top.children.iter().filter_map(|c| c.leaf.as_ref()) {
                // A device that cannot be measured keeps its size (its vdev waits).
                let _ = leaf.refresh_size();
            }
        }
        if !self
            .tops
            .iter()
            .any(|top| crate::devices::grown_config(top).is_some())
        {
            return Ok(Vec::new()); // (the service asks every second)
        }
        let mut grown = Vec::new();
        let mut tops = self.tree_over_same_slots();
        for (t, top) in tops.iter_mut().enumerate() {
            if let Some(config) = crate::devices::grown_config(top) {
                grown.push((t, top.config.asize, config.asize));
                *top = self.top_over(config, top.children.clone());
            }
        }
        if grown.is_empty() {
            return Ok(grown);
        }
        self.publish_tree(tops)?;
        self.post_expand_events(&grown);
        Ok(grown)
    }

    /// The top-level vdev of the log device `device` names (it can be removed: its log
    /// blocks are retired first, and a vdev after it keeps its index, see `take_out_top`).
    pub fn removable_log(&self, device: &str) -> Result<usize, PoolError> {
        self.find_log_device(device)
    }

    /// The vdev tree in use, rebuilt over the same slots (each vdev's config kept).
    pub(crate) fn tree_over_same_slots(&self) -> Vec<TopVdev> {
        self.tops
            .iter()
            .map(|top| self.top_over(top.config.clone(), top.children.clone()))
            .collect()
    }

    pub(crate) fn top_over(&self, config: TopConfig, children: Vec<Arc<Slot>>) -> TopVdev {
        let top = TopVdev::from_slots(config, children);
        top.set_read_policy(self.props().readpolicy);
        top
    }

    /// Makes `tops` the vdev tree in use and writes the new config to every label (the
    /// GUID sum before the change is kept with it; see the module comment).
    pub(crate) fn publish_tree(&self, tops: Vec<TopVdev>) -> Result<(), PoolError> {
        let before = self.live_config().guid_sum();
        self.remember_guid_sum(before);
        self.tops.replace(tops);
        self.write_config_labels(0)?;
        self.save_record()
    }

    fn refuse_spare_group(&self, op: &'static str, device: &str) -> Result<(), PoolError> {
        if self.find_in_spare_group(device).is_some() {
            return Err(Self::device_error(
                op,
                device,
                format!(
                    "it is in a spare-N group, where the service does not {op} yet: `cairn detach {pool} SPARE` gives the slot back to the failed leaf, `cairn detach {pool} FAILED` keeps the spare there for good; then retry",
                    pool = self.name()
                ),
            ));
        }
        Ok(())
    }

    /// Keeps resilvers (which address leaves by slot) off the tree while `op` (a detach
    /// or remove, which move slots) changes it: a running resilver pauses at its next
    /// batch (keeping its resume point) and the service starts it again after the change,
    /// as zpool lets a detach cancel a replace's resilver.
    pub(crate) fn hold_off_resilvers(
        &self,
        op: &'static str,
        device: &str,
    ) -> Result<crate::pool::ScansHeld<'_>, PoolError> {
        self.hold_scans(RESILVER_PAUSE_WAIT).ok_or_else(|| {
            Self::device_error(
                op,
                device,
                "the running resilver did not pause within a minute; retry",
            )
        })
    }

    /// After a device left: a resume point for leaves of which none needs a resilver any
    /// more (the detached one was the last) goes, so `status` stops showing one.
    fn forget_needless_resilver(&self) -> Result<(), PoolError> {
        if !self.needs_resilver() && self.resilver_checkpoint().is_some() {
            self.set_resilver_checkpoint(None)?;
        }
        Ok(())
    }
}

/// How long a device change waits for a running resilver to pause (it stops between
/// batches of a few MiB).
const RESILVER_PAUSE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// A handle on a slot's device for clearing its labels (the slot itself stays with the
/// old trees).
fn take_child(slot: &Arc<Slot>) -> Child {
    Child::new(slot.guid, slot.path.clone(), slot.leaf.clone())
}
