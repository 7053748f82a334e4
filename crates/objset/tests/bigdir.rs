//! Large directories: a DIR1 directory becomes DIR2 (hashed) as it grows, survives a
//! re-import, and a directory of 200,000 names still changes a few blocks per operation.

mod common;

use std::collections::BTreeMap;
use std::time::Instant;

use cairn_objset::dnode::ObjectKind;
use cairn_objset::posix::{NewNode, RenameMode, S_IFREG};
use cairn_objset::{Store, StoreError};
use common::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const MIB: u64 = 1 << 20;

fn file() -> NewNode {
    NewNode {
        kind: ObjectKind::File,
        mode: S_IFREG | 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
    }
}

fn root(store: &Store) -> u64 {
    store.fs_root("tank").unwrap().1
}

fn written_bytes(store: &Store) -> u64 {
    store.pool().io_snapshot().total().2.write_bytes
}

/// Bytes the pool wrote for one sync.
fn sync_bytes(store: &Store) -> u64 {
    let before = written_bytes(store);
    store.sync().unwrap();
    written_bytes(store) - before
}

#[test]
fn a_growing_directory_becomes_hashed_and_reads_back_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "mirror", 2, 256 * MIB);
    let mut names: BTreeMap<String, u64> = BTreeMap::new();
    let (root_id, mtime) = {
        let store = open_store(&home);
        let root = root(&store);
        // 300 names (~10 KiB of DIR1): one block, still DIR1, synced as such.
        for i in 0..300 {
            let name = format!("file-{i:04}.txt");
            let (id, _) = store.make_node(root, &name, file(), None).unwrap();
            names.insert(name, id);
        }
        store.sync().unwrap();
        let s = store.dir_stats(root).unwrap();
        assert!(!s.hashed, "{s:?}");
        assert_eq!(s.entries, 300);
        assert!(s.object_size <= 16384, "{s:?}");
        // Past one block it turns into DIR2 at once (in memory; the sync writes it).
        let mut i = 300;
        while !store.dir_stats(root).unwrap().hashed {
            let name = format!("file-{i:04}.txt");
            let (id, _) = store.make_node(root, &name, file(), None).unwrap();
            names.insert(name, id);
            i += 1;
        }
        assert!(i < 800, "converted only at {i} names");
        // Some more through the path API, with long and non-ASCII names.
        for i in 0..400 {
            let name = format!("{}-ü-{i}", "n".repeat(i % 200));
            let id = store.create_file(&format!("tank/{name}"), false).unwrap();
            names.insert(name, id);
        }
        let s = store.dir_stats(root).unwrap();
        assert!(s.hashed && s.leaves >= 2, "{s:?}");
        assert_eq!(s.entries, names.len() as u64);
        // Removals of names never synced as DIR2, and of names that were DIR1 on disk.
        for i in (0..300).step_by(3) {
            let name = format!("file-{i:04}.txt");
            store.remove(&format!("tank/{name}"), false).unwrap();
            names.remove(&name);
        }
        let mtime = store.dnode(root).unwrap().mtime_ns;
        store.close().unwrap();
        (root, mtime)
    };
    let store = open_store(&home);
    assert_eq!(root(&store), root_id);
    let s = store.dir_stats(root_id).unwrap();
    assert!(s.hashed, "{s:?}");
    assert_eq!(s.entries, names.len() as u64);
    assert_eq!(s.dirty_blocks, 0);
    assert_eq!(s.object_size, s.blocks * 16384);
    // Writing the directory kept the times of its last change.
    assert_eq!(store.dnode(root_id).unwrap().mtime_ns, mtime);
    let listed: Vec<(String, u64)> = store
        .read_dir(root_id)
        .unwrap()
        .into_iter()
        .map(|(n, o, _)| (n, o))
        .collect();
    let want: Vec<(String, u64)> = names.iter().map(|(n, &o)| (n.clone(), o)).collect();
    assert_eq!(listed, want, "read_dir is the model, in name order");
    let ls: Vec<String> = store
        .list("tank")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(ls, names.keys().cloned().collect::<Vec<_>>());
    for (name, &id) in &names {
        assert_eq!(store.lookup(root_id, name).unwrap().0, id, "{name}");
        assert_eq!(store.resolve(&format!("tank/{name}")).unwrap().object, id);
    }
    assert!(matches!(
        store.lookup(root_id, "file-0000.txt"),
        Err(StoreError::NotFound(_))
    ));
    // A hashed subdirectory is not empty until its last name goes; then rmdir works.
    let sub = store.mkdir("tank/sub").unwrap();
    for i in 0..700 {
        store
            .make_node(sub, &format!("entry number {i}"), file(), None)
            .unwrap();
    }
    assert!(store.dir_stats(sub).unwrap().hashed);
    assert!(matches!(
        store.remove_name(root_id, "sub", true),
        Err(StoreError::NotEmpty(_))
    ));
    for i in 0..700 {
        let u = store
            .remove_name(sub, &format!("entry number {i}"), false)
            .unwrap();
        store.free_orphan(u.object).unwrap();
    }
    assert_eq!(store.read_dir(sub).unwrap(), Vec::new());
    store.remove_name(root_id, "sub", true).unwrap();
    store.close().unwrap();
}

