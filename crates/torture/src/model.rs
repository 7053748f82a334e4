//! The in-memory model a torture run checks the pool against: what every file, the volume
//! and every snapshot must hold.

use std::collections::BTreeMap;

use cairn_objset::Store;

/// File systems the torture workload writes into (the first is the pool's root).
pub(crate) const DATASETS: [&str; 3] = ["tank", "tank/a", "tank/z"];

/// Expected contents of the pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    /// Path → contents of every file.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Volume name → contents.
    pub volumes: BTreeMap<String, Vec<u8>>,
    /// `DATASET@NAME` → path → contents of the files the dataset held when it was taken.
    pub snapshots: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    /// Clone name → what it holds: its snapshot's files, then its own writes (whatever
    /// happens to the origin and its other clones).
    pub clones: BTreeMap<String, CloneModel>,
}

/// A clone in the model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CloneModel {
    /// The snapshot it was made from.
    pub origin: String,
    /// Path in the clone → contents.
    pub files: BTreeMap<String, Vec<u8>>,
}

impl CloneModel {
    /// A new clone `name` of `origin`, whose files were `files` (paths in the origin's
    /// dataset).
    pub fn of(name: &str, origin: &str, files: &BTreeMap<String, Vec<u8>>) -> CloneModel {
        let (ds, _) = origin.split_once('@').expect("DATASET@NAME");
        CloneModel {
            origin: origin.to_string(),
            files: files
                .iter()
                .map(|(p, d)| (format!("{name}{}", &p[ds.len()..]), d.clone()))
                .collect(),
        }
    }
}

impl Model {
    /// Applies a write at `offset` of a file (creating it; a gap reads as zeros).
    pub fn write_file(&mut self, path: &str, offset: usize, data: &[u8]) {
        let f = self.files.entry(path.to_string()).or_default();
        if f.len() < offset + data.len() {
            f.resize(offset + data.len(), 0);
        }
        f[offset..offset + data.len()].copy_from_slice(data);
    }

    /// Applies a write to a volume (the range is inside it).
    pub fn write_volume(&mut self, name: &str, offset: usize, data: &[u8]) {
        if let Some(v) = self.volumes.get_mut(name) {
            v[offset..offset + data.len()].copy_from_slice(data);
        }
    }

    /// Checks every file of `universe` exists exactly when the model has it, with the
    /// model's bytes, and every volume matches. Returns what differs.
    pub fn verify(&self, store: &Store, universe: &[String]) -> Result<(), String> {
        for path in universe {
            let expected = self.files.get(path);
            match (store.resolve(path), expected) {
                (Err(_), None) => {}
                (Ok(_), None) => return Err(format!("{path} exists but was removed")),
                (Err(e), Some(_)) => return Err(format!("{path} is missing: {e}")),
                (Ok(r), Some(data)) => {
                    let mut buf = vec![0xEEu8; data.len() + 1];
                    let n = store
                        .read(&r, 0, &mut buf)
                        .map_err(|e| format!("reading {path}: {e}"))?;
                    if n != data.len() {
                        return Err(format!("{path}: {n} bytes, expected {}", data.len()));
                    }
                    if let Some(at) = first_difference(&buf[..n], data) {
                        return Err(format!("{path}: contents differ at byte {at}"));
                    }
                }
            }
        }
        for (name, data) in &self.volumes {
            let r = store
                .resolve(name)
                .map_err(|e| format!("volume {name}: {e}"))?;
            let mut buf = vec![0u8; data.len()];
            store
                .read(&r, 0, &mut buf)
                .map_err(|e| format!("reading volume {name}: {e}"))?;
            if let Some(at) = first_difference(&buf, data) {
                return Err(format!("volume {name}: contents differ at byte {at}"));
            }
        }
        for (snap, files) in &self.snapshots {
            verify_snapshot(store, snap, files, universe)?;
        }
        for (clone, c) in &self.clones {
            verify_clone(store, clone, c)?;
        }
        let damaged = store.damaged();
        if !damaged.is_empty() {
            return Err(format!("objects marked damaged: {damaged:?}"));
        }
        Ok(())
    }
}

/// The dataset a path of the universe is in: the longest of `datasets` it starts in.
pub fn dataset_of<'a>(path: &str, datasets: &[&'a str]) -> &'a str {
    datasets
        .iter()
        .filter(|d| path.starts_with(&format!("{d}/")))
        .max_by_key(|d| d.len())
        .copied()
        .unwrap_or("")
}

/// Every path of `universe` in the snapshot's dataset reads as the model took it (or is
/// absent), through the snapshot.
fn verify_snapshot(
    store: &Store,
    snap: &str,
    files: &BTreeMap<String, Vec<u8>>,
    universe: &[String],
) -> Result<(), String> {
    let (ds, _) = snap.split_once('@').expect("DATASET@NAME");
    let view = store
        .snapshot_view(snap)
        .map_err(|e| format!("snapshot {snap}: {e}"))?;
    let datasets: Vec<&str> = DATASETS.to_vec();
    for path in universe.iter().filter(|p| dataset_of(p, &datasets) == ds) {
        let rel: Vec<&str> = path[ds.len() + 1..].split('/').collect();
        match (store.snapshot_resolve(&view, &rel), files.get(path)) {
            (Err(_), None) => {}
            (Ok(_), None) => return Err(format!("{snap}: {path} exists but was not there")),
            (Err(e), Some(_)) => return Err(format!("{snap}: {path} is missing: {e}")),
            (Ok((id, dn)), Some(data)) => {
                let mut buf = vec![0u8; dn.size as usize];
                let n = store
                    .snapshot_read(&view, id, 0, &mut buf)
                    .map_err(|e| format!("{snap}: reading {path}: {e}"))?;
                if let Some(at) = first_difference(&buf[..n], data) {
                    return Err(format!("{snap}: {path}: contents differ at byte {at}"));
                }
            }
        }
    }
    Ok(())
}

/// Clone `clone` of snapshot `snap` holds exactly the snapshot's files, under its own name.
fn verify_clone(store: &Store, clone: &str, c: &CloneModel) -> Result<(), String> {
    let snap = &c.origin;
    for (at, data) in &c.files {
        let r = store
            .resolve(at)
            .map_err(|e| format!("clone {clone} of {snap}: {at} is missing: {e}"))?;
        let mut buf = vec![0xEEu8; data.len() + 1];
        let n = store
            .read(&r, 0, &mut buf)
            .map_err(|e| format!("clone {clone}: reading {at}: {e}"))?;
        if let Some(at_byte) = first_difference(&buf[..n], data) {
            return Err(format!(
                "clone {clone}: {at}: contents differ at byte {at_byte}"
            ));
        }
    }
    Ok(())
}

/// Index of the first differing byte, if any.
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    if a.len() != b.len() {
        return Some(a.len().min(b.len()));
    }
    a.iter().zip(b).position(|(x, y)| x != y)
}
