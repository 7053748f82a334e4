//! NBD (Network Block Device) for cairn: a server that exports volumes, and a client leaf
//! so a pool's disks can be NBD exports on other machines. (skeleton: the NBD issue fills it)

use cairn_vdev::{Leaf, VdevError};

/// Whether a device spec is an NBD URL (`nbd://HOST[:PORT]/EXPORT`, `nbd+unix:///EXPORT?socket=PATH`).
pub fn is_nbd_url(spec: &str) -> bool {
    spec.starts_with("nbd://") || spec.starts_with("nbd+unix://")
}

/// Opens an NBD export as a leaf.
pub fn open_nbd_leaf(url: &str) -> Result<Box<dyn Leaf>, VdevError> {
    Err(VdevError::Io {
        path: url.to_string(),
        source: std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "NBD leaves are not implemented yet",
        ),
    })
}
