//! Scrub and resilver stop and resume inside one object (issue 12, item 11): a pool that
//! holds one big volume can be paused mid-scrub, and a resilver interrupted half-way through
//! one big object does not start that object again from its first block.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use cairn_objset::resilver::{ResilverEnd, ResilverOptions};
use cairn_objset::scrub::{ScrubControl, ScrubEnd};
use cairn_objset::{DatasetKind, Resolved, Store};
use cairn_pool::Pool;
use common::{make_files, new_pool, open_store};

const MIB: u64 = 1 << 20;
/// 24 MiB of 4 KiB blocks: 6144 blocks, six slices of the walk.
const VOLUME: u64 = 24 * MIB;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// One volume `tank/vol` of 4 KiB blocks, filled; its contents.
fn fill_volume(store: &Store) -> (Resolved, Vec<u8>) {
    let props = BTreeMap::from([("volblocksize".to_string(), "4K".to_string())]);
    store
        .dataset_create("tank/vol", DatasetKind::Volume, props, Some(VOLUME), false)
        .unwrap();
    let vol = store.resolve("tank/vol").unwrap();
    let data = pattern(VOLUME as usize, 7);
    for (i, chunk) in data.chunks(MIB as usize).enumerate() {
        store.write(&vol, i as u64 * MIB, chunk).unwrap();
    }
    store.sync().unwrap();
    (vol, data)
}

fn read_all(store: &Store, vol: &Resolved) -> Vec<u8> {
    let mut buf = vec![0u8; VOLUME as usize];
    store.read(vol, 0, &mut buf).unwrap();
    buf
}

#[test]
fn a_scrub_pauses_inside_one_big_object_and_resumes_there() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 128 * MIB);
    let store = open_store(&home);
    let (vol, data) = fill_volume(&store);
    let object = vol.object;
    let (first, end) = store
        .scrub(None, Duration::ZERO, &mut |p| {
            if p.next_object == object && p.next_block > 0 {
                ScrubControl::Pause
            } else {
                ScrubControl::Continue
            }
        })
        .unwrap();
    assert_eq!(end, ScrubEnd::Paused);
    assert_eq!(
        first.next_object, vol.object,
        "paused in the volume: {first:?}"
    );
    assert!(
        first.next_block > 0 && first.next_block < VOLUME / 4096,
        "inside it: {first:?}"
    );
    let (second, end) = store
        .scrub(Some(&first), Duration::from_secs(3600), &mut |_| {
            ScrubControl::Continue
        })
        .unwrap();
    assert_eq!(end, ScrubEnd::Finished);
    assert_eq!((second.errors, second.repaired_bytes), (0, 0), "{second:?}");
    // The second part did not scrub the volume's first slice again (a resumed scrub goes
    // on counting from the first part's counts).
    let volume_blocks = VOLUME / 4096;
    assert!(second.blocks - first.blocks < volume_blocks, "{second:?}");
    assert!(second.blocks >= volume_blocks, "{first:?} {second:?}");
    assert!(
        second.examined_bytes <= second.total_bytes,
        "counted twice: {second:?}"
    );
    assert_eq!(read_all(&store, &vol), data);
}

#[test]
fn a_resilver_interrupted_inside_one_big_object_resumes_there() {
    let dir = tempfile::tempdir().unwrap();
    let (home, files) = new_pool(dir.path(), "mirror", 2, 128 * MIB);
    let store = open_store(&home);
    let (vol, data) = fill_volume(&store);
    let mut pool = store.close().unwrap();
    let new_dir = dir.path().join("new");
    std::fs::create_dir(&new_dir).unwrap();
    let new = make_files(&new_dir, 1, 128 * MIB).remove(0);
    pool.replace(
        &files[1].display().to_string(),
        Some(&new.display().to_string()),
        false,
    )
    .unwrap();
    let store = Store::open(pool).unwrap();
    let opts = ResilverOptions {
        checkpoint_every: Duration::ZERO,
        batch_bytes: MIB,
        ..ResilverOptions::default()
    };
    // Stop at about half of the volume.
    let (first, end) = store
        .resilver(opts, &mut |p| {
            if p.repaired_bytes >= VOLUME / 2 {
                ScrubControl::Pause
            } else {
                ScrubControl::Continue
            }
        })
        .unwrap();
    assert_eq!(end, ResilverEnd::Paused);
    assert_eq!(first.next_object, vol.object, "{first:?}");
    assert!(first.next_block > 0, "{first:?}");
    // A crash: the store goes away without a sync; the resume point is in the labels.
    drop(store);
    let pool = Pool::open(&home, "tank").unwrap();
    let checkpoint = pool.resilver_checkpoint().expect("resume point persisted");
    assert_eq!(
        (checkpoint.next_object, checkpoint.next_block),
        (first.next_object, first.next_block)
    );
    let store = Store::open(pool).unwrap();
    let (second, end) = store
        .resilver(ResilverOptions::default(), &mut |_| ScrubControl::Continue)
        .unwrap();
    assert_eq!(end, ResilverEnd::Finished);
    assert!(
        second.repaired_bytes <= VOLUME * 6 / 10,
        "the second run copied {} of {VOLUME} bytes: it started again from the first block",
        second.repaired_bytes
    );
    assert_eq!(read_all(&store, &vol), data);
    let (s, _) = store
        .scrub(None, Duration::from_secs(3600), &mut |_| {
            ScrubControl::Continue
        })
        .unwrap();
    assert_eq!((s.errors, s.repaired_bytes), (0, 0), "{s:?}");
}
