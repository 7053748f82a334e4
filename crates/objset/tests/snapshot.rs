//! Snapshots: each reads back exactly what the dataset held when it was taken, whatever
//! the live dataset does afterwards (overwrites, truncates, deletes, rollbacks, re-imports);
//! destroying one frees exactly the `used` it reported; nothing leaks once all are gone.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use cairn_objset::receive::ReceiveOptions;
use cairn_objset::scrub::ScrubControl;
use cairn_objset::send::SendOptions;
use cairn_objset::{DatasetKind, Store};
use common::*;
use rand::{Rng, RngCore, SeedableRng};

const MIB: u64 = 1 << 20;
const FILES: usize = 6;

fn check_all(store: &Store, live: &Files, snaps: &BTreeMap<String, Files>, step: usize) {
    for (name, want) in live {
        let got = read_live(store, &format!("tank/fs/{name}"));
        assert!(got == *want, "step {step}: live {name} differs");
    }
    for (snap, want) in snaps {
        let v = store.snapshot_view(&format!("tank/fs@{snap}")).unwrap();
        let got = read_snapshot(store, &v);
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "step {step}: names in @{snap}"
        );
        for (name, data) in want {
            assert!(got[name] == *data, "step {step}: @{snap}/{name} differs");
        }
    }
}

/// A pool of `n` × `size` files in `layout` with an empty file system `tank/fs`.
fn pool_with_fs(
    dir: &std::path::Path,
    layout: &str,
    n: usize,
    size: u64,
) -> (cairn_pool::Home, Vec<std::path::PathBuf>, Store) {
    let (home, leaves) = new_pool(dir, layout, n, size);
    let store = open_store(&home);
    store
        .dataset_create(
            "tank/fs",
            DatasetKind::Filesystem,
            Default::default(),
            None,
            false,
        )
        .unwrap();
    (home, leaves, store)
}

fn write_at(store: &Store, live: &mut Files, name: &str, off: usize, data: &[u8]) {
    let path = format!("tank/fs/{name}");
    if !live.contains_key(name) {
        store.create_file(&path, false).unwrap();
        live.insert(name.to_string(), Vec::new());
    }
    let r = store.resolve(&path).unwrap();
    store.write(&r, off as u64, data).unwrap();
    let f = live.get_mut(name).unwrap();
    if f.len() < off + data.len() {
        f.resize(off + data.len(), 0);
    }
    f[off..off + data.len()].copy_from_slice(data);
}

/// One random step of the workload; returns what it did.
fn step(
    store: &Store,
    rng: &mut rand::rngs::StdRng,
    live: &mut Files,
    snaps: &mut BTreeMap<String, Files>,
    next_snap: &mut usize,
) -> String {
    let name = format!("f{}", rng.gen_range(0..FILES));
    match rng.gen_range(0..100) {
        0..=44 => {
            let off = rng.gen_range(0..(3 * MIB as usize / 2));
            let mut data = vec![0u8; rng.gen_range(1..(600 << 10))];
            rng.fill_bytes(&mut data);
            write_at(store, live, &name, off, &data);
            format!("write {name} {off}+{}", data.len())
        }
        45..=54 if live.contains_key(&name) => {
            let len = live[&name].len();
            let to = rng.gen_range(0..=len);
            store
                .truncate(
                    &store.resolve(&format!("tank/fs/{name}")).unwrap(),
                    to as u64,
                )
                .unwrap();
            live.get_mut(&name).unwrap().truncate(to);
            format!("truncate {name} {to}")
        }
        55..=62 if live.contains_key(&name) => {
            store.remove(&format!("tank/fs/{name}"), false).unwrap();
            live.remove(&name);
            format!("rm {name}")
        }
        63..=74 => {
            let snap = format!("s{next_snap}");
            *next_snap += 1;
            store
                .snapshot_create(&[format!("tank/fs@{snap}")], false)
                .unwrap();
            snaps.insert(snap.clone(), live.clone());
            format!("snapshot @{snap}")
        }
        75..=84 if !snaps.is_empty() => {
            let pick = rng.gen_range(0..snaps.len());
            let snap = snaps.keys().nth(pick).unwrap().clone();
            let full = format!("tank/fs@{snap}");
            let before = store.snapshots(Some("tank/fs")).unwrap();
            let used = before.iter().find(|s| s.name == full).unwrap().used;
            let freed = store.snapshot_destroy(&full).unwrap();
            assert_eq!(freed, used, "destroy of @{snap} frees its reported used");
            snaps.remove(&snap);
            format!("destroy @{snap} ({freed} bytes)")
        }
        85..=89 if !snaps.is_empty() => {
            // Roll back to the newest snapshot (by txg: the one taken last).
            let info = store.snapshots(Some("tank/fs")).unwrap();
            let newest = info.last().unwrap().name.clone();
            let snap = newest.split_once('@').unwrap().1.to_string();
            store.snapshot_rollback(&newest, false).unwrap();
            *live = snaps[&snap].clone();
            format!("rollback @{snap}")
        }
        90..=94 => {
            store.sync().unwrap();
            "sync".into()
        }
        _ => "nothing".into(),
    }
}

