//! The intent log: what a log commit acknowledges survives a crash (a dropped store, and a
//! power cut at every point of a workload, tearing writes), without a txg sync; `sync` and
//! `logbias` behave as in ZFS.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cairn_objset::posix::RenameMode;
use cairn_objset::scrub::{ScrubControl, ScrubEnd};
use cairn_objset::{DatasetKind, Resolved, Store, StoreConfig};
use cairn_pool::Pool;
use cairn_vdev::PowerCut;
use common::*;
use rand::{Rng, RngCore, SeedableRng};

const MIB: u64 = 1 << 20;
const BLOCK: usize = 4096;
const VOL_BLOCKS: u64 = 64;

/// No background sync ever: only what the test asks for commits.
fn config() -> StoreConfig {
    StoreConfig {
        dirty_max: 1 << 30,
        ..StoreConfig::default()
    }
}

fn make_volume(store: &Store, name: &str, props: &[(&str, &str)]) -> Resolved {
    let props: BTreeMap<String, String> = props
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    store
        .dataset_create(
            name,
            DatasetKind::Volume,
            props,
            Some(VOL_BLOCKS * BLOCK as u64),
            false,
        )
        .unwrap();
    store.sync().unwrap();
    store.resolve(name).unwrap()
}

fn block(i: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(i);
    let mut b = vec![0u8; BLOCK];
    rng.fill_bytes(&mut b);
    b
}

fn read_block(store: &Store, vol: &Resolved, b: u64) -> Vec<u8> {
    let mut buf = vec![0u8; BLOCK];
    store.read(vol, b * BLOCK as u64, &mut buf).unwrap();
    buf
}

/// Checksum errors charged to each leaf.
fn scrub_errors(store: &Store) -> u64 {
    let (p, end) = store
        .scrub(None, Duration::from_secs(3600), &mut |_| {
            ScrubControl::Continue
        })
        .unwrap();
    assert_eq!(end, ScrubEnd::Finished);
    p.errors
}

#[test]
fn a_committed_log_survives_a_crash_without_a_txg_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    let store = open_store_with(&home, config());
    let vol = make_volume(&store, "tank/vol", &[]);
    store.commit_log().unwrap(); // arms the log (a sync: nothing was logged before)
    let synced = store.open_txg();
    for i in 0..20 {
        store
            .write(&vol, (i % VOL_BLOCKS) * BLOCK as u64, &block(i))
            .unwrap();
        if i % 3 == 0 {
            store.sync_writes(vol.dataset).unwrap();
        }
    }
    // One unaligned write smaller than a sector, and one large (logged by pointer).
    store.write(&vol, 5000, b"hello, log").unwrap();
    let big: Vec<u8> = (0..48 * 1024).map(|i| (i % 251) as u8).collect();
    store.write(&vol, 40 * BLOCK as u64, &big).unwrap();
    store.sync_writes(vol.dataset).unwrap();
    assert_eq!(
        store.open_txg(),
        synced,
        "a log commit must not sync the txg"
    );
    drop(store); // a crash: nothing more is synced

    let store = open_store_with(&home, config());
    let mut expect = vec![vec![0u8; BLOCK]; VOL_BLOCKS as usize];
    for i in 0..20 {
        expect[(i % VOL_BLOCKS) as usize] = block(i);
    }
    expect[1][5000 - BLOCK..5000 - BLOCK + 10].copy_from_slice(b"hello, log");
    for (k, chunk) in big.chunks(BLOCK).enumerate() {
        expect[40 + k].copy_from_slice(chunk);
    }
    for (b, want) in expect.iter().enumerate() {
        assert!(read_block(&store, &vol, b as u64) == *want, "block {b}");
    }
    assert_eq!(scrub_errors(&store), 0);
    // The replay was synced: a second crash loses nothing either.
    drop(store);
    let store = open_store_with(&home, config());
    assert!(read_block(&store, &vol, 2) == block(2));
}

#[test]
fn writes_not_committed_are_not_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "mirror", 2, 64 * MIB);
    let store = open_store_with(&home, config());
    let vol = make_volume(&store, "tank/vol", &[]);
    store.commit_log().unwrap();
    store.write(&vol, 0, &block(1)).unwrap();
    store.sync_writes(vol.dataset).unwrap();
    store.write(&vol, 0, &block(2)).unwrap(); // never committed
    drop(store);
    let store = open_store_with(&home, config());
    assert!(read_block(&store, &vol, 0) == block(1));
}

#[test]
fn sync_always_makes_each_write_durable_and_disabled_none() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    let store = open_store_with(&home, config());
    let always = make_volume(&store, "tank/always", &[("sync", "always")]);
    let disabled = make_volume(&store, "tank/disabled", &[("sync", "disabled")]);
    let txg = store.open_txg();
    store.write(&always, 0, &block(8)).unwrap(); // arms the log: a sync
    store.write(&always, BLOCK as u64, &block(9)).unwrap(); // logged
    store.write(&disabled, 0, &block(7)).unwrap();
    store.sync_writes(disabled.dataset).unwrap(); // returns at once: nothing durable
    store.write(&always, 2 * BLOCK as u64, &block(10)).unwrap();
    assert_eq!(store.open_txg(), txg + 1, "only the arming write synced");
    drop(store);
    let store = open_store_with(&home, config());
    assert!(read_block(&store, &always, 0) == block(8));
    assert!(read_block(&store, &always, 1) == block(9));
    assert!(read_block(&store, &always, 2) == block(10));
    assert!(read_block(&store, &disabled, 0) == vec![0u8; BLOCK]);
}

/// What a power-cut run wrote: every version of each block, and at each acknowledged log
/// commit the leaf writes issued so far and the newest version of each block.
#[derive(Default)]
struct History {
    versions: BTreeMap<u64, Vec<u64>>,
    acks: Vec<(u64, BTreeMap<u64, u64>)>,
}

