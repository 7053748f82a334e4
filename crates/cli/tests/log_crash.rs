//! kill -9 of `cairn serve` while an NBD client writes 4 KiB blocks with FUA and FLUSH:
//! every write the server acknowledged as durable is on the volume after the next import
//! (the intent log's replay), every block holds exactly one version that was written to it
//! (no unacknowledged write appears in part), and the pool scrubs clean at the end.
//!
//! A second test does the same while a file system of the pool, mounted by the same
//! server, creates, renames and removes files (by their own fsync-less churn, so that
//! dataset's log never needs committing beside the volume's).
//!
//! A third kills the server while a mount creates files (and directories and symbolic
//! links), writes and fsyncs them, renames some, gives some a second name, replaces some
//! by a rename over them, removes others and sets extended attributes: CREATE, RENAME,
//! LINK, REMOVE and XATTR records. Every file whose fsync returned, and every name whose
//! directory's fsync returned, is there after the replay, with its bytes; every removal
//! acknowledged the same way stays removed, and every attribute acknowledged by an fsync
//! of its file is there.
//!
//! CI runs a slice (`kill_9_during_flushed_writes_keeps_every_acknowledged_write`,
//! `…_beside_namespace_changes` and `kill_9_during_fsynced_creates…`); the recorded runs
//! (docs/bench/intent-log.md) run the ignored long ones.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_nbd::client::NbdClient;
use cairn_nbd::url::parse_nbd_url;
use rand::{Rng, RngCore, SeedableRng};
use support::{cairn, cairn_cmd, files, ok, MIB};

const BLOCK: usize = 4096;
const BLOCKS: u64 = 256;

/// `cairn serve` of the volume over `socket`, and of `tank/fs` mounted at `mnt` if given.
fn start_server(home: &Path, socket: &Path, mnt: Option<&Path>) -> Child {
    let _ = std::fs::remove_file(socket);
    let mut cmd = cairn_cmd(home);
    cmd.args(["serve", "--nbd-socket", socket.to_str().unwrap()])
        .args(["--sync-interval", "3600", "--duration", "600"]);
    if let Some(mnt) = mnt {
        cmd.args(["--mount", &format!("tank/fs={}", mnt.display())]);
    }
    // (Its messages go to a file in the home: a server that does not start says why.)
    let log_path = home.join("serve.log");
    let log = std::fs::File::create(&log_path).expect("serve log");
    let mut child = cmd
        .arg("tank")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start cairn serve");
    let start = Instant::now();
    let mounted = || String::from_utf8_lossy(&cairn(home, &["mount"]).stdout).contains("tank/fs");
    while !socket.exists() || (mnt.is_some() && !mounted()) {
        let exited = child.try_wait().ok().flatten();
        if exited.is_some() || start.elapsed() > Duration::from_secs(30) {
            let said = std::fs::read_to_string(&log_path).unwrap_or_default();
            panic!("serve did not start ({exited:?}): {said}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

/// Creates, writes, renames and removes files in `dir` until a call fails (the server was
/// killed) or `stop` is set; returns the operations done.
fn namespace_churn(dir: &Path, round: usize, stop: &AtomicBool) -> u64 {
    let mut done = 0;
    for i in 0u64.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let a = dir.join(format!("a{round}.{i}"));
        let b = dir.join(format!("b{round}.{i}"));
        let step = std::fs::write(&a, i.to_le_bytes())
            .and_then(|()| std::fs::rename(&a, &b))
            .and_then(|()| match i.checked_sub(4) {
                Some(old) => std::fs::remove_file(dir.join(format!("b{round}.{old}"))),
                None => Ok(()),
            });
        if step.is_err() {
            break;
        }
        done += 3;
    }
    done
}

/// Contents of version `v` of a block.
fn version(v: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK];
    rand::rngs::StdRng::seed_from_u64(v).fill_bytes(&mut b);
    b
}

/// What the client wrote over all rounds, and what the server acknowledged as durable.
#[derive(Default)]
struct Ledger {
    next_version: u64,
    /// Every version written to each block.
    written: BTreeMap<u64, Vec<u64>>,
    /// The newest version of each block acknowledged durable (FUA reply, or a FLUSH reply
    /// after it).
    durable: BTreeMap<u64, u64>,
    acked_writes: u64,
}

impl Ledger {
    /// Checks the volume as the server holds it after a restart.
    fn check(&self, client: &mut NbdClient, round: usize) {
        for b in 0..BLOCKS {
            let mut got = vec![0u8; BLOCK];
            client.read_at(&mut got, b * BLOCK as u64).unwrap();
            let versions = self.written.get(&b).map(Vec::as_slice).unwrap_or(&[]);
            let found = versions.iter().copied().find(|&v| version(v) == got);
            match (found, self.durable.get(&b)) {
                (Some(v), Some(&need)) => assert!(
                    v >= need,
                    "round {round}: block {b} holds version {v}, {need} was acknowledged"
                ),
                (Some(_), None) => {}
                (None, None) => assert!(
                    got.iter().all(|&x| x == 0),
                    "round {round}: block {b} holds bytes no write gave it"
                ),
                (None, Some(need)) => {
                    panic!("round {round}: block {b} lost acknowledged version {need}")
                }
            }
        }
    }

    /// Writes until the connection breaks (the server was killed); FUA on some writes, a
    /// FLUSH after every few others.
    fn write_until_killed(&mut self, client: &mut NbdClient, rng: &mut impl Rng) {
        let mut unflushed: BTreeMap<u64, u64> = BTreeMap::new();
        loop {
            self.next_version += 1;
            let v = self.next_version;
            let b = rng.gen_range(0..BLOCKS);
            let fua = rng.gen_bool(0.3);
            self.written.entry(b).or_default().push(v);
            if client.write_at(&version(v), b * BLOCK as u64, fua).is_err() {
                return;
            }
            if fua {
                self.durable.insert(b, v);
                self.acked_writes += 1;
                unflushed.remove(&b);
            } else {
                unflushed.insert(b, v);
            }
            if rng.gen_bool(0.25) {
                if client.flush().is_err() {
                    return;
                }
                self.acked_writes += unflushed.len() as u64;
                self.durable.extend(std::mem::take(&mut unflushed));
            }
        }
    }
}

/// Pool `tank`, a raidz1 of three 128 MiB files in a temporary folder (and the cairn
/// home in it).
fn raidz1_pool() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let mut args = vec!["create".to_string(), "tank".into(), "raidz1".into()];
    args.extend(files(dir.path(), 3, 128 * MIB));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&cairn(&home, &refs));
    (dir, home)
}

