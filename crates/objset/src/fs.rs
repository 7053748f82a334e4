//! Datasets, properties, files, directories and volumes: what users name with
//! `POOL/DATASET[/PATH]`.

use std::collections::BTreeMap;

use cairn_pool::Pool;

use crate::core::{Prefetched, State, StoreCore};
use crate::dataset::{validate_component, Dataset, DatasetKind, DatasetTable, NO_PARENT};
use crate::dir::DirEntry;
use crate::dir_ops;
use crate::dnode::{Dnode, ObjectKind};
use crate::error::StoreError;
use crate::intent_state::{IntentOp, LogPolicy};
use crate::object::read_for_update;
use crate::property_values::validate_property;
use crate::props::size_property;
use crate::readahead::Prefetch;

/// What a path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub dataset: u32,
    pub object: u64,
    pub kind: ObjectKind,
}

/// One line of `cairn ls`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ListEntry {
    pub name: String,
    pub kind: String,
    pub size: u64,
    pub object: u64,
}

/// Space and properties of a dataset, as `cairn dataset list` shows them.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DatasetInfo {
    pub name: String,
    pub kind: DatasetKind,
    pub used: u64,
    pub avail: u64,
    pub refer: u64,
    /// Bytes only its snapshots hold (part of `used`).
    pub usedbysnapshots: u64,
    /// Bytes its head references that its newest snapshot does not.
    pub written: u64,
    pub compressratio: f64,
    pub volsize: Option<u64>,
}

/// Splits `pool/ds/x/y` into the longest existing file-system dataset and the rest.
fn split_path<'a>(table: &DatasetTable, path: &'a str) -> Option<(&'a str, Vec<&'a str>)> {
    let path = path.trim_end_matches('/');
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    for n in (1..=parts.len()).rev() {
        let name = parts[..n].join("/");
        if table.by_name(&name).is_some() {
            let ds_len = name.len();
            return Some((&path[..ds_len], parts[n..].to_vec()));
        }
    }
    None
}

impl StoreCore {
    // ---- datasets ------------------------------------------------------------------------

    pub fn datasets(&self) -> DatasetTable {
        self.lock().datasets.clone()
    }

    pub(crate) fn create_dataset_locked(
        &self,
        st: &mut State,
        name: &str,
        parent: Option<u32>,
        kind: DatasetKind,
        props: BTreeMap<String, String>,
        volsize: u64,
    ) -> Result<u32, StoreError> {
        if st.datasets.by_name(name).is_some() {
            return Err(StoreError::DatasetExists(name.to_string()));
        }
        let id = st.datasets.next_id();
        st.datasets.datasets.push(Dataset {
            id,
            parent: parent.unwrap_or(NO_PARENT),
            kind,
            name: name.to_string(),
            object: 0,
            created_txg: st.txg,
            used: 0,
            logical: 0,
            physical: 0,
            props,
        });
        let object = match kind {
            DatasetKind::Filesystem => {
                let dir = self.create_object_locked(st, ObjectKind::Directory, id, 16 << 10)?;
                let dn = &mut st.objects.get_mut(&dir).expect("created").dnode;
                (dn.mode, dn.nlink) = (0o40755, 2);
                dir
            }
            DatasetKind::Volume => {
                let bs = size_property(&st.datasets, id, "volblocksize");
                let vol = self.create_object_locked(st, ObjectKind::Volume, id, bs)?;
                st.objects.get_mut(&vol).expect("created").dnode.size = volsize;
                vol
            }
        };
        st.datasets.by_id_mut(id).expect("pushed").object = object;
        st.datasets_dirty = true;
        Ok(id)
    }