#[test]
fn snapshots_read_back_what_they_saw_through_a_random_workload() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _, mut store) = pool_with_fs(dir.path(), "raidz1", 3, 256 * MIB);
    store.sync().unwrap();
    let baseline = store.space().used;
    let mut rng = rand::rngs::StdRng::seed_from_u64(16);
    let (mut live, mut snaps) = (Files::new(), BTreeMap::new());
    let mut next_snap = 0;
    let mut log = Vec::new();
    for i in 0..400 {
        log.push(step(
            &store,
            &mut rng,
            &mut live,
            &mut snaps,
            &mut next_snap,
        ));
        if i % 40 == 39 {
            store.close().unwrap();
            store = open_store(&home);
            log.push("re-import".into());
        }
        if i % 10 == 9 {
            check_all(&store, &live, &snaps, i);
        }
    }
    check_all(&store, &live, &snaps, 400);
    assert!(
        log.iter().filter(|l| l.starts_with("rollback")).count() >= 5,
        "{log:?}"
    );
    assert!(
        log.iter().filter(|l| l.starts_with("destroy")).count() >= 5,
        "{log:?}"
    );
    let (p, _) = store
        .scrub(None, Duration::from_secs(60), &mut |_| {
            ScrubControl::Continue
        })
        .unwrap();
    assert_eq!(p.errors, 0);
    // Nothing leaks: with every snapshot and file gone, the pool is back where it started
    // but for metadata (the object table keeps the ids a snapshotted dataset used).
    for snap in snaps.keys() {
        store.snapshot_destroy(&format!("tank/fs@{snap}")).unwrap();
    }
    let id = store.datasets().by_name("tank/fs").unwrap().id;
    assert_eq!(store.snapshot_space(id).0, 0);
    for name in live.keys() {
        store.remove(&format!("tank/fs/{name}"), false).unwrap();
    }
    for _ in 0..4 {
        store.sync().unwrap();
    }
    let end = store.space().used;
    assert!(
        end < baseline + 2 * MIB,
        "{} bytes more than at the start: a leak ({log:?})",
        end - baseline
    );
}