/// A pool whose leaves stop persisting at leaf write `limit` (tearing that one write if
/// `tear`), a workload of 4 KiB writes into a volume with a log commit after every few,
/// then a normal import: every block holds exactly one version it was written with, no
/// older than the newest acknowledged before the cut; scrub finds nothing. Returns the
/// leaf writes the workload issued.
fn power_cut_at(limit: u64, tear: bool, seed: u64) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    {
        let store = open_store_with(&home, config());
        make_volume(&store, "tank/vol", &[]);
        store.close().unwrap();
    }
    let power = PowerCut::new(limit, tear);
    let pool = open_with_power_cut(&home, &power);
    let store = Store::open_with(pool, config()).unwrap();
    let vol = store.resolve("tank/vol").unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut history = History::default();
    let mut newest: BTreeMap<u64, u64> = BTreeMap::new();
    let mut run = || -> Result<(), cairn_objset::StoreError> {
        store.commit_log()?; // arms the log (one sync)
        let mut i = 0;
        for round in 0..40 {
            for _ in 0..rng.gen_range(1..4) {
                i += 1;
                let b = rng.gen_range(0..VOL_BLOCKS);
                store.write(&vol, b * BLOCK as u64, &block(i))?;
                history.versions.entry(b).or_default().push(i);
                newest.insert(b, i);
            }
            store.sync_writes(vol.dataset)?;
            let issued = power.writes.load(Ordering::SeqCst);
            history.acks.push((issued, newest.clone()));
            if round % 16 == 15 {
                store.sync()?;
            }
        }
        Ok(())
    };
    let outcome = run();
    if limit == u64::MAX {
        outcome.unwrap();
    }
    let total = power.writes.load(Ordering::SeqCst);
    drop(store);
    check_after_cut(&home, &history, limit);
    total
}

fn check_after_cut(home: &cairn_pool::Home, history: &History, limit: u64) {
    let store = open_store_with(home, config());
    let vol = store.resolve("tank/vol").unwrap();
    let durable = history
        .acks
        .iter()
        .rev()
        .find(|(issued, _)| *issued <= limit)
        .map(|(_, newest)| newest.clone())
        .unwrap_or_default();
    for b in 0..VOL_BLOCKS {
        let got = read_block(&store, &vol, b);
        let versions = history.versions.get(&b).cloned().unwrap_or_default();
        let found = versions.iter().copied().find(|&v| block(v) == got);
        match (found, durable.get(&b)) {
            (Some(v), Some(&need)) => assert!(
                v >= need,
                "limit {limit}: block {b} holds version {v}, but {need} was acknowledged"
            ),
            (Some(_), None) => {}
            (None, None) => assert!(
                got == vec![0u8; BLOCK],
                "limit {limit}: block {b} holds bytes no write gave it"
            ),
            (None, Some(need)) => {
                panic!("limit {limit}: block {b} lost acknowledged version {need}")
            }
        }
    }
    assert_eq!(
        scrub_errors(&store),
        0,
        "limit {limit}: scrub after the cut"
    );
}

/// Power cuts at every point of the workload (each leaf write), every other one tearing
/// the write it stops at: torn log blocks end the chain, acknowledged writes survive.
#[test]
fn power_cuts_at_every_write_keep_every_acknowledged_write() {
    let total = power_cut_at(u64::MAX, false, 3);
    assert!(total > 100, "{total} leaf writes");
    let mut rounds = 0;
    for limit in 0..total {
        power_cut_at(limit, limit % 2 == 1, 3);
        rounds += 1;
    }
    eprintln!("{rounds} power cuts over {total} leaf writes");
}

#[test]
fn file_writes_truncates_and_punches_replay_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "mirror", 2, 64 * MIB);
    let store = open_store_with(&home, config());
    store.create_file("tank/f", false).unwrap();
    let f = store.resolve("tank/f").unwrap();
    store.write(&f, 0, &[1u8; 3000]).unwrap();
    store.commit_log().unwrap(); // arms the log: a sync
    let txg = store.open_txg();
    store.write(&f, 0, &vec![2u8; 10_000]).unwrap();
    store.truncate(&f, 5000).unwrap();
    store.punch(&f, 1000, 1000).unwrap();
    store.write(&f, 20_000, &[3u8; 100]).unwrap();
    store.commit_log().unwrap();
    assert_eq!(store.open_txg(), txg, "logged, not synced");
    let expect = read_live(&store, "tank/f");
    assert_eq!(expect.len(), 20_100);
    drop(store);
    let store = open_store_with(&home, config());
    assert!(read_live(&store, "tank/f") == expect);
    assert_eq!(expect[999], 2);
    assert_eq!(expect[1000..2000], [0u8; 1000]);
    assert_eq!(expect[4999], 2);
    assert_eq!(expect[5000..20_000], vec![0u8; 15_000][..]);
}

#[test]
fn a_change_the_log_cannot_record_makes_the_commit_a_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    let store = open_store_with(&home, config());
    store.create_file("tank/f", false).unwrap();
    store.commit_log().unwrap();
    let txg = store.open_txg();
    store.mkdir("tank/d").unwrap();
    let f = store.resolve("tank/f").unwrap();
    store.write(&f, 0, b"after mkdir").unwrap();
    store.commit_log().unwrap();
    assert_eq!(store.open_txg(), txg + 1, "the mkdir needed a sync");
    store.create_file("tank/d/g", false).unwrap();
    store.commit_log().unwrap();
    assert_eq!(store.open_txg(), txg + 2, "so did the create");
    drop(store);
    let store = open_store_with(&home, config());
    assert_eq!(read_live(&store, "tank/f"), b"after mkdir");
    assert!(store.resolve("tank/d/g").is_ok());
}

