//! Degraded operation, dirty time logs and resilver: leaves fail mid-write, the pool keeps
//! going, failed leaves are replaced (or come back) and resilvered; afterwards a scrub
//! finds nothing to repair and every byte reads back.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use cairn_objset::resilver::{ResilverEnd, ResilverOptions, ResilverProgress};
use cairn_objset::scrub::{ScrubControl, ScrubEnd, ScrubProgress};
use cairn_objset::Store;
use cairn_pool::{Health, Home, Pool};
use cairn_vdev::{FaultLeaf, FaultSwitches, Leaf};
use common::*;
use rand::{Rng, SeedableRng};

const MIB: u64 = 1 << 20;

type Files = BTreeMap<String, Vec<u8>>;

fn write_files(store: &Store, rng: &mut impl Rng, prefix: &str, n: usize, max: usize) -> Files {
    let mut files = BTreeMap::new();
    for i in 0..n {
        let path = format!("tank/{prefix}{i}");
        let mut data = vec![0u8; rng.gen_range(max / 2..=max)];
        rng.fill_bytes(&mut data);
        store.create_file(&path, true).unwrap();
        let r = store.resolve(&path).unwrap();
        store.write(&r, 0, &data).unwrap();
        files.insert(path, data);
        if i % 4 == 3 {
            store.sync().unwrap();
        }
    }
    store.sync().unwrap();
    files
}

fn check_files(store: &Store, files: &Files) {
    for (path, data) in files {
        let r = store
            .resolve(path)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut buf = vec![0u8; data.len() + 1];
        let n = store
            .read(&r, 0, &mut buf)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(n, data.len(), "{path}");
        assert!(buf[..n] == data[..], "{path} differs");
    }
}

fn scrub_all(store: &Store) -> ScrubProgress {
    let (p, end) = store
        .scrub(None, Duration::from_secs(3600), &mut |_| {
            ScrubControl::Continue
        })
        .unwrap();
    assert_eq!(end, ScrubEnd::Finished);
    p
}

fn resilver_all(store: &Store) -> ResilverProgress {
    let (p, end) = store
        .resilver(ResilverOptions::default(), &mut |_| ScrubControl::Continue)
        .unwrap();
    assert_eq!(end, ResilverEnd::Finished);
    p
}

/// Opens the pool with every leaf behind a fault switch.
fn open_with_switches(home: &Home) -> (Store, Vec<Arc<FaultSwitches>>) {
    let mut pool = Pool::open(home, "tank").unwrap();
    let mut switches = Vec::new();
    for slot in pool.leaf_slots() {
        assert!(pool.wrap_leaf(slot, |inner| {
            let fault = FaultLeaf::new(inner);
            switches.push(fault.switches.clone());
            Arc::new(fault) as Arc<dyn Leaf>
        }));
    }
    (Store::open(pool).unwrap(), switches)
}

fn new_leaf(dir: &Path, name: &str, size: u64) -> PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(size).unwrap();
    p
}

