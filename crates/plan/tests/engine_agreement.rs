//! `cairn plan`, `cairn create -n` and a real `cairn create` + `list` print the same
//! capacity, to the byte: all three go through `cairn_geometry::pool_space`.

use cairn_geometry::ZfsEra;
use cairn_plan::disks::{generic_disk, DiskKind};
use cairn_plan::enumerate::{parse_layout, Layout};
use cairn_plan::evaluate::{layout_space, PlanContext};
use cairn_pool::{CreateOptions, Home, Pool};

/// An odd size, not a multiple of 256 KiB, so label alignment matters.
const DISK_BYTES: u64 = 1_000_194_703;

fn plan_context(disks: usize) -> PlanContext {
    PlanContext {
        disks: vec![generic_disk(DiskKind::Hdd, DISK_BYTES, "file"); disks],
        ashift: 12,
        recordsize: 128 << 10,
        era: ZfsEra::Cairn,
        years: 5.0,
        rebuild_mbs: 100.0,
        replace_hours: 24.0,
        fill: 1.0,
    }
}

/// `raidz2 d0..d5` → `["raidz2", "<dir>/d0", …]`, creating sparse files for the disks.
fn vdev_tokens(layout: &Layout, dir: &std::path::Path) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut disk = 0;
    for _ in 0..layout.groups {
        if layout.width > 1 || layout.kind != cairn_plan::enumerate::LayoutKind::Stripe {
            tokens.push(layout.kind.name().to_string());
        }
        for _ in 0..layout.width {
            let path = dir.join(format!("d{disk}"));
            std::fs::File::create(&path)
                .unwrap()
                .set_len(DISK_BYTES)
                .unwrap();
            tokens.push(path.display().to_string());
            disk += 1;
        }
    }
    tokens
}

#[test]
fn plan_create_dry_run_create_and_list_agree() {
    for (index, text) in [
        "raidz2 d0..d5",
        "mirror d0 d1 mirror d2 d3",
        "d0..d2",
        "raidz1 d0..d2 raidz1 d3..d5",
        "raidz3 d0..d6",
    ]
    .iter()
    .enumerate()
    {
        let layout = parse_layout(text).unwrap();
        let planned = layout_space(&layout, &plan_context(layout.total_disks()));

        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("home"));
        let tokens = vdev_tokens(&layout, dir.path());
        let name = format!("agree{index}");
        let options = CreateOptions {
            ashift: Some(12),
            ..CreateOptions::default()
        };

        let dry = Pool::create(
            &home,
            &name,
            &tokens,
            CreateOptions {
                dry_run: true,
                ..options.clone()
            },
        )
        .unwrap();
        assert_eq!(dry.space, planned, "create -n vs plan for {text}");

        let created = Pool::create(&home, &name, &tokens, options).unwrap();
        assert_eq!(created.space, planned, "create vs plan for {text}");
        let pool = created.pool.expect("a real create returns the pool");
        assert_eq!(pool.space(), planned, "list vs plan for {text}");
        pool.export().unwrap();
    }
}
