//! `.zfs/snapshot/NAME/…`: every snapshot of the mounted dataset, read-only, as ZFS's
//! control directory shows them — users restore a file with `cp`. `.zfs` is left out of
//! the root's listing unless the dataset's `snapdir` is `visible`, but is always there by
//! name.
//!
//! ```text
//!  inode                         what
//!  CTL_INO        = 2^62         .zfs                     (dr-xr-xr-x)
//!  SNAPSHOTS_INO  = 2^62 + 1     .zfs/snapshot            (one entry per snapshot)
//!  2^63 | slot·2^48 | object     object `object` of the snapshot in slot `slot` (≥ 1)
//! ```
//! Live inodes are object ids, far below 2^48. A snapshot gets a slot the first time it is
//! looked up and keeps it for the life of the mount (a destroyed one answers ENOENT).
//! Nothing here writes: the operations that would are refused with EROFS in `ops`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use cairn_objset::dnode::{Dnode, ObjectKind};
use cairn_objset::snapshot_read::SnapshotView;
use cairn_objset::Store;
use fuser::{Errno, FileAttr, FileType, INodeNo};

use crate::attr::{errno, file_attr, REPORTED_BLOCK_SIZE};

pub const CTL_NAME: &str = ".zfs";
pub const CTL_INO: u64 = 1 << 62;
pub const SNAPSHOTS_INO: u64 = CTL_INO + 1;
const SNAP_BIT: u64 = 1 << 63;
const SLOT_SHIFT: u32 = 48;
const OBJECT_MASK: u64 = (1 << SLOT_SHIFT) - 1;
const _: () = assert!(SNAP_BIT > CTL_INO && (OBJECT_MASK as u128) < (CTL_INO as u128));

/// What an inode number names, if it is not a live object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    Ctl,
    Snapshots,
    InSnapshot { slot: usize, object: u64 },
}

impl Node {
    pub fn of(ino: u64) -> Option<Node> {
        match ino {
            CTL_INO => Some(Node::Ctl),
            SNAPSHOTS_INO => Some(Node::Snapshots),
            i if i & SNAP_BIT != 0 => Some(Node::InSnapshot {
                slot: ((i & !SNAP_BIT) >> SLOT_SHIFT) as usize,
                object: i & OBJECT_MASK,
            }),
            _ => None,
        }
    }

    pub fn ino(self) -> u64 {
        match self {
            Node::Ctl => CTL_INO,
            Node::Snapshots => SNAPSHOTS_INO,
            Node::InSnapshot { slot, object } => {
                SNAP_BIT | ((slot as u64) << SLOT_SHIFT) | (object & OBJECT_MASK)
            }
        }
    }
}

/// Whether `ino` is under `.zfs` (nothing there may change).
pub fn is_read_only(ino: u64) -> bool {
    Node::of(ino).is_some()
}

/// One listing entry: name, inode number, kind (as `nodes::Listing` keeps them).
pub type Entry = (String, u64, ObjectKind);

pub struct SnapDir {
    store: Arc<Store>,
    dataset: String,
    /// Slot i+1 → the snapshot it stands for.
    slots: Mutex<Vec<SnapshotView>>,
}

fn err(e: cairn_objset::StoreError) -> Errno {
    errno(&e)
}

impl SnapDir {
    pub fn new(store: Arc<Store>, dataset: &str) -> SnapDir {
        SnapDir {
            store,
            dataset: dataset.to_string(),
            slots: Mutex::new(Vec::new()),
        }
    }

    fn slot_of(&self, view: SnapshotView) -> usize {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = slots.iter().position(|v| *v == view) {
            return i + 1;
        }
        slots.push(view);
        slots.len()
    }

