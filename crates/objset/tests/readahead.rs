//! Sequential read-ahead on pools with rotating disks (`sim:` leaves here): a stream of
//! 1 MiB reads finds most of its blocks already in the block cache, what it reads is what
//! was written, and read-ahead stays off when the tunable says 0 and on pools of files;
//! fetched in the background beside rewrites and syncs, it reads nothing freed.

mod common;

use cairn_objset::{Store, StoreConfig};
use cairn_pool::{CreateOptions, Home, Pool};
use common::checksum_errors;

const MIB: usize = 1 << 20;

/// A raidz1 of three simulated 1 TB disks (sparse files in `dir`), or of three files.
fn pool(dir: &std::path::Path, simulated: bool) -> Home {
    let home = Home::at(dir.join("home"));
    let mut tokens = vec!["raidz1".to_string()];
    for k in 0..3 {
        let path = dir.join(format!("d{k}"));
        if simulated {
            tokens.push(format!("sim:{}?disk=1TB", path.display()));
        } else {
            std::fs::File::create(&path)
                .unwrap()
                .set_len(256 << 20)
                .unwrap();
            tokens.push(path.display().to_string());
        }
    }
    Pool::create(&home, "tank", &tokens, CreateOptions::default()).unwrap();
    home
}

/// The pool of `pool` with `data` in the file `tank/f` (uncompressed), closed.
fn with_file(dir: &std::path::Path, simulated: bool, data: &[u8]) -> Home {
    let home = pool(dir, simulated);
    let store = Store::open(Pool::open(&home, "tank").unwrap()).unwrap();
    store.set_property("tank", "compression", "off").unwrap();
    store.create_file("tank/f", false).unwrap();
    let f = store.resolve("tank/f").unwrap();
    store.write(&f, 0, data).unwrap();
    store.close().unwrap();
    home
}

/// Writes 16 MiB, reopens (cold cache), reads it back 1 MiB a call; the cache hits and
/// the leaves' async (read-ahead) read requests.
fn stream_hits(simulated: bool, readahead_max: u64) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..16 * MIB).map(|i| (i * 131 % 251) as u8).collect();
    let home = with_file(dir.path(), simulated, &data);
    let config = StoreConfig {
        readahead_max,
        ..StoreConfig::default()
    };
    let store = Store::open_with(Pool::open(&home, "tank").unwrap(), config).unwrap();
    let f = store.resolve("tank/f").unwrap();
    let before = store.pool().cache.stats().hits;
    let mut buf = vec![0u8; MIB];
    for k in 0..16 {
        assert_eq!(store.read(&f, (k * MIB) as u64, &mut buf).unwrap(), MIB);
        assert!(buf == data[k * MIB..(k + 1) * MIB], "MiB {k}");
    }
    let async_reads = store
        .pool()
        .io_snapshot()
        .total()
        .2
        .classes
        .get(&cairn_vdev::io_class::IoClass::AsyncRead)
        .map_or(0, |c| c.ops);
    (store.pool().cache.stats().hits - before, async_reads)
}

#[test]
fn a_sequential_stream_on_rotating_disks_is_read_ahead() {
    let (hits, async_reads) = stream_hits(true, 8 << 20);
    // 128 blocks of 128 KiB; the first two MiB are read before any window is fetched.
    assert!(hits >= 100, "{hits} of 128 blocks came from the read-ahead");
    // Its requests count as async reads (`iostat -q`/`-w`), as zpool counts prefetch.
    assert!(async_reads > 0, "no async reads counted");
}

#[test]
fn no_read_ahead_when_turned_off_or_on_files() {
    // (A hit or two come from blocks the reads themselves cached, not from read-ahead.)
    let (off, off_async) = stream_hits(true, 0);
    assert!(off <= 2, "readahead_max 0: {off} hits");
    assert_eq!(off_async, 0, "async reads without read-ahead");
    let (files, _) = stream_hits(false, 8 << 20);
    assert!(files <= 2, "files do not rotate: {files} hits");
}

/// Streams read a file while another thread rewrites 1 MiB pieces of it with the same
/// bytes (each piece's blocks move; the old ones are freed and, two syncs later, free to
/// be reused) and syncs after each: every read returns the file's bytes, and no leaf
/// counts a checksum error. (Whether reuse meets a prefetch here is up to timing; the
/// rule that drops a prefetch looked up before two syncs is tested in prefetch.rs.)
#[test]
fn read_ahead_beside_rewrites_and_syncs_reads_nothing_freed() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..16 * MIB).map(|i| (i * 7 % 253) as u8).collect();
    let home = with_file(dir.path(), true, &data);
    let store = Store::open(Pool::open(&home, "tank").unwrap()).unwrap();
    let f = store.resolve("tank/f").unwrap();
    let rewriting = std::sync::atomic::AtomicBool::new(true);
    std::thread::scope(|s| {
        s.spawn(|| {
            for round in 0..60 {
                let at = (round * 5 % 16) * MIB;
                store.write(&f, at as u64, &data[at..at + MIB]).unwrap();
                store.sync().unwrap();
            }
            rewriting.store(false, std::sync::atomic::Ordering::SeqCst);
        });
        let mut buf = vec![0u8; MIB];
        let mut passes = 0;
        while passes < 3 || rewriting.load(std::sync::atomic::Ordering::SeqCst) {
            for k in 0..16 {
                assert_eq!(store.read(&f, (k * MIB) as u64, &mut buf).unwrap(), MIB);
                assert!(
                    buf == data[k * MIB..(k + 1) * MIB],
                    "pass {passes}, MiB {k}"
                );
            }
            passes += 1;
        }
    });
    assert!(
        checksum_errors(&store).iter().all(|&e| e == 0),
        "{:?}",
        checksum_errors(&store)
    );
    store.close().unwrap();
}
