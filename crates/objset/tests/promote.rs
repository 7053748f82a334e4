//! `promote`: the clone takes its origin's older snapshots, the origin becomes its clone;
//! every snapshot and both heads read back as before, through writes on both sides, a
//! re-import, a scrub, promoting back and forth; each snapshot's `used` is what its destroy
//! frees; and with everything destroyed nothing leaks and nothing live was freed early.

mod common;

use std::collections::BTreeMap;

use cairn_objset::send::SendOptions;
use cairn_objset::Store;
use common::*;
use rand::{RngCore, SeedableRng};

const MIB: usize = 1 << 20;

fn put(store: &Store, path: &str, off: usize, data: &[u8]) {
    if store.resolve(path).is_err() {
        store.create_file(path, false).unwrap();
    }
    store
        .write(&store.resolve(path).unwrap(), off as u64, data)
        .unwrap();
}

fn random(n: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// What every snapshot and head must read as, by name.
struct Expected {
    snaps: BTreeMap<String, Files>,
    live: BTreeMap<String, Files>,
}

impl Expected {
    fn check(&self, store: &Store, when: &str) {
        for (name, want) in &self.snaps {
            let v = store
                .snapshot_view(name)
                .unwrap_or_else(|e| panic!("{when}: {name}: {e}"));
            assert!(read_snapshot(store, &v) == *want, "{when}: {name} differs");
        }
        for (ds, want) in &self.live {
            assert!(live_tree(store, ds) == *want, "{when}: {ds} differs");
        }
    }

    fn moved(&mut self, from: &str, to: &str, names: &[&str]) {
        for n in names {
            let files = self.snaps.remove(&format!("{from}@{n}")).unwrap();
            self.snaps.insert(format!("{to}@{n}"), files);
        }
    }
}

fn snapshot_names(store: &Store, ds: &str) -> Vec<String> {
    store
        .snapshots(Some(ds))
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect()
}

/// Destroys snapshot `full`: what it frees is the `used` it reported, and the pool's
/// allocated space drops by that much once the frees are released (metadata churns by a
/// few blocks).
fn destroy_checked(store: &Store, full: &str) {
    settle(store);
    let used = store
        .snapshots(None)
        .unwrap()
        .into_iter()
        .find(|s| s.name == full)
        .unwrap()
        .used;
    let before = store.space().used;
    assert_eq!(store.snapshot_destroy(full).unwrap(), used, "{full}");
    settle(store);
    let released = before as i64 - store.space().used as i64;
    assert!(
        (released - used as i64).abs() < 256 << 10,
        "{full}: used {used}, the pool released {released}"
    );
}

/// tank/fs with @a and @b, tank/c cloned from @b with @t, writes on both sides after.
fn build(store: &Store, exp: &mut Expected) {
    new_fs(store, "tank/fs");
    store.set_property("tank/fs", "compression", "off").unwrap();
    put(store, "tank/fs/big", 0, &random(8 * MIB, 1));
    for i in 0..40 {
        put(
            store,
            &format!("tank/fs/d/f{i}"),
            0,
            format!("small {i}").as_bytes(),
        );
    }
    let big = store.resolve("tank/fs/big").unwrap().object;
    let (_, root) = store.fs_root("tank/fs").unwrap();
    store.link(big, root, "hard").unwrap();
    use cairn_objset::xattr::SetMode;
    store
        .set_xattr(big, "user.tag", Some(b"blue"), SetMode::Any)
        .unwrap();
    let snap = |s: &Store, name: &str, exp: &mut Expected| {
        s.snapshot_create(&[name.to_string()], false).unwrap();
        let files = read_snapshot(s, &s.snapshot_view(name).unwrap());
        exp.snaps.insert(name.to_string(), files);
    };
    snap(store, "tank/fs@a", exp);
    put(store, "tank/fs/big", 0, &random(2 * MIB, 2));
    put(store, "tank/fs/x", 0, &random(MIB, 3));
    store.remove("tank/fs/d/f0", false).unwrap();
    snap(store, "tank/fs@b", exp);
    store.clone_create("tank/fs@b", "tank/c").unwrap();
    // The clone lets go of origin blocks before and after its own snapshot.
    put(store, "tank/c/big", MIB, &random(MIB, 4));
    store.remove("tank/c/d/f1", false).unwrap();
    put(store, "tank/c/mine", 0, &random(MIB, 5));
    snap(store, "tank/c@t", exp);
    put(store, "tank/c/big", 4 * MIB, &random(MIB, 6));
    store.remove("tank/c/x", false).unwrap();
    // The origin goes on too.
    put(store, "tank/fs/big", 3 * MIB, &random(3 * MIB, 7));
    store.remove("tank/fs/x", false).unwrap();
    snap(store, "tank/fs@c", exp);
    put(store, "tank/fs/big", 6 * MIB, &random(MIB, 8));
    store.sync().unwrap();
}

/// A mirror pool with `build`'s datasets: (its folder, home, store, space used before the
/// build, what each snapshot shows).
fn built() -> (tempfile::TempDir, cairn_pool::Home, Store, u64, Expected) {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "mirror", 2, 256 * MIB as u64);
    let store = open_store(&home);
    let baseline = store.space().used;
    let mut exp = Expected {
        snaps: BTreeMap::new(),
        live: BTreeMap::new(),
    };
    build(&store, &mut exp);
    (dir, home, store, baseline, exp)
}

