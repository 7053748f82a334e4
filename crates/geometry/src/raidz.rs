//! The RAID-Z map: where the columns of one block live on the children.
//!
//! A raidz vdev of width `w` presents one address space, sector `b` of which is sector
//! `b div w` of child `b mod w` (offsets relative to each child's data area, i.e. after
//! `LEAF_DATA_START`). A block of `s` data sectors at vdev sector `b` occupies the `tot`
//! consecutive vdev sectors starting at `b`, laid out as columns:
//!
//! ```text
//! 20 KiB (s = 5 sectors of 4 KiB) on raidz1, w = 5, at vdev sector b = 7:
//! f = 7 mod 5 = 2, row o = 7 div 5 = 1, q = 5 div 4 = 1, r = 1, bc = r+p = 2, tot = 7
//!
//!            child 0   child 1   child 2   child 3   child 4
//!  row 0       ..        ..        ..        ..        ..
//!  row 1       ..        ..       P  (c0)   D0 (c1)   D2 (c2)     <- b = 7 starts here
//!  row 2      D3 (c3)   D4 (c4)   P  (c0)   D1 (c1)   skip        <- columns 3, 4 wrapped:
//!                                                                    one sector further down
//! columns: c0 = P 2 sectors, c1 = D 2 sectors (big columns, c < bc), c2..c4 = 1 sector;
//! data fills the data columns column-major: D0 D1 in c1, D2 in c2, D3 in c3, D4 in c4.
//! tot = 7, asize = roundup(7, p+1) = 8 sectors: one skip (padding) sector, never written
//! as part of parity.
//! ```
//!
//! Formulas (OpenZFS `vdev_raidz.c`, `vdev_raidz_map_alloc`): `q = s div (w−p)` full rows,
//! `r = s − q(w−p)`, big columns `bc = r ? r+p : 0`, `tot = s + p(q + [r>0])`. Column `c`
//! lives on child `(f+c) mod w`, one sector further down if `f+c ≥ w`, and holds `q+1`
//! sectors if `c < bc`, else `q`. When `q = 0` only the `bc` non-empty columns exist.
//! RAID-Z1 only: columns 0 and 1 exchange child and offset when the block's offset has the
//! 1 MiB bit set, which spreads parity over all children.

use crate::shape::raidz_asize;

/// One column of a RAID-Z block: which child, byte offset inside that child's data area
/// (i.e. relative to `LEAF_DATA_START`), and length in bytes (never 0 in a map).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaidzColumn {
    pub child: usize,
    pub offset: u64,
    pub size: u64,
}

/// The columns of one RAID-Z block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaidzMap {
    /// Number of parity columns (they come first in `columns`).
    pub parity: usize,
    /// `[0..parity)` = P, Q, R; then the data columns. Only accessed columns (when `q = 0`
    /// only the `bc` big columns).
    pub columns: Vec<RaidzColumn>,
    /// Columns holding one sector more than the others (`bc`).
    pub big_columns: usize,
    /// Padding sectors after the block: `roundup(tot, p+1) − tot`.
    pub skip_sectors: u64,
    /// Allocated bytes, equal to [`raidz_asize`].
    pub asize: u64,
}

impl RaidzMap {
    /// The data columns, in data order.
    pub fn data_columns(&self) -> &[RaidzColumn] {
        &self.columns[self.parity.min(self.columns.len())..]
    }

    /// The parity columns P, Q, R (as many as `parity`).
    pub fn parity_columns(&self) -> &[RaidzColumn] {
        &self.columns[..self.parity.min(self.columns.len())]
    }

    /// Sectors the block occupies on its children, parity included, padding excluded (`tot`).
    pub fn total_sectors(&self, ashift: u32) -> u64 {
        self.columns.iter().map(|c| c.size >> ashift).sum()
    }
}

/// RAID-Z1 spreads parity by swapping columns 0 and 1 on every other MiB of the vdev.
const RAIDZ1_PARITY_SWAP_BIT: u64 = 1 << 20;

