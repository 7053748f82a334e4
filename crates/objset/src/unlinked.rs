//! The unlinked set (ZFS's "unlinked set"): files whose last name went while a process
//! still had them open. The mount frees such a file at its last close; if the pool is not
//! closed cleanly first (a crash, a killed service), the next open frees it instead of
//! leaving its space allocated for good.
//!
//! Kept per dataset in the internal property `cairn:unlinked` (object ids, space
//! separated; docs/format.md), changed in the same txg as the unlink or the free. A change
//! to the set does not stop the intent log: the unlink is a REMOVE (or RENAME) record, and
//! replay frees what it leaves without a name, as the next open frees what is in the set.

use crate::core::{State, StoreCore};
use crate::dataset::UNLINKED_PROP;
use crate::dnode::ObjectKind;
use crate::error::StoreError;

/// Adds (`add`) or removes object `object` of dataset `dataset` to or from the set.
pub(crate) fn note_unlinked(st: &mut State, dataset: u32, object: u64, add: bool) {
    let Some(ds) = st.datasets.by_id_mut(dataset) else {
        return;
    };
    let mut ids: Vec<u64> = ds
        .props
        .get(UNLINKED_PROP)
        .map(|v| v.split(' ').filter_map(|s| s.parse().ok()).collect())
        .unwrap_or_default();
    let had = ids.contains(&object);
    if had == add {
        return;
    }
    if add {
        ids.push(object);
    } else {
        ids.retain(|&i| i != object);
    }
    if ids.is_empty() {
        ds.props.remove(UNLINKED_PROP);
    } else {
        let text: Vec<String> = ids.iter().map(u64::to_string).collect();
        ds.props.insert(UNLINKED_PROP.into(), text.join(" "));
    }
    // (Not `datasets_dirty`, which stops every dataset's log: a replay rebuilds this
    // change from the REMOVE and RENAME records.)
    st.unlinked_dirty = true;
}

impl StoreCore {
    /// At open: frees every object of every dataset's unlinked set (nothing has them open
    /// now) and syncs; returns how many.
    pub(crate) fn free_unlinked(&self) -> Result<usize, StoreError> {
        let listed: Vec<u64> = {
            let st = self.lock();
            st.datasets
                .datasets
                .iter()
                .filter_map(|d| d.props.get(UNLINKED_PROP))
                .flat_map(|v| {
                    v.split(' ')
                        .filter_map(|s| s.parse().ok())
                        .collect::<Vec<u64>>()
                })
                .collect()
        };
        if listed.is_empty() {
            return Ok(0);
        }
        let mut freed = 0;
        {
            let mut st = self.lock();
            for id in listed {
                let Ok(o) = self.object_mut(&mut st, id) else {
                    continue;
                };
                let dn = o.dnode;
                if dn.nlink == 0 && !matches!(dn.kind, ObjectKind::Free | ObjectKind::Directory) {
                    self.free_object_locked(&mut st, id)?;
                    freed += 1;
                } else {
                    // Linked again, or gone: only its entry goes.
                    note_unlinked(&mut st, dn.dataset, id, false);
                }
            }
        }
        self.sync()?;
        Ok(freed)
    }
}
