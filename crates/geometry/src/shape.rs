//! Top-level vdev shapes: size, allocation size of a block and deflate ratio.

use crate::round_up;

/// Logical block size used for the deflate ratio (`SPA_OLD_MAXBLOCKSIZE`, 128 KiB).
pub const DEFLATE_REFERENCE_BLOCK: u64 = 128 << 10;
/// Deflate ratios are fractions of this (`SPA_MINBLOCKSIZE`, 512 B).
pub const DEFLATE_DENOMINATOR: u64 = 512;

/// Shape of a top-level vdev.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum VdevShape {
    /// A single leaf.
    Disk,
    /// `children` copies of every block.
    Mirror { children: usize },
    /// RAID-Z over `width` leaves with `parity` (1..=3) parity columns.
    Raidz { width: usize, parity: usize },
}

impl VdevShape {
    /// Number of leaf devices.
    pub fn leaves(&self) -> usize {
        match *self {
            VdevShape::Disk => 1,
            VdevShape::Mirror { children } => children,
            VdevShape::Raidz { width, .. } => width,
        }
    }

    /// Leaves that can fail without data loss: disk 0, mirror n−1, raidz p.
    pub fn redundancy(&self) -> usize {
        match *self {
            VdevShape::Disk => 0,
            VdevShape::Mirror { children } => children.saturating_sub(1),
            VdevShape::Raidz { parity, .. } => parity,
        }
    }

    /// Leaves' worth of data per stripe: disk 1, mirror 1, raidz w−p.
    pub fn data_disks(&self) -> usize {
        match *self {
            VdevShape::Disk | VdevShape::Mirror { .. } => 1,
            VdevShape::Raidz { width, parity } => width.saturating_sub(parity),
        }
    }

    /// Top-level vdev size from the smallest child's `A_leaf`: disk/mirror = A, raidz = w·A
    /// (OpenZFS `vdev_mirror_open`, `vdev_raidz_open`).
    pub fn vdev_asize(&self, min_leaf_asize: u64) -> u64 {
        match *self {
            VdevShape::Disk | VdevShape::Mirror { .. } => min_leaf_asize,
            VdevShape::Raidz { width, .. } => min_leaf_asize.saturating_mul(width as u64),
        }
    }

    /// Allocated bytes for a block of `psize` bytes: disk/mirror round up to a sector,
    /// raidz adds parity and padding ([`raidz_asize`]).
    pub fn block_asize(&self, psize: u64, ashift: u32) -> u64 {
        match *self {
            VdevShape::Disk | VdevShape::Mirror { .. } => round_up(psize, 1 << ashift),
            VdevShape::Raidz { width, parity } => raidz_asize(psize, width, parity, ashift),
        }
    }

    /// Deflate ratio out of 512: `floor(131072 / (block_asize(128 KiB)/512))`; 512 for
    /// disk and mirror (OpenZFS `vdev.c`, `vdev_deflate_ratio`).
    pub fn deflate_ratio(&self, ashift: u32) -> u64 {
        let asize_sectors = self.block_asize(DEFLATE_REFERENCE_BLOCK, ashift) / DEFLATE_DENOMINATOR;
        DEFLATE_REFERENCE_BLOCK / asize_sectors.max(1)
    }

    /// Checks the shape is one ZFS accepts: mirrors of ≥ 2, raidz parity 1..=3 and width ≥ p+1.
    pub fn validate(&self) -> Result<(), ShapeError> {
        match *self {
            VdevShape::Disk => Ok(()),
            VdevShape::Mirror { children } if children < 2 => {
                Err(ShapeError::MirrorTooSmall { children })
            }
            VdevShape::Mirror { .. } => Ok(()),
            VdevShape::Raidz { parity, .. } if !(1..=3).contains(&parity) => {
                Err(ShapeError::BadParity { parity })
            }
            VdevShape::Raidz { width, parity } if width < parity + 1 => {
                Err(ShapeError::RaidzTooNarrow { width, parity })
            }
            VdevShape::Raidz { .. } => Ok(()),
        }
    }

    /// Name in zpool grammar: `disk`, `mirror`, `raidz1`, `raidz2`, `raidz3`.
    pub fn kind_name(&self) -> &'static str {
        match *self {
            VdevShape::Disk => "disk",
            VdevShape::Mirror { .. } => "mirror",
            VdevShape::Raidz { parity: 1, .. } => "raidz1",
            VdevShape::Raidz { parity: 2, .. } => "raidz2",
            VdevShape::Raidz { parity: 3, .. } => "raidz3",
            VdevShape::Raidz { .. } => "raidz",
        }
    }
}

