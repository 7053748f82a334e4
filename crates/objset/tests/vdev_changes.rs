//! Vdev changes on a store in use (`attach`, `detach`, `add`, `remove` run by the pool
//! service): a crash right after the new config reached the labels, before any txg
//! committed it, leaves a pool that imports with every committed byte; done in full, the
//! change survives export and import.

mod common;

use cairn_objset::resilver::{ResilverEnd, ResilverOptions};
use cairn_objset::scrub::ScrubControl;
use cairn_objset::Store;
use cairn_pool::Pool;
use common::*;

const MIB: u64 = 1 << 20;

fn put(store: &Store, path: &str, seed: u8, len: usize) -> Vec<u8> {
    let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(seed)).collect();
    store.create_file(path, true).unwrap();
    let r = store.resolve(path).unwrap();
    store.write(&r, 0, &data).unwrap();
    data
}

/// `n` files for new devices, in `dir/more`.
fn more_files(dir: &std::path::Path, n: usize) -> Vec<std::path::PathBuf> {
    std::fs::create_dir_all(dir.join("more")).unwrap();
    make_files(&dir.join("more"), n, 128 * MIB)
}

fn resilver(store: &Store) {
    let (_, end) = store
        .resilver(ResilverOptions::default(), &mut |_| ScrubControl::Continue)
        .unwrap();
    assert!(matches!(
        end,
        ResilverEnd::Finished | ResilverEnd::NothingToDo
    ));
}

/// A scrub reads every copy: a side missing data would need repairs.
fn scrub_is_clean(store: &Store) {
    let (p, _) = store
        .scrub(None, std::time::Duration::from_secs(3600), &mut |_| {
            ScrubControl::Continue
        })
        .unwrap();
    assert_eq!((p.repaired_bytes, p.errors), (0, 0), "{p:?}");
}

fn leaf_count(pool: &Pool) -> usize {
    pool.tops().iter().map(|t| t.children.len()).sum()
}

/// The config with the attached side reaches the labels; the process dies before a txg
/// commits the new GUID sum. The pool imports (the uberblocks before the change still
/// belong to it), the new side is there, stale, and a resilver makes it whole.
#[test]
fn a_crash_between_an_attach_and_its_txg_leaves_an_importable_pool() {
    let dir = tempfile::tempdir().unwrap();
    let (home, files) = new_pool(dir.path(), "", 1, 128 * MIB);
    let extra = more_files(dir.path(), 1);
    let store = open_store(&home);
    let data = put(&store, "tank/a", 7, 3 * MIB as usize);
    store.sync().unwrap();
    let (d0, d1) = (
        files[0].display().to_string(),
        extra[0].display().to_string(),
    );
    store.pool().attach_in_use(&d0, &d1, false).unwrap();
    drop(store); // a crash: nothing more is synced
    let store = open_store(&home);
    assert_eq!(
        leaf_count(store.pool()),
        2,
        "the attached side is in the config"
    );
    assert!(store.pool().needs_resilver());
    resilver(&store);
    assert_eq!(read_live(&store, "tank/a"), data);
    scrub_is_clean(&store);
    store.close().unwrap();
}

/// The same for a detach, and for an add.
#[test]
fn a_crash_between_a_detach_or_add_and_its_txg_leaves_an_importable_pool() {
    let dir = tempfile::tempdir().unwrap();
    let (home, files) = new_pool(dir.path(), "mirror", 2, 128 * MIB);
    let extra = more_files(dir.path(), 2);
    let store = open_store(&home);
    let data = put(&store, "tank/a", 3, 2 * MIB as usize);
    store.sync().unwrap();
    let left = store
        .pool()
        .detach_in_use(&files[0].display().to_string())
        .unwrap();
    drop(left); // not cleared: the crash came first
    drop(store);
    let store = open_store(&home);
    assert_eq!(leaf_count(store.pool()), 1, "the detach is in the config");
    assert_eq!(read_live(&store, "tank/a"), data);
    let tokens: Vec<String> = extra.iter().map(|f| f.display().to_string()).collect();
    let tokens = [vec!["mirror".to_string()], tokens].concat();
    // `-f`: a disk beside a mirror is a mismatched replication level.
    store.pool().add_in_use(&tokens, true).unwrap();
    drop(store);
    let store = open_store(&home);
    assert_eq!(
        store.pool().tops().len(),
        2,
        "the added vdev is in the config"
    );
    assert_eq!(read_live(&store, "tank/a"), data);
    let more = put(&store, "tank/b", 5, 8 * MIB as usize);
    store.sync().unwrap();
    assert_eq!(read_live(&store, "tank/b"), more);
    store.close().unwrap();
}

