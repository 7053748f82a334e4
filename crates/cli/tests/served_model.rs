//! A served pool checked against a model (issue 14): four client threads run random
//! everyday commands through the control socket of `cairn serve`, each in a dataset subtree
//! of its own (`tank/tN`) so that its model (files, directories, child datasets, their
//! properties and snapshots) is exact, while fio writes and verifies the pool's volume over
//! NBD. Every read-back is compared with the model, and the whole subtree is compared at the
//! end. The second test kills the service with SIGKILL at a random moment, restarts it and
//! checks that every acknowledged command is there, the one command each thread had in
//! flight is there whole or not at all, and every volume write acknowledged by FUA or FLUSH
//! is on the volume.
//!
//! The seeds are printed (`CAIRN_SERVED_SEED` sets one); `CAIRN_SERVED_KILL_ROUNDS` sets the
//! number of kill rounds (3 by default; docs/bench/served-model.md has a longer run).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use support::{cairn, cairn_cmd, files, ok, ok_bytes, MIB};

const THREADS: u64 = 4;
/// Files a thread keeps at most (puts become removals beyond).
const MAX_FILES: usize = 40;
/// The defaults a dataset of `tank` inherits when nothing in its subtree sets them.
const DEFAULT_COMPRESSION: &str = "lz4";
const DEFAULT_RECORDSIZE: &str = "128K";
/// What a put that was killed may leave in its directory (README: the next put there
/// removes it); not part of any model.
const PUT_TEMP: &str = ".cairn-put-";

// ---- the service -------------------------------------------------------------------------

struct Service {
    child: Child,
}

