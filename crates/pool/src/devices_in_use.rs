//! `offline`, `online` and `clear` on a pool in use: the service that holds the pool runs
//! them for a client (`cairn serve`), while readers, writers, txg syncs and resilvers go on.
//!
//! These three change no vdev's shape: they flip a leaf's state flags (atomics every I/O
//! reads) and write the config to the labels. `replace`, `attach`, `detach`, `add` and
//! `remove` rebuild top-level vdevs and stay with the `&mut Pool` operations of `devices`.
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

use cairn_vdev::Child;

use crate::devices::DeviceOutcome;
use crate::error::PoolError;
use crate::pool::Pool;

impl Pool {
    /// `cairn offline [-t] POOL DEVICE` while the pool is in use.
    pub fn offline_in_use(
        &self,
        device: &str,
        temporary: bool,
    ) -> Result<DeviceOutcome, PoolError> {
        let _one_at_a_time = self.spare_lock.lock().unwrap_or_else(|p| p.into_inner());
        let (t, c) = self.find_plain_leaf("offline", device)?;
        if !self.can_lose(t, c) && self.tops[t].children[c].is_readable() {
            return Err(Self::device_error(
                "offline",
                device,
                "no valid replicas: the other devices of its vdev cannot hold the data alone",
            ));
        }
        let child = &self.tops[t].children[c];
        child.offline_temporary.store(temporary, Ordering::Relaxed);
        child.offline.store(true, Ordering::Relaxed);
        self.publish_config()?;
        Ok(DeviceOutcome::Done)
    }

    /// `cairn online POOL DEVICE` while the pool is in use: the leaf takes I/O again and,
    /// when it missed txgs, waits stale for the resilver (the service runs it).
    pub fn online_in_use(&self, device: &str) -> Result<DeviceOutcome, PoolError> {
        let _one_at_a_time = self.spare_lock.lock().unwrap_or_else(|p| p.into_inner());
        let (t, c) = self.find_plain_leaf("online", device)?;
        let child = &self.tops[t].children[c];
        if child.leaf.is_none() {
            return Err(Self::device_error(
                "online",
                device,
                format!(
                    "it could not be opened when the service opened the pool; restart the service (or stop it and run `cairn online {} {device}`)",
                    self.name()
                ),
            ));
        }
        self.bring_back(child);
        child.offline_temporary.store(false, Ordering::Relaxed);
        child.spare_declined.store(false, Ordering::Relaxed);
        self.publish_config()?;
        Ok(outcome_of(child))
    }

    /// `cairn clear POOL [DEVICE]` while the pool is in use: error counters reset, faults
    /// lifted (an offline leaf stays offline).
    pub fn clear_in_use(&self, device: Option<&str>) -> Result<DeviceOutcome, PoolError> {
        let _one_at_a_time = self.spare_lock.lock().unwrap_or_else(|p| p.into_inner());
        let picked: Vec<(usize, usize)> = match device {
            Some(d) => vec![self.find_leaf(d)?],
            None => (0..self.tops.len())
                .flat_map(|t| (0..self.tops[t].children.len()).map(move |c| (t, c)))
                .collect(),
        };
        let mut outcome = DeviceOutcome::Done;
        for (t, c) in picked {
            let child = &self.tops[t].children[c];
            if child.faulted.load(Ordering::Relaxed) || child.removed.load(Ordering::Relaxed) {
                self.bring_back(child);
            } else if !child.dtl_ranges().is_empty() && child.is_usable() {
                // It missed txgs (as `clear_device`): the resilver copies them.
                child.stale.store(true, Ordering::SeqCst);
            }
            child.stats.reset();
            if outcome_of(child) == DeviceOutcome::NeedsResilver {
                outcome = DeviceOutcome::NeedsResilver;
            }
        }
        self.publish_config()?;
        Ok(outcome)
    }

    /// A leaf of a plain slot (no hot spare in it): the in-use operations leave `spare-N`
    /// groups to the `&mut` ones, which settle spares first.
    fn find_plain_leaf(&self, op: &'static str, device: &str) -> Result<(usize, usize), PoolError> {
        let (t, c) = self.find_leaf(device)?;
        let in_spare_group = self.tops[t].children[c].spare().is_some()
            || self.find_in_spare_group(device).is_some();
        if in_spare_group {
            return Err(Self::device_error(
                op,
                device,
                format!(
                    "a hot spare is in its slot; the service does not change spare groups yet: stop it, run `cairn {op} {} {device}`, and start it again",
                    self.name()
                ),
            ));
        }
        Ok((t, c))
    }

    /// Lets a leaf that was offline or faulted take I/O again (the invariants at the top).
    fn bring_back(&self, child: &Child) {
        let newest = self.uberblocks().first().map_or(0, |u| u.txg);
        {
            let mut dtl = child.dtl.lock().unwrap_or_else(|p| p.into_inner());
            cairn_vdev::dtl::add_range(&mut dtl, (newest + 1, newest + 2));
        }
        child.stale.store(true, Ordering::SeqCst);
        child.missed_write.store(true, Ordering::SeqCst);
        child.clear_fault();
        child.offline.store(false, Ordering::SeqCst);
    }

    /// Writes the live config to every label and the pool record: what an import sees.
    fn publish_config(&self) -> Result<(), PoolError> {
        self.write_config_labels(0)?;
        self.save_record()
    }
}

fn outcome_of(child: &Child) -> DeviceOutcome {
    if child.stale.load(Ordering::Relaxed) && !child.dtl_ranges().is_empty() {
        DeviceOutcome::NeedsResilver
    } else {
        DeviceOutcome::Done
    }
}
