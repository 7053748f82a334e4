//! Sets of blocks born at or before a txg, walked from block trees: what `promote` moves
//! between dead lists and what a clone still shares with its origin (`crate::clone`).

use std::collections::HashMap;

use cairn_pool::io::bp::{BlockPointer, Dva};
use cairn_pool::Pool;

use crate::core::{State, StoreCore};
use crate::dnode::ObjectKind;
use crate::error::StoreError;
use crate::object::decode_indirect;
use crate::object_io::read_dnode;
use crate::snapshot::SnapshotRecord;
use crate::snapshot_read::snapshot_dnode_locked;

impl StoreCore {
    /// The blocks born at or before `txg` that dataset `ds` holds in snapshot `rec` (or
    /// its head, `None`), by their first copy.
    pub(crate) fn old_blocks_of(
        &self,
        st: &mut State,
        ds: u32,
        rec: Option<&SnapshotRecord>,
        txg: u64,
    ) -> Result<HashMap<Dva, BlockPointer>, StoreError> {
        let mut found = HashMap::new();
        for id in 2..st.next_object {
            let dn = match rec {
                Some(r) => snapshot_dnode_locked(&self.pool, st, r, id)?,
                None => Some(read_dnode(&self.pool, st, id)?)
                    .filter(|d| d.kind != ObjectKind::Free && d.dataset == ds),
            };
            if let Some(dn) = dn {
                old_blocks(&self.pool, &dn.root, dn.levels, txg, &mut found)?;
            }
        }
        Ok(found)
    }

    /// Bytes of its origin snapshot a clone's head still holds (the blocks born at or
    /// before the origin's txg; its directories are copies of its own).
    pub(crate) fn shared_with_origin_walked(
        &self,
        st: &mut State,
        ds: u32,
        origin_txg: u64,
    ) -> Result<u64, StoreError> {
        let held = self.old_blocks_of(st, ds, None, origin_txg)?;
        Ok(held.values().map(|bp| self.pool.deflated_size(bp)).sum())
    }
}

/// Adds every block of the tree under `bp` born at or before `txg` to `out`, by its first
/// copy. Blocks born later are walked for the older blocks below them (a new indirect
/// block may point at old children); an old block's subtree is all old.
pub(crate) fn old_blocks(
    pool: &Pool,
    bp: &BlockPointer,
    levels: u8,
    txg: u64,
    out: &mut HashMap<Dva, BlockPointer>,
) -> Result<(), StoreError> {
    let Some(&first) = bp.copies().next() else {
        return Ok(()); // a hole (or data held in the pointer): no space of its own
    };
    if bp.birth <= txg && out.insert(first, *bp).is_some() {
        return Ok(()); // walked already
    }
    if levels > 1 {
        for child in decode_indirect(&pool.read_bp(bp)?)? {
            old_blocks(pool, &child, levels - 1, txg, out)?;
        }
    }
    Ok(())
}
