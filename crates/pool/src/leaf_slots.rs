//! Leaves addressed by their slot (top-level vdev, child): what scrub and resilver in the
//! store ask of the pool, so that they never reach into its top-level vdevs' children.
//!
//! ```text
//!  scrub     readable_leaves ─► (read every block) ─► settle_dtl(leaf, scanned txg)
//!  resilver  stale_leaves ─► rebuild_batch(top, …) ─► write_leaf_run(slot, …)
//!                         └─► finish_leaf_resilver(stale leaf)
//! ```
//! Tests and the torture harness wrap a leaf in a fault injector with `wrap_leaf`; status
//! views read the vdev tree through `tops`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use cairn_vdev::rebuild::{BatchVerifier, Piece, RebuildRequest};
use cairn_vdev::{Child, Leaf, Slot, TopVdev, VdevError};

use crate::pool::Pool;

/// Txg ranges a leaf missed (its dirty time log).
pub type Dtl = Vec<(u64, u64)>;

/// Where a leaf sits in the pool: its top-level vdev and its index among that vdev's
/// children.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeafSlot {
    pub top: usize,
    pub child: usize,
}

/// A device open in the pool, named by what stays true while slots move under a device
/// change (`crate::reshape_in_use`): its GUID and which open device it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafIdentity {
    pub guid: u64,
    device: usize,
}

impl LeafIdentity {
    fn of(child: &Child) -> LeafIdentity {
        LeafIdentity {
            guid: child.guid,
            device: device_id(child),
        }
    }
}

/// A usable leaf that missed txgs, as a resilver finds it at its start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleLeaf {
    pub slot: LeafSlot,
    /// The device in the slot (a hot spare taking over changes it).
    pub guid: u64,
    /// Which open device that is (a device replaced in use keeps the leaf's GUID).
    pub device: usize,
    /// Its DTL at the start of the resilver.
    pub dtl: Dtl,
}

/// The identity of the device open in a slot: its handle's address (a pool keeps every
/// handle it opened until it closes, so no other device gets the same one meanwhile).
fn device_id(child: &Child) -> usize {
    child
        .leaf
        .as_ref()
        .map_or(0, |l| Arc::as_ptr(l) as *const () as usize)
}

impl Pool {
    /// The top-level vdevs, read-only (status views, tests). The store asks through the
    /// methods of this module instead.
    pub fn tops(&self) -> &[TopVdev] {
        &self.tops
    }

    fn child(&self, slot: LeafSlot) -> &Child {
        &self.tops[slot.top].children[slot.child]
    }

    /// The device path of the leaf in `slot`.
    pub fn leaf_path(&self, slot: LeafSlot) -> String {
        self.child(slot).path.clone()
    }

    /// Every leaf slot, in vdev and child order.
    pub fn leaf_slots(&self) -> Vec<LeafSlot> {
        self.slots().collect()
    }

    /// Leaves reads use now, by identity: a scrub settles their DTLs at its end, when a
    /// detach or remove may have moved them to other slots.
    pub fn readable_leaves(&self) -> Vec<LeafIdentity> {
        self.slots()
            .map(|slot| self.child(slot))
            .filter(|child| child.is_readable())
            .map(LeafIdentity::of)
            .collect()
    }

    /// The device `leaf` in the current tree, if it is still in the pool.
    fn find_leaf_child(&self, leaf: LeafIdentity) -> Option<&Child> {
        let tops: &[TopVdev] = &self.tops;
        tops.iter()
            .flat_map(|top| top.children.iter().map(|slot| -> &Child { slot }))
            .find(|&child| LeafIdentity::of(child) == leaf)
    }