/// A change the log cannot record blocks the log of its own dataset only (ZFS keeps a log
/// per dataset): a volume's FLUSH stays a log commit while file systems beside it create
/// files by path. After a crash the volume's acknowledged writes are there, and each file
/// system is as it was at some moment: its last txg plus the writes logged before its
/// change, not the change and not the writes after it.
#[test]
fn a_change_the_log_cannot_record_blocks_only_its_own_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    let store = open_store_with(&home, config());
    let vol = make_volume(&store, "tank/vol", &[]);
    let always = make_volume(&store, "tank/always", &[("sync", "always")]);
    let fs2 = "tank/fs2";
    store
        .dataset_create(
            fs2,
            DatasetKind::Filesystem,
            Default::default(),
            None,
            false,
        )
        .unwrap();
    store.create_file("tank/x", false).unwrap();
    let x = store.resolve("tank/x").unwrap();
    store.write(&x, 0, b"x before").unwrap();
    store.commit_log().unwrap(); // arms the log (a sync)
    let txg = store.open_txg();

    // Logged while tank can log (a volume's commit takes it along); then tank creates k
    // by path and writes x again, and fs2 creates y by path: none of that can be logged.
    store.write(&x, 0, b"x logged").unwrap();
    store.write(&vol, 0, &block(1)).unwrap();
    store.sync_writes(vol.dataset).unwrap();
    store.create_file("tank/k", false).unwrap();
    store.write(&x, 0, b"x after create").unwrap();
    store.create_file(&format!("{fs2}/y"), false).unwrap();
    let y = store.resolve(&format!("{fs2}/y")).unwrap();
    store.write(&y, 0, b"y").unwrap();
    store.write(&vol, BLOCK as u64, &block(2)).unwrap();
    store.sync_writes(vol.dataset).unwrap();
    store.write(&always, 0, &block(3)).unwrap(); // sync=always: a commit of its own
    assert_eq!(
        store.open_txg(),
        txg,
        "the volumes' commits were log commits"
    );
    drop(store); // a crash

    let store = open_store_with(&home, config());
    assert!(read_block(&store, &vol, 0) == block(1));
    assert!(read_block(&store, &vol, 1) == block(2));
    assert!(read_block(&store, &always, 0) == block(3));
    assert_eq!(read_live(&store, "tank/x"), b"x logged");
    assert!(
        store.resolve("tank/k").is_err(),
        "the create was never durable"
    );
    assert!(store.resolve(&format!("{fs2}/y")).is_err());
    assert_eq!(scrub_errors(&store), 0);

    // A FLUSH of the file system that changed its namespace still syncs the txg.
    store.commit_log().unwrap(); // arms the log again (a sync)
    let txg = store.open_txg();
    store.mkdir("tank/d").unwrap();
    let root = store.resolve("tank").unwrap();
    store.write(&vol, 0, &block(3)).unwrap();
    store.sync_writes(vol.dataset).unwrap();
    assert_eq!(store.open_txg(), txg, "the volume still logs");
    store.sync_writes(root.dataset).unwrap();
    assert_eq!(store.open_txg(), txg + 1, "the mkdir needed a sync");
    drop(store);
    let store = open_store_with(&home, config());
    assert!(store.resolve("tank/d").is_ok());
    assert!(read_block(&store, &vol, 0) == block(3));
}

#[test]
fn logbias_throughput_logs_every_write_by_pointer() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz2", 4, 64 * MIB);
    let store = open_store_with(&home, config());
    let vol = make_volume(&store, "tank/vol", &[("logbias", "throughput")]);
    store.commit_log().unwrap();
    let txg = store.open_txg();
    for i in 0..10 {
        store
            .write(&vol, i * BLOCK as u64, &block(100 + i))
            .unwrap();
        store.sync_writes(vol.dataset).unwrap();
    }
    assert_eq!(store.open_txg(), txg);
    drop(store);
    let store = open_store_with(&home, config());
    for i in 0..10 {
        assert!(read_block(&store, &vol, i) == block(100 + i), "block {i}");
    }
    assert_eq!(scrub_errors(&store), 0);
}

/// `raidz1 d0 d1 d2 log d3` (or `log mirror d3 d4`).
fn pool_with_log(
    dir: &std::path::Path,
    log_mirror: bool,
) -> (cairn_pool::Home, Vec<std::path::PathBuf>) {
    let n = if log_mirror { 5 } else { 4 };
    let files = make_files(dir, n, 64 * MIB);
    let home = cairn_pool::Home::at(dir.join("home"));
    let mut tokens: Vec<String> = vec!["raidz1".into()];
    tokens.extend(files[..3].iter().map(|f| f.display().to_string()));
    tokens.push("log".into());
    if log_mirror {
        tokens.push("mirror".into());
    }
    tokens.extend(files[3..].iter().map(|f| f.display().to_string()));
    Pool::create(&home, "tank", &tokens, cairn_pool::CreateOptions::default()).unwrap();
    (home, files)
}

