//! Disk sets and layouts as the CLI spells them.
//!
//! ```text
//! --disks N x SIZE[,hdd|ssd][,512n|512e|4kn][,RPM]     (several --disks for mixed sets)
//!   "5x2TB,512e"     -> 5 HDDs of 2·10^12 B, 512e, 7200 rpm
//!   "24x256GB,ssd"   -> 24 SSDs of 256·10^9 B
//!   "28x1TB,5400"    -> 28 HDDs of 10^12 B at 5400 rpm
//! --layout [G x]KIND[-W]
//!   "raidz2"         -> 1 group of raidz2 over all the disks
//!   "2xraidz2-14"    -> 2 groups of raidz2, 14 disks each
//!   "3xraidz2-9"     -> 3 × 9 = 27 disks (of 28: one unused)
//!   "14xmirror-2", "stripe"
//! ```

use crate::hdd::{HddParams, SectorFormat};
use crate::ssd::SsdParams;

/// What went wrong with a specification, said so that the user can fix it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LabError {
    #[error(
        "--disks {spec:?}: {reason}; write N x SIZE[,hdd|ssd][,512n|512e|4kn][,RPM], \
         e.g. 28x1TB, 5x2TB,512e or 24x256GB,ssd"
    )]
    DiskSpec { spec: String, reason: String },
    #[error(
        "--layout {spec:?}: {reason}; write [G x]KIND[-W] with KIND stripe, mirror, raidz1, \
         raidz2 or raidz3, e.g. raidz2, 2xraidz2-14, 14xmirror-2"
    )]
    Layout { spec: String, reason: String },
    #[error("{what} {spec:?}: {reason}; write a number with an optional K, M, G or T suffix")]
    Size {
        what: &'static str,
        spec: String,
        reason: String,
    },
    /// A run on real devices failed (the pool's own message, with its advice).
    #[error("{0}")]
    Real(String),
}

/// One simulated disk.
#[derive(Clone, Debug, PartialEq)]
pub enum DiskModel {
    Hdd(HddParams),
    Ssd(SsdParams),
}

impl DiskModel {
    pub fn capacity(&self) -> u64 {
        match self {
            DiskModel::Hdd(p) => p.capacity_bytes,
            DiskModel::Ssd(p) => p.capacity_bytes,
        }
    }

    /// A fresh simulated device.
    pub fn build(&self) -> Box<dyn crate::Device + Send> {
        match self {
            DiskModel::Hdd(p) => Box::new(crate::Hdd::new(p.clone())),
            DiskModel::Ssd(p) => Box::new(crate::Ssd::new(p.clone())),
        }
    }
}

/// Parses a size with a decimal unit (disk capacities: `2TB`, `256GB`, `4000000000000`).
fn parse_capacity(s: &str) -> Option<u64> {
    let up = s.to_ascii_uppercase();
    let units: [(&str, f64); 7] = [
        ("TIB", 1099511627776.0),
        ("GIB", 1073741824.0),
        ("TB", 1e12),
        ("GB", 1e9),
        ("MB", 1e6),
        ("T", 1e12),
        ("G", 1e9),
    ];
    let (num, mult) = units
        .iter()
        .find_map(|(u, m)| up.strip_suffix(u).map(|n| (n, *m)))
        .unwrap_or((&up, 1.0));
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v > 0.0 && v * mult < 1e17).then_some((v * mult) as u64)
}

/// Parses a binary size (`1M`, `10G`, `4k`, `512`), as dd and fio write them.
pub fn parse_bytes(what: &'static str, s: &str) -> Result<u64, LabError> {
    let err = |reason: &str| LabError::Size {
        what,
        spec: s.to_string(),
        reason: reason.into(),
    };
    let t = s
        .trim()
        .trim_end_matches(['B', 'b'])
        .trim_end_matches(['i']);
    let (num, shift) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 10),
        Some('M') => (&t[..t.len() - 1], 20),
        Some('G') => (&t[..t.len() - 1], 30),
        Some('T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let v: u64 = num.parse().map_err(|_| err("not a whole number"))?;
    v.checked_mul(1 << shift)
        .filter(|&b| b > 0)
        .ok_or_else(|| err("must be above 0 and below 16 EiB"))
}