impl std::fmt::Display for VdevShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            VdevShape::Disk => write!(f, "disk"),
            _ => write!(f, "{}×{}", self.kind_name(), self.leaves()),
        }
    }
}

/// A vdev shape ZFS would refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeError {
    MirrorTooSmall { children: usize },
    BadParity { parity: usize },
    RaidzTooNarrow { width: usize, parity: usize },
}

impl std::fmt::Display for ShapeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ShapeError::MirrorTooSmall { children } => {
                write!(f, "a mirror needs at least 2 devices, got {children}")
            }
            ShapeError::BadParity { parity } => {
                write!(f, "raidz parity must be 1, 2 or 3, got {parity}")
            }
            ShapeError::RaidzTooNarrow { width, parity } => write!(
                f,
                "raidz{parity} needs at least {} devices, got {width}",
                parity + 1
            ),
        }
    }
}

impl std::error::Error for ShapeError {}

/// Allocated bytes of a `psize`-byte block on a `width`-wide raidz with `parity`
/// (OpenZFS `vdev_raidz_asize`): `a = ceil(psize/2^ashift); a += p·ceil(a/(w−p));
/// asize = roundup(a, p+1)·2^ashift`. The rounding to p+1 sectors keeps every free gap
/// large enough for the smallest block (1 data + p parity sectors).
pub fn raidz_asize(psize: u64, width: usize, parity: usize, ashift: u32) -> u64 {
    if psize == 0 {
        return 0;
    }
    let data_columns = width.saturating_sub(parity).max(1) as u64;
    let parity = parity as u64;
    let data_sectors = psize.div_ceil(1 << ashift);
    let sectors = data_sectors + parity * data_sectors.div_ceil(data_columns);
    round_up(sectors, parity + 1) << ashift
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raidz(width: usize, parity: usize) -> VdevShape {
        VdevShape::Raidz { width, parity }
    }

    #[test]
    fn deflate_ratios_match_published_values() {
        assert_eq!(raidz(5, 1).deflate_ratio(9), 409);
        assert_eq!(raidz(5, 1).deflate_ratio(12), 409);
        assert_eq!(raidz(6, 2).deflate_ratio(9), 341);
        assert_eq!(raidz(6, 2).deflate_ratio(12), 341);
        assert_eq!(raidz(11, 2).deflate_ratio(9), 416);
        assert_eq!(raidz(11, 2).deflate_ratio(12), 390);
        assert_eq!(raidz(24, 3).deflate_ratio(9), 442);
        assert_eq!(raidz(24, 3).deflate_ratio(12), 409);
        assert_eq!(VdevShape::Disk.deflate_ratio(12), 512);
        assert_eq!(VdevShape::Mirror { children: 3 }.deflate_ratio(9), 512);
    }

    #[test]
    fn raidz_asize_worked_examples() {
        assert_eq!(raidz_asize(128 << 10, 6, 2, 12), 192 << 10);
        assert_eq!(raidz_asize(20 << 10, 5, 1, 12), 32 << 10);
        assert_eq!(raidz_asize(128 << 10, 24, 3, 9), 296 * 512);
        // One 4 KiB sector on raidz2: 1 data + 2 parity = 3 sectors, already a multiple of 3.
        assert_eq!(raidz_asize(4096, 6, 2, 12), 3 * 4096);
        // Partial sector rounds up.
        assert_eq!(raidz_asize(1, 5, 1, 9), 2 * 512);
        assert_eq!(raidz_asize(0, 5, 1, 9), 0);
    }

    #[test]
    fn shape_counts() {
        assert_eq!(raidz(6, 2).leaves(), 6);
        assert_eq!(raidz(6, 2).redundancy(), 2);
        assert_eq!(raidz(6, 2).data_disks(), 4);
        let mirror = VdevShape::Mirror { children: 3 };
        assert_eq!(
            (mirror.leaves(), mirror.redundancy(), mirror.data_disks()),
            (3, 2, 1)
        );
        let disk = VdevShape::Disk;
        assert_eq!(
            (disk.leaves(), disk.redundancy(), disk.data_disks()),
            (1, 0, 1)
        );
        assert_eq!(raidz(6, 2).vdev_asize(1000), 6000);
        assert_eq!(mirror.vdev_asize(1000), 1000);
        assert_eq!(disk.block_asize(1000, 12), 4096);
    }

    #[test]
    fn validate_rejects_impossible_shapes() {
        assert!(raidz(2, 1).validate().is_ok());
        assert!(raidz(2, 2).validate().is_err());
        assert!(raidz(5, 4).validate().is_err());
        assert!(VdevShape::Mirror { children: 1 }.validate().is_err());
        assert!(VdevShape::Disk.validate().is_ok());
    }
}