/// Fails `failed` leaves of a pool mid-write (half vanish, half return EIO until faulted),
/// keeps writing, replaces them, resilvers, and checks scrub and data.
fn fail_replace_resilver(kind: &str, n: usize, failed: &[usize]) {
    let dir = tempfile::tempdir().unwrap();
    let (home, files) = new_pool(dir.path(), kind, n, 64 * MIB);
    let mut rng = rand::rngs::StdRng::seed_from_u64(n as u64 * 31 + failed.len() as u64);
    let (store, switches) = open_with_switches(&home);
    let mut model = write_files(&store, &mut rng, "a", 8, 600_000);
    for (k, &leaf) in failed.iter().enumerate() {
        if k % 2 == 0 {
            switches[leaf].vanished.store(true, Ordering::Relaxed);
        } else {
            switches[leaf].fail_writes.store(true, Ordering::Relaxed);
            switches[leaf].fail_reads.store(true, Ordering::Relaxed);
        }
    }
    // Writing and reading go on with the redundancy left.
    model.extend(write_files(&store, &mut rng, "b", 8, 600_000));
    model.extend(write_files(&store, &mut rng, "a", 3, 300_000));
    check_files(&store, &model);
    assert_eq!(store.pool().health(), Health::Degraded, "{kind}");
    for &leaf in failed {
        let child = store
            .pool()
            .tops()
            .iter()
            .flat_map(|t| t.children.iter())
            .nth(leaf)
            .unwrap();
        assert!(!child.is_usable(), "{kind}: leaf {leaf} should be out");
        assert!(
            !child.dtl_ranges().is_empty(),
            "{kind}: leaf {leaf} has no DTL"
        );
    }
    let mut pool = store.close().unwrap();
    for &leaf in failed {
        let new = new_leaf(dir.path(), &format!("new{leaf}"), 64 * MIB);
        pool.replace(
            &files[leaf].display().to_string(),
            Some(&new.display().to_string()),
            false,
        )
        .unwrap();
    }
    let store = Store::open(pool).unwrap();
    let p = resilver_all(&store);
    assert!(p.repaired_bytes > 0, "{kind}: {p:?}");
    assert_eq!(p.errors, 0, "{kind}: {p:?}");
    assert_eq!(store.pool().health(), Health::Online, "{kind}");
    check_files(&store, &model);
    let s = scrub_all(&store);
    assert_eq!(
        (s.errors, s.repaired_bytes),
        (0, 0),
        "{kind}: scrub after resilver {s:?}"
    );
    drop(store.close().unwrap());
    // From the disks alone, with the old leaves gone for good.
    for &leaf in failed {
        std::fs::remove_file(&files[leaf]).unwrap();
    }
    let store = open_store(&home);
    assert_eq!(store.pool().health(), Health::Online, "{kind}");
    check_files(&store, &model);
    let s = scrub_all(&store);
    assert_eq!(
        (s.errors, s.repaired_bytes),
        (0, 0),
        "{kind}: scrub after reopen {s:?}"
    );
}

/// A resilver of 4 MiB batches that saves its resume point at every report.
fn small_batches() -> ResilverOptions {
    ResilverOptions {
        checkpoint_every: Duration::ZERO,
        batch_bytes: 4 * MIB,
        ..ResilverOptions::default()
    }
}

/// Runs a resilver of 4 MiB batches that pauses at its first report (after one batch,
/// its resume point persisted), and returns how far it got.
fn pause_after_first_batch(store: &Store) -> ResilverProgress {
    let (p, end) = store
        .resilver(small_batches(), &mut |_| ScrubControl::Pause)
        .unwrap();
    assert_eq!(end, ResilverEnd::Paused, "{p:?}");
    p
}

#[test]
fn mirror2_loses_one_side_and_is_resilvered() {
    fail_replace_resilver("mirror", 2, &[1]);
}

#[test]
fn mirror3_loses_two_sides_and_is_resilvered() {
    fail_replace_resilver("mirror", 3, &[0, 2]);
}

#[test]
fn raidz1_loses_one_leaf_and_is_resilvered() {
    fail_replace_resilver("raidz1", 3, &[2]);
}

#[test]
fn raidz2_loses_two_leaves_and_is_resilvered() {
    fail_replace_resilver("raidz2", 6, &[1, 4]);
}

#[test]
fn raidz3_loses_three_leaves_and_is_resilvered() {
    fail_replace_resilver("raidz3", 7, &[0, 3, 6]);
}

