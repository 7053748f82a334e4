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
    read_only: bool,
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
        let m = self.mount_fs(ds, &dir, ro)?;
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        if let Err(e) = crate::mount_cmds::record_mount(ds, &dir) {
            eprintln!("cairn: cannot record the mount of {ds}: {e}");
        }
        self.served().push(ServedMount {
            dataset: ds.to_string(),
            dir,
            read_only: ro,
            mounted: Some(m),
        });
        Ok(())
    }

    /// The FUSE mount itself, with the dataset's properties of now.
    fn mount_fs(
        &self,
        ds: &str,
        dir: &std::path::Path,
        ro: bool,
    ) -> Result<cairn_fuse::Mounted, String> {
        let opts = fs_options(&self.store, ds, ro)?;
        let m = cairn_fuse::mount(self.store.clone(), ds, dir, opts).map_err(|e| e.to_string())?;
        eprintln!("cairn: mounted {ds} at {}", dir.display());
        Ok(m)
    }

    /// Runs `change` (a rollback) with `dataset` unmounted when this process has it mounted,
    /// then mounts it again where it was, as `zfs rollback` does to a mounted file system:
    /// the kernel's caches of names, attributes and pages go with the old mount. A mount in
    /// use (open files, a working directory) is refused, and nothing changes. The table
    /// stays locked throughout, so a service that exits with its last mount does not see
    /// it gone in between.
    pub fn with_unmounted<T>(
        &self,
        dataset: &str,
        change: impl FnOnce() -> Result<T, String>,
    ) -> Result<T, String> {
        let mut served = self.served();
        let live = |m: &ServedMount| m.mounted.as_ref().is_some_and(|s| !s.is_finished());
        let Some(m) = served.iter_mut().find(|m| m.dataset == dataset && live(m)) else {
            drop(served);
            return change();
        };
        unmount_dir(&m.dir).map_err(|e| {
            format!(
                "cannot roll back '{dataset}': its mount at {} is in use ({e}); close what uses it, or unmount it (`cairn umount {}`)",
                m.dir.display(),
                m.dir.display()
            )
        })?;
        if let Some(session) = m.mounted.take() {
            if let Err(e) = session.join() {
                eprintln!("cairn: the session of {dataset} ended with {e}");
            }
        }
        let result = change();
        match self.mount_fs(dataset, &m.dir, m.read_only) {
            Ok(again) => m.mounted = Some(again),
            Err(e) => {
                eprintln!(
                    "cairn: cannot mount {dataset} again at {}: {e}",
                    m.dir.display()
                );
                crate::mount_cmds::forget_mount(dataset);
            }
        }
        result
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

    /// Unmounts every mount (last mounted first) for an export of the pool; a mount in use
    /// stops it with an error (those before it stay unmounted, as with `zpool export`),
    /// unless `force`, which detaches busy mounts lazily. The sessions end by themselves.
    pub fn unmount_all(&self, force: bool) -> Result<(), String> {
        let served = self.served();
        let live = |m: &&ServedMount| m.mounted.as_ref().is_some_and(|s| !s.is_finished());
        for m in served.iter().rev().filter(live) {
            let done = if force {
                unmount_dir_lazily(&m.dir)
            } else {
                unmount_dir(&m.dir)
            };
            done.map_err(|e| {
                format!(
                    "cannot unmount '{}': {e}; close what uses it (or use -f)",
                    m.dir.display()
                )
            })?;
        }
        Ok(())
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

impl crate::served::ServiceMounts for MountTable {
    fn with_unmounted(
        &self,
        dataset: &str,
        change: &mut dyn FnMut() -> Result<(), String>,
    ) -> Result<(), String> {
        MountTable::with_unmounted(self, dataset, change)
    }
}

/// Unmounts `dir` (not lazily: a mount in use stays, and the error says so).
fn unmount_dir(dir: &std::path::Path) -> std::io::Result<()> {
    umount2(dir, 0)
}

/// Detaches `dir` now; the kernel lets go of the file system once nothing uses it.
fn unmount_dir_lazily(dir: &std::path::Path) -> std::io::Result<()> {
    umount2(dir, libc::MNT_DETACH)
}

fn umount2(dir: &std::path::Path, flags: libc::c_int) -> std::io::Result<()> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: umount2 with a NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
