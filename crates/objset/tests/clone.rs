//! Clones: a clone reads as its snapshot, takes writes without touching the origin, shares
//! the origin's blocks (no data copied, USED counts only its own), survives a re-import and
//! a scrub, keeps its origin snapshot from being destroyed, and gives back exactly its own
//! space when destroyed.

mod common;

use cairn_objset::{DatasetKind, Store};
use common::*;
use rand::{RngCore, SeedableRng};

const MIB: u64 = 1 << 20;

fn put(store: &Store, path: &str, off: u64, data: &[u8]) {
    if store.resolve(path).is_err() {
        store.create_file(path, false).unwrap();
    }
    store
        .write(&store.resolve(path).unwrap(), off, data)
        .unwrap();
}

fn used(store: &Store, ds: &str) -> u64 {
    store.get_property(ds, "used").unwrap().0.parse().unwrap()
}

fn assert_same(got: &Files, want: &Files) {
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (k, v) in want {
        assert!(
            got[k] == *v,
            "{k} differs ({} vs {} bytes)",
            got[k].len(),
            v.len()
        );
    }
}

#[test]
fn a_clone_shares_its_snapshot_and_takes_writes_apart() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "mirror", 2, 256 * MIB);
    let store = open_store(&home);
    new_fs(&store, "tank/fs");
    store.set_property("tank/fs", "compression", "off").unwrap();
    let mut big = vec![0u8; 16 * MIB as usize];
    rand::rngs::StdRng::seed_from_u64(1).fill_bytes(&mut big);
    put(&store, "tank/fs/big", 0, &big);
    for i in 0..50 {
        put(
            &store,
            &format!("tank/fs/d/e/f{i}"),
            0,
            format!("small {i}").as_bytes(),
        );
    }
    let (_, root) = store.fs_root("tank/fs").unwrap();
    let big_id = store.resolve("tank/fs/big").unwrap().object;
    store.link(big_id, root, "hard").unwrap();
    use cairn_objset::xattr::SetMode;
    store
        .set_xattr(big_id, "user.tag", Some(b"blue"), SetMode::Any)
        .unwrap();
    store.snapshot_create(&["tank/fs@s".into()], false).unwrap();
    store.sync().unwrap();
    let before_clone = store.space().alloc;
    let snap = read_snapshot(&store, &store.snapshot_view("tank/fs@s").unwrap());

    store.clone_create("tank/fs@s", "tank/c").unwrap();
    store.sync().unwrap();
    assert_same(&live_tree(&store, "tank/c"), &snap);
    // No data was copied: the pool grew by the new directories and dnodes only.
    assert!(
        store.space().alloc - before_clone < MIB,
        "{}",
        store.space().alloc - before_clone
    );
    assert!(
        used(&store, "tank/c") < 512 << 10,
        "USED {}",
        used(&store, "tank/c")
    );
    let refer: u64 = store
        .get_property("tank/c", "referenced")
        .unwrap()
        .0
        .parse()
        .unwrap();
    assert!(refer >= 16 * MIB, "REFER {refer}");
    assert_eq!(
        store.get_property("tank/c", "origin").unwrap().0,
        "tank/fs@s"
    );
    let c_big = store.resolve("tank/c/big").unwrap();
    assert_eq!(store.object_dnode(&c_big).unwrap().nlink, 2);
    assert_eq!(store.get_xattr(c_big.object, "user.tag").unwrap(), b"blue");

    // Writes to the clone: the origin (live and snapshot) does not see them.
    // (Random bytes: the clone compresses with lz4, as its parent does, not as the origin.)
    let mut fresh = vec![0u8; 4 * MIB as usize];
    rand::rngs::StdRng::seed_from_u64(3).fill_bytes(&mut fresh);
    put(&store, "tank/c/big", 0, &fresh);
    put(&store, "tank/c/new", 0, b"only in the clone");
    store.remove("tank/c/d/e/f3", false).unwrap();
    store.sync().unwrap();
    assert!(read_live(&store, "tank/fs/big") == big);
    assert_same(
        &read_snapshot(&store, &store.snapshot_view("tank/fs@s").unwrap()),
        &snap,
    );
    let c_used = used(&store, "tank/c");
    assert!(
        (4 * MIB..5 * MIB).contains(&c_used),
        "USED after a 4 MiB overwrite: {c_used}"
    );

    // Its origin snapshot stays while the clone exists.
    let e = store.snapshot_destroy("tank/fs@s").unwrap_err().to_string();
    assert!(e.contains("clones") && e.contains("tank/c"), "{e}");
    let e = store
        .dataset_destroy("tank/fs", true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("clones"), "{e}");

    // Re-import and scrub: everything reads back, nothing is damaged.
    store.close().unwrap();
    let store = open_store(&home);
    scrub_clean(&store);
    let mut want = snap.clone();
    want.remove("d/e/f3");
    want.insert("new".into(), b"only in the clone".to_vec());
    let mut b = big.clone();
    b[..4 * MIB as usize].copy_from_slice(&fresh);
    want.insert("big".into(), b.clone());
    want.insert("hard".into(), b);
    assert_same(&live_tree(&store, "tank/c"), &want);
    assert!(read_live(&store, "tank/fs/big") == big);

    // The clone's own snapshots, a clone of the clone, and their destroys never free a
    // block the origin snapshot holds.
    store
        .snapshot_create(&["tank/c@own".into()], false)
        .unwrap();
    store.clone_create("tank/c@own", "tank/cc").unwrap();
    let mut more = vec![0u8; 6 * MIB as usize];
    rand::rngs::StdRng::seed_from_u64(4).fill_bytes(&mut more);
    put(&store, "tank/c/big", 8 * MIB, &more);
    put(&store, "tank/cc/big", 2 * MIB, &more);
    store.sync().unwrap();
    store.dataset_destroy("tank/cc", false).unwrap();
    store.snapshot_destroy("tank/c@own").unwrap();
    for _ in 0..4 {
        store.sync().unwrap();
    }
    assert!(read_live(&store, "tank/fs/big") == big);
    assert_same(
        &read_snapshot(&store, &store.snapshot_view("tank/fs@s").unwrap()),
        &snap,
    );
    scrub_clean(&store);

    // Destroying the clone gives back its own blocks, and only those.
    let with_clone = store.space().alloc;
    store.dataset_destroy("tank/c", false).unwrap();
    for _ in 0..4 {
        store.sync().unwrap(); // (frees are deferred a few txgs)
    }
    let after = store.space().alloc;
    assert!(
        after < with_clone && after <= before_clone + (256 << 10),
        "{before_clone} {with_clone} {after}"
    );
    // Fill the freed space: were a block the origin holds freed, this would overwrite it.
    let mut filler = vec![0u8; 96 * MIB as usize];
    rand::rngs::StdRng::seed_from_u64(6).fill_bytes(&mut filler);
    put(&store, "tank/fs/filler", 0, &filler);
    store.sync().unwrap();
    assert!(read_live(&store, "tank/fs/big") == big);
    assert_same(
        &read_snapshot(&store, &store.snapshot_view("tank/fs@s").unwrap()),
        &snap,
    );
    store.snapshot_destroy("tank/fs@s").unwrap();
    scrub_clean(&store);
}