/// A leaf that vanishes during a long write and comes back: only the txgs it missed are
/// copied to it.
#[test]
fn returning_leaf_resilvers_only_missed_txgs() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "mirror", 2, 128 * MIB);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let (store, switches) = open_with_switches(&home);
    let mut model = write_files(&store, &mut rng, "before", 24, 1 << 20);
    let before_bytes: usize = model.values().map(|d| d.len()).sum();
    let first_missed = store.open_txg();
    switches[1].vanished.store(true, Ordering::Relaxed);
    let missed = write_files(&store, &mut rng, "during", 6, 512 << 10);
    let missed_bytes: usize = missed.values().map(|d| d.len()).sum();
    model.extend(missed);
    let last_missed = store.open_txg() - 1;
    let dtl = store.pool().tops()[0].children[1].dtl_ranges();
    assert_eq!(dtl, vec![(first_missed, last_missed + 1)]);
    // Closing syncs once more, also missed.
    drop(store.close().unwrap());
    // Power back: the device is there on the next open, stale for its DTL.
    let store = open_store(&home);
    assert_eq!(
        store.pool().tops()[0].children[1].dtl_ranges(),
        vec![(first_missed, last_missed + 2)]
    );
    let p = resilver_all(&store);
    assert!(
        p.repaired_bytes as usize >= missed_bytes,
        "{p:?}: missed {missed_bytes}"
    );
    assert!(
        (p.repaired_bytes as usize) < missed_bytes + 4 * MIB as usize,
        "{p:?}: copied more than the missed txgs ({missed_bytes} bytes; {before_bytes} before)"
    );
    assert!(store.pool().tops()[0].children[1].dtl_ranges().is_empty());
    check_files(&store, &model);
    let s = scrub_all(&store);
    assert_eq!((s.errors, s.repaired_bytes), (0, 0), "{s:?}");
    // The returned side alone holds everything.
    drop(store.close().unwrap());
    let store = open_store(&home);
    drop(store);
    let mut pool = Pool::open(&home, "tank").unwrap();
    pool.offline(&pool.tops()[0].children[0].path.clone(), false)
        .unwrap();
    let store = Store::open(pool).unwrap();
    check_files(&store, &model);
}

/// A resilver stopped half way (the process dies) resumes from its checkpoint on the next
/// open and completes, while the pool takes writes.
#[test]
fn interrupted_resilver_resumes_and_completes() {
    let dir = tempfile::tempdir().unwrap();
    let (home, files) = new_pool(dir.path(), "raidz1", 3, 128 * MIB);
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let store = open_store(&home);
    let mut model = write_files(&store, &mut rng, "f", 48, 1 << 20);
    let mut pool = store.close().unwrap();
    let new = new_leaf(dir.path(), "new", 128 * MIB);
    pool.replace(
        &files[1].display().to_string(),
        Some(&new.display().to_string()),
        false,
    )
    .unwrap();
    let store = Store::open(pool).unwrap();
    let first = pause_after_first_batch(&store);
    // 4 MiB batches: the first stops a few files in.
    assert!(first.next_object > 1 && first.next_object < 30, "{first:?}");
    // "Crash": the store goes away without syncing or finishing.
    drop(store);
    let pool = Pool::open(&home, "tank").unwrap();
    let checkpoint = pool.resilver_checkpoint().expect("resume point persisted");
    assert_eq!(checkpoint.next_object, first.next_object);
    assert!(pool.needs_resilver());
    let store = Store::open(pool).unwrap();
    let during = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(12);
            write_files(&store, &mut rng, "g", 6, 256 << 10)
        });
        let p = resilver_all(&store);
        assert!(p.repaired_bytes > 0);
        (writer.join().unwrap(), p)
    });
    let (during, p) = during;
    model.extend(during);
    assert!(!store.pool().needs_resilver());
    assert!(store.pool().resilver_checkpoint().is_none());
    // Its record (`status`'s `scan:` line) is kept in the labels.
    let record = store.pool().scan_records().last_resilver.expect("recorded");
    assert_eq!(record.repaired_bytes, p.repaired_bytes);
    drop(store.close().unwrap());
    let store = Store::open(Pool::open(&home, "tank").unwrap()).unwrap();
    assert_eq!(store.pool().scan_records().last_resilver, Some(record));
    check_files(&store, &model);
    let s = scrub_all(&store);
    assert_eq!((s.errors, s.repaired_bytes), (0, 0), "{s:?}");
}