fn refresh_live(store: &Store, exp: &mut Expected) {
    for ds in ["tank/fs", "tank/c"] {
        if store.datasets().by_name(ds).is_some() {
            exp.live.insert(ds.into(), live_tree(store, ds));
        }
    }
}

#[test]
fn promote_moves_history_and_loses_nothing() {
    let (_dir, home, store, baseline, mut exp) = built();
    refresh_live(&store, &mut exp);
    exp.check(&store, "before");

    let e = store.promote("tank/fs").unwrap_err().to_string();
    assert!(e.contains("not a clone"), "{e}");
    let report = store.promote("tank/c").unwrap();
    assert_eq!(report.moved, ["a", "b"]);
    assert!(report.adopted >= 2 * MIB as u64, "{report:?}"); // big's 2nd and 5th MiB, f1, x
    assert!(report.released >= 3 * MIB as u64, "{report:?}"); // what fs overwrote after @b
    exp.moved("tank/fs", "tank/c", &["a", "b"]);
    exp.check(&store, "after promote");
    assert_eq!(
        snapshot_names(&store, "tank/c"),
        ["tank/c@a", "tank/c@b", "tank/c@t"]
    );
    assert_eq!(snapshot_names(&store, "tank/fs"), ["tank/fs@c"]);
    assert_eq!(
        store.get_property("tank/fs", "origin").unwrap().0,
        "tank/c@b"
    );
    assert_eq!(store.get_property("tank/c", "origin").unwrap().0, "-");

    // Across the promote, an incremental goes through tank/c's clone map, which names what
    // became of each object (send_receive.rs follows a backup through it).
    let opts = |from: &str| SendOptions {
        from: Some(from.into()),
        ..Default::default()
    };
    for from in ["@b", "@a"] {
        store
            .send("tank/c@t", &opts(from), &mut Vec::new())
            .unwrap();
    }
    // diff across the promote names objects through the clone map too.
    assert_diff(
        &store,
        "tank/c@b",
        "tank/c@t",
        &[('M', "/big"), ('-', "/d/f1"), ('+', "/mine"), ('M', "/d")],
        6,
    );
    // From the older moved snapshot too: /d/f0 went before @b (the map does not name it).
    assert_diff(
        &store,
        "tank/c@a",
        "tank/c@t",
        &[
            ('M', "/big"),
            ('-', "/d/f0"),
            ('-', "/d/f1"),
            ('+', "/mine"),
            ('+', "/x"),
        ],
        8,
    );
    let e = store.snapshot_destroy("tank/c@b").unwrap_err().to_string();
    assert!(e.contains("clones") && e.contains("tank/fs"), "{e}");
    // An incremental from the new origin into the old one works as for any clone.
    let opts = SendOptions {
        from: Some("tank/c@b".into()),
        ..Default::default()
    };
    store.send("tank/fs@c", &opts, &mut Vec::new()).unwrap();

    // Writes on both sides after the promote, a re-import, a scrub.
    put(&store, "tank/fs/big", 0, &random(MIB, 9)); // an origin block: kept for tank/c@a..b
    put(&store, "tank/c/big", 7 * MIB, &random(MIB, 10));
    store.remove("tank/c/d/f2", false).unwrap();
    store.sync().unwrap();
    refresh_live(&store, &mut exp);
    store.close().unwrap();
    let store = open_store(&home);
    exp.check(&store, "re-imported");
    scrub_clean(&store);

    // Back and forth: tank/fs takes @a and @b again, then gives them back.
    let back = store.promote("tank/fs").unwrap();
    assert_eq!(back.moved, ["a", "b"]);
    exp.moved("tank/c", "tank/fs", &["a", "b"]);
    exp.check(&store, "promoted back");
    assert_eq!(
        store.get_property("tank/c", "origin").unwrap().0,
        "tank/fs@b"
    );
    store.promote("tank/c").unwrap();
    exp.moved("tank/fs", "tank/c", &["a", "b"]);
    exp.check(&store, "promoted again");

    // The old origin goes, as after `zfs promote`; then the moved history, each destroy
    // freeing what it reported.
    // Its USED (what is its own: written since @b, and its snapshot's) is what goes.
    let fs_used: u64 = store
        .get_property("tank/fs", "used")
        .unwrap()
        .0
        .parse()
        .unwrap();
    assert!(fs_used >= 2 * MIB as u64, "USED {fs_used}");
    let before = store.space().used;
    destroy_checked(&store, "tank/fs@c");
    store.dataset_destroy("tank/fs", false).unwrap();
    exp.live.remove("tank/fs");
    exp.snaps.retain(|k, _| !k.starts_with("tank/fs@"));
    for _ in 0..4 {
        store.sync().unwrap();
    }
    let released = before - store.space().used;
    assert!(
        released.abs_diff(fs_used) < 256 << 10,
        "USED {fs_used}, released {released}"
    );
    // Fill the freed space: were a block tank/c holds freed, this would overwrite it.
    put(&store, "tank/c/filler", 0, &random(96 * MIB, 11));
    store.sync().unwrap();
    store.remove("tank/c/filler", false).unwrap();
    exp.check(&store, "origin destroyed");
    scrub_clean(&store);
    for name in ["tank/c@a", "tank/c@t", "tank/c@b"] {
        destroy_checked(&store, name);
        exp.snaps.remove(name);
        exp.check(&store, name);
    }
    let id = store.datasets().by_name("tank/c").unwrap().id;
    assert_eq!(store.snapshot_space(id).0, 0);
    store.dataset_destroy("tank/c", false).unwrap();
    assert_no_leak(&store, baseline, "at the end");
    scrub_clean(&store);
}

