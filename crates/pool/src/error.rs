//! Errors of pool lifecycle commands; each says what to do next.

use cairn_vdev::VdevError;

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error(transparent)]
    Vdev(#[from] VdevError),
    #[error("invalid pool name '{name}': {why}")]
    BadName { name: String, why: String },
    #[error("invalid vdev specification: {0}")]
    BadSpec(String),
    #[error(transparent)]
    Prop(#[from] cairn_vdev::PropError),
    #[error("invalid vdev specification: {0}\nuse '-f' to override the following errors")]
    MismatchedReplication(String),
    #[error("pool '{0}' already exists; pick another name or export/destroy it first")]
    PoolExists(String),
    #[error("no such pool '{0}'; see `cairn list`, or import it with `cairn import -d DIR {0}`")]
    NoSuchPool(String),
    #[error(
        "'{path}' is part of {state} pool '{pool}'; use -f to overwrite it (its data will be lost)"
    )]
    DeviceInUse {
        path: String,
        pool: String,
        state: String,
    },
    #[error(
        "pool '{pool}' is in use by {}; wait for it to finish or stop it, then retry (commands \
         that a running `cairn serve` answers go through its control socket)",
        holder.as_deref().unwrap_or("another process")
    )]
    InUse {
        pool: String,
        /// "PID N (`command`)" when the holder could be read.
        holder: Option<String>,
    },
    #[error(
        "'{path}' is part of active pool '{pool}' ({why}); -f does not override this: export or \
         destroy that pool first (`cairn export {pool}`)"
    )]
    DeviceOfActivePool {
        path: String,
        pool: String,
        /// "imported here" or "in use by another process".
        why: String,
    },
    #[error(
        "pool '{pool}': no uberblock could be read on any device (every label ring is damaged \
         or unreadable), so there is no way back to its data; nothing was written. Run \
         `cairn labels DEVICE` on each device to see what is left; do not create a pool over them"
    )]
    NoUberblock { pool: String },
    #[error("cannot import '{pool}': {why}")]
    Import { pool: String, why: String },
    #[error("invalid option: {0}")]
    BadOption(String),
    #[error("pool '{pool}' cannot serve data: {why}")]
    Unavailable { pool: String, why: String },
    #[error(
        "cannot look for devices in '{dir}': {source}; give `-d` a directory that holds the pool's devices (default /dev/disk/by-id)"
    )]
    ScanDir {
        dir: String,
        #[source]
        source: std::io::Error,
    },
    #[error("state directory {path}: {source}")]
    State {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("pool '{0}' is out of space; delete files or add a vdev (`cairn add`)")]
    NoSpace(String),
    #[error("cannot {op} '{device}': {why}")]
    Device {
        op: &'static str,
        device: String,
        why: String,
    },
    #[error("corrupt metadata: {0}")]
    Corrupt(String),
    #[error(
        "pool '{pool}': device '{path}' was written by a newer cairn ({why}); nothing was \
         changed: upgrade cairn to open this pool"
    )]
    NewerPool {
        pool: String,
        path: String,
        why: String,
    },
    #[error(
        "'{path}' holds cairn labels written by a newer cairn ({why}); upgrade cairn to see \
         its pool, or use -f to overwrite it (its data will be lost)"
    )]
    NewerDevice { path: String, why: String },
    #[error("state file {path} is corrupt ({why}); remove it and run `cairn import -d DIR`")]
    CorruptState { path: String, why: String },
}
