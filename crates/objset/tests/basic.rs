//! The object store's basic promises: what was synced reads back after re-opening, in every
//! layout, with holes, overwrites, truncation and deletion.

mod common;

use cairn_objset::DatasetKind;
use common::*;
use rand::{RngCore, SeedableRng};

const MIB: u64 = 1 << 20;

#[test]
fn files_survive_sync_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz2", 6, 128 * MIB);
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut big = vec![0u8; 3 * MIB as usize + 12345];
    rng.fill_bytes(&mut big);
    {
        let store = open_store(&home);
        let id = store.create_file("tank/a/b/big.bin", false).unwrap();
        let r = store.resolve("tank/a/b/big.bin").unwrap();
        assert_eq!(r.object, id);
        store.write(&r, 0, &big).unwrap();
        let small = store.create_file("tank/small.txt", false).unwrap();
        let rs = store.resolve("tank/small.txt").unwrap();
        assert_eq!(rs.object, small);
        store.write(&rs, 0, b"hello cairn").unwrap();
        // Readable before the sync (from dirty data) and after.
        let mut buf = vec![0u8; big.len()];
        assert_eq!(store.read(&r, 0, &mut buf).unwrap(), big.len());
        assert!(buf == big);
        store.sync().unwrap();
        let mut buf = vec![0u8; big.len()];
        assert_eq!(store.read(&r, 0, &mut buf).unwrap(), big.len());
        assert!(buf == big);
        store.close().unwrap();
    }
    let store = open_store(&home);
    let r = store.resolve("tank/a/b/big.bin").unwrap();
    let mut buf = vec![0u8; big.len() + 100];
    assert_eq!(store.read(&r, 0, &mut buf).unwrap(), big.len());
    assert!(buf[..big.len()] == big[..]);
    let rs = store.resolve("tank/small.txt").unwrap();
    let mut s = [0u8; 64];
    assert_eq!(store.read(&rs, 0, &mut s).unwrap(), 11);
    assert_eq!(&s[..11], b"hello cairn");
    let names: Vec<String> = store
        .list("tank")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["a", "small.txt"]);
}

#[test]
fn overwrite_truncate_holes_and_delete_free_space() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "mirror", 2, 128 * MIB);
    let store = open_store(&home);
    let base = store.space();
    store.create_file("tank/f", false).unwrap();
    let r = store.resolve("tank/f").unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    let mut data = vec![0u8; 8 * MIB as usize];
    rng.fill_bytes(&mut data);
    store.write(&r, 0, &data).unwrap();
    store.sync().unwrap();
    let after_write = store.space();
    assert!(
        after_write.used >= base.used + 8 * MIB,
        "{after_write:?} vs {base:?}"
    );
    // Overwrite the middle; the old blocks are freed (after the deferral).
    store.write(&r, 3 * MIB, &vec![7u8; MIB as usize]).unwrap();
    data[3 * MIB as usize..4 * MIB as usize].fill(7);
    // A hole past the end.
    store.write(&r, 20 * MIB, b"tail").unwrap();
    store.sync().unwrap();
    let mut buf = vec![1u8; 21 * MIB as usize];
    let n = store.read(&r, 0, &mut buf).unwrap();
    assert_eq!(n as u64, 20 * MIB + 4);
    assert!(buf[..data.len()] == data[..]);
    assert!(buf[data.len()..20 * MIB as usize].iter().all(|&b| b == 0));
    assert_eq!(&buf[20 * MIB as usize..n], b"tail");
    // Truncate into the middle of a block, then extend: the tail reads zeros.
    store.truncate(&r, MIB + 100).unwrap();
    store.truncate(&r, 2 * MIB).unwrap();
    store.sync().unwrap();
    let mut buf = vec![1u8; 2 * MIB as usize];
    store.read(&r, 0, &mut buf).unwrap();
    assert!(buf[..MIB as usize + 100] == data[..MIB as usize + 100]);
    assert!(buf[MIB as usize + 100..].iter().all(|&b| b == 0));
    // Delete: after enough txgs the space is back.
    store.remove("tank/f", false).unwrap();
    for _ in 0..4 {
        store.sync().unwrap();
    }
    let end = store.space();
    assert!(end.used <= base.used + MIB, "{end:?} vs {base:?}");
    assert!(store.resolve("tank/f").is_err());
}

#[test]
fn datasets_volumes_and_properties() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 128 * MIB);
    {
        let store = open_store(&home);
        store
            .dataset_create(
                "tank/home",
                DatasetKind::Filesystem,
                Default::default(),
                None,
                false,
            )
            .unwrap();
        store
            .set_property("tank/home", "compression", "zstd")
            .unwrap();
        store
            .dataset_create(
                "tank/home/alice",
                DatasetKind::Filesystem,
                Default::default(),
                None,
                false,
            )
            .unwrap();
        assert_eq!(
            store
                .get_property("tank/home/alice", "compression")
                .unwrap(),
            ("zstd".into(), "inherited from tank/home".into())
        );
        store
            .dataset_create(
                "tank/vol",
                DatasetKind::Volume,
                Default::default(),
                Some(64 * MIB),
                false,
            )
            .unwrap();
        let v = store.resolve("tank/vol").unwrap();
        store.write(&v, 5 * MIB, &[9u8; 4096]).unwrap();
        assert!(
            store.write(&v, 64 * MIB - 10, &[1u8; 20]).is_err(),
            "past the end"
        );
        let text: Vec<u8> = b"compressible text "
            .iter()
            .cycle()
            .take(4 * MIB as usize)
            .copied()
            .collect();
        store.create_file("tank/home/alice/notes", false).unwrap();
        let f = store.resolve("tank/home/alice/notes").unwrap();
        store.write(&f, 0, &text).unwrap();
        store.close().unwrap();
    }
    let store = open_store(&home);
    let info = store.dataset_info("tank/home").unwrap();
    assert!(info.compressratio > 4.0, "{info:?}");
    let v = store.resolve("tank/vol").unwrap();
    let mut buf = vec![0u8; 8192];
    store.read(&v, 5 * MIB - 4096, &mut buf).unwrap();
    assert!(buf[..4096].iter().all(|&b| b == 0) && buf[4096..].iter().all(|&b| b == 9));
    assert_eq!(
        store.dataset_info("tank/vol").unwrap().volsize,
        Some(64 * MIB)
    );
    assert!(
        store.dataset_destroy("tank/home", false).is_err(),
        "has children"
    );
    store.dataset_destroy("tank/home", true).unwrap();
    assert!(store.resolve("tank/home/alice/notes").is_err());
    store.set_property("tank", "readonly", "on").unwrap();
    assert!(store
        .create_file("tank/x", false)
        .unwrap_err()
        .to_string()
        .contains("read-only"));
}