/// Rolling back to a snapshot that came by promote: the dataset shows it again (files,
/// hard links, xattrs), the newer snapshots are gone and the others read as before; an
/// incremental and a diff start from it; a re-import and a scrub find everything; each
/// destroy frees what it reported, and with everything destroyed nothing leaks.
#[test]
fn rollback_to_a_moved_snapshot() {
    let (_dir, home, store, baseline, mut exp) = built();
    store.promote("tank/c").unwrap();
    exp.moved("tank/fs", "tank/c", &["a", "b"]);
    put(&store, "tank/c/extra", 0, &random(2 * MIB, 13)); // dropped by the rollback
    let e = store.snapshot_rollback("tank/c@b", false).unwrap_err();
    assert!(e.to_string().contains("rollback -r"), "{e}");
    store.snapshot_rollback("tank/c@b", true).unwrap();
    exp.snaps.remove("tank/c@t");
    exp.live
        .insert("tank/c".into(), exp.snaps["tank/c@b"].clone());
    refresh_live(&store, &mut exp);
    assert_eq!(exp.live["tank/c"], exp.snaps["tank/c@b"]);
    exp.check(&store, "rolled back");
    assert_eq!(snapshot_names(&store, "tank/c"), ["tank/c@a", "tank/c@b"]);
    // Space: the dataset refers to what @b does (its directories are new copies of the same
    // size); @b alone holds its directories now, so destroying it would free them.
    settle(&store);
    let b = store
        .snapshots(Some("tank/c"))
        .unwrap()
        .into_iter()
        .find(|s| s.name == "tank/c@b")
        .unwrap();
    let refer: u64 = store
        .get_property("tank/c", "referenced")
        .unwrap()
        .0
        .parse()
        .unwrap();
    assert!(
        refer.abs_diff(b.referenced) < 64 << 10,
        "REFER {refer}, @b's {}",
        b.referenced
    );
    let b_used = b.used;
    assert!(b_used > 0, "@b holds directory blocks the dataset does not");
    let big = store.resolve("tank/c/big").unwrap().object;
    assert_eq!(store.resolve("tank/c/hard").unwrap().object, big);
    assert_eq!(store.get_xattr(big, "user.tag").unwrap(), b"blue");
    // The dataset goes on from there; an incremental and a diff start at @b.
    put(&store, "tank/c/big", 0, &random(MIB, 12));
    store.remove("tank/c/d/f3", false).unwrap();
    put(&store, "tank/c/new", 0, b"after the rollback");
    store.snapshot_create(&["tank/c@u".into()], false).unwrap();
    exp.snaps.insert(
        "tank/c@u".into(),
        read_snapshot(&store, &store.snapshot_view("tank/c@u").unwrap()),
    );
    assert_diff(
        &store,
        "tank/c@b",
        "tank/c@u",
        &[('M', "/big"), ('-', "/d/f3"), ('+', "/new")],
        5,
    );
    let opts = SendOptions {
        from: Some("@b".into()),
        ..Default::default()
    };
    let mut stream = Vec::new();
    store.send("tank/c@u", &opts, &mut stream).unwrap();
    assert!(
        stream.len() < 2 * MIB,
        "{} bytes: only the change",
        stream.len()
    );
    refresh_live(&store, &mut exp);
    store.close().unwrap();
    let store = open_store(&home);
    exp.check(&store, "re-imported");
    scrub_clean(&store);

    // Tear down: the old origin, then tank/c's history, each destroy freeing what it
    // reported, and nothing left over.
    destroy_checked(&store, "tank/fs@c");
    store.dataset_destroy("tank/fs", false).unwrap();
    exp.live.remove("tank/fs");
    exp.snaps.retain(|k, _| !k.starts_with("tank/fs@"));
    for name in ["tank/c@b", "tank/c@a", "tank/c@u"] {
        destroy_checked(&store, name);
        exp.snaps.remove(name);
        exp.check(&store, name);
    }
    scrub_clean(&store);
    store.dataset_destroy("tank/c", false).unwrap();
    assert_no_leak(&store, baseline, "at the end");
}