/// A resume point holds for the leaves it was copying to: a leaf that needs a resilver
/// since (here a second replace while the first was paused) makes the next resilver walk
/// from the start, so the new leaf gets the blocks before the old position too.
#[test]
fn a_leaf_added_to_a_paused_resilver_gets_everything() {
    let dir = tempfile::tempdir().unwrap();
    let (home, files) = new_pool(dir.path(), "mirror", 3, 128 * MIB);
    let mut rng = rand::rngs::StdRng::seed_from_u64(31);
    let store = open_store(&home);
    let model = write_files(&store, &mut rng, "f", 48, 1 << 20);
    let mut pool = store.close().unwrap();
    let (n1, n2) = (
        new_leaf(dir.path(), "n1", 128 * MIB),
        new_leaf(dir.path(), "n2", 128 * MIB),
    );
    let path = |p: &Path| p.display().to_string();
    pool.replace(&path(&files[1]), Some(&path(&n1)), false)
        .unwrap();
    let store = Store::open(pool).unwrap();
    let first = pause_after_first_batch(&store);
    assert!(first.next_object > 1, "{first:?}");
    let mut pool = store.close().unwrap();
    pool.replace(&path(&files[2]), Some(&path(&n2)), false)
        .unwrap();
    let store = Store::open(pool).unwrap();
    resilver_all(&store);
    assert!(!store.pool().needs_resilver());
    // Only n2 left: every file must read from it.
    let mut pool = store.close().unwrap();
    pool.offline(&path(&files[0]), false).unwrap();
    pool.offline(&path(&n1), false).unwrap();
    let store = Store::open(pool).unwrap();
    check_files(&store, &model);
    let s = scrub_all(&store);
    assert_eq!(s.errors, 0, "{s:?}");
}

/// A leaf that keeps failing is FAULTED after a bounded number of errors; `clear` lifts the
/// fault and the resilver copies the txgs it missed.
#[test]
fn failing_leaf_is_faulted_then_cleared_and_resilvered() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz2", 6, 64 * MIB);
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let (store, switches) = open_with_switches(&home);
    let mut model = write_files(&store, &mut rng, "a", 6, 400_000);
    switches[3].fail_writes.store(true, Ordering::Relaxed);
    model.extend(write_files(&store, &mut rng, "b", 6, 400_000));
    let child = &store.pool().tops()[0].children[3];
    assert_eq!(Pool::leaf_health(child), Health::Faulted);
    assert!(child.stats.snapshot().1 >= cairn_vdev::top::FAULT_AFTER_ERRORS);
    assert!(!child.dtl_ranges().is_empty());
    let status = cairn_pool::status::render_status(store.pool(), false);
    assert!(
        status.contains("too many errors") && status.contains("cairn clear"),
        "{status}"
    );
    // The disk is fine again (a loose cable): clear.
    switches[3].fail_writes.store(false, Ordering::Relaxed);
    let mut pool = store.close().unwrap();
    pool.clear_device(None).unwrap();
    assert!(pool.needs_resilver());
    let store = Store::open(pool).unwrap();
    resilver_all(&store);
    assert_eq!(store.pool().health(), Health::Online);
    check_files(&store, &model);
    let s = scrub_all(&store);
    assert_eq!((s.errors, s.repaired_bytes), (0, 0), "{s:?}");
}