    /// `cairn dataset create` / `cairn volume create`: the parent must exist (or `parents`).
    pub fn dataset_create(
        &self,
        name: &str,
        kind: DatasetKind,
        props: BTreeMap<String, String>,
        volsize: Option<u64>,
        parents: bool,
    ) -> Result<(), StoreError> {
        let mut props_ok = BTreeMap::new();
        for (k, v) in props {
            props_ok.insert(k.clone(), validate_property(&k, &v)?);
        }
        let volsize = match kind {
            DatasetKind::Volume => {
                let size = volsize.filter(|&v| v > 0).ok_or_else(|| {
                    StoreError::BadProperty("a volume needs a size above 0 (-V SIZE)".into())
                })?;
                props_ok.insert("volsize".into(), size.to_string());
                size
            }
            DatasetKind::Filesystem => 0,
        };
        if kind == DatasetKind::Volume {
            let bs = crate::dataset::parse_size(
                props_ok
                    .get("volblocksize")
                    .map(String::as_str)
                    .unwrap_or("16K"),
            )
            .unwrap_or(16384);
            if volsize % bs != 0 {
                return Err(StoreError::BadProperty(format!(
                    "volsize {volsize} must be a multiple of volblocksize {bs}"
                )));
            }
        }
        let mut st = self.lock();
        let (parent_name, leaf) = name
            .rsplit_once('/')
            .ok_or_else(|| StoreError::BadName(name.to_string(), "give POOL/NAME".into()))?;
        validate_component(leaf)?;
        let parent = match st.datasets.by_name(parent_name) {
            Some(p) => p.clone(),
            None if parents => {
                drop(st);
                self.dataset_create(
                    parent_name,
                    DatasetKind::Filesystem,
                    BTreeMap::new(),
                    None,
                    true,
                )?;
                st = self.lock();
                st.datasets
                    .by_name(parent_name)
                    .expect("just created")
                    .clone()
            }
            None => return Err(StoreError::NoSuchDataset(parent_name.to_string())),
        };
        if parent.kind != DatasetKind::Filesystem {
            return Err(StoreError::WrongKind(
                parent_name.into(),
                "volume",
                "volumes cannot have children",
            ));
        }
        self.create_dataset_locked(&mut st, name, Some(parent.id), kind, props_ok, volsize)?;
        self.maybe_sync(&mut st)?;
        Ok(())
    }

    /// Destroys a dataset (and with `recursive` its children); its space is freed at sync.
    pub fn dataset_destroy(&self, name: &str, recursive: bool) -> Result<(), StoreError> {
        let st = self.lock();
        let ds = st
            .datasets
            .by_name(name)
            .cloned()
            .ok_or_else(|| StoreError::NoSuchDataset(name.to_string()))?;
        if ds.parent == NO_PARENT {
            return Err(StoreError::BadName(
                name.into(),
                "the root dataset goes with the pool (`cairn destroy`)".into(),
            ));
        }
        let children: Vec<String> = st
            .datasets
            .children(ds.id)
            .map(|c| c.name.clone())
            .collect();
        if !children.is_empty() && !recursive {
            return Err(StoreError::NotEmpty(format!(
                "{name} (has children: {}; use -r)",
                children.join(", ")
            )));
        }
        let snapshots: Vec<String> = st
            .datasets
            .snapshots
            .of(ds.id)
            .map(|r| format!("{name}@{}", r.name))
            .collect();
        if !snapshots.is_empty() && !recursive {
            return Err(StoreError::NotEmpty(format!(
                "{name} (has snapshots: {}; destroy them first, or use -r)",
                snapshots.join(", ")
            )));
        }
        drop(st);
        for c in children {
            self.dataset_destroy(&c, true)?;
        }
        let mut st = self.wait_for_writer(self.lock());
        self.destroy_all_snapshots_locked(&mut st, ds.id)?;
        for prop in [
            crate::dataset::RECEIVE_MAP_PROP,
            crate::dataset::CLONE_MAP_PROP,
        ] {
            if let Some(Ok(object)) = ds.props.get(prop).map(|m| m.parse()) {
                self.free_object_locked(&mut st, object)?;
            }
        }
        match ds.kind {
            DatasetKind::Volume => self.free_object_locked(&mut st, ds.object)?,
            DatasetKind::Filesystem => self.free_tree_locked(&mut st, ds.object)?,
        }
        if let Some(origin) = st.datasets.origin_of(ds.id).map(|r| r.txg) {
            st.snaps.destroyed_clones.insert(ds.id, origin);
        }
        st.datasets.datasets.retain(|d| d.id != ds.id);
        st.datasets_dirty = true;
        Ok(())
    }

    /// Frees a directory and everything below it.
    fn free_tree_locked(&self, st: &mut State, dir: u64) -> Result<(), StoreError> {
        for (_, e) in self.dir_list(st, dir)? {
            match e.kind {
                ObjectKind::Directory => self.free_tree_locked(st, e.object)?,
                _ => self.unlink_object_locked(st, e.object)?,
            }
        }
        self.free_object_locked(st, dir)
    }

    /// A name of object `id` is gone: one link fewer, and the object is freed with its last
    /// (a hard link elsewhere keeps it).
    fn unlink_object_locked(&self, st: &mut State, id: u64) -> Result<(), StoreError> {
        let dnode = &mut self.object_mut(st, id)?.dnode;
        if dnode.nlink <= 1 {
            return self.free_object_locked(st, id);
        }
        dnode.nlink -= 1;
        dnode.ctime_ns = crate::core::now_ns();
        self.object_mut(st, id)?.dnode_dirty = true;
        Ok(())
    }