#[test]
fn a_directory_of_200000_names_changes_a_few_blocks_per_operation() {
    const N: usize = 200_000;
    const BATCH: usize = 10_000;
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "", 1, 2048 * MIB);
    let name = |i: usize| format!("entry-{i:07}");
    let mut objects = vec![0u64; N];
    let started = Instant::now();
    let (root_id, early) = {
        let store = open_store(&home);
        let root = root(&store);
        let mut early = 0;
        for (i, obj) in objects.iter_mut().enumerate() {
            *obj = store.make_node(root, &name(i), file(), None).unwrap().0;
            if (i + 1) % BATCH == 0 {
                store.sync().unwrap();
                if i + 1 == 2 * BATCH {
                    // The cost of one more name at 20,000 names, to compare with 200,000.
                    store.make_node(root, "probe-early", file(), None).unwrap();
                    early = sync_bytes(&store);
                }
            }
        }
        eprintln!("{N} creates with syncs: {:?}", started.elapsed());
        (root, early)
    };
    let store = open_store(&home);
    let before = store.dir_stats(root_id).unwrap();
    assert!(
        before.hashed && before.entries == N as u64 + 1,
        "{before:?}"
    );
    assert_eq!(before.dirty_blocks, 0);
    // One more name: the header and one leaf change (a split adds a leaf and a table
    // block), not the ~{before.blocks} blocks of the directory.
    store
        .make_node(root_id, "one more name", file(), None)
        .unwrap();
    let after = store.dir_stats(root_id).unwrap();
    assert!(after.dirty_blocks <= 4, "{after:?}");
    assert!(after.cached_leaves <= 2, "{after:?}");
    let late = sync_bytes(&store);
    eprintln!(
        "directory: {} blocks ({} leaves, {} bytes); one insert dirtied {} blocks; sync after one insert wrote {early} bytes at 20,000 names, {late} bytes at {N}",
        before.blocks, before.leaves, before.object_size, after.dirty_blocks
    );
    // What the sync writes does not follow the directory's size (a DIR1 rewrite would be
    // the whole object, ~{before.object_size} bytes).
    assert!(late < 2 * early + (256 << 10), "{late} vs {early}");
    assert!(
        late < before.object_size / 4,
        "{late} vs {}",
        before.object_size
    );

    // Random lookups (each reads at most a table block and a leaf).
    let mut rng = StdRng::seed_from_u64(7);
    let t = Instant::now();
    for _ in 0..20_000 {
        let i = rng.gen_range(0..N);
        assert_eq!(store.lookup(root_id, &name(i)).unwrap().0, objects[i]);
    }
    assert!(store.dir_stats(root_id).unwrap().cached_leaves <= 1024);
    eprintln!("20000 random lookups: {:?}", t.elapsed());
    assert!(matches!(
        store.lookup(root_id, "entry-9999999"),
        Err(StoreError::NotFound(_))
    ));

    // Remove every other name, in random order.
    let mut gone: Vec<usize> = (0..N).step_by(2).collect();
    gone.shuffle(&mut rng);
    let t = Instant::now();
    for (k, &i) in gone.iter().enumerate() {
        let u = store.remove_name(root_id, &name(i), false).unwrap();
        assert_eq!((u.object, u.nlink), (objects[i], 0));
        store.free_orphan(u.object).unwrap();
        if (k + 1) % BATCH == 0 {
            store.sync().unwrap();
        }
    }
    eprintln!("{} removals: {:?}", gone.len(), t.elapsed());
    store.close().unwrap();

    let store = open_store(&home);
    let s = store.dir_stats(root_id).unwrap();
    assert_eq!(s.entries, (N / 2 + 2) as u64, "{s:?}");
    for _ in 0..5_000 {
        let i = rng.gen_range(0..N);
        let r = store.lookup(root_id, &name(i));
        if i % 2 == 0 {
            assert!(matches!(r, Err(StoreError::NotFound(_))), "{i}");
        } else {
            assert_eq!(r.unwrap().0, objects[i]);
        }
    }
    let listed = store.read_dir(root_id).unwrap();
    assert_eq!(listed.len(), N / 2 + 2);
    assert!(listed.windows(2).all(|w| w[0].0 < w[1].0), "sorted by name");
    let odd: Vec<&(String, u64, ObjectKind)> = listed
        .iter()
        .filter(|e| e.0.starts_with("entry-"))
        .collect();
    for (k, e) in odd.iter().enumerate() {
        let i = 2 * k + 1;
        assert_eq!((e.0.as_str(), e.1), (name(i).as_str(), objects[i]));
    }
    store.close().unwrap();
    eprintln!("whole test: {:?}", started.elapsed());
}