fn holds(file: &std::path::Path, needle: &[u8]) -> bool {
    let bytes = std::fs::read(file).unwrap();
    bytes.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn a_log_device_takes_the_log_and_no_data() {
    let dir = tempfile::tempdir().unwrap();
    let (home, files) = pool_with_log(dir.path(), false);
    let store = open_store_with(&home, config());
    assert!(store.pool().tops()[1].is_log());
    let size_with_log = store.pool().space();
    let vol = make_volume(&store, "tank/vol", &[]);
    store.commit_log().unwrap();
    let txg = store.open_txg();
    for i in 0..8 {
        store
            .write(&vol, i * BLOCK as u64, &block(500 + i))
            .unwrap();
        store.sync_writes(vol.dataset).unwrap();
    }
    assert_eq!(store.open_txg(), txg);
    // Data (and metadata) never goes to the log device, however much is written.
    let f = {
        store.create_file("tank/big", false).unwrap();
        store.resolve("tank/big").unwrap()
    };
    store.write(&f, 0, &vec![0xAB; 8 << 20]).unwrap();
    store.sync().unwrap();
    drop(store);
    assert!(
        holds(&files[3], b"CAIRNLOG"),
        "no log block on the log device"
    );
    assert!(!holds(&files[3], &[0xAB; 4096]), "data on the log device");
    // Replay from the log device (the writes were only logged before the txg above
    // synced them too: reopen shows them either way, and nothing is lost).
    let store = open_store_with(&home, config());
    for i in 0..8 {
        assert!(read_block(&store, &vol, i) == block(500 + i));
    }
    // A log device adds no capacity.
    let plain_dir = dir.path().join("plain");
    std::fs::create_dir(&plain_dir).unwrap();
    let (plain_home, _) = new_pool(&plain_dir, "raidz1", 3, 64 * MIB);
    let plain = Pool::open(&plain_home, "tank").unwrap();
    assert_eq!(plain.space().size, size_with_log.size);
    assert_eq!(plain.space().avail, size_with_log.avail);
}

#[test]
fn replay_comes_from_a_mirrored_log_and_a_lost_log_device_loses_no_committed_data() {
    let dir = tempfile::tempdir().unwrap();
    let (home, files) = pool_with_log(dir.path(), true);
    let store = open_store_with(&home, config());
    let vol = make_volume(&store, "tank/vol", &[]);
    store.write(&vol, 0, &block(1)).unwrap();
    store.commit_log().unwrap(); // arms: a sync, block 0 committed
    store.write(&vol, BLOCK as u64, &block(2)).unwrap();
    store.sync_writes(vol.dataset).unwrap(); // logged only
    drop(store);
    // One side of the log mirror lost: the other replays.
    std::fs::remove_file(&files[4]).unwrap();
    let store = open_store_with(&home, config());
    assert!(
        read_block(&store, &vol, 1) == block(2),
        "replayed from the other side"
    );
    store.write(&vol, 2 * BLOCK as u64, &block(3)).unwrap();
    store.sync_writes(vol.dataset).unwrap();
    drop(store);
    // Both log devices lost after a logged write: what txgs committed is all there, the
    // pool imports DEGRADED, and the log goes on on the data vdevs.
    std::fs::remove_file(&files[3]).unwrap();
    let store = open_store_with(&home, config());
    assert_eq!(store.pool().health(), cairn_pool::Health::Degraded);
    assert!(read_block(&store, &vol, 0) == block(1));
    assert!(read_block(&store, &vol, 1) == block(2));
    store.write(&vol, 3 * BLOCK as u64, &block(4)).unwrap();
    store.commit_log().unwrap();
    store.write(&vol, 4 * BLOCK as u64, &block(5)).unwrap();
    store.commit_log().unwrap();
    drop(store);
    let store = open_store_with(&home, config());
    assert!(read_block(&store, &vol, 4) == block(5));
    assert_eq!(scrub_errors(&store), 0);
}

/// The chain ends at a block that was allocated and never written; reading it at import
/// (speculatively, as ZFS reads its ZIL) charges no device a checksum error: a pool that
/// used the log imports with every counter at 0, on raidz and on mirrors. (Before, every
/// import of such a pool showed CKSUM errors on the leaves of the chain's next block.)
#[test]
fn the_end_of_the_chain_is_no_checksum_error() {
    for (kind, n) in [("raidz2", 6), ("mirror", 2)] {
        let dir = tempfile::tempdir().unwrap();
        let (home, _) = new_pool(dir.path(), kind, n, 64 * MIB);
        let store = open_store_with(&home, config());
        let vol = make_volume(&store, "tank/vol", &[]);
        for i in 0..10 {
            store.write(&vol, i * BLOCK as u64, &block(i)).unwrap();
            store.sync_writes(vol.dataset).unwrap();
        }
        drop(store); // a crash: the chain is replayed at the next import
        for round in 0..2 {
            let store = open_store_with(&home, config());
            assert!(read_block(&store, &vol, 9) == block(9), "{kind}");
            let counts = checksum_errors(&store);
            assert!(
                counts.iter().all(|&c| c == 0),
                "{kind}, import {round}: checksum errors {counts:?}"
            );
            store.close().unwrap();
        }
    }
}

/// A block logged by pointer that cannot be read at import: in the chain's last log block
/// its commit is the one a crash cut (never acknowledged), so the replay ends before it and
/// the store opens without it, charging no device; in an earlier log block its commit
/// finished (commits run one at a time), so the damage is an error and the store does not
/// open.
#[test]
fn an_unreadable_pointer_block_ends_the_replay_only_in_the_last_log_block() {
    for later_commit in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (home, files) = new_pool(dir.path(), "", 1, 64 * MIB);
        let store = open_store_with(&home, config());
        let vol = make_volume(&store, "tank/vol", &[("compression", "off")]);
        store.commit_log().unwrap(); // arms the log
        store.write(&vol, 0, &block(1)).unwrap();
        store.sync_writes(vol.dataset).unwrap();
        let big: Vec<u8> = (0..12).flat_map(|i| block(100 + i)).collect();
        store.write(&vol, 8 * BLOCK as u64, &big).unwrap(); // logged by pointer
        store.sync_writes(vol.dataset).unwrap();
        if later_commit {
            store.write(&vol, 2 * BLOCK as u64, &block(3)).unwrap();
            store.sync_writes(vol.dataset).unwrap();
        }
        drop(store); // a crash
        let mut leaf = std::fs::read(&files[0]).unwrap();
        let at = leaf
            .windows(BLOCK)
            .position(|w| w == &big[..BLOCK])
            .expect("the pointer block is on the leaf");
        leaf[at..at + 512].fill(0xee);
        std::fs::write(&files[0], &leaf).unwrap();
        let opened = Store::open_with(Pool::open(&home, "tank").unwrap(), config());
        if later_commit {
            assert!(
                opened.is_err(),
                "the damage of a finished commit is an error"
            );
            continue;
        }
        let store = opened.unwrap();
        assert!(
            read_block(&store, &vol, 0) == block(1),
            "the commit before it"
        );
        assert!(
            read_block(&store, &vol, 8) == vec![0u8; BLOCK],
            "the cut commit is not replayed"
        );
        assert_eq!(checksum_errors(&store), [0], "no device charged");
    }
}

#[test]
fn log_commits_are_sync_writes_txg_syncs_async_writes_and_a_scrub_scrub_reads() {
    use cairn_vdev::io_class::IoClass;
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    let store = open_store_with(&home, config());
    let vol = make_volume(&store, "tank/vol", &[]);
    store.commit_log().unwrap(); // arms the log
    let bytes = |c: IoClass| {
        let (_, _, io) = store.pool().io_snapshot().total();
        io.classes.get(&c).map_or(0, |k| k.bytes)
    };
    let (sync0, async0) = (bytes(IoClass::SyncWrite), bytes(IoClass::AsyncWrite));
    for i in 0..8 {
        store.write(&vol, i * BLOCK as u64, &block(i)).unwrap();
        store.sync_writes(vol.dataset).unwrap();
    }
    // Each commit wrote its record (data and parity) as sync writes.
    let logged = bytes(IoClass::SyncWrite) - sync0;
    assert!(logged >= 8 * BLOCK as u64, "{logged}");
    let sync1 = bytes(IoClass::SyncWrite);
    store.sync().unwrap();
    assert_eq!(
        bytes(IoClass::SyncWrite),
        sync1,
        "a txg sync is no sync write"
    );
    assert!(bytes(IoClass::AsyncWrite) - async0 >= 8 * BLOCK as u64);
    let scrub0 = bytes(IoClass::Scrub);
    assert_eq!(scrub_errors(&store), 0);
    // The scrub read every column of the volume's blocks (and the metadata).
    assert!(bytes(IoClass::Scrub) - scrub0 >= 8 * BLOCK as u64);
    assert_eq!(bytes(IoClass::Trim), 0);
}

