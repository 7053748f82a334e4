//! Quotas, refquotas and reservations: writes past a limit fail with QuotaExceeded (EDQUOT)
//! or NoSpace, nothing else is lost, deletes still work, and AVAIL shows the limits.

mod common;

use std::collections::BTreeMap;

use cairn_objset::{DatasetKind, StoreError};
use common::*;

const MIB: u64 = 1 << 20;

fn write_mib(store: &cairn_objset::Store, path: &str, mib: u64) -> Result<(), StoreError> {
    store.create_file(path, true)?;
    let r = store.resolve(path)?;
    let chunk = vec![0x5au8; MIB as usize]; // (compression off below: every byte counts)
    for i in 0..mib {
        store.write(&r, i * MIB, &chunk)?;
    }
    Ok(())
}

fn fs(store: &cairn_objset::Store, name: &str, props: &[(&str, &str)]) {
    let mut p: BTreeMap<String, String> = BTreeMap::new();
    p.insert("compression".into(), "off".into());
    for (k, v) in props {
        p.insert(k.to_string(), v.to_string());
    }
    store
        .dataset_create(name, DatasetKind::Filesystem, p, None, false)
        .unwrap();
}

#[test]
fn quota_refquota_and_reservation_hold() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "mirror", 2, 512 * MIB);
    let store = open_store(&home);
    fs(&store, "tank/q", &[("quota", "20M")]);
    fs(&store, "tank/q/child", &[]);
    fs(&store, "tank/r", &[("refquota", "10M")]);

    // refquota: the dataset's own data.
    write_mib(&store, "tank/r/a", 6).unwrap();
    store.sync().unwrap();
    let err = write_mib(&store, "tank/r/b", 6).unwrap_err();
    assert!(matches!(err, StoreError::QuotaExceeded { .. }), "{err}");
    assert!(err.to_string().contains("refquota"), "{err}");
    let avail = store.dataset_info("tank/r").unwrap().avail;
    assert!(avail < 5 * MIB, "AVAIL {avail} within the refquota");

    // quota: the dataset and its children together.
    write_mib(&store, "tank/q/child/a", 12).unwrap();
    store.sync().unwrap();
    let err = write_mib(&store, "tank/q/b", 12).unwrap_err();
    assert!(matches!(err, StoreError::QuotaExceeded { .. }), "{err}");
    // Deleting makes room again.
    store.remove("tank/q/child/a", false).unwrap();
    store.remove("tank/q/b", false).unwrap();
    for _ in 0..3 {
        store.sync().unwrap();
    }
    write_mib(&store, "tank/q/b", 12).unwrap();

    // reservation: others' AVAIL shrinks by its unused part.
    let before = store.dataset_info("tank/r").unwrap().avail;
    let other_before = store.dataset_info("tank").unwrap().avail;
    fs(&store, "tank/res", &[("reservation", "100M")]);
    // (the root dataset too: its own files may not use a child's reservation, as in ZFS)
    let other_after = store.dataset_info("tank").unwrap().avail;
    assert!(
        other_before - other_after >= 99 * MIB,
        "{other_before} -> {other_after}"
    );
    assert!(store.dataset_info("tank/res").unwrap().avail >= 100 * MIB);
    assert_eq!(
        store.dataset_info("tank/r").unwrap().avail,
        before.min(other_after)
    );
    store.sync().unwrap();
    store.close().unwrap();
}

#[test]
fn quota_values_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "mirror", 2, 64 * MIB);
    let store = open_store(&home);
    store.set_property("tank", "quota", "1G").unwrap();
    assert_eq!(
        store.get_property("tank", "quota").unwrap().0,
        (1u64 << 30).to_string()
    );
    store.set_property("tank", "quota", "none").unwrap();
    assert!(store.set_property("tank", "quota", "lots").is_err());
    assert!(store.set_property("tank", "reservation", "-5").is_err());
}

/// `quota` counts snapshot space (as zfs's does), `refquota` does not: after a snapshot,
/// rewriting a file needs room for both copies under a quota, and AVAIL says so.
#[test]
fn quota_counts_what_snapshots_hold_and_refquota_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "mirror", 2, 512 * MIB);
    let store = open_store(&home);
    fs(&store, "tank/q", &[("quota", "10M")]);
    fs(&store, "tank/r", &[("refquota", "10M")]);
    for ds in ["tank/q", "tank/r"] {
        write_mib(&store, &format!("{ds}/a"), 6).unwrap();
        store.sync().unwrap();
        store.snapshot_create(&[format!("{ds}@s")], false).unwrap();
        // (Different bytes than before: a rewrite makes new blocks.)
        let r = store.resolve(&format!("{ds}/a")).unwrap();
        let result = (0..6).try_for_each(|i| store.write(&r, i * MIB, &[0xa5u8; MIB as usize]));
        let result = result.and_then(|()| store.sync().map(|_| ()));
        if ds == "tank/q" {
            let err = result.unwrap_err();
            assert!(matches!(err, StoreError::QuotaExceeded { .. }), "{err}");
            let avail = store.dataset_info(ds).unwrap().avail;
            assert!(
                avail <= 4 * MIB + 256 * 1024,
                "AVAIL {avail} counts the snapshot"
            );
        } else {
            result.unwrap();
        }
    }
    // Destroying the snapshot gives the room back.
    store.snapshot_destroy("tank/q@s").unwrap();
    let r = store.resolve("tank/q/a").unwrap();
    (0..6).for_each(|i| store.write(&r, i * MIB, &[0x77u8; MIB as usize]).unwrap());
    store.sync().unwrap();
}
