//! Device management with zpool's grammar: offline, online, clear, replace, attach, detach
//! and add. Each operation changes the config and writes it (with an uberblock pointing at
//! the newest tree) to the labels; leaves that need data get a DTL and are marked stale, and
//! the object store's resilver (`cairn_objset::resilver`) copies what they miss.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use cairn_geometry::{leaf_asize, VdevShape};
use cairn_vdev::label_io::{clear_leaf_labels, write_leaf_config};
use cairn_vdev::{
    new_guid, Child, LabelConfig, Leaf, LeafConfig, LeafOptions, Slot, SpareConfig, TopConfig,
    TopVdev, Uberblock, DTL_EVERYTHING,
};

use crate::error::PoolError;
use crate::leaves::open_leaf;
use crate::pool::{open_new_leaves, refuse_if_in_use, CreateOptions, Pool};
use crate::spec::{check_replication, TopKind, TopSpec};

/// Which side of a `spare-N` group a device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SpareSide {
    /// The hot spare standing in.
    Spare,
    /// The failed leaf it stands in for.
    Failed,
}

/// What a device operation left to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceOutcome {
    Done,
    /// A leaf needs a resilver before it holds all its data.
    NeedsResilver,
}

impl Pool {
    /// Finds a leaf by the path it was given with, its file name, or its GUID.
    pub fn find_leaf(&self, device: &str) -> Result<(usize, usize), PoolError> {
        let base = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
        for (t, top) in self.tops.iter().enumerate() {
            for (c, child) in top.children.iter().enumerate() {
                let lc = &top.config.leaves[c];
                if child.path == device
                    || lc.path == device
                    || child.guid.to_string() == device
                    || (!device.contains('/') && base(&child.path) == device)
                {
                    return Ok((t, c));
                }
            }
        }
        Err(PoolError::Device {
            op: "find",
            device: device.to_string(),
            why: format!(
                "no such device in pool '{}'; `cairn status {}` lists its devices",
                self.name(),
                self.name()
            ),
        })
    }

    pub(crate) fn device_error(
        op: &'static str,
        device: &str,
        why: impl Into<String>,
    ) -> PoolError {
        PoolError::Device {
            op,
            device: device.to_string(),
            why: why.into(),
        }
    }

    /// Whether the top-level vdev can still serve every block without child `c`.
    pub(crate) fn can_lose(&self, t: usize, c: usize) -> bool {
        let top = &self.tops[t];
        let others_unreadable = top
            .children
            .iter()
            .enumerate()
            .filter(|&(i, ch)| i != c && !ch.is_readable())
            .count();
        others_unreadable < top.shape().redundancy()
    }

    /// Refuses to take child `c` of vdev `t` offline when the others could not serve its
    /// data alone.
    pub(crate) fn check_may_go_offline(
        &self,
        t: usize,
        c: usize,
        device: &str,
    ) -> Result<(), PoolError> {
        if !self.can_lose(t, c) && self.tops[t].children[c].is_readable() {
            return Err(Self::device_error(
                "offline",
                device,
                "no valid replicas: the other devices of its vdev cannot hold the data alone",
            ));
        }
        Ok(())
    }

    /// `cairn offline [-t] POOL DEVICE`: no more I/O to the device. Refused when the vdev
    /// would lose its last redundancy for some data.
    pub fn offline(&mut self, device: &str, temporary: bool) -> Result<DeviceOutcome, PoolError> {
        self.settle_spares();
        if let Some((t, c, SpareSide::Failed)) = self.find_in_spare_group(device) {
            let spare = self.tops[t].children[c].path.clone();
            return Err(Self::device_error(
                "offline",
                device,
                format!("hot spare '{spare}' already serves in its place; `cairn detach {} {spare}` gives the slot back, `cairn replace {} {device} NEW` puts a new disk in", self.name(), self.name()),
            ));
        }
        let (t, c) = self.find_leaf(device)?;
        self.check_may_go_offline(t, c, device)?;
        let child = &self.tops[t].children[c];
        child.offline.store(true, Ordering::Relaxed);
        child.offline_temporary.store(temporary, Ordering::Relaxed);
        self.commit_config()?;
        Ok(DeviceOutcome::Done)
    }