    fn view(&self, slot: usize) -> Result<SnapshotView, Errno> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slot.checked_sub(1)
            .and_then(|i| slots.get(i).cloned())
            .ok_or(Errno::ENOENT)
    }

    /// The attributes of `.zfs` and `.zfs/snapshot`: read-only directories.
    fn ctl_attr(ino: u64) -> FileAttr {
        FileAttr {
            ino: INodeNo(ino),
            size: 0,
            blocks: 0,
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: FileType::Directory,
            perm: 0o555,
            nlink: 2,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: REPORTED_BLOCK_SIZE,
            flags: 0,
        }
    }

    fn snapshot_dnode(&self, slot: usize, object: u64) -> Result<(SnapshotView, Dnode), Errno> {
        let view = self.view(slot)?;
        let dn = self.store.snapshot_dnode(&view, object).map_err(err)?;
        Ok((view, dn))
    }

    pub fn getattr(&self, node: Node) -> Result<FileAttr, Errno> {
        match node {
            Node::Ctl | Node::Snapshots => Ok(Self::ctl_attr(node.ino())),
            Node::InSnapshot { slot, object } => {
                let (_, dn) = self.snapshot_dnode(slot, object)?;
                Ok(file_attr(INodeNo(node.ino()), &dn))
            }
        }
    }

    /// `name` inside `parent` (a `.zfs` node).
    pub fn lookup(&self, parent: Node, name: &str) -> Result<FileAttr, Errno> {
        let child = match parent {
            Node::Ctl if name == "snapshot" => Node::Snapshots,
            Node::Ctl => return Err(Errno::ENOENT),
            Node::Snapshots => {
                let view = self
                    .store
                    .snapshot_view(&format!("{}@{name}", self.dataset))
                    .map_err(|_| Errno::ENOENT)?;
                let object = view.root;
                Node::InSnapshot {
                    slot: self.slot_of(view),
                    object,
                }
            }
            Node::InSnapshot { slot, object } => {
                let view = self.view(slot)?;
                let (child, _) = self
                    .store
                    .snapshot_lookup(&view, object, name)
                    .map_err(err)?;
                Node::InSnapshot {
                    slot,
                    object: child,
                }
            }
        };
        self.getattr(child)
    }

    /// The entries of a `.zfs` directory (without `.` and `..`).
    pub fn list(&self, node: Node) -> Result<Vec<Entry>, Errno> {
        match node {
            Node::Ctl => Ok(vec![(
                "snapshot".into(),
                SNAPSHOTS_INO,
                ObjectKind::Directory,
            )]),
            Node::Snapshots => {
                let snaps = self.store.snapshots(Some(&self.dataset)).map_err(err)?;
                let mut out = Vec::new();
                for s in snaps {
                    let Ok(view) = self.store.snapshot_view(&s.name) else {
                        continue;
                    };
                    let root = view.root;
                    let ino = Node::InSnapshot {
                        slot: self.slot_of(view.clone()),
                        object: root,
                    }
                    .ino();
                    out.push((view.snapshot, ino, ObjectKind::Directory));
                }
                Ok(out)
            }
            Node::InSnapshot { slot, object } => {
                let view = self.view(slot)?;
                let entries = self.store.snapshot_read_dir(&view, object).map_err(err)?;
                Ok(entries
                    .into_iter()
                    .map(|(name, e)| {
                        let ino = Node::InSnapshot {
                            slot,
                            object: e.object,
                        }
                        .ino();
                        (name, ino, e.kind)
                    })
                    .collect())
            }
        }
    }

    pub fn read(&self, node: Node, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        let Node::InSnapshot { slot, object } = node else {
            return Err(Errno::EISDIR);
        };
        let (view, dn) = self.snapshot_dnode(slot, object)?;
        if dn.kind == ObjectKind::Directory {
            return Err(Errno::EISDIR);
        }
        let len = dn.size.saturating_sub(offset).min(u64::from(size)) as usize;
        let mut buf = vec![0u8; len];
        let n = self
            .store
            .snapshot_read(&view, object, offset, &mut buf)
            .map_err(err)?;
        buf.truncate(n);
        Ok(buf)
    }

    pub fn readlink(&self, node: Node) -> Result<Vec<u8>, Errno> {
        let Node::InSnapshot { slot, object } = node else {
            return Err(Errno::EINVAL);
        };
        let (_, dn) = self.snapshot_dnode(slot, object)?;
        if dn.kind != ObjectKind::Symlink {
            return Err(Errno::EINVAL);
        }
        self.read(node, 0, dn.size.min(4096) as u32)
    }
}

/// How long the kernel may keep `.zfs` attributes: snapshots come and go under it.
pub const TTL: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_round_trip_and_stay_clear_of_objects() {
        for node in [
            Node::Ctl,
            Node::Snapshots,
            Node::InSnapshot { slot: 1, object: 7 },
            Node::InSnapshot {
                slot: 32767,
                object: OBJECT_MASK,
            },
        ] {
            assert_eq!(Node::of(node.ino()), Some(node));
        }
        for live in [1u64, 2, 1 << 40, OBJECT_MASK] {
            assert_eq!(Node::of(live), None);
            assert!(!is_read_only(live));
        }
    }
}