    pub fn set_property(&self, dataset: &str, key: &str, value: &str) -> Result<(), StoreError> {
        let canonical = validate_property(key, value)?;
        let mut st = self.lock();
        let ds = st
            .datasets
            .by_name(dataset)
            .cloned()
            .ok_or_else(|| StoreError::NoSuchDataset(dataset.to_string()))?;
        match key {
            "volblocksize" => {
                return Err(StoreError::BadProperty(
                    "volblocksize is fixed when the volume is created".into(),
                ))
            }
            "volsize" => {
                if ds.kind != DatasetKind::Volume {
                    return Err(StoreError::WrongKind(
                        dataset.into(),
                        "file system",
                        "volsize applies to volumes",
                    ));
                }
                let size: u64 = canonical.parse().unwrap_or(0);
                let bs = u64::from(self.object_mut(&mut st, ds.object)?.dnode.block_size);
                if !size.is_multiple_of(bs) {
                    return Err(StoreError::BadProperty(format!(
                        "volsize must be a multiple of volblocksize {bs}"
                    )));
                }
                self.truncate_locked(&mut st, ds.object, size)?;
            }
            "recordsize" if ds.kind == DatasetKind::Volume => {
                return Err(StoreError::WrongKind(
                    dataset.into(),
                    "volume",
                    "use volblocksize",
                ))
            }
            _ => {}
        }
        st.datasets
            .by_id_mut(ds.id)
            .expect("exists")
            .props
            .insert(key.to_string(), canonical);
        st.datasets_dirty = true;
        Ok(())
    }

    /// (value, source) of a property; also read-only ones: used, avail, refer, compressratio, type.
    pub fn get_property(&self, dataset: &str, key: &str) -> Result<(String, String), StoreError> {
        let info = self.dataset_info(dataset)?;
        let st = self.lock();
        let ds = st.datasets.by_name(dataset).expect("info found it");
        Ok(match key {
            "used" => (info.used.to_string(), "-".into()),
            "available" | "avail" => (info.avail.to_string(), "-".into()),
            "referenced" | "refer" => (info.refer.to_string(), "-".into()),
            "usedbysnapshots" => (info.usedbysnapshots.to_string(), "-".into()),
            "usedbydataset" => (info.refer.to_string(), "-".into()),
            "usedbychildren" => (
                (info.used.saturating_sub(info.refer + info.usedbysnapshots)).to_string(),
                "-".into(),
            ),
            "written" => (info.written.to_string(), "-".into()),
            k if k.starts_with("written@") => {
                let snap = &k["written@".len()..];
                let full = match snap.split_once('@') {
                    Some(_) => snap.to_string(),
                    None => format!("{dataset}@{snap}"),
                };
                drop(st);
                return Ok((self.written_since(&full)?.to_string(), "-".into()));
            }
            "origin" => (
                ds.props
                    .get(crate::dataset::ORIGIN_PROP)
                    .cloned()
                    .unwrap_or_else(|| "-".into()),
                "-".into(),
            ),
            "receive_resume_token" => (
                ds.props
                    .get(crate::dataset::RESUME_TOKEN_PROP)
                    .cloned()
                    .unwrap_or_else(|| "-".into()),
                "-".into(),
            ),
            "compressratio" => (format!("{:.2}x", info.compressratio), "-".into()),
            "type" => (
                match info.kind {
                    DatasetKind::Filesystem => "filesystem",
                    DatasetKind::Volume => "volume",
                }
                .into(),
                "-".into(),
            ),
            "mountpoint" if ds.kind == DatasetKind::Filesystem => {
                let (raw, source) = st.datasets.property(ds.id, key);
                let value = match raw.as_str() {
                    "none" | "legacy" => raw,
                    _ => st.datasets.mountpoint(ds.id).unwrap_or(raw),
                };
                (value, source)
            }
            _ => {
                validate_known(key)?;
                st.datasets.property(ds.id, key)
            }
        })
    }

    pub fn dataset_info(&self, name: &str) -> Result<DatasetInfo, StoreError> {
        let st = self.lock();
        let ds = st
            .datasets
            .by_name(name)
            .ok_or_else(|| StoreError::NoSuchDataset(name.to_string()))?;
        let (logical, physical) = st.datasets.bytes_total(ds.id);
        let snapshots = crate::snapshot_ops::snapshot_used_subtree(&self.pool, &st, ds.id);
        let (usedbysnapshots, written) =
            crate::snapshot_ops::snapshot_space_locked(&self.pool, &st, ds.id);
        Ok(DatasetInfo {
            name: ds.name.clone(),
            kind: ds.kind,
            used: st.datasets.used_total(ds.id).saturating_add(snapshots),
            avail: self.dataset_avail_locked(&st, ds.id),
            refer: ds.used,
            usedbysnapshots,
            written,
            compressratio: if physical == 0 {
                1.0
            } else {
                logical as f64 / physical as f64
            },
            volsize: (ds.kind == DatasetKind::Volume).then(|| {
                ds.props
                    .get("volsize")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            }),
        })
    }