    /// `cairn online POOL DEVICE`: I/O to the device again (re-opening it if it was
    /// missing); lifts a fault. Needs a resilver when it missed txgs.
    pub fn online(&mut self, device: &str) -> Result<DeviceOutcome, PoolError> {
        self.settle_spares();
        // A leaf a hot spare stands in for takes its slot back (the spare is AVAIL again)
        // and resilvers what it missed.
        if let Some((t, c, SpareSide::Failed)) = self.find_in_spare_group(device) {
            self.detach_in_spare_group(t, c, SpareSide::Spare)?;
            self.settle_spares();
        }
        let (t, c) = self.find_leaf(device)?;
        if self.tops[t].children[c].leaf.is_none() {
            self.reopen_child(t, c)
                .map_err(|why| Self::device_error("online", device, why))?;
        }
        let child = &self.tops[t].children[c];
        child.offline.store(false, Ordering::Relaxed);
        child.offline_temporary.store(false, Ordering::Relaxed);
        child.spare_declined.store(false, Ordering::Relaxed);
        child.clear_fault();
        let stale = !child.dtl_ranges().is_empty();
        child.stale.store(stale, Ordering::Relaxed);
        self.commit_config()?;
        Ok(if stale {
            DeviceOutcome::NeedsResilver
        } else {
            DeviceOutcome::Done
        })
    }

    /// Opens a child that was missing when the pool was opened.
    fn reopen_child(&mut self, t: usize, c: usize) -> Result<(), String> {
        let lc = &self.config.vdevs[t].leaves[c];
        let (leaf, _) = crate::pool::open_member(&lc.path, self.config.guid, lc.guid)?;
        let old = &self.tops[t].children[c];
        let child = Child::new(lc.guid, leaf.path().to_string(), Some(leaf));
        child.set_dtl(old.dtl_ranges());
        self.tops[t].children[c] = Slot::shared(child);
        Ok(())
    }

    /// The leaf named `device`, or every leaf when none is named (`clear`).
    pub(crate) fn leaves_named(
        &self,
        device: Option<&str>,
    ) -> Result<Vec<(usize, usize)>, PoolError> {
        Ok(match device {
            Some(d) => vec![self.find_leaf(d)?],
            None => (0..self.tops.len())
                .flat_map(|t| (0..self.tops[t].children.len()).map(move |c| (t, c)))
                .collect(),
        })
    }

    /// `cairn clear POOL [DEVICE]`: resets error counters and lifts faults (all leaves when
    /// no device is named). Leaves that missed txgs need a resilver.
    pub fn clear_device(&mut self, device: Option<&str>) -> Result<DeviceOutcome, PoolError> {
        self.settle_spares();
        let picked = self.leaves_named(device)?;
        let mut outcome = DeviceOutcome::Done;
        for (t, c) in picked {
            let child = &self.tops[t].children[c];
            child.clear_fault();
            child.stats.reset();
            if !child.dtl_ranges().is_empty() && child.is_usable() {
                child.mark_stale();
                outcome = DeviceOutcome::NeedsResilver;
            }
        }
        self.commit_config()?;
        self.save_record()?;
        Ok(outcome)
    }

    /// `cairn replace POOL OLD [NEW]`: NEW (or, omitted, a new disk at OLD's path) takes
    /// OLD's place and is resilvered with everything.
    pub fn replace(
        &mut self,
        old: &str,
        new: Option<&str>,
        force: bool,
    ) -> Result<DeviceOutcome, PoolError> {
        self.settle_spares();
        let spare_in_use = self.spare_replacing(old);
        let (t, c) = match spare_in_use {
            // OLD failed and a spare stands in its slot: NEW takes the slot from the spare.
            Some(s) => self.find_leaf(&self.config.spares[s].guid.to_string())?,
            None => self.find_leaf(old)?,
        };
        let old_path = match spare_in_use {
            Some(s) => self.config.spares[s]
                .replacing
                .as_ref()
                .map(|l| l.path.clone())
                .unwrap_or_default(),
            None => self.tops[t].children[c].path.clone(),
        };
        let new_spec = new.unwrap_or(&old_path).to_string();
        let same_device = new_spec == old_path;
        let leaf = if same_device && spare_in_use.is_some() {
            // A failed leaf that went bad while the pool was open is still open (and
            // locked) in its spare group: use the same handle.
            let failed = self.tops[t].children[c].replaced();
            match failed.and_then(|f| f.leaf.clone()) {
                Some(leaf) => leaf,
                None => open_leaf(&new_spec, LeafOptions::default())?,
            }
        } else if same_device {
            match self.tops[t].children[c].leaf.clone() {
                // The old leaf is open (and locked) here: use the same handle.
                Some(leaf) => leaf,
                None => open_leaf(&new_spec, LeafOptions::default())?,
            }
        } else {
            if self.find_leaf(&new_spec).is_ok() {
                return Err(Self::device_error(
                    "replace",
                    &new_spec,
                    "it is already part of this pool",
                ));
            }
            let leaf = open_leaf(&new_spec, LeafOptions::default())?;
            refuse_if_in_use(leaf.as_ref(), &self.home, force)?;
            leaf
        };
        self.check_fits("replace", t, c, leaf.as_ref())?;
        let newest = self.newest_uberblock();
        let child = new_stale_child(leaf.clone());
        let lc = LeafConfig::new(child.guid, child.path.clone(), leaf_asize(leaf.size()));
        self.config.vdevs[t].leaves[c] = lc.clone();
        self.tops[t].config.leaves[c] = lc;
        let spare_leaf = self.tops[t].children[c]
            .spare()
            .and_then(|s| s.leaf.clone());
        self.tops[t].children[c] = Slot::shared(child);
        if let Some(s) = spare_in_use {
            // The spare left its slot: AVAIL again, with the handle it had there (or
            // opened again when the pool was opened without it).
            self.config.spares[s].replacing = None;
            let path = self.config.spares[s].path.clone();
            self.spare_leaves[s] = match spare_leaf {
                Some(leaf) => Some(leaf),
                None => open_leaf(&path, LeafOptions::default()).ok(),
            };
        }
        self.commit_config_keeping(newest)?;
        self.write_spare_labels();
        self.save_record()?;
        Ok(DeviceOutcome::NeedsResilver)
    }

