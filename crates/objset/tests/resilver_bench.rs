//! Resilver throughput with every leaf throttled to a fixed bandwidth (the figure in
//! docs/bench/resilver.md): a 2-way mirror and a 6-wide raidz2 hold N GiB, one leaf is
//! replaced by an empty one, and the resilver's write rate to it is compared with the
//! leaf's bandwidth. Ignored by default (it moves gigabytes); run it with
//!
//! ```text
//! CAIRN_BENCH_GIB=1 CAIRN_BENCH_MBS=100 cargo test --release -p cairn-objset \
//!     --test resilver_bench -- --ignored --nocapture
//! ```

mod common;

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_objset::resilver::{ResilverEnd, ResilverOptions};
use cairn_objset::scrub::ScrubControl;
use cairn_objset::{Store, StoreConfig};
use cairn_pool::{CreateOptions, Home, Pool};
use cairn_vdev::Leaf;
use rand::{RngCore, SeedableRng};

const MIB: u64 = 1 << 20;

/// A leaf that behaves like a device of fixed bandwidth: requests queue one after another
/// and each takes `len / bandwidth`.
#[derive(Debug)]
struct ThrottledLeaf {
    inner: Arc<dyn Leaf>,
    bytes_per_sec: f64,
    busy_until: Mutex<Instant>,
}

impl ThrottledLeaf {
    fn new(inner: Arc<dyn Leaf>, bytes_per_sec: u64) -> ThrottledLeaf {
        ThrottledLeaf {
            inner,
            bytes_per_sec: bytes_per_sec as f64,
            busy_until: Mutex::new(Instant::now()),
        }
    }
    fn wait(&self, len: usize) {
        let done = {
            let mut busy = self.busy_until.lock().unwrap();
            let start = (*busy).max(Instant::now());
            *busy = start + Duration::from_secs_f64(len as f64 / self.bytes_per_sec);
            *busy
        };
        if let Some(d) = done.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }
}

impl Leaf for ThrottledLeaf {
    fn path(&self) -> &str {
        self.inner.path()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn physical_sector_size(&self) -> u32 {
        self.inner.physical_sector_size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.wait(buf.len());
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.wait(buf.len());
        self.inner.write_at(buf, offset)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.wait(bufs.iter().map(|b| b.len()).sum());
        self.inner.write_vectored_at(bufs, offset)
    }
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        self.wait(bufs.iter().map(|b| b.len()).sum());
        self.inner.read_vectored_at(bufs, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Fills a pool with `bytes` of incompressible files.
fn fill(home: &Home, bytes: u64) {
    let store = Store::open_with(
        Pool::open(home, "tank").unwrap(),
        StoreConfig {
            dirty_max: 256 * MIB,
            ..StoreConfig::default()
        },
    )
    .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut chunk = vec![0u8; (16 * MIB) as usize];
    let per_file = 64 * MIB;
    let mut written = 0;
    let mut i = 0;
    while written < bytes {
        let path = format!("tank/f{i}");
        store.create_file(&path, false).unwrap();
        let r = store.resolve(&path).unwrap();
        let mut off = 0;
        while off < per_file && written < bytes {
            rng.fill_bytes(&mut chunk);
            store.write(&r, off, &chunk).unwrap();
            off += chunk.len() as u64;
            written += chunk.len() as u64;
        }
        i += 1;
    }
    store.close().unwrap();
}

/// (bytes copied, seconds, fraction of the leaf bandwidth) of replacing leaf 1.
fn measure(dir: &Path, kind: &str, n: usize, leaf_size: u64, data: u64, bw: u64) -> (u64, f64) {
    let files = common::make_files(dir, n, leaf_size);
    let home = Home::at(dir.join("home"));
    let mut tokens = vec![kind.to_string()];
    tokens.extend(files.iter().map(|f| f.display().to_string()));
    Pool::create(&home, "tank", &tokens, CreateOptions::default()).unwrap();
    fill(&home, data);
    let new = dir.join("new");
    std::fs::File::create(&new)
        .unwrap()
        .set_len(leaf_size)
        .unwrap();
    let mut pool = Pool::open(&home, "tank").unwrap();
    pool.replace(
        &files[1].display().to_string(),
        Some(&new.display().to_string()),
        false,
    )
    .unwrap();
    for slot in pool.leaf_slots() {
        assert!(pool.wrap_leaf(slot, |inner| {
            Arc::new(ThrottledLeaf::new(inner, bw)) as Arc<dyn Leaf>
        }));
    }
    let store = Store::open(pool).unwrap();
    let started = Instant::now();
    let (p, end) = store
        .resilver(ResilverOptions::default(), &mut |_| ScrubControl::Continue)
        .unwrap();
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(end, ResilverEnd::Finished);
    (p.repaired_bytes, secs)
}

#[test]
#[ignore]
fn resilver_throughput_against_leaf_bandwidth() {
    let gib = env_u64("CAIRN_BENCH_GIB", 1);
    let mbs = env_u64("CAIRN_BENCH_MBS", 100);
    let bw = mbs * 1_000_000;
    let data = gib << 30;
    let base = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    println!("| layout | data | leaf bandwidth | copied to new leaf | time | resilver rate | fraction of leaf bandwidth |");
    println!("|---|---|---|---|---|---|---|");
    for (kind, n, leaf_size) in [
        ("mirror", 2, data + data / 4 + 256 * MIB),
        ("raidz2", 6, data / 4 + data / 8 + 256 * MIB),
    ] {
        let dir = base.path().join(kind);
        std::fs::create_dir_all(&dir).unwrap();
        let (bytes, secs) = measure(&dir, kind, n, leaf_size, data, bw);
        let rate = bytes as f64 / secs;
        println!(
            "| {kind} {n}-wide | {gib} GiB | {mbs} MB/s | {:.0} MiB | {secs:.1} s | {:.1} MB/s | {:.0} % |",
            bytes as f64 / MIB as f64,
            rate / 1e6,
            100.0 * rate / bw as f64
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
