//! Engine regression found by `cairn torture` (seed 1052584193065834292): a leaf that
//! missed a txg (a failed write) keeps that txg in its DTL even after a scrub repaired
//! every block on it. Offlining another leaf of the raidz1 is then allowed (the first leaf
//! is readable), but the next import marks the first leaf stale for its DTL: two of four
//! leaves unreadable, the pool UNAVAIL although every block is intact on disk. A scrub that
//! finished without errors has rewritten everything a readable leaf missed, so it must
//! settle the DTL ranges it covered (ZFS does the same when a scrub completes).

use std::sync::atomic::Ordering;
use std::time::Duration;

use cairn_objset::scrub::{ScrubControl, ScrubEnd};
use cairn_objset::Store;
use cairn_pool::{CreateOptions, Home, Pool};
use cairn_torture::layout::wrap_leaves;
use rand::SeedableRng;

#[test]
fn a_clean_scrub_settles_the_dtl_of_a_leaf_that_missed_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut specs = vec!["raidz1".to_string()];
    let mut paths = Vec::new();
    for i in 0..4 {
        let path = dir.path().join(format!("d{i}"));
        std::fs::File::create(&path)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        specs.push(path.display().to_string());
        paths.push(path.display().to_string());
    }
    let home = Home::at(dir.path().join("home"));
    Pool::create(&home, "tank", &specs, CreateOptions::default()).unwrap();
    // Incompressible, so every block spans all four leaves.
    let mut data = vec![0u8; 400_000];
    rand::RngCore::fill_bytes(&mut rand::rngs::StdRng::seed_from_u64(5), &mut data);

    let mut pool = Pool::open(&home, "tank").unwrap();
    let switches = wrap_leaves(&mut pool);
    let store = Store::open(pool).unwrap();
    // Leaf 1 fails one txg's writes: that txg joins its DTL.
    let leaf1 = switches[0][1].clone().unwrap();
    leaf1.fail_writes.store(true, Ordering::Relaxed);
    store.create_file("tank/f", false).unwrap();
    let r = store.resolve("tank/f").unwrap();
    store.write(&r, 0, &data).unwrap();
    store.sync().unwrap();
    leaf1.fail_writes.store(false, Ordering::Relaxed);
    // Depending on how many write requests that sync made, leaf 1 may have crossed the
    // fault threshold (10 errors); clear it as `cairn clear` would, so the scrub reads it.
    store.pool().tops()[0].children[1].clear_fault();
    assert!(!store.pool().tops()[0].children[1].dtl_ranges().is_empty());
    // The scrub rewrites what leaf 1 missed.
    let (p, end) = store
        .scrub(None, Duration::from_secs(60), &mut |_| {
            ScrubControl::Continue
        })
        .unwrap();
    assert_eq!((end, p.errors), (ScrubEnd::Finished, 0), "{p:?}");
    assert!(p.repaired_bytes > 0, "{p:?}");
    let mut pool = store.close().unwrap();
    // Another leaf goes offline: allowed, leaf 1 is whole again.
    pool.offline(&paths[3], false).unwrap();
    drop(pool);

    let store = Store::open(Pool::open(&home, "tank").unwrap()).unwrap();
    let r = store.resolve("tank/f").unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(store.read(&r, 0, &mut back).unwrap(), data.len());
    assert!(back == data);
}