/// A volume rolled back to a snapshot that came by promote reads as that snapshot, after
/// a re-import too; with everything destroyed nothing leaks.
#[test]
fn a_volume_rolls_back_to_a_moved_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "", 1, 256 * MIB as u64);
    let store = open_store(&home);
    let baseline = store.space().used;
    let kind = cairn_objset::dataset::DatasetKind::Volume;
    let size = 32 * MIB as u64;
    store
        .dataset_create("tank/vm", kind, Default::default(), Some(size), false)
        .unwrap();
    let vm = store.resolve("tank/vm").unwrap();
    store.write(&vm, MIB as u64, &random(8 * MIB, 40)).unwrap();
    store
        .snapshot_create(&["tank/vm@gold".into()], false)
        .unwrap();
    let read = |store: &Store, name: &str| {
        let mut buf = vec![0u8; size as usize];
        let r = store.resolve(name).unwrap();
        store.read(&r, 0, &mut buf).unwrap();
        buf
    };
    let gold = read(&store, "tank/vm");
    store.clone_create("tank/vm@gold", "tank/vm2").unwrap();
    let vm2 = store.resolve("tank/vm2").unwrap();
    store
        .write(&vm2, 4 * MIB as u64, &random(2 * MIB, 41))
        .unwrap();
    store.promote("tank/vm2").unwrap();
    store.write(&vm2, 0, &random(MIB, 42)).unwrap();
    store.snapshot_rollback("tank/vm2@gold", false).unwrap();
    assert!(
        read(&store, "tank/vm2") == gold,
        "the volume reads as @gold"
    );
    store.close().unwrap();
    let store = open_store(&home);
    assert!(read(&store, "tank/vm2") == gold, "after a re-import");
    scrub_clean(&store);
    store.dataset_destroy("tank/vm", false).unwrap();
    destroy_checked(&store, "tank/vm2@gold");
    store.dataset_destroy("tank/vm2", false).unwrap();
    assert_no_leak(&store, baseline, "with everything destroyed");
}

