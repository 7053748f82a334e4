//! Opening a leaf from its device spec: a file or block device path, or an NBD URL.

use std::path::Path;
use std::sync::Arc;

use cairn_vdev::{FileLeaf, Leaf, LeafOptions, VdevError};

/// Opens the leaf a device spec names.
pub fn open_leaf(spec: &str, opts: LeafOptions) -> Result<Arc<dyn Leaf>, VdevError> {
    if cairn_nbd::is_nbd_url(spec) {
        return cairn_nbd::open_nbd_leaf(spec).map(Arc::from);
    }
    Ok(Arc::new(FileLeaf::open(Path::new(spec), opts)?))
}
