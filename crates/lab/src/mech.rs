//! The mechanics of one hard disk: where a sector is (zone, cylinder, head, angle) and how
//! long the arm takes to move between cylinders.
//!
//! Sources: the zone layout and the measured seek table of DiskSim's Western Digital 4 TB
//! 7200 rpm model (`G4_LBA_64bit_4T`, files `data/wd4t_zones.csv` and `data/wd4t_seeks.csv`);
//! the service-time decomposition of Ruemmler & Wilkes, "An introduction to disk drive
//! modeling" (IEEE Computer, 1994). The code is written from those descriptions, not from
//! DiskSim's source.
//!
//! ```text
//! Model sector 150 000 000 on the WD 4 TB layout (10 heads, LBAs zone after zone,
//! cylinder-major inside a zone: all 10 tracks of a cylinder, then the next cylinder):
//!
//!   zone 0: cylinders 0..4608,    3072 sectors/track -> 4608·10·3072 = 141 557 760 sectors
//!   zone 1: cylinders 4608..9216, 3072 sectors/track  <- 150 000 000 lies here
//!
//!   i     = 150 000 000 − 141 557 760 = 8 442 240 sectors into zone 1
//!   track = i div 3072 = 2748, sector j = i mod 3072 = 384
//!   cyl   = 4608 + 2748 div 10 = 4882, head = 2748 mod 10 = 8
//!   global track k = 46 080 (zone 0) + 2748 = 48 828
//!   angle = frac(k·σ + j/spt) with the track skew σ (revolutions per track switch), so a
//!   sequential transfer finds the next track's sector 0 just after its head switch.
//!
//! Seek of 1 000 cylinders: table rows (997, 2.0 ms) .. (1 002, 2.0 ms), interpolated
//! linearly; a write adds the settle time.
//! ```
//!
//! The seek time comes from the measured table, not from a fitted curve: DiskSim's "HPL"
//! form (Ruemmler & Wilkes: `a + b·√d` below a knee, `c + e·d` above; for this drive
//! 1.50 + 0.0190·√d ms below 40 000 cylinders, 4.42 + 3.18e-5·d above) and Lee & Katz's
//! 3-point curve (`t(x) = c + b·(x−1) + a·√(x−1)` from min / average / max seek) are the
//! alternatives when only a datasheet is known; the table keeps the measured bumps.
//!
//! Simplification: DiskSim's layout is serpentine (each head runs 128 cylinders out and back
//! before the next head); here a zone is cylinder-major. Seek distances between LBAs differ
//! by at most a 128-cylinder band, far below the random-seek lengths that matter.

use std::sync::OnceLock;

const ZONES_CSV: &str = include_str!("../data/wd4t_zones.csv");
const SEEKS_CSV: &str = include_str!("../data/wd4t_seeks.csv");

/// Surfaces (heads) of the WD 4 TB model.
pub const WD4T_HEADS: u32 = 10;

/// A measured seek curve: time per seek distance in cylinders, linear between measured rows.
#[derive(Clone, Debug)]
pub struct SeekCurve {
    dist: Vec<f64>,
    ms: Vec<f64>,
}

impl SeekCurve {
    /// The WD 4 TB table (1792 measured distances).
    pub fn wd4t() -> &'static SeekCurve {
        static CURVE: OnceLock<SeekCurve> = OnceLock::new();
        CURVE.get_or_init(|| {
            let rows = parse_rows(SEEKS_CSV, 2);
            SeekCurve {
                dist: rows.iter().map(|r| r[0]).collect(),
                ms: rows.iter().map(|r| r[1]).collect(),
            }
        })
    }

    /// Seek time in ms for a distance of `d` cylinders (0 for no move).
    pub fn time_ms(&self, d: u32) -> f64 {
        if d == 0 || self.dist.is_empty() {
            return 0.0;
        }
        let d = f64::from(d);
        let i = self.dist.partition_point(|&x| x < d);
        if i == 0 {
            return self.ms[0];
        }
        if i == self.dist.len() {
            return self.ms[i - 1];
        }
        let (d0, d1, t0, t1) = (self.dist[i - 1], self.dist[i], self.ms[i - 1], self.ms[i]);
        t0 + (t1 - t0) * (d - d0) / (d1 - d0)
    }

    /// Number of measured distances.
    pub fn len(&self) -> usize {
        self.dist.len()
    }

    /// True when the table is empty (never for the embedded table).
    pub fn is_empty(&self) -> bool {
        self.dist.is_empty()
    }
}