/// Starts `cairn serve tank` exporting its volumes on the unix socket `nbd`; returns when
/// both the control socket and the NBD socket answer. A socket file a killed service left
/// behind does not pass for the new one's: the NBD one is removed first, and the control
/// socket is connected to (the service replaces a stale one itself).
fn start_service(home: &Path, nbd: &Path) -> Service {
    let _ = std::fs::remove_file(nbd);
    let child = cairn_cmd(home)
        .args(["serve", "--nbd-socket", nbd.to_str().unwrap()])
        .args(["--sync-interval", "1", "--duration", "600", "tank"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start cairn serve");
    let control = home.join("run/tank.sock");
    let start = Instant::now();
    while UnixStream::connect(&control).is_err() || UnixStream::connect(nbd).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "serve did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Service { child }
}

/// A test that fails leaves no service behind.
impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Service {
    /// SIGTERM: the service syncs, releases the pool and exits 0.
    fn stop(mut self) {
        // SAFETY: SIGTERM to our own child process, waited for below.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        assert!(self.child.wait().unwrap().success(), "serve failed");
    }
}

fn tool_exists(name: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The pool both tests use: raidz1 over three sparse 256 MiB files, a 64 MiB volume
/// `tank/vol` (4K blocks) and one dataset per client thread.
fn setup(dir: &Path) -> PathBuf {
    let home = dir.join("home");
    let d = files(dir, 3, 256 * MIB);
    ok(&cairn(
        &home,
        &["create", "tank", "raidz1", &d[0], &d[1], &d[2]],
    ));
    ok(&cairn(
        &home,
        &["volume", "create", "-V", "64M", "-b", "4K", "tank/vol"],
    ));
    for t in 0..THREADS {
        ok(&cairn(&home, &["dataset", "create", &format!("tank/t{t}")]));
    }
    home
}

fn seed_from_env() -> u64 {
    std::env::var("CAIRN_SERVED_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen())
}

// ---- the model -----------------------------------------------------------------------------

/// The properties a thread sets on a dataset itself (`None`: inherited).
#[derive(Clone, Default, PartialEq, Debug)]
struct Props {
    compression: Option<String>,
    recordsize: Option<String>,
}

/// The contents of a snapshot of `tank/tN`: its files and directories (paths relative to
/// the dataset), child datasets not included.
#[derive(Clone, Default, PartialEq)]
struct Snap {
    files: BTreeMap<String, Vec<u8>>,
    dirs: BTreeSet<String>,
}

/// What a thread's subtree `tank/tN` holds; paths relative to `tank/tN`. Child datasets are
/// `cK` (only directly under `tank/tN`), directories `dK`, files `fK`.
#[derive(Clone, Default, PartialEq)]
struct Tree {
    files: BTreeMap<String, Vec<u8>>,
    dirs: BTreeSet<String>,
    /// Child datasets and `""` (tank/tN itself), with the properties set on each.
    datasets: BTreeMap<String, Props>,
    snapshots: BTreeMap<String, Snap>,
}

/// A command that changes the pool.
#[derive(Clone, Debug)]
enum Change {
    Put {
        path: String,
        data: Vec<u8>,
    },
    Rm {
        path: String,
    },
    Mkdir {
        path: String,
    },
    DatasetCreate {
        name: String,
    },
    DatasetDestroy {
        name: String,
    },
    Set {
        ds: String,
        prop: &'static str,
        value: String,
    },
    Snapshot {
        name: String,
    },
    SnapshotDestroy {
        name: String,
    },
}

/// Whether `path` lies under `prefix` (a dataset or directory), or is it.
fn under(path: &str, prefix: &str) -> bool {
    path == prefix || path.starts_with(&format!("{prefix}/"))
}

impl Tree {
    fn new() -> Tree {
        let mut t = Tree::default();
        t.datasets.insert(String::new(), Props::default());
        t
    }

    /// Whether `path` is in `tank/tN` itself rather than in a child dataset.
    fn in_root(&self, path: &str) -> bool {
        !self
            .datasets
            .keys()
            .any(|d| !d.is_empty() && under(path, d))
    }

    fn apply(&mut self, c: &Change) {
        match c {
            Change::Put { path, data } => {
                self.files.insert(path.clone(), data.clone());
            }
            Change::Rm { path } => {
                self.files.remove(path);
            }
            Change::Mkdir { path } => {
                self.dirs.insert(path.clone());
            }
            Change::DatasetCreate { name } => {
                self.datasets.insert(name.clone(), Props::default());
            }
            Change::DatasetDestroy { name } => {
                self.datasets.remove(name);
                self.files.retain(|p, _| !under(p, name));
                self.dirs.retain(|p| !under(p, name));
            }
            Change::Set { ds, prop, value } => {
                let p = self.datasets.get_mut(ds).expect("a dataset of the model");
                match *prop {
                    "compression" => p.compression = Some(value.clone()),
                    _ => p.recordsize = Some(value.clone()),
                }
            }
            Change::Snapshot { name } => {
                let snap = Snap {
                    files: (self.files.iter())
                        .filter(|(p, _)| self.in_root(p))
                        .map(|(p, d)| (p.clone(), d.clone()))
                        .collect(),
                    dirs: self
                        .dirs
                        .iter()
                        .filter(|p| self.in_root(p))
                        .cloned()
                        .collect(),
                };
                self.snapshots.insert(name.clone(), snap);
            }
            Change::SnapshotDestroy { name } => {
                self.snapshots.remove(name);
            }
        }
    }

    /// The value of `prop` on dataset `ds` as `cairn get` shows it: its own, else the one
    /// `tank/tN` sets, else the pool's default.
    fn effective(&self, ds: &str, prop: &str) -> String {
        let own = |d: &str| {
            let p = &self.datasets[d];
            match prop {
                "compression" => p.compression.clone(),
                _ => p.recordsize.clone(),
            }
        };
        let default = match prop {
            "compression" => DEFAULT_COMPRESSION,
            _ => DEFAULT_RECORDSIZE,
        };
        own(ds)
            .or_else(|| own(""))
            .unwrap_or_else(|| default.into())
    }

    /// The first difference from `other` (the pool), in words; `None` when they agree.
    fn diff(&self, other: &Tree) -> Option<String> {
        let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
        let files = |what: &str, a: &BTreeMap<String, Vec<u8>>, b: &BTreeMap<String, Vec<u8>>| {
            if names(a) != names(b) {
                return Some(format!("{what}: model {:?}, pool {:?}", names(a), names(b)));
            }
            a.iter()
                .zip(b)
                .find(|(x, y)| x.1 != y.1)
                .map(|((p, x), (_, y))| {
                    format!(
                        "{what} {p}: model {} bytes, pool {} bytes differ",
                        x.len(),
                        y.len()
                    )
                })
        };
        if let Some(d) = files("files", &self.files, &other.files) {
            return Some(d);
        }
        if self.dirs != other.dirs {
            return Some(format!(
                "dirs: model {:?}, pool {:?}",
                self.dirs, other.dirs
            ));
        }
        if self.datasets != other.datasets {
            return Some(format!(
                "datasets: model {:?}, pool {:?}",
                self.datasets, other.datasets
            ));
        }
        let snaps = |t: &Tree| t.snapshots.keys().cloned().collect::<Vec<_>>();
        if snaps(self) != snaps(other) {
            return Some(format!(
                "snapshots: model {:?}, pool {:?}",
                snaps(self),
                snaps(other)
            ));
        }
        for (name, s) in &self.snapshots {
            let o = &other.snapshots[name];
            if let Some(d) = files(&format!("@{name} files"), &s.files, &o.files) {
                return Some(d);
            }
            if s.dirs != o.dirs {
                return Some(format!(
                    "@{name} dirs: model {:?}, pool {:?}",
                    s.dirs, o.dirs
                ));
            }
        }
        None
    }
}

// ---- reading a subtree back from the pool ---------------------------------------------------

/// Runs `cairn ARGS`; standard output, or the failure in words.
fn run(home: &Path, args: &[&str]) -> Result<Vec<u8>, String> {
    let out = cairn(home, args);
    match out.status.success() {
        true => Ok(out.stdout),
        false => Err(format!(
            "cairn {args:?}: {:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

/// `(name, kind)` of the entries `cairn ls --json PATH` lists, put temps left out.
fn ls(home: &Path, path: &str) -> Result<Vec<(String, String)>, String> {
    let out = run(home, &["ls", "--json", path])?;
    let v: serde_json::Value = serde_json::from_slice(&out).map_err(|e| e.to_string())?;
    Ok(v["entries"]
        .as_array()
        .expect("ls --json entries")
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap().to_string();
            (s("name"), s("kind"))
        })
        .filter(|(n, _)| !n.starts_with(PUT_TEMP))
        .collect())
}

/// Walks `base` (`tank/tN` or `tank/tN@S`) recursively into `files`, `dirs` and (child
/// datasets) `datasets`, paths relative to `base`.
fn walk(
    home: &Path,
    base: &str,
    rel: &str,
    files: &mut BTreeMap<String, Vec<u8>>,
    dirs: &mut BTreeSet<String>,
    datasets: &mut BTreeSet<String>,
) {
    let full = |r: &str| match r {
        "" => base.to_string(),
        r => format!("{base}/{r}"),
    };
    for (name, kind) in ls(home, &full(rel)).unwrap() {
        let r = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        match kind.as_str() {
            "file" => {
                files.insert(r.clone(), run(home, &["cat", &full(&r)]).unwrap());
            }
            "dir" => {
                dirs.insert(r.clone());
                walk(home, base, &r, files, dirs, datasets);
            }
            "dataset" => {
                datasets.insert(r.clone());
                walk(home, base, &r, files, dirs, datasets);
            }
            other => panic!("{}: unexpected {other}", full(&r)),
        }
    }
}

/// Thread `t`'s subtree as the pool holds it.
fn observe(home: &Path, t: u64) -> Tree {
    let base = format!("tank/t{t}");
    let mut tree = Tree::new();
    let mut children = BTreeSet::new();
    walk(
        home,
        &base,
        "",
        &mut tree.files,
        &mut tree.dirs,
        &mut children,
    );
    for c in children {
        tree.datasets.insert(c, Props::default());
    }
    for (ds, props) in tree.datasets.iter_mut() {
        let name = if ds.is_empty() {
            base.clone()
        } else {
            format!("{base}/{ds}")
        };
        let got = run(home, &["get", "-H", "compression,recordsize", &name]).unwrap();
        for line in String::from_utf8(got).unwrap().lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let own = (f[3] == "local").then(|| f[2].to_string());
            match f[1] {
                "compression" => props.compression = own,
                _ => props.recordsize = own,
            }
        }
    }
    let listed = run(home, &["list", "-t", "snapshot", "-H", &base]).unwrap();
    for line in String::from_utf8(listed).unwrap().lines() {
        let full = line.split('\t').next().unwrap();
        let name = full.split_once('@').unwrap().1.to_string();
        let mut snap = Snap::default();
        let mut none = BTreeSet::new();
        walk(home, full, "", &mut snap.files, &mut snap.dirs, &mut none);
        assert!(none.is_empty(), "{full} lists datasets {none:?}");
        tree.snapshots.insert(name, snap);
    }
    tree
}

// ---- the client threads ----------------------------------------------------------------------

/// One client thread: its random commands against `tank/tN` and its model of it.
struct Worker {
    t: u64,
    seed: u64,
    home: PathBuf,
    /// Its scratch files: a put's source, a get's destination.
    scratch: PathBuf,
    rng: StdRng,
    model: Tree,
    next: u64,
    /// Commands that answered, and of them the changes (all acknowledged).
    commands: u64,
    acked: u64,
    /// The change whose client failed because the service was killed: it may or may not
    /// have happened, whole.
    in_flight: Option<Change>,
    /// Changes in flight at a kill that were found done, and not done.
    landed: u64,
    lost: u64,
}

/// The parent directory (or dataset) of a relative path; `""` is `tank/tN`.
fn parent(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(p, _)| p)
}

/// `len` bytes: incompressible, or runs a compressing dataset shrinks.
fn data(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut d = vec![0u8; len];
    if rng.gen_bool(0.5) {
        rng.fill_bytes(&mut d);
    } else {
        let b: u8 = rng.gen();
        for (i, x) in d.iter_mut().enumerate() {
            *x = b.wrapping_add((i / 512) as u8);
        }
    }
    d
}

/// 0, small, a few records, or more than a 128 KiB record.
fn size(rng: &mut StdRng) -> usize {
    match rng.gen_range(0..10) {
        0 => 0,
        1..=3 => rng.gen_range(1..4096),
        4..=6 => rng.gen_range(4096..131_072),
        _ => rng.gen_range(131_073..600_000),
    }
}

impl Worker {
    fn new(t: u64, seed: u64, home: &Path, dir: &Path) -> Worker {
        let scratch = dir.join(format!("scratch-t{t}"));
        std::fs::create_dir_all(&scratch).unwrap();
        Worker {
            t,
            seed,
            home: home.to_path_buf(),
            scratch,
            rng: StdRng::seed_from_u64(seed.wrapping_add(t)),
            model: Tree::new(),
            next: 0,
            commands: 0,
            acked: 0,
            in_flight: None,
            landed: 0,
            lost: 0,
        }
    }

    fn path(&self, rel: &str) -> String {
        match rel {
            "" => format!("tank/t{}", self.t),
            r => format!("tank/t{}/{r}", self.t),
        }
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{}", self.next)
    }

    fn pick<T: Clone>(&mut self, items: impl Iterator<Item = T>) -> Option<T> {
        let v: Vec<T> = items.collect();
        (!v.is_empty()).then(|| v[self.rng.gen_range(0..v.len())].clone())
    }

    /// Where a file or directory may go: `tank/tN`, its child datasets, its directories.
    fn container(&mut self) -> String {
        let places: Vec<String> = (self.model.datasets.keys())
            .chain(
                self.model
                    .dirs
                    .iter()
                    .filter(|d| d.matches('/').count() < 2),
            )
            .cloned()
            .collect();
        self.pick(places.into_iter()).unwrap()
    }

    fn context(&self) -> String {
        format!(
            "seed {} thread {} command {}",
            self.seed, self.t, self.commands
        )
    }

    /// Runs `args` for its output; `None` when it failed because the service is gone.
    fn read(&mut self, args: &[&str], stop: &AtomicBool) -> Option<Vec<u8>> {
        let out = cairn(&self.home, args);
        if !out.status.success() && stop.load(Ordering::SeqCst) {
            return None;
        }
        self.commands += 1;
        Some(ok_bytes(&out))
    }

    /// Runs the change `c`; false when its client failed because the service was killed
    /// (it is then the thread's change in flight).
    fn change(&mut self, c: Change, stop: &AtomicBool) -> bool {
        let src = self.scratch.join("put");
        let args: Vec<String> = match &c {
            Change::Put { path, data } => {
                std::fs::write(&src, data).unwrap();
                let force = self.model.files.contains_key(path);
                let mut a = vec!["put".to_string()];
                a.extend(force.then(|| "-f".to_string()));
                a.extend([src.display().to_string(), self.path(path)]);
                a
            }
            Change::Rm { path } => vec!["rm".into(), self.path(path)],
            Change::Mkdir { path } => vec!["mkdir".into(), self.path(path)],
            Change::DatasetCreate { name } => {
                vec!["dataset".into(), "create".into(), self.path(name)]
            }
            Change::DatasetDestroy { name } if self.next.is_multiple_of(2) => {
                vec!["destroy".into(), self.path(name)]
            }
            Change::DatasetDestroy { name } => {
                vec!["dataset".into(), "destroy".into(), self.path(name)]
            }
            Change::Set { ds, prop, value } => {
                vec!["set".into(), format!("{prop}={value}"), self.path(ds)]
            }
            Change::Snapshot { name } => {
                vec!["snapshot".into(), format!("tank/t{}@{name}", self.t)]
            }
            Change::SnapshotDestroy { name } => {
                vec!["destroy".into(), format!("tank/t{}@{name}", self.t)]
            }
        };
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = cairn(&self.home, &refs);
        if !out.status.success() && stop.load(Ordering::SeqCst) {
            self.in_flight = Some(c);
            return false;
        }
        assert!(
            out.status.success(),
            "{}: cairn {args:?}: {}",
            self.context(),
            String::from_utf8_lossy(&out.stderr)
        );
        self.model.apply(&c);
        self.commands += 1;
        self.acked += 1;
        true
    }
}

impl Worker {
    /// One random command; false when the service is gone (or going: `stop`).
    fn step(&mut self, stop: &AtomicBool) -> bool {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        let file = self.pick(
            self.model
                .files
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .into_iter(),
        );
        match (self.rng.gen_range(0..100), file) {
            // Bounded, so that long kill runs keep to the pool's size and a quick check.
            (0..=24, Some(f)) if self.model.files.len() >= MAX_FILES => {
                self.change(Change::Rm { path: f }, stop)
            }
            (0..=24, _) | (25..=49, None) => self.put(stop),
            (25..=36, Some(f)) => self.cat(&f, stop),
            (37..=41, Some(f)) => self.get(&f, stop),
            (42..=49, Some(f)) => self.change(Change::Rm { path: f }, stop),
            (50..=55, _) if self.model.dirs.len() < 30 => {
                let dir = self.container();
                let name = self.fresh("d");
                let path = if dir.is_empty() {
                    name
                } else {
                    format!("{dir}/{name}")
                };
                self.change(Change::Mkdir { path }, stop)
            }
            (56..=63, _) => self.ls(stop),
            (64..=68, _) if self.model.datasets.len() < 4 => {
                let name = self.fresh("c");
                self.change(Change::DatasetCreate { name }, stop)
            }
            (64..=71, _) => match self.pick(
                self.model
                    .datasets
                    .keys()
                    .filter(|d| !d.is_empty())
                    .cloned()
                    .collect::<Vec<_>>()
                    .into_iter(),
            ) {
                Some(name) => self.change(Change::DatasetDestroy { name }, stop),
                None => self.put(stop),
            },
            (72..=77, _) => self.set(stop),
            (78..=82, _) => self.get_prop(stop),
            (83..=87, _) => self.snapshot(stop),
            (88..=94, _) => self.cat_snapshot(stop),
            (95..=96, _) => self.missing(stop),
            _ => {
                let args = match self.rng.gen_bool(0.5) {
                    true => ["status", "tank"],
                    false => ["list", "tank"],
                };
                self.read(&args, stop).is_some()
            }
        }
    }

    fn put(&mut self, stop: &AtomicBool) -> bool {
        let path = match self.rng.gen_bool(0.25) {
            true => self.pick(
                self.model
                    .files
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .into_iter(),
            ),
            false => None,
        };
        let path = path.unwrap_or_else(|| {
            let dir = self.container();
            let name = self.fresh("f");
            if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            }
        });
        let len = size(&mut self.rng);
        let data = data(&mut self.rng, len);
        self.change(Change::Put { path, data }, stop)
    }

    fn cat(&mut self, rel: &str, stop: &AtomicBool) -> bool {
        let Some(got) = self.read(&["cat", &self.path(rel)], stop) else {
            return false;
        };
        same(
            &got,
            &self.model.files[rel],
            &format!("{}: cat {rel}", self.context()),
        );
        true
    }

    fn get(&mut self, rel: &str, stop: &AtomicBool) -> bool {
        let dest = self.scratch.join("got");
        let _ = std::fs::remove_file(&dest);
        if self
            .read(&["get", &self.path(rel), dest.to_str().unwrap()], stop)
            .is_none()
        {
            return false;
        }
        let got = std::fs::read(&dest).unwrap();
        same(
            &got,
            &self.model.files[rel],
            &format!("{}: get {rel}", self.context()),
        );
        true
    }

    /// `ls` of a place, compared with the names the model has there.
    fn ls(&mut self, stop: &AtomicBool) -> bool {
        let dir = self.container();
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        let Ok(got) = ls(&self.home, &self.path(&dir)) else {
            assert!(
                stop.load(Ordering::SeqCst),
                "{}: ls {dir} failed",
                self.context()
            );
            return false;
        };
        self.commands += 1;
        let m = &self.model;
        let name = |p: &String| p.rsplit('/').next().unwrap().to_string();
        let mut want: Vec<(String, String)> = (m.files.keys().filter(|p| parent(p) == dir))
            .map(|p| (name(p), "file".to_string()))
            .chain(
                m.dirs
                    .iter()
                    .filter(|p| parent(p) == dir)
                    .map(|p| (name(p), "dir".into())),
            )
            .chain(
                (m.datasets
                    .keys()
                    .filter(|d| !d.is_empty() && dir.is_empty()))
                .map(|d| (d.clone(), "dataset".into())),
            )
            .collect();
        let mut got = got;
        want.sort();
        got.sort();
        assert_eq!(got, want, "{}: ls {dir}", self.context());
        true
    }

    fn set(&mut self, stop: &AtomicBool) -> bool {
        let ds = self
            .pick(
                self.model
                    .datasets
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .into_iter(),
            )
            .unwrap();
        let (prop, values): (&'static str, &[&str]) = match self.rng.gen_bool(0.5) {
            true => ("compression", &["off", "lz4", "zstd", "zstd-3"]),
            false => ("recordsize", &["16K", "32K", "64K", "128K", "256K"]),
        };
        let value = values[self.rng.gen_range(0..values.len())].to_string();
        self.change(Change::Set { ds, prop, value }, stop)
    }

    fn get_prop(&mut self, stop: &AtomicBool) -> bool {
        let ds = self
            .pick(
                self.model
                    .datasets
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .into_iter(),
            )
            .unwrap();
        let prop = if self.rng.gen_bool(0.5) {
            "compression"
        } else {
            "recordsize"
        };
        let Some(got) = self.read(&["get", "-H", prop, &self.path(&ds)], stop) else {
            return false;
        };
        let want = format!(
            "{}\t{prop}\t{}\t",
            self.path(&ds),
            self.model.effective(&ds, prop)
        );
        let got = String::from_utf8(got).unwrap();
        assert!(
            got.starts_with(&want),
            "{}: get {prop} {ds}: {got:?}, model {want:?}",
            self.context()
        );
        true
    }

    /// A snapshot of `tank/tN` (at most four are kept: the oldest goes instead).
    fn snapshot(&mut self, stop: &AtomicBool) -> bool {
        if self.model.snapshots.len() >= 4
            || (self.rng.gen_bool(0.2) && !self.model.snapshots.is_empty())
        {
            let name = self
                .pick(
                    self.model
                        .snapshots
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .into_iter(),
                )
                .unwrap();
            return self.change(Change::SnapshotDestroy { name }, stop);
        }
        let name = self.fresh("s");
        self.change(Change::Snapshot { name }, stop)
    }

    /// `cat tank/tN@S/PATH` compared with the model's copy at the snapshot's moment.
    fn cat_snapshot(&mut self, stop: &AtomicBool) -> bool {
        let snaps: Vec<(String, String)> = (self.model.snapshots.iter())
            .flat_map(|(s, snap)| snap.files.keys().map(move |p| (s.clone(), p.clone())))
            .collect();
        let Some((snap, rel)) = self.pick(snaps.into_iter()) else {
            return self.put(stop);
        };
        let path = format!("tank/t{}@{snap}/{rel}", self.t);
        let Some(got) = self.read(&["cat", &path], stop) else {
            return false;
        };
        same(
            &got,
            &self.model.snapshots[&snap].files[&rel],
            &format!("{}: cat {path}", self.context()),
        );
        true
    }

    /// A file that is not there: `cat` fails and says so.
    fn missing(&mut self, stop: &AtomicBool) -> bool {
        let path = self.path(&format!("nothing{}", self.next));
        let out = cairn(&self.home, &["cat", &path]);
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && e.contains("no such file"),
            "{}: cat {path}: {e}",
            self.context()
        );
        self.commands += 1;
        true
    }

    /// `count` commands, or until the service is gone (`stop`).
    fn run(&mut self, count: Option<u64>, stop: &AtomicBool) {
        let mut n = 0;
        while count.is_none_or(|c| n < c) && self.step(stop) {
            n += 1;
        }
    }

    /// Compares `tank/tN` as the pool holds it with the model; the change in flight may be
    /// there whole or not at all (the model then takes what the pool has).
    fn settle(&mut self, pool: &Tree, when: &str) {
        let Some(before) = self.model.diff(pool) else {
            self.lost += self.in_flight.take().is_some() as u64;
            return;
        };
        let Some(c) = self.in_flight.take() else {
            panic!("seed {} thread {} {when}: {before}", self.seed, self.t);
        };
        let mut after = self.model.clone();
        after.apply(&c);
        match after.diff(pool) {
            None => {
                self.model = after;
                self.landed += 1;
            }
            Some(d) => panic!("seed {} thread {} {when}: neither before ({before}) nor after ({d}) the change in flight {}", self.seed, self.t, describe(&c)),
        }
    }
}

/// Asserts that `got` (read from the pool) is `want` (the model's).
fn same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: {} bytes read, the model has {} (first difference at {at:?})",
            got.len(),
            want.len()
        );
    }
}

