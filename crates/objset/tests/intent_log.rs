//! The intent log: what a log commit acknowledges survives a crash (a dropped store, and a
//! power cut at every point of a workload, tearing writes), without a txg sync; `sync` and
//! `logbias` behave as in ZFS.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use cairn_objset::scrub::{ScrubControl, ScrubEnd};
use cairn_objset::{DatasetKind, Resolved, Store, StoreConfig};
use cairn_pool::Pool;
use cairn_vdev::{CrashLeaf, Leaf, PowerCut};
use common::*;
use rand::{Rng, RngCore, SeedableRng};

const MIB: u64 = 1 << 20;
const BLOCK: usize = 4096;
const VOL_BLOCKS: u64 = 64;

/// No background sync ever: only what the test asks for commits.
fn config() -> StoreConfig {
    StoreConfig {
        dirty_max: 1 << 30,
        ..StoreConfig::default()
    }
}

fn make_volume(store: &Store, name: &str, props: &[(&str, &str)]) -> Resolved {
    let props: BTreeMap<String, String> = props
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    store
        .dataset_create(
            name,
            DatasetKind::Volume,
            props,
            Some(VOL_BLOCKS * BLOCK as u64),
            false,
        )
        .unwrap();
    store.sync().unwrap();
    store.resolve(name).unwrap()
}

fn block(i: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(i);
    let mut b = vec![0u8; BLOCK];
    rng.fill_bytes(&mut b);
    b
}

fn read_block(store: &Store, vol: &Resolved, b: u64) -> Vec<u8> {
    let mut buf = vec![0u8; BLOCK];
    store.read(vol, b * BLOCK as u64, &mut buf).unwrap();
    buf
}

fn scrub_errors(store: &Store) -> u64 {
    let (p, end) = store
        .scrub(None, Duration::from_secs(3600), &mut |_| {
            ScrubControl::Continue
        })
        .unwrap();
    assert_eq!(end, ScrubEnd::Finished);
    p.errors
}

#[test]
fn a_committed_log_survives_a_crash_without_a_txg_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    let store = open_store_with(&home, config());
    let vol = make_volume(&store, "tank/vol", &[]);
    store.commit_log().unwrap(); // arms the log (a sync: nothing was logged before)
    let synced = store.open_txg();
    for i in 0..20 {
        store
            .write(&vol, (i % VOL_BLOCKS) * BLOCK as u64, &block(i))
            .unwrap();
        if i % 3 == 0 {
            store.sync_writes(vol.dataset).unwrap();
        }
    }
    // One unaligned write smaller than a sector, and one large (logged by pointer).
    store.write(&vol, 5000, b"hello, log").unwrap();
    let big: Vec<u8> = (0..48 * 1024).map(|i| (i % 251) as u8).collect();
    store.write(&vol, 40 * BLOCK as u64, &big).unwrap();
    store.sync_writes(vol.dataset).unwrap();
    assert_eq!(
        store.open_txg(),
        synced,
        "a log commit must not sync the txg"
    );
    drop(store); // a crash: nothing more is synced

    let store = open_store_with(&home, config());
    let mut expect = vec![vec![0u8; BLOCK]; VOL_BLOCKS as usize];
    for i in 0..20 {
        expect[(i % VOL_BLOCKS) as usize] = block(i);
    }
    expect[1][5000 - BLOCK..5000 - BLOCK + 10].copy_from_slice(b"hello, log");
    for (k, chunk) in big.chunks(BLOCK).enumerate() {
        expect[40 + k].copy_from_slice(chunk);
    }
    for (b, want) in expect.iter().enumerate() {
        assert!(read_block(&store, &vol, b as u64) == *want, "block {b}");
    }
    assert_eq!(scrub_errors(&store), 0);
    // The replay was synced: a second crash loses nothing either.
    drop(store);
    let store = open_store_with(&home, config());
    assert!(read_block(&store, &vol, 2) == block(2));
}

#[test]
fn writes_not_committed_are_not_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "mirror", 2, 64 * MIB);
    let store = open_store_with(&home, config());
    let vol = make_volume(&store, "tank/vol", &[]);
    store.commit_log().unwrap();
    store.write(&vol, 0, &block(1)).unwrap();
    store.sync_writes(vol.dataset).unwrap();
    store.write(&vol, 0, &block(2)).unwrap(); // never committed
    drop(store);
    let store = open_store_with(&home, config());
    assert!(read_block(&store, &vol, 0) == block(1));
}

#[test]
fn sync_always_makes_each_write_durable_and_disabled_none() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    let store = open_store_with(&home, config());
    let always = make_volume(&store, "tank/always", &[("sync", "always")]);
    let disabled = make_volume(&store, "tank/disabled", &[("sync", "disabled")]);
    let txg = store.open_txg();
    store.write(&always, 0, &block(8)).unwrap(); // arms the log: a sync
    store.write(&always, BLOCK as u64, &block(9)).unwrap(); // logged
    store.write(&disabled, 0, &block(7)).unwrap();
    store.sync_writes(disabled.dataset).unwrap(); // returns at once: nothing durable
    store.write(&always, 2 * BLOCK as u64, &block(10)).unwrap();
    assert_eq!(store.open_txg(), txg + 1, "only the arming write synced");
    drop(store);
    let store = open_store_with(&home, config());
    assert!(read_block(&store, &always, 0) == block(8));
    assert!(read_block(&store, &always, 1) == block(9));
    assert!(read_block(&store, &always, 2) == block(10));
    assert!(read_block(&store, &disabled, 0) == vec![0u8; BLOCK]);
}