/// One recording zone: a run of cylinders with the same sectors per track.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Zone {
    pub first_cyl: u32,
    pub cylinders: u32,
    pub spt: u32,
    /// First model sector of the zone.
    pub first_sector: u64,
    /// Global index of the zone's first track (for the skew).
    pub first_track: u64,
}

/// Where a sector lies under the heads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Place {
    pub zone: usize,
    pub cyl: u32,
    pub head: u32,
    /// Sector inside its track.
    pub sector: u32,
    pub spt: u32,
    /// Global track index (all zones, all heads).
    pub track: u64,
}

/// The zone layout of a drive.
#[derive(Clone, Debug)]
pub struct Layout {
    pub zones: Vec<Zone>,
    pub heads: u32,
    pub total_sectors: u64,
    pub cylinders: u32,
}

impl Layout {
    /// The WD 4 TB layout (59 zones, 3072 → 1560 sectors per track, 303 104 cylinders).
    pub fn wd4t() -> &'static Layout {
        static LAYOUT: OnceLock<Layout> = OnceLock::new();
        LAYOUT.get_or_init(|| {
            let rows = parse_rows(ZONES_CSV, 4);
            Layout::new(
                rows.iter().map(|r| (r[1] as u32, r[2] as u32, r[3] as u32)),
                WD4T_HEADS,
            )
        })
    }

    /// Builds a layout from (first cylinder, cylinders, sectors per track) rows.
    pub fn new(rows: impl Iterator<Item = (u32, u32, u32)>, heads: u32) -> Layout {
        let (mut zones, mut sector, mut track, mut cylinders) = (Vec::new(), 0u64, 0u64, 0u32);
        for (first_cyl, cyls, spt) in rows {
            zones.push(Zone {
                first_cyl,
                cylinders: cyls,
                spt,
                first_sector: sector,
                first_track: track,
            });
            let tracks = u64::from(cyls) * u64::from(heads);
            sector += tracks * u64::from(spt);
            track += tracks;
            cylinders = first_cyl + cyls;
        }
        Layout {
            zones,
            heads,
            total_sectors: sector,
            cylinders,
        }
    }

    /// The same platters recorded for another capacity: sectors per track scaled by `rate`
    /// (older, less dense platters) and every zone's cylinder count by the factor that makes
    /// the layout hold at least `sectors` sectors. Returns the layout and the ratio of the
    /// original to the new cylinder count (to keep the seek curve spanning the stroke).
    pub fn scaled(&self, rate: f64, sectors: u64) -> (Layout, f64) {
        let spt: Vec<u32> = self
            .zones
            .iter()
            .map(|z| ((f64::from(z.spt) * rate).round() as u32).max(1))
            .collect();
        let raw: f64 = self
            .zones
            .iter()
            .zip(&spt)
            .map(|(z, &s)| f64::from(z.cylinders) * f64::from(self.heads) * f64::from(s))
            .sum();
        let c = sectors as f64 / raw.max(1.0);
        let mut first = 0u32;
        let rows: Vec<(u32, u32, u32)> = self
            .zones
            .iter()
            .zip(&spt)
            .map(|(z, &s)| {
                let cyls = ((f64::from(z.cylinders) * c).ceil() as u32).max(1);
                first += cyls;
                (first - cyls, cyls, s)
            })
            .collect();
        let l = Layout::new(rows.into_iter(), self.heads);
        let ratio = f64::from(self.cylinders) / f64::from(l.cylinders.max(1));
        (l, ratio)
    }

    /// The place of model sector `s` (clamped to the last sector).
    pub fn locate(&self, s: u64) -> Place {
        let s = s.min(self.total_sectors.saturating_sub(1));
        let z = self
            .zones
            .partition_point(|z| z.first_sector <= s)
            .saturating_sub(1);
        let zone = &self.zones[z];
        let i = s - zone.first_sector;
        let spt = u64::from(zone.spt);
        let t = i / spt;
        Place {
            zone: z,
            cyl: zone.first_cyl + (t / u64::from(self.heads)) as u32,
            head: (t % u64::from(self.heads)) as u32,
            sector: (i % spt) as u32,
            spt: zone.spt,
            track: zone.first_track + t,
        }
    }

    /// Sectors per track at model sector `s`.
    pub fn spt_at(&self, s: u64) -> u32 {
        self.locate(s).spt
    }
}

