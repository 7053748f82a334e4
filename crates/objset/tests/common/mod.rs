//! Helpers for object-store tests: pools over sparse files.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cairn_objset::snapshot_read::SnapshotView;
use cairn_objset::{Store, StoreConfig};
use cairn_pool::{CreateOptions, Home, Pool};

pub fn make_files(dir: &Path, n: usize, size: u64) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("d{i}"));
            std::fs::File::create(&p).unwrap().set_len(size).unwrap();
            p
        })
        .collect()
}

/// A pool named `tank` with the layout `kind` (e.g. "raidz2", "mirror", "") over `n` files.
pub fn new_pool(dir: &Path, kind: &str, n: usize, size: u64) -> (Home, Vec<PathBuf>) {
    let files = make_files(dir, n, size);
    let home = Home::at(dir.join("home"));
    let mut tokens: Vec<String> = Vec::new();
    if !kind.is_empty() {
        tokens.push(kind.to_string());
    }
    tokens.extend(files.iter().map(|f| f.display().to_string()));
    Pool::create(&home, "tank", &tokens, CreateOptions::default()).unwrap();
    (home, files)
}

pub fn open_store(home: &Home) -> Store {
    Store::open(Pool::open(home, "tank").unwrap()).unwrap()
}

/// The pool `tank` with every leaf behind `power` (`cairn_vdev::CrashLeaf`): writes from
/// number `power.persist_limit` on never reach the files, as at a power cut.
pub fn open_with_power_cut(home: &Home, power: &std::sync::Arc<cairn_vdev::PowerCut>) -> Pool {
    use std::sync::Arc;
    let mut pool = Pool::open(home, "tank").unwrap();
    for slot in pool.leaf_slots() {
        assert!(pool.wrap_leaf(slot, |inner: Arc<dyn cairn_vdev::Leaf>| {
            Arc::new(cairn_vdev::CrashLeaf::new(inner, power.clone()))
        }));
    }
    pool
}

pub fn open_store_with(home: &Home, config: StoreConfig) -> Store {
    Store::open_with(Pool::open(home, "tank").unwrap(), config).unwrap()
}

/// File contents by path.
pub type Files = BTreeMap<String, Vec<u8>>;

pub fn read_live(store: &Store, path: &str) -> Vec<u8> {
    let r = store.resolve(path).unwrap();
    let size = store.object_dnode(&r).unwrap().size as usize;
    let mut buf = vec![0u8; size];
    assert_eq!(store.read(&r, 0, &mut buf).unwrap(), size);
    buf
}

/// Every file of a snapshot by path (a directory as `path/`, with no contents).
pub fn read_snapshot(store: &Store, v: &SnapshotView) -> Files {
    let mut out = Files::new();
    read_snapshot_dir(store, v, v.root, "", &mut out);
    out
}

pub fn read_snapshot_dir(store: &Store, v: &SnapshotView, dir: u64, prefix: &str, out: &mut Files) {
    for (name, e) in store.snapshot_read_dir(v, dir).unwrap() {
        let dn = store
            .snapshot_dnode(v, e.object)
            .unwrap_or_else(|err| panic!("{}: {prefix}{name}: {err}", v.name));
        if dn.kind == cairn_objset::dnode::ObjectKind::Directory {
            let path = format!("{prefix}{name}/");
            read_snapshot_dir(store, v, e.object, &path, out);
            out.insert(path, Vec::new());
            continue;
        }
        let mut buf = vec![0u8; dn.size as usize];
        assert_eq!(
            store.snapshot_read(v, e.object, 0, &mut buf).unwrap(),
            buf.len()
        );
        out.insert(format!("{prefix}{name}"), buf);
    }
}

/// Every file of a live dataset by path (a directory as `path/`, with no contents).
pub fn live_tree(store: &Store, ds: &str) -> Files {
    let mut out = Files::new();
    let mut dirs = vec![String::new()];
    while let Some(dir) = dirs.pop() {
        for e in store.list(&format!("{ds}{dir}")).unwrap() {
            let path = format!("{dir}/{}", e.name);
            if e.kind == "dir" {
                dirs.push(path.clone());
                out.insert(format!("{}/", &path[1..]), Vec::new());
            } else {
                out.insert(
                    path[1..].to_string(),
                    read_live(store, &format!("{ds}{path}")),
                );
            }
        }
    }
    out
}

