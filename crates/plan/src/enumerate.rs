//! The layouts worth considering for a set of disks, and parsing of zpool-grammar layouts.

use cairn_geometry::VdevShape;

/// Kind of top-level vdev, as the JSON `kind` field names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LayoutKind {
    Stripe,
    Mirror,
    Raidz1,
    Raidz2,
    Raidz3,
}

impl LayoutKind {
    pub fn name(self) -> &'static str {
        match self {
            LayoutKind::Stripe => "stripe",
            LayoutKind::Mirror => "mirror",
            LayoutKind::Raidz1 => "raidz1",
            LayoutKind::Raidz2 => "raidz2",
            LayoutKind::Raidz3 => "raidz3",
        }
    }

    fn raidz(parity: usize) -> Self {
        match parity {
            1 => LayoutKind::Raidz1,
            2 => LayoutKind::Raidz2,
            _ => LayoutKind::Raidz3,
        }
    }
}

/// A pool layout: `groups` top-level vdevs of `width` disks each, plus hot spares.
/// A stripe is `groups` single-disk vdevs (width 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Layout {
    pub kind: LayoutKind,
    pub groups: usize,
    pub width: usize,
    pub spares: usize,
}

impl Layout {
    pub fn stripe(disks: usize) -> Self {
        Layout {
            kind: LayoutKind::Stripe,
            groups: disks,
            width: 1,
            spares: 0,
        }
    }

    pub fn mirror(groups: usize, width: usize) -> Self {
        Layout {
            kind: LayoutKind::Mirror,
            groups,
            width,
            spares: 0,
        }
    }

    pub fn raidz(parity: usize, groups: usize, width: usize) -> Self {
        Layout {
            kind: LayoutKind::raidz(parity),
            groups,
            width,
            spares: 0,
        }
    }

    pub fn with_spares(self, spares: usize) -> Self {
        Layout { spares, ..self }
    }

    /// Disks in vdevs (spares excluded).
    pub fn disks_used(&self) -> usize {
        self.groups * self.width
    }

    pub fn total_disks(&self) -> usize {
        self.disks_used() + self.spares
    }

    /// Shape of each top-level vdev.
    pub fn shape(&self) -> VdevShape {
        match self.kind {
            LayoutKind::Stripe => VdevShape::Disk,
            LayoutKind::Mirror => VdevShape::Mirror {
                children: self.width,
            },
            LayoutKind::Raidz1 => VdevShape::Raidz {
                width: self.width,
                parity: 1,
            },
            LayoutKind::Raidz2 => VdevShape::Raidz {
                width: self.width,
                parity: 2,
            },
            LayoutKind::Raidz3 => VdevShape::Raidz {
                width: self.width,
                parity: 3,
            },
        }
    }

    /// Short human name: `stripe of 24`, `12 × mirror of 2`, `2 × raidz3 of 11 + 2 spares`.
    pub fn label(&self) -> String {
        let base = match (self.kind, self.groups) {
            (LayoutKind::Stripe, n) => format!("stripe of {n}"),
            (kind, 1) => format!("{} of {}", kind.name(), self.width),
            (kind, groups) => format!("{groups} × {} of {}", kind.name(), self.width),
        };
        match self.spares {
            0 => base,
            1 => format!("{base} + 1 spare"),
            n => format!("{base} + {n} spares"),
        }
    }

    /// The vdev part of `zpool create` over disks d0..dN−1, with ranges: `raidz2 d0..d5 raidz2
    /// d6..d11 spare d12`.
    pub fn zpool_grammar(&self) -> String {
        let range = |first: usize, count: usize| match count {
            1 => format!("d{first}"),
            2 => format!("d{first} d{}", first + 1),
            _ => format!("d{first}..d{}", first + count - 1),
        };
        let mut parts = Vec::new();
        if self.kind == LayoutKind::Stripe {
            parts.push(range(0, self.groups));
        } else {
            for group in 0..self.groups {
                parts.push(format!(
                    "{} {}",
                    self.kind.name(),
                    range(group * self.width, self.width)
                ));
            }
        }
        if self.spares > 0 {
            parts.push(format!("spare {}", range(self.disks_used(), self.spares)));
        }
        parts.join(" ")
    }
}

/// Most hot spares an "N−k disks" variant may leave over.
pub const MAX_LEFTOVER_SPARES: usize = 2;

/// The layouts worth considering for `disks` identical-slot disks, in a stable order:
/// stripe; 2- and 3-way mirrors (left-over disks become spares); raidz1/2/3 with every group
/// count that divides the disks (width ≥ parity + 2), plus "use N−k disks" variants whose
/// k ≤ 2 left-over disks become hot spares (e.g. 3 × raidz of 9 + 1 spare from 28 disks).
pub fn enumerate_layouts(disks: usize) -> Vec<Layout> {
    let mut layouts = Vec::new();
    if disks == 0 {
        return layouts;
    }
    layouts.push(Layout::stripe(disks));
    for width in [2, 3] {
        if disks >= width {
            layouts.push(Layout::mirror(disks / width, width).with_spares(disks % width));
        }
    }
    for parity in 1..=3 {
        for width in (parity + 2..=disks).rev() {
            let groups = disks / width;
            let spares = disks % width;
            if spares <= MAX_LEFTOVER_SPARES {
                layouts.push(Layout::raidz(parity, groups, width).with_spares(spares));
            }
        }
    }
    layouts
}