/// Angle (fraction of a revolution) of a place, with `skew` revolutions per track.
pub fn angle(p: &Place, skew: f64) -> f64 {
    let a = p.track as f64 * skew + f64::from(p.sector) / f64::from(p.spt);
    a - a.floor()
}

/// Parses the numeric rows of an embedded CSV (lines starting with `#` and the header are
/// skipped). The tables are part of the crate and checked by tests, so a malformed row is
/// skipped rather than reported.
fn parse_rows(text: &str, cols: usize) -> Vec<Vec<f64>> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let v: Vec<f64> = l.split(',').filter_map(|x| x.trim().parse().ok()).collect();
            (v.len() == cols).then_some(v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn worked_example_of_the_module_comment() {
        let l = Layout::wd4t();
        let p = l.locate(150_000_000);
        assert_eq!(
            (p.zone, p.cyl, p.head, p.sector, p.track),
            (1, 4882, 8, 384, 48_828)
        );
        assert!((SeekCurve::wd4t().time_ms(1000) - 2.0).abs() < 0.05);
    }

    #[test]
    fn tables_are_complete() {
        let l = Layout::wd4t();
        assert_eq!(l.zones.len(), 59);
        assert_eq!(l.total_sectors, 7_542_225_920);
        assert_eq!(l.cylinders, 303_104);
        assert_eq!(SeekCurve::wd4t().len(), 1792);
        // media rate: 3072 sectors/track at 120 rev/s = 188.7 MB/s, 1560 -> 95.8 MB/s
        let rate = |spt: u32| f64::from(spt) * 512.0 * 120.0 / 1e6;
        assert!((rate(l.zones[0].spt) - 188.7).abs() < 0.1);
        assert!((rate(l.zones[58].spt) - 95.8).abs() < 0.1);
    }

    #[test]
    fn seek_curve_matches_the_documented_points() {
        let c = SeekCurve::wd4t();
        for (d, t) in [
            (10_000, 3.4),
            (50_000, 5.8),
            (100_000, 7.7),
            (200_000, 10.8),
        ] {
            assert!((c.time_ms(d) - t).abs() < 0.25, "t({d}) = {}", c.time_ms(d));
        }
        assert!((c.time_ms(353_181) - 15.7).abs() < 1e-9);
        assert!((c.time_ms(400_000) - 15.7).abs() < 1e-9);
        // mean over uniform random pairs of cylinders: 7.9 ms (hdd_model.md §2)
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let n = 200_000;
        // over the table's whole stroke (353 181 cylinders; the layout uses 303 104 of them)
        let cyl: u32 = 353_182;
        let sum: f64 = (0..n)
            .map(|_| {
                let (a, b) = (rng.gen_range(0..cyl), rng.gen_range(0..cyl));
                c.time_ms(a.abs_diff(b))
            })
            .sum();
        let mean = sum / f64::from(n);
        assert!((mean - 7.9).abs() < 0.4, "mean seek {mean}");
    }
}
