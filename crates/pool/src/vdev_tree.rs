//! The pool's top-level vdevs, as a tree a pool in use can replace: `attach`, `detach`,
//! `add` and `remove` run in the service that holds the pool while its readers, writers
//! and txg syncs go on.
//!
//! ```text
//!  versions  chunk 0 [ v0 | v1 | … | v63 ] ─► chunk 1 [ v64 | v65 |    | … ] ─► (made
//!  current  ──────────────────────────────────────────────^                    when needed)
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
//!   (and the chunk it lies in) is complete before `current` names it (Release / Acquire).
//! - Versions live in a list of chunks that only grows, so there is no limit on how many
//!   a pool opening publishes; each is kept (a few KiB) until the pool closes.
//! - Through `&mut` (no reader can exist) the current version is changed in place: that
//!   is how a pool no process serves changes its vdevs.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use cairn_vdev::TopVdev;

/// Versions per chunk of the list.
const CHUNK: usize = 64;

/// `CHUNK` versions, and the chunk after them once one is needed.
struct Chunk {
    versions: Box<[OnceLock<Vec<TopVdev>>]>,
    next: OnceLock<Box<Chunk>>,
}

impl Chunk {
    fn new() -> Chunk {
        Chunk {
            versions: (0..CHUNK).map(|_| OnceLock::new()).collect(),
            next: OnceLock::new(),
        }
    }
}

pub(crate) struct VdevTree {
    first: Chunk,
    current: AtomicUsize,
    writer: Mutex<()>,
}

impl VdevTree {
    pub(crate) fn new(tops: Vec<TopVdev>) -> VdevTree {
        let first = Chunk::new();
        first.versions[0]
            .set(tops)
            .unwrap_or_else(|_| unreachable!("a new lock is empty"));
        VdevTree {
            first,
            current: AtomicUsize::new(0),
            writer: Mutex::new(()),
        }
    }

    /// The chunk holding version `v`, made (with the ones before it) when `grow` says so;
    /// `None` if it does not exist yet.
    fn chunk_of(&self, v: usize, grow: bool) -> Option<&Chunk> {
        let mut chunk = &self.first;
        for _ in 0..v / CHUNK {
            chunk = match grow {
                true => chunk.next.get_or_init(|| Box::new(Chunk::new())),
                false => chunk.next.get()?,
            };
        }
        Some(chunk)
    }

    /// Publishes `tops` as the current tree; the one before stays readable.
    pub(crate) fn replace(&self, tops: Vec<TopVdev>) {
        let _one_at_a_time = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let next = self.current.load(Ordering::Acquire) + 1;
        let chunk = self.chunk_of(next, true).expect("grown on demand");
        chunk.versions[next % CHUNK]
            .set(tops)
            .unwrap_or_else(|_| unreachable!("versions past the current one are empty"));
        self.current.store(next, Ordering::Release);
    }

    /// How many versions were published (the first one included).
    #[cfg(test)]
    pub(crate) fn versions(&self) -> usize {
        self.current.load(Ordering::Acquire) + 1
    }
}

impl Deref for VdevTree {
    type Target = Vec<TopVdev>;
    fn deref(&self) -> &Vec<TopVdev> {
        let current = self.current.load(Ordering::Acquire);
        self.chunk_of(current, false)
            .and_then(|chunk| chunk.versions[current % CHUNK].get())
            .expect("the current version is set before it is named")
    }
}

impl DerefMut for VdevTree {
    fn deref_mut(&mut self) -> &mut Vec<TopVdev> {
        let current = *self.current.get_mut();
        let mut chunk = &mut self.first;
        for _ in 0..current / CHUNK {
            chunk = chunk
                .next
                .get_mut()
                .expect("the current version's chunk exists");
        }
        chunk.versions[current % CHUNK]
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
        tree.replace(vec![disk(10), disk(20)]);
        assert_eq!(before.len(), 1, "the old version is unchanged");
        assert_eq!(tree.len(), 2, "readers now see the new one");
        assert_eq!(tree.versions(), 2);
    }

    /// Past the first chunks, versions go on: every reader's version stays what it was.
    #[test]
    fn versions_go_on_past_every_chunk() {
        let mut tree = VdevTree::new(vec![disk(10)]);
        let mut seen: Vec<&Vec<TopVdev>> = Vec::new();
        let n = 3 * CHUNK + 5;
        {
            let shared = &tree;
            for i in 1..n {
                shared.replace(vec![disk(10 + i as u64)]);
                seen.push(shared);
            }
            for (i, version) in seen.iter().enumerate() {
                assert_eq!(version[0].config.guid, 11 + i as u64, "version {}", i + 1);
            }
            assert_eq!(shared.versions(), n);
        }
        seen.clear();
        tree[0].config.guid = 7;
        assert_eq!(tree[0].config.guid, 7, "changed in place through &mut");
    }
}