#[test]
fn snapshot_space_is_what_destroy_frees() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, store) = pool_with_fs(dir.path(), "mirror", 2, 256 * MIB);
    let mut live = Files::new();
    let mut data = vec![0u8; 8 * MIB as usize];
    rand::rngs::StdRng::seed_from_u64(3).fill_bytes(&mut data);
    write_at(&store, &mut live, "a", 0, &data);
    store
        .snapshot_create(&["tank/fs@one".to_string()], false)
        .unwrap();
    let id = store.datasets().by_name("tank/fs").unwrap().id;
    let info = store.snapshots(Some("tank/fs")).unwrap();
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].used, 0, "nothing is held by the snapshot alone yet");
    let referenced = info[0].referenced;
    assert!(referenced >= 8 * MIB, "{referenced}");
    // Overwrite half: that half is now held by the snapshot alone.
    let mut half = vec![0u8; 4 * MIB as usize];
    rand::rngs::StdRng::seed_from_u64(4).fill_bytes(&mut half);
    write_at(&store, &mut live, "a", 0, &half);
    store.sync().unwrap();
    let info = store.snapshots(Some("tank/fs")).unwrap();
    let (by_snaps, written) = store.snapshot_space(id);
    assert_eq!(info[0].used, by_snaps);
    assert!(
        (4 * MIB..5 * MIB).contains(&info[0].used),
        "{}",
        info[0].used
    );
    assert!((4 * MIB..5 * MIB).contains(&written), "{written}");
    let before = store.space().used;
    let freed = store.snapshot_destroy("tank/fs@one").unwrap();
    assert_eq!(freed, info[0].used);
    for _ in 0..3 {
        store.sync().unwrap();
    }
    let after = store.space().used;
    // The freed blocks are gone from the allocator (metadata churns by a few KiB).
    let released = before - after;
    assert!(
        released + 256 * 1024 >= freed && released <= freed + 256 * 1024,
        "released {released}, freed {freed}"
    );
    assert_eq!(
        store.snapshot_space(id),
        (0, store.datasets().by_id(id).unwrap().used)
    );
}

#[test]
fn recursive_snapshots_share_a_txg_and_names_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "mirror", 2, 128 * MIB);
    let store = open_store(&home);
    for ds in ["tank/a", "tank/a/b", "tank/a/b/c"] {
        store
            .dataset_create(ds, DatasetKind::Filesystem, Default::default(), None, false)
            .unwrap();
    }
    let made = store
        .snapshot_create(&["tank/a@now".to_string()], true)
        .unwrap();
    assert_eq!(made, ["tank/a@now", "tank/a/b@now", "tank/a/b/c@now"]);
    let txgs: Vec<u64> = store
        .snapshots(None)
        .unwrap()
        .iter()
        .map(|s| s.txg)
        .collect();
    assert!(txgs.windows(2).all(|w| w[0] == w[1]), "{txgs:?}");
    let again = store.snapshot_create(&["tank/a/b@now".to_string()], false);
    assert!(again.unwrap_err().to_string().contains("already exists"));
    for bad in ["tank/a", "tank/a@", "tank/a@x/y", "tank/nope@x"] {
        assert!(
            store.snapshot_create(&[bad.to_string()], false).is_err(),
            "{bad}"
        );
    }
    let e = store.dataset_destroy("tank/a/b/c", false).unwrap_err();
    assert!(e.to_string().contains("has snapshots"), "{e}");
    store.dataset_destroy("tank/a", true).unwrap();
    assert!(store.snapshots(None).unwrap().is_empty());
    // Not the newest: rollback needs -r.
    store
        .dataset_create(
            "tank/d",
            DatasetKind::Filesystem,
            Default::default(),
            None,
            false,
        )
        .unwrap();
    store
        .snapshot_create(&["tank/d@1".to_string(), "tank/d@2".to_string()], false)
        .unwrap();
    let e = store.snapshot_rollback("tank/d@1", false).unwrap_err();
    assert!(e.to_string().contains("rollback -r"), "{e}");
    store.snapshot_rollback("tank/d@1", true).unwrap();
    assert_eq!(store.snapshots(Some("tank/d")).unwrap().len(), 1);
}

