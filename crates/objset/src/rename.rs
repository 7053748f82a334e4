//! `cairn rename`: a dataset (with its descendants and snapshots) or a snapshot takes a new
//! name, as `zfs rename`. Names are only in the dataset table (objects are numbered, and a
//! snapshot belongs to its dataset by id), so a rename is one txg that rewrites the names,
//! the parent of a dataset that moves, and the origins of clones that name the old one.
//! Properties a dataset inherits come from its new parent afterwards, as in ZFS.

use crate::core::{State, StoreCore};
use crate::dataset::{validate_component, validate_dataset_name, DatasetKind, ORIGIN_PROP};
use crate::error::StoreError;
use crate::snapshot_ops::split_snapshot_name;

impl StoreCore {
    /// `cairn rename [-p] POOL/DS POOL/NEW`: `parents` makes missing parents of the new name.
    pub fn dataset_rename(&self, from: &str, to: &str, parents: bool) -> Result<(), StoreError> {
        if !from.contains('/') {
            return Err(root_not_renamed(from));
        }
        validate_dataset_name(to)?;
        let pool_of = |n: &str| n.split('/').next().unwrap_or("").to_string();
        if pool_of(from) != pool_of(to) {
            return Err(StoreError::BadName(
                to.into(),
                "a dataset is renamed within its pool (to copy it to another pool, use send | receive)".into(),
            ));
        }
        let (parent_name, _) = to
            .rsplit_once('/')
            .ok_or_else(|| StoreError::BadName(to.into(), "give POOL/NAME".into()))?;
        if self.datasets().by_name(from).is_none() {
            return Err(StoreError::NoSuchDataset(from.into()));
        }
        if parents && self.datasets().by_name(parent_name).is_none() {
            self.dataset_create(
                parent_name,
                DatasetKind::Filesystem,
                Default::default(),
                None,
                true,
            )?;
        }
        let mut st = self.lock();
        let (id, parent) = check_dataset_rename(&st, from, to, parent_name)?;
        if from == to {
            return Ok(());
        }
        let moved = |name: &str| {
            (name == from || name.starts_with(&format!("{from}/")))
                .then(|| format!("{to}{}", &name[from.len()..]))
        };
        for d in st.datasets.datasets.iter_mut() {
            if let Some(new) = moved(&d.name) {
                d.name = new;
            }
            let origin = d.props.get(ORIGIN_PROP).and_then(|o| {
                let (ds, snap) = o.split_once('@')?;
                Some(format!("{}@{snap}", moved(ds)?))
            });
            if let Some(origin) = origin {
                d.props.insert(ORIGIN_PROP.into(), origin);
            }
        }
        st.datasets.by_id_mut(id).expect("checked").parent = parent;
        st.datasets_dirty = true;
        self.sync_locked(&mut st)?;
        Ok(())
    }

    /// `cairn rename [-r] POOL/DS@OLD POOL/DS@NEW` (or `@NEW`): with `recursive`, the same
    /// snapshot of every descendant that has it. All or nothing, one txg.
    pub fn snapshot_rename(&self, from: &str, to: &str, recursive: bool) -> Result<(), StoreError> {
        let (ds_name, old) = split_snapshot_name(from)?;
        let new = match to.split_once('@') {
            Some((ds, new)) if ds.is_empty() || ds == ds_name => new,
            Some(_) => {
                return Err(StoreError::BadName(
                    to.into(),
                    format!("a snapshot keeps its dataset: give {ds_name}@NEW or @NEW"),
                ))
            }
            None => to,
        };
        validate_component(new)?;
        let mut st = self.lock();
        let renamed = snapshots_to_rename(&st, ds_name, old, new, recursive)?;
        for (id, name) in &renamed {
            let rec = st.datasets.snapshots.records.iter_mut();
            let rec = rec.filter(|r| r.dataset == *id && r.name == old);
            rec.for_each(|r| r.name = new.to_string());
            let (from, to) = (format!("{name}@{old}"), format!("{name}@{new}"));
            for d in st.datasets.datasets.iter_mut() {
                if d.props.get(ORIGIN_PROP) == Some(&from) {
                    d.props.insert(ORIGIN_PROP.into(), to.clone());
                }
            }
        }
        st.datasets_dirty = true;
        self.sync_locked(&mut st)?;
        Ok(())
    }
}

/// What `dataset_rename` may do: the dataset's id and its new parent's.
fn check_dataset_rename(
    st: &State,
    from: &str,
    to: &str,
    parent_name: &str,
) -> Result<(u32, u32), StoreError> {
    let table = &st.datasets;
    let ds = table
        .by_name(from)
        .ok_or_else(|| StoreError::NoSuchDataset(from.into()))?;
    if ds.parent == crate::dataset::NO_PARENT {
        return Err(root_not_renamed(from));
    }
    if to.starts_with(&format!("{from}/")) {
        return Err(StoreError::BadName(
            to.into(),
            format!("{from} cannot move below itself"),
        ));
    }
    if from != to && table.by_name(to).is_some() {
        return Err(StoreError::DatasetExists(to.into()));
    }
    let parent = table.by_name(parent_name).ok_or_else(|| {
        StoreError::NoSuchDataset(format!("{parent_name} (`cairn rename -p` makes it)"))
    })?;
    if parent.kind != DatasetKind::Filesystem {
        return Err(StoreError::WrongKind(
            parent_name.into(),
            "volume",
            "volumes cannot have children",
        ));
    }
    Ok((ds.id, parent.id))
}

/// The datasets (id, name) whose snapshot `old` becomes `new`; refuses if one lacks it (the
/// named one) or has `new` already.
fn snapshots_to_rename(
    st: &State,
    ds_name: &str,
    old: &str,
    new: &str,
    recursive: bool,
) -> Result<Vec<(u32, String)>, StoreError> {
    let table = &st.datasets;
    let top = table
        .by_name(ds_name)
        .ok_or_else(|| StoreError::NoSuchDataset(ds_name.into()))?;
    if table.snapshots.find(top.id, old).is_none() {
        return Err(StoreError::NotFound(format!("{ds_name}@{old}")));
    }
    let below = |d: &str| d.starts_with(&format!("{ds_name}/"));
    let mut out = Vec::new();
    for d in &table.datasets {
        let picked = d.id == top.id || (recursive && below(&d.name));
        if !picked || table.snapshots.find(d.id, old).is_none() {
            continue;
        }
        if table.snapshots.find(d.id, new).is_some() {
            return Err(StoreError::DatasetExists(format!("{}@{new}", d.name)));
        }
        out.push((d.id, d.name.clone()));
    }
    Ok(out)
}

fn root_not_renamed(name: &str) -> StoreError {
    StoreError::BadName(
        name.into(),
        "the pool's root dataset has the pool's name: it is not renamed".into(),
    )
}
