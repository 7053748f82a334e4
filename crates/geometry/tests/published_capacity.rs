//! Spot check of pool_space against calomel.org's "ZFS Raidz Performance, Capacity and
//! Integrity" (FreeBSD 10.2, 24 × 4 TB of 7,814,037,168 × 512 B sectors, ashift 9). The
//! article's unit is bytes / (1024 × 10^9), truncated to one decimal. The planner's tests
//! check all 26 rows.

use cairn_geometry::{leaf_asize, pool_space, VdevShape, VdevSpaceInput, ZfsEra};

fn article_units(bytes: u64) -> f64 {
    (bytes as f64 / 1.024e12 * 10.0).floor() / 10.0
}

fn avail(shape: VdevShape, vdevs: usize) -> u64 {
    let leaf = leaf_asize(7_814_037_168 * 512);
    let vdev = VdevSpaceInput {
        shape,
        min_leaf_asize: leaf,
        ashift: 9,
    };
    pool_space(&vec![vdev; vdevs], ZfsEra::V0_7).avail
}

#[test]
fn freebsd_10_capacities() {
    assert_eq!(
        article_units(avail(
            VdevShape::Raidz {
                width: 24,
                parity: 2
            },
            1
        )),
        82.0
    );
    assert_eq!(
        article_units(avail(
            VdevShape::Raidz {
                width: 23,
                parity: 3
            },
            1
        )),
        74.9
    );
    assert_eq!(article_units(avail(VdevShape::Disk, 24)), 90.4);
    assert_eq!(article_units(avail(VdevShape::Disk, 1)), 3.7);
    assert_eq!(
        article_units(avail(VdevShape::Mirror { children: 2 }, 12)),
        45.2
    );
}
