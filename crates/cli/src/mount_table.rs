//! The file systems a serving process mounts (`cairn serve --mount`, `--mount-all`, and
//! `cairn mount` sent over the control socket to a running service).
//!
//! A mount spec is `DATASET[=DIR][:ro]`; without DIR the dataset's `mountpoint` is used.
//! Each mount is recorded in this home (`mount_cmds::record_mount`) while it is served.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cairn_objset::{DatasetKind, Store};

/// A file system this process serves.
struct ServedMount {
    dataset: String,
    dir: PathBuf,
    mounted: Option<cairn_fuse::Mounted>,
}

/// The mounts of one serving process.
pub struct MountTable {
    store: Arc<Store>,
    served: Mutex<Vec<ServedMount>>,
}

/// (dataset, dir, read-only) of a spec; `all` marks specs from `--mount-all`, which skip
/// datasets whose mountpoint is none/legacy instead of failing.
fn parse_spec(
    store: &Store,
    spec: &str,
    all: bool,
) -> Result<Option<(String, PathBuf, bool)>, String> {
    let (spec, ro) = match spec.strip_suffix(":ro") {
        Some(s) => (s, true),
        None => (spec, false),
    };
    if let Some((ds, dir)) = spec.split_once('=') {
        return Ok(Some((ds.to_string(), PathBuf::from(dir), ro)));
    }
    let (mp, _) = store
        .get_property(spec, "mountpoint")
        .map_err(|e| e.to_string())?;
    if !mp.starts_with('/') {
        if all {
            return Ok(None);
        }
        return Err(format!(
            "'{spec}' has mountpoint={mp}; give a directory: cairn mount {spec} DIR"
        ));
    }
    Ok(Some((spec.to_string(), PathBuf::from(mp), ro)))
}

/// The datasets `--mount-all` mounts: file systems with canmount=on.
fn mountable(store: &Store) -> Vec<String> {
    store
        .datasets()
        .datasets
        .into_iter()
        .filter(|ds| ds.kind == DatasetKind::Filesystem)
        .filter(|ds| {
            store
                .get_property(&ds.name, "canmount")
                .is_ok_and(|v| v.0 == "on")
        })
        .map(|ds| ds.name)
        .collect()
}

fn fs_options(
    store: &Store,
    dataset: &str,
    read_only: bool,
) -> Result<cairn_fuse::FsOptions, String> {
    let prop = |k: &str| {
        store
            .get_property(dataset, k)
            .map(|v| v.0)
            .map_err(|e| e.to_string())
    };
    Ok(cairn_fuse::FsOptions {
        atime: cairn_fuse::AtimeMode::parse(&prop("atime")?)
            .unwrap_or(cairn_fuse::AtimeMode::Relatime),
        readonly: read_only || prop("readonly")? == "on",
        xattr: prop("xattr")? == "on",
        snapdir_visible: prop("snapdir")? == "visible",
        ..cairn_fuse::FsOptions::default()
    })
}

impl MountTable {
    pub fn new(store: Arc<Store>) -> MountTable {
        MountTable {
            store,
            served: Mutex::new(Vec::new()),
        }
    }

    fn served(&self) -> std::sync::MutexGuard<'_, Vec<ServedMount>> {
        self.served.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Mounts what `--mount` specs and `--mount-all` ask for, parents before children.
    pub fn mount_initial(&self, specs: &[String], all: bool) -> Result<(), String> {
        let mut wanted = Vec::new();
        for spec in specs {
            wanted.extend(parse_spec(&self.store, spec, false)?);
        }
        if all {
            for ds in mountable(&self.store) {
                if !wanted.iter().any(|(d, ..)| *d == ds) {
                    wanted.extend(parse_spec(&self.store, &ds, true)?);
                }
            }
        }
        // Parents before children, so a child's mount point is inside its parent's mount.
        wanted.sort_by(|a, b| a.1.cmp(&b.1));
        for (ds, dir, ro) in wanted {
            self.mount_one(&ds, dir, ro)?;
        }
        Ok(())
    }

    /// Mounts one spec (the control socket's `mount SPEC`); says where.
    pub fn mount_spec(&self, spec: &str) -> Result<String, String> {
        let Some((ds, dir, ro)) = parse_spec(&self.store, spec, false)? else {
            return Err(format!("'{spec}' cannot be mounted"));
        };
        if self
            .served()
            .iter()
            .any(|m| m.dataset == ds && m.mounted.is_some())
        {
            return Err(format!("'{ds}' is already mounted; one mount per dataset"));
        }
        self.mount_one(&ds, dir.clone(), ro)?;
        Ok(format!("mounted '{ds}' at {}", dir.display()))
    }

    fn mount_one(&self, ds: &str, dir: PathBuf, ro: bool) -> Result<(), String> {
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot make mount point {}: {e}", dir.display()))?;
        let opts = fs_options(&self.store, ds, ro)?;
        let m = cairn_fuse::mount(self.store.clone(), ds, &dir, opts).map_err(|e| e.to_string())?;
        eprintln!("cairn: mounted {ds} at {}", dir.display());
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        if let Err(e) = crate::mount_cmds::record_mount(ds, &dir) {
            eprintln!("cairn: cannot record the mount of {ds}: {e}");
        }
        self.served().push(ServedMount {
            dataset: ds.to_string(),
            dir,
            mounted: Some(m),
        });
        Ok(())
    }

    /// Joins the sessions of mounts that were unmounted and forgets them.
    pub fn reap(&self) {
        let mut served = self.served();
        for m in served.iter_mut() {
            if m.mounted.as_ref().is_some_and(|s| s.is_finished()) {
                if let Some(s) = m.mounted.take() {
                    if let Err(e) = s.join() {
                        eprintln!("cairn: the session of {} ended with {e}", m.dataset);
                    }
                }
                crate::mount_cmds::forget_mount(&m.dataset);
            }
        }
        served.retain(|m| m.mounted.is_some());
    }

    /// (dataset, directory) of every mount served now.
    pub fn mounted(&self) -> Vec<(String, PathBuf)> {
        self.served()
            .iter()
            .filter(|m| m.mounted.as_ref().is_some_and(|s| !s.is_finished()))
            .map(|m| (m.dataset.clone(), m.dir.clone()))
            .collect()
    }

    /// Whether no mount is served any more.
    pub fn is_empty(&self) -> bool {
        self.served()
            .iter()
            .all(|m| m.mounted.as_ref().is_none_or(|s| s.is_finished()))
    }

    /// Unmounts what is still mounted (last mounted first) and waits for every session.
    pub fn stop_all(&self) {
        let mut served = self.served();
        for m in served.iter_mut().rev() {
            if let Some(mounted) = m.mounted.take() {
                let r = if mounted.is_finished() {
                    mounted.join()
                } else {
                    mounted.unmount()
                };
                if let Err(e) = r {
                    eprintln!("cairn: unmounting {}: {e}", m.dataset);
                }
                crate::mount_cmds::forget_mount(&m.dataset);
            }
        }
        served.clear();
    }
}
