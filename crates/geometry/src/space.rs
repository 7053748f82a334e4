//! Pool space: metaslabs, deflate, slop, SIZE and AVAIL, under several ZFS releases' rules.
//!
//! `zpool list` SIZE is the sum of the metaslabs (the tail of a vdev smaller than one
//! metaslab is never used). `zfs list` AVAIL on an empty pool is `dspace − slop`, where
//! `dspace` is the metaslab bytes scaled by each vdev's deflate ratio
//! (`(bytes >> 9) · ratio`, OpenZFS `vdev_deflated_space`) and the slop is a reserve the
//! pool keeps back (OpenZFS `spa_misc.c`, `spa_get_slop_space`).

use crate::highbit;
use crate::shape::VdevShape;

/// Which release's space rules to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum ZfsEra {
    /// cairn's own rules (docs/design.md): modern metaslabs, slop
    /// `max(min(d/32, 128 GiB), min(d/2, 128 MiB))`, no embedded log metaslab.
    #[default]
    Cairn,
    /// OpenZFS 2.1 and later: as `Cairn`, plus one metaslab of every vdev with more than
    /// 64 metaslabs moved to the embedded log class (not in `dspace`, and its deflated size
    /// taken off the slop, at most half of it).
    V2_1,
    /// OpenZFS 0.8–2.0: modern metaslabs, slop `max(d/32, min(d/2, 128 MiB))`.
    V0_8,
    /// ZoL 0.6.5–0.7, FreeBSD 10–11: metaslab shift `max(17, highbit(A/200))`, slop
    /// `max(d/32, 32 MiB)`.
    V0_7,
    /// Before 2014 (ZoL ≤ 0.6.3): the same metaslabs, slop `max(d/64, 32 MiB)`.
    V0_6_3,
}

impl ZfsEra {
    /// Every era, newest first.
    pub const ALL: [ZfsEra; 5] = [
        ZfsEra::Cairn,
        ZfsEra::V2_1,
        ZfsEra::V0_8,
        ZfsEra::V0_7,
        ZfsEra::V0_6_3,
    ];

    /// Parses a CLI name: `cairn`, `2.1`, `0.8`, `0.7`, `0.6.3` (and a few aliases:
    /// `2.2`/`2.3` → 2.1, `2.0` → 0.8, `0.6.5`/`freebsd10`/`freebsd11` → 0.7).
    pub fn from_name(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cairn" => Some(ZfsEra::Cairn),
            "2.1" | "2.2" | "2.3" => Some(ZfsEra::V2_1),
            "0.8" | "2.0" => Some(ZfsEra::V0_8),
            "0.7" | "0.6.5" | "freebsd10" | "freebsd11" => Some(ZfsEra::V0_7),
            "0.6.3" => Some(ZfsEra::V0_6_3),
            _ => None,
        }
    }

    /// The canonical CLI name.
    pub fn name(self) -> &'static str {
        match self {
            ZfsEra::Cairn => "cairn",
            ZfsEra::V2_1 => "2.1",
            ZfsEra::V0_8 => "0.8",
            ZfsEra::V0_7 => "0.7",
            ZfsEra::V0_6_3 => "0.6.3",
        }
    }

    fn uses_modern_metaslabs(self) -> bool {
        matches!(self, ZfsEra::Cairn | ZfsEra::V2_1 | ZfsEra::V0_8)
    }
}

impl std::fmt::Display for ZfsEra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a top-level vdev is cut into metaslabs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaslabLayout {
    /// log2 of the metaslab size.
    pub shift: u32,
    /// Number of metaslabs: `floor(A / 2^shift)`.
    pub count: u64,
    /// Metaslab size in bytes, `1 << shift`.
    pub size: u64,
}

impl MetaslabLayout {
    /// Bytes covered by all metaslabs.
    pub fn total_bytes(&self) -> u64 {
        self.count * self.size
    }
}

/// Modern rule constants (OpenZFS 0.8+ `vdev.c`).
const DEFAULT_MS_SHIFT: u32 = 29;
const MIN_MS_COUNT: u64 = 16;
const DEFAULT_MS_COUNT: u64 = 200;
const MIN_MS_SHIFT: u32 = 24; // SPA_MAXBLOCKSHIFT with large blocks
const MAX_MS_SHIFT: u32 = 34;
const MS_COUNT_LIMIT: u64 = 1 << 17;
/// Old rule lower bound (`SPA_OLD_MAXBLOCKSHIFT`, 128 KiB).
const OLD_MIN_MS_SHIFT: u32 = 17;
/// OpenZFS 2.1 `zfs_embedded_slog_min_ms`: vdevs with more metaslabs give one to the log class.
const EMBEDDED_LOG_MIN_METASLABS: u64 = 64;

