//! The pool's top-level vdevs, as a tree a pool in use can replace: `attach`, `detach`,
//! `add` and `remove` run in the service that holds the pool while its readers, writers
//! and txg syncs go on.
//!
//! ```text
//!  versions  [ v0 | v1 | v2 |    |    | … ]   each a Vec<TopVdev>, set once, kept until
//!  current  ───────────^                       the pool closes
//!
//!  v1: raidz2-0 ─ slots A B C D E F           v2: raidz2-0 ─ slots A B C D E F
//!      mirror-1 ─ slots G H                       mirror-1 ─ slots G H I   (attach I)
//!                 (A…H: Arc<Slot>, the same in both versions)
//! ```
//!
//! Invariants:
//! - A reader dereferences to the current version and may keep that reference as long
//!   as it borrows the pool: an older version is never dropped or changed while the pool
//!   is shared, so I/O in flight finishes on the tree it started on.
//! - Versions share their slots (`Arc<Slot>`): a leaf's states, DTL and counters updated
//!   through an old version are the ones the new version reads.
//! - Only `replace` publishes a version, one at a time (its writer lock), and a version
//!   is complete before `current` names it (Release / Acquire).
//! - Through `&mut` (no reader can exist) the current version is changed in place: that
//!   is how a pool no process serves changes its vdevs.
//! - A pool opening has at most `MAX_VERSIONS` versions; `replace` then refuses (the
//!   service is restarted to change more).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use cairn_vdev::TopVdev;

/// Vdev trees one pool opening can publish (the first included).
pub const MAX_VERSIONS: usize = 256;

pub(crate) struct VdevTree {
    versions: Box<[OnceLock<Vec<TopVdev>>]>,
    current: AtomicUsize,
    writer: Mutex<()>,
}

/// `replace` found every version used.
#[derive(Debug)]
pub(crate) struct OutOfVersions;

impl VdevTree {
    pub(crate) fn new(tops: Vec<TopVdev>) -> VdevTree {
        let versions: Box<[OnceLock<Vec<TopVdev>>]> =
            (0..MAX_VERSIONS).map(|_| OnceLock::new()).collect();
        versions[0]
            .set(tops)
            .unwrap_or_else(|_| unreachable!("a new lock is empty"));
        VdevTree {
            versions,
            current: AtomicUsize::new(0),
            writer: Mutex::new(()),
        }
    }

    /// Publishes `tops` as the current tree; the one before stays readable.
    pub(crate) fn replace(&self, tops: Vec<TopVdev>) -> Result<(), OutOfVersions> {
        let _one_at_a_time = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let next = self.current.load(Ordering::Acquire) + 1;
        let slot = self.versions.get(next).ok_or(OutOfVersions)?;
        slot.set(tops)
            .unwrap_or_else(|_| unreachable!("versions past the current one are empty"));
        self.current.store(next, Ordering::Release);
        Ok(())
    }

    /// Versions `replace` can still publish.
    pub(crate) fn versions_left(&self) -> usize {
        MAX_VERSIONS - 1 - self.current.load(Ordering::Acquire)
    }
}

impl Deref for VdevTree {
    type Target = Vec<TopVdev>;
    fn deref(&self) -> &Vec<TopVdev> {
        self.versions[self.current.load(Ordering::Acquire)]
            .get()
            .expect("the current version is set before it is named")
    }
}

impl DerefMut for VdevTree {
    fn deref_mut(&mut self) -> &mut Vec<TopVdev> {
        let current = *self.current.get_mut();
        self.versions[current]
            .get_mut()
            .expect("the current version is set before it is named")
    }
}

impl fmt::Debug for VdevTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VdevTree")
            .field("version", &self.current.load(Ordering::Relaxed))
            .field("tops", &**self)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_geometry::VdevShape;
    use cairn_vdev::{Child, LeafConfig, TopConfig};

    fn disk(guid: u64) -> TopVdev {
        let config = TopConfig {
            id: 0,
            guid,
            shape: VdevShape::Disk,
            ashift: 12,
            asize: 1 << 30,
            leaves: vec![LeafConfig::new(guid + 1, format!("/d{guid}"), 1 << 30)],
            log: false,
            hole: false,
        };
        TopVdev::new(
            config,
            vec![Child::new(guid + 1, format!("/d{guid}"), None)],
        )
    }

    #[test]
    fn a_reader_keeps_its_version_while_a_new_one_is_published() {
        let tree = VdevTree::new(vec![disk(10)]);
        let before: &Vec<TopVdev> = &tree;
        tree.replace(vec![disk(10), disk(20)]).unwrap();
        assert_eq!(before.len(), 1, "the old version is unchanged");
        assert_eq!(tree.len(), 2, "readers now see the new one");
        assert_eq!(tree.versions_left(), MAX_VERSIONS - 2);
    }

    #[test]
    fn versions_run_out_with_a_refusal_not_a_panic() {
        let tree = VdevTree::new(vec![disk(10)]);
        for _ in 1..MAX_VERSIONS {
            tree.replace(vec![disk(10)]).unwrap();
        }
        assert!(tree.replace(vec![disk(10)]).is_err());
        assert_eq!(tree.versions_left(), 0);
    }
}