/// `rounds` kill -9 rounds on one pool; returns the writes acknowledged durable. With
/// `churn`, a file system of the pool changes its names meanwhile (through a mount).
fn crash_rounds(rounds: usize, seed: u64, churn: bool) -> u64 {
    let (dir, home) = raidz1_pool();
    ok(&cairn(
        &home,
        &["volume", "create", "-V", "1M", "-b", "16K", "tank/vol"],
    ));
    ok(&cairn(&home, &["dataset", "create", "tank/fs"]));
    let mnt = dir.path().join("mnt");
    let mnt = churn.then_some(mnt.as_path());
    let socket = dir.path().join("nbd.sock");
    let url = parse_nbd_url(&format!("nbd+unix:///tank/vol?socket={}", socket.display())).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut ledger = Ledger::default();
    let mut churned = 0;
    for round in 0..rounds {
        let mut server = start_server(&home, &socket, mnt);
        let mut client = NbdClient::connect(&url).unwrap();
        ledger.check(&mut client, round);
        // Killed at a random moment of the writes (the client sees the connection drop).
        let kill_after = Duration::from_micros(rng.gen_range(0..150_000));
        let pid = server.id() as i32;
        let killed = Arc::new(AtomicBool::new(false));
        let k = killed.clone();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(kill_after);
            // SAFETY: SIGKILL to our own child process (waited for below).
            unsafe { libc::kill(pid, libc::SIGKILL) };
            k.store(true, Ordering::SeqCst);
        });
        let churner = mnt.map(|m| {
            let (m, stop) = (m.to_path_buf(), killed.clone());
            std::thread::spawn(move || namespace_churn(&m, round, &stop))
        });
        ledger.write_until_killed(&mut client, &mut rng);
        killer.join().unwrap();
        assert!(killed.load(Ordering::SeqCst));
        let _ = server.wait();
        if let (Some(churner), Some(m)) = (churner, mnt) {
            churned += churner.join().unwrap();
            // The mount is stale now; `umount -f` cleans it up.
            ok(&cairn(&home, &["umount", "-f", m.to_str().unwrap()]));
        }
    }
    if churn {
        eprintln!("{churned} namespace operations beside the writes");
    }
    // The last kill's log is replayed by this import; then everything must scrub clean.
    let mut server = start_server(&home, &socket, None);
    let mut client = NbdClient::connect(&url).unwrap();
    ledger.check(&mut client, rounds);
    client.disconnect();
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    let _ = server.wait();
    ok(&cairn(&home, &["scrub", "tank"]));
    let status = ok(&cairn(&home, &["status", "tank"]));
    assert!(status.contains("errors: No known data errors"), "{status}");
    assert!(status.contains(" 0 errors"), "{status}");
    eprintln!(
        "{rounds} kill -9 rounds, {} writes, {} acknowledged durable",
        ledger.next_version, ledger.acked_writes
    );
    ledger.acked_writes
}

