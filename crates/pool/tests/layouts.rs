//! Every seed layout over sparse files: write blocks, lose up to the layout's redundancy in
//! three different ways (deleted file, truncated file, a device returning errors), read
//! every byte back; one failure more gives an error, never wrong data.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use cairn_geometry::VdevShape;
use cairn_pool::{CreateOptions, Home, LeafSlot, Pool};
use cairn_vdev::{FaultLeaf, Leaf};
use common::*;
use rand::seq::SliceRandom;
use rand::SeedableRng;

const LEAF_SIZE: u64 = 64 << 20;

/// How a leaf is made to fail.
#[derive(Clone, Copy, Debug)]
enum FailBy {
    Delete,
    Truncate,
    Errors,
}

/// Builds the layout, writes, fails leaves within redundancy, verifies, then goes one past.
fn exercise(case: usize, layout: &str, disks: usize, ashift: u32) {
    let dir = tempfile::tempdir().unwrap();
    let files = make_files(dir.path(), disks, LEAF_SIZE);
    let tokens = layout_tokens(layout, &files);
    let home = Home::at(dir.path().join("home"));
    let opts = CreateOptions {
        ashift: Some(ashift),
        // Every side must be read for the failure checks below; `auto` keeps a
        // sequential reader on one side.
        props: cairn_vdev::PoolProps {
            readpolicy: cairn_vdev::readpolicy::Policy::RoundRobin,
            ..cairn_vdev::PoolProps::default()
        },
        ..CreateOptions::default()
    };
    let pool = Pool::create(&home, "tank", &tokens, opts)
        .unwrap_or_else(|e| panic!("{layout}: {e}"))
        .pool
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(case as u64);
    let written = write_random_blocks(&pool, &mut rng, 48.max(2 * pool.tops().len()));
    assert!(written.len() >= 24, "{layout}: too few blocks written");
    assert_eq!(
        verify_all(&pool, &written),
        0,
        "{layout}: healthy reads need no rebuild"
    );

    // Choose, per top-level vdev, `redundancy` leaves to fail.
    let victims: Vec<Vec<usize>> = pool
        .tops()
        .iter()
        .map(|t| {
            let mut idx: Vec<usize> = (0..t.children.len()).collect();
            idx.shuffle(&mut rng);
            idx.truncate(t.shape().redundancy());
            idx
        })
        .collect();
    let fail_by = [FailBy::Delete, FailBy::Truncate, FailBy::Errors][case % 3];
    let mut pool = match fail_by {
        FailBy::Delete | FailBy::Truncate => {
            let paths: Vec<String> = victims
                .iter()
                .enumerate()
                .flat_map(|(t, v)| v.iter().map(move |&c| (t, c)))
                .map(|(t, c)| pool.tops()[t].children[c].path.clone())
                .collect();
            drop(pool);
            for p in &paths {
                match fail_by {
                    FailBy::Delete => std::fs::remove_file(p).unwrap(),
                    _ => std::fs::OpenOptions::new()
                        .write(true)
                        .open(p)
                        .unwrap()
                        .set_len(1 << 20)
                        .unwrap(),
                }
            }
            Pool::open(&home, "tank").unwrap_or_else(|e| panic!("{layout}: reopen: {e}"))
        }
        FailBy::Errors => {
            let mut pool = pool;
            for (t, v) in victims.iter().enumerate() {
                for &c in v {
                    inject(&mut pool, t, c)
                        .fail_reads
                        .store(true, Ordering::Relaxed);
                }
            }
            pool
        }
    };
    let failed: usize = victims.iter().map(Vec::len).sum();
    let erroring = matches!(fail_by, FailBy::Errors);
    if failed > 0 && !erroring {
        assert_eq!(
            pool.health().to_string(),
            "DEGRADED",
            "{layout} ({fail_by:?})"
        );
    }
    let rebuilt = verify_all(&pool, &written);
    if failed > 0 {
        assert!(rebuilt > 0, "{layout}: expected reconstruction");
    }
    if erroring {
        // Devices that return errors stay ONLINE but count READ errors, like zpool status.
        for (t, v) in victims.iter().enumerate() {
            for &c in v {
                let (reads, _, _) = pool.tops()[t].children[c].stats.snapshot();
                assert!(
                    reads > 0,
                    "{layout}: READ errors not counted on the failing leaf"
                );
            }
        }
    }

    // One more failure in vdev 0: reads must error, never return wrong data.
    let extra = (0..pool.tops()[0].children.len())
        .find(|c| pool.tops()[0].children[*c].leaf.is_some() && !victims[0].contains(c))
        .expect("a leaf left to fail");
    let sw = inject(&mut pool, 0, extra);
    sw.vanished.store(true, Ordering::Relaxed);
    let mut errors = 0;
    for w in written.iter().filter(|w| w.vdev == 0) {
        let mut buf = vec![0u8; w.data.len()];
        match pool.read_block(0, w.offset, &mut buf, None) {
            Ok(_) => assert!(
                buf == w.data,
                "{layout}: wrong data returned after too many failures"
            ),
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains("failed"), "{layout}: unclear error: {msg}");
                errors += 1;
            }
        }
    }
    assert!(
        errors > 0,
        "{layout}: one failure past redundancy must make some block unreadable"
    );
    // Devices that merely return errors stay ONLINE (until the fault-management issue
    // faults them after a bounded number); deleted, truncated or vanished ones do not.
    let whole_vdev_gone = matches!(
        pool.tops()[0].shape(),
        VdevShape::Mirror { .. } | VdevShape::Disk
    );
    if whole_vdev_gone && !erroring {
        assert_eq!(pool.health().to_string(), "UNAVAIL", "{layout}");
    }
}

/// Wraps leaf `c` of top `t` in a fault injector and returns its switches.
fn inject(pool: &mut Pool, t: usize, c: usize) -> Arc<cairn_vdev::FaultSwitches> {
    let mut switches = None;
    let open = pool.wrap_leaf(LeafSlot { top: t, child: c }, |inner: Arc<dyn Leaf>| {
        let fault = FaultLeaf::new(inner);
        switches = Some(fault.switches.clone());
        Arc::new(fault)
    });
    assert!(open, "leaf is open");
    switches.expect("wrapped")
}

fn seed_layouts() -> Vec<(usize, String)> {
    let text = include_str!("data/hdd_24x4tb_layouts.csv");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("disks"))
        .map(|l| {
            let (disks, rest) = l.split_once(',').unwrap();
            let layout = rest.split('"').nth(1).unwrap().to_string();
            (disks.parse().unwrap(), layout)
        })
        .collect()
}

#[test]
fn every_24_disk_seed_layout_survives_its_redundancy() {
    let layouts = seed_layouts();
    assert_eq!(layouts.len(), 26);
    for (i, (disks, layout)) in layouts.iter().enumerate() {
        let ashift = if i % 2 == 0 { 9 } else { 12 };
        exercise(i, layout, *disks, ashift);
    }
}

#[test]
fn every_28_disk_shape_survives_its_redundancy() {
    let mut layouts = Vec::new();
    for p in 1..=3 {
        for (groups, width) in [(1, 28), (2, 14), (4, 7), (3, 9)] {
            let mut s = String::new();
            for g in 0..groups {
                s += &format!("raidz{p} d{}..d{} ", g * width, g * width + width - 1);
            }
            layouts.push(s.trim().to_string());
        }
    }
    layouts.push("mirror x14 (pairs)".into());
    for (i, layout) in layouts.iter().enumerate() {
        exercise(100 + i, layout, 28, if i % 2 == 0 { 12 } else { 9 });
    }
}