/// Overwrites the data area of leaf file `path` (labels kept) with junk.
fn wreck_leaf(path: &std::path::Path, seed: u64) {
    use cairn_geometry::{LEAF_DATA_START, LEAF_END_RESERVE};
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let end = f.metadata().unwrap().len() - LEAF_END_RESERVE;
    let mut junk = vec![0u8; MIB as usize];
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut at = LEAF_DATA_START;
    while at < end {
        rng.fill_bytes(&mut junk);
        let n = (end - at).min(MIB) as usize;
        f.write_all_at(&junk[..n], at).unwrap();
        at += n as u64;
    }
}

/// Blocks only a snapshot holds are scrubbed like live ones: wreck one side of a mirror,
/// scrub, then wreck the other side — the snapshot still reads, from the repaired side.
#[test]
fn scrub_repairs_blocks_only_a_snapshot_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (home, leaves, store) = pool_with_fs(dir.path(), "mirror", 2, 128 * MIB);
    store.set_property("tank/fs", "compression", "off").unwrap();
    let mut live = Files::new();
    let mut old = vec![0u8; 6 * MIB as usize];
    rand::rngs::StdRng::seed_from_u64(5).fill_bytes(&mut old);
    write_at(&store, &mut live, "a", 0, &old);
    store
        .snapshot_create(&["tank/fs@keep".to_string()], false)
        .unwrap();
    let new = vec![7u8; 6 * MIB as usize];
    write_at(&store, &mut live, "a", 0, &new);
    store.close().unwrap();
    wreck_leaf(&leaves[0], 1);
    let store = open_store(&home);
    let (p, _) = store
        .scrub(None, Duration::from_secs(60), &mut |_| {
            ScrubControl::Continue
        })
        .unwrap();
    assert_eq!(p.errors, 0);
    assert!(
        p.repaired_bytes >= 12 * MIB,
        "repaired {}",
        p.repaired_bytes
    );
    store.close().unwrap();
    wreck_leaf(&leaves[1], 2);
    let store = open_store(&home);
    let v = store.snapshot_view("tank/fs@keep").unwrap();
    let got = read_snapshot(&store, &v);
    assert!(
        got["a"] == old,
        "the snapshot's blocks were repaired on the first side"
    );
    assert!(read_live(&store, "tank/fs/a") == new);
}

#[test]
fn diff_names_modified_renamed_added_and_removed_objects() {
    use cairn_objset::posix::RenameMode;
    let dir = tempfile::tempdir().unwrap();
    let (_, _, store) = pool_with_fs(dir.path(), "mirror", 2, 128 * MIB);
    let mut live = Files::new();
    for name in ["a", "b", "gone"] {
        write_at(&store, &mut live, name, 0, name.as_bytes());
    }
    store.mkdir("tank/fs/d").unwrap();
    store
        .snapshot_create(&["tank/fs@one".to_string()], false)
        .unwrap();
    write_at(&store, &mut live, "a", 0, b"changed");
    let (_, root) = store.fs_root("tank/fs").unwrap();
    store
        .rename(root, "b", root, "c", RenameMode::Replace)
        .unwrap();
    store.remove("tank/fs/gone", false).unwrap();
    write_at(&store, &mut live, "new", 0, b"x");
    let lines: Vec<String> = store
        .diff("tank/fs@one", "tank/fs")
        .unwrap()
        .into_iter()
        .map(|e| match e.new_path {
            Some(n) => format!("{} {} -> {n}", e.change, e.path),
            None => format!("{} {}", e.change, e.path),
        })
        .collect();
    assert_eq!(lines, ["M /", "M /a", "R /b -> /c", "- /gone", "+ /new"]);
    store
        .snapshot_create(&["tank/fs@two".to_string()], false)
        .unwrap();
    assert!(store.diff("tank/fs@two", "tank/fs").unwrap().is_empty());
    assert_eq!(store.diff("tank/fs@one", "tank/fs@two").unwrap().len(), 5);
}