/// A rollback to a snapshot that came by promote, which cannot read the snapshot (a
/// directory of it damaged in every copy), fails and leaves the dataset as it was, in
/// memory and after a re-import.
#[test]
fn a_failed_rollback_to_a_moved_snapshot_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (home, files) = new_pool(dir.path(), "", 1, 128 * MIB as u64);
    let store = open_store(&home);
    new_fs(&store, "tank/fs");
    for i in 0..20 {
        put(&store, &format!("tank/fs/zd/f{i}"), 0, &random(5000, i));
    }
    // Copied before the damaged directory (entries go in name order).
    put(&store, "tank/fs/a-file", 0, &random(3 * MIB, 50));
    store.snapshot_create(&["tank/fs@b".into()], false).unwrap();
    store.clone_create("tank/fs@b", "tank/c").unwrap();
    put(&store, "tank/c/mine", 0, &random(MIB, 30));
    store.remove("tank/c/zd/f3", false).unwrap();
    store.promote("tank/c").unwrap();
    let v = store.snapshot_view("tank/c@b").unwrap();
    let (_, d) = store.snapshot_resolve(&v, &["zd"]).unwrap();
    assert_eq!(d.levels, 1, "one block to damage");
    let before = live_tree(&store, "tank/c");
    let b_used = |store: &Store| {
        settle(store);
        store.snapshots(Some("tank/c")).unwrap()[0].used
    };
    let used = b_used(&store);
    store.close().unwrap();
    let leaf = std::fs::OpenOptions::new()
        .write(true)
        .open(&files[0])
        .unwrap();
    for dva in d.root.copies() {
        let at = cairn_geometry::LEAF_DATA_START + dva.offset;
        std::os::unix::fs::FileExt::write_all_at(&leaf, &random(dva.asize as usize, 31), at)
            .unwrap();
    }
    let store = open_store(&home);
    let e = store
        .snapshot_rollback("tank/c@b", false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("checksum"), "{e}");
    assert!(
        live_tree(&store, "tank/c") == before,
        "unchanged after the error"
    );
    assert_eq!(b_used(&store), used, "@b's space is as it was");
    store.close().unwrap();
    let store = open_store(&home);
    assert!(
        live_tree(&store, "tank/c") == before,
        "unchanged after a re-import"
    );
}

#[test]
fn promote_refuses_name_clashes() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "", 1, 128 * MIB as u64);
    let store = open_store(&home);
    new_fs(&store, "tank/fs");
    put(&store, "tank/fs/f", 0, b"one");
    store.snapshot_create(&["tank/fs@s".into()], false).unwrap();
    store.clone_create("tank/fs@s", "tank/c").unwrap();
    store.snapshot_create(&["tank/c@s".into()], false).unwrap();
    let e = store.promote("tank/c").unwrap_err().to_string();
    assert!(e.contains("tank/c@s"), "{e}");
    // Nothing changed.
    assert_eq!(
        store.get_property("tank/c", "origin").unwrap().0,
        "tank/fs@s"
    );
    assert_eq!(snapshot_names(&store, "tank/fs"), ["tank/fs@s"]);
}

/// One dataset of the model: its files, its snapshots oldest first, its origin.
#[derive(Clone, Default)]
struct DsModel {
    live: Files,
    snaps: Vec<(String, Files)>,
    origin: Option<(String, String)>,
}

type Lineage = BTreeMap<String, DsModel>;

fn has_clones(m: &Lineage, ds: &str, snap: &str) -> bool {
    m.values()
        .any(|d| d.origin.as_ref().is_some_and(|(o, s)| o == ds && s == snap))
}

fn verify_lineage(store: &Store, m: &Lineage, when: &str) {
    for (ds, d) in m {
        assert!(live_tree(store, ds) == d.live, "{when}: {ds} differs");
        let names: Vec<String> = d.snaps.iter().map(|(n, _)| format!("{ds}@{n}")).collect();
        assert_eq!(snapshot_names(store, ds), names, "{when}");
        for (n, want) in &d.snaps {
            let v = store.snapshot_view(&format!("{ds}@{n}")).unwrap();
            assert!(
                read_snapshot(store, &v) == *want,
                "{when}: {ds}@{n} differs"
            );
        }
        let origin = store.get_property(ds, "origin").unwrap().0;
        let want = d
            .origin
            .as_ref()
            .map_or("-".into(), |(o, s)| format!("{o}@{s}"));
        assert_eq!(origin, want, "{when}: origin of {ds}");
    }
}