    fn slots(&self) -> impl Iterator<Item = LeafSlot> + '_ {
        self.tops
            .iter()
            .enumerate()
            .flat_map(|(top, t)| (0..t.children.len()).map(move |child| LeafSlot { top, child }))
    }

    /// After a whole scrub without errors that read `leaf` from its start: the txgs up to
    /// `scanned_txg` are whole on it, so its DTL keeps only what comes after. Returns
    /// whether the DTL changed (the caller then writes the config to the labels). A leaf
    /// that left the pool meanwhile, or whose slot another device took, is not touched.
    pub fn settle_dtl(&self, leaf: LeafIdentity, scanned_txg: u64) -> bool {
        let Some(child) = self.find_leaf_child(leaf) else {
            return false;
        };
        let ranges = child.dtl_ranges();
        if ranges.is_empty() || !child.is_readable() {
            return false;
        }
        let left: Dtl = ranges
            .iter()
            .filter(|r| r.1 > scanned_txg + 1)
            .map(|&(s, e)| (s.max(scanned_txg + 1), e))
            .collect();
        if left == ranges {
            return false;
        }
        child.set_dtl(left);
        true
    }

    /// Usable leaves that missed txgs, with their DTLs now. A usable leaf that missed
    /// nothing needs no copy: it is trusted (again) on the way.
    pub fn stale_leaves(&self) -> Vec<StaleLeaf> {
        let mut out = Vec::new();
        for slot in self.slots() {
            let child = self.child(slot);
            if !child.is_usable() {
                continue;
            }
            let dtl = child.dtl_ranges();
            if dtl.is_empty() {
                child.stale.store(false, Ordering::Relaxed);
            } else {
                out.push(StaleLeaf {
                    slot,
                    guid: child.guid,
                    device: device_id(child),
                    dtl,
                });
            }
        }
        out
    }

    /// A resilver of `leaf` finished: the DTL ranges it had at the start are dropped (txgs
    /// missed meanwhile stay, and keep it stale). A slot whose device changed meanwhile (a
    /// hot spare took over, or a replace put a new device in), or that is no longer
    /// usable, is left as it is: the new device needs a resilver of its own.
    pub fn finish_leaf_resilver(&self, leaf: &StaleLeaf) {
        let child = self.child(leaf.slot);
        if !child.is_usable() || child.guid != leaf.guid || device_id(child) != leaf.device {
            return;
        }
        let left: Dtl = child
            .dtl_ranges()
            .into_iter()
            .filter(|r| !leaf.dtl.contains(r))
            .collect();
        child.stale.store(!left.is_empty(), Ordering::Relaxed);
        child.set_dtl(left);
        child.forget_resilvered();
    }

    /// Rebuilds many blocks of top-level vdev `top` for its stale children; one result per
    /// request, in order (`TopVdev::rebuild_batch`).
    pub fn rebuild_batch(
        &self,
        top: usize,
        requests: &[RebuildRequest],
        verify: BatchVerifier<'_>,
    ) -> Vec<Result<Vec<Piece>, VdevError>> {
        self.tops[top].rebuild_batch(requests, verify)
    }

    /// Writes rebuilt pieces that follow each other on the leaf in `slot` as one request.
    pub fn write_leaf_run(
        &self,
        slot: LeafSlot,
        leaf_offset: u64,
        bufs: &[&[u8]],
    ) -> Result<(), VdevError> {
        self.tops[slot.top].write_leaf_run(slot.child, leaf_offset, bufs)
    }

    /// Puts `wrap(device)` in place of the opened device in `slot` (a fault injector, in
    /// tests and the torture harness). Returns false, and calls nothing, when the slot has
    /// no opened device (or an older vdev tree of a pool in use shares it).
    pub fn wrap_leaf(
        &mut self,
        slot: LeafSlot,
        wrap: impl FnOnce(Arc<dyn Leaf>) -> Arc<dyn Leaf>,
    ) -> bool {
        let Some(child) =
            Arc::get_mut(&mut self.tops[slot.top].children[slot.child]).and_then(Slot::serving_mut)
        else {
            return false;
        };
        match child.leaf.clone() {
            Some(inner) => {
                child.leaf = Some(wrap(inner));
                true
            }
            None => false,
        }
    }
}