    // ---- directories and files -------------------------------------------------------------

    /// Resolves `POOL/DS/PATH` (PATH may be empty: the dataset's root or the volume).
    pub fn resolve(&self, path: &str) -> Result<Resolved, StoreError> {
        let mut st = self.lock();
        self.resolve_locked(&mut st, path)
    }

    fn resolve_locked(&self, st: &mut State, path: &str) -> Result<Resolved, StoreError> {
        let (ds_name, rest) = split_path(&st.datasets, path).ok_or_else(|| {
            StoreError::NoSuchDataset(path.split('/').next().unwrap_or(path).to_string())
        })?;
        let ds = st
            .datasets
            .by_name(ds_name)
            .expect("split found it")
            .clone();
        let mut cur = Resolved {
            dataset: ds.id,
            object: ds.object,
            kind: match ds.kind {
                DatasetKind::Filesystem => ObjectKind::Directory,
                DatasetKind::Volume => ObjectKind::Volume,
            },
        };
        for (i, part) in rest.iter().enumerate() {
            if cur.kind != ObjectKind::Directory {
                return Err(StoreError::NotADirectory(format!(
                    "{ds_name}/{}",
                    rest[..i].join("/")
                )));
            }
            let e = self
                .dir_lookup(st, cur.object, part)?
                .ok_or_else(|| StoreError::NotFound(path.to_string()))?;
            cur = Resolved {
                dataset: ds.id,
                object: e.object,
                kind: e.kind,
            };
        }
        Ok(cur)
    }

    /// Creates (or truncates, with `overwrite`) a file at `path`, making parent directories.
    pub fn create_file(&self, path: &str, overwrite: bool) -> Result<u64, StoreError> {
        let mut st = self.lock();
        let (dir, name, dataset) = self.parent_dir_locked(&mut st, path, true)?;
        self.check_writable_dataset(&st, dataset)?;
        if let Some(e) = self.dir_lookup(&mut st, dir, &name)? {
            if e.kind == ObjectKind::Directory {
                return Err(StoreError::IsADirectory(path.into()));
            }
            if !overwrite {
                return Err(StoreError::Exists(path.into()));
            }
            let id = e.object;
            self.truncate_locked(&mut st, id, 0)?;
            return Ok(id);
        }
        let rs = size_property(&st.datasets, dataset, "recordsize");
        let id = self.create_object_locked(&mut st, ObjectKind::File, dataset, rs)?;
        st.objects.get_mut(&id).expect("created").dnode.mode = 0o100644;
        let entry = DirEntry {
            object: id,
            kind: ObjectKind::File,
        };
        if let Err(e) = self.dir_insert(&mut st, dir, &name, entry) {
            self.free_object_locked(&mut st, id)?;
            return Err(e);
        }
        self.touch_changed(&mut st, dir)?;
        Ok(id)
    }

    /// Gives the file at `from` the name `to` in the same directory, in one step of the
    /// open txg: an existing file at `to` loses that name (and is freed unless it has another
    /// hard link; a directory there is an error). What a
    /// `put` that wrote a temporary file does last, so `to` names the old contents or the
    /// new, never a part of them.
    pub fn replace_with(&self, from: &str, to: &str) -> Result<(), StoreError> {
        let mut st = self.lock();
        let (dir, from_name, dataset) = self.parent_dir_locked(&mut st, from, false)?;
        let (to_dir, to_name, _) = self.parent_dir_locked(&mut st, to, false)?;
        assert_eq!(dir, to_dir, "replace_with stays in one directory");
        self.check_writable_dataset(&st, dataset)?;
        let entry = self
            .dir_lookup(&mut st, dir, &from_name)?
            .ok_or_else(|| StoreError::NotFound(from.into()))?;
        if from_name == to_name {
            return Ok(());
        }
        let old = self.dir_lookup(&mut st, dir, &to_name)?;
        if old.is_some_and(|o| o.kind == ObjectKind::Directory) {
            return Err(StoreError::IsADirectory(to.into()));
        }
        // The new name first: when it cannot be added (a full DIR2 leaf), nothing changed.
        self.dir_insert(&mut st, dir, &to_name, entry)?;
        if let Some(old) = old {
            self.unlink_object_locked(&mut st, old.object)?;
        }
        self.dir_remove(&mut st, dir, &from_name)?;
        self.touch_changed(&mut st, dir)
    }

    /// Creates a directory (and parents).
    pub fn mkdir(&self, path: &str) -> Result<u64, StoreError> {
        let mut st = self.lock();
        self.mkdir_locked(&mut st, path)
    }

