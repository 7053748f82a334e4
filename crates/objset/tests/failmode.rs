//! A suspended pool (`failmode`): a txg whose devices refuse its writes waits for `clear`,
//! then finishes with everything it held; nothing is undone or lost.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_objset::scrub::ScrubControl;
use cairn_objset::Store;
use cairn_pool::{CreateOptions, Health, Home, Pool};
use common::*;

const MIB: u64 = 1 << 20;

/// `tank`, a mirror of two fault-injecting leaves over files; returns their paths.
fn faulty_mirror(dir: &std::path::Path) -> (Home, Vec<String>) {
    let files: Vec<String> = make_files(dir, 2, 128 * MIB)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let home = Home::at(dir.join("home"));
    let tokens: Vec<String> = std::iter::once("mirror".to_string())
        .chain(files.iter().map(|f| format!("fault:{f}")))
        .collect();
    Pool::create(&home, "tank", &tokens, CreateOptions::default()).unwrap();
    (home, files)
}

/// Sets what every fault leaf fails and waits until they have seen it.
fn fail_all(files: &[String], how: &str) {
    for f in files {
        std::fs::write(format!("{f}.fault"), how).unwrap();
    }
    std::thread::sleep(cairn_vdev::fault::CONTROL_POLL + Duration::from_millis(100));
}

fn put(store: &Store, path: &str, seed: u8, len: usize) -> Vec<u8> {
    let data: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(seed) ^ 0x5a)
        .collect();
    store.create_file(path, true).unwrap();
    let r = store.resolve(path).unwrap();
    store.write(&r, 0, &data).unwrap();
    data
}

fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(30), "no {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A store over `faulty_mirror` with failmode `mode`, file `tank/a` committed and
/// `tank/b` in the open txg, whose sync (on its own thread) found both sides refusing
/// writes: the pool is suspended.
struct Suspended {
    _dir: tempfile::TempDir,
    home: Home,
    files: Vec<String>,
    store: Arc<Store>,
    /// The sync that found the devices gone (taken by a test that joins it first).
    syncing: Option<std::thread::JoinHandle<Result<u64, cairn_objset::StoreError>>>,
    /// `tank/a`, resolved before the suspension (a lookup needs the store).
    a_object: cairn_objset::Resolved,
    a: Vec<u8>,
    b: Vec<u8>,
}

fn suspend(mode: &str) -> Suspended {
    let dir = tempfile::tempdir().unwrap();
    let (home, files) = faulty_mirror(dir.path());
    let store = Arc::new(open_store(&home));
    store.pool().set_resumable(true);
    store.pool().set_property("failmode", mode).unwrap();
    let a = put(&store, "tank/a", 3, 2 * MIB as usize);
    store.sync().unwrap();
    let a_object = store.resolve("tank/a").unwrap();
    fail_all(&files, "fail_writes=1");
    let b = put(&store, "tank/b", 5, 3 * MIB as usize);
    let syncing = {
        let store = store.clone();
        std::thread::spawn(move || store.sync())
    };
    let pool = store.pool();
    wait_until("suspension", || pool.io_suspended().is_some());
    assert_eq!(pool.health(), Health::Suspended);
    // Reports do not wait for the sync that holds the store.
    assert!(store.space().size > 0);
    assert!(store.error_log().is_empty());
    Suspended {
        _dir: dir,
        home,
        files,
        store,
        syncing: Some(syncing),
        a_object,
        a,
        b,
    }
}

impl Suspended {
    /// A `clear` while the devices still fail says so and changes nothing; once they are
    /// back it lets the sync finish, and every byte is there, after a reopen too, and a
    /// scrub finds nothing. `after_clear` runs once the sync finished.
    fn clear_and_check(self, after_clear: impl FnOnce()) {
        let pool = self.store.pool();
        let e = pool.clear_in_use(None).unwrap_err().to_string();
        assert!(
            e.contains("still suspended") && e.contains("cairn clear tank"),
            "{e}"
        );
        assert!(pool.io_suspended().is_some());
        assert!(self.syncing.as_ref().is_none_or(|h| !h.is_finished()));
        fail_all(&self.files, "");
        pool.clear_in_use(None).unwrap();
        if let Some(h) = self.syncing {
            assert!(h.join().unwrap().unwrap() > 0);
        }
        self.store.sync().unwrap();
        after_clear();
        assert_eq!(pool.io_suspended(), None);
        assert_ne!(pool.health(), Health::Suspended);
        assert_eq!(read_live(&self.store, "tank/a"), self.a);
        assert_eq!(read_live(&self.store, "tank/b"), self.b);
        let store = Arc::into_inner(self.store).unwrap();
        store.close().unwrap();
        let store = open_store(&self.home);
        assert_eq!(read_live(&store, "tank/a"), self.a);
        assert_eq!(read_live(&store, "tank/b"), self.b);
        if store.pool().needs_resilver() {
            store
                .resilver(Default::default(), &mut |_| ScrubControl::Continue)
                .unwrap();
        }
        scrub_clean(&store);
    }
}