#[test]
fn kill_9_during_flushed_writes_keeps_every_acknowledged_write() {
    assert!(crash_rounds(40, 11, false) > 100);
}

/// Whether this machine can mount (root and /dev/fuse); prints why a test skips if not.
fn mount_possible() -> bool {
    let (root, fuse) = (
        unsafe { libc::geteuid() } == 0,
        Path::new("/dev/fuse").exists(),
    );
    if !(root && fuse) {
        eprintln!("SKIPPED: the mount needs root and /dev/fuse (root: {root}, /dev/fuse: {fuse})");
    }
    root && fuse
}

#[test]
fn kill_9_during_flushed_writes_beside_namespace_changes() {
    if mount_possible() {
        assert!(crash_rounds(20, 12, true) > 50);
    }
}

/// What the mount acknowledged: files whose fsync returned (path, bytes), symbolic links
/// and removals whose directory's fsync returned (path, target; path), and extended
/// attributes whose file's fsync returned (path, value of `XATTR`).
#[derive(Default)]
struct Acked {
    files: Vec<(PathBuf, Vec<u8>)>,
    links: Vec<(PathBuf, PathBuf)>,
    removed: Vec<PathBuf>,
    xattrs: Vec<(PathBuf, Vec<u8>)>,
}

/// The extended attribute `fsynced_creates` sets (as Samba keeps DOS attributes).
const XATTR: &str = "user.DOSATTRIB";

fn set_xattr(path: &Path, value: &[u8]) -> std::io::Result<()> {
    let (p, n) = (c_path(path), std::ffi::CString::new(XATTR).unwrap());
    // SAFETY: both strings are NUL-terminated and live across the call; the value is a
    // valid slice.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn get_xattr(path: &Path) -> std::io::Result<Vec<u8>> {
    let (p, n) = (c_path(path), std::ffi::CString::new(XATTR).unwrap());
    let mut buf = vec![0u8; 4096];
    // SAFETY: as in `set_xattr`; the buffer is writable for its length.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

fn c_path(path: &Path) -> std::ffi::CString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap()
}

impl Acked {
    fn check(&self, round: usize) {
        for (path, data) in &self.files {
            let got = std::fs::read(path)
                .unwrap_or_else(|e| panic!("round {round}: fsync'd {} lost: {e}", path.display()));
            assert!(
                got == *data,
                "round {round}: {} has other bytes",
                path.display()
            );
        }
        for (link, target) in &self.links {
            let got = std::fs::read_link(link)
                .unwrap_or_else(|e| panic!("round {round}: link {} lost: {e}", link.display()));
            assert_eq!(&got, target, "round {round}");
        }
        for path in &self.removed {
            assert!(
                std::fs::symlink_metadata(path).is_err(),
                "round {round}: removed {} is back",
                path.display()
            );
        }
        for (path, value) in &self.xattrs {
            let got = get_xattr(path)
                .unwrap_or_else(|e| panic!("round {round}: xattr of {} lost: {e}", path.display()));
            assert_eq!(&got, value, "round {round}: xattr of {}", path.display());
        }
    }
}

/// Creates directories of 16 files each in `dir`, each file written and fsync'd, every
/// third renamed, a second name for every seventh, some replaced by a rename over them,
/// scratch files removed, extended attributes set and a symbolic link to every fifth one
/// (each name change acknowledged by an fsync of its directory, each attribute by an fsync
/// of its file), until a call fails (the server was killed).
fn fsynced_creates(dir: &Path, round: usize, acked: &std::sync::Mutex<Acked>) {
    for i in 0u64.. {
        let sub = dir.join(format!("r{round}")).join(format!("d{}", i / 16));
        if i % 16 == 0 && std::fs::create_dir_all(&sub).is_err() {
            return;
        }
        let data = support::pseudo_random(100 + (i as usize * 997) % 9000, i + 1000 * round as u64);
        if create_one(&sub, i, data, acked).is_err() {
            return;
        }
    }
}

/// Writes `data` to `path` as a new file and fsyncs it.
fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create_new(path)?;
    f.write_all(data)?;
    f.sync_all()
}