    fn mkdir_locked(&self, st: &mut State, path: &str) -> Result<u64, StoreError> {
        if let Ok(r) = self.resolve_locked(st, path) {
            return match r.kind {
                ObjectKind::Directory => Ok(r.object),
                _ => Err(StoreError::Exists(path.into())),
            };
        }
        let (dir, name, dataset) = self.parent_dir_locked(st, path, true)?;
        self.check_writable_dataset(st, dataset)?;
        let id = self.create_object_locked(st, ObjectKind::Directory, dataset, 16 << 10)?;
        let dn = &mut st.objects.get_mut(&id).expect("created").dnode;
        (dn.mode, dn.nlink) = (0o40755, 2);
        let entry = DirEntry {
            object: id,
            kind: ObjectKind::Directory,
        };
        if let Err(e) = self.dir_insert(st, dir, &name, entry) {
            self.free_object_locked(st, id)?;
            return Err(e);
        }
        // Its ".." is one more link to the parent (as the mounted file system counts them).
        self.object_mut(st, dir)?.dnode.nlink += 1;
        self.touch_changed(st, dir)?;
        Ok(id)
    }

    /// (parent directory object, last component, dataset) of `path`.
    fn parent_dir_locked(
        &self,
        st: &mut State,
        path: &str,
        make: bool,
    ) -> Result<(u64, String, u32), StoreError> {
        let (ds_name, rest) = split_path(&st.datasets, path).ok_or_else(|| {
            StoreError::NoSuchDataset(path.split('/').next().unwrap_or(path).to_string())
        })?;
        let ds = st
            .datasets
            .by_name(ds_name)
            .expect("split found it")
            .clone();
        if ds.kind != DatasetKind::Filesystem {
            return Err(StoreError::WrongKind(
                ds_name.into(),
                "volume",
                "volumes hold blocks, not files",
            ));
        }
        let Some((last, dirs)) = rest.split_last() else {
            return Err(StoreError::BadName(
                path.into(),
                "give a path inside the dataset, e.g. POOL/DS/file".into(),
            ));
        };
        validate_file_name(last)?;
        let parent_path = format!("{ds_name}/{}", dirs.join("/"));
        let parent = if dirs.is_empty() {
            ds.object
        } else if make {
            self.mkdir_locked(st, &parent_path)?
        } else {
            let r = self.resolve_locked(st, &parent_path)?;
            if r.kind != ObjectKind::Directory {
                return Err(StoreError::NotADirectory(parent_path));
            }
            r.object
        };
        Ok((parent, last.to_string(), ds.id))
    }

    /// Writes into a file or volume object at `offset` (space and read-only checked).
    /// A write that covers part of a block not yet dirty needs the block's current
    /// contents: they are read and verified without the store lock (as reads are, under
    /// the read gate), so other writers and reads go on meanwhile; the block is used if the
    /// object still points to it once the lock is back, and read again otherwise.
    pub fn write(&self, r: &Resolved, offset: u64, data: &[u8]) -> Result<(), StoreError> {
        self.write_checked(r, offset, data, true)
    }

    /// `write` into a dataset even if it is read-only (`cairn receive` does, as zfs does).
    pub(crate) fn write_unchecked(
        &self,
        r: &Resolved,
        offset: u64,
        data: &[u8],
    ) -> Result<(), StoreError> {
        self.write_checked(r, offset, data, false)
    }

    fn write_checked(
        &self,
        r: &Resolved,
        offset: u64,
        data: &[u8],
        check_readonly: bool,
    ) -> Result<(), StoreError> {
        self.refuse_if_suspended()?;
        let mut prefetched = Prefetched::new();
        // Blocks that keep changing under the prefetch (other writers, syncs) are read under
        // the lock after a few rounds.
        for round in 0.. {
            let mut st = self.throttle(self.lock());
            if check_readonly {
                self.check_writable_dataset(&st, r.dataset)?;
            }
            if r.kind == ObjectKind::Volume {
                let size = self.object_mut(&mut st, r.object)?.dnode.size;
                if offset
                    .checked_add(data.len() as u64)
                    .is_none_or(|e| e > size)
                {
                    let name = st
                        .datasets
                        .by_id(r.dataset)
                        .map(|d| d.name.clone())
                        .unwrap_or_default();
                    return Err(StoreError::PastEnd {
                        name,
                        offset,
                        len: data.len() as u64,
                        size,
                    });
                }
            }
            let wanted =
                self.blocks_to_prefetch(&mut st, r.object, offset, data.len(), &prefetched)?;
            if wanted.is_empty() || round >= 3 {
                self.charge_dataset(&mut st, r.dataset, data.len() as u64)?;
                self.reserve_space(&mut st, data.len() as u64)?;
                self.write_locked_with(&mut st, r.object, offset, data, &mut prefetched)?;
                self.nudge_writer(&st);
                // (receive and log replay write through `write_unchecked`: no intent.)
                let policy = check_readonly.then(|| self.log_policy(&st, r.dataset));
                self.maybe_sync(&mut st)?;
                let pause = self.drain_delay(&st);
                drop(st);
                if let Some(pause) = pause {
                    std::thread::sleep(pause);
                }
                let Some(policy) = policy else { return Ok(()) };
                let op = IntentOp::Write {
                    offset,
                    len: data.len() as u64,
                };
                return self.note_intent(policy, r.clone(), op);
            }
            // Taken before the state lock is released: no sync can free the blocks first.
            let gate = self.read_gate.read().unwrap_or_else(|p| p.into_inner());
            let block_size = self.object_mut(&mut st, r.object)?.dnode.block_size as usize;
            drop(st);
            for (blkid, bp) in wanted {
                let block = read_for_update(self.pool(), &bp, block_size)?;
                prefetched.insert(blkid, (bp, block));
            }
            drop(gate);
        }
        unreachable!("the loop returns by its fourth round")
    }