/// Error parsing a layout in zpool grammar.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutParseError {
    #[error("layout {0:?}: unknown word {1:?} (use mirror, raidz1..3, spare, dN, dA..dB or xN)")]
    UnknownWord(String, String),
    #[error("layout {0:?}: the vdevs must all have the same kind and width")]
    Mixed(String),
    #[error("layout {0:?} has no disks")]
    Empty(String),
}

/// Parses a zpool-grammar layout as the published tables write them: `d0..d23` (stripe),
/// `mirror d0 d1 mirror d2 d3`, `mirror x6 (pairs)`, `raidz1 d0..d4 raidz1 d5..d9`,
/// `raidz2 d0..d5 spare d6`. Every vdev must have the same kind and width.
pub fn parse_layout(text: &str) -> Result<Layout, LayoutParseError> {
    // Each vdev: (kind, width). Stripe disks are (Stripe, 1) each.
    let mut vdevs: Vec<(LayoutKind, usize)> = Vec::new();
    let mut spares = 0;
    let mut current: Option<LayoutKind> = None; // vdev being filled, None = stripe disks
    let mut in_spares = false;
    let unknown = |word: &str| LayoutParseError::UnknownWord(text.to_string(), word.to_string());
    for word in text.split_whitespace() {
        let keyword = match word {
            "mirror" => Some(LayoutKind::Mirror),
            "raidz" | "raidz1" => Some(LayoutKind::Raidz1),
            "raidz2" => Some(LayoutKind::Raidz2),
            "raidz3" => Some(LayoutKind::Raidz3),
            _ => None,
        };
        if let Some(kind) = keyword {
            current = Some(kind);
            in_spares = false;
            vdevs.push((kind, 0));
        } else if word == "spare" {
            in_spares = true;
        } else if word == "(pairs)" {
            for vdev in vdevs.iter_mut().filter(|v| v.1 == 0) {
                vdev.1 = 2;
            }
        } else if let Some(repeat) = word.strip_prefix('x').and_then(|n| n.parse::<usize>().ok()) {
            let last = *vdevs.last().ok_or_else(|| unknown(word))?;
            vdevs.extend(std::iter::repeat_n(last, repeat.saturating_sub(1)));
        } else {
            let count = disk_count(word).ok_or_else(|| unknown(word))?;
            match (in_spares, current) {
                (true, _) => spares += count,
                (false, Some(_)) => {
                    vdevs.last_mut().expect("a keyword opened this vdev").1 += count
                }
                (false, None) => vdevs.extend(std::iter::repeat_n((LayoutKind::Stripe, 1), count)),
            }
        }
    }
    let (kind, width) = *vdevs
        .first()
        .ok_or_else(|| LayoutParseError::Empty(text.to_string()))?;
    if width == 0 {
        return Err(LayoutParseError::Empty(text.to_string()));
    }
    if vdevs.iter().any(|&v| v != (kind, width)) {
        return Err(LayoutParseError::Mixed(text.to_string()));
    }
    Ok(Layout {
        kind,
        groups: vdevs.len(),
        width,
        spares,
    })
}

/// Disks named by one word: `d7` → 1, `d0..d4` → 5.
fn disk_count(word: &str) -> Option<usize> {
    let index = |name: &str| name.strip_prefix('d')?.parse::<usize>().ok();
    match word.split_once("..") {
        Some((first, last)) => {
            let (first, last) = (index(first)?, index(last)?);
            (last >= first).then(|| last - first + 1)
        }
        None => index(word).map(|_| 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_published_grammar() {
        assert_eq!(parse_layout("d0..d23").unwrap(), Layout::stripe(24));
        assert_eq!(parse_layout("d0 d1").unwrap(), Layout::stripe(2));
        assert_eq!(
            parse_layout("mirror d0 d1 d2").unwrap(),
            Layout::mirror(1, 3)
        );
        assert_eq!(
            parse_layout("mirror d0 d1 mirror d2 d3").unwrap(),
            Layout::mirror(2, 2)
        );
        assert_eq!(
            parse_layout("mirror x6 (pairs)").unwrap(),
            Layout::mirror(6, 2)
        );
        assert_eq!(
            parse_layout("raidz1 d0..d4 raidz1 d5..d9").unwrap(),
            Layout::raidz(1, 2, 5)
        );
        assert_eq!(
            parse_layout("raidz3 d0..d22").unwrap(),
            Layout::raidz(3, 1, 23)
        );
        assert_eq!(
            parse_layout("raidz2 d0..d5 spare d6 d7").unwrap(),
            Layout::raidz(2, 1, 6).with_spares(2)
        );
        assert!(parse_layout("raidz2 d0..d5 mirror d6 d7").is_err());
        assert!(parse_layout("mirror").is_err());
        assert!(parse_layout("draid d0..d9").is_err());
    }

    #[test]
    fn grammar_round_trips() {
        for layout in enumerate_layouts(28) {
            assert_eq!(
                parse_layout(&layout.zpool_grammar()).unwrap(),
                layout,
                "{}",
                layout.label()
            );
        }
    }

    #[test]
    fn every_layout_uses_the_disks_given() {
        for disks in 1..=40 {
            for layout in enumerate_layouts(disks) {
                assert_eq!(layout.total_disks(), disks, "{}", layout.label());
                assert!(layout.shape().validate().is_ok());
                assert!(layout.spares <= MAX_LEFTOVER_SPARES);
            }
        }
    }
}
