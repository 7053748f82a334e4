//! File systems over FUSE: a cairn dataset mounted with POSIX semantics (issue "A file
//! system you can mount and share"; docs/design.md, "File systems").
//!
//! ```text
//!  kernel VFS ──/dev/fuse──► fuser session (n threads) ──► CairnFs (ops.rs)
//!                                                            │ one store call per request
//!                                                            ▼
//!                                       StoreCore: posix.rs (names, links, times),
//!                                       xattr.rs, fs.rs read/write, txg sync (fsync)
//! ```
//! The kernel checks permissions (`default_permissions`); `allow_other` lets every user
//! (and Samba) in. One process owns the pool and serves the mount; `fsync` commits the open
//! txg, so it is durable when it returns.

pub mod attr;
pub mod nodes;
pub mod ops;
pub mod snapdir;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cairn_objset::{Store, StoreError};
use fuser::{Config, MountOption, SessionACL};

pub use ops::CairnFs;

/// When reads update the access time (the dataset's `atime` property).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtimeMode {
    On,
    Off,
    Relatime,
}

impl AtimeMode {
    pub fn parse(s: &str) -> Option<AtimeMode> {
        Some(match s {
            "on" => AtimeMode::On,
            "off" => AtimeMode::Off,
            "relatime" => AtimeMode::Relatime,
            _ => return None,
        })
    }
}

/// How a dataset is mounted (from its properties and the mount command).
#[derive(Clone, Debug)]
pub struct FsOptions {
    pub atime: AtimeMode,
    pub readonly: bool,
    pub xattr: bool,
    /// `.zfs` appears in the root's listing (`snapdir=visible`); it is reachable by name
    /// either way.
    pub snapdir_visible: bool,
    /// Threads serving kernel requests.
    pub threads: usize,
}

/// Threads per mount unless the binary chose another count (`set_default_threads`): on
/// tmpfs two stream fastest (16 wrote about a fifth and read about a tenth slower
/// through a mount, docs/bench/fs.md); on disks or remote leaves more let reads wait for
/// the devices side by side.
pub const DEFAULT_THREADS: usize = 2;

/// The count `set_default_threads` chose (0: `DEFAULT_THREADS`).
static THREADS: AtomicUsize = AtomicUsize::new(0);

/// Sets the threads of mounts made from now on (the binary's `fuse_threads` tunable).
pub fn set_default_threads(n: usize) {
    THREADS.store(n.max(1), Ordering::SeqCst);
}

impl Default for FsOptions {
    fn default() -> FsOptions {
        FsOptions {
            atime: AtimeMode::Relatime,
            readonly: false,
            xattr: true,
            snapdir_visible: false,
            threads: match THREADS.load(Ordering::SeqCst) {
                0 => DEFAULT_THREADS,
                n => n,
            },
        }
    }
}

/// The FUSE session configuration for mounting `dataset`.
fn session_config(dataset: &str, options: &FsOptions) -> Config {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(dataset.to_string()),
        MountOption::Subtype("cairn".into()),
        MountOption::DefaultPermissions,
        MountOption::Dev,
        MountOption::Suid,
        if options.readonly {
            MountOption::RO
        } else {
            MountOption::RW
        },
    ];
    config.acl = SessionACL::All;
    config.n_threads = Some(options.threads.max(1));
    config.clone_fd = true;
    config
}

/// A mount being served; dropping it unmounts.
pub struct Mounted {
    session: fuser::BackgroundSession,
}

impl Mounted {
    /// Waits until the file system is unmounted (by `cairn umount` or `umount`).
    pub fn join(self) -> std::io::Result<()> {
        self.session.join()
    }

    /// Whether the session ended (the file system was unmounted).
    pub fn is_finished(&self) -> bool {
        self.session.guard.is_finished()
    }

    /// Unmounts and waits for the session's threads.
    pub fn unmount(self) -> std::io::Result<()> {
        self.session.umount_and_join()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot mount on {dir}: {source} (is /dev/fuse there, and fusermount3 installed? Debian: apt-get install fuse3)")]
    Fuse {
        dir: String,
        #[source]
        source: std::io::Error,
    },
}

/// Mounts `dataset` of `store` on `dir`, served by threads of this process.
pub fn mount(
    store: Arc<Store>,
    dataset: &str,
    dir: &Path,
    options: FsOptions,
) -> Result<Mounted, MountError> {
    let config = session_config(dataset, &options);
    let fs = CairnFs::new(store, dataset, options)?;
    let session = fuser::spawn_mount(fs, dir, &config).map_err(|source| MountError::Fuse {
        dir: dir.display().to_string(),
        source,
    })?;
    raise_readahead(dir);
    Ok(Mounted { session })
}

/// Readahead of the mount in KiB: the kernel starts a FUSE mount at 128 KiB whatever the
/// file system asks, so a sequential read waits for one 128 KiB request at a time.
const READAHEAD_KIB: u32 = 4096;

/// Raises the mount's readahead (`/sys/class/bdi/MAJ:MIN/read_ahead_kb`, root only; best
/// effort: a mount without it is slower, not wrong).
fn raise_readahead(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(dir) else {
        return;
    };
    let dev = meta.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let path = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
    let _ = std::fs::write(path, READAHEAD_KIB.to_string());
}