    /// The spare standing in for `device` (a failed leaf's path or GUID), if any.
    fn spare_replacing(&self, device: &str) -> Option<usize> {
        self.config.spares.iter().position(|s| {
            s.replacing
                .as_ref()
                .is_some_and(|l| l.path == device || l.guid.to_string() == device)
        })
    }

    /// Adds hot spares (`spare DEV…` in create or add); their labels name the pool.
    pub fn add_spares(&mut self, devices: &[String], force: bool) -> Result<(), PoolError> {
        self.settle_spares();
        for dev in devices {
            let (spare, leaf) = self.new_spare(dev, force)?;
            self.config.spares.push(spare);
            self.spare_leaves.push(Some(leaf));
        }
        if !devices.is_empty() {
            self.bump_config()?;
            self.write_spare_labels();
        }
        Ok(())
    }

    /// A new hot spare on `dev`, opened: refused when the device is part of this pool
    /// already or in use elsewhere (unless `force` allows an exported pool's).
    pub(crate) fn new_spare(
        &self,
        dev: &str,
        force: bool,
    ) -> Result<(SpareConfig, Arc<dyn Leaf>), PoolError> {
        let known = self.live_config().spares.iter().any(|s| s.path == dev);
        if self.find_leaf(dev).is_ok() || known {
            return Err(Self::device_error(
                "add spare",
                dev,
                "it is already part of this pool",
            ));
        }
        let leaf = open_leaf(dev, LeafOptions::default())?;
        refuse_if_in_use(leaf.as_ref(), &self.home, force)?;
        let spare = SpareConfig {
            guid: new_guid(),
            path: leaf.path().to_string(),
            asize: leaf_asize(leaf.size()),
            replacing: None,
        };
        Ok((spare, leaf))
    }

    /// Writes the config to the labels of spares not in use (a spare in use is a leaf).
    pub(crate) fn write_spare_labels(&self) {
        let config = self.live_config();
        for spare in &config.spares {
            let Some(leaf) = self
                .spare_leaf(spare.guid)
                .filter(|_| spare.replacing.is_none())
            else {
                continue;
            };
            let label = LabelConfig {
                pool: config.clone(),
                leaf_guid: spare.guid,
                top_guid: 0,
            };
            // A spare whose label cannot be written shows as UNAVAIL next time; no error.
            let _ = write_leaf_config(leaf.as_ref(), &label).and_then(|_| {
                leaf.flush().map_err(|e| cairn_vdev::VdevError::Io {
                    path: spare.path.clone(),
                    source: e,
                })
            });
        }
    }

    /// Opens the spare devices (after `open`); a spare that cannot be opened stays `None`.
    pub(crate) fn open_spares(&mut self) {
        self.spare_leaves = self
            .config
            .spares
            .iter()
            .map(|s| {
                if s.replacing.is_some() {
                    // In use: the leaf in its slot holds the device open.
                    return None;
                }
                crate::pool::open_member(&s.path, self.config.guid, s.guid)
                    .ok()
                    .map(|(leaf, _)| leaf)
            })
            .collect();
    }

