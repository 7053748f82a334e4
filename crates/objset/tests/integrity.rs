//! Integrity: bit rot repaired within redundancy (reads and scrub), clear errors beyond it,
//! and crash consistency with a device that stops persisting after write N.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Duration;

use cairn_geometry::{raidz_map, VdevShape, LEAF_DATA_START, LEAF_END_RESERVE};
use cairn_objset::scrub::{ScrubControl, ScrubEnd};
use cairn_objset::Store;
use cairn_vdev::PowerCut;
use common::*;
use rand::{Rng, RngCore, SeedableRng};

const MIB: u64 = 1 << 20;

fn write_files(
    store: &Store,
    rng: &mut impl Rng,
    n: usize,
    max: usize,
) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for i in 0..n {
        let path = format!("tank/d{}/f{i}", i % 3);
        let mut data = vec![0u8; rng.gen_range(1..=max)];
        rng.fill_bytes(&mut data);
        store.create_file(&path, true).unwrap();
        let r = store.resolve(&path).unwrap();
        store.write(&r, 0, &data).unwrap();
        files.insert(path, data);
    }
    store.sync().unwrap();
    files
}

fn check_files(store: &Store, files: &BTreeMap<String, Vec<u8>>) {
    for (path, data) in files {
        let r = store
            .resolve(path)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut buf = vec![0u8; data.len() + 1];
        let n = store
            .read(&r, 0, &mut buf)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(n, data.len(), "{path}");
        assert!(buf[..n] == data[..], "{path} differs");
    }
}

/// Overwrites `count` random 4 KiB sectors of the data area of a leaf file with garbage.
fn rot(path: &PathBuf, rng: &mut impl Rng, count: usize) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let size = f.metadata().unwrap().len();
    let data_end = (size / (256 << 10)) * (256 << 10) - LEAF_END_RESERVE;
    // Data written so far sits near the start of the data area: aim there.
    let span = (data_end - LEAF_DATA_START).min(48 * MIB) / 4096;
    let mut junk = vec![0u8; 4096];
    for _ in 0..count {
        rng.fill_bytes(&mut junk);
        let sector = rng.gen_range(0..span);
        f.write_all_at(&junk, LEAF_DATA_START + sector * 4096)
            .unwrap();
    }
}

fn cksum_errors(store: &Store) -> Vec<u64> {
    store
        .pool()
        .tops()
        .iter()
        .flat_map(|t| t.children.iter())
        .map(|c| c.stats.snapshot().2)
        .collect()
}

fn scrub_all(store: &Store) -> cairn_objset::scrub::ScrubProgress {
    let (p, end) = store
        .scrub(None, Duration::from_secs(3600), &mut |_| {
            ScrubControl::Continue
        })
        .unwrap();
    assert_eq!(end, ScrubEnd::Finished);
    p
}

fn bit_rot_case(kind: &str, n: usize, damaged: &[usize]) {
    let dir = tempfile::tempdir().unwrap();
    let (home, files_on_disk) = new_pool(dir.path(), kind, n, 96 * MIB);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let files = {
        let store = open_store(&home);
        let f = write_files(&store, &mut rng, 24, 700_000);
        store.close().unwrap();
        f
    };
    for &d in damaged {
        rot(&files_on_disk[d], &mut rng, 3000);
    }
    let store = open_store(&home);
    check_files(&store, &files);
    let errs = cksum_errors(&store);
    for (i, e) in errs.iter().enumerate() {
        if damaged.contains(&i) {
            assert!(
                *e > 0,
                "{kind}: no CKSUM errors counted on damaged leaf {i}: {errs:?}"
            );
        } else {
            assert_eq!(*e, 0, "{kind}: CKSUM errors on healthy leaf {i}: {errs:?}");
        }
    }
    let first = scrub_all(&store);
    assert_eq!(first.errors, 0, "{kind}: {first:?}");
    assert!(
        first.repaired_bytes > 0,
        "{kind}: scrub repaired nothing: {first:?}"
    );
    let second = scrub_all(&store);
    assert_eq!(
        (second.errors, second.repaired_bytes),
        (0, 0),
        "{kind}: second scrub: {second:?}"
    );
    check_files(&store, &files);
    drop(store);
    // The repairs are on disk: a fresh open reads everything without new errors.
    let store = open_store(&home);
    check_files(&store, &files);
    assert!(
        cksum_errors(&store).iter().all(|&e| e == 0),
        "{kind}: errors after repair"
    );
}