/// A full stream round-trips a file system byte for byte into another pool — files (sparse
/// and large), directories, hard links, symlinks, extended attributes, owners and times — and
/// a stream with one flipped byte, or cut short, is refused and leaves nothing behind.
#[test]
fn send_and_receive_round_trip_and_refuse_damage() {
    use cairn_objset::posix::NewNode;
    use cairn_objset::xattr::SetMode;
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "mirror", 2, 256 * MIB);
    let src = open_store(&home);
    src.dataset_create(
        "tank/fs",
        DatasetKind::Filesystem,
        Default::default(),
        None,
        false,
    )
    .unwrap();
    src.set_property("tank/fs", "recordsize", "64K").unwrap();
    let mut live = Files::new();
    let mut big = vec![0u8; 5 * MIB as usize + 777];
    rand::rngs::StdRng::seed_from_u64(9).fill_bytes(&mut big);
    write_at(&src, &mut live, "big", 0, &big);
    write_at(&src, &mut live, "sparse", 40 * MIB as usize, b"tail");
    src.mkdir("tank/fs/d/e").unwrap();
    let (_, root) = src.fs_root("tank/fs").unwrap();
    let (big_id, _) = src.lookup(root, "big").unwrap();
    let (d, _) = src.lookup(root, "d").unwrap();
    src.link(big_id, d, "hard").unwrap();
    let node = NewNode {
        kind: cairn_objset::dnode::ObjectKind::Symlink,
        mode: 0o120777,
        uid: 7,
        gid: 8,
        rdev: 0,
    };
    src.make_node(d, "ln", node, Some(b"../big")).unwrap();
    src.set_xattr(big_id, "user.DOSATTRIB", Some(b"0x23"), SetMode::Any)
        .unwrap();
    src.snapshot_create(&["tank/fs@s1".to_string()], false)
        .unwrap();
    let mut stream = Vec::new();
    let sent = src
        .send("tank/fs@s1", &SendOptions::default(), &mut stream)
        .unwrap();
    assert!(sent.data_bytes < 6 * MIB, "holes are not sent: {sent:?}");

    // Into a second pool, under another name.
    let dir2 = tempfile::tempdir().unwrap();
    let (home2, _) = new_pool(dir2.path(), "", 1, 256 * MIB);
    let dst = open_store(&home2);
    dst.receive("tank/copy", &ReceiveOptions::default(), &mut &stream[..])
        .unwrap();
    let view = |s: &Store, n: &str| s.snapshot_view(n).unwrap();
    let (a, b) = (view(&src, "tank/fs@s1"), view(&dst, "tank/copy@s1"));
    assert_eq!(read_snapshot(&src, &a), read_snapshot(&dst, &b));
    assert_eq!(read_live(&dst, "tank/copy/big"), big);
    assert_eq!(
        read_live(&dst, "tank/copy/sparse").len(),
        40 * MIB as usize + 4
    );
    assert_eq!(read_live(&dst, "tank/copy/d/hard"), big);
    let (_, droot) = dst.fs_root("tank/copy").unwrap();
    let (dd, _) = dst.lookup(droot, "d").unwrap();
    let (ln, lnd) = dst.lookup(dd, "ln").unwrap();
    assert_eq!(dst.read_link(ln).unwrap(), b"../big");
    assert_eq!((lnd.uid, lnd.gid), (7, 8));
    let (bid, bd) = dst.lookup(droot, "big").unwrap();
    assert_eq!(bd.nlink, 2);
    assert_eq!(dst.get_xattr(bid, "user.DOSATTRIB").unwrap(), b"0x23");
    let (_, sd) = src.lookup(root, "big").unwrap();
    assert_eq!((bd.mtime_ns, bd.mode), (sd.mtime_ns, sd.mode));
    let guids = |s: &Store, ds| s.snapshots(Some(ds)).unwrap()[0].guid;
    assert_eq!(guids(&src, "tank/fs"), guids(&dst, "tank/copy"));

    // Damage: every kind is refused, and the target does not exist afterwards.
    let mut flipped = stream.clone();
    let at = flipped.len() / 2;
    flipped[at] ^= 0x10;
    let e = dst
        .receive("tank/bad", &ReceiveOptions::default(), &mut &flipped[..])
        .unwrap_err();
    assert!(e.to_string().contains("check"), "{e}");
    let e = dst
        .receive(
            "tank/bad",
            &ReceiveOptions::default(),
            &mut &stream[..stream.len() - 20],
        )
        .unwrap_err();
    assert!(e.to_string().contains("ends early"), "{e}");
    let e = dst
        .receive(
            "tank/bad",
            &ReceiveOptions::default(),
            &mut &b"not a stream at all"[..],
        )
        .unwrap_err();
    assert!(e.to_string().contains("send stream"), "{e}");
    assert!(dst.datasets().by_name("tank/bad").is_none());
    let e = dst
        .receive("tank/copy", &ReceiveOptions::default(), &mut &stream[..])
        .unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
}