    /// Reads from a file or volume; returns bytes read (short at end of file).
    /// Blocks are fetched from disk without the store lock (reads run in parallel and
    /// beside writes); the read gate keeps them from being reused meanwhile. A sequential
    /// stream on rotating disks also queues a read-ahead (`crate::readahead`).
    pub fn read(&self, r: &Resolved, offset: u64, buf: &mut [u8]) -> Result<usize, StoreError> {
        let began = std::time::Instant::now();
        self.readahead
            .wait_for_fetch(r.object, offset, buf.len() as u64);
        let (plan, ahead, gate) = {
            let mut st = self.lock();
            self.object_mut(&mut st, r.object)?;
            let open_txg = st.txg;
            let State { objects, cache, .. } = &mut *st;
            let obj = objects.get(&r.object).expect("loaded");
            let plan = crate::object::plan_read(self.pool(), cache, r.object, obj, offset, buf)?;
            let ahead = self
                .readahead
                .note_read(r.object, offset, plan.len as u64, obj.dnode.size)
                .map(|range| Prefetch {
                    object: r.object,
                    range,
                    bps: crate::object::disk_blocks(
                        self.pool(),
                        cache,
                        r.object,
                        obj,
                        range.0,
                        range.1,
                    )
                    .unwrap_or_default(),
                    open_txg,
                });
            // Taken before the state lock is released: no sync can slip in between.
            let gate = self.read_gate.read().unwrap_or_else(|p| p.into_inner());
            (plan, ahead, gate)
        };
        let fetched = plan.fetch(self.pool(), buf);
        if let Some(ahead) = ahead {
            match fetched.is_ok() && !ahead.bps.is_empty() {
                true => self.readahead.queue(ahead),
                false => self.readahead.cancel(ahead.object, ahead.range),
            }
        }
        drop(gate);
        self.read_latency.record(began.elapsed());
        match fetched {
            Ok(()) => Ok(plan.len),
            Err(StoreError::Pool(e)) => {
                let mut st = self.lock();
                self.mark_damaged(&mut st, r.dataset, r.object);
                Err(StoreError::Pool(e))
            }
            Err(e) => Err(e),
        }
    }

    /// Zeroes a range of a volume or file, freeing whole blocks (TRIM, hole punching).
    pub fn punch(&self, r: &Resolved, offset: u64, len: u64) -> Result<(), StoreError> {
        let policy = self.punch_unlogged(r, offset, len)?;
        self.note_intent(policy, r.clone(), IntentOp::Punch { offset, len })
    }

    /// `punch` without an intent (log replay); returns the dataset's log policy.
    pub(crate) fn punch_unlogged(
        &self,
        r: &Resolved,
        offset: u64,
        len: u64,
    ) -> Result<LogPolicy, StoreError> {
        let mut st = self.lock();
        self.check_writable_dataset(&st, r.dataset)?;
        self.punch_locked(&mut st, r.object, offset, len)?;
        let policy = self.log_policy(&st, r.dataset);
        self.maybe_sync(&mut st)?;
        Ok(policy)
    }

    pub fn truncate(&self, r: &Resolved, size: u64) -> Result<(), StoreError> {
        let policy = self.truncate_unlogged(r, size)?;
        self.note_intent(policy, r.clone(), IntentOp::Truncate { size })
    }

