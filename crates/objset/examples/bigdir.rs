//! One directory of N entries (default 1,000,000) through the POSIX API (`make_node`,
//! `lookup`, `remove_name`): creates, random lookups and random removals, syncing every
//! 10,000 operations; prints the rates and what a sync writes at the start and at the end.
//!
//! ```text
//! cargo run --release -p cairn-objset --example bigdir [-- N [SYNC_EVERY [DIR]]]
//! ```
//! The pool is one sparse 32 GiB file in DIR (default: a temporary directory).

use std::time::{Duration, Instant};

use cairn_objset::dnode::ObjectKind;
use cairn_objset::posix::{NewNode, S_IFREG};
use cairn_objset::Store;
use cairn_pool::{CreateOptions, Home, Pool};
use rand::seq::SliceRandom;
use rand::SeedableRng;

fn name(i: usize) -> String {
    format!("file-{i:08}.dat")
}

fn written(store: &Store) -> u64 {
    store.pool().io_snapshot().total().2.write_bytes
}

/// Syncs; returns (bytes the pool wrote, time taken).
fn sync(store: &Store) -> (u64, Duration) {
    let (before, t) = (written(store), Instant::now());
    store.sync().expect("sync");
    (written(store) - before, t.elapsed())
}

fn rate(n: usize, d: Duration) -> String {
    format!("{:.0}", n as f64 / d.as_secs_f64())
}

fn kib(b: u64) -> String {
    format!("{:.1} KiB", b as f64 / 1024.0)
}