/// Power is cut in the middle of a resilver (writes stop reaching the disks while the
/// process carries on); after the reboot the resilver resumes from the last checkpoint
/// that reached the disks, and an export/import in between keeps the resume point too.
#[test]
fn resilver_survives_power_cut_and_export() {
    let dir = tempfile::tempdir().unwrap();
    let (home, files) = new_pool(dir.path(), "mirror", 2, 128 * MIB);
    let mut rng = rand::rngs::StdRng::seed_from_u64(31);
    let store = open_store(&home);
    let model = write_files(&store, &mut rng, "f", 40, 1 << 20);
    let mut pool = store.close().unwrap();
    let new = new_leaf(dir.path(), "new", 128 * MIB);
    pool.replace(
        &files[1].display().to_string(),
        Some(&new.display().to_string()),
        false,
    )
    .unwrap();
    // First stretch, then export and import: the resume point travels in the labels.
    let store = Store::open(pool).unwrap();
    let first = pause_after_first_batch(&store);
    store.close().unwrap().export().unwrap();
    let pool = Pool::import(&home, &[dir.path().to_path_buf()], "tank", false, false).unwrap();
    assert_eq!(
        pool.resilver_checkpoint().map(|c| c.next_object),
        Some(first.next_object)
    );
    // Second stretch under a power cut a few hundred writes in.
    let power = cairn_vdev::PowerCut::new(u64::MAX, false);
    let mut pool = pool;
    for slot in pool.leaf_slots() {
        assert!(pool.wrap_leaf(slot, |inner| {
            Arc::new(cairn_vdev::CrashLeaf::new(inner, power.clone())) as Arc<dyn Leaf>
        }));
    }
    let store = Store::open(pool).unwrap();
    let mut checkpoints = 0;
    let opts = small_batches();
    let result = store.resilver(opts, &mut |_| {
        checkpoints += 1;
        if checkpoints == 2 {
            let now = power.writes.load(Ordering::SeqCst);
            power.persist_limit.store(now + 5, Ordering::SeqCst);
        }
        ScrubControl::Continue
    });
    assert!(result.is_ok(), "{result:?}");
    drop(store);
    // Reboot: the disks hold an unfinished resilver.
    let pool = Pool::open(&home, "tank").unwrap();
    assert!(pool.needs_resilver(), "the finish never reached the disks");
    let resumed_at = pool
        .resilver_checkpoint()
        .expect("resume point")
        .next_object;
    assert!(
        resumed_at > first.next_object,
        "{resumed_at} vs {}",
        first.next_object
    );
    let store = Store::open(pool).unwrap();
    resilver_all(&store);
    check_files(&store, &model);
    let s = scrub_all(&store);
    assert_eq!((s.errors, s.repaired_bytes), (0, 0), "{s:?}");
    // The new side alone holds everything.
    drop(store.close().unwrap());
    let mut pool = Pool::open(&home, "tank").unwrap();
    pool.offline(&files[0].display().to_string(), false)
        .unwrap();
    let store = Store::open(pool).unwrap();
    check_files(&store, &model);
}

/// The rate knob bounds how fast a resilver writes.
#[test]
fn resilver_rate_limit_is_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let (home, files) = new_pool(dir.path(), "mirror", 2, 64 * MIB);
    let mut rng = rand::rngs::StdRng::seed_from_u64(41);
    let store = open_store(&home);
    let model = write_files(&store, &mut rng, "f", 8, 1 << 20);
    let mut pool = store.close().unwrap();
    pool.replace(&files[1].display().to_string(), None, false)
        .unwrap();
    let store = Store::open(pool).unwrap();
    let rate = 16 * MIB;
    let opts = ResilverOptions {
        rate: Some(rate),
        batch_bytes: MIB,
        ..ResilverOptions::default()
    };
    let started = std::time::Instant::now();
    let (p, end) = store
        .resilver(opts, &mut |_| ScrubControl::Continue)
        .unwrap();
    assert_eq!(end, ResilverEnd::Finished);
    // The last batch (at most two files) is written after the last throttle point.
    let floor = p.repaired_bytes.saturating_sub(2 * MIB) as f64 / rate as f64;
    assert!(
        started.elapsed().as_secs_f64() >= floor,
        "{p:?} in {:?}, expected at least {floor} s",
        started.elapsed()
    );
    check_files(&store, &model);
}

/// While a new leaf is resilvered, blocks it already holds can be read from it: with the
/// old side gone half way through, files already copied still read back.
#[test]
fn blocks_already_resilvered_are_read_from_the_new_leaf() {
    let dir = tempfile::tempdir().unwrap();
    let (home, files) = new_pool(dir.path(), "mirror", 2, 128 * MIB);
    let mut rng = rand::rngs::StdRng::seed_from_u64(51);
    let store = open_store(&home);
    let model = write_files(&store, &mut rng, "f", 40, 1 << 20);
    let mut pool = store.close().unwrap();
    let new = new_leaf(dir.path(), "new", 128 * MIB);
    pool.replace(
        &files[1].display().to_string(),
        Some(&new.display().to_string()),
        false,
    )
    .unwrap();
    drop(pool);
    let (store, switches) = open_with_switches(&home);
    pause_after_first_batch(&store);
    // The old side vanishes: only the new leaf is left.
    switches[0].vanished.store(true, Ordering::Relaxed);
    let first = "tank/f0".to_string();
    check_files(
        &store,
        &BTreeMap::from([(first.clone(), model[&first].clone())]),
    );
    let last = store.resolve("tank/f39").unwrap();
    let mut buf = vec![0u8; 1 << 20];
    assert!(
        store.read(&last, 0, &mut buf).is_err(),
        "f39 was not resilvered yet: the new leaf must not serve it"
    );
}