#[test]
fn bit_rot_on_two_raidz2_leaves_is_repaired() {
    bit_rot_case("raidz2", 6, &[1, 4]);
}

#[test]
fn bit_rot_on_all_but_one_mirror_side_is_repaired() {
    bit_rot_case("mirror", 3, &[0, 2]);
}

#[test]
fn bit_rot_on_one_raidz1_leaf_is_repaired() {
    bit_rot_case("raidz1", 4, &[3]);
}

#[test]
fn damage_beyond_redundancy_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (home, leaves) = new_pool(dir.path(), "raidz1", 3, 96 * MIB);
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let store = open_store(&home);
    let files = write_files(&store, &mut rng, 6, 400_000);
    let victim = "tank/d1/f1";
    let r = store.resolve(victim).unwrap();
    let blocks = store.object_blocks(r.object).unwrap();
    let (_, bp) = blocks[0];
    let top = &store.pool().tops()[bp.dvas[0].vdev as usize];
    let VdevShape::Raidz { width, parity } = top.shape() else {
        panic!()
    };
    let map = raidz_map(
        bp.dvas[0].offset,
        u64::from(bp.psize),
        width,
        parity,
        top.ashift(),
    );
    drop(store);
    // Destroy two columns of the block (one more than raidz1 can rebuild), keeping what
    // they held.
    let mut kept = Vec::new();
    for col in &map.columns[..2] {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&leaves[col.child])
            .unwrap();
        let mut old = vec![0u8; col.size as usize];
        f.read_exact_at(&mut old, LEAF_DATA_START + col.offset)
            .unwrap();
        kept.push((col.child, col.offset, old));
        f.write_all_at(
            &vec![0xA5u8; col.size as usize],
            LEAF_DATA_START + col.offset,
        )
        .unwrap();
    }
    let store = open_store(&home);
    let r = store.resolve(victim).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let err = store.read(&r, 0, &mut buf).unwrap_err();
    assert!(err.is_data_loss(), "{err}");
    let damaged = store.damaged();
    assert_eq!(damaged.len(), 1);
    assert_eq!(
        store.path_of(&damaged[0].0, damaged[0].1).as_deref(),
        Some(victim)
    );
    // Everything else still reads.
    let others: BTreeMap<String, Vec<u8>> =
        files.into_iter().filter(|(p, _)| p != victim).collect();
    check_files(&store, &others);
    let p = scrub_all(&store);
    assert!(p.errors >= 1, "{p:?}");

    // The error log is kept in the pool: it survives an export and is read without
    // opening the store.
    let pool = store.close().unwrap();
    let log = cairn_objset::read_error_log(&pool).unwrap();
    assert_eq!(log.entries, vec![victim.to_string()]);
    drop(pool);
    let store = open_store(&home);
    assert_eq!(store.error_log().entries, vec![victim.to_string()]);
    // A scrub that still finds the damage keeps the entry.
    scrub_all(&store);
    assert_eq!(store.error_log().entries, vec![victim.to_string()]);
    drop(store.close().unwrap());

    // Once the data is whole again, a completed scrub drops the entry for good.
    for (child, offset, old) in &kept {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&leaves[*child])
            .unwrap();
        f.write_all_at(old, LEAF_DATA_START + offset).unwrap();
    }
    let store = open_store(&home);
    let p = scrub_all(&store);
    assert_eq!(p.errors, 0, "{p:?}");
    assert!(store.error_log().is_empty());
    let pool = store.close().unwrap();
    assert!(cairn_objset::read_error_log(&pool).unwrap().is_empty());
}