/// Maps a block of `psize` bytes at byte `offset` of a raidz vdev's address space onto
/// its children.
///
/// `offset` must be a multiple of the sector size (extra low bits are ignored); `psize`
/// should be a positive multiple of it (a partial last sector is rounded up, 0 gives an
/// empty map). `width` must exceed `parity` (see `VdevShape::validate`).
pub fn raidz_map(offset: u64, psize: u64, width: usize, parity: usize, ashift: u32) -> RaidzMap {
    debug_assert!(
        width > parity,
        "raidz of width {width} with {parity} parity: a map needs a data column"
    );
    let sector = 1u64 << ashift;
    let asize = raidz_asize(psize, width, parity, ashift);
    let width_u = width.max(1) as u64;
    let data_width = width.saturating_sub(parity).max(1) as u64;
    let parity_u = parity as u64;

    let data_sectors = psize.div_ceil(sector);
    let start_sector = offset >> ashift;
    let first_child = start_sector % width_u;
    let row_offset = (start_sector / width_u) << ashift;
    let full_rows = data_sectors / data_width;
    let remainder = data_sectors - full_rows * data_width;
    let big_columns = if remainder == 0 {
        0
    } else {
        remainder + parity_u
    };
    let total = data_sectors + parity_u * (full_rows + u64::from(remainder > 0));
    let accessed = if full_rows == 0 { big_columns } else { width_u };

    let mut columns: Vec<RaidzColumn> = (0..accessed)
        .map(|c| {
            let (child, offset) = if first_child + c >= width_u {
                (first_child + c - width_u, row_offset + sector)
            } else {
                (first_child + c, row_offset)
            };
            let sectors = if c < big_columns {
                full_rows + 1
            } else {
                full_rows
            };
            RaidzColumn {
                child: child as usize,
                offset,
                size: sectors << ashift,
            }
        })
        .collect();

    if parity == 1 && columns.len() >= 2 && offset & RAIDZ1_PARITY_SWAP_BIT != 0 {
        let (first, second) = (columns[0], columns[1]);
        columns[0] = RaidzColumn {
            child: second.child,
            offset: second.offset,
            ..first
        };
        columns[1] = RaidzColumn {
            child: first.child,
            offset: first.offset,
            ..second
        };
    }

    let map = RaidzMap {
        parity,
        columns,
        big_columns: big_columns as usize,
        skip_sectors: (asize >> ashift).saturating_sub(total),
        asize,
    };
    // The asize identity: the columns hold `tot` sectors, and the allocation is `tot`
    // rounded up to a multiple of p + 1 (the skip sectors are the difference).
    debug_assert_eq!(map.total_sectors(ashift), total, "columns hold tot sectors");
    debug_assert_eq!(
        asize >> ashift,
        total.next_multiple_of(parity_u + 1),
        "asize = roundup(tot, p + 1)"
    );
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes_in_sectors(columns: &[RaidzColumn], ashift: u32) -> Vec<u64> {
        columns.iter().map(|c| c.size >> ashift).collect()
    }

    #[test]
    fn full_stripe_on_raidz2_of_6() {
        let map = raidz_map(0, 128 << 10, 6, 2, 12);
        assert_eq!(sizes_in_sectors(&map.columns, 12), vec![8; 6]);
        assert_eq!(map.skip_sectors, 0);
        assert_eq!(map.asize, 192 << 10);
        assert_eq!(map.big_columns, 0);
        assert_eq!(map.parity_columns().len(), 2);
        assert_eq!(map.data_columns().len(), 4);
    }

    #[test]
    fn small_block_on_raidz1_of_5_at_sector_7() {
        let map = raidz_map(7 << 12, 20 << 10, 5, 1, 12);
        assert_eq!(sizes_in_sectors(map.parity_columns(), 12), vec![2]);
        assert_eq!(sizes_in_sectors(map.data_columns(), 12), vec![2, 1, 1, 1]);
        assert_eq!(map.skip_sectors, 1);
        assert_eq!(map.asize, 32 << 10);
        assert_eq!(map.big_columns, 2);
        // First child 7 mod 5 = 2, row 1; columns 3 and 4 wrap to children 0 and 1, row 2.
        let placement: Vec<(usize, u64)> = map
            .columns
            .iter()
            .map(|c| (c.child, c.offset >> 12))
            .collect();
        assert_eq!(placement, vec![(2, 1), (3, 1), (4, 1), (0, 2), (1, 2)]);
    }

    #[test]
    fn record_on_raidz3_of_24() {
        let map = raidz_map(0, 128 << 10, 24, 3, 9);
        let sizes = sizes_in_sectors(&map.columns, 9);
        assert_eq!(sizes.len(), 24);
        assert_eq!(sizes.iter().filter(|&&s| s == 13).count(), 7);
        assert_eq!(sizes.iter().filter(|&&s| s == 12).count(), 17);
        assert!(sizes[..7].iter().all(|&s| s == 13));
        assert_eq!(map.skip_sectors, 1);
        assert_eq!(map.asize, 296 * 512);
        assert_eq!(map.total_sectors(9), 295);
    }

    #[test]
    fn short_block_uses_only_big_columns() {
        // One data sector on raidz2 of 6: q = 0, bc = 3 (P, Q, D).
        let map = raidz_map(4 << 12, 4096, 6, 2, 12);
        assert_eq!(map.columns.len(), 3);
        let children: Vec<usize> = map.columns.iter().map(|c| c.child).collect();
        assert_eq!(children, vec![4, 5, 0]);
        assert_eq!(map.columns[2].offset, 1 << 12);
        assert_eq!(map.skip_sectors, 0);
    }

    #[test]
    fn raidz1_swaps_parity_on_odd_megabytes() {
        let plain = raidz_map(0, 16 << 10, 5, 1, 12);
        let swapped = raidz_map(1 << 20, 16 << 10, 5, 1, 12);
        // At 1 MiB: sector 256, first child 256 mod 5 = 1, row 51.
        assert_eq!((plain.columns[0].child, plain.columns[1].child), (0, 1));
        assert_eq!((swapped.columns[0].child, swapped.columns[1].child), (2, 1));
        assert_eq!(swapped.columns[0].offset, 51 << 12);
        // Sizes stay with the column roles.
        assert_eq!(swapped.columns[0].size, plain.columns[0].size);
        // RAID-Z2 never swaps.
        let raidz2 = raidz_map(1 << 20, 16 << 10, 6, 2, 12);
        assert_eq!(raidz2.columns[0].child, (256 % 6) as usize);
    }
}