fn describe(c: &Change) -> String {
    match c {
        Change::Put { path, data } => format!("put {path} ({} bytes)", data.len()),
        other => format!("{other:?}"),
    }
}

// ---- the volume ------------------------------------------------------------------------------

/// fio's nbd engine on the first 32 MiB of `tank/vol` for `runtime` seconds: random 4K
/// writes, each verified (crc32c) by the backlog reads as it goes.
fn spawn_fio(nbd: &Path, runtime: u64, verify: bool) -> Child {
    let mut fio = Command::new("fio");
    fio.args([
        "--name=served-model",
        "--ioengine=nbd",
        &format!("--uri=nbd+unix:///tank/vol?socket={}", nbd.display()),
        "--rw=randwrite",
        "--bs=4k",
        "--size=32M",
        "--iodepth=4",
        "--time_based",
        &format!("--runtime={runtime}"),
    ]);
    if verify {
        fio.args([
            "--verify=crc32c",
            "--verify_backlog=256",
            "--verify_fatal=1",
            "--verify_state_save=0",
            "--do_verify=1",
        ]);
    }
    fio.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fio")
}

/// Where the FUA writer writes: 256 blocks of 4 KiB at 48 MiB, beyond fio's.
const BLOCK: usize = 4096;
const BLOCKS: u64 = 256;
const LEDGER_AT: u64 = 48 * MIB;