    /// Folds hot spares that took over while the pool was in use (`take_over_failed_leaves`)
    /// into `config` and `spare_leaves`, so the device operations see them, and spares
    /// added in use (`live_config` lists them after the others).
    fn settle_spares(&mut self) {
        let config = self.live_config();
        // In use: its slot holds the device.
        let leaves = (config.spares.iter())
            .map(|s| match s.replacing {
                Some(_) => None,
                None => self.spare_leaf(s.guid),
            })
            .collect();
        self.config = config;
        self.spare_leaves = leaves;
        self.added_spares
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.returned_spares
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Puts an available spare in the slot of every faulted, removed or missing leaf (not
    /// offline ones: the administrator took those out), when the pool is opened. The
    /// spare then needs a resilver. Returns whether a spare was activated.
    pub fn activate_spares(&mut self) -> Result<bool, PoolError> {
        self.settle_spares();
        // Found before leaf GUIDs change (the GUID sum changes with them).
        let newest = self.newest_uberblock();
        if !self.put_in_spares() {
            return Ok(false);
        }
        self.settle_spares();
        self.commit_config_keeping(newest)?;
        self.write_spare_labels();
        self.save_record()?;
        Ok(true)
    }

    /// While the pool is in use: puts an available hot spare in the slot of every leaf that
    /// became FAULTED or REMOVED (or is missing; not OFFLINE ones), the way zpool's
    /// `spare-N` group forms. Each spare starts stale with everything to copy (its resilver
    /// is the caller's to run: `Pool::needs_resilver` says so), and the new config reaches
    /// every label before this returns, so an import shows the spare in use. Readers and
    /// writers may use the pool meanwhile. Returns whether a spare was put in.
    pub fn take_over_failed_leaves(&self) -> Result<bool, PoolError> {
        if !self.put_in_spares() {
            return Ok(false);
        }
        // The config (spare in its slot, with its DTL) goes to every leaf that takes
        // writes, the spare's own label included; uberblocks written before it still
        // match (see `accepted_guid_sums`), the next txg's carries the new GUID sum.
        self.write_config_labels(0)?;
        self.write_spare_labels();
        self.save_record()?;
        Ok(true)
    }

    /// Puts spares in the slots of failed leaves (in memory); whether any was put in.
    fn put_in_spares(&self) -> bool {
        if self.config.spares.is_empty() && self.added_spare_configs().is_empty() {
            return false;
        }
        let _one_at_a_time = self.spare_lock.lock().unwrap_or_else(|p| p.into_inner());
        let config = self.live_config();
        let mut in_use: Vec<bool> = config
            .spares
            .iter()
            .map(|s| s.replacing.is_some())
            .collect();
        let mut activated = false;
        for (t, top) in self.tops.iter().enumerate() {
            for (c, slot) in top.children.iter().enumerate() {
                if slot.spare().is_some()
                    || slot.offline.load(Ordering::Relaxed)
                    || !(slot.leaf.is_none()
                        || slot.faulted.load(Ordering::Relaxed)
                        || slot.removed.load(Ordering::Relaxed))
                {
                    continue;
                }
                if config.vdevs[t].leaves[c].spare_declined {
                    continue;
                }
                let need = config.vdevs[t].leaves[c].asize;
                let Some(s) = (0..config.spares.len()).find(|&s| {
                    let spare = &config.spares[s];
                    !in_use[s] && spare.asize >= need && self.spare_leaf(spare.guid).is_some()
                }) else {
                    continue;
                };
                let spare = &config.spares[s];
                let child = Child::new(spare.guid, spare.path.clone(), self.spare_leaf(spare.guid));
                child.mark_stale();
                child.set_dtl(vec![DTL_EVERYTHING]);
                if slot.take_spare(child) {
                    in_use[s] = true;
                    activated = true;
                    self.post_event(
                        "sysevent.fs.zfs.vdev_spare",
                        Some(&spare.path),
                        &[("replacing", slot.path.clone())],
                    );
                }
            }
        }
        activated
    }

    /// Grows every top-level vdev whose devices all have room beyond their configured size
    /// (a LUN resized, a file made longer): at open with `autoexpand=on`, and by
    /// `cairn online -e`. The space map lists extents, not metaslabs, so the store's
    /// allocators simply cover the larger vdev at its next open; data offsets do not move.
    /// A vdev with a device missing waits. Returns (vdev, old asize, new asize) per vdev.
    pub fn expand(&mut self) -> Result<Vec<(usize, u64, u64)>, PoolError> {
        self.settle_spares();
        let mut grown = Vec::new();
        for t in 0..self.tops.len() {
            let Some(config) = grown_config(&self.tops[t]) else {
                continue;
            };
            grown.push((t, self.tops[t].config.asize, config.asize));
            self.config.vdevs[t] = config.clone();
            self.tops[t].config = config;
        }
        if !grown.is_empty() {
            self.commit_config()?;
            self.post_expand_events(&grown);
        }
        Ok(grown)
    }

    /// `sysevent.fs.zfs.CLASS` for the leaf at `path`, whose vdev `parent` names (attach:
    /// the side it joined; detach: the vdev it left).
    pub(crate) fn post_vdev_event(&self, class: &str, path: &str, parent: &str) {
        let class = format!("sysevent.fs.zfs.{class}");
        self.post_event(&class, Some(path), &[("parent", parent.to_string())]);
    }

    /// `vdev_add` events for the top-level vdevs from `first` on.
    pub(crate) fn post_add_events(&self, first: usize) {
        for top in &self.tops[first..] {
            let kind = if top.is_log() { "log" } else { "data" };
            self.post_event(
                "sysevent.fs.zfs.vdev_add",
                Some(&top.display_name()),
                &[("class", kind.to_string())],
            );
        }
    }

    /// `vdev_expand` events for (vdev, old asize, new asize).
    pub(crate) fn post_expand_events(&self, grown: &[(usize, u64, u64)]) {
        for &(t, old, new) in grown {
            let name = self.tops[t].display_name();
            self.post_event(
                "sysevent.fs.zfs.vdev_expand",
                Some(&name),
                &[
                    ("old_asize", old.to_string()),
                    ("new_asize", new.to_string()),
                ],
            );
        }
    }

    /// `cairn attach POOL EXISTING NEW`: a disk becomes a two-way mirror, a mirror one side
    /// wider; NEW is resilvered with everything.
    pub fn attach(
        &mut self,
        existing: &str,
        new: &str,
        force: bool,
    ) -> Result<DeviceOutcome, PoolError> {
        self.settle_spares();
        let (t, config, child) = self.plan_attach(existing, new, force)?;
        let newest = self.newest_uberblock();
        let path = child.path.clone();
        let mut kids = std::mem::take(&mut self.tops[t].children);
        kids.push(Slot::shared(child));
        self.rebuild_top(t, config, kids);
        self.commit_config_keeping(newest)?;
        self.post_vdev_event("vdev_attach", &path, existing);
        self.save_record()?;
        Ok(DeviceOutcome::NeedsResilver)
    }

    /// What `attach` changes: the vdev, its new config, and NEW as a stale child that
    /// misses everything. Checks everything first; changes nothing.
    pub(crate) fn plan_attach(
        &self,
        existing: &str,
        new: &str,
        force: bool,
    ) -> Result<(usize, TopConfig, Child), PoolError> {
        let (t, c) = self.find_leaf(existing)?;
        let children = match self.tops[t].shape() {
            VdevShape::Disk => 2,
            VdevShape::Mirror { children } => children + 1,
            VdevShape::Raidz { .. } => {
                return Err(Self::device_error(
                    "attach",
                    new,
                    "attach works on a disk or a mirror; a raidz vdev cannot be widened (use `cairn replace`, or `cairn add` for a new vdev)",
                ))
            }
        };
        if self.find_leaf(new).is_ok() {
            return Err(Self::device_error(
                "attach",
                new,
                "it is already part of this pool",
            ));
        }
        let leaf = open_leaf(new, LeafOptions::default())?;
        refuse_if_in_use(leaf.as_ref(), &self.home, force)?;
        self.check_fits("attach", t, c, leaf.as_ref())?;
        let child = new_stale_child(leaf.clone());
        let mut config = self.tops[t].config.clone();
        config.shape = VdevShape::Mirror { children };
        config.leaves.push(LeafConfig::new(
            child.guid,
            child.path.clone(),
            leaf_asize(leaf.size()),
        ));
        Ok((t, config, child))
    }

    /// `cairn detach POOL DEVICE`: removes a side of a mirror (a two-way mirror becomes a
    /// disk). The detached device's labels are cleared so it can be reused.
    pub fn detach(&mut self, device: &str) -> Result<DeviceOutcome, PoolError> {
        self.settle_spares();
        if let Some((t, c, which)) = self.find_in_spare_group(device) {
            return self.detach_in_spare_group(t, c, which);
        }
        let (t, c, config) = self.plan_detach(device)?;
        let newest = self.newest_uberblock();
        let parent = self.tops[t].display_name();
        let mut kids = std::mem::take(&mut self.tops[t].children);
        let gone = kids.remove(c);
        self.rebuild_top(t, config, kids);
        self.commit_config_keeping(newest)?;
        if let Some(leaf) = &gone.leaf {
            let _ = clear_leaf_labels(leaf.as_ref());
        }
        self.post_vdev_event("vdev_remove", &gone.path, &parent);
        self.save_record()?;
        Ok(DeviceOutcome::Done)
    }

    /// What `detach` changes: the vdev, the child that goes, and the vdev's new config.
    /// Checks everything first; changes nothing.
    pub(crate) fn plan_detach(&self, device: &str) -> Result<(usize, usize, TopConfig), PoolError> {
        let (t, c) = self.find_leaf(device)?;
        let VdevShape::Mirror { children } = self.tops[t].shape() else {
            return Err(Self::device_error(
                "detach",
                device,
                "only a side of a mirror can be detached; use `cairn replace` or `cairn offline`",
            ));
        };
        let others_readable = self.tops[t]
            .children
            .iter()
            .enumerate()
            .any(|(i, ch)| i != c && ch.is_readable());
        if !others_readable {
            return Err(Self::device_error(
                "detach",
                device,
                "no valid replicas: it is the only side of the mirror that holds all the data",
            ));
        }
        let mut config = self.tops[t].config.clone();
        config.leaves.remove(c);
        config.shape = if children == 2 {
            VdevShape::Disk
        } else {
            VdevShape::Mirror {
                children: children - 1,
            }
        };
        Ok((t, c, config))
    }

    /// The `spare-N` group holding `device`: (vdev, slot, which side `device` is).
    pub(crate) fn find_in_spare_group(&self, device: &str) -> Option<(usize, usize, SpareSide)> {
        let named = |child: &Child| {
            child.path == device
                || child.guid.to_string() == device
                || (!device.contains('/') && child.path.rsplit('/').next() == Some(device))
        };
        for (t, top) in self.tops.iter().enumerate() {
            for (c, slot) in top.children.iter().enumerate() {
                match (slot.spare(), slot.replaced()) {
                    (Some(spare), _) if named(spare) => return Some((t, c, SpareSide::Spare)),
                    (_, Some(failed)) if named(failed) => return Some((t, c, SpareSide::Failed)),
                    _ => {}
                }
            }
        }
        None
    }

    /// `detach` inside `spare-N`, as zpool: detaching the spare gives the slot back to the
    /// leaf it stood in for and makes the spare AVAIL again; detaching that leaf keeps the
    /// spare in its slot for good (it leaves the spares list). Either way the parent vdev
    /// keeps every other side: no redundancy is lost beyond the side detached.
    fn detach_in_spare_group(
        &mut self,
        t: usize,
        c: usize,
        which: SpareSide,
    ) -> Result<DeviceOutcome, PoolError> {
        if Arc::strong_count(&self.tops[t].children[c]) > 1 {
            return Err(Self::device_error(
                "detach",
                &self.tops[t].children[c].path,
                "a service changed this vdev while it held the pool; export and import the pool, then retry",
            ));
        }
        let newest = self.newest_uberblock();
        let spare_guid = self.tops[t].children[c].spare().map(|s| s.guid);
        let s = self
            .config
            .spares
            .iter()
            .position(|sp| Some(sp.guid) == spare_guid)
            .expect("a spare in a slot is in the spares list");
        let mut kids = std::mem::take(&mut self.tops[t].children);
        let (failed, spare) = Arc::try_unwrap(kids.remove(c))
            .unwrap_or_else(|_| unreachable!("checked above: no other tree holds the slot"))
            .into_parts();
        let spare = spare.expect("the slot holds a spare");
        let mut tconfig = self.config.vdevs[t].clone();
        let outcome = match which {
            SpareSide::Spare => {
                let mut failed_config = self.config.spares[s]
                    .replacing
                    .take()
                    .expect("a spare in use names the leaf it stands in for");
                failed_config.spare_declined = true;
                failed_config.dtl = failed.missed_since_it_failed();
                failed.spare_declined.store(true, Ordering::Relaxed);
                tconfig.leaves[c] = failed_config;
                self.spare_leaves[s] = spare.leaf.clone();
                // A leaf that can take I/O (it came back) is resilvered with all it missed.
                let outcome = match failed.is_usable() {
                    true => DeviceOutcome::NeedsResilver,
                    false => DeviceOutcome::Done,
                };
                kids.insert(c, Arc::new(Slot::of(failed)));
                outcome
            }
            SpareSide::Failed => {
                self.config.spares.remove(s);
                self.spare_leaves.remove(s);
                if let Some(leaf) = &failed.leaf {
                    let _ = clear_leaf_labels(leaf.as_ref());
                }
                let stale = spare.stale.load(Ordering::Relaxed);
                kids.insert(c, Arc::new(Slot::of(spare)));
                if stale {
                    DeviceOutcome::NeedsResilver
                } else {
                    DeviceOutcome::Done
                }
            }
        };
        self.rebuild_top(t, tconfig, kids);
        self.commit_config_keeping(newest)?;
        self.write_spare_labels();
        self.save_record()?;
        Ok(outcome)
    }

    /// `cairn add [-f] POOL VDEV…`: new top-level vdevs. A redundancy level that differs
    /// from the pool's is refused unless forced.
    pub fn add(&mut self, tokens: &[String], force: bool) -> Result<DeviceOutcome, PoolError> {
        self.settle_spares();
        let (tokens, spares) = crate::spec::split_spares(tokens)?;
        self.add_spares(&spares, force)?;
        if tokens.is_empty() && !spares.is_empty() {
            return Ok(DeviceOutcome::Done);
        }
        let newest = self.newest_uberblock();
        let first = self.tops.len();
        for top in self.plan_add(&tokens, force)? {
            self.config.vdevs.push(top.config.clone());
            self.tops.push(top);
        }
        self.config.validate().map_err(PoolError::BadSpec)?;
        self.commit_config_keeping(newest)?;
        self.post_add_events(first);
        self.save_record()?;
        Ok(DeviceOutcome::Done)
    }

    /// The top-level vdevs `add` appends (data vdevs, then log devices), opened, numbered
    /// after the pool's. Checks everything first; changes nothing but `notes`.
    pub(crate) fn plan_add(
        &mut self,
        tokens: &[String],
        force: bool,
    ) -> Result<Vec<TopVdev>, PoolError> {
        let mut notes = Vec::new();
        let tops = self.new_tops(tokens, force, &mut notes)?;
        self.notes.extend(notes);
        Ok(tops)
    }

    /// `plan_add` for a pool in use: the notes are returned.
    pub(crate) fn new_tops(
        &self,
        tokens: &[String],
        force: bool,
        notes: &mut Vec<String>,
    ) -> Result<Vec<TopVdev>, PoolError> {
        let (mut specs, log_specs) = crate::spec::parse_with_logs(tokens, true)?;
        let first_log = specs.len();
        specs.extend(log_specs);
        for spec in &specs {
            for dev in &spec.devices {
                if self.find_leaf(dev).is_ok() {
                    return Err(Self::device_error(
                        "add",
                        dev,
                        "it is already part of this pool",
                    ));
                }
            }
        }
        if !force && first_log > 0 {
            let mut all = self.top_specs();
            all.extend(specs[..first_log].iter().cloned());
            check_replication(&all)?;
        }
        let opts = CreateOptions {
            force,
            ..CreateOptions::default()
        };
        let leaves = open_new_leaves(&specs, &opts, &self.home)?;
        let ashift = self.tops.iter().map(|t| t.ashift()).max().unwrap_or(12);
        let first_id = self.tops.len();
        let configs = crate::pool::top_configs(&specs, &leaves, ashift, first_id, first_log, notes);
        let readpolicy = self.props().readpolicy;
        Ok(configs
            .into_iter()
            .zip(leaves)
            .map(|(config, tleaves)| {
                let children = config
                    .leaves
                    .iter()
                    .zip(tleaves)
                    .map(|(lc, l)| Child::new(lc.guid, lc.path.clone(), Some(l)))
                    .collect();
                let top = TopVdev::new(config, children);
                top.set_read_policy(readpolicy);
                top
            })
            .collect())
    }

    /// The log device `device` names (a leaf's path, file name or GUID, or the group's name
    /// such as `mirror-1`): its top-level vdev index.
    pub fn find_log_device(&self, device: &str) -> Result<usize, PoolError> {
        let named = |child: &Child| {
            child.path == device
                || child.guid.to_string() == device
                || (!device.contains('/') && child.path.rsplit('/').next() == Some(device))
        };
        let found = self.tops.iter().position(|t| {
            !t.is_hole() && (t.display_name() == device || t.children.iter().any(|c| named(c)))
        });
        match found {
            Some(t) if self.tops[t].is_log() => Ok(t),
            Some(_) => Err(Self::device_error(
                "remove",
                device,
                "only log devices can be removed (data vdevs cannot: their blocks would have \
                 to move); to take a mirror side out use `cairn detach`",
            )),
            None => Err(Self::device_error(
                "remove",
                device,
                "no such device in the pool",
            )),
        }
    }

    /// `cairn remove POOL DEV`: takes a log device out of the pool. The store must have
    /// retired every intent-log block on it first (`StoreCore::release_log_devices`).
    /// DVAs name vdevs by index: a log device with vdevs after it leaves a hole
    /// (`TopConfig::hole`) in its place.
    pub fn remove_log(&mut self, device: &str) -> Result<DeviceOutcome, PoolError> {
        let t = self.removable_log(device)?;
        let newest = self.newest_uberblock();
        let gone = take_out_top(&mut self.tops, t);
        match self.tops.get(t) {
            Some(hole) => self.config.vdevs[t] = hole.config.clone(),
            None => drop(self.config.vdevs.pop()),
        }
        self.commit_config_keeping(newest)?;
        for child in &gone.children {
            if let Some(leaf) = &child.leaf {
                let _ = clear_leaf_labels(leaf.as_ref());
            }
        }
        self.post_event(
            "sysevent.fs.zfs.vdev_remove",
            Some(&gone.display_name()),
            &[],
        );
        self.save_record()?;
        Ok(DeviceOutcome::Done)
    }

    /// Whether some leaf that takes writes misses txgs (waits for a resilver).
    pub fn needs_resilver(&self) -> bool {
        self.tops
            .iter()
            .flat_map(|t| t.children.iter())
            .any(|c| c.is_usable() && !c.dtl_ranges().is_empty())
    }

    /// The pool's top-level vdevs as command-line specs (for the replication check).
    fn top_specs(&self) -> Vec<TopSpec> {
        self.tops
            .iter()
            .filter(|t| !t.is_log())
            .map(|t| TopSpec {
                kind: match t.shape() {
                    VdevShape::Disk => TopKind::Disk,
                    VdevShape::Mirror { .. } => TopKind::Mirror,
                    VdevShape::Raidz { parity, .. } => TopKind::Raidz(parity),
                },
                devices: t.children.iter().map(|c| c.path.clone()).collect(),
            })
            .collect()
    }

    /// Refuses a device smaller than the leaf it stands in for.
    pub(crate) fn check_fits(
        &self,
        op: &'static str,
        t: usize,
        c: usize,
        leaf: &dyn Leaf,
    ) -> Result<(), PoolError> {
        let need = self.tops[t].config.leaves[c].asize;
        let has = leaf_asize(leaf.size());
        if has < need {
            return Err(Self::device_error(
                op,
                leaf.path(),
                format!("device is too small: {has} usable bytes, the vdev needs {need}"),
            ));
        }
        Ok(())
    }

    fn rebuild_top(&mut self, t: usize, config: TopConfig, children: Vec<Arc<Slot>>) {
        self.config.vdevs[t] = config.clone();
        self.tops[t] = TopVdev::from_slots(config, children);
        self.tops[t].set_read_policy(self.props().readpolicy);
    }

    /// The newest uberblock, found before leaf GUIDs change (which changes the GUID sum
    /// that `uberblocks()` filters on).
    fn newest_uberblock(&self) -> Option<Uberblock> {
        self.uberblocks().into_iter().next()
    }

    /// Writes the changed config (leaf states) with an uberblock at a new txg.
    fn commit_config(&mut self) -> Result<(), PoolError> {
        self.bump_config()?;
        self.save_record()
    }

    /// Writes a config whose leaf GUIDs changed, keeping the tree of `newest`.
    fn commit_config_keeping(&mut self, newest: Option<Uberblock>) -> Result<(), PoolError> {
        self.config = self.live_config();
        let txg = newest.as_ref().map(|u| u.txg).unwrap_or(0);
        self.config.txg = self.config.txg.max(txg) + 1;
        self.config_txg.store(self.config.txg, Ordering::SeqCst);
        self.write_labels_with_root(newest.map(|u| u.root))
    }
}

/// The config of `top` grown to its devices' sizes, when every device is open and the
/// smallest has grown beyond the configured size.
pub(crate) fn grown_config(top: &TopVdev) -> Option<TopConfig> {
    let sizes: Vec<u64> = top
        .children
        .iter()
        .map(|c| c.leaf.as_ref().map(|l| leaf_asize(l.size())))
        .collect::<Option<_>>()?;
    let mut config = top.config.clone();
    let old_min = config.leaves.iter().map(|l| l.asize).min().unwrap_or(0);
    let new_min = sizes.iter().copied().min().unwrap_or(0);
    if new_min <= old_min {
        return None;
    }
    for (leaf, size) in config.leaves.iter_mut().zip(&sizes) {
        leaf.asize = leaf.asize.max(*size);
    }
    config.asize = config.shape.vdev_asize(new_min);
    Some(config)
}

/// Takes top-level vdev `t` (a log device) out of `tops`: the last one goes; one with
/// vdevs after it leaves a hole in its place, so theirs keep the index their DVAs name.
pub(crate) fn take_out_top(tops: &mut Vec<TopVdev>, t: usize) -> TopVdev {
    if t + 1 == tops.len() {
        return tops.pop().expect("t is an index of tops");
    }
    let hole = TopVdev::new(TopConfig::hole(t as u32, tops[t].ashift()), Vec::new());
    std::mem::replace(&mut tops[t], hole)
}

/// A child for a new device that must be resilvered with everything.
fn new_stale_child(leaf: Arc<dyn Leaf>) -> Child {
    let child = Child::new(new_guid(), leaf.path().to_string(), Some(leaf));
    child.mark_stale();
    child.set_dtl(vec![DTL_EVERYTHING]);
    child
}