/// A pool of `kind` over `n` leaves with one hot spare `s0`, every leaf behind a fault
/// switch (the spare is not: it stands in for a failed leaf).
fn pool_with_spare(dir: &Path, kind: &str, n: usize) -> (Home, Vec<PathBuf>, PathBuf) {
    let files = make_files(dir, n, 64 * MIB);
    let spare = new_leaf(dir, "s0", 64 * MIB);
    let home = Home::at(dir.join("home"));
    let mut tokens = vec![kind.to_string()];
    tokens.extend(files.iter().map(|f| f.display().to_string()));
    tokens.push("spare".into());
    tokens.push(spare.display().to_string());
    Pool::create(&home, "tank", &tokens, cairn_pool::CreateOptions::default()).unwrap();
    (home, files, spare)
}

/// A leaf starts failing every I/O in the middle of a write workload: at the next txg
/// sync the hot spare takes its slot (a `spare-N` group, in the labels too), a resilver
/// that runs while writes go on fills the spare, and everything reads back and scrubs
/// clean, without reopening the pool. A re-import shows the spare in use; `replace` of the
/// failed leaf puts a new disk in the slot and the spare is AVAIL again.
fn spare_takes_over_at_run_time(kind: &str, n: usize, failing: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (home, files, spare) = pool_with_spare(dir.path(), kind, n);
    let failed_path = files[failing].display().to_string();
    let spare_path = spare.display().to_string();
    let mut rng = rand::rngs::StdRng::seed_from_u64(n as u64 * 7 + failing as u64);
    let (store, switches) = open_with_switches(&home);
    let mut model = write_files(&store, &mut rng, "a", 6, 400_000);
    let slot = || &store.pool().tops()[0].children[failing];
    assert!(slot().spare().is_none());
    switches[failing].fail_writes.store(true, Ordering::Relaxed);
    switches[failing].fail_reads.store(true, Ordering::Relaxed);
    model.extend(write_files(&store, &mut rng, "b", 6, 400_000));
    // The leaf failed for good and the spare stands in for it: the leaf is FAULTED, the
    // spare (stale, everything to copy) serves the slot.
    let failed = slot()
        .replaced()
        .expect("a spare took the failed leaf's slot");
    assert_eq!(Pool::leaf_health(failed), Health::Faulted, "{kind}");
    assert_eq!(failed.path, failed_path);
    assert_eq!(slot().path, spare_path, "{kind}: I/O goes to the spare");
    assert!(slot().is_usable() && !slot().is_readable());
    assert!(store.pool().needs_resilver());
    assert_eq!(store.pool().health(), Health::Degraded);
    let st = cairn_pool::status::render_status(store.pool(), false);
    assert!(
        st.contains(&format!("spare-{failing}"))
            && st.contains("INUSE")
            && st.contains("action: Replace the failed device"),
        "{st}"
    );
    // The resilver runs while a writer keeps going; the store lock is taken per batch.
    let written = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(99);
            write_files(&store, &mut rng, "c", 8, 300_000)
        });
        let p = resilver_all(&store);
        assert!(p.repaired_bytes > 0, "{kind}: {p:?}");
        assert_eq!(p.errors, 0, "{kind}: {p:?}");
        writer.join().unwrap()
    });
    model.extend(written);
    // Blocks written during the resilver that it did not walk reach the spare directly;
    // a second run finds nothing left to do.
    let (_, end) = store
        .resilver(ResilverOptions::default(), &mut |_| ScrubControl::Continue)
        .unwrap();
    assert_eq!(end, ResilverEnd::NothingToDo, "{kind}");
    assert!(slot().is_readable() && slot().dtl_ranges().is_empty());
    check_files(&store, &model);
    let s = scrub_all(&store);
    assert_eq!(
        (s.errors, s.repaired_bytes),
        (0, 0),
        "{kind}: scrub after the spare's resilver {s:?}"
    );
    // (The scrub read every column, the spare's included, and found nothing to repair.)
    let pool = store.close().unwrap();
    // Re-import: the labels say the spare stands in for the failed leaf.
    pool.export().unwrap();
    let mut pool = Pool::import(&home, &[dir.path().to_path_buf()], "tank", false, false).unwrap();
    let slot = &pool.tops()[0].children[failing];
    assert_eq!(slot.path, spare_path, "{kind}: after import");
    assert_eq!(
        slot.replaced().map(|f| f.path.clone()),
        Some(failed_path.clone())
    );
    assert!(!pool.needs_resilver(), "{kind}: the spare was resilvered");
    let st = cairn_pool::status::render_status(&pool, false);
    assert!(
        st.contains(&format!("spare-{failing}"))
            && st.contains("INUSE")
            && st.contains(&format!("standing in for {failed_path}"))
            && st.contains("state: DEGRADED"),
        "{st}"
    );
    // Replacing the failed leaf puts a new disk in the slot; the spare is AVAIL again.
    let new = new_leaf(dir.path(), "new", 64 * MIB);
    pool.replace(&failed_path, Some(&new.display().to_string()), false)
        .unwrap();
    assert!(pool.tops()[0].children[failing].spare().is_none());
    assert!(pool.config.spares[0].replacing.is_none());
    let st = cairn_pool::status::render_status(&pool, false);
    assert!(!st.contains("INUSE") && !st.contains("spare-"), "{st}");
    let store = Store::open(pool).unwrap();
    resilver_all(&store);
    assert_eq!(store.pool().health(), Health::Online, "{kind}");
    check_files(&store, &model);
    let s = scrub_all(&store);
    assert_eq!((s.errors, s.repaired_bytes), (0, 0), "{kind}: {s:?}");
    drop(store.close().unwrap());
    let pool = Pool::open(&home, "tank").unwrap();
    let st = cairn_pool::status::render_status(&pool, false);
    let spare_line = st.lines().find(|l| l.contains(&spare_path)).unwrap();
    assert!(spare_line.contains("AVAIL"), "{st}");
}