/// A file's attribute changes are logged (an fsync after a chmod, chown, utimens or a
/// truncate through setattr needs no txg sync), and replay puts back the attributes as
/// they were at the commit, the mtime of the last write included (not the import's time);
/// a directory's attribute change still makes the commit a sync.
#[test]
fn file_attributes_and_mtime_replay_and_need_no_sync() {
    use cairn_objset::posix::SetAttr;
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    let store = open_store_with(&home, config());
    store.create_file("tank/f", false).unwrap();
    store.create_file("tank/g", false).unwrap();
    store.mkdir("tank/d").unwrap();
    let (f, g) = (
        store.resolve("tank/f").unwrap(),
        store.resolve("tank/g").unwrap(),
    );
    store.write(&f, 0, &[5u8; 3000]).unwrap();
    store.commit_log().unwrap(); // arms the log: a sync
    let txg = store.open_txg();
    let set = SetAttr {
        mode: Some(0o600),
        uid: Some(7),
        gid: Some(8),
        size: Some(2000),
        mtime: Some(1_600_000_000_123_456_789),
        ..SetAttr::default()
    };
    store.set_attr(f.object, set).unwrap();
    store.write(&g, 0, b"written before the crash").unwrap();
    store.commit_log().unwrap();
    assert_eq!(store.open_txg(), txg, "logged, not synced");
    let (f_before, g_before) = (
        store.dnode(f.object).unwrap(),
        store.dnode(g.object).unwrap(),
    );
    std::thread::sleep(Duration::from_millis(20));
    drop(store);
    let store = open_store_with(&home, config());
    let (fa, ga) = (
        store.dnode(f.object).unwrap(),
        store.dnode(g.object).unwrap(),
    );
    assert_eq!(fa.mode & 0o7777, 0o600);
    assert_eq!((fa.uid, fa.gid, fa.size), (7, 8, 2000));
    assert_eq!(fa.mtime_ns, 1_600_000_000_123_456_789);
    assert_eq!(fa.ctime_ns, f_before.ctime_ns);
    assert_eq!(read_live(&store, "tank/f"), vec![5u8; 2000]);
    assert_eq!(
        ga.mtime_ns, g_before.mtime_ns,
        "the write's mtime, not the replay's"
    );
    assert_eq!(read_live(&store, "tank/g"), b"written before the crash");
}

/// A directory's and a symbolic link's chmod, chown and utimens are logged as a file's
/// are: the commit does not sync, and after a crash the replay puts them back.
#[test]
fn directory_and_symlink_attributes_replay_and_need_no_sync() {
    use cairn_objset::dnode::ObjectKind;
    use cairn_objset::posix::{NewNode, SetAttr};
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    let store = open_store_with(&home, config());
    store.mkdir("tank/d").unwrap();
    let root = store.resolve("tank").unwrap().object;
    let link = NewNode {
        kind: ObjectKind::Symlink,
        mode: 0o120777,
        uid: 0,
        gid: 0,
        rdev: 0,
    };
    let (l, _) = store.make_node(root, "l", link, Some(b"d")).unwrap();
    let d = store.resolve("tank/d").unwrap().object;
    store.commit_log().unwrap(); // arms the log: a sync
    let txg = store.open_txg();
    let dir_set = SetAttr {
        mode: Some(0o750),
        uid: Some(11),
        gid: Some(12),
        mtime: Some(1_500_000_000_000_000_001),
        ..SetAttr::default()
    };
    store.set_attr(d, dir_set).unwrap();
    let link_set = SetAttr {
        uid: Some(21),
        atime: Some(1_400_000_000_000_000_002),
        ..SetAttr::default()
    };
    store.set_attr(l, link_set).unwrap();
    store.commit_log().unwrap();
    assert_eq!(store.open_txg(), txg, "logged, not synced");
    let (d_before, l_before) = (store.dnode(d).unwrap(), store.dnode(l).unwrap());
    drop(store); // a crash
    let store = open_store_with(&home, config());
    let (da, la) = (store.dnode(d).unwrap(), store.dnode(l).unwrap());
    assert_eq!(da.kind, ObjectKind::Directory);
    assert_eq!(da.mode & 0o7777, 0o750);
    assert_eq!((da.uid, da.gid), (11, 12));
    assert_eq!(da.mtime_ns, 1_500_000_000_000_000_001);
    assert_eq!(da.ctime_ns, d_before.ctime_ns);
    assert_eq!(la.kind, ObjectKind::Symlink);
    assert_eq!((la.uid, la.atime_ns), (21, 1_400_000_000_000_000_002));
    assert_eq!(la.ctime_ns, l_before.ctime_ns);
    assert_eq!(store.read_link(l).unwrap(), b"d");
}

/// A volume whose 64 blocks were each written and acknowledged by a log commit (each
/// logged by pointer), then a crash: only the log holds them.
fn crashed_with_a_full_log(dir: &std::path::Path) -> (cairn_pool::Home, Resolved) {
    let (home, _) = new_pool(dir, "raidz1", 3, 64 * MIB);
    let store = open_store_with(&home, config());
    let vol = make_volume(&store, "tank/vol", &[("logbias", "throughput")]);
    store.commit_log().unwrap();
    let txg = store.open_txg();
    for i in 0..VOL_BLOCKS {
        store
            .write(&vol, i * BLOCK as u64, &block(200 + i))
            .unwrap();
        store.sync_writes(vol.dataset).unwrap();
    }
    assert_eq!(store.open_txg(), txg, "the log took every write");
    drop(store); // a crash
    (home, vol)
}

fn assert_all_blocks(store: &Store, vol: &Resolved, when: &str) {
    for i in 0..VOL_BLOCKS {
        assert!(
            read_block(store, vol, i) == block(200 + i),
            "{when}: block {i}"
        );
    }
}

/// The dirty cap at import may be smaller than when the log was written (another machine,
/// another `dirty_max`). The replay must not sync part-way: such a sync retires the chain
/// (a crash after it loses the records not yet applied) and may allocate over blocks
/// logged by pointer that are still to be read. Here the import runs with a 16 KiB cap
/// and the power fails at points through it; the next import has every block.
#[test]
fn a_replay_larger_than_the_dirty_cap_loses_nothing_when_cut() {
    let small = StoreConfig {
        dirty_max: 16 << 10,
        ..config()
    };
    // How many leaf writes a whole import with replay makes.
    let dir = tempfile::tempdir().unwrap();
    let (home, vol) = crashed_with_a_full_log(dir.path());
    let power = PowerCut::new(u64::MAX, false);
    let store = Store::open_with(open_with_power_cut(&home, &power), small).unwrap();
    let total = power.writes.load(Ordering::SeqCst);
    assert_all_blocks(&store, &vol, "after the replay");
    assert_eq!(scrub_errors(&store), 0);
    assert!(checksum_errors(&store).iter().all(|&e| e == 0));
    drop(store);
    assert_all_blocks(
        &open_store_with(&home, config()),
        &vol,
        "after a second crash",
    );
    for cut in [
        total / 5,
        total / 3,
        total / 2,
        2 * total / 3,
        9 * total / 10,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (home, vol) = crashed_with_a_full_log(dir.path());
        let power = PowerCut::new(cut, false);
        let cut_short = Store::open_with(open_with_power_cut(&home, &power), small);
        drop(cut_short); // (an error or a store that stopped persisting: a crash either way)
        let store = open_store_with(&home, config());
        assert_all_blocks(
            &store,
            &vol,
            &format!("power cut at write {cut} of {total}"),
        );
        assert_eq!(scrub_errors(&store), 0);
    }
}

