//! A raidz2 pool whose six leaves are NBD exports served by six nbdkit processes.
//!
//! - `nbdkit memory` on unix sockets, at the block level: one server dies mid-write; the
//!   leaf goes REMOVED, the pool DEGRADED, writes keep succeeding and every block reads back.
//! - `nbdkit file` on tmpfs over TCP, each server in its own network namespace reached over
//!   a veth pair where the machine allows it (root with `ip netns`), on 127.0.0.1 otherwise
//!   (the test prints which, and why): files are written through the object store while one
//!   server dies; writes go on DEGRADED; the server comes back and the resilver copies the
//!   txgs it missed onto it; the files read back identical, a scrub finds nothing to repair,
//!   and with two other leaves offline (no redundancy left) everything still reads back, so
//!   the returned leaf holds its share again.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cairn_objset::resilver::{ResilverEnd, ResilverOptions};
use cairn_objset::scrub::{ScrubControl, ScrubEnd};
use cairn_objset::Store;
use cairn_pool::{CreateOptions, Health, Home, Pool};
use common::require;
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

const LEAF_SIZE: u64 = 100 << 20;
const LEAVES: usize = 6;
const KILLED: usize = 2;

/// An nbdkit process; killed on drop (and by --exit-with-parent if the test dies).
struct Nbdkit {
    child: Child,
}

/// Where one nbdkit server listens.
struct Endpoint {
    /// The network namespace it runs in (None: the test's own).
    netns: Option<String>,
    addr: String,
    port: u16,
}

impl Endpoint {
    fn url(&self) -> String {
        format!("nbd://{}:{}/", self.addr, self.port)
    }
}