/// Parses one `--disks` value into its disks.
pub fn parse_disks(spec: &str) -> Result<Vec<DiskModel>, LabError> {
    let err = |reason: String| LabError::DiskSpec {
        spec: spec.to_string(),
        reason,
    };
    let mut parts = spec.split(',').map(str::trim);
    let head = parts.next().unwrap_or("");
    let (n, size) = head
        .split_once(['x', 'X'])
        .ok_or_else(|| err("no count: start with N x SIZE".into()))?;
    let n: usize = n
        .trim()
        .parse()
        .map_err(|_| err(format!("count {n:?} is not a number")))?;
    if n == 0 || n > 1024 {
        return Err(err(format!("count {n} must be 1 to 1024")));
    }
    let cap = parse_capacity(size.trim())
        .ok_or_else(|| err(format!("size {size:?} is not a size like 2TB")))?;
    if cap < 1 << 30 {
        return Err(err(format!("size {size:?} is below 1 GiB")));
    }
    let (mut ssd, mut format, mut rpm) = (false, SectorFormat::N512, 7200.0);
    for p in parts {
        match p.to_ascii_lowercase().as_str() {
            "hdd" => ssd = false,
            "ssd" => ssd = true,
            "512n" => format = SectorFormat::N512,
            "512e" => format = SectorFormat::E512,
            "4kn" => format = SectorFormat::K4n,
            other => {
                let r: f64 = other.trim_end_matches("rpm").parse().map_err(|_| {
                    err(format!(
                        "{other:?} is not hdd, ssd, 512n, 512e, 4kn or an rpm"
                    ))
                })?;
                if !(3000.0..=20000.0).contains(&r) {
                    return Err(err(format!("{r} rpm is outside 3000 to 20000")));
                }
                rpm = r;
            }
        }
    }
    let model = if ssd {
        DiskModel::Ssd(SsdParams::with_capacity(cap))
    } else {
        let p = HddParams::wd_re_4tb()
            .with_capacity(cap)
            .with_rpm(rpm)
            .with_format(format);
        DiskModel::Hdd(p)
    };
    Ok(vec![model; n])
}

/// Kind of a top-level group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupKind {
    Stripe,
    Mirror,
    Raidz(usize),
}

/// `G` groups of `width` disks each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LayoutSpec {
    pub groups: usize,
    pub kind: GroupKind,
    pub width: usize,
}

impl LayoutSpec {
    /// The layout over real `devices` in `cairn create`'s grammar: `raidz2 d0 d1 … raidz2
    /// …`, `mirror d0 d1 …`, or the devices alone for a stripe (one group per `width`
    /// devices, in order; disks beyond the groups are left out, as `3xraidz2-9` of 28).
    pub fn vdev_tokens(&self, devices: &[String]) -> Vec<String> {
        let mut tokens = Vec::new();
        for group in devices.chunks(self.width).take(self.groups) {
            match self.kind {
                GroupKind::Stripe => {}
                GroupKind::Mirror => tokens.push("mirror".to_string()),
                GroupKind::Raidz(p) => tokens.push(format!("raidz{p}")),
            }
            tokens.extend(group.iter().cloned());
        }
        tokens
    }
}

