//! Power cuts around `promote` (issue 16): the pool's leaves stop persisting at leaf write
//! N, for N spread over a workload of clone, promote, writes on both sides, snapshots, a
//! rollback to a moved snapshot and destroys; after a normal import the pool holds exactly a state some txg committed — each
//! dataset's files, its snapshots with their contents, its origin — and scrub finds nothing.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use cairn_objset::{Store, StoreError};
use cairn_vdev::PowerCut;
use common::*;
use rand::{RngCore, SeedableRng};

const MIB: u64 = 1 << 20;
const DATASETS: [&str; 2] = ["tank/fs", "tank/c"];

/// One dataset at a committed txg: files, snapshots (name → files), origin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Ds {
    live: Files,
    snaps: BTreeMap<String, Files>,
    origin: String,
}

type Model = BTreeMap<String, Ds>;
/// Every state a txg committed: txg → (model, leaf writes issued when it was committed).
type Committed = BTreeMap<u64, (Model, u64)>;

fn note(store: &Store, power: &PowerCut, model: &Model, committed: &mut Committed) {
    let txg = store.open_txg() - 1;
    let writes = power.writes.load(Ordering::SeqCst);
    committed.entry(txg).or_insert((model.clone(), writes));
}

fn read_model(store: &Store) -> Model {
    let mut m = Model::new();
    for ds in DATASETS {
        if store.datasets().by_name(ds).is_none() {
            continue;
        }
        let mut snaps = BTreeMap::new();
        for s in store.snapshots(Some(ds)).unwrap() {
            let short = s.name.split_once('@').unwrap().1.to_string();
            snaps.insert(
                short,
                read_snapshot(store, &store.snapshot_view(&s.name).unwrap()),
            );
        }
        let d = Ds {
            live: live_tree(store, ds),
            snaps,
            origin: store.get_property(ds, "origin").unwrap().0,
        };
        m.insert(ds.to_string(), d);
    }
    m
}

fn write(store: &Store, path: &str, seed: u64) -> Result<Vec<u8>, StoreError> {
    let mut data = vec![0u8; 20_000 + (seed as usize * 7919) % 90_000];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut data);
    store.create_file(path, true)?;
    store.write(&store.resolve(path)?, 0, &data)?;
    Ok(data)
}

/// Takes `ds@snap` in the store and the model.
fn snapshot(store: &Store, m: &mut Model, ds: &str, snap: &str) -> Result<(), StoreError> {
    store.snapshot_create(&[format!("{ds}@{snap}")], false)?;
    let d = m.get_mut(ds).expect("exists");
    d.snaps.insert(snap.to_string(), d.live.clone());
    Ok(())
}

fn ds<'a>(m: &'a mut Model, name: &str) -> &'a mut Ds {
    m.get_mut(name).expect("exists")
}