/// Cuts a top-level vdev of `vdev_asize` bytes into metaslabs (OpenZFS `vdev.c`,
/// `vdev_metaslab_set_size`).
///
/// Modern (0.8+): aim for 200 metaslabs of 512 MiB to 16 GiB, at least 16, at most 128 Ki.
/// Old (0.6.x–0.7): roughly 200 metaslabs, at least 128 KiB each.
pub fn metaslab_layout(vdev_asize: u64, era: ZfsEra) -> MetaslabLayout {
    let shift = if era.uses_modern_metaslabs() {
        modern_metaslab_shift(vdev_asize)
    } else {
        highbit(vdev_asize / DEFAULT_MS_COUNT).max(OLD_MIN_MS_SHIFT)
    };
    MetaslabLayout {
        shift,
        count: vdev_asize >> shift,
        size: 1 << shift,
    }
}

fn modern_metaslab_shift(asize: u64) -> u32 {
    let default_count = asize >> DEFAULT_MS_SHIFT;
    let shift = if default_count < MIN_MS_COUNT {
        highbit(asize / MIN_MS_COUNT)
    } else if default_count > DEFAULT_MS_COUNT {
        highbit(asize / DEFAULT_MS_COUNT)
    } else {
        DEFAULT_MS_SHIFT
    };
    let shift = shift.clamp(MIN_MS_SHIFT, MAX_MS_SHIFT);
    if asize >> shift > MS_COUNT_LIMIT {
        highbit(asize / MS_COUNT_LIMIT)
    } else {
        shift
    }
}

/// Slop reserve for a pool of `dspace` deflated bytes (no embedded log; see
/// [`slop_space_with_embedded_log`] for OpenZFS 2.1+ pools that have one).
pub fn slop_space(dspace: u64, era: ZfsEra) -> u64 {
    slop_space_with_embedded_log(dspace, 0, era)
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// `SPA_MINDEVSIZE / 2`, the slop floor before 0.8.
const OLD_MIN_SLOP: u64 = 32 * MIB;
/// `spa_min_slop`, 0.8+.
const MIN_SLOP: u64 = 128 * MIB;
/// `spa_max_slop`, 2.1+ (and cairn).
const MAX_SLOP: u64 = 128 * GIB;

/// Slop reserve (OpenZFS `spa_get_slop_space`, by release):
/// - cairn: `max(min(d/32, 128 GiB), min(d/2, 128 MiB))`;
/// - 2.1+: `s = min(d/32, 128 GiB); s −= min(log, s/2); max(s, min(d/2, 128 MiB))`, where
///   `log` is the deflated size of the embedded log metaslabs;
/// - 0.8–2.0: `max(d/32, min(d/2, 128 MiB))`;
/// - 0.6.5–0.7: `max(d/32, 32 MiB)`;
/// - ≤ 0.6.3: `max(d/64, 32 MiB)` (then in `dsl_pool_adjustedsize`).
pub fn slop_space_with_embedded_log(dspace: u64, embedded_log_dspace: u64, era: ZfsEra) -> u64 {
    let small_pool_floor = (dspace / 2).min(MIN_SLOP);
    match era {
        ZfsEra::Cairn => (dspace / 32).min(MAX_SLOP).max(small_pool_floor),
        ZfsEra::V2_1 => {
            let slop = (dspace / 32).min(MAX_SLOP);
            let slop = slop - embedded_log_dspace.min(slop / 2);
            slop.max(small_pool_floor)
        }
        ZfsEra::V0_8 => (dspace / 32).max(small_pool_floor),
        ZfsEra::V0_7 => (dspace / 32).max(OLD_MIN_SLOP),
        ZfsEra::V0_6_3 => (dspace / 64).max(OLD_MIN_SLOP),
    }
}

/// One top-level vdev as the space rules see it.
#[derive(Clone, Copy, Debug)]
pub struct VdevSpaceInput {
    pub shape: VdevShape,
    /// `leaf_asize` of the smallest child.
    pub min_leaf_asize: u64,
    pub ashift: u32,
}

/// Space of a pool, as `zpool list` and `zfs list` report it on an empty pool.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PoolSpace {
    /// Raw, as `zpool list` SIZE: Σ metaslab bytes (for 2.1+ including the embedded log
    /// metaslabs, which `zpool list` counts too).
    pub size: u64,
    /// Σ normal-class metaslab bytes × deflate/512, computed as ZFS does: `(bytes>>9)·ratio`.
    pub dspace: u64,
    /// Reserved slop.
    pub slop: u64,
    /// `dspace − slop`: what `zfs list` AVAIL shows on an empty pool.
    pub avail: u64,
}