/// `written@SNAP` counts the bytes the dataset references that were born after SNAP:
/// new files and overwrites since it, not what was freed; `written` is the newest's.
#[test]
fn written_at_a_snapshot_counts_what_was_born_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_home, _leaves, store) = pool_with_fs(dir.path(), "", 1, 256 * MIB);
    store.set_property("tank/fs", "compression", "off").unwrap();
    let mut live = Files::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut data = vec![0u8; 4 * MIB as usize];
    rng.fill_bytes(&mut data);
    write_at(&store, &mut live, "one", 0, &data);
    store.snapshot_create(&["tank/fs@p".into()], false).unwrap();
    write_at(&store, &mut live, "two", 0, &data[..2 * MIB as usize]);
    store.snapshot_create(&["tank/fs@q".into()], false).unwrap();
    rng.fill_bytes(&mut data[..MIB as usize]);
    write_at(&store, &mut live, "one", 0, &data[..MIB as usize]);
    store.remove("tank/fs/two", false).unwrap();
    store.sync().unwrap();
    let get = |k: &str| -> u64 { store.get_property("tank/fs", k).unwrap().0.parse().unwrap() };
    // Since @p: the overwritten MiB (two was born after @p but is gone).
    let near = |got: u64, want: u64| got >= want && got < want + 64 * 1024;
    assert!(near(get("written@p"), MIB), "{}", get("written@p"));
    assert!(near(get("written@q"), MIB), "{}", get("written@q"));
    assert_eq!(get("written@q"), get("written"));
    // Before the overwrite, @p's figure counted two's 2 MiB too.
    store.snapshot_rollback("tank/fs@q", false).unwrap();
    assert!(near(get("written@p"), 2 * MIB), "{}", get("written@p"));
    assert_eq!(get("written@q"), 0);
    assert!(store.get_property("tank/fs", "written@nope").is_err());
}

/// A rollback that drops files made since the snapshot leaves the dataset's REFER at the
/// snapshot's (before, the dropped files' bytes were taken off twice).
#[test]
fn rollback_leaves_refer_at_the_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, store) = pool_with_fs(dir.path(), "mirror", 2, 256 * MIB);
    let mut live = Files::new();
    let mut data = vec![0u8; MIB as usize];
    rand::rngs::StdRng::seed_from_u64(8).fill_bytes(&mut data);
    write_at(&store, &mut live, "a", 0, &data);
    store
        .snapshot_create(&["tank/fs@s".to_string()], false)
        .unwrap();
    write_at(&store, &mut live, "b", 0, &data);
    write_at(&store, &mut live, "a", 4096, &data[..8192]);
    store.sync().unwrap();
    store.snapshot_rollback("tank/fs@s", false).unwrap();
    for _ in 0..3 {
        store.sync().unwrap();
    }
    let snap = store.snapshots(Some("tank/fs")).unwrap()[0].referenced;
    let refer: u64 = store
        .get_property("tank/fs", "referenced")
        .unwrap()
        .0
        .parse()
        .unwrap();
    assert_eq!(refer, snap);
    assert!(refer >= MIB, "{refer}");
}