/// The workload, every committed state noted.
fn workload(store: &Store, power: &PowerCut, c: &mut Committed) -> Result<(), StoreError> {
    let mut m = read_model(store);
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        let data = write(store, &format!("tank/fs/{name}"), i as u64)?;
        ds(&mut m, "tank/fs").live.insert(name.to_string(), data);
    }
    store.sync()?;
    note(store, power, &m, c);
    snapshot(store, &mut m, "tank/fs", "s0")?;
    note(store, power, &m, c);
    let data = write(store, "tank/fs/a", 10)?;
    ds(&mut m, "tank/fs").live.insert("a".into(), data);
    store.sync()?;
    note(store, power, &m, c);
    snapshot(store, &mut m, "tank/fs", "s1")?;
    note(store, power, &m, c);
    store.clone_create("tank/fs@s1", "tank/c")?;
    let mut clone = Ds {
        live: m["tank/fs"].snaps["s1"].clone(),
        origin: "tank/fs@s1".into(),
        ..Ds::default()
    };
    clone.live.insert("b".into(), write(store, "tank/c/b", 11)?);
    store.remove("tank/c/c", false)?;
    clone.live.remove("c");
    m.insert("tank/c".into(), clone);
    store.sync()?;
    note(store, power, &m, c);

    store.promote("tank/c")?;
    let moved = std::mem::take(&mut ds(&mut m, "tank/fs").snaps);
    ds(&mut m, "tank/fs").origin = "tank/c@s1".into();
    let cm = m.get_mut("tank/c").expect("exists");
    cm.snaps = moved;
    cm.origin = "-".into();
    note(store, power, &m, c);

    let data = write(store, "tank/fs/a", 12)?;
    ds(&mut m, "tank/fs").live.insert("a".into(), data);
    let data = write(store, "tank/c/a", 13)?;
    m.get_mut("tank/c")
        .expect("exists")
        .live
        .insert("a".into(), data);
    store.sync()?;
    note(store, power, &m, c);
    snapshot(store, &mut m, "tank/c", "t")?;
    note(store, power, &m, c);

    // A rollback to a snapshot that came by the promote (`crate::rollback_moved`).
    let data = write(store, "tank/c/x", 14)?;
    ds(&mut m, "tank/c").live.insert("x".into(), data);
    store.sync()?;
    note(store, power, &m, c);
    store.snapshot_destroy("tank/c@t")?;
    ds(&mut m, "tank/c").snaps.remove("t");
    note(store, power, &m, c);
    store.snapshot_rollback("tank/c@s1", false)?;
    let cm = ds(&mut m, "tank/c");
    cm.live = cm.snaps["s1"].clone();
    note(store, power, &m, c);
    store.dataset_destroy("tank/fs", true)?;
    m.remove("tank/fs");
    store.sync()?;
    note(store, power, &m, c);
    store.snapshot_destroy("tank/c@s0")?;
    m.get_mut("tank/c").expect("exists").snaps.remove("s0");
    note(store, power, &m, c);
    Ok(())
}

/// Runs the workload over leaves that stop persisting at write `limit`, re-imports and
/// checks; returns the leaf writes of the whole workload.
fn cut_at(limit: u64, tear: bool) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    {
        let store = open_store(&home);
        new_fs(&store, "tank/fs");
        store.close().unwrap();
    }
    let power = PowerCut::new(limit, tear);
    let store = Store::open(open_with_power_cut(&home, &power)).unwrap();
    let mut committed = Committed::new();
    note(&store, &power, &read_model(&store), &mut committed);
    let outcome = workload(&store, &power, &mut committed);
    if limit == u64::MAX {
        outcome.unwrap();
    }
    let total = power.writes.load(Ordering::SeqCst);
    drop(store);
    check(&home, &committed, limit);
    total
}

fn check(home: &cairn_pool::Home, committed: &Committed, limit: u64) {
    let (opened, before, after) = states_around_cut(home, committed, limit);
    let store = open_store(home);
    let got = read_model(&store);
    let describe = |m: &Model| {
        m.iter()
            .map(|(d, x)| format!("{d}: {:?} {:?} {}", x.live.keys(), x.snaps.keys(), x.origin))
            .collect::<Vec<_>>()
            .join("; ")
    };
    assert!(
        Some(&got) == before || Some(&got) == after,
        "limit {limit}: txg {opened} holds neither the state before its operation nor after\n \
         got    {}\n before {}\n after  {}",
        describe(&got),
        before.map(describe).unwrap_or_default(),
        after.map(describe).unwrap_or_default()
    );
    scrub_after_cut(&store, limit);
}

#[test]
fn power_cuts_around_a_promote_leave_a_committed_state() {
    let total = cut_at(u64::MAX, false);
    assert!(total > 50, "{total} leaf writes");
    // About 100 cut points over the workload, every other one tearing its write.
    let step = (total / 100).max(1);
    let (mut cuts, mut limit) = (0, 0);
    while limit < total {
        cut_at(limit, cuts % 2 == 1);
        limit += step;
        cuts += 1;
    }
    eprintln!("{cuts} power cuts over {total} leaf writes");
}