#[test]
fn a_volume_clone_is_a_writable_copy_of_its_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "", 1, 256 * MIB);
    let store = open_store(&home);
    store
        .dataset_create(
            "tank/vm",
            DatasetKind::Volume,
            Default::default(),
            Some(32 * MIB),
            false,
        )
        .unwrap();
    let vol = store.resolve("tank/vm").unwrap();
    let mut data = vec![0u8; 8 * MIB as usize];
    rand::rngs::StdRng::seed_from_u64(2).fill_bytes(&mut data);
    store.write(&vol, MIB, &data).unwrap();
    store
        .snapshot_create(&["tank/vm@gold".into()], false)
        .unwrap();
    store.clone_create("tank/vm@gold", "tank/vm2").unwrap();
    let vm2 = store.resolve("tank/vm2").unwrap();
    assert_eq!(store.object_dnode(&vm2).unwrap().size, 32 * MIB);
    let read = |r| {
        let mut buf = vec![0u8; 32 * MIB as usize];
        store.read(r, 0, &mut buf).unwrap();
        buf
    };
    let gold = read(&vol);
    assert!(read(&vm2) == gold);
    store.write(&vm2, 2 * MIB, &[9u8; 65536]).unwrap();
    store.sync().unwrap();
    assert!(read(&vol) == gold);
    assert_eq!(read(&vm2)[2 * MIB as usize], 9);
    // A snapshot of the pool's root dataset clones too.
    store.snapshot_create(&["tank@root".into()], false).unwrap();
    store.clone_create("tank@root", "tank/rootcopy").unwrap();
    let e = store
        .clone_create("tank/vm@gold", "other/x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("pool"), "{e}");
    let e = store
        .clone_create("tank/vm@gold", "tank/vm2")
        .unwrap_err()
        .to_string();
    assert!(e.contains("exists"), "{e}");
}

/// A clone rolled back to its own snapshot holds again the origin blocks it had
/// overwritten since: its USED is again only its own, and is what destroying it frees.
#[test]
fn a_clone_rolled_back_counts_what_it_shares_again() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "mirror", 2, 256 * MIB);
    let store = open_store(&home);
    new_fs(&store, "tank/fs");
    store.set_property("tank/fs", "compression", "off").unwrap();
    let mut big = vec![0u8; 4 * MIB as usize];
    rand::rngs::StdRng::seed_from_u64(1).fill_bytes(&mut big);
    put(&store, "tank/fs/big", 0, &big);
    store.snapshot_create(&["tank/fs@s".into()], false).unwrap();
    store.clone_create("tank/fs@s", "tank/c").unwrap();
    store.snapshot_create(&["tank/c@x".into()], false).unwrap();
    put(&store, "tank/c/big", 0, &big[..2 * MIB as usize / 2]);
    rand::rngs::StdRng::seed_from_u64(2).fill_bytes(&mut big);
    put(&store, "tank/c/big", 0, &big[..2 * MIB as usize]);
    store.sync().unwrap();
    assert!(
        used(&store, "tank/c") >= 2 * MIB,
        "{}",
        used(&store, "tank/c")
    );
    store.snapshot_rollback("tank/c@x", false).unwrap();
    settle(&store);
    let after = used(&store, "tank/c");
    assert!(after < 256 << 10, "USED after the rollback: {after}");
    let before = store.space().used;
    store.dataset_destroy("tank/c", true).unwrap();
    for _ in 0..4 {
        store.sync().unwrap();
    }
    let released = before - store.space().used;
    assert!(
        released.abs_diff(after) < 64 << 10,
        "USED {after}, released {released}"
    );
}
