//! Property tests of the RAID-Z map: columns never overlap, sizes add up, consecutive
//! blocks never share a sector.

use cairn_geometry::{raidz_asize, raidz_map, RaidzMap};
use proptest::prelude::*;

/// (width, parity, ashift, data sectors, start sector)
fn block() -> impl Strategy<Value = (usize, usize, u32, u64, u64)> {
    (1usize..=3)
        .prop_flat_map(|parity| (parity + 1..=24, Just(parity)))
        .prop_flat_map(|(width, parity)| {
            (
                Just(width),
                Just(parity),
                9u32..=13,
                1u64..=512,
                0u64..1_000_000,
            )
        })
}

/// Per-child sector ranges `[start, end)` of a map.
fn child_ranges(map: &RaidzMap, ashift: u32) -> Vec<(usize, u64, u64)> {
    map.columns
        .iter()
        .map(|c| (c.child, c.offset >> ashift, (c.offset + c.size) >> ashift))
        .collect()
}

fn overlaps(a: &[(usize, u64, u64)], b: &[(usize, u64, u64)]) -> bool {
    a.iter().any(|&(child_a, start_a, end_a)| {
        b.iter().any(|&(child_b, start_b, end_b)| {
            child_a == child_b && start_a < end_b && start_b < end_a
        })
    })
}

proptest! {
    #[test]
    fn columns_never_overlap_on_a_child((width, parity, ashift, sectors, start) in block()) {
        let map = raidz_map(start << ashift, sectors << ashift, width, parity, ashift);
        let ranges = child_ranges(&map, ashift);
        for (i, a) in ranges.iter().enumerate() {
            prop_assert!(a.2 > a.1, "empty column");
            prop_assert!(a.0 < width);
            for b in &ranges[i + 1..] {
                prop_assert!(!overlaps(&[*a], &[*b]), "{:?} overlaps {:?}", a, b);
            }
        }
    }

    #[test]
    fn sizes_add_up((width, parity, ashift, sectors, start) in block()) {
        let map = raidz_map(start << ashift, sectors << ashift, width, parity, ashift);
        let data_columns = (width - parity) as u64;
        let rows = sectors.div_ceil(data_columns);
        let total = sectors + parity as u64 * rows;
        prop_assert_eq!(map.total_sectors(ashift), total);
        let data: u64 = map.data_columns().iter().map(|c| c.size >> ashift).sum();
        prop_assert_eq!(data, sectors);
        prop_assert_eq!(map.parity_columns().len(), parity);
        prop_assert_eq!(map.asize, raidz_asize(sectors << ashift, width, parity, ashift));
        prop_assert_eq!((map.asize >> ashift) - total, map.skip_sectors);
        prop_assert!(map.skip_sectors <= parity as u64);
    }

    #[test]
    fn consecutive_blocks_never_overlap(
        (width, parity, ashift, sectors, start) in block(),
        next_sectors in 1u64..=512,
    ) {
        let first = raidz_map(start << ashift, sectors << ashift, width, parity, ashift);
        let next_offset = (start << ashift) + first.asize;
        let second = raidz_map(next_offset, next_sectors << ashift, width, parity, ashift);
        prop_assert!(!overlaps(&child_ranges(&first, ashift), &child_ranges(&second, ashift)));
    }
}