fn spawn_nbdkit(netns: Option<&str>, args: &[&OsStr]) -> Child {
    require("nbdkit");
    let mut cmd = match netns {
        Some(ns) => {
            // `ip netns exec` execs nbdkit in place: the child is nbdkit itself.
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "nbdkit"]);
            c
        }
        None => Command::new("nbdkit"),
    };
    cmd.args(["--exit-with-parent", "--foreground"])
        .args(args)
        .stdout(Stdio::null())
        .spawn()
        .expect("cannot start nbdkit (Debian package 'nbdkit')")
}

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ready() {
        assert!(Instant::now() < deadline, "nbdkit not ready: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Nbdkit {
    /// `nbdkit memory 100M` on a unix socket.
    fn memory_on_unix(socket: &Path) -> Nbdkit {
        let _ = std::fs::remove_file(socket);
        let size = LEAF_SIZE.to_string();
        let args = [
            OsStr::new("--unix"),
            socket.as_os_str(),
            OsStr::new("memory"),
            OsStr::new(&size),
        ];
        let child = spawn_nbdkit(None, &args);
        wait_until(&socket.display().to_string(), || socket.exists());
        Nbdkit { child }
    }

    /// `nbdkit file FILE` on a TCP endpoint (in its network namespace, if any).
    fn file_on_tcp(at: &Endpoint, file: &Path) -> Nbdkit {
        let port = at.port.to_string();
        let args = [
            OsStr::new("--ipaddr"),
            OsStr::new(&at.addr),
            OsStr::new("--port"),
            OsStr::new(&port),
            OsStr::new("file"),
            file.as_os_str(),
        ];
        let child = spawn_nbdkit(at.netns.as_deref(), &args);
        wait_until(&at.url(), || {
            TcpStream::connect((at.addr.as_str(), at.port)).is_ok()
        });
        Nbdkit { child }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `ip ARGS`.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `ip` ({e})"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// One network namespace per server, each joined to the test's namespace by a veth pair
/// on its own /30; all removed on drop.
#[derive(Default)]
struct Namespaces {
    names: Vec<String>,
    host_links: Vec<String>,
}

impl Namespaces {
    /// Sets up `n` namespaces and returns them with the endpoints of their servers.
    fn create(n: usize) -> Result<(Namespaces, Vec<Endpoint>), String> {
        // Names and addresses from the pid: concurrent runs do not meet.
        let pid = std::process::id();
        let mut ns = Namespaces::default();
        let mut endpoints = Vec::new();
        for i in 0..n {
            let name = format!("cairn-nbd-{pid}-{i}");
            ip(&["netns", "add", &name])?;
            ns.names.push(name.clone());
            let (host, peer) = (format!("cnb{pid}h{i}"), format!("cnb{pid}p{i}"));
            ip(&["link", "add", &host, "type", "veth", "peer", "name", &peer])?;
            ns.host_links.push(host.clone());
            ip(&["link", "set", &peer, "netns", &name])?;
            let net = format!("10.{}.{}", (pid >> 8) & 0xff, pid & 0xff);
            let (host_addr, server_addr) = (
                format!("{net}.{}", 4 * i + 1),
                format!("{net}.{}", 4 * i + 2),
            );
            ip(&["addr", "add", &format!("{host_addr}/30"), "dev", &host])?;
            ip(&["link", "set", &host, "up"])?;
            ip(&[
                "-n",
                &name,
                "addr",
                "add",
                &format!("{server_addr}/30"),
                "dev",
                &peer,
            ])?;
            ip(&["-n", &name, "link", "set", &peer, "up"])?;
            endpoints.push(Endpoint {
                netns: Some(name),
                addr: server_addr,
                port: 10809,
            });
        }
        Ok((ns, endpoints))
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        // Deleting one end of a veth pair deletes both.
        for link in &self.host_links {
            let _ = ip(&["link", "del", link]);
        }
        for name in &self.names {
            let _ = ip(&["netns", "del", name]);
        }
    }
}

/// Free ports on 127.0.0.1.
fn loopback_endpoints(n: usize) -> Vec<Endpoint> {
    (0..n)
        .map(|_| Endpoint {
            netns: None,
            addr: "127.0.0.1".into(),
            port: TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port(),
        })
        .collect()
}

/// Network namespaces over veth where they can be set up, loopback otherwise; says which.
/// `CAIRN_TEST_LOOPBACK=1` forces loopback.
fn choose_network(n: usize) -> (Option<Namespaces>, Vec<Endpoint>) {
    let setup = match std::env::var_os("CAIRN_TEST_LOOPBACK") {
        Some(_) => Err("CAIRN_TEST_LOOPBACK is set".to_string()),
        None => Namespaces::create(n),
    };
    match setup {
        Ok((ns, endpoints)) => {
            eprintln!(
                "pool_over_nbd: {n} nbdkit servers in network namespaces ({}…), over veth",
                ns.names[0]
            );
            (Some(ns), endpoints)
        }
        Err(why) => {
            eprintln!("pool_over_nbd: nbdkit servers on 127.0.0.1: no network namespaces ({why})");
            (None, loopback_endpoints(n))
        }
    }
}

struct Written {
    offset: u64,
    data: Vec<u8>,
}

/// Bump allocator over top-level vdev 0.
struct Writer {
    next: u64,
    rng: StdRng,
}

impl Writer {
    fn write(&mut self, pool: &Pool) -> Written {
        let top = &pool.tops()[0];
        let sectors = self.rng.gen_range(1..=64u64);
        let mut data = vec![0u8; (sectors * top.sector()) as usize];
        self.rng.fill_bytes(&mut data);
        let offset = self.next;
        pool.write_block(0, offset, &data)
            .expect("writes keep succeeding");
        self.next += top.block_asize(data.len() as u64);
        Written { offset, data }
    }
}

/// Reads every block back (with a verifier, so stale columns are rebuilt) and compares.
fn check_all(pool: &Pool, written: &[Written]) {
    for w in written {
        let mut buf = vec![0u8; w.data.len()];
        let expected = |b: &[u8]| b == w.data.as_slice();
        pool.read_block(0, w.offset, &mut buf, Some(&expected))
            .unwrap_or_else(|e| panic!("block at {}: {e}", w.offset));
        assert!(buf == w.data, "block at {} differs", w.offset);
    }
}

fn leaf_health(pool: &Pool) -> Vec<Health> {
    pool.tops()[0]
        .children
        .iter()
        .map(|slot| Pool::leaf_health(slot))
        .collect()
}

fn create_raidz2(home: &Home, urls: &[String]) -> Pool {
    let mut tokens = vec!["raidz2".to_string()];
    tokens.extend(urls.iter().cloned());
    let pool = Pool::create(home, "tank", &tokens, CreateOptions::default())
        .unwrap()
        .pool
        .unwrap();
    assert_eq!(pool.health(), Health::Online);
    assert_eq!(pool.tops()[0].children[KILLED].path, urls[KILLED]);
    pool
}

/// Writes, kills `victim` while another thread writes, checks REMOVED / DEGRADED and that
/// every block reads back; returns what was written.
fn kill_one_mid_write(pool: &Pool, victim: &mut Nbdkit) -> Vec<Written> {
    let mut writer = Writer {
        next: 0,
        rng: StdRng::seed_from_u64(6),
    };
    let mut written: Vec<Written> = (0..30).map(|_| writer.write(pool)).collect();
    let progress = AtomicUsize::new(0);
    let during = std::thread::scope(|s| {
        let handle = s.spawn(|| {
            let mut out = Vec::new();
            for i in 0..60 {
                out.push(writer.write(pool));
                progress.store(i + 1, Ordering::SeqCst);
            }
            out
        });
        while progress.load(Ordering::SeqCst) < 10 {
            std::thread::sleep(Duration::from_millis(2));
        }
        victim.kill();
        handle.join().unwrap()
    });
    written.extend(during);
    assert_degraded_without(pool, KILLED);
    written.extend((0..20).map(|_| writer.write(pool)));
    check_all(pool, &written);
    pool.flush().unwrap();
    written
}

/// Leaf `gone` is REMOVED, the others ONLINE, the pool DEGRADED.
fn assert_degraded_without(pool: &Pool, gone: usize) {
    let health = leaf_health(pool);
    assert_eq!(health[gone], Health::Removed, "{health:?}");
    assert_eq!(
        health.iter().filter(|h| **h == Health::Online).count(),
        LEAVES - 1,
        "{health:?}"
    );
    assert_eq!(pool.health(), Health::Degraded);
}

#[test]
fn raidz2_over_six_nbdkit_memory_servers_over_unix_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let sockets: Vec<PathBuf> = (0..LEAVES)
        .map(|i| dir.path().join(format!("m{i}.sock")))
        .collect();
    let mut servers: Vec<Nbdkit> = sockets.iter().map(|s| Nbdkit::memory_on_unix(s)).collect();
    let urls: Vec<String> = sockets
        .iter()
        .map(|s| format!("nbd+unix:///?socket={}", s.display()))
        .collect();
    let home = Home::at(dir.path().join("home"));
    let pool = create_raidz2(&home, &urls);
    kill_one_mid_write(&pool, &mut servers[KILLED]);
}

type Files = BTreeMap<String, Vec<u8>>;

/// Writes `n` files of 64–384 KiB through the object store, a txg every third file;
/// `progress` counts the files written.
fn write_files(
    store: &Store,
    rng: &mut StdRng,
    prefix: &str,
    n: usize,
    progress: &AtomicUsize,
) -> Files {
    let mut files = Files::new();
    for i in 0..n {
        let path = format!("tank/{prefix}{i}");
        let mut data = vec![0u8; rng.gen_range(64 << 10..=384 << 10)];
        rng.fill_bytes(&mut data);
        store.create_file(&path, true).unwrap();
        let r = store.resolve(&path).unwrap();
        store
            .write(&r, 0, &data)
            .unwrap_or_else(|e| panic!("writes keep succeeding: {path}: {e}"));
        if i % 3 == 2 {
            store
                .sync()
                .unwrap_or_else(|e| panic!("txgs keep syncing: {e}"));
        }
        files.insert(path, data);
        progress.store(i + 1, Ordering::SeqCst);
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

#[test]
fn raidz2_over_six_nbdkit_file_servers_one_dies_returns_and_is_resilvered() {
    let started = Instant::now();
    // Files on tmpfs so a restarted server still has its data.
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let files: Vec<PathBuf> = (0..LEAVES)
        .map(|i| dir.path().join(format!("d{i}.img")))
        .collect();
    for f in &files {
        std::fs::File::create(f)
            .unwrap()
            .set_len(LEAF_SIZE)
            .unwrap();
    }
    // Declared before the servers: dropped (namespaces deleted) after they are killed.
    let (_namespaces, endpoints) = choose_network(LEAVES);
    let mut servers: Vec<Nbdkit> = endpoints
        .iter()
        .zip(&files)
        .map(|(e, f)| Nbdkit::file_on_tcp(e, f))
        .collect();
    let urls: Vec<String> = endpoints.iter().map(Endpoint::url).collect();
    let home = Home::at(dir.path().join("home"));
    let store = Store::open(create_raidz2(&home, &urls)).unwrap();
    let mut rng = StdRng::seed_from_u64(6);
    let mut model = write_files(&store, &mut rng, "before", 9, &AtomicUsize::new(0));

    // One server dies while a thread writes files.
    let progress = AtomicUsize::new(0);
    let during = std::thread::scope(|s| {
        let handle = s.spawn(|| {
            let mut rng = StdRng::seed_from_u64(7);
            write_files(&store, &mut rng, "during", 15, &progress)
        });
        while progress.load(Ordering::SeqCst) < 4 {
            std::thread::sleep(Duration::from_millis(2));
        }
        servers[KILLED].kill();
        handle.join().unwrap()
    });
    model.extend(during);
    assert_degraded_without(store.pool(), KILLED);
    // Writes go on DEGRADED, and every txg since the death is in the leaf's DTL.
    model.extend(write_files(
        &store,
        &mut rng,
        "after",
        6,
        &AtomicUsize::new(0),
    ));
    check_files(&store, &model);
    let victim = &store.pool().tops()[0].children[KILLED];
    let missed = victim.dtl_ranges();
    assert!(!missed.is_empty(), "the dead leaf missed no txg");
    assert!(
        missed.iter().all(|&(_, end)| end <= store.open_txg()),
        "{missed:?}"
    );
    drop(store.close().unwrap());

    // The server comes back with its file: the leaf is ONLINE again but stale for the txgs
    // it missed.
    servers[KILLED] = Nbdkit::file_on_tcp(&endpoints[KILLED], &files[KILLED]);
    let pool = Pool::open(&home, "tank").unwrap();
    let health = leaf_health(&pool);
    assert!(health.iter().all(|h| *h == Health::Online), "{health:?}");
    assert!(pool.needs_resilver());
    let dtl = pool.tops()[0].children[KILLED].dtl_ranges();
    assert!(
        !dtl.is_empty()
            && missed
                .iter()
                .all(|&(a, _)| cairn_vdev::dtl::contains(&dtl, a)),
        "DTL after reopen {dtl:?}, missed {missed:?}"
    );
    for (i, child) in pool.tops()[0].children.iter().enumerate() {
        if i != KILLED {
            assert!(
                child.dtl_ranges().is_empty(),
                "leaf {i}: {:?}",
                child.dtl_ranges()
            );
        }
    }

    // Resilver: the missed txgs' blocks are rebuilt from the other five and written to it.
    let store = Store::open(pool).unwrap();
    let (p, end) = store
        .resilver(ResilverOptions::default(), &mut |_| ScrubControl::Continue)
        .unwrap();
    eprintln!(
        "pool_over_nbd: resilver copied {} blocks, {} bytes in {:.2} s (DTL was {dtl:?})",
        p.blocks_repaired, p.repaired_bytes, p.elapsed_secs
    );
    assert_eq!(end, ResilverEnd::Finished, "{p:?}");
    assert!(p.blocks_repaired > 0 && p.repaired_bytes > 0, "{p:?}");
    assert_eq!(p.errors, 0, "{p:?}");
    let victim = &store.pool().tops()[0].children[KILLED];
    assert!(victim.dtl_ranges().is_empty(), "{:?}", victim.dtl_ranges());
    assert!(!victim.stale.load(Ordering::Relaxed));
    assert!(!store.pool().needs_resilver());
    assert_eq!(store.pool().health(), Health::Online);
    check_files(&store, &model);
    let (s, end) = store
        .scrub(None, Duration::from_secs(3600), &mut |_| {
            ScrubControl::Continue
        })
        .unwrap();
    assert_eq!(end, ScrubEnd::Finished);
    assert_eq!(
        (s.errors, s.repaired_bytes),
        (0, 0),
        "scrub after resilver: {s:?}"
    );
    assert!(s.blocks > 0, "{s:?}");
    drop(store.close().unwrap());

    // The returned leaf holds its share: with two other leaves offline a raidz2 has no
    // redundancy left, so every column of it must be right for the files to read back.
    let mut pool = Pool::open(&home, "tank").unwrap();
    for other in [0, LEAVES - 1] {
        pool.offline(&urls[other], true).unwrap();
    }
    assert_eq!(pool.health(), Health::Degraded);
    let store = Store::open(pool).unwrap();
    check_files(&store, &model);
    drop(store);
    let elapsed = started.elapsed();
    eprintln!("pool_over_nbd: {:.1} s", elapsed.as_secs_f64());
}