/// Bytes the sync after one single create writes, and the directory blocks it dirtied.
fn probe(store: &Store, dir: u64, tag: &str) -> (u64, u64) {
    let node = NewNode {
        kind: ObjectKind::File,
        mode: S_IFREG | 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
    };
    store.make_node(dir, tag, node, None).expect("probe");
    let dirty = store.dir_stats(dir).expect("stats").dirty_blocks;
    (sync(store).0, dirty)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(1_000_000, |a| a.parse().expect("N"));
    let every: usize = args
        .get(2)
        .map_or(10_000, |a| a.parse().expect("SYNC_EVERY"));
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = args
        .get(3)
        .map_or_else(|| tmp.path().to_path_buf(), std::path::PathBuf::from);
    let file = base.join("bigdir-leaf");
    std::fs::File::create(&file)
        .and_then(|f| f.set_len(32 << 30))
        .expect("leaf file");
    let home = Home::at(base.join("home"));
    Pool::create(
        &home,
        "tank",
        &[file.display().to_string()],
        CreateOptions::default(),
    )
    .expect("pool");
    let store = Store::open(Pool::open(&home, "tank").expect("open")).expect("store");
    let dir = store.fs_root("tank").expect("root").1;
    let node = NewNode {
        kind: ObjectKind::File,
        mode: S_IFREG | 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
    };
    println!("bigdir: {n} entries in one directory, a sync every {every} operations");
    println!();
    println!(
        "{:>9} {:>11} {:>14} {:>17} {:>10}",
        "entries", "creates/s", "batch sync", "dir blocks dirty", "sync time"
    );

    // ---- creates ----
    let mut objects = Vec::with_capacity(n);
    let mut first_batch = None;
    let mut last_batch = (0, 0, 0);
    let mut probe_start = None;
    let started = Instant::now();
    let mut batch_start = Instant::now();
    let mut create_time = Duration::ZERO;
    let mut create_sync_time = Duration::ZERO;
    for i in 0..n {
        objects.push(
            store
                .make_node(dir, &name(i), node, None)
                .expect("create")
                .0,
        );
        if (i + 1) % every == 0 || i + 1 == n {
            let ops = i + 1 - last_batch.0;
            let t = batch_start.elapsed();
            let dirty = store.dir_stats(dir).expect("stats").dirty_blocks;
            let (bytes, took) = sync(&store);
            create_time += t + took;
            create_sync_time += took;
            if first_batch.is_none() {
                first_batch = Some((i + 1, bytes, dirty));
            }
            last_batch = (i + 1, bytes, dirty);
            if (i + 1) % (10 * every) == 0 || i + 1 == n || i + 1 == every {
                println!(
                    "{:>9} {:>11} {:>14} {:>17} {:>10.3?}",
                    i + 1,
                    rate(ops, t + took),
                    kib(bytes),
                    dirty,
                    took
                );
            }
            if probe_start.is_none() {
                probe_start = Some((i + 1, probe(&store, dir, "probe-start")));
            }
            batch_start = Instant::now();
        }
    }
    let probe_end = (n + 1, probe(&store, dir, "probe-end"));
    let peak = store.dir_stats(dir).expect("stats");
    let dir1_bytes: usize = 12 + (0..n).map(|i| 13 + name(i).len()).sum::<usize>();

    // ---- lookups, in random order ----
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    order.shuffle(&mut rng);
    let t = Instant::now();
    for &i in &order {
        let (id, _) = store.lookup(dir, &name(i)).expect("lookup");
        assert_eq!(id, objects[i]);
    }
    let lookup_time = t.elapsed();

    // ---- removals, in another random order ----
    order.shuffle(&mut rng);
    let mut remove_syncs = Vec::new();
    let mut remove_sync_time = Duration::ZERO;
    let t = Instant::now();
    for (k, &i) in order.iter().enumerate() {
        let u = store.remove_name(dir, &name(i), false).expect("remove");
        store.free_orphan(u.object).expect("free");
        if (k + 1) % every == 0 {
            let dirty = store.dir_stats(dir).expect("stats").dirty_blocks;
            let (bytes, took) = sync(&store);
            remove_sync_time += took;
            remove_syncs.push((bytes, dirty));
        }
    }
    remove_sync_time += sync(&store).1;
    let remove_time = t.elapsed();
    let left = store.dir_stats(dir).expect("stats");
    assert_eq!(left.entries, 2, "the two probes are left");
    store.close().expect("close");

    let (ps_at, (ps_bytes, ps_dirty)) = probe_start.expect("one batch");
    let (pe_at, (pe_bytes, pe_dirty)) = probe_end;
    let fb = first_batch.expect("one batch");
    println!();
    println!(
        "create : {n} in {:.1?}: {} ops/s (syncs included; {:.1?} of it in syncs)",
        create_time,
        rate(n, create_time),
        create_sync_time
    );
    println!(
        "lookup : {n} in {:.1?}: {} ops/s (random order)",
        lookup_time,
        rate(n, lookup_time)
    );
    println!(
        "remove : {n} in {:.1?}: {} ops/s (random order, syncs included; {:.1?} of it in syncs)",
        remove_time,
        rate(n, remove_time),
        remove_sync_time
    );
    println!(
        "directory at {n}: DIR2, {} leaves, {} blocks, {} bytes (as one DIR1 list: {dir1_bytes} bytes); {} leaves in memory",
        peak.leaves, peak.blocks, peak.object_size, peak.cached_leaves
    );
    println!();
    println!("bytes the pool wrote for the sync after ONE create:");
    println!(
        "  at {ps_at:>9} entries: {:>12} ({ps_dirty} directory blocks dirty)",
        kib(ps_bytes)
    );
    println!(
        "  at {pe_at:>9} entries: {:>12} ({pe_dirty} directory blocks dirty)",
        kib(pe_bytes)
    );
    println!("bytes the pool wrote for the sync of a batch of {every} creates:");
    println!(
        "  first batch (to {:>9}): {:>12} ({} directory blocks dirty)",
        fb.0,
        kib(fb.1),
        fb.2
    );
    println!(
        "  last batch  (to {:>9}): {:>12} ({} directory blocks dirty)",
        last_batch.0,
        kib(last_batch.1),
        last_batch.2
    );
    if let (Some(a), Some(b)) = (remove_syncs.first(), remove_syncs.last()) {
        println!("bytes the pool wrote for the sync of a batch of {every} removals (and frees):");
        println!(
            "  first batch: {:>12} ({} directory blocks dirty)",
            kib(a.0),
            a.1
        );
        println!(
            "  last batch:  {:>12} ({} directory blocks dirty)",
            kib(b.0),
            b.1
        );
    }
    println!("total time {:.1?}", started.elapsed());
}