/// failmode=wait: a write and a flush from other threads wait with the sync, and land
/// once the pool is cleared.
#[test]
fn under_wait_a_suspended_sync_and_new_writes_wait_for_clear() {
    let s = suspend("wait");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!s.syncing.as_ref().unwrap().is_finished(), "the sync waits");
    let writer = {
        let store = s.store.clone();
        std::thread::spawn(move || {
            let r = store.resolve("tank/a").unwrap();
            store.write(&r, 0, b"new")?;
            store.commit_log()
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(!writer.is_finished(), "the write waits");
    let store = s.store.clone();
    let mut a = s.a.clone();
    a[..3].copy_from_slice(b"new");
    let mut s = s;
    s.a = a.clone();
    s.clear_and_check(move || {
        writer.join().unwrap().unwrap();
        assert_eq!(read_live(&store, "tank/a"), a);
    });
}

/// failmode=continue: the sync sees the devices gone before it changes anything and
/// fails at once; new writes and flushes fail at once, saying why and what to do; lookups
/// and reads go on (the open txg stays in memory, readable); after `clear` the next sync
/// writes it.
#[test]
fn under_continue_writes_fail_at_once_and_reads_go_on() {
    let mut s = suspend("continue");
    let e = s
        .syncing
        .take()
        .unwrap()
        .join()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(e.contains("failmode=continue"), "{e}");
    assert_eq!(read_live(&s.store, "tank/a"), s.a);
    assert_eq!(
        read_live(&s.store, "tank/b"),
        s.b,
        "the open txg is read from memory"
    );
    let e = s
        .store
        .write(&s.a_object, 0, b"new")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("failmode=continue") && e.contains("cairn clear tank"),
        "{e}"
    );
    let e = s.store.commit_log().unwrap_err().to_string();
    assert!(e.contains("failmode=continue"), "{e}");
    s.clear_and_check(|| {});
}

/// failmode=continue, with devices that fail part-way through a sync (after the probe it
/// took): the sync is undone and fails at once, so lookups and reads go on (the open txg
/// is read from memory) while new writes fail; after `clear` the next sync writes it all.
#[test]
fn under_continue_a_sync_that_fails_part_way_is_undone_and_reads_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (home, files) = faulty_mirror(dir.path());
    let store = Arc::new(open_store(&home));
    store.pool().set_resumable(true);
    store.pool().set_property("failmode", "continue").unwrap();
    let a = put(&store, "tank/a", 3, 2 * MIB as usize);
    store.sync().unwrap();
    fail_all(&files, "fail_data_writes=1");
    let b = put(&store, "tank/b", 5, 3 * MIB as usize);
    let syncing = {
        let store = store.clone();
        std::thread::spawn(move || store.sync())
    };
    wait_until("the sync's end", || syncing.is_finished());
    let e = syncing.join().unwrap().unwrap_err().to_string();
    assert!(e.contains("failmode=continue"), "{e}");
    let pool = store.pool();
    assert!(pool.io_suspended().is_some());
    assert_eq!(pool.health(), Health::Suspended);
    assert_eq!(read_live(&store, "tank/a"), a);
    assert_eq!(
        read_live(&store, "tank/b"),
        b,
        "the open txg is read from memory"
    );
    let r = store.resolve("tank/a").unwrap();
    let e = store.write(&r, 0, b"new").unwrap_err().to_string();
    assert!(e.contains("cairn clear tank"), "{e}");
    fail_all(&files, "");
    pool.clear_in_use(None).unwrap();
    store.sync().unwrap();
    assert_eq!(pool.io_suspended(), None);
    let store = Arc::into_inner(store).unwrap();
    store.close().unwrap();
    let store = open_store(&home);
    assert_eq!(read_live(&store, "tank/a"), a);
    assert_eq!(read_live(&store, "tank/b"), b);
    if store.pool().needs_resilver() {
        store
            .resilver(Default::default(), &mut |_| ScrubControl::Continue)
            .unwrap();
    }
    scrub_clean(&store);
}

/// Without an owner that can resume it (a one-shot command), and under failmode=panic, a
/// sync that loses its devices fails at once with the device error.
#[test]
fn a_pool_nobody_can_resume_fails_the_sync_at_once() {
    for resumable_panic in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (home, files) = faulty_mirror(dir.path());
        let store = open_store(&home);
        if resumable_panic {
            store.pool().set_resumable(true);
            store.pool().set_property("failmode", "panic").unwrap();
        }
        put(&store, "tank/a", 3, MIB as usize);
        fail_all(&files, "fail_writes=1");
        let e = store.sync().unwrap_err();
        assert!(!e.to_string().is_empty());
        // Under panic the pool is marked (its service ends the process); otherwise not.
        assert_eq!(store.pool().io_suspended().is_some(), resumable_panic);
        fail_all(&files, "");
        drop(store);
    }
}