/// Runs a workload over a pool whose leaves stop persisting at write `limit`, then reopens
/// the pool normally and checks it holds exactly one of the synced states, no older than
/// the last sync that finished before the cut.
fn crash_at(limit: u64, tear: bool, seed: u64, background_batch: u64) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    drop(open_store(&home)); // an empty store, synced
    let power = PowerCut::new(limit, tear);
    let pool = open_with_power_cut(&home, &power);
    let config = cairn_objset::StoreConfig {
        background_batch,
        ..Default::default()
    };
    let store = Store::open_with(pool, config).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    // txg → (model, writes issued when that sync returned)
    let mut snapshots: BTreeMap<u64, (BTreeMap<String, Vec<u8>>, u64)> = BTreeMap::new();
    snapshots.insert(store.open_txg() - 1, (model.clone(), 0));
    // After the cut the process is as good as dead: the first error ends the workload.
    let mut run = || -> Result<(), cairn_objset::StoreError> {
        for _ in 0..12 {
            for _ in 0..3 {
                let path = format!("tank/f{}", rng.gen_range(0..5));
                // With the background writer on, files span several whole 128 KiB blocks
                // (the only ones it takes).
                let max_len = if background_batch < (1 << 20) {
                    600_000
                } else {
                    200_000
                };
                let len = rng.gen_range(1..max_len);
                let mut data = vec![0u8; len];
                rng.fill_bytes(&mut data);
                if rng.gen_bool(0.2) && model.contains_key(&path) {
                    store.remove(&path, false)?;
                    model.remove(&path);
                } else {
                    store.create_file(&path, true)?;
                    let r = store.resolve(&path)?;
                    store.write(&r, 0, &data)?;
                    model.insert(path, data);
                }
            }
            let txg = store.sync()?;
            snapshots.insert(
                txg,
                (
                    model.clone(),
                    power.writes.load(std::sync::atomic::Ordering::SeqCst),
                ),
            );
        }
        Ok(())
    };
    let outcome = run();
    if limit == u64::MAX {
        outcome.unwrap();
        if background_batch < (1 << 20) {
            assert!(
                store.background_blocks_landed() > 0,
                "the background writer never wrote a block"
            );
        }
    }
    let total = power.writes.load(std::sync::atomic::Ordering::SeqCst);
    drop(store);
    // "Reboot": open the files as they are on disk.
    let store = open_store(&home);
    let opened = store.open_txg() - 1;
    let required = snapshots
        .iter()
        .filter(|(_, (_, w))| *w <= limit)
        .map(|(t, _)| *t)
        .max()
        .unwrap();
    assert!(
        opened >= required,
        "limit {limit}: opened txg {opened}, but txg {required} was durable"
    );
    let (expect, _) = snapshots
        .get(&opened)
        .unwrap_or_else(|| panic!("limit {limit}: opened txg {opened} is no synced state"));
    check_files(&store, expect);
    let names: Vec<String> = store
        .list("tank")
        .unwrap()
        .into_iter()
        .map(|e| format!("tank/{}", e.name))
        .collect();
    assert_eq!(
        names,
        expect.keys().cloned().collect::<Vec<_>>(),
        "limit {limit}: stray files"
    );
    let p = scrub_all(&store);
    assert_eq!(p.errors, 0, "limit {limit}: scrub after crash: {p:?}");
    (total, opened)
}

#[test]
fn crash_at_every_point_of_a_workload_keeps_synced_data() {
    sweep_crashes(32 << 20);
}

/// The same with the background writer taking 64 KiB batches: cuts also land in blocks it
/// wrote early, before the txg that would have linked them committed.
#[test]
fn crash_while_the_background_writer_writes_keeps_synced_data() {
    sweep_crashes(64 << 10);
}

fn sweep_crashes(background_batch: u64) {
    let (total, _) = crash_at(u64::MAX, false, 1, background_batch);
    assert!(total > 50);
    // Sweep the cut over the whole workload (about 40 points), half of them tearing a write.
    let step = (total / 40).max(1);
    let mut limit = 0;
    let mut i = 0;
    while limit < total {
        crash_at(limit, i % 2 == 1, 1, background_batch);
        limit += step;
        i += 1;
    }
}