fn node(kind: cairn_objset::dnode::ObjectKind, mode: u32) -> cairn_objset::posix::NewNode {
    cairn_objset::posix::NewNode {
        kind,
        mode,
        uid: 5,
        gid: 6,
        rdev: 0,
    }
}

/// Files, directories, symbolic links and special files a mount creates are logged (CREATE
/// records): the commit after them does not sync, and after a crash the replay makes them
/// again under their ids, with their data, attributes, link counts and their directories'
/// times. Ids handed out after the replay do not collide with the replayed ones.
#[test]
fn creates_replay_under_their_ids_and_need_no_sync() {
    use cairn_objset::dnode::ObjectKind;
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    let store = open_store_with(&home, config());
    store.mkdir("tank/d").unwrap();
    let (root, d) = (
        store.resolve("tank").unwrap(),
        store.resolve("tank/d").unwrap().object,
    );
    store.commit_log().unwrap(); // arms the log: a sync
    let txg = store.open_txg();
    let (f, _) = store
        .make_node(d, "new", node(ObjectKind::File, 0o100640), None)
        .unwrap();
    let file = |object| Resolved {
        dataset: root.dataset,
        object,
        kind: ObjectKind::File,
    };
    store
        .write(&file(f), 0, b"written after its create")
        .unwrap();
    let (sub, _) = store
        .make_node(
            root.object,
            "sub",
            node(ObjectKind::Directory, 0o040750),
            None,
        )
        .unwrap();
    let (deep, _) = store
        .make_node(sub, "deep", node(ObjectKind::File, 0o100600), None)
        .unwrap();
    store.write(&file(deep), 0, &[7u8; 5000]).unwrap();
    let (ln, _) = store
        .make_node(d, "ln", node(ObjectKind::Symlink, 0o120777), Some(b"new"))
        .unwrap();
    let (fifo, _) = store
        .make_node(d, "fifo", node(ObjectKind::Special, 0o010600), None)
        .unwrap();
    store.commit_log().unwrap();
    assert_eq!(store.open_txg(), txg, "logged, not synced");
    let before: Vec<_> = [root.object, d, f, sub, deep, ln, fifo]
        .iter()
        .map(|&o| store.dnode(o).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    drop(store); // a crash

    let store = open_store_with(&home, config());
    let path_ids: Vec<u64> = [
        "tank/d/new",
        "tank/sub",
        "tank/sub/deep",
        "tank/d/ln",
        "tank/d/fifo",
    ]
    .iter()
    .map(|p| store.resolve(p).unwrap().object)
    .collect();
    assert_eq!(
        path_ids,
        vec![f, sub, deep, ln, fifo],
        "replayed under their ids"
    );
    for (o, was) in [root.object, d, f, sub, deep, ln, fifo].iter().zip(&before) {
        let now = store.dnode(*o).unwrap();
        // (A directory's size is its encoding's, set when a sync writes it.)
        let size =
            |n: &cairn_objset::dnode::Dnode| (n.kind != ObjectKind::Directory).then_some(n.size);
        assert_eq!(
            (now.kind, now.mode, now.uid, now.gid, now.nlink, size(&now)),
            (was.kind, was.mode, was.uid, was.gid, was.nlink, size(was)),
            "object {o}"
        );
        assert_eq!(
            (now.mtime_ns, now.ctime_ns),
            (was.mtime_ns, was.ctime_ns),
            "object {o}"
        );
    }
    assert_eq!(read_live(&store, "tank/d/new"), b"written after its create");
    assert_eq!(read_live(&store, "tank/sub/deep"), vec![7u8; 5000]);
    assert_eq!(store.read_link(ln).unwrap(), b"new");
    assert_eq!(scrub_errors(&store), 0);

    // A node made after the replay gets an id of its own.
    let (later, _) = store
        .make_node(root.object, "later", node(ObjectKind::File, 0o100644), None)
        .unwrap();
    assert!(
        ![f, sub, deep, ln, fifo].contains(&later),
        "id {later} used twice"
    );
    store.write(&file(later), 0, b"later").unwrap();
    store.sync().unwrap();
    drop(store);
    let store = open_store_with(&home, config());
    assert_eq!(read_live(&store, "tank/later"), b"later");
    assert_eq!(read_live(&store, "tank/d/new"), b"written after its create");
}

/// A directory changed by something the log cannot record (a removal through a path,
/// not `posix`) still makes a commit of its dataset a sync, whether the change came before
/// or after a logged create, and whichever directory of the dataset it changed; creates,
/// renames and removals through `posix` alone do not.
#[test]
fn a_create_beside_an_unlogged_change_is_synced_not_logged() {
    use cairn_objset::dnode::ObjectKind;
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    let store = open_store_with(&home, config());
    store.mkdir("tank/d").unwrap();
    for f in ["tank/x", "tank/y", "tank/d/z"] {
        store.create_file(f, false).unwrap();
    }
    let d = store.resolve("tank/d").unwrap().object;
    store.commit_log().unwrap(); // arms the log: a sync
    let txg = store.open_txg();
    let file = node(ObjectKind::File, 0o100644);
    store.make_node(d, "a", file, None).unwrap();
    store.remove("tank/x", false).unwrap();
    store.commit_log().unwrap();
    assert_eq!(store.open_txg(), txg + 1, "a removal in another directory");
    store.make_node(d, "b", file, None).unwrap();
    store.remove("tank/d/z", false).unwrap();
    store.commit_log().unwrap();
    assert_eq!(store.open_txg(), txg + 2, "a removal in the same directory");
    store.make_node(d, "c", file, None).unwrap();
    store
        .rename(d, "c", d, "c2", RenameMode::NoReplace)
        .unwrap();
    store.remove_name(d, "a", false).unwrap();
    store.commit_log().unwrap();
    assert_eq!(
        store.open_txg(),
        txg + 2,
        "creates, renames and removals through posix are logged"
    );
    store.make_node(d, "e", file, None).unwrap();
    store.remove("tank/y", false).unwrap();
    store.commit_log().unwrap();
    assert_eq!(store.open_txg(), txg + 3, "a removal through a path again");
    drop(store);
    let store = open_store_with(&home, config());
    let names: Vec<String> = store
        .read_dir(d)
        .unwrap()
        .into_iter()
        .map(|(n, _, _)| n)
        .collect();
    assert_eq!(names, vec!["b", "c2", "e"]);
    assert!(store.resolve("tank/x").is_err());
    assert!(store.resolve("tank/y").is_err());
}

/// Removals through `posix` are logged (REMOVE records): unlinking a file with another
/// name, the last name of a file (freed at once, as a mount does when nothing holds it,
/// or later, as for a file still open), an empty directory, and a rename over a file,
/// each followed by a commit, sync nothing. After a crash every name is gone that went,
/// what was left without a name is freed, the link counts and the directory's times are
/// as they were, and a scrub finds nothing wrong.
#[test]
fn removals_replay_and_need_no_sync() {
    use cairn_objset::dnode::ObjectKind;
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    let store = open_store_with(&home, config());
    store.mkdir("tank/d").unwrap();
    let (root, d) = (
        store.resolve("tank").unwrap(),
        store.resolve("tank/d").unwrap().object,
    );
    let file = node(ObjectKind::File, 0o100644);
    let write = |object, data: &[u8]| {
        let r = Resolved {
            dataset: root.dataset,
            object,
            kind: ObjectKind::File,
        };
        store.write(&r, 0, data).unwrap();
    };
    // Committed before the log is armed: files with data, a second name, a directory.
    let (kept, _) = store.make_node(d, "kept", file, None).unwrap();
    store.link(kept, root.object, "kept-too").unwrap();
    let (old, _) = store.make_node(d, "old", file, None).unwrap();
    let (open, _) = store.make_node(d, "open", file, None).unwrap();
    let (target, _) = store.make_node(d, "target", file, None).unwrap();
    let (empty, _) = store
        .make_node(d, "empty", node(ObjectKind::Directory, 0o040755), None)
        .unwrap();
    for (o, data) in [(kept, &b"kept"[..]), (old, b"old"), (open, b"open")] {
        write(o, data);
    }
    write(target, &[3u8; 9000]);
    store.commit_log().unwrap(); // arms the log: a sync
    let txg = store.open_txg();

    let gone = store.remove_name(root.object, "kept-too", false).unwrap();
    assert_eq!((gone.object, gone.nlink), (kept, 1));
    let gone = store.remove_name(d, "old", false).unwrap();
    assert_eq!(gone.nlink, 0);
    store.free_orphan(old).unwrap(); // nothing holds it
    store.remove_name(d, "open", false).unwrap(); // still open: freed at its close
    write(open, b"written while unlinked");
    store.remove_name(d, "empty", true).unwrap();
    store.free_orphan(empty).unwrap();
    let (new, _) = store.make_node(d, "new", file, None).unwrap();
    write(new, b"new over target");
    let replaced = store
        .rename(d, "new", d, "target", RenameMode::Replace)
        .unwrap();
    assert_eq!(replaced.map(|u| (u.object, u.nlink)), Some((target, 0)));
    store.free_orphan(target).unwrap();
    // A name made again where one went, in the same txg.
    let (again, _) = store.make_node(d, "old", file, None).unwrap();
    write(again, b"old again");
    store.commit_log().unwrap();
    assert_eq!(store.open_txg(), txg, "logged, not synced");
    let objects = [root.object, d, kept];
    let before: Vec<_> = objects.iter().map(|&o| store.dnode(o).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(20));
    drop(store); // a crash, with `open` still unlinked and not freed

    let store = open_store_with(&home, config());
    let names: Vec<String> = store
        .read_dir(d)
        .unwrap()
        .into_iter()
        .map(|(n, _, _)| n)
        .collect();
    assert_eq!(names, vec!["kept", "old", "target"]);
    assert!(store.resolve("tank/kept-too").is_err());
    assert_eq!(read_live(&store, "tank/d/kept"), b"kept");
    assert_eq!(read_live(&store, "tank/d/old"), b"old again");
    assert_eq!(read_live(&store, "tank/d/target"), b"new over target");
    for freed in [old, open, empty, target] {
        assert!(store.dnode(freed).is_err(), "object {freed} not freed");
    }
    for (o, was) in objects.iter().zip(&before) {
        let now = store.dnode(*o).unwrap();
        assert_eq!(
            (now.nlink, now.mtime_ns, now.ctime_ns),
            (was.nlink, was.mtime_ns, was.ctime_ns),
            "object {o}"
        );
    }
    assert_eq!(scrub_errors(&store), 0);
}

/// Extended attributes set and removed through `set_xattr` are logged (XATTR records):
/// no sync, and after a crash each object has exactly the attributes it had, including
/// one whose attribute object was made in the lost txg, beside a file made there too.
#[test]
fn xattrs_replay_and_need_no_sync() {
    use cairn_objset::dnode::ObjectKind;
    use cairn_objset::xattr::SetMode;
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    let store = open_store_with(&home, config());
    store.mkdir("tank/d").unwrap();
    let d = store.resolve("tank/d").unwrap().object;
    let file = node(ObjectKind::File, 0o100644);
    let (had, _) = store.make_node(d, "had", file, None).unwrap();
    store
        .set_xattr(had, "user.a", Some(b"old"), SetMode::Any)
        .unwrap();
    store
        .set_xattr(had, "user.gone", Some(b"x"), SetMode::Any)
        .unwrap();
    store.commit_log().unwrap(); // arms the log: a sync
    let txg = store.open_txg();

    store
        .set_xattr(had, "user.a", Some(b"new"), SetMode::Replace)
        .unwrap();
    store
        .set_xattr(had, "user.gone", None, SetMode::Any)
        .unwrap();
    let (fresh, _) = store.make_node(d, "fresh", file, None).unwrap();
    let ntacl = vec![7u8; 3000];
    store
        .set_xattr(fresh, "security.NTACL", Some(&ntacl), SetMode::Create)
        .unwrap();
    store
        .set_xattr(fresh, "user.DOSATTRIB", Some(b"0x20"), SetMode::Any)
        .unwrap();
    store
        .set_xattr(d, "user.on-a-directory", Some(b"d"), SetMode::Any)
        .unwrap();
    // A file made after them: its id must not be the one replay gives an attribute object.
    let (later, _) = store.make_node(d, "later", file, None).unwrap();
    store.commit_log().unwrap();
    assert_eq!(store.open_txg(), txg, "logged, not synced");
    let ctime = store.dnode(fresh).unwrap().ctime_ns;
    std::thread::sleep(Duration::from_millis(20));
    drop(store); // a crash

    let store = open_store_with(&home, config());
    let attrs = |o| {
        let names = store.list_xattrs(o).unwrap();
        names
            .into_iter()
            .map(|n| {
                let v = store.get_xattr(o, &n).unwrap();
                (n, v)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(attrs(had), vec![("user.a".to_string(), b"new".to_vec())]);
    assert_eq!(
        attrs(fresh),
        vec![
            ("security.NTACL".to_string(), ntacl),
            ("user.DOSATTRIB".to_string(), b"0x20".to_vec())
        ]
    );
    assert_eq!(
        attrs(d),
        vec![("user.on-a-directory".to_string(), b"d".to_vec())]
    );
    assert_eq!(store.resolve("tank/d/later").unwrap().object, later);
    assert_eq!(store.dnode(fresh).unwrap().ctime_ns, ctime);
    assert_eq!(scrub_errors(&store), 0);
}

/// Renames (to a new name, over a name of a file that keeps another, a directory to
/// another parent, an exchange) and hard links are logged (RENAME and LINK records): the
/// commit does not sync, and after a crash every name leads where it did, with the link
/// counts and the directories' times as they were.
#[test]
fn renames_and_links_replay_and_need_no_sync() {
    use cairn_objset::dnode::ObjectKind;
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    let store = open_store_with(&home, config());
    store.mkdir("tank/d").unwrap();
    store.mkdir("tank/e").unwrap();
    let (root, d, e) = (
        store.resolve("tank").unwrap(),
        store.resolve("tank/d").unwrap().object,
        store.resolve("tank/e").unwrap().object,
    );
    store.commit_log().unwrap(); // arms the log: a sync
    let txg = store.open_txg();
    let file = node(ObjectKind::File, 0o100644);
    let (f, _) = store.make_node(d, "f", file, None).unwrap();
    let write = |object, data: &[u8]| {
        let r = Resolved {
            dataset: root.dataset,
            object,
            kind: ObjectKind::File,
        };
        store.write(&r, 0, data).unwrap();
    };
    write(f, b"moved and linked");
    store.rename(d, "f", e, "g", RenameMode::NoReplace).unwrap();
    store.link(f, d, "hard").unwrap();
    let (sub, _) = store
        .make_node(e, "sub", node(ObjectKind::Directory, 0o040755), None)
        .unwrap();
    store
        .rename(e, "sub", d, "sub2", RenameMode::NoReplace)
        .unwrap();
    let (p, _) = store.make_node(d, "p", file, None).unwrap();
    let (q, _) = store.make_node(e, "q", file, None).unwrap();
    write(p, b"p");
    write(q, b"q");
    store.rename(d, "p", e, "q", RenameMode::Exchange).unwrap();
    // Over a name of a file that keeps another: nothing is left without a name.
    let (r, _) = store.make_node(d, "r", file, None).unwrap();
    let (s, _) = store.make_node(d, "s", file, None).unwrap();
    store.link(s, e, "s-too").unwrap();
    write(r, b"r");
    let replaced = store.rename(d, "r", d, "s", RenameMode::Replace).unwrap();
    assert_eq!(replaced.map(|u| (u.object, u.nlink)), Some((s, 1)));
    // A directory over an empty one, which is left without a name (a mount frees it at
    // once; replay must too).
    let dir_node = node(ObjectKind::Directory, 0o040700);
    let (old, _) = store.make_node(e, "old", dir_node, None).unwrap();
    let (new, _) = store.make_node(e, "new", dir_node, None).unwrap();
    store
        .rename(e, "new", e, "old", RenameMode::Replace)
        .unwrap();
    store.commit_log().unwrap();
    assert_eq!(store.open_txg(), txg, "logged, not synced");
    let objects = [root.object, d, e, f, sub, p, q, r, s];
    let before: Vec<_> = objects.iter().map(|&o| store.dnode(o).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(20));
    drop(store); // a crash

    let store = open_store_with(&home, config());
    let names = [
        ("tank/e/g", f),
        ("tank/d/hard", f),
        ("tank/d/sub2", sub),
        ("tank/d/p", q),
        ("tank/e/q", p),
        ("tank/d/s", r),
        ("tank/e/s-too", s),
        ("tank/e/old", new),
    ];
    for (path, object) in names {
        assert_eq!(store.resolve(path).unwrap().object, object, "{path}");
    }
    for gone in ["tank/d/f", "tank/e/sub", "tank/d/r", "tank/e/new"] {
        assert!(store.resolve(gone).is_err(), "{gone} still there");
    }
    assert!(
        store.dnode(old).is_err(),
        "the replaced directory was not freed"
    );
    for (o, was) in objects.iter().zip(&before) {
        let now = store.dnode(*o).unwrap();
        assert_eq!(
            (now.nlink, now.mtime_ns, now.ctime_ns),
            (was.nlink, was.mtime_ns, was.ctime_ns),
            "object {o}"
        );
    }
    assert_eq!(read_live(&store, "tank/d/hard"), b"moved and linked");
    assert_eq!(read_live(&store, "tank/d/p"), b"q");
    assert_eq!(read_live(&store, "tank/d/s"), b"r");
    assert_eq!(scrub_errors(&store), 0);
}

/// A replay that dirties more than the background writer's backlog limit (four batches)
/// finishes: the writer threads start only after it, so its writes must not wait for them.
#[test]
fn a_replay_larger_than_the_writer_backlog_does_not_wait_for_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let (home, _) = new_pool(dir.path(), "raidz1", 3, 64 * MIB);
    let small_batches = StoreConfig {
        background_batch: 16 << 10,
        ..config()
    };
    let store = open_store_with(&home, small_batches);
    let vol = make_volume(&store, "tank/vol", &[]);
    store.commit_log().unwrap(); // arms the log: a sync
    let txg = store.open_txg();
    for b in 0..VOL_BLOCKS {
        store.write(&vol, b * BLOCK as u64, &block(b)).unwrap();
    }
    store.commit_log().unwrap();
    assert_eq!(store.open_txg(), txg, "logged, not synced");
    drop(store); // a crash: 256 KiB to replay, the backlog limit is 64 KiB

    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let store = open_store_with(&home, small_batches);
        tx.send((0..VOL_BLOCKS).all(|b| read_block(&store, &vol, b) == block(b)))
            .unwrap();
    });
    let replayed = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the replay waited for writer threads that were not running yet");
    assert!(replayed, "a logged block is not as written");
}
