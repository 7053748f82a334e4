//! The planner against published figures (tests/data, sources in each file's comments).

use cairn_geometry::ZfsEra;
use cairn_plan::disks::{model, Disk};
use cairn_plan::enumerate::{enumerate_layouts, parse_layout, Layout};
use cairn_plan::evaluate::{layout_space, PlanContext};

const CALOMEL_HDD: &str = include_str!("data/hdd_24x4tb_layouts.csv");

fn context(disks: usize, disk: Disk, era: ZfsEra, ashift: u32) -> PlanContext {
    PlanContext {
        disks: vec![disk; disks],
        ashift,
        recordsize: 128 << 10,
        era,
        years: 5.0,
        rebuild_mbs: 100.0,
        replace_hours: 24.0,
        fill: 1.0,
    }
}

/// Splits a CSV line, honouring double quotes.
fn fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(String::new()),
            _ => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

/// The article's capacity unit: bytes / (1024 · 10^9), truncated to one decimal.
fn article_units(bytes: u64) -> f64 {
    (bytes as f64 / 1.024e12 * 10.0 + 1e-9).floor() / 10.0
}

#[test]
fn calomel_capacities_with_freebsd_10_rules() {
    // WD4001FYYG: 7,814,037,168 sectors of 512 B; ashift 9; ZoL 0.6.5–0.7 / FreeBSD 10 rules.
    let disk = model("WD4001FYYG").unwrap();
    assert_eq!(disk.bytes, 7_814_037_168 * 512);
    let mut rows = 0;
    let mut mismatches = Vec::new();
    for line in CALOMEL_HDD.lines().filter(|l| !l.starts_with('#')).skip(1) {
        let f = fields(line);
        let disks: usize = f[0].parse().unwrap();
        let layout = parse_layout(&f[1]).unwrap();
        assert_eq!(layout.total_disks(), disks, "{line}");
        let expected: f64 = f[2].parse().unwrap();
        let space = layout_space(&layout, &context(disks, disk.clone(), ZfsEra::V0_7, 9));
        let got = article_units(space.avail);
        if (got - expected).abs() > 1e-9 {
            mismatches.push(format!(
                "{}: expected {expected}, got {got} ({} B)",
                f[1], space.avail
            ));
        }
        rows += 1;
    }
    assert_eq!(rows, 26);
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}

fn has(layouts: &[Layout], wanted: Layout) -> bool {
    layouts.contains(&wanted)
}

#[test]
fn enumerator_lists_the_24_disk_layouts_of_the_article() {
    let layouts = enumerate_layouts(24);
    for (text, spares) in [
        ("mirror x12 (pairs)", 0),
        ("raidz1 d0..d23", 0),
        ("raidz2 d0..d23", 0),
        ("raidz3 d0..d23", 0),
        ("d0..d23", 0),
        ("raidz3 d0..d22", 1),
        ("raidz3 d0..d10 raidz3 d11..d21", 2),
        (
            "raidz2 d0..d5 raidz2 d6..d11 raidz2 d12..d17 raidz2 d18..d23",
            0,
        ),
    ] {
        let layout = parse_layout(text).unwrap().with_spares(spares);
        assert!(has(&layouts, layout), "{text} missing");
    }
}

#[test]
fn enumerator_lists_the_28_disk_layouts() {
    let layouts = enumerate_layouts(28);
    for parity in 1..=3 {
        for (groups, width, spares) in [(1, 28, 0), (2, 14, 0), (4, 7, 0), (3, 9, 1)] {
            let layout = Layout::raidz(parity, groups, width).with_spares(spares);
            assert!(has(&layouts, layout), "{}", layout.label());
        }
    }
    assert!(has(&layouts, Layout::mirror(14, 2)));
    assert!(has(&layouts, Layout::stripe(28)));
}

#[test]
fn cairn_rules_match_zfs_2_1_except_the_embedded_log() {
    // Same metaslabs; 2.1 moves one metaslab per large vdev to the embedded log class.
    let disk = model("WD4001FYYG").unwrap();
    let layout = Layout::raidz(2, 1, 24);
    let cairn = layout_space(&layout, &context(24, disk.clone(), ZfsEra::Cairn, 12));
    let v21 = layout_space(&layout, &context(24, disk, ZfsEra::V2_1, 12));
    assert_eq!(cairn.size, v21.size);
    assert!(v21.dspace < cairn.dspace);
}