/// A file system `name` with default properties.
pub fn new_fs(store: &Store, name: &str) {
    store
        .dataset_create(
            name,
            cairn_objset::DatasetKind::Filesystem,
            Default::default(),
            None,
            false,
        )
        .unwrap();
}

/// A scrub of the whole pool finds no error.
pub fn scrub_clean(store: &Store) {
    let (p, _) = store
        .scrub(None, std::time::Duration::from_secs(60), &mut |_| {
            cairn_objset::scrub::ScrubControl::Continue
        })
        .unwrap();
    assert_eq!(p.errors, 0);
}

/// Syncs until frees deferred by earlier txgs reach the allocator.
pub fn settle(store: &Store) {
    for _ in 0..3 {
        store.sync().unwrap();
    }
}

/// Power-cut tests: the txg a cut left on disk, checked to be no older than the newest one
/// `committed` (txg → (state, leaf writes issued when it committed)) notes as committed
/// before leaf write `limit`; and the states noted at or before it and at or after it (a
/// txg no operation finished in holds one of them).
pub fn states_around_cut<'a, M>(
    home: &Home,
    committed: &'a BTreeMap<u64, (M, u64)>,
    limit: u64,
) -> (u64, Option<&'a M>, Option<&'a M>) {
    // (The store's open may commit more: log replay, the undo of an interrupted receive.)
    let opened = Pool::open(home, "tank")
        .unwrap()
        .uberblocks()
        .first()
        .map_or(0, |u| u.txg);
    let required = committed
        .iter()
        .filter(|(_, (_, w))| *w <= limit)
        .map(|(t, _)| *t)
        .max()
        .unwrap_or(0);
    assert!(
        opened >= required,
        "limit {limit}: opened txg {opened}, but txg {required} was committed"
    );
    let before = committed.range(..=opened).next_back().map(|(_, (m, _))| m);
    let after = committed.range(opened..).next().map(|(_, (m, _))| m);
    (opened, before, after)
}

/// A scrub after a power cut runs to its end and finds nothing.
pub fn scrub_after_cut(store: &Store, limit: u64) {
    let (p, end) = store
        .scrub(None, std::time::Duration::from_secs(3600), &mut |_| {
            cairn_objset::scrub::ScrubControl::Continue
        })
        .unwrap();
    assert_eq!(end, cairn_objset::scrub::ScrubEnd::Finished);
    assert_eq!(p.errors, 0, "limit {limit}: scrub after the cut");
}

/// `diff FROM TO` of `store` holds each of `wants` (change, path) and no more than
/// `at_most` lines: only what changed.
pub fn assert_diff(store: &Store, from: &str, to: &str, wants: &[(char, &str)], at_most: usize) {
    let changes: Vec<(char, String)> = store
        .diff(from, to)
        .unwrap()
        .into_iter()
        .map(|d| (d.change, d.path))
        .collect();
    for want in wants {
        assert!(
            changes.contains(&(want.0, want.1.to_string())),
            "{from} → {to}: {want:?} in {changes:?}"
        );
    }
    assert!(changes.len() <= at_most, "only what changed: {changes:?}");
}

/// Once the frees of the last few txgs are released, the pool holds no more than 2 MiB
/// above `baseline` (its object table may have grown): nothing leaked.
pub fn assert_no_leak(store: &Store, baseline: u64, when: &str) {
    for _ in 0..4 {
        store.sync().unwrap();
    }
    let end = store.space().used;
    assert!(
        end < baseline + (2 << 20),
        "{when}: {} bytes more than at the start: a leak",
        end - baseline
    );
}

/// The checksum errors each leaf counted.
pub fn checksum_errors(store: &Store) -> Vec<u64> {
    store
        .pool()
        .tops()
        .iter()
        .flat_map(|t| t.children.iter())
        .map(|c| {
            c.stats
                .checksum_errors
                .load(std::sync::atomic::Ordering::Relaxed)
        })
        .collect()
}
