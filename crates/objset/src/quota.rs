//! Quotas and reservations of datasets (`quota`, `refquota`, `reservation`), as ZFS:
//!
//! ```text
//!  refquota     limit on what the dataset itself references (its own USED)
//!  quota        limit on the dataset and all its descendants (USED incl. children)
//!  reservation  space kept for the dataset and its descendants: nobody else may use it,
//!               so every other dataset's AVAIL is smaller by its unused part
//! ```
//! USED is updated at each txg sync; bytes written in the open txg are counted per dataset
//! (`State::pending`) until then, so a quota holds within a txg too (conservatively: an
//! overwrite counts as new bytes until the sync frees the old ones — ZFS's quota is
//! conservative within a txg in the same way). A write past a limit is EDQUOT
//! (`StoreError::QuotaExceeded`) or ENOSPC (someone else's reservation); deletes always work.

use crate::core::{State, StoreCore};
use crate::dataset::{parse_size, DatasetTable, NO_PARENT};
use crate::error::StoreError;

/// A size property's value in bytes; `none` (or unset) is no limit.
fn limit(table: &DatasetTable, id: u32, key: &str) -> Option<u64> {
    let (v, _) = table.property(id, key);
    if v == "none" || v == "-" {
        None
    } else {
        parse_size(&v)
    }
}

/// Ids of `id` and its ancestors.
fn lineage(table: &DatasetTable, id: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut cur = table.by_id(id);
    while let Some(d) = cur {
        if out.contains(&d.id) {
            break; // (a damaged table with a cycle)
        }
        out.push(d.id);
        cur = if d.parent == NO_PARENT {
            None
        } else {
            table.by_id(d.parent)
        };
    }
    out
}

/// Whether `id` is `root` or below it.
fn in_subtree(table: &DatasetTable, id: u32, root: u32) -> bool {
    lineage(table, id).contains(&root)
}

impl StoreCore {
    /// Bytes written in the open txg to datasets in the subtree of `root`.
    fn pending_in(&self, st: &State, root: u32) -> u64 {
        st.pending
            .iter()
            .filter(|(&d, _)| in_subtree(&st.datasets, d, root))
            .map(|(_, &n)| n)
            .sum()
    }

    /// Checks that `more` new bytes for `dataset` stay within every quota, refquota and
    /// other dataset's reservation; counts them as pending when they do.
    pub(crate) fn charge_dataset(
        &self,
        st: &mut State,
        dataset: u32,
        more: u64,
    ) -> Result<(), StoreError> {
        match self.try_charge(st, dataset, more) {
            // Bytes counted in the open txg may since have been deleted or overwritten, and
            // deletes give space back at the sync: after one the counts are exact (as
            // ENOSPC waits for txgs).
            Err(StoreError::QuotaExceeded { .. })
                if crate::fs::is_dirty_locked(st) && self.sync_allowed_midway() =>
            {
                self.sync_locked(st)?;
                self.try_charge(st, dataset, more)
            }
            r => r,
        }
    }

    fn try_charge(&self, st: &mut State, dataset: u32, more: u64) -> Result<(), StoreError> {
        let t = &st.datasets;
        if let Some(q) = limit(t, dataset, "refquota") {
            let own = t.by_id(dataset).map(|d| d.used).unwrap_or(0);
            let pending = st.pending.get(&dataset).copied().unwrap_or(0);
            if own.saturating_add(pending).saturating_add(more) > q {
                return Err(self.over_quota(st, dataset, "refquota", q));
            }
        }
        let quotas: Vec<(u32, u64)> = lineage(t, dataset)
            .into_iter()
            .filter_map(|id| limit(t, id, "quota").map(|q| (id, q)))
            .collect();
        for (id, q) in quotas {
            // `quota` counts what the dataset's snapshots hold as well (as zfs's does).
            let snapshots = crate::snapshot_ops::snapshot_used_subtree_cached(&self.pool, st, id);
            let used = st
                .datasets
                .used_total(id)
                .saturating_add(self.pending_in(st, id))
                .saturating_add(snapshots);
            if used.saturating_add(more) > q {
                return Err(self.over_quota(st, id, "quota", q));
            }
        }
        let reserved = self.reserved_elsewhere(st, dataset);
        if reserved > 0 {
            let free = self.pool_avail(st);
            if free < reserved.saturating_add(more) {
                return Err(StoreError::NoSpace(self.pool.name().to_string()));
            }
        }
        *st.pending.entry(dataset).or_default() += more;
        Ok(())
    }

    fn over_quota(&self, st: &State, id: u32, key: &str, q: u64) -> StoreError {
        let name = st
            .datasets
            .by_id(id)
            .map(|d| d.name.clone())
            .unwrap_or_default();
        StoreError::QuotaExceeded {
            dataset: name,
            property: key.to_string(),
            limit: q,
        }
    }

    /// Unused reservations of datasets whose space `dataset` may not use: every dataset
    /// with a reservation that is not `dataset` or one of its ancestors.
    fn reserved_elsewhere(&self, st: &State, dataset: u32) -> u64 {
        let mine = lineage(&st.datasets, dataset);
        st.datasets
            .datasets
            .iter()
            .filter(|d| !mine.contains(&d.id))
            .filter_map(|d| {
                let r = limit(&st.datasets, d.id, "reservation")?;
                let used = st.datasets.used_total(d.id) + self.pending_in(st, d.id);
                Some(r.saturating_sub(used))
            })
            .sum()
    }

    /// AVAIL of the pool as a whole (zfs list units), less what the open txg holds.
    fn pool_avail(&self, st: &State) -> u64 {
        let geo = self.pool.space();
        let used = self.deflated_alloc(st) + st.dirty_bytes;
        geo.dspace.saturating_sub(geo.slop).saturating_sub(used)
    }

    /// AVAIL of a dataset, as `zfs list` shows it: the pool's, less other datasets' unused
    /// reservations, and no more than its quotas leave.
    pub(crate) fn dataset_avail_locked(&self, st: &State, dataset: u32) -> u64 {
        let t = &st.datasets;
        let mut avail = self
            .pool_avail(st)
            .saturating_sub(self.reserved_elsewhere(st, dataset));
        if let Some(q) = limit(t, dataset, "refquota") {
            let own = t.by_id(dataset).map(|d| d.used).unwrap_or(0);
            avail = avail.min(q.saturating_sub(own));
        }
        for id in lineage(t, dataset) {
            if let Some(q) = limit(t, id, "quota") {
                let snapshots = crate::snapshot_ops::snapshot_used_subtree(&self.pool, st, id);
                avail = avail.min(q.saturating_sub(t.used_total(id).saturating_add(snapshots)));
            }
        }
        avail
    }

    /// Whether a quota can refuse writes to `dataset` (by id): a refquota of its own, or a
    /// quota on it or on an ancestor.
    pub fn is_quota_limited(&self, dataset: u32) -> bool {
        let st = self.lock();
        let t = &st.datasets;
        limit(t, dataset, "refquota").is_some()
            || lineage(t, dataset)
                .into_iter()
                .any(|id| limit(t, id, "quota").is_some())
    }

    /// AVAIL of dataset `dataset` (by id), for statfs.
    pub fn dataset_avail(&self, dataset: u32) -> u64 {
        let st = self.lock();
        self.dataset_avail_locked(&st, dataset)
    }
}