/// Names of many lengths (1 to 255 bytes), some not ASCII.
fn model_name(i: usize) -> String {
    let len = [3usize, 12, 40, 100, 200][i % 5];
    let mut n = format!("{i}:");
    let fill = if i.is_multiple_of(7) { 'é' } else { 'x' };
    while n.len() + fill.len_utf8() <= len.max(n.len()) {
        n.push(fill);
    }
    if i.is_multiple_of(11) {
        // The longest a name may be.
        while n.len() < 255 {
            n.push('z');
        }
    }
    n
}

fn model_run(seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 128 * MIB);
    let mut store = open_store(&home);
    let mut rng = StdRng::seed_from_u64(seed);
    let root = root(&store);
    let other = store.mkdir("tank/other").unwrap();
    // Name → object, per directory.
    let mut model: [BTreeMap<String, u64>; 2] = [BTreeMap::new(), BTreeMap::new()];
    let dirs = [root, other];
    let check_all = |store: &Store, model: &[BTreeMap<String, u64>; 2], when: &str| {
        for (d, m) in dirs.iter().zip(model) {
            let listed: BTreeMap<String, u64> = store
                .read_dir(*d)
                .unwrap()
                .into_iter()
                .map(|(n, o, _)| (n, o))
                .collect();
            let listed: BTreeMap<String, u64> =
                listed.into_iter().filter(|(n, _)| n != "other").collect();
            assert_eq!(&listed, m, "{when}: seed {seed}");
        }
    };
    for step in 0..6000 {
        let which = usize::from(rng.gen_bool(0.2));
        let (d, name) = (dirs[which], model_name(rng.gen_range(0..2500)));
        match rng.gen_range(0..100) {
            0..=49 => match store.make_node(d, &name, file(), None) {
                Ok((id, _)) => {
                    assert!(
                        model[which].insert(name, id).is_none(),
                        "seed {seed} step {step}"
                    );
                }
                Err(StoreError::Exists(_)) => assert!(model[which].contains_key(&name)),
                Err(e) => panic!("seed {seed} step {step}: {e}"),
            },
            50..=69 => match store.remove_name(d, &name, false) {
                Ok(u) => {
                    assert_eq!(model[which].remove(&name), Some(u.object));
                    store.free_orphan(u.object).unwrap();
                }
                Err(StoreError::NotFound(_)) => assert!(!model[which].contains_key(&name)),
                Err(e) => panic!("seed {seed} step {step}: {e}"),
            },
            70..=84 => match store.lookup(d, &name) {
                Ok((id, _)) => assert_eq!(model[which].get(&name), Some(&id), "{name}"),
                Err(StoreError::NotFound(_)) => assert!(!model[which].contains_key(&name)),
                Err(e) => panic!("seed {seed} step {step}: {e}"),
            },
            85..=96 => {
                // Rename to a random name of a random directory (replacing what is there).
                let to_which = usize::from(rng.gen_bool(0.3));
                let to = model_name(rng.gen_range(0..2500));
                match store.rename(d, &name, dirs[to_which], &to, RenameMode::Replace) {
                    Ok(replaced) => {
                        let id = model[which].remove(&name).expect("renamed a name it had");
                        let old = model[to_which].insert(to, id);
                        match (old, replaced) {
                            (Some(o), Some(u)) if o != id => {
                                assert_eq!(u.object, o);
                                store.free_orphan(o).unwrap();
                            }
                            (None, None) => {}
                            (Some(o), None) if o == id => {}
                            other => panic!("seed {seed} step {step}: {other:?}"),
                        }
                    }
                    Err(StoreError::NotFound(_)) => assert!(!model[which].contains_key(&name)),
                    Err(e) => panic!("seed {seed} step {step}: {e}"),
                }
            }
            97..=98 => {
                store.sync().unwrap();
            }
            _ => {
                store.close().unwrap();
                store = open_store(&home);
                check_all(&store, &model, "after reopen");
            }
        }
    }
    check_all(&store, &model, "at the end");
    assert!(
        store.dir_stats(root).unwrap().hashed,
        "seed {seed}: the test should reach DIR2"
    );
    store.close().unwrap();
    let store = open_store(&home);
    check_all(&store, &model, "after the last reopen");
    for (d, m) in dirs.iter().zip(&model) {
        for (name, &id) in m {
            assert_eq!(store.lookup(*d, name).unwrap().0, id);
        }
    }
}

#[test]
fn random_names_match_a_model_across_syncs_and_reopens() {
    for seed in 1..=3 {
        model_run(seed);
    }
}
