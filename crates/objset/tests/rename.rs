//! `rename`: a dataset moves with its descendants and snapshots (under another parent too),
//! clones keep naming their origin, a snapshot is renamed (in descendants with `-r`), and
//! what cannot be done is refused with nothing changed; all of it survives a re-import.

mod common;

use common::*;

fn origin(store: &cairn_objset::Store, ds: &str) -> String {
    store.get_property(ds, "origin").unwrap().0
}

#[test]
fn datasets_and_snapshots_are_renamed_and_clones_follow() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "", 1, 128 << 20);
    let store = open_store(&home);
    for ds in ["tank/fs", "tank/fs/sub", "tank/other"] {
        new_fs(&store, ds);
    }
    for p in ["tank/fs/a", "tank/fs/sub/b"] {
        store.create_file(p, false).unwrap();
        store
            .write(&store.resolve(p).unwrap(), 0, p.as_bytes())
            .unwrap();
    }
    store.snapshot_create(&["tank/fs@s".into()], true).unwrap();
    store.clone_create("tank/fs@s", "tank/c").unwrap();
    store.clone_create("tank/fs/sub@s", "tank/c2").unwrap();

    // A dataset moves below another parent with its child, snapshots and clones' origins.
    store
        .dataset_rename("tank/fs", "tank/other/fs", false)
        .unwrap();
    assert_eq!(read_live(&store, "tank/other/fs/a"), b"tank/fs/a");
    assert_eq!(read_live(&store, "tank/other/fs/sub/b"), b"tank/fs/sub/b");
    let v = store.snapshot_view("tank/other/fs/sub@s").unwrap();
    assert_eq!(read_snapshot(&store, &v)["b"], b"tank/fs/sub/b");
    assert_eq!(origin(&store, "tank/c"), "tank/other/fs@s");
    assert_eq!(origin(&store, "tank/c2"), "tank/other/fs/sub@s");
    let e = store.snapshot_destroy("tank/other/fs@s").unwrap_err();
    assert!(e.to_string().contains("tank/c"), "{e}");

    // Snapshots: one, then every descendant's with -r.
    store
        .snapshot_rename("tank/other/fs@s", "@t", false)
        .unwrap();
    assert_eq!(origin(&store, "tank/c"), "tank/other/fs@t");
    assert!(store.snapshot_view("tank/other/fs/sub@s").is_ok());
    store
        .snapshot_rename("tank/other/fs@t", "tank/other/fs@u", true)
        .unwrap();
    assert!(store.snapshot_view("tank/other/fs/sub@s").is_ok());
    store
        .snapshot_rename("tank/other/fs/sub@s", "@u", false)
        .unwrap();
    store
        .snapshot_rename("tank/other/fs@u", "@v", true)
        .unwrap();
    assert!(store.snapshot_view("tank/other/fs/sub@v").is_ok());
    assert_eq!(origin(&store, "tank/c2"), "tank/other/fs/sub@v");

    // Refused, nothing changed.
    let refuse = |r: Result<(), cairn_objset::StoreError>, want: &str| {
        let e = r.unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    };
    refuse(
        store.dataset_rename("tank/other", "tank/c", false),
        "exists",
    );
    refuse(
        store.dataset_rename("tank/other", "tank/other/x", false),
        "below itself",
    );
    refuse(store.dataset_rename("tank", "tank2", false), "root dataset");
    refuse(
        store.dataset_rename("tank/c", "other/c", false),
        "within its pool",
    );
    refuse(
        store.dataset_rename("tank/c", "tank/no/c", false),
        "rename -p",
    );
    refuse(
        store.snapshot_rename("tank/other/fs@v", "@v", false),
        "exists",
    );
    refuse(
        store.snapshot_rename("tank/other/fs@v", "tank/c@w", false),
        "keeps its dataset",
    );
    refuse(
        store.snapshot_rename("tank/other/fs@none", "@w", false),
        "none",
    );
    store
        .dataset_rename("tank/c", "tank/deep/er/c", true)
        .unwrap();

    store.close().unwrap();
    let store = open_store(&home);
    assert_eq!(origin(&store, "tank/deep/er/c"), "tank/other/fs@v");
    assert_eq!(read_live(&store, "tank/deep/er/c/a"), b"tank/fs/a");
    let names: Vec<String> = store
        .datasets()
        .datasets
        .iter()
        .map(|d| d.name.clone())
        .collect();
    assert!(!names.iter().any(|n| n.starts_with("tank/fs")), "{names:?}");
    scrub_clean(&store);
}