/// Metaslab bytes of one vdev split into the normal and the embedded log class.
struct VdevMetaslabBytes {
    normal: u64,
    embedded_log: u64,
}

fn vdev_metaslab_bytes(vdev: &VdevSpaceInput, era: ZfsEra) -> VdevMetaslabBytes {
    let layout = metaslab_layout(vdev.shape.vdev_asize(vdev.min_leaf_asize), era);
    let embedded_log = if era == ZfsEra::V2_1 && layout.count > EMBEDDED_LOG_MIN_METASLABS {
        layout.size
    } else {
        0
    };
    VdevMetaslabBytes {
        normal: layout.total_bytes() - embedded_log,
        embedded_log,
    }
}

/// Deflated size of `bytes` on a vdev with deflate `ratio` (OpenZFS `vdev_deflated_space`).
pub fn deflated_space(bytes: u64, ratio: u64) -> u64 {
    (bytes >> 9) * ratio
}

/// SIZE, dspace, slop and AVAIL of a pool made of `vdevs`, under `era`'s rules.
pub fn pool_space(vdevs: &[VdevSpaceInput], era: ZfsEra) -> PoolSpace {
    let mut size = 0u64;
    let mut dspace = 0u64;
    let mut embedded_log_dspace = 0u64;
    for vdev in vdevs {
        let bytes = vdev_metaslab_bytes(vdev, era);
        let ratio = vdev.shape.deflate_ratio(vdev.ashift);
        size += bytes.normal + bytes.embedded_log;
        dspace += deflated_space(bytes.normal, ratio);
        embedded_log_dspace += deflated_space(bytes.embedded_log, ratio);
    }
    let slop = slop_space_with_embedded_log(dspace, embedded_log_dspace, era);
    PoolSpace {
        size,
        dspace,
        slop,
        avail: dspace.saturating_sub(slop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leaf::leaf_asize;

    const TIB: u64 = 1 << 40;

    #[test]
    fn era_names_round_trip() {
        for era in ZfsEra::ALL {
            assert_eq!(ZfsEra::from_name(era.name()), Some(era));
        }
        assert_eq!(ZfsEra::from_name("1.0"), None);
        assert_eq!(ZfsEra::default(), ZfsEra::Cairn);
    }

    #[test]
    fn modern_metaslabs() {
        // 100 GiB: 200 × 512 MiB fits the default band.
        let ms = metaslab_layout(100 * GIB, ZfsEra::Cairn);
        assert_eq!((ms.shift, ms.count, ms.size), (29, 200, 512 * MIB));
        // 4 GiB: fewer than 16 default metaslabs → highbit(A/16) = highbit(256 MiB) = 29.
        let ms = metaslab_layout(4 * GIB, ZfsEra::Cairn);
        assert_eq!((ms.shift, ms.count), (29, 8));
        // 1 GiB: highbit(64 MiB) = 27.
        assert_eq!(metaslab_layout(GIB, ZfsEra::Cairn).shift, 27);
        // 64 MiB: highbit(4 MiB) = 23 → clamped to 24; 4 metaslabs of 16 MiB.
        let ms = metaslab_layout(64 * MIB, ZfsEra::V0_8);
        assert_eq!((ms.shift, ms.count), (24, 4));
        // 1 TiB: 2048 default → highbit(1 TiB/200) = highbit(5.12 GiB) = 33.
        let ms = metaslab_layout(TIB, ZfsEra::V2_1);
        assert_eq!((ms.shift, ms.count), (33, 128));
        // 100 TiB: highbit(512 GiB) = 40 → clamped to 34: 6400 metaslabs of 16 GiB.
        let ms = metaslab_layout(100 * TIB, ZfsEra::Cairn);
        assert_eq!((ms.shift, ms.count), (34, 6400));
        // 4 EiB: more than 128 Ki metaslabs of 16 GiB → highbit(A/131072) = 45.
        let ms = metaslab_layout(1 << 62, ZfsEra::Cairn);
        assert_eq!((ms.shift, ms.count), (46, 65536));
    }

    #[test]
    fn old_metaslabs() {
        // 1 TiB / 200 = 5.12 GiB → highbit 33, no upper clamp.
        let ms = metaslab_layout(TIB, ZfsEra::V0_7);
        assert_eq!((ms.shift, ms.count), (33, 128));
        // 100 TiB → highbit(512 GiB) = 40 (the modern rule would clamp to 34).
        assert_eq!(metaslab_layout(100 * TIB, ZfsEra::V0_6_3).shift, 40);
        // Tiny vdev: at least 2^17.
        assert_eq!(metaslab_layout(MIB, ZfsEra::V0_7).shift, 17);
        // A 4 TB disk of the published test: highbit(3.64 TiB / 200) = 35 → 116 metaslabs.
        let a = leaf_asize(7_814_037_168 * 512);
        let ms = metaslab_layout(a, ZfsEra::V0_7);
        assert_eq!((ms.shift, ms.count), (35, 116));
    }

    #[test]
    fn slop_edge_cases() {
        // Small pool: half the pool (under 256 MiB), or 128 MiB.
        assert_eq!(slop_space(100 * MIB, ZfsEra::Cairn), 50 * MIB);
        assert_eq!(slop_space(GIB, ZfsEra::Cairn), 128 * MIB);
        assert_eq!(slop_space(GIB, ZfsEra::V0_8), 128 * MIB);
        // 1/32 takes over at 4 GiB.
        assert_eq!(slop_space(64 * GIB, ZfsEra::Cairn), 2 * GIB);
        // 128 GiB cap from 4 TiB on (cairn, 2.1), none in 0.8.
        assert_eq!(slop_space(8 * TIB, ZfsEra::Cairn), 128 * GIB);
        assert_eq!(slop_space(8 * TIB, ZfsEra::V2_1), 128 * GIB);
        assert_eq!(slop_space(8 * TIB, ZfsEra::V0_8), 256 * GIB);
        // Old floor: 32 MiB, even above half the pool.
        assert_eq!(slop_space(GIB, ZfsEra::V0_7), 32 * MIB);
        assert_eq!(slop_space(40 * MIB, ZfsEra::V0_7), 32 * MIB);
        assert_eq!(slop_space(64 * GIB, ZfsEra::V0_7), 2 * GIB);
        assert_eq!(slop_space(64 * GIB, ZfsEra::V0_6_3), GIB);
        assert_eq!(slop_space(0, ZfsEra::Cairn), 0);
        // 2.1: the embedded log comes off the slop, at most half of it.
        assert_eq!(
            slop_space_with_embedded_log(64 * GIB, 512 * MIB, ZfsEra::V2_1),
            1536 * MIB
        );
        assert_eq!(
            slop_space_with_embedded_log(64 * GIB, 10 * GIB, ZfsEra::V2_1),
            GIB
        );
        assert_eq!(
            slop_space_with_embedded_log(GIB, 10 * GIB, ZfsEra::V2_1),
            128 * MIB
        );
    }

    fn published_disk() -> u64 {
        leaf_asize(7_814_037_168 * 512)
    }

    #[test]
    fn single_disk_pool() {
        let vdev = VdevSpaceInput {
            shape: VdevShape::Disk,
            min_leaf_asize: published_disk(),
            ashift: 9,
        };
        let space = pool_space(&[vdev], ZfsEra::V0_7);
        assert_eq!(space.size, 116 << 35);
        assert_eq!(space.dspace, space.size);
        assert_eq!(space.slop, space.dspace / 32);
        assert_eq!(space.avail, space.dspace - space.slop);
    }

    #[test]
    fn embedded_log_only_in_2_1_and_only_above_64_metaslabs() {
        let big = VdevSpaceInput {
            shape: VdevShape::Raidz {
                width: 6,
                parity: 2,
            },
            min_leaf_asize: published_disk(),
            ashift: 12,
        };
        let cairn = pool_space(&[big], ZfsEra::Cairn);
        let v21 = pool_space(&[big], ZfsEra::V2_1);
        let ms = metaslab_layout(big.shape.vdev_asize(big.min_leaf_asize), ZfsEra::V2_1);
        assert!(ms.count > 64);
        assert_eq!(v21.size, cairn.size);
        assert_eq!(v21.dspace, cairn.dspace - deflated_space(ms.size, 341));
        // 64 metaslabs exactly: no embedded log.
        let small = VdevSpaceInput {
            shape: VdevShape::Disk,
            min_leaf_asize: 64 << 29,
            ashift: 12,
        };
        assert_eq!(
            pool_space(&[small], ZfsEra::V2_1),
            pool_space(&[small], ZfsEra::Cairn)
        );
    }
}
