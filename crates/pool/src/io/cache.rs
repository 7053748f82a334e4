//! A cache of verified block contents (a small ARC): random small reads of the same blocks,
//! and read-modify-writes of blocks read a moment earlier, are answered from memory.
//!
//! Blocks are never changed in place (copy-on-write), so an entry is keyed by where the
//! block's first copy lives and checked against the checksum of the block pointer asking
//! for it: when the space is reused for another block, the checksum differs and the entry
//! is simply not used. Nothing needs invalidating.
//!
//! Least recently used entries go first. Capacity: 1/16 of RAM, at most 1 GiB
//! (the `cache_max` tunable, which the binary passes to `set_default_capacity`; 0 turns it off).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};

use crate::io::bp::BlockPointer;

/// (vdev, offset) of the block's first copy.
type Key = (u32, u64);

struct Entry {
    checksum: [u8; 32],
    data: Arc<Vec<u8>>,
    stamp: u64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Key, Entry>,
    /// stamp → key, oldest first.
    order: BTreeMap<u64, Key>,
    bytes: u64,
    next_stamp: u64,
    hits: u64,
    misses: u64,
}

pub struct BlockCache {
    max_bytes: u64,
    inner: Mutex<Inner>,
}

/// Hits and misses since the pool was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub bytes: u64,
}

fn key(bp: &BlockPointer) -> Key {
    (bp.dvas[0].vdev, bp.dvas[0].offset)
}

/// The capacity `set_default_capacity` chose (`u64::MAX`: none).
static CHOSEN_MAX_BYTES: AtomicU64 = AtomicU64::new(u64::MAX);

/// Sets the capacity of block caches made from now on (0 turns caching off); the binary
/// calls it once with the tunable in force.
pub fn set_default_capacity(bytes: u64) {
    CHOSEN_MAX_BYTES.store(bytes, AtomicOrdering::SeqCst);
}

/// The capacity in force: the chosen one, else 1/16 of RAM up to 1 GiB.
pub fn default_max_bytes() -> u64 {
    match CHOSEN_MAX_BYTES.load(AtomicOrdering::SeqCst) {
        u64::MAX => (total_ram_bytes() / 16).min(1 << 30),
        chosen => chosen,
    }
}

/// Physical memory of the machine (8 GiB when /proc/meminfo cannot be read); the store's
/// dirty cap and the block cache are sized from it.
pub fn total_ram_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map(|kib| kib * 1024)
        .unwrap_or(8 << 30)
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("max_bytes", &self.max_bytes)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for BlockCache {
    fn default() -> Self {
        BlockCache::with_capacity(default_max_bytes())
    }
}

impl BlockCache {
    pub fn with_capacity(max_bytes: u64) -> BlockCache {
        BlockCache {
            max_bytes,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The logical contents of the block `bp` points to, if cached.
    pub fn get(&self, bp: &BlockPointer) -> Option<Arc<Vec<u8>>> {
        self.lookup(bp, true)
    }

    /// `get` for a caller that reads the block through `Pool::read_bps_into` on a miss
    /// (which counts the miss itself).
    pub fn get_before_read(&self, bp: &BlockPointer) -> Option<Arc<Vec<u8>>> {
        self.lookup(bp, false)
    }

    fn lookup(&self, bp: &BlockPointer, count_miss: bool) -> Option<Arc<Vec<u8>>> {
        if self.max_bytes == 0 || bp.is_hole() {
            return None;
        }
        let mut inner = self.lock();
        let inner = &mut *inner;
        let stamp = inner.next_stamp;
        match inner.entries.get_mut(&key(bp)) {
            Some(e) if e.checksum == bp.checksum && e.data.len() == bp.lsize as usize => {
                inner.order.remove(&e.stamp);
                e.stamp = stamp;
                inner.order.insert(stamp, key(bp));
                inner.next_stamp += 1;
                inner.hits += 1;
                Some(Arc::clone(&e.data))
            }
            _ => {
                inner.misses += u64::from(count_miss);
                None
            }
        }
    }

    /// Keeps the verified logical contents of `bp`'s block.
    pub fn insert(&self, bp: &BlockPointer, data: Arc<Vec<u8>>) {
        let size = data.len() as u64;
        if self.max_bytes == 0 || bp.is_hole() || size * 8 > self.max_bytes {
            return;
        }
        let mut inner = self.lock();
        let inner = &mut *inner;
        let stamp = inner.next_stamp;
        inner.next_stamp += 1;
        if let Some(old) = inner.entries.insert(
            key(bp),
            Entry {
                checksum: bp.checksum,
                data,
                stamp,
            },
        ) {
            inner.order.remove(&old.stamp);
            inner.bytes -= old.data.len() as u64;
        }
        inner.order.insert(stamp, key(bp));
        inner.bytes += size;
        while inner.bytes > self.max_bytes {
            let Some((_, oldest)) = inner.order.pop_first() else {
                break;
            };
            if let Some(e) = inner.entries.remove(&oldest) {
                inner.bytes -= e.data.len() as u64;
            }
        }
    }

    pub fn stats(&self) -> CacheStats {
        let inner = self.lock();
        CacheStats {
            hits: inner.hits,
            misses: inner.misses,
            bytes: inner.bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::bp::Dva;

    fn bp(offset: u64, tag: u8, lsize: u32) -> BlockPointer {
        BlockPointer {
            dvas: [
                Dva {
                    vdev: 0,
                    offset,
                    asize: 4096,
                },
                Dva::default(),
                Dva::default(),
            ],
            lsize,
            psize: lsize,
            checksum: [tag; 32],
            birth: 5,
            ..BlockPointer::HOLE
        }
    }

    #[test]
    fn a_reused_address_with_another_checksum_misses() {
        let c = BlockCache::with_capacity(1 << 20);
        c.insert(&bp(4096, 1, 4), Arc::new(vec![1, 2, 3, 4]));
        assert_eq!(c.get(&bp(4096, 1, 4)).as_deref(), Some(&vec![1, 2, 3, 4]));
        assert!(c.get(&bp(4096, 2, 4)).is_none(), "same place, other block");
        assert!(c.get(&bp(8192, 1, 4)).is_none());
    }

    #[test]
    fn least_recently_used_entries_go_first() {
        let c = BlockCache::with_capacity(8 * 3 * 1024);
        for i in 0..24 {
            c.insert(&bp(i * 4096, 7, 1024), Arc::new(vec![i as u8; 1024]));
        }
        assert!(c.get(&bp(0, 7, 1024)).is_some()); // 0 is now the newest
        c.insert(&bp(24 * 4096, 7, 1024), Arc::new(vec![3; 1024]));
        assert!(c.get(&bp(4096, 7, 1024)).is_none(), "oldest evicted");
        assert!(c.get(&bp(0, 7, 1024)).is_some());
        assert!(c.get(&bp(2 * 4096, 7, 1024)).is_some());
        assert!(c.stats().bytes <= 24 * 1024);
    }
}
