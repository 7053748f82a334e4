//! OpenZFS-identical geometry for cairn: pure functions, no I/O.
//!
//! This crate is the one copy of every space formula. The engine (vdev, pool) and the
//! planner both call it, so `cairn create -n`, `cairn list` and `cairn plan` cannot
//! disagree. It implements docs/design.md:
//!
//! - [`leaf`]: labels and the usable size of a leaf device;
//! - [`shape`]: top-level vdev shapes (disk, mirror, raidz), their size, block allocation
//!   size and deflate ratio;
//! - [`raidz`]: the RAID-Z column map of one block;
//! - [`space`]: metaslabs, slop and the pool's SIZE / AVAIL under several ZFS releases;
//! - [`units`]: `zfs list` and `df -h` style size formatting.
//!
//! The formulas follow OpenZFS (`vdev_label.c`, `vdev_raidz.c`, `vdev.c`
//! `vdev_metaslab_set_size`, `spa_misc.c` `spa_get_slop_space`); the code is written from
//! the formulas, not copied (OpenZFS is CDDL-licensed).

pub mod leaf;
pub mod raidz;
pub mod shape;
pub mod space;
pub mod units;

pub use leaf::{
    label_offset, leaf_asize, LABEL_SIZE, LEAF_DATA_START, LEAF_END_RESERVE, MAX_ASHIFT,
    MIN_ASHIFT, MIN_LEAF_SIZE,
};
pub use raidz::{raidz_map, RaidzColumn, RaidzMap};
pub use shape::{raidz_asize, VdevShape};
pub use space::{
    metaslab_layout, pool_space, slop_space, MetaslabLayout, PoolSpace, VdevSpaceInput, ZfsEra,
};
pub use units::{format_df_size, format_zfs_size};

/// Index of the highest set bit, counting from 1 (`highbit64` in OpenZFS); 0 for 0.
pub fn highbit(value: u64) -> u32 {
    64 - value.leading_zeros()
}

/// `value` rounded up to a multiple of `multiple` (`multiple` > 0).
pub(crate) fn round_up(value: u64, multiple: u64) -> u64 {
    value.div_ceil(multiple) * multiple
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highbit_counts_from_one() {
        assert_eq!(highbit(0), 0);
        assert_eq!(highbit(1), 1);
        assert_eq!(highbit(2), 2);
        assert_eq!(highbit(3), 2);
        assert_eq!(highbit(1 << 29), 30);
        assert_eq!(highbit(u64::MAX), 64);
    }
}