/// File number `i` of `fsynced_creates` in directory `sub`, and what it acknowledges.
fn create_one(
    sub: &Path,
    i: u64,
    data: Vec<u8>,
    acked: &std::sync::Mutex<Acked>,
) -> std::io::Result<()> {
    let sync_dir = || std::fs::File::open(sub).and_then(|d| d.sync_all());
    let mut path = sub.join(format!("f{i}"));
    write_synced(&path, &data)?;
    // Every third file is moved into place and every seventh gets a second name (RENAME
    // and LINK records).
    if i.is_multiple_of(3) {
        let moved = sub.join(format!("m{i}"));
        std::fs::rename(&path, &moved).and_then(|()| sync_dir())?;
        path = moved;
    }
    if i.is_multiple_of(7) {
        let second = sub.join(format!("h{i}"));
        std::fs::hard_link(&path, &second).and_then(|()| sync_dir())?;
        acked.lock().unwrap().files.push((second, data.clone()));
    }
    // Some are replaced as editors save: a new file renamed over the old (a RENAME that
    // leaves the old file without a name); the second name above keeps the old bytes.
    let mut data = data;
    if i % 6 == 2 {
        let new = sub.join(format!("n{i}"));
        let saved: Vec<u8> = data.iter().map(|b| !b).collect();
        write_synced(&new, &saved)?;
        std::fs::rename(&new, &path).and_then(|()| sync_dir())?;
        data = saved;
    }
    acked
        .lock()
        .unwrap()
        .files
        .push((path.clone(), data.clone()));
    // Scratch files are made and removed (REMOVE records).
    if i % 4 == 1 {
        let scratch = sub.join(format!("t{i}"));
        write_synced(&scratch, &data)?;
        std::fs::remove_file(&scratch).and_then(|()| sync_dir())?;
        acked.lock().unwrap().removed.push(scratch);
    }
    // Attributes as Samba sets them (XATTR records), acknowledged by the file's fsync.
    if i % 4 == 3 {
        let value = format!("0x{:x}", i * 31).into_bytes();
        set_xattr(&path, &value)
            .and_then(|()| std::fs::File::open(&path))
            .and_then(|f| f.sync_all())?;
        acked.lock().unwrap().xattrs.push((path.clone(), value));
    }
    if i.is_multiple_of(5) {
        let link = sub.join(format!("l{i}"));
        std::os::unix::fs::symlink(&path, &link).and_then(|()| sync_dir())?;
        acked.lock().unwrap().links.push((link, path));
    }
    Ok(())
}

/// `rounds` kill -9 rounds of `fsynced_creates` through a mount; returns the files
/// acknowledged.
fn create_rounds(rounds: usize, seed: u64) -> usize {
    let (dir, home) = raidz1_pool();
    ok(&cairn(&home, &["dataset", "create", "tank/fs"]));
    let mnt = dir.path().join("mnt");
    let socket = dir.path().join("nbd.sock");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let acked = Arc::new(std::sync::Mutex::new(Acked::default()));
    for round in 0..=rounds {
        let mut server = start_server(&home, &socket, Some(&mnt));
        acked.lock().unwrap().check(round);
        if round == rounds {
            unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
            let _ = server.wait();
            break;
        }
        let (m, a) = (mnt.clone(), acked.clone());
        let creator = std::thread::spawn(move || fsynced_creates(&m, round, &a));
        std::thread::sleep(Duration::from_micros(rng.gen_range(0..300_000)));
        // SAFETY: SIGKILL to our own child process (waited for below).
        unsafe { libc::kill(server.id() as i32, libc::SIGKILL) };
        let _ = server.wait();
        // The mount is stale now (the creator's next call fails); `umount -f` cleans up.
        ok(&cairn(&home, &["umount", "-f", mnt.to_str().unwrap()]));
        creator.join().unwrap();
    }
    ok(&cairn(&home, &["scrub", "tank"]));
    let status = ok(&cairn(&home, &["status", "tank"]));
    assert!(status.contains("errors: No known data errors"), "{status}");
    assert!(status.contains(" 0 errors"), "{status}");
    let a = acked.lock().unwrap();
    let named = |prefix: &str| {
        let starts = |p: &PathBuf| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        };
        a.files.iter().filter(|(p, _)| starts(p)).count()
    };
    eprintln!(
        "{rounds} kill -9 rounds, {} fsync'd names ({} renamed, {} second names), {} \
         symbolic links, {} removals and {} extended attributes acknowledged, all there",
        a.files.len(),
        named("m"),
        named("h"),
        a.links.len(),
        a.removed.len(),
        a.xattrs.len()
    );
    a.files.len()
}

#[test]
fn kill_9_during_fsynced_creates_keeps_every_acknowledged_file() {
    if mount_possible() {
        assert!(create_rounds(20, 13) > 100);
    }
}

#[test]
#[ignore = "long: the recorded run"]
fn kill_9_recorded_run_of_fsynced_creates() {
    create_rounds(300, 2028);
}

/// The recorded runs (docs/bench/intent-log.md): `cargo test -p cairn --test log_crash --
/// --ignored --nocapture`.
#[test]
#[ignore = "long: the recorded run"]
fn kill_9_recorded_run() {
    crash_rounds(700, 2026, false);
}

#[test]
#[ignore = "long: the recorded run"]
fn kill_9_recorded_run_beside_namespace_changes() {
    crash_rounds(300, 2027, true);
}
