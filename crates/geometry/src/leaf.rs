//! Leaf devices: the four 256 KiB labels and the usable data area.
//!
//! ```text
//!  0      256K    512K          4M                                  end-512K  end-256K  end
//!  | L0    | L1    | boot/reserved | data area (leaf_asize bytes)    | L2       | L3       |
//! ```
//! `end` is the device size rounded down to 256 KiB (OpenZFS `vdev_label.c`:
//! `VDEV_LABEL_START_SIZE` = 2 labels + 3.5 MiB boot area, `VDEV_LABEL_END_SIZE` = 2 labels).

/// Size of one label.
pub const LABEL_SIZE: u64 = 256 << 10;
/// L0 + L1 + 3.5 MiB reserved: the data area starts here.
pub const LEAF_DATA_START: u64 = 4 << 20;
/// L2 + L3 at the end of the (256 KiB-aligned) device.
pub const LEAF_END_RESERVE: u64 = 512 << 10;
/// Smallest leaf device accepted (OpenZFS `SPA_MINDEVSIZE`).
pub const MIN_LEAF_SIZE: u64 = 64 << 20;
/// Smallest sector shift (512 B sectors).
pub const MIN_ASHIFT: u32 = 9;
/// Largest sector shift (64 KiB sectors).
pub const MAX_ASHIFT: u32 = 16;
/// Number of labels on a leaf.
pub const LABEL_COUNT: usize = 4;

/// Device size rounded down to a whole number of labels.
pub fn label_aligned_size(size: u64) -> u64 {
    size / LABEL_SIZE * LABEL_SIZE
}

/// Usable data area of a leaf of `size` bytes:
/// `A_leaf = floor(size/256Ki)*256Ki − 4 MiB − 512 KiB` (0 if smaller).
pub fn leaf_asize(size: u64) -> u64 {
    label_aligned_size(size).saturating_sub(LEAF_DATA_START + LEAF_END_RESERVE)
}

/// Byte offset of label `index` (0..4) on a leaf of `size` bytes: L0 and L1 at the front,
/// L2 and L3 at the end of the 256 KiB-aligned size. Indexes above 3 are treated as 3.
pub fn label_offset(size: u64, index: usize) -> u64 {
    let index = index.min(LABEL_COUNT - 1) as u64;
    if index < 2 {
        index * LABEL_SIZE
    } else {
        let end = label_aligned_size(size);
        end.saturating_sub((LABEL_COUNT as u64 - index) * LABEL_SIZE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_asize_subtracts_labels_and_reserve() {
        assert_eq!(leaf_asize(64 << 20), (64 << 20) - (4 << 20) - (512 << 10));
        // A size that is not 256 KiB-aligned is rounded down first.
        assert_eq!(leaf_asize((64 << 20) + 1000), leaf_asize(64 << 20));
        // 4 TB disk of 7,814,037,168 sectors of 512 B.
        let size = 7_814_037_168u64 * 512;
        assert_eq!(leaf_asize(size), size / 262_144 * 262_144 - 4_718_592);
        assert_eq!(leaf_asize(0), 0);
        assert_eq!(leaf_asize(4 << 20), 0);
    }

    #[test]
    fn labels_sit_at_both_ends() {
        let size = (100 << 20) + 12345;
        let end = 100 << 20;
        assert_eq!(label_offset(size, 0), 0);
        assert_eq!(label_offset(size, 1), 256 << 10);
        assert_eq!(label_offset(size, 2), end - (512 << 10));
        assert_eq!(label_offset(size, 3), end - (256 << 10));
        // The data area lies between L1's reserve and L2.
        assert_eq!(LEAF_DATA_START + leaf_asize(size), label_offset(size, 2));
    }
}
