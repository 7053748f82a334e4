//! Typed errors of the vdev layer. Every message names the device and says what to do.

use std::io;

/// What to do about a device path that does not exist: a file can be made, a device not.
fn missing_advice(path: &str) -> String {
    if path.starts_with("/dev/") {
        "no such device; check its name (`lsblk`, `ls /dev/disk/by-id`)".to_string()
    } else {
        format!("no such file or device (leaves must exist: create a file with `truncate -s 1G {path}`)")
    }
}

/// Errors from opening leaves, reading labels and block I/O.
#[derive(Debug, thiserror::Error)]
pub enum VdevError {
    #[error("cannot open '{path}': {}", missing_advice(path))]
    Missing { path: String },
    #[error("cannot use '{path}': it is a directory; give a regular file or a block device")]
    IsDirectory { path: String },
    #[error("cannot use '{path}': not a regular file or block device")]
    NotFileOrBlockDevice { path: String },
    #[error("cannot use '{path}': {size} bytes is too small; a leaf needs at least 64 MiB")]
    TooSmall { path: String, size: u64 },
    #[error("cannot open '{path}': in use by another process (it holds the lock); export the pool or stop that process first")]
    Locked { path: String },
    #[error("'{path}': {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("label of '{path}': {source}")]
    Label {
        path: String,
        #[source]
        source: crate::label::LabelError,
    },
    #[error("{vdev}: block at offset {offset}: {failed} of its devices failed; it survives the loss of at most {parity}")]
    TooManyFailures {
        vdev: String,
        offset: u64,
        failed: usize,
        parity: usize,
    },
    #[error("{vdev}: block at offset {offset}: no copy or reconstruction matches the checksum")]
    Unrecoverable { vdev: String, offset: u64 },
    #[error("{vdev}: block of {psize} bytes at offset {offset} is not aligned to the {sector}-byte sector or lies outside the vdev")]
    BadBlockAddress {
        vdev: String,
        offset: u64,
        psize: u64,
        sector: u64,
    },
    #[error("parity: {0}")]
    Parity(#[from] cairn_parity::ParityError),
}

impl VdevError {
    pub(crate) fn io(path: &str, source: io::Error) -> Self {
        VdevError::Io {
            path: path.to_string(),
            source,
        }
    }
}