/// Promotes `clone` in the model as `zfs promote` does.
fn promote_model(m: &mut Lineage, clone: &str) {
    let (origin, at) = m[clone].origin.clone().unwrap();
    let grand = m[&origin].origin.clone();
    let o = m.get_mut(&origin).unwrap();
    let pos = o.snaps.iter().position(|(n, _)| *n == at).unwrap();
    let moved: Vec<(String, Files)> = o.snaps.drain(..=pos).collect();
    o.origin = Some((clone.to_string(), at));
    for d in m.values_mut() {
        if let Some((ds, s)) = &mut d.origin {
            if *ds == origin && moved.iter().any(|(n, _)| n == s) {
                *ds = clone.to_string();
            }
        }
    }
    let c = m.get_mut(clone).unwrap();
    c.origin = grand;
    let own = std::mem::take(&mut c.snaps);
    c.snaps = moved.into_iter().chain(own).collect();
}

/// One random step over the lineage; returns what it did.
fn lineage_step(
    store: &Store,
    rng: &mut rand::rngs::StdRng,
    m: &mut Lineage,
    n: &mut usize,
) -> String {
    use rand::Rng;
    let names: Vec<String> = m.keys().cloned().collect();
    let ds = names[rng.gen_range(0..names.len())].clone();
    let file = format!("f{}", rng.gen_range(0..4));
    let path = format!("{ds}/{file}");
    let all_snaps: Vec<(String, String)> = m
        .iter()
        .flat_map(|(d, x)| x.snaps.iter().map(move |(s, _)| (d.clone(), s.clone())))
        .collect();
    *n += 1;
    match rng.gen_range(0..100) {
        0..=34 => {
            let off = rng.gen_range(0..(384 << 10));
            let data = random(rng.gen_range(1..(256 << 10)), rng.gen());
            put(store, &path, off, &data);
            let f = m.get_mut(&ds).unwrap().live.entry(file).or_default();
            f.resize(f.len().max(off + data.len()), 0);
            f[off..off + data.len()].copy_from_slice(&data);
            format!("write {path} {off}+{}", data.len())
        }
        35..=41 if m[&ds].live.contains_key(&file) => {
            let to = rng.gen_range(0..=m[&ds].live[&file].len());
            store
                .truncate(&store.resolve(&path).unwrap(), to as u64)
                .unwrap();
            m.get_mut(&ds)
                .unwrap()
                .live
                .get_mut(&file)
                .unwrap()
                .truncate(to);
            format!("truncate {path} {to}")
        }
        42..=47 if m[&ds].live.contains_key(&file) => {
            store.remove(&path, false).unwrap();
            m.get_mut(&ds).unwrap().live.remove(&file);
            format!("rm {path}")
        }
        48..=59 => {
            let snap = format!("s{n}");
            store
                .snapshot_create(&[format!("{ds}@{snap}")], false)
                .unwrap();
            let d = m.get_mut(&ds).unwrap();
            d.snaps.push((snap.clone(), d.live.clone()));
            format!("snapshot {ds}@{snap}")
        }
        60..=66 if !all_snaps.is_empty() && m.len() < 5 => {
            let (from, snap) = all_snaps[rng.gen_range(0..all_snaps.len())].clone();
            let new = format!("tank/c{n}");
            store.clone_create(&format!("{from}@{snap}"), &new).unwrap();
            let files = m[&from]
                .snaps
                .iter()
                .find(|(s, _)| *s == snap)
                .unwrap()
                .1
                .clone();
            m.insert(
                new.clone(),
                DsModel {
                    live: files,
                    snaps: Vec::new(),
                    origin: Some((from.clone(), snap.clone())),
                },
            );
            format!("clone {from}@{snap} {new}")
        }
        67..=76 => {
            let clones: Vec<&String> = names.iter().filter(|c| m[*c].origin.is_some()).collect();
            if clones.is_empty() {
                return "nothing".into();
            }
            let clone = clones[rng.gen_range(0..clones.len())];
            let (origin, _) = m[clone].origin.clone().unwrap();
            let nested = m[&origin].origin.is_some();
            store.promote(clone).unwrap();
            promote_model(m, clone);
            format!(
                "promote {clone}{}",
                if nested { " (of a clone)" } else { "" }
            )
        }
        77..=86 if !all_snaps.is_empty() => {
            let (d, snap) = all_snaps[rng.gen_range(0..all_snaps.len())].clone();
            let full = format!("{d}@{snap}");
            if has_clones(m, &d, &snap) {
                assert!(store.snapshot_destroy(&full).is_err(), "{full} has clones");
                return format!("destroy {full} (refused)");
            }
            destroy_checked(store, &full);
            m.get_mut(&d).unwrap().snaps.retain(|(s, _)| *s != snap);
            format!("destroy {full}")
        }
        87..=89 if m.len() > 1 && !m[&ds].snaps.iter().any(|(s, _)| has_clones(m, &ds, s)) => {
            // Its USED (own blocks and its snapshots') is what the pool gets back.
            settle(store);
            let used: u64 = store.get_property(&ds, "used").unwrap().0.parse().unwrap();
            let before = store.space().used;
            store.dataset_destroy(&ds, true).unwrap();
            for _ in 0..4 {
                store.sync().unwrap();
            }
            let released = before as i64 - store.space().used as i64;
            assert!(
                (released - used as i64).abs() < 256 << 10,
                "destroy {ds}: USED {used}, the pool released {released}"
            );
            m.remove(&ds);
            format!("destroy {ds}")
        }
        90..=93 if !m[&ds].snaps.is_empty() => {
            let (snap, files) = m[&ds].snaps.last().unwrap().clone();
            let table = store.datasets();
            let id = table.by_name(&ds).unwrap().id;
            let moved = table.snapshots.find(id, &snap).unwrap().root != 0;
            store
                .snapshot_rollback(&format!("{ds}@{snap}"), false)
                .unwrap_or_else(|e| panic!("rollback {ds}@{snap}: {e}"));
            m.get_mut(&ds).unwrap().live = files;
            format!(
                "rollback {ds}@{snap}{}",
                if moved { " (came by promote)" } else { "" }
            )
        }
        94..=96 => {
            store.sync().unwrap();
            "sync".into()
        }
        _ => "nothing".into(),
    }
}