/// Contents of version `v` of a block.
fn version(v: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK];
    StdRng::seed_from_u64(v).fill_bytes(&mut b);
    b
}

/// What the NBD writer wrote over all rounds, and what the service acknowledged durable.
#[derive(Default)]
struct Ledger {
    next_version: u64,
    /// Every version written to each block.
    written: BTreeMap<u64, Vec<u64>>,
    /// The newest version of each block acknowledged durable (a FUA reply, or a FLUSH
    /// reply after it).
    durable: BTreeMap<u64, u64>,
    acked_writes: u64,
}

fn nbd_url(nbd: &Path) -> cairn_nbd::url::NbdUrl {
    cairn_nbd::url::parse_nbd_url(&format!("nbd+unix:///tank/vol?socket={}", nbd.display()))
        .unwrap()
}

impl Ledger {
    /// Each block holds one version written to it, no older than the acknowledged one.
    fn check(&self, nbd: &Path, round: usize) {
        let mut client = cairn_nbd::client::NbdClient::connect(&nbd_url(nbd)).unwrap();
        for b in 0..BLOCKS {
            let mut got = vec![0u8; BLOCK];
            client
                .read_at(&mut got, LEDGER_AT + b * BLOCK as u64)
                .unwrap();
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
        client.disconnect();
    }

    /// Writes (FUA on some, a FLUSH after every few others) until the connection breaks.
    fn write_until_killed(&mut self, nbd: &Path, rng: &mut StdRng) {
        let mut client = cairn_nbd::client::NbdClient::connect(&nbd_url(nbd)).unwrap();
        let mut unflushed: BTreeMap<u64, u64> = BTreeMap::new();
        loop {
            self.next_version += 1;
            let v = self.next_version;
            let b = rng.gen_range(0..BLOCKS);
            let fua = rng.gen_bool(0.3);
            self.written.entry(b).or_default().push(v);
            if client
                .write_at(&version(v), LEDGER_AT + b * BLOCK as u64, fua)
                .is_err()
            {
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

// ---- the tests -------------------------------------------------------------------------------

/// The NBD client tools the tests drive; `None` when all are there.
fn missing_tool() -> Option<&'static str> {
    ["fio"].into_iter().find(|t| !tool_exists(t))
}

/// Checks the pool in-process: a scrub finds nothing and `status -x` says it is healthy.
fn scrub_clean(home: &Path) {
    let scrub = ok(&cairn(home, &["scrub", "tank"]));
    assert!(scrub.contains("repaired 0B (0 bytes), 0 errors"), "{scrub}");
    let st = ok(&cairn(home, &["status", "-x", "tank"]));
    assert!(st.contains("healthy"), "{st}");
}

/// Each thread's subtree compared with its model, the threads' subtrees read at once.
fn check_all(home: &Path, workers: &mut [Worker], when: &str) {
    std::thread::scope(|s| {
        for w in workers.iter_mut() {
            s.spawn(move || {
                let pool = observe(home, w.t);
                w.settle(&pool, when);
            });
        }
    });
}

#[test]
fn served_commands_and_fio_agree_with_the_model() {
    if let Some(t) = missing_tool() {
        eprintln!("SKIPPED: {t} is not installed (Debian package {t})");
        return;
    }
    let seed = seed_from_env();
    eprintln!("served model: seed {seed} (CAIRN_SERVED_SEED={seed} repeats it)");
    let dir = tempfile::tempdir().unwrap();
    let home = setup(dir.path());
    let nbd = dir.path().join("nbd.sock");
    let service = start_service(&home, &nbd);
    let start = Instant::now();
    let fio = spawn_fio(&nbd, 20, true);
    let mut workers: Vec<Worker> = (0..THREADS)
        .map(|t| Worker::new(t, seed, &home, dir.path()))
        .collect();
    let stop = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let admin = std::thread::scope(|s| {
        let admin = s.spawn(|| change_vdevs_until(&home, dir.path(), &done));
        let running: Vec<_> = workers
            .iter_mut()
            .map(|w| {
                let stop = &stop;
                s.spawn(move || w.run(Some(120), stop))
            })
            .collect();
        for r in running {
            r.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
        admin.join().unwrap()
    });
    eprintln!("served model: {admin} vdev changes beside the clients");
    assert!(admin >= 5, "only {admin} vdev changes ran");
    let clients = start.elapsed();
    let fio = fio.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&fio.stdout);
    assert!(
        fio.status.success() && !report.contains("verify: bad") && report.contains("err= 0"),
        "fio: {:?}\n{report}\n{}",
        fio.status,
        String::from_utf8_lossy(&fio.stderr)
    );
    // The verify reads ran: fio counts them in its write job's issued reads ("issued
    // rwts: total=READS,WRITES,…"); its "read:" latency line is not always printed for
    // them (a CI run issued 484,097 verify reads and printed none).
    let io: Vec<&str> = (report.lines())
        .filter(|l| l.trim_start().starts_with("read:") || l.trim_start().starts_with("write:"))
        .collect();
    let verify_reads: u64 = report
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("issued rwts: total="))
        .and_then(|t| t.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(verify_reads > 0, "no verify reads: {report}");
    eprintln!("served model: fio {}", io.join(" /").replace("  ", " "));
    service.stop();
    // In-process: every subtree reads back as its model says.
    for w in &mut workers {
        let pool = observe(&home, w.t);
        w.settle(&pool, "after the service stopped");
    }
    scrub_clean(&home);
    let commands: u64 = workers.iter().map(|w| w.commands).sum();
    let acked: u64 = workers.iter().map(|w| w.acked).sum();
    eprintln!(
        "served model: seed {seed}: {commands} commands ({acked} changes) in {clients:?} beside fio, {:?} in all",
        start.elapsed()
    );
}

/// The administrator's part: while the clients and fio run, the pool's vdevs change in the
/// service — a log device is added, then a mirror after it, and the log device is removed
/// (it leaves a hole: the mirror keeps its index); then a log device comes and goes and a
/// third side is attached to the mirror and detached again, round after round until
/// `done` (at most 14 rounds), with a scrub running through them. Every command must
/// succeed and the scrub must find nothing. Returns the number of changes made.
fn change_vdevs_until(home: &Path, dir: &Path, done: &AtomicBool) -> usize {
    let more = dir.join("more");
    std::fs::create_dir_all(&more).unwrap();
    let e = files(&more, 4, 128 * MIB);
    ok(&cairn(home, &["add", "tank", "log", &e[3]]));
    // A mirror beside raidz1 is a mismatched replication level: -f.
    ok(&cairn(home, &["add", "-f", "tank", "mirror", &e[0], &e[1]]));
    ok(&cairn(home, &["remove", "tank", &e[3]]));
    let mut changes = 3;
    let mut scrub = None;
    for _ in 0..14 {
        if done.load(Ordering::SeqCst) {
            break;
        }
        for args in [
            ["add", "tank", "log", &e[3]].as_slice(),
            &["remove", "tank", &e[3]],
            &["attach", "tank", &e[0], &e[2]],
            &["detach", "tank", &e[2]],
        ] {
            ok(&cairn(home, args));
            changes += 1;
        }
        // From the second round, a scrub (paced to last a few seconds) runs through the
        // changes: detach and remove do not wait for it.
        scrub.get_or_insert_with(|| {
            cairn_cmd(home)
                .args(["scrub", "--rate", "16M", "tank"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        });
    }
    if let Some(scrub) = scrub {
        let scrub = scrub.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&scrub.stdout);
        assert!(
            scrub.status.success() && said.contains(" 0 errors"),
            "{scrub:?}"
        );
        eprintln!("served model: a scrub beside the changes: {}", said.trim());
    }
    changes
}

fn kill_rounds() -> usize {
    std::env::var("CAIRN_SERVED_KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

/// One round: clients, fio and the FUA writer run until the service is killed with SIGKILL
/// at a random moment.
fn killed_round(
    home: &Path,
    nbd: &Path,
    workers: &mut [Worker],
    ledger: &mut Ledger,
    rng: &mut StdRng,
) {
    let mut service = start_service(home, nbd);
    let mut fio = spawn_fio(nbd, 60, false);
    let kill_after = Duration::from_millis(rng.gen_range(1500..5000));
    let mut writer_rng = StdRng::seed_from_u64(rng.gen());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for w in workers.iter_mut() {
            let stop = &stop;
            s.spawn(move || w.run(None, stop));
        }
        s.spawn(|| ledger.write_until_killed(nbd, &mut writer_rng));
        std::thread::sleep(kill_after);
        stop.store(true, Ordering::SeqCst);
        // SAFETY: SIGKILL to our own child process, waited for below.
        unsafe { libc::kill(service.child.id() as i32, libc::SIGKILL) };
    });
    let _ = service.child.wait();
    let _ = fio.kill();
    let _ = fio.wait();
}

#[test]
fn kill_9_of_the_service_keeps_every_acknowledged_command() {
    if let Some(t) = missing_tool() {
        eprintln!("SKIPPED: {t} is not installed (Debian package {t})");
        return;
    }
    let rounds = kill_rounds();
    let seed = seed_from_env();
    eprintln!("served kill -9: seed {seed}, {rounds} rounds (CAIRN_SERVED_SEED, CAIRN_SERVED_KILL_ROUNDS)");
    let dir = tempfile::tempdir().unwrap();
    let home = setup(dir.path());
    let nbd = dir.path().join("nbd.sock");
    let mut workers: Vec<Worker> = (0..THREADS)
        .map(|t| Worker::new(t, seed, &home, dir.path()))
        .collect();
    let mut ledger = Ledger::default();
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let start = Instant::now();
    for round in 0..rounds {
        killed_round(&home, &nbd, &mut workers, &mut ledger, &mut rng);
        // The next service replays the log; everything acknowledged is there.
        let service = start_service(&home, &nbd);
        check_all(&home, &mut workers, &format!("after kill {round}"));
        ledger.check(&nbd, round);
        service.stop();
    }
    scrub_clean(&home);
    let commands: u64 = workers.iter().map(|w| w.commands).sum();
    let acked: u64 = workers.iter().map(|w| w.acked).sum();
    let landed: u64 = workers.iter().map(|w| w.landed).sum();
    let lost: u64 = workers.iter().map(|w| w.lost).sum();
    eprintln!(
        "served kill -9: seed {seed}: {rounds} rounds, {commands} commands answered, {acked} changes acknowledged; changes in flight at a kill: {landed} done, {lost} not; {} volume writes acknowledged durable; {:?}",
        ledger.acked_writes,
        start.elapsed()
    );
}
