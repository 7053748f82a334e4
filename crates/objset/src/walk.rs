//! Walking part of an object's block tree, by block id: what scrub and resilver do a slice
//! at a time, so they can stop and resume inside one object (zbookmark's object + blkid).
//!
//! ```text
//!  level 2   [ root: blkids 0 .. 128² )
//!  level 1   [ 0 .. 128 ) [ 128 .. 256 ) …            an indirect at level l covers 128^l
//!  level 0   0 1 2 … 127  128 129 …                   data blocks
//!
//!  walk_range(from = 200, count = 100): enters the root and the level-1 blocks [128, 256)
//!  and [256, 384), visits data blocks 200 … 299; an indirect is *visited* only by the slice
//!  that holds its first block id (so each is scrubbed or copied once over all slices) but
//!  *entered* by every slice it overlaps.
//! ```

use cairn_pool::io::bp::BlockPointer;
use cairn_pool::Pool;

use crate::dnode::{Dnode, BPS_PER_INDIRECT_SHIFT};
use crate::error::StoreError;
use crate::object::decode_indirect;

/// Block ids covered by one block pointer at `level` (1 for data blocks).
fn span(level: u8) -> u64 {
    1u64.checked_shl(BPS_PER_INDIRECT_SHIFT * u32::from(level))
        .unwrap_or(u64::MAX)
}

/// Visits the blocks of `dnode`'s tree that cover block ids `[from, from + count)`: each
/// indirect block whose first block id lies in the range goes to `visit` before the blocks
/// under it (`visit` returns whether to go below it: false prunes, e.g. by birth txg), and
/// every data block in the range goes to `visit` in block-id order. Returns the block id to
/// go on from when the object has blocks past the range, `None` when the range reached its
/// end.
pub(crate) fn walk_range(
    pool: &Pool,
    dnode: &Dnode,
    from: u64,
    count: u64,
    visit: &mut dyn FnMut(&BlockPointer, u64) -> bool,
) -> Result<Option<u64>, StoreError> {
    let end = from.saturating_add(count);
    let mut stack: Vec<(BlockPointer, u64)> = vec![(dnode.root, 0)];
    while let Some((bp, first)) = stack.pop() {
        let covers = span(bp.level);
        if bp.is_hole() || first >= end || first.saturating_add(covers) <= from {
            continue;
        }
        let owned_here = first >= from;
        if bp.level == 0 {
            visit(&bp, first);
            continue;
        }
        if owned_here && !visit(&bp, first) {
            continue;
        }
        let child_span = span(bp.level - 1);
        let entries = decode_indirect(&pool.read_bp(&bp)?)?;
        // Pushed last to first, so they pop in block-id order.
        for (i, child) in entries.into_iter().enumerate().rev() {
            let child_first = first.saturating_add((i as u64).saturating_mul(child_span));
            stack.push((child, child_first));
        }
    }
    let blocks = dnode.size.div_ceil(u64::from(dnode.block_size.max(1)));
    Ok((end < blocks).then_some(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_grow_by_128_per_level() {
        assert_eq!(span(0), 1);
        assert_eq!(span(1), 128);
        assert_eq!(span(2), 128 * 128);
        assert_eq!(span(10), u64::MAX, "saturates instead of overflowing");
    }
}