#[test]
fn raidz1_spare_takes_over_a_failing_leaf_at_run_time() {
    spare_takes_over_at_run_time("raidz1", 4, 1);
}

#[test]
fn mirror_spare_takes_over_a_failing_leaf_at_run_time() {
    spare_takes_over_at_run_time("mirror", 2, 0);
}

/// A leaf of a pool that is only read fails its reads until FAULTED; the spare is put in
/// without a txg sync (`take_over_failed_leaves`), and the process dies before the next
/// sync. The labels then name the spare while every uberblock still carries the GUID sum
/// from before it took over: the pool opens at its last txg with all its data, spare in use.
#[test]
fn spare_put_in_without_a_sync_survives_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (home, files, spare) = pool_with_spare(dir.path(), "raidz1", 3);
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let (store, switches) = open_with_switches(&home);
    let model = write_files(&store, &mut rng, "a", 8, 400_000);
    let synced = store.open_txg() - 1;
    switches[2].fail_reads.store(true, Ordering::Relaxed);
    while !store.pool().tops()[0].children[2]
        .faulted
        .load(Ordering::Relaxed)
    {
        check_files(&store, &model);
    }
    assert!(store.take_over_failed_leaves().unwrap());
    assert_eq!(store.open_txg() - 1, synced, "no txg was synced");
    // The crash: no sync, no export.
    drop(store);
    let pool = Pool::open(&home, "tank").unwrap();
    let slot = &pool.tops()[0].children[2];
    assert_eq!(slot.path, spare.display().to_string());
    assert_eq!(
        slot.replaced().map(|f| f.path.clone()),
        Some(files[2].display().to_string())
    );
    assert_eq!(pool.uberblocks().first().map(|u| u.txg), Some(synced));
    let store = Store::open(pool).unwrap();
    check_files(&store, &model);
    resilver_all(&store);
    check_files(&store, &model);
    let s = scrub_all(&store);
    assert_eq!((s.errors, s.repaired_bytes), (0, 0), "{s:?}");
}
