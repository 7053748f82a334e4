//! Power cuts during snapshot create and destroy, send and receive (issue 16): the pool's
//! leaves stop persisting at leaf write N, for every N of a workload; after a normal
//! import the pool is exactly one of the states a txg committed — live files, the set of
//! snapshots and each one's contents, the received dataset — no older than the last one
//! committed before the cut, and scrub finds nothing.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use cairn_objset::receive::ReceiveOptions;
use cairn_objset::send::SendOptions;
use cairn_objset::{DatasetKind, Store};
use cairn_vdev::PowerCut;
use common::*;
use rand::{Rng, RngCore, SeedableRng};

const MIB: u64 = 1 << 20;

/// What the pool holds at a committed txg.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Model {
    live: Files,
    snaps: BTreeMap<String, Files>,
    /// The received copy: its snapshots and live files (None: not received yet).
    received: Option<(BTreeMap<String, Files>, Files)>,
}

/// Every state a txg committed: txg → (model, leaf writes issued when it was committed).
type Committed = BTreeMap<u64, (Model, u64)>;

fn note(store: &Store, power: &PowerCut, model: &Model, committed: &mut Committed) {
    let txg = store.open_txg() - 1;
    let writes = power.writes.load(Ordering::SeqCst);
    committed.entry(txg).or_insert((model.clone(), writes));
}

fn live_files(store: &Store, ds: &str) -> Files {
    let mut out = Files::new();
    for e in store.list(ds).unwrap_or_default() {
        let path = format!("{ds}/{}", e.name);
        out.insert(e.name.clone(), read_live(store, &path));
    }
    out
}

fn snapshots_of(store: &Store, ds: &str) -> BTreeMap<String, Files> {
    let mut out = BTreeMap::new();
    for s in store.snapshots(Some(ds)).unwrap_or_default() {
        let v = store.snapshot_view(&s.name).unwrap();
        let short = s.name.split_once('@').unwrap().1.to_string();
        out.insert(short, read_snapshot(store, &v));
    }
    out
}

fn transfer(store: &Store, snap: &str, from: Option<&str>) -> Result<(), cairn_objset::StoreError> {
    let mut stream = Vec::new();
    let opts = SendOptions {
        from: from.map(str::to_string),
        ..Default::default()
    };
    store.send(snap, &opts, &mut stream)?;
    store.receive("tank/rcv", &ReceiveOptions::default(), &mut &stream[..])?;
    Ok(())
}

/// The workload: files written, snapshots taken and destroyed, a full and an incremental
/// send received; every committed state noted.
fn workload(
    store: &Store,
    power: &PowerCut,
    committed: &mut Committed,
) -> Result<(), cairn_objset::StoreError> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut m = Model::default();
    for round in 0..6 {
        for _ in 0..2 {
            let name = format!("f{}", rng.gen_range(0..4));
            let mut data = vec![0u8; rng.gen_range(1..150_000)];
            rng.fill_bytes(&mut data);
            store.create_file(&format!("tank/fs/{name}"), true)?;
            let r = store.resolve(&format!("tank/fs/{name}"))?;
            store.write(&r, 0, &data)?;
            m.live.insert(name, data);
        }
        store.sync()?;
        note(store, power, &m, committed);
        let snap = format!("s{round}");
        store.snapshot_create(&[format!("tank/fs@{snap}")], false)?;
        m.snaps.insert(snap, m.live.clone());
        note(store, power, &m, committed);
        if round == 2 {
            transfer(store, "tank/fs@s2", None)?;
            m.received = Some((
                BTreeMap::from([("s2".to_string(), m.snaps["s2"].clone())]),
                m.snaps["s2"].clone(),
            ));
            note(store, power, &m, committed);
        }
        if round == 4 {
            transfer(store, "tank/fs@s4", Some("@s2"))?;
            let (snaps, live) = m.received.as_mut().expect("received at round 2");
            snaps.insert("s4".to_string(), m.snaps["s4"].clone());
            *live = m.snaps["s4"].clone();
            note(store, power, &m, committed);
        }
        if round % 2 == 1 {
            let oldest = m.snaps.keys().next().cloned().expect("one was just taken");
            if oldest != "s2" {
                store.snapshot_destroy(&format!("tank/fs@{oldest}"))?;
                m.snaps.remove(&oldest);
                note(store, power, &m, committed);
            }
        }
    }
    Ok(())
}

/// Runs the workload over leaves that stop persisting at write `limit`, re-imports and
/// checks; returns the leaf writes of the whole workload.
fn cut_at(limit: u64, tear: bool) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    {
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
        store.close().unwrap();
    }
    let power = PowerCut::new(limit, tear);
    let pool = open_with_power_cut(&home, &power);
    let store = Store::open(pool).unwrap();
    let mut committed = Committed::new();
    note(&store, &power, &Model::default(), &mut committed);
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
    let got = Model {
        live: live_files(&store, "tank/fs"),
        snaps: snapshots_of(&store, "tank/fs"),
        received: store.resolve("tank/rcv").ok().map(|_| {
            (
                snapshots_of(&store, "tank/rcv"),
                live_files(&store, "tank/rcv"),
            )
        }),
    };
    if Some(&got) != before && Some(&got) != after {
        let noted: Vec<u64> = committed.keys().copied().collect();
        let describe = |m: &Model| {
            format!(
                "live {:?}, snaps {:?}, received {:?}",
                m.live.keys().collect::<Vec<_>>(),
                m.snaps.keys().collect::<Vec<_>>(),
                m.received
                    .as_ref()
                    .map(|(s, l)| (s.keys().collect::<Vec<_>>(), l.keys().collect::<Vec<_>>()))
            )
        };
        panic!(
            "limit {limit}: txg {opened} holds neither the state before its operation nor after \
             (noted txgs {noted:?})\n got    {}\n before {}\n after  {}",
            describe(&got),
            before.map(describe).unwrap_or_default(),
            after.map(describe).unwrap_or_default()
        );
    }
    scrub_after_cut(&store, limit);
}

#[test]
fn power_cuts_during_snapshots_destroys_and_receives_leave_a_committed_state() {
    let total = cut_at(u64::MAX, false);
    assert!(total > 50, "{total} leaf writes");
    // About 120 cut points over the workload, every other one tearing its write.
    let step = (total / 120).max(1);
    let mut cuts = 0;
    let mut limit = 0;
    while limit < total {
        cut_at(limit, cuts % 2 == 1);
        limit += step;
        cuts += 1;
    }
    eprintln!("{cuts} power cuts over {total} leaf writes");
}