/// Parses `--layout` for `disks` disks.
pub fn parse_layout(spec: &str, disks: usize) -> Result<LayoutSpec, LabError> {
    let err = |reason: String| LabError::Layout {
        spec: spec.to_string(),
        reason,
    };
    let s = spec.trim().to_ascii_lowercase();
    let (g, rest) = match s.split_once('x') {
        Some((g, r)) if g.chars().all(|c| c.is_ascii_digit()) && !g.is_empty() => (
            Some(
                g.parse::<usize>()
                    .map_err(|_| err("bad group count".into()))?,
            ),
            r,
        ),
        _ => (None, s.as_str()),
    };
    let (kind, w) = match rest.split_once('-') {
        Some((k, w)) => (
            k,
            Some(
                w.parse::<usize>()
                    .map_err(|_| err(format!("width {w:?} is not a number")))?,
            ),
        ),
        None => (rest, None),
    };
    let kind = match kind {
        "stripe" => GroupKind::Stripe,
        "mirror" => GroupKind::Mirror,
        "raidz" | "raidz1" => GroupKind::Raidz(1),
        "raidz2" => GroupKind::Raidz(2),
        "raidz3" => GroupKind::Raidz(3),
        k => return Err(err(format!("unknown kind {k:?}"))),
    };
    let (groups, width) = match (kind, g, w) {
        (GroupKind::Stripe, _, _) => (disks, 1),
        (_, Some(g), Some(w)) => (g, w),
        (_, Some(g), None) => (g, disks / g.max(1)),
        (_, None, Some(w)) => (disks / w.max(1), w),
        (_, None, None) => (1, disks),
    };
    let min = match kind {
        GroupKind::Stripe => 1,
        GroupKind::Mirror => 2,
        GroupKind::Raidz(p) => p + 2,
    };
    if width < min {
        let reason = format!("a group needs at least {min} disks, this one has {width}");
        return Err(err(reason));
    }
    if groups == 0 || groups * width > disks {
        let need = groups.max(1) * width;
        return Err(err(format!("{need} disks needed, --disks gives {disks}")));
    }
    Ok(LayoutSpec {
        groups,
        kind,
        width,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_of_the_module_comment() {
        let d = parse_disks("5x2TB,512e").unwrap_or_default();
        assert_eq!(d.len(), 5);
        assert!(
            matches!(&d[0], DiskModel::Hdd(p) if p.format == SectorFormat::E512 && p.capacity_bytes == 2_000_000_000_000)
        );
        assert!(matches!(
            &parse_disks("24x256GB,ssd").unwrap_or_default()[0],
            DiskModel::Ssd(_)
        ));
        assert!(
            matches!(&parse_disks("28x1TB,5400").unwrap_or_default()[0], DiskModel::Hdd(p) if p.rpm == 5400.0)
        );
        let l = |s: &str, n| parse_layout(s, n);
        assert_eq!(
            l("raidz2", 5),
            Ok(LayoutSpec {
                groups: 1,
                kind: GroupKind::Raidz(2),
                width: 5
            })
        );
        assert_eq!(
            l("2xraidz2-14", 28),
            Ok(LayoutSpec {
                groups: 2,
                kind: GroupKind::Raidz(2),
                width: 14
            })
        );
        assert_eq!(
            l("3xraidz2-9", 28),
            Ok(LayoutSpec {
                groups: 3,
                kind: GroupKind::Raidz(2),
                width: 9
            })
        );
        assert_eq!(
            l("14xmirror-2", 28),
            Ok(LayoutSpec {
                groups: 14,
                kind: GroupKind::Mirror,
                width: 2
            })
        );
        assert_eq!(
            l("stripe", 4),
            Ok(LayoutSpec {
                groups: 4,
                kind: GroupKind::Stripe,
                width: 1
            })
        );
        assert_eq!(parse_bytes("--bs", "1M"), Ok(1 << 20));
        assert_eq!(parse_bytes("--size", "10G"), Ok(10 << 30));
    }

    #[test]
    fn bad_specs_say_what_to_write() {
        for bad in [
            "",
            "x2TB",
            "5x",
            "0x1TB",
            "5x2XB",
            "5x2TB,513e",
            "5x2TB,99rpm",
            "5x100MB",
        ] {
            let e = parse_disks(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("write N x SIZE"), "{bad:?}: {e}");
        }
        let e = parse_layout("raidz2-9", 5)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("9 disks needed, --disks gives 5"), "{e}");
        for bad in ["raidz4", "4xraidz2-9", "raidz2-2", "mirror-x", "3xmirror-1"] {
            let e = parse_layout(bad, 28)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("write [G x]KIND[-W]"), "{bad:?}: {e}");
        }
        assert!(parse_bytes("--bs", "1Q").is_err());
        assert!(parse_bytes("--bs", "0").is_err());
    }
}

#[cfg(test)]
mod vdev_token_tests {
    use super::*;

    #[test]
    fn layouts_spell_themselves_in_the_create_grammar() {
        let devs: Vec<String> = (0..9).map(|i| format!("d{i}")).collect();
        let l = parse_layout("2xraidz2-4", 9).unwrap();
        assert_eq!(
            l.vdev_tokens(&devs).join(" "),
            "raidz2 d0 d1 d2 d3 raidz2 d4 d5 d6 d7"
        );
        let l = parse_layout("mirror", 2).unwrap();
        assert_eq!(l.vdev_tokens(&devs[..2]).join(" "), "mirror d0 d1");
        let l = parse_layout("stripe", 3).unwrap();
        assert_eq!(l.vdev_tokens(&devs[..3]).join(" "), "d0 d1 d2");
    }
}
