//! What the kernel holds: how many lookups of each inode it has not forgotten, how many
//! open handles each has, and the listings of open directories.
//!
//! An object whose last name is removed (nlink 0) is freed only when the kernel holds no
//! lookup and no open handle of it: until then it can still be read and written through
//! an open file, and its id must not be reused under an inode number the kernel still
//! caches (FUSE names inodes by number). Invariants:
//! - `lookups` counts every reply that gave the kernel an entry, minus `forget`s;
//! - an object leaves the map when both counts are 0, and only then `CairnFs::settle`
//!   asks the store to free it (a no-op while it still has a name).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use cairn_objset::dnode::ObjectKind;

#[derive(Default)]
struct Counts {
    lookups: u64,
    opens: u64,
}

/// A directory listing taken at opendir: offsets index into it, so they stay stable while
/// the directory changes.
pub type Listing = Vec<(String, u64, ObjectKind)>;

#[derive(Default)]
pub struct Nodes {
    counts: Mutex<HashMap<u64, Counts>>,
    listings: Mutex<HashMap<u64, Listing>>,
    next_handle: AtomicU64,
}

impl Nodes {
    pub fn looked_up(&self, obj: u64) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.entry(obj).or_default().lookups += 1;
    }

    pub fn opened(&self, obj: u64) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.entry(obj).or_default().opens += 1;
    }

    /// The kernel forgot `n` lookups.
    pub fn forget(&self, obj: u64, n: u64) {
        self.change(obj, |c| c.lookups = c.lookups.saturating_sub(n));
    }

    /// A handle closed.
    pub fn closed(&self, obj: u64) {
        self.change(obj, |c| c.opens = c.opens.saturating_sub(1));
    }

    /// Whether the kernel holds `obj` (a lookup or an open handle).
    pub fn is_held(&self, obj: u64) -> bool {
        let c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.get(&obj).is_some_and(|c| c.lookups > 0 || c.opens > 0)
    }

    /// Whether a handle of `obj` is open.
    pub fn is_open(&self, obj: u64) -> bool {
        let c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.get(&obj).is_some_and(|c| c.opens > 0)
    }

    fn change(&self, obj: u64, f: impl FnOnce(&mut Counts)) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(counts) = c.get_mut(&obj) {
            f(counts);
            if counts.lookups == 0 && counts.opens == 0 {
                c.remove(&obj);
            }
        }
    }

    /// Every object the kernel still holds (freed at unmount if orphaned).
    pub fn held(&self) -> Vec<u64> {
        let c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.keys().copied().collect()
    }

    pub fn new_handle(&self) -> u64 {
        self.next_handle.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn keep_listing(&self, fh: u64, listing: Listing) {
        let mut l = self.listings.lock().unwrap_or_else(|p| p.into_inner());
        l.insert(fh, listing);
    }

    /// Calls `f` with the listing of handle `fh` (None if it has none).
    pub fn with_listing<R>(&self, fh: u64, f: impl FnOnce(Option<&Listing>) -> R) -> R {
        let l = self.listings.lock().unwrap_or_else(|p| p.into_inner());
        f(l.get(&fh))
    }

    pub fn drop_listing(&self, fh: u64) {
        let mut l = self.listings.lock().unwrap_or_else(|p| p.into_inner());
        l.remove(&fh);
    }
}
