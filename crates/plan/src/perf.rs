//! Predicted throughput and IOPS of a layout from per-disk figures.
//!
//! Rules of thumb, per top-level vdev, summed over vdevs (ZFS stripes across vdevs):
//! - sequential read and write of a raidz vdev ≈ (w − p) × disk MB/s: every block is
//!   spread over the data columns and parity costs bandwidth, not time (Matt Ahrens, "How I
//!   Learned to Stop Worrying and Love RAIDZ", Delphix blog 2014);
//! - random read IOPS of a raidz vdev ≈ one disk: each block touches every data column, so
//!   all disks of the group seek for it (same source);
//! - mirrors: reads are spread over all children (n × disk for sequential and random
//!   reads), writes go to every child (1 × disk) (Jim Salter, "ZFS: You should use mirror
//!   vdevs, not RAIDZ", jrs-s.net 2015; "ZFS 101", Ars Technica 2020);
//! - random write IOPS ≈ one disk per vdev for both mirrors and raidz (same sources);
//! - a plain disk contributes its own figures.
//!
//! These are ceilings for large, well-aligned I/O; the bench lab measures the rest.

use crate::disks::Disk;
use cairn_geometry::VdevShape;

/// Predicted performance of a pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Perf {
    pub seq_read_mbs: f64,
    pub seq_write_mbs: f64,
    pub rand_read_iops: f64,
    pub rand_write_iops: f64,
}

impl Perf {
    /// One number for ranking: the geometric mean of the four figures, each relative to a
    /// single disk (1.0 = one disk, 24.0 = 24 disks in every respect).
    pub fn score(&self, disk: &Disk) -> f64 {
        let ratios = [
            self.seq_read_mbs / disk.seq_mbs,
            self.seq_write_mbs / disk.seq_mbs,
            self.rand_read_iops / disk.rand_read_iops,
            self.rand_write_iops / disk.rand_write_iops,
        ];
        let mean_log = ratios
            .iter()
            .map(|r| r.max(f64::MIN_POSITIVE).ln())
            .sum::<f64>()
            / 4.0;
        mean_log.exp()
    }
}

/// Performance of one top-level vdev.
pub fn vdev_perf(shape: VdevShape, disk: &Disk) -> Perf {
    let seq = disk.seq_mbs;
    match shape {
        VdevShape::Disk => Perf {
            seq_read_mbs: seq,
            seq_write_mbs: seq,
            rand_read_iops: disk.rand_read_iops,
            rand_write_iops: disk.rand_write_iops,
        },
        VdevShape::Mirror { children } => Perf {
            seq_read_mbs: children as f64 * seq,
            seq_write_mbs: seq,
            rand_read_iops: children as f64 * disk.rand_read_iops,
            rand_write_iops: disk.rand_write_iops,
        },
        VdevShape::Raidz { .. } => {
            let data = shape.data_disks() as f64;
            Perf {
                seq_read_mbs: data * seq,
                seq_write_mbs: data * seq,
                rand_read_iops: disk.rand_read_iops,
                rand_write_iops: disk.rand_write_iops,
            }
        }
    }
}

/// Performance of `vdevs` identical top-level vdevs.
pub fn pool_perf(shape: VdevShape, vdevs: usize, disk: &Disk) -> Perf {
    let one = vdev_perf(shape, disk);
    let n = vdevs as f64;
    Perf {
        seq_read_mbs: one.seq_read_mbs * n,
        seq_write_mbs: one.seq_write_mbs * n,
        rand_read_iops: one.rand_read_iops * n,
        rand_write_iops: one.rand_write_iops * n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disks::{generic_disk, DiskKind};

    #[test]
    fn rules_of_thumb() {
        let disk = generic_disk(DiskKind::Hdd, 4_000_000_000_000, "4TB");
        let raidz2 = pool_perf(
            VdevShape::Raidz {
                width: 6,
                parity: 2,
            },
            4,
            &disk,
        );
        let (seq, read, write) = (disk.seq_mbs, disk.rand_read_iops, disk.rand_write_iops);
        assert_eq!(raidz2.seq_write_mbs, 16.0 * seq);
        assert_eq!(raidz2.rand_read_iops, 4.0 * read);
        let mirrors = pool_perf(VdevShape::Mirror { children: 2 }, 12, &disk);
        assert_eq!(mirrors.seq_read_mbs, 24.0 * seq);
        assert_eq!(mirrors.seq_write_mbs, 12.0 * seq);
        assert_eq!(mirrors.rand_read_iops, 24.0 * read);
        assert_eq!(mirrors.rand_write_iops, 12.0 * write);
        let stripe = pool_perf(VdevShape::Disk, 24, &disk);
        assert!((stripe.score(&disk) - 24.0).abs() < 1e-9);
        assert!((pool_perf(VdevShape::Disk, 1, &disk).score(&disk) - 1.0).abs() < 1e-9);
    }
}