    /// `truncate` without an intent (log replay); returns the dataset's log policy.
    pub(crate) fn truncate_unlogged(
        &self,
        r: &Resolved,
        size: u64,
    ) -> Result<LogPolicy, StoreError> {
        let mut st = self.lock();
        self.check_writable_dataset(&st, r.dataset)?;
        if r.kind == ObjectKind::Volume {
            return Err(StoreError::WrongKind(
                "volume".into(),
                "volume",
                "set volsize instead",
            ));
        }
        self.truncate_locked(&mut st, r.object, size)?;
        Ok(self.log_policy(&st, r.dataset))
    }

    pub fn object_dnode(&self, r: &Resolved) -> Result<Dnode, StoreError> {
        self.dnode(r.object)
    }

    /// Lists a directory (or describes a single file).
    pub fn list(&self, path: &str) -> Result<Vec<ListEntry>, StoreError> {
        let mut st = self.lock();
        let r = self.resolve_locked(&mut st, path)?;
        if r.kind != ObjectKind::Directory {
            let size = self.object_mut(&mut st, r.object)?.dnode.size;
            let name = path.rsplit('/').next().unwrap_or(path).to_string();
            return Ok(vec![ListEntry {
                name,
                kind: kind_name(r.kind).into(),
                size,
                object: r.object,
            }]);
        }
        let entries = self.dir_list(&mut st, r.object)?;
        let mut out = Vec::with_capacity(entries.len());
        // Child datasets appear where a mount would put them: in their parent's root.
        let here = st.datasets.by_id(r.dataset).cloned();
        if let Some(ds) = here.filter(|ds| ds.object == r.object) {
            for c in st.datasets.children(ds.id) {
                let name = c.name.rsplit('/').next().unwrap_or(&c.name).to_string();
                let kind = match c.kind {
                    DatasetKind::Filesystem => "dataset",
                    DatasetKind::Volume => "volume",
                };
                out.push(ListEntry {
                    name,
                    kind: kind.into(),
                    size: c.used,
                    object: c.object,
                });
            }
        }
        for (name, e) in entries {
            let size = self.object_mut(&mut st, e.object)?.dnode.size;
            out.push(ListEntry {
                name,
                kind: kind_name(e.kind).into(),
                size,
                object: e.object,
            });
        }
        Ok(out)
    }

    /// Removes a file, or a directory (empty, or any with `recursive`).
    pub fn remove(&self, path: &str, recursive: bool) -> Result<(), StoreError> {
        let mut st = self.lock();
        let (dir, name, dataset) = self.parent_dir_locked(&mut st, path, false)?;
        self.check_writable_dataset(&st, dataset)?;
        let e = self
            .dir_lookup(&mut st, dir, &name)?
            .ok_or_else(|| StoreError::NotFound(path.into()))?;
        if e.kind == ObjectKind::Directory {
            if !recursive && !self.dir_is_empty(&mut st, e.object)? {
                return Err(StoreError::NotEmpty(path.into()));
            }
            self.free_tree_locked(&mut st, e.object)?;
            let parent = &mut self.object_mut(&mut st, dir)?.dnode;
            parent.nlink = parent.nlink.saturating_sub(1).max(2);
        } else {
            self.unlink_object_locked(&mut st, e.object)?;
        }
        self.dir_remove(&mut st, dir, &name)?;
        self.touch_changed(&mut st, dir)
    }

    /// Allocation of `[offset, offset+len)` of a file or volume as runs of (bytes, is_hole),
    /// for NBD `base:allocation`. Covers at most 64 Ki blocks per call (a prefix of the
    /// range, as the NBD spec allows).
    pub fn allocation_map(
        &self,
        r: &Resolved,
        offset: u64,
        len: u64,
    ) -> Result<Vec<(u64, bool)>, StoreError> {
        let mut st = self.lock();
        self.object_mut(&mut st, r.object)?;
        let obj = st.objects.get(&r.object).expect("loaded").clone();
        let bs = u64::from(obj.dnode.block_size);
        let end = (offset + len).min(obj.dnode.size);
        let mut runs: Vec<(u64, bool)> = Vec::new();
        let mut pos = offset;
        let mut blocks = 0;
        while pos < end && blocks < 65536 {
            let blkid = pos / bs;
            let next = ((blkid + 1) * bs).min(end);
            let hole = if obj.dirty.contains_key(&blkid) || obj.syncing.contains_key(&blkid) {
                false
            } else if let Some(bp) = obj.written.get(&blkid) {
                bp.is_hole()
            } else if obj.punched.contains(&blkid) || obj.truncate_from.is_some_and(|f| blkid >= f)
            {
                true
            } else {
                crate::object::lookup_bp(self.pool(), &mut st.cache, r.object, &obj.dnode, blkid)?
                    .is_hole()
            };
            match runs.last_mut() {
                Some((n, h)) if *h == hole => *n += next - pos,
                _ => runs.push((next - pos, hole)),
            }
            pos = next;
            blocks += 1;
        }
        Ok(runs)
    }