/// Done in full through the store, each change survives export and import; a log device
/// added and removed in use leaves no trace.
#[test]
fn changes_through_the_store_survive_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let (home, files) = new_pool(dir.path(), "", 1, 128 * MIB);
    let extra = more_files(dir.path(), 4);
    let p = |f: &std::path::PathBuf| f.display().to_string();
    let store = open_store(&home);
    let a = put(&store, "tank/a", 9, 2 * MIB as usize);
    store
        .attach_in_use(&p(&files[0]), &p(&extra[0]), false)
        .unwrap();
    resilver(&store);
    store
        .add_in_use(&["mirror".into(), p(&extra[1]), p(&extra[2])], false)
        .unwrap();
    store
        .add_in_use(&["log".into(), p(&extra[3])], false)
        .unwrap();
    let b = put(&store, "tank/b", 11, 6 * MIB as usize);
    store.sync().unwrap();
    store.remove_log_in_use(&p(&extra[3])).unwrap();
    store.detach_in_use(&p(&files[0])).unwrap();
    let c = put(&store, "tank/c", 13, MIB as usize);
    scrub_is_clean(&store);
    store.close().unwrap().export().unwrap();
    let dirs = [dir.path().to_path_buf(), dir.path().join("more")];
    let pool = Pool::import(&home, &dirs, "tank", false, false).unwrap();
    assert_eq!(pool.tops().len(), 2);
    assert_eq!(leaf_count(&pool), 3);
    let store = Store::open(pool).unwrap();
    for (path, data) in [("tank/a", a), ("tank/b", b), ("tank/c", c)] {
        assert_eq!(read_live(&store, path), data, "{path}");
    }
    store.close().unwrap();
}

/// A log device with a data vdev after it leaves a hole: the data vdev keeps its index
/// (its blocks read back), and a crash after the config with the hole reached the labels,
/// before a txg committed it, leaves a pool that imports with the hole and everything.
#[test]
fn a_log_device_before_a_data_vdev_leaves_a_hole() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "", 1, 128 * MIB);
    let extra = more_files(dir.path(), 2);
    let p = |f: &std::path::PathBuf| f.display().to_string();
    let store = open_store(&home);
    store
        .add_in_use(&["log".into(), p(&extra[0])], false)
        .unwrap();
    store.add_in_use(&[p(&extra[1])], false).unwrap();
    let a = put(&store, "tank/a", 9, 8 * MIB as usize);
    store.sync().unwrap();
    assert!(
        store.pool().io_snapshot().tops[2].alloc > 0,
        "nothing landed on the vdev after the log"
    );
    // What `remove_log_in_use` does, up to the config, then the crash.
    store.release_log_devices().unwrap();
    let left = store.pool().remove_log_in_use(&p(&extra[0])).unwrap();
    drop(left);
    drop(store);
    let store = open_store(&home);
    let tops = store.pool().tops();
    assert_eq!(
        tops.len(),
        3,
        "the hole keeps the index of the vdev after it"
    );
    assert!(tops[1].is_hole() && tops[1].children.is_empty());
    assert_eq!(read_live(&store, "tank/a"), a);
    let b = put(&store, "tank/b", 7, 8 * MIB as usize);
    store.close().unwrap().export().unwrap();
    let dirs = [dir.path().to_path_buf(), dir.path().join("more")];
    let pool = Pool::import(&home, &dirs, "tank", false, false).unwrap();
    assert_eq!(pool.tops().len(), 3);
    assert_eq!(leaf_count(&pool), 2);
    let store = Store::open(pool).unwrap();
    assert_eq!(read_live(&store, "tank/a"), a);
    assert_eq!(read_live(&store, "tank/b"), b);
    scrub_is_clean(&store);
    store.close().unwrap();
}

/// A scrub goes on through a detach that moves the other sides to new slots: it ends
/// clean, and at its end it settles the DTL of the device it read from its start,
/// wherever that device sits now; the device that left is not touched.
#[test]
fn a_scrub_goes_on_through_a_detach() {
    let dir = tempfile::tempdir().unwrap();
    let (home, files) = new_pool(dir.path(), "mirror", 3, 128 * MIB);
    let store = open_store(&home);
    let data: Vec<Vec<u8>> = (0..4)
        .map(|i| put(&store, &format!("tank/f{i}"), 3 + i as u8, 2 * MIB as usize))
        .collect();
    store.sync().unwrap();
    // The third side once missed txg 1 (a whole scrub proves it holds everything since).
    store.pool().tops()[0].children[2].set_dtl(vec![(1, 1)]);
    let mut detached = false;
    let (p, end) = store
        .scrub(None, std::time::Duration::ZERO, &mut |_| {
            if !detached {
                detached = true;
                let left = store
                    .pool()
                    .detach_in_use(&files[0].display().to_string())
                    .unwrap();
                store.sync().unwrap();
                left.clear_labels();
            }
            ScrubControl::Continue
        })
        .unwrap();
    assert!(detached, "the scrub never reported");
    assert_eq!(end, cairn_objset::scrub::ScrubEnd::Finished);
    assert_eq!((p.repaired_bytes, p.errors), (0, 0), "{p:?}");
    let third = &store.pool().tops()[0].children[1];
    assert_eq!(third.path, files[2].display().to_string());
    assert!(third.dtl_ranges().is_empty(), "{:?}", third.dtl_ranges());
    assert_eq!(leaf_count(store.pool()), 2);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(&read_live(&store, &format!("tank/f{i}")), d);
    }
    store.close().unwrap();
    let store = open_store(&home);
    assert_eq!(leaf_count(store.pool()), 2);
    scrub_is_clean(&store);
    store.close().unwrap();
}