/// Random writes, snapshots, clones, promotes (back and forth), destroys and rollbacks
/// over a lineage of datasets, re-imported now and then, each step checked against a
/// model; at the end everything is destroyed and nothing may leak.
#[test]
fn promote_through_a_random_lineage_keeps_every_snapshot() {
    let mut totals = (0, 0, 0);
    for seed in 1..=8u64 {
        let dir = tempfile::tempdir().unwrap();
        let (home, _) = new_pool(dir.path(), "mirror", 2, 256 * MIB as u64);
        let mut store = open_store(&home);
        let baseline = store.space().used;
        new_fs(&store, "tank/d0");
        let mut m = Lineage::new();
        m.insert("tank/d0".into(), DsModel::default());
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut log, mut n) = (Vec::new(), 0);
        for i in 0..150 {
            log.push(lineage_step(&store, &mut rng, &mut m, &mut n));
            if i % 37 == 36 {
                store.close().unwrap();
                store = open_store(&home);
                log.push("re-import".into());
            }
            verify_lineage(
                &store,
                &m,
                &format!(
                    "seed {seed} step {i}: {:?}",
                    &log[log.len().saturating_sub(4)..]
                ),
            );
        }
        let did = |what: &str| log.iter().filter(|l| l.starts_with(what)).count();
        let (promotes, clones, rollbacks) = (did("promote"), did("clone"), did("rollback"));
        let nested = log.iter().filter(|l| l.ends_with("(of a clone)")).count();
        let moved = log
            .iter()
            .filter(|l| l.ends_with("(came by promote)"))
            .count();
        eprintln!(
            "seed {seed}: {promotes} promotes ({nested} of a clone of a clone), {clones} \
             clones, {rollbacks} rollbacks ({moved} to snapshots that came by promote)"
        );
        assert!(promotes >= 2 && clones >= 2, "seed {seed}: {log:?}");
        totals.0 += promotes;
        totals.1 += nested;
        totals.2 += moved;
        scrub_clean(&store);
        // Tear down, leaves of the lineage first.
        while !m.is_empty() {
            let ds = m
                .keys()
                .find(|d| !m[*d].snaps.iter().any(|(s, _)| has_clones(&m, d, s)))
                .unwrap()
                .clone();
            store.dataset_destroy(&ds, true).unwrap();
            m.remove(&ds);
        }
        assert_no_leak(&store, baseline, &format!("seed {seed} ({log:?})"));
        scrub_clean(&store);
    }
    assert!(
        totals.0 >= 30 && totals.1 >= 5 && totals.2 >= 3,
        "promotes, of clones of clones, rollbacks to moved snapshots: {totals:?}"
    );
}