    /// Whether the open txg holds any change (an idle pool need not sync).
    pub fn is_dirty(&self) -> bool {
        is_dirty_locked(&self.lock())
    }

    /// Syncs when the open txg holds more dirty data than allowed.
    pub(crate) fn maybe_sync(&self, st: &mut State) -> Result<(), StoreError> {
        if self.over_dirty_limit(st) && self.sync_allowed_midway() {
            self.sync_locked(st)?;
        }
        Ok(())
    }

    /// Objects found unreadable, as `(dataset name, object)`.
    pub fn damaged(&self) -> Vec<(String, u64)> {
        let st = self.lock();
        st.damaged
            .keys()
            .map(|(ds, obj)| {
                (
                    st.datasets
                        .by_id(*ds)
                        .map(|d| d.name.clone())
                        .unwrap_or_default(),
                    *obj,
                )
            })
            .collect()
    }

    /// The error log by name, for `status -v`.
    pub fn error_log(&self) -> ErrorLog {
        match self.lock_for_report() {
            Some(mut st) => error_log_of(self.pool(), &mut st),
            // Suspended: the log is read again once the pool is cleared.
            None => ErrorLog::default(),
        }
    }

    /// Path of an object inside its dataset (searches directories; for error reports).
    pub fn path_of(&self, dataset: &str, object: u64) -> Option<String> {
        let mut st = self.lock();
        path_in(self.pool(), &mut st, dataset, object)
    }

    /// Records that an object could not be read, in the error log the next sync writes.
    pub(crate) fn mark_damaged(&self, st: &mut State, dataset: u32, object: u64) {
        st.damaged.insert((dataset, object), st.txg);
        st.damaged_dirty = true;
    }
}

/// The pool's persistent error log: the files and volumes found damaged beyond redundancy
/// (by a read or a scrub) and not since removed or found whole by a completed scrub.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorLog {
    /// `POOL/DS/PATH` of each damaged object (`DS:<object N>` where no path leads to it).
    pub entries: Vec<String>,
    /// Damaged objects the root block had no room to name.
    pub unlisted: u64,
}

impl ErrorLog {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.unlisted == 0
    }
}

pub(crate) fn error_log_of(pool: &Pool, st: &mut State) -> ErrorLog {
    let keys: Vec<(u32, u64)> = st.damaged.keys().copied().collect();
    let mut entries: Vec<String> = keys
        .into_iter()
        .filter_map(|(ds, obj)| {
            // Entries of a destroyed dataset are gone with it.
            let name = st.datasets.by_id(ds)?.name.clone();
            Some(path_in(pool, st, &name, obj).unwrap_or_else(|| format!("{name}:<object {obj}>")))
        })
        .collect();
    entries.sort();
    ErrorLog {
        entries,
        unlisted: st.damaged_unlisted,
    }
}

/// Path of an object inside its dataset (searches its directories).
fn path_in(pool: &Pool, st: &mut State, dataset: &str, object: u64) -> Option<String> {
    let ds = st.datasets.by_name(dataset)?.clone();
    if ds.object == object {
        return Some(ds.name);
    }
    if ds.kind != DatasetKind::Filesystem {
        return None;
    }
    let mut stack = vec![(ds.object, ds.name.clone())];
    while let Some((dir, prefix)) = stack.pop() {
        for (name, e) in dir_ops::list(pool, st, dir).ok()? {
            let p = format!("{prefix}/{name}");
            if e.object == object {
                return Some(p);
            }
            if e.kind == ObjectKind::Directory {
                stack.push((e.object, p));
            }
        }
    }
    None
}

fn validate_known(key: &str) -> Result<(), StoreError> {
    if crate::dataset::PROPERTIES.iter().any(|p| p.0 == key) {
        Ok(())
    } else {
        Err(StoreError::BadProperty(format!("unknown property '{key}'")))
    }
}

fn validate_file_name(name: &str) -> Result<(), StoreError> {
    if name.is_empty() || name == "." || name == ".." || name.len() > 255 || name.contains('\0') {
        return Err(StoreError::BadName(
            name.into(),
            "not a valid file name".into(),
        ));
    }
    Ok(())
}

/// Whether the open txg holds any change.
pub(crate) fn is_dirty_locked(st: &State) -> bool {
    st.datasets_dirty
        || st.unlinked_dirty
        || st.damaged_dirty
        || st.dirs.any_dirty()
        || st.objects.values().any(|o| o.is_dirty())
}

pub fn kind_name(k: ObjectKind) -> &'static str {
    k.name()
}
