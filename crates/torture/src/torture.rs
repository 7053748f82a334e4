//! `cairn torture`: a seeded, randomized run in the spirit of ztest.
//!
//! Every iteration picks a layout (mirrors, raidz1–3, stripes of two), runs a random
//! workload (files in three datasets with different properties, a volume, overwrites,
//! truncates, deletes, syncs; snapshots taken, destroyed and rolled back to) against a
//! [`Model`], and injects random faults, always within
//! redundancy: bit rot, vanishing leaves, leaves that drop writes (and come back stale),
//! failing or corrupting reads, failing or torn writes, latency, kill-and-reopen (the store
//! dropped without a final sync) and export + re-import. Reads are checked against the
//! model after every fault; at the end scrub must find no error, and a second scrub
//! nothing left to repair.
//!
//! Fault budget: per group, the set of leaves that may hold bad data (damaged) or are
//! faulted right now never exceeds the group's redundancy. A clean scrub empties the
//! damaged set except for leaves still faulted.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::unix::fs::FileExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_geometry::{LEAF_DATA_START, LEAF_END_RESERVE};
use cairn_objset::resilver::{ResilverEnd, ResilverOptions};
use cairn_objset::scrub::{ScrubControl, ScrubEnd, ScrubProgress};
use cairn_objset::{DatasetKind, Store, StoreConfig};
use cairn_pool::{Home, LeafSlot, Pool};
use cairn_vdev::fault::FaultSettings;
use cairn_vdev::FaultSwitches;
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

use crate::layout::{leaves_dir, wrap_leaves, Layout, Switchboard, POOL};
use crate::model::{Model, DATASETS};
use crate::TortureError;

const MIB: u64 = 1 << 20;
/// Size of every leaf file (sparse; only written blocks take space).
const LEAF_BYTES: u64 = 128 * MIB;
/// Size of the volume every iteration writes to.
const VOLUME_BYTES: usize = 4 << 20;
/// Largest single write to a file.
const MAX_WRITE: usize = 256 << 10;
const VOLUME: &str = "tank/vol";
/// Operations remembered for a violation report.
const RECENT_OPS: usize = 24;

/// Arguments of `cairn torture`.
#[derive(clap::Args, Debug, Clone)]
pub struct TortureArgs {
    /// Seed of the first iteration (default: random). Printed, so a failure replays with
    /// `--seed S --iterations 1`.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop starting new iterations after this many seconds.
    #[arg(long)]
    pub seconds: Option<u64>,
    /// Number of iterations (default: 10 unless --seconds is given).
    #[arg(long)]
    pub iterations: Option<u64>,
    /// Workload operations per iteration.
    #[arg(long, default_value_t = 200)]
    pub steps: usize,
    /// Directory for the runs' leaf files (the `cairn` binary gives the system temp
    /// directory when the flag is absent; this library reads no environment).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report to this file.
    #[arg(long, value_name = "FILE")]
    pub json_out: Option<PathBuf>,
}

/// A finding: the pool did not hold what the model says, or an operation that had to
/// succeed failed.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Violation {
    pub seed: u64,
    pub step: usize,
    pub layout: String,
    pub message: String,
    /// Leaf files and pool state of the failing iteration, kept for inspection.
    pub kept_dir: Option<String>,
    pub replay: String,
    /// The operations before the failure, oldest first.
    pub recent_ops: Vec<String>,
}

/// What a torture run did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct TortureReport {
    pub first_seed: u64,
    pub iterations: u64,
    pub elapsed_secs: f64,
    pub operations: u64,
    /// Faults injected by the run (bit rot, vanish, …; kills and re-imports included).
    pub faults_injected: u64,
    pub faults_by_kind: BTreeMap<String, u64>,
    /// Single I/Os that a FaultLeaf failed, corrupted, tore or dropped.
    pub io_faults: u64,
    pub scrubs: u64,
    pub repaired_bytes: u64,
    pub layouts: BTreeMap<String, u64>,
    pub violations: Vec<Violation>,
}

impl TortureReport {
    fn absorb(&mut self, it: IterationStats) {
        self.iterations += 1;
        self.operations += it.operations;
        self.faults_injected += it.faults.values().sum::<u64>();
        for (k, v) in it.faults {
            *self.faults_by_kind.entry(k.to_string()).or_default() += v;
        }
        self.io_faults += it.io_faults;
        self.scrubs += it.scrubs;
        self.repaired_bytes += it.repaired_bytes;
        *self.layouts.entry(it.layout).or_default() += 1;
    }
}

/// Counters of one iteration.
#[derive(Debug, Default)]
struct IterationStats {
    layout: String,
    operations: u64,
    faults: BTreeMap<&'static str, u64>,
    io_faults: u64,
    scrubs: u64,
    repaired_bytes: u64,
}

/// `cairn torture`: runs, prints progress on stderr and the report on stdout.
pub fn run(args: &TortureArgs) -> Result<TortureReport, TortureError> {
    let first = args.seed.unwrap_or_else(crate::random_seed);
    let limit = match (args.iterations, args.seconds) {
        (Some(n), _) => n,
        (None, Some(_)) => u64::MAX,
        (None, None) => 10,
    };
    let deadline = args
        .seconds
        .map(|s| Instant::now() + Duration::from_secs(s));
    let base = args.dir.clone().ok_or_else(|| {
        TortureError::BadArgument("no directory for the leaf files: give --dir DIR".into())
    })?;
    eprintln!("torture: seed {first} ({} steps per iteration)", args.steps);
    let seeds = seed_sequence(first).take(limit.min(usize::MAX as u64) as usize);
    let report = run_seeds(seeds, args.steps, &base, deadline, true)?;
    if let Some(path) = &args.json_out {
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        std::fs::write(path, text).map_err(|e| TortureError::io(path.display().to_string(), e))?;
    }
    Ok(report)
}

/// Prints a report: JSON, or a summary with every violation and how to replay it.
pub fn print_report(report: &TortureReport, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(report).unwrap_or_default()
        );
        return;
    }
    println!(
        "torture: seed {}: {} iterations, {} operations, {} faults injected ({} I/O faults), {} scrubs, {} violations in {:.1} s",
        report.first_seed,
        report.iterations,
        report.operations,
        report.faults_injected,
        report.io_faults,
        report.scrubs,
        report.violations.len(),
        report.elapsed_secs
    );
    for v in &report.violations {
        println!(
            "VIOLATION seed {} step {} ({}): {}",
            v.seed, v.step, v.layout, v.message
        );
        for op in &v.recent_ops {
            println!("    {op}");
        }
        if let Some(dir) = &v.kept_dir {
            println!("  leaf files kept in {dir}");
        }
        println!("  replay: {}", v.replay);
    }
}

/// Seeds of successive iterations: the first as given, then drawn from it.
pub fn seed_sequence(first: u64) -> impl Iterator<Item = u64> {
    let mut rng = StdRng::seed_from_u64(first);
    std::iter::once(first).chain(std::iter::from_fn(move || Some(rng.next_u64() >> 1)))
}

/// Runs one iteration per seed (until `deadline`), each in a fresh directory under `base`.
pub fn run_seeds(
    seeds: impl IntoIterator<Item = u64>,
    steps: usize,
    base: &Path,
    deadline: Option<Instant>,
    progress: bool,
) -> Result<TortureReport, TortureError> {
    let start = Instant::now();
    let mut report = TortureReport::default();
    for (i, seed) in seeds.into_iter().enumerate() {
        if i == 0 {
            report.first_seed = seed;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let it_start = Instant::now();
        let (stats, violation) = run_iteration(seed, steps, base)?;
        if progress {
            eprintln!(
                "torture: iteration {i} seed {seed} {}: {} ops, {} faults, {} ({:.1} s)",
                stats.layout,
                stats.operations,
                stats.faults.values().sum::<u64>(),
                if violation.is_some() {
                    "VIOLATION"
                } else {
                    "ok"
                },
                it_start.elapsed().as_secs_f64()
            );
        }
        report.absorb(stats);
        if let Some(v) = violation {
            if progress {
                eprintln!("torture: VIOLATION: {}\n  replay: {}", v.message, v.replay);
            }
            report.violations.push(v);
        }
    }
    report.elapsed_secs = start.elapsed().as_secs_f64();
    Ok(report)
}

/// One iteration in its own directory; the directory is kept when it finds a violation.
fn run_iteration(
    seed: u64,
    steps: usize,
    base: &Path,
) -> Result<(IterationStats, Option<Violation>), TortureError> {
    std::fs::create_dir_all(base).map_err(|e| TortureError::io(base.display().to_string(), e))?;
    let dir = tempfile::Builder::new()
        .prefix(&format!("cairn-torture-{seed}-"))
        .tempdir_in(base)
        .map_err(|e| TortureError::io(base.display().to_string(), e))?;
    let mut rng = StdRng::seed_from_u64(seed);
    let layout = Layout::random(&mut rng, LEAF_BYTES);
    let mut stats = IterationStats {
        layout: layout.describe(),
        ..IterationStats::default()
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut run = Run::start(rng, layout.clone(), dir.path())?;
        let result = run.workload(steps).and_then(|()| run.finish());
        let step = run.step;
        let recent: Vec<String> = run.recent.iter().cloned().collect();
        run.collect_io_faults();
        stats = std::mem::take(&mut run.stats);
        Ok::<_, String>(result.map_err(|m| (step, m, recent)))
    }));
    let failure = match outcome {
        Ok(Ok(Ok(()))) => None,
        Ok(Ok(Err((step, message, recent)))) => Some((step, message, recent)),
        Ok(Err(message)) => Some((0, format!("setting up: {message}"), Vec::new())),
        Err(panic) => Some((0, format!("panic: {}", panic_message(&panic)), Vec::new())),
    };
    stats.layout = layout.describe();
    let violation = failure.map(|(step, message, recent_ops)| {
        let kept = dir.keep();
        Violation {
            seed,
            step,
            layout: layout.describe(),
            message,
            kept_dir: Some(kept.display().to_string()),
            replay: format!("cairn torture --seed {seed} --iterations 1 --steps {steps}"),
            recent_ops,
        }
    });
    Ok((stats, violation))
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

/// Result of a check: `Err` describes a violation.
type Check = Result<(), String>;

/// What an injected fault does to a leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    BitRot,
    Vanish,
    DropWrites,
    ReadErrors,
    CorruptReads,
    WriteErrors,
    TornWrites,
    Delay,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::BitRot => "bit_rot",
            Fault::Vanish => "vanish",
            Fault::DropWrites => "stale",
            Fault::ReadErrors => "read_errors",
            Fault::CorruptReads => "corrupt_reads",
            Fault::WriteErrors => "write_errors",
            Fault::TornWrites => "torn_writes",
            Fault::Delay => "delay",
        }
    }

    fn random(rng: &mut impl Rng) -> Fault {
        match rng.gen_range(0..100) {
            0..=29 => Fault::BitRot,
            30..=44 => Fault::Vanish,
            45..=56 => Fault::DropWrites,
            57..=67 => Fault::ReadErrors,
            68..=78 => Fault::CorruptReads,
            79..=87 => Fault::WriteErrors,
            88..=95 => Fault::TornWrites,
            _ => Fault::Delay,
        }
    }

    /// Whether the leaf may hold wrong data afterwards (counts against redundancy).
    fn damages(self) -> bool {
        self != Fault::Delay
    }
}

/// The state of one iteration.
struct Run {
    rng: StdRng,
    layout: Layout,
    home: Home,
    leaves: Vec<Vec<PathBuf>>,
    leaves_dir: PathBuf,
    config: StoreConfig,
    store: Option<Store>,
    switches: Switchboard,
    model: Model,
    synced: Model,
    synced_txg: u64,
    /// Per group: leaves that may hold wrong or stale data.
    damaged: Vec<BTreeSet<usize>>,
    /// Per group: leaves with a fault switched on now (cleared by reopening the pool).
    active: Vec<BTreeSet<usize>>,
    universe: Vec<String>,
    step: usize,
    recent: VecDeque<String>,
    stats: IterationStats,
}

impl Run {
    fn start(mut rng: StdRng, layout: Layout, dir: &Path) -> Result<Run, String> {
        let (home, leaves) = layout.create(dir).map_err(|e| e.to_string())?;
        let config = StoreConfig {
            dirty_max: rng.gen_range(1..=32) * MIB,
            // Small batches keep the background writer busy in the middle of the workload.
            background_batch: [64 << 10, 256 << 10, MIB, 32 * MIB][rng.gen_range(0..4)],
            // One writer, or several whose batches land out of order.
            background_writers: rng.gen_range(1..=3),
            ..StoreConfig::default()
        };
        let groups = layout.groups;
        let universe = DATASETS
            .iter()
            .flat_map(|ds| (0..2).flat_map(move |d| (0..4).map(move |f| format!("{ds}/d{d}/f{f}"))))
            .collect();
        let mut run = Run {
            rng,
            layout,
            home,
            leaves,
            leaves_dir: leaves_dir(dir),
            config,
            store: None,
            switches: Vec::new(),
            model: Model::default(),
            synced: Model::default(),
            synced_txg: 0,
            damaged: vec![BTreeSet::new(); groups],
            active: vec![BTreeSet::new(); groups],
            universe,
            step: 0,
            recent: VecDeque::new(),
            stats: IterationStats::default(),
        };
        let pool = Pool::open(&run.home, POOL).map_err(|e| e.to_string())?;
        run.attach(pool)?;
        run.create_datasets()?;
        Ok(run)
    }

    fn store(&self) -> &Store {
        self.store
            .as_ref()
            .expect("the store is open between operations")
    }

    /// Wraps the pool's leaves in fault leaves and opens its store.
    fn attach(&mut self, mut pool: Pool) -> Check {
        self.switches = wrap_leaves(&mut pool);
        let store =
            Store::open_with(pool, self.config).map_err(|e| format!("opening the store: {e}"))?;
        self.synced_txg = store.open_txg() - 1;
        self.store = Some(store);
        for a in &mut self.active {
            a.clear();
        }
        Ok(())
    }

    /// Resilvers the stale leaves, if any (as ZFS does on import; here the run decides
    /// when, so reads meet stale leaves too).
    fn resilver(&mut self) -> Check {
        if !self.store().pool().needs_resilver() {
            return Ok(());
        }
        self.note("resilver".into());
        *self.stats.faults.entry("resilver").or_default() += 1;
        let outcome = self
            .store()
            .resilver(ResilverOptions::default(), &mut |_| ScrubControl::Continue);
        let (p, end) = match outcome {
            Ok(done) => done,
            // A leaf being resilvered that fails its writes (a fault this run switched
            // on) stops the resilver with an error; the leaf stays stale, data is intact.
            Err(e) if self.faulted_stale_leaf() => {
                self.note(format!("resilver stopped by a faulty stale leaf: {e}"));
                *self.stats.faults.entry("resilver_stopped").or_default() += 1;
                return self.verify("after a resilver that stopped");
            }
            Err(e) => return Err(format!("resilver: {e}")),
        };
        if end == ResilverEnd::Paused {
            return Err(format!("resilver paused by itself: {p:?}"));
        }
        self.synced = self.model.clone();
        self.synced_txg = self.store().open_txg() - 1;
        self.verify("after resilver")
    }

    /// Whether a leaf a resilver may write (stale, or with missed txgs in its DTL) has a
    /// fault switched on (its resilver writes may fail).
    fn faulted_stale_leaf(&self) -> bool {
        let unreadable = self.unreadable();
        let Some(store) = &self.store else {
            return false;
        };
        store.pool().tops().iter().enumerate().any(|(g, top)| {
            self.active[g].iter().any(|&c| {
                unreadable[g].contains(&c)
                    || top
                        .children
                        .get(c)
                        .is_some_and(|child| !child.dtl_ranges().is_empty())
            })
        })
    }

    /// Runs `change` on the pool between closing and reopening the store.
    fn with_closed_store(
        &mut self,
        what: &str,
        change: impl FnOnce(&mut Pool, &mut Switchboard) -> Result<(), String>,
    ) -> Check {
        let store = self.store.take().expect("open");
        let mut pool = store
            .close()
            .map_err(|e| format!("close for {what}: {e}"))?;
        self.synced = self.model.clone();
        let mut switches = std::mem::take(&mut self.switches);
        let changed = change(&mut pool, &mut switches);
        self.switches = switches;
        let store = Store::open_with(pool, self.config)
            .map_err(|e| format!("opening the store after {what}: {e}"))?;
        self.synced_txg = store.open_txg() - 1;
        self.store = Some(store);
        changed?;
        self.verify(&format!("after {what}"))
    }

    /// Takes a leaf offline (within redundancy), or brings an offline one back.
    fn offline_or_online(&mut self) -> Check {
        let offline: Vec<(usize, usize)> = self
            .store()
            .pool()
            .tops()
            .iter()
            .enumerate()
            .flat_map(|(g, t)| {
                t.children
                    .iter()
                    .enumerate()
                    .filter(|(_, ch)| ch.offline.load(Ordering::Relaxed))
                    .map(move |(c, _)| (g, c))
            })
            .collect();
        let (g, c, online) = if !offline.is_empty() && self.rng.gen_bool(0.6) {
            let (g, c) = offline[self.rng.gen_range(0..offline.len())];
            (g, c, true)
        } else {
            let candidates = self.eligible_leaves();
            if candidates.is_empty() {
                return Ok(());
            }
            let (g, c) = candidates[self.rng.gen_range(0..candidates.len())];
            (g, c, false)
        };
        let device = self.leaves[g][c].display().to_string();
        let what = if online { "online" } else { "offline" };
        self.note(format!("{what} group {g} leaf {c}"));
        *self.stats.faults.entry(what).or_default() += 1;
        self.with_closed_store(what, |pool, _| {
            let done = if online {
                pool.online(&device)
            } else {
                pool.offline(&device, false)
            };
            done.map(|_| ())
                .map_err(|e| format!("{what} {device}: {e}"))
        })
    }

    /// Replaces a leaf (within redundancy) by a new, empty file and resilvers it.
    fn replace(&mut self) -> Check {
        let candidates = self.eligible_leaves();
        if candidates.is_empty() {
            return Ok(());
        }
        let (g, c) = candidates[self.rng.gen_range(0..candidates.len())];
        let old = self.leaves[g][c].display().to_string();
        let new = self.leaves_dir.join(format!("g{g}-d{c}-r{}", self.step));
        std::fs::File::create(&new)
            .and_then(|f| f.set_len(self.layout.leaf_bytes))
            .map_err(|e| format!("creating {}: {e}", new.display()))?;
        let new_spec = new.display().to_string();
        self.note(format!("replace group {g} leaf {c} by {new_spec}"));
        *self.stats.faults.entry("replace").or_default() += 1;
        self.with_closed_store("replace", |pool, switches| {
            pool.replace(&old, Some(&new_spec), false)
                .map_err(|e| format!("replace {old}: {e}"))?;
            pool.wrap_leaf(LeafSlot { top: g, child: c }, |inner| {
                let leaf = cairn_vdev::FaultLeaf::new(inner);
                switches[g][c] = Some(leaf.switches.clone());
                Arc::new(leaf)
            });
            Ok(())
        })?;
        self.leaves[g][c] = new;
        self.active[g].remove(&c);
        self.resilver()?;
        if self.store().pool().tops()[g].children[c].is_readable() {
            self.damaged[g].remove(&c);
        }
        Ok(())
    }

    fn create_datasets(&mut self) -> Check {
        let recordsize = ["4K", "16K", "128K"][self.rng.gen_range(0..3)];
        let compression = ["off", "lz4", "zstd"][self.rng.gen_range(0..3)];
        let checksum = ["blake3", "fletcher4"][self.rng.gen_range(0..2)];
        let volblocksize = ["4K", "8K", "16K"][self.rng.gen_range(0..3)];
        let props = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        let store = self.store();
        let fail = |e: cairn_objset::StoreError| format!("creating datasets: {e}");
        store
            .dataset_create(
                "tank/a",
                DatasetKind::Filesystem,
                props(&[("recordsize", recordsize), ("compression", compression)]),
                None,
                false,
            )
            .map_err(fail)?;
        store
            .dataset_create(
                "tank/z",
                DatasetKind::Filesystem,
                props(&[("copies", "2"), ("checksum", checksum)]),
                None,
                false,
            )
            .map_err(fail)?;
        store
            .dataset_create(
                VOLUME,
                DatasetKind::Volume,
                props(&[("volblocksize", volblocksize)]),
                Some(VOLUME_BYTES as u64),
                false,
            )
            .map_err(fail)?;
        self.model
            .volumes
            .insert(VOLUME.to_string(), vec![0u8; VOLUME_BYTES]);
        self.sync()
    }

    fn note(&mut self, op: String) {
        if self.recent.len() == RECENT_OPS {
            self.recent.pop_front();
        }
        self.recent.push_back(format!("step {}: {op}", self.step));
    }

    fn workload(&mut self, steps: usize) -> Check {
        for step in 0..steps {
            self.step = step;
            self.stats.operations += 1;
            let txg_before = self.store().open_txg();
            match self.rng.gen_range(0..110) {
                108..=109 => self.write_clone()?,
                100..=101 => self.snapshot()?,
                102 => self.destroy_snapshot()?,
                103..=104 => self.rollback()?,
                105..=106 => self.clone_snapshot()?,
                107 => self.destroy_clone()?,
                0..=29 => self.write_file()?,
                30..=34 => self.truncate_file()?,
                35..=41 => self.remove_file()?,
                42..=53 => self.write_volume()?,
                54..=61 => self.sync()?,
                62..=65 => self.verify("verify")?,
                66..=83 => self.inject_fault()?,
                84..=86 => self.heal()?,
                87..=88 => self.offline_or_online()?,
                89 => self.replace()?,
                90..=92 => self.kill_and_reopen()?,
                93..=94 => self.export_and_import()?,
                95..=96 => self.resilver()?,
                _ => self.scrub()?,
            }
            // A write over the dirty limit syncs by itself: that state is durable too.
            if let Some(store) = &self.store {
                if store.open_txg() != txg_before && self.synced_txg < store.open_txg() - 1 {
                    self.synced = self.model.clone();
                    self.synced_txg = store.open_txg() - 1;
                }
            }
        }
        Ok(())
    }

    fn random_path(&mut self) -> String {
        let i = self.rng.gen_range(0..self.universe.len());
        self.universe[i].clone()
    }

    fn random_data(&mut self, len: usize) -> Vec<u8> {
        let mut data = vec![0u8; len];
        if self.rng.gen_bool(0.5) {
            self.rng.fill_bytes(&mut data);
        } else {
            let salt = self.rng.gen::<u8>();
            for (i, b) in data.iter_mut().enumerate() {
                *b = (i / 64) as u8 ^ salt;
            }
        }
        data
    }

    fn write_file(&mut self) -> Check {
        let path = self.random_path();
        let current = self.model.files.get(&path).map_or(0, Vec::len);
        let offset = self.rng.gen_range(0..=current + (64 << 10));
        let len = self.rng.gen_range(1..=MAX_WRITE);
        let data = self.random_data(len);
        self.note(format!("write {path} @{offset} +{len}"));
        let store = self.store();
        let fail = |e: cairn_objset::StoreError| format!("write {path}: {e}");
        if current == 0 && !self.model.files.contains_key(&path) {
            store.create_file(&path, false).map_err(fail)?;
        }
        let r = store.resolve(&path).map_err(fail)?;
        store.write(&r, offset as u64, &data).map_err(fail)?;
        self.model.write_file(&path, offset, &data);
        Ok(())
    }

    fn truncate_file(&mut self) -> Check {
        let path = self.random_path();
        let Some(current) = self.model.files.get(&path).map(Vec::len) else {
            return Ok(());
        };
        let size = self.rng.gen_range(0..=current + (32 << 10));
        self.note(format!("truncate {path} to {size}"));
        let store = self.store();
        let fail = |e: cairn_objset::StoreError| format!("truncate {path}: {e}");
        let r = store.resolve(&path).map_err(fail)?;
        store.truncate(&r, size as u64).map_err(fail)?;
        if let Some(f) = self.model.files.get_mut(&path) {
            f.resize(size, 0);
        }
        Ok(())
    }

    fn remove_file(&mut self) -> Check {
        let path = self.random_path();
        if !self.model.files.contains_key(&path) {
            return Ok(());
        }
        self.note(format!("remove {path}"));
        self.store()
            .remove(&path, false)
            .map_err(|e| format!("remove {path}: {e}"))?;
        self.model.files.remove(&path);
        Ok(())
    }

    fn write_volume(&mut self) -> Check {
        let offset = self.rng.gen_range(0..VOLUME_BYTES - 1);
        let len = self
            .rng
            .gen_range(1..=(VOLUME_BYTES - offset).min(128 << 10));
        let punch = self.rng.gen_bool(0.25);
        let data = if punch {
            vec![0u8; len]
        } else {
            self.random_data(len)
        };
        self.note(format!(
            "{} {VOLUME} @{offset} +{len}",
            if punch { "punch" } else { "write" }
        ));
        let store = self.store();
        let fail = |e: cairn_objset::StoreError| format!("volume {VOLUME}: {e}");
        let r = store.resolve(VOLUME).map_err(fail)?;
        if punch {
            store.punch(&r, offset as u64, len as u64).map_err(fail)?;
        } else {
            store.write(&r, offset as u64, &data).map_err(fail)?;
        }
        self.model.write_volume(VOLUME, offset, &data);
        Ok(())
    }

    /// Takes a snapshot of a random file system; the model keeps its files as they are.
    fn snapshot(&mut self) -> Check {
        let ds = DATASETS[self.rng.gen_range(0..DATASETS.len())];
        let name = format!("{ds}@s{}", self.stats.operations);
        self.note(format!("snapshot {name}"));
        self.store()
            .snapshot_create(std::slice::from_ref(&name), false)
            .map_err(|e| format!("snapshot {name}: {e}"))?;
        let files = self.files_of(ds);
        self.model.snapshots.insert(name, files);
        // (Taking one commits the open txg.)
        self.synced = self.model.clone();
        self.synced_txg = self.store().open_txg() - 1;
        Ok(())
    }

    fn files_of(&self, ds: &str) -> BTreeMap<String, Vec<u8>> {
        self.model
            .files
            .iter()
            .filter(|(p, _)| crate::model::dataset_of(p, &DATASETS) == ds)
            .map(|(p, d)| (p.clone(), d.clone()))
            .collect()
    }

    /// Clones a random snapshot (synced, so it survives a kill); the model expects the
    /// clone to read as the snapshot from then on.
    fn clone_snapshot(&mut self) -> Check {
        let Some(snap) = self.pick_snapshot() else {
            return Ok(());
        };
        let clone = format!("tank/c{}", self.stats.operations);
        self.note(format!("clone {snap} {clone}"));
        let store = self.store();
        store
            .clone_create(&snap, &clone)
            .map_err(|e| format!("clone {snap} {clone}: {e}"))?;
        let model = crate::model::CloneModel::of(&clone, &snap, &self.model.snapshots[&snap]);
        self.model.clones.insert(clone, model);
        self.sync()
    }

    /// Writes into a file of a random clone (its blocks become the clone's own; the origin
    /// snapshot and the other clones must not change).
    fn write_clone(&mut self) -> Check {
        let n = self.model.clones.len();
        if n == 0 {
            return Ok(());
        }
        let i = self.rng.gen_range(0..n);
        let (clone, files) = {
            let (name, c) = self.model.clones.iter().nth(i).expect("in range");
            (name.clone(), c.files.len())
        };
        if files == 0 {
            return Ok(());
        }
        let k = self.rng.gen_range(0..files);
        let path = self.model.clones[&clone]
            .files
            .keys()
            .nth(k)
            .cloned()
            .expect("in range");
        let len = self.model.clones[&clone].files[&path].len();
        let offset = self.rng.gen_range(0..=len);
        let size = self.rng.gen_range(1..=64 << 10);
        let data = self.random_data(size);
        self.note(format!("write clone {path} at {offset}, {size} bytes"));
        let store = self.store();
        let r = store
            .resolve(&path)
            .map_err(|e| format!("write clone {path}: {e}"))?;
        store
            .write(&r, offset as u64, &data)
            .map_err(|e| format!("write clone {path}: {e}"))?;
        let f = self
            .model
            .clones
            .get_mut(&clone)
            .and_then(|c| c.files.get_mut(&path))
            .expect("picked above");
        if f.len() < offset + size {
            f.resize(offset + size, 0);
        }
        f[offset..offset + size].copy_from_slice(&data);
        Ok(())
    }

    /// Destroys a random clone: its own blocks go, its origin's stay.
    fn destroy_clone(&mut self) -> Check {
        let n = self.model.clones.len();
        if n == 0 {
            return Ok(());
        }
        let i = self.rng.gen_range(0..n);
        let clone = self.model.clones.keys().nth(i).cloned().expect("in range");
        self.drop_clone(&clone)?;
        self.sync()
    }

    fn drop_clone(&mut self, clone: &str) -> Check {
        self.note(format!("destroy clone {clone}"));
        self.store()
            .dataset_destroy(clone, false)
            .map_err(|e| format!("destroy {clone}: {e}"))?;
        self.model.clones.remove(clone);
        Ok(())
    }

    /// Destroys a random snapshot (its clones first): it frees exactly the `used` it
    /// reported.
    fn destroy_snapshot(&mut self) -> Check {
        let Some(name) = self.pick_snapshot() else {
            return Ok(());
        };
        let clones: Vec<String> = self
            .model
            .clones
            .iter()
            .filter(|(_, c)| c.origin == name)
            .map(|(c, _)| c.clone())
            .collect();
        for c in clones {
            self.drop_clone(&c)?;
        }
        self.note(format!("destroy {name}"));
        let store = self.store();
        let (ds, _) = name.split_once('@').expect("DATASET@NAME");
        let fail = |e: cairn_objset::StoreError| format!("destroy {name}: {e}");
        let used = store
            .snapshots(Some(ds))
            .map_err(fail)?
            .into_iter()
            .find(|s| s.name == name)
            .map(|s| s.used)
            .ok_or_else(|| format!("destroy {name}: not listed"))?;
        let freed = store.snapshot_destroy(&name).map_err(fail)?;
        if freed != used {
            return Err(format!(
                "destroy {name} freed {freed} bytes but reported used {used}"
            ));
        }
        self.model.snapshots.remove(&name);
        self.synced = self.model.clone();
        self.synced_txg = self.store().open_txg() - 1;
        Ok(())
    }

    /// Rolls a random snapshot's dataset back to its newest snapshot.
    fn rollback(&mut self) -> Check {
        let Some(picked) = self.pick_snapshot() else {
            return Ok(());
        };
        let ds = picked.split_once('@').expect("DATASET@NAME").0.to_string();
        let newest = self
            .store()
            .snapshots(Some(&ds))
            .map_err(|e| format!("rollback {ds}: {e}"))?
            .pop()
            .map(|s| s.name)
            .ok_or_else(|| format!("rollback {ds}: no snapshot listed"))?;
        self.note(format!("rollback {newest}"));
        self.store()
            .snapshot_rollback(&newest, false)
            .map_err(|e| format!("rollback {newest}: {e}"))?;
        let kept = self.model.snapshots[&newest].clone();
        self.model
            .files
            .retain(|p, _| crate::model::dataset_of(p, &DATASETS) != ds);
        self.model.files.extend(kept);
        self.synced = self.model.clone();
        self.synced_txg = self.store().open_txg() - 1;
        Ok(())
    }

    fn pick_snapshot(&mut self) -> Option<String> {
        let n = self.model.snapshots.len();
        if n == 0 {
            return None;
        }
        let i = self.rng.gen_range(0..n);
        self.model.snapshots.keys().nth(i).cloned()
    }

    fn sync(&mut self) -> Check {
        self.note("sync".into());
        let txg = self.store().sync().map_err(|e| format!("sync: {e}"))?;
        self.synced = self.model.clone();
        self.synced_txg = txg;
        Ok(())
    }

    fn verify(&mut self, when: &str) -> Check {
        self.model
            .verify(self.store(), &self.universe)
            .map_err(|e| format!("{when}: {e}"))
    }

    /// Groups and leaves a new damaging fault may hit without exceeding redundancy.
    fn eligible_leaves(&self) -> Vec<(usize, usize)> {
        let budget = self.layout.redundancy();
        let mut out = Vec::new();
        for g in 0..self.layout.groups {
            let hurt = self.hurt(g);
            for c in 0..self.layout.width {
                if hurt.contains(&c) || hurt.len() < budget {
                    out.push((g, c));
                }
            }
        }
        out
    }

    /// Leaves of group `g` that may hold wrong data, are faulted now, or that the engine
    /// does not read from (offline, removed, faulted, stale until resilvered).
    fn hurt(&self, g: usize) -> BTreeSet<usize> {
        let mut hurt: BTreeSet<usize> = self.damaged[g].union(&self.active[g]).copied().collect();
        if let Some(top) = self.store.as_ref().and_then(|s| s.pool().tops().get(g)) {
            hurt.extend(
                top.children
                    .iter()
                    .enumerate()
                    .filter(|(_, child)| !child.is_readable())
                    .map(|(c, _)| c),
            );
        }
        hurt
    }

    /// Leaves the engine does not read from now, per group.
    fn unreadable(&self) -> Vec<BTreeSet<usize>> {
        let Some(store) = &self.store else {
            return vec![BTreeSet::new(); self.layout.groups];
        };
        store
            .pool()
            .tops()
            .iter()
            .map(|top| {
                top.children
                    .iter()
                    .enumerate()
                    .filter(|(_, child)| !child.is_readable())
                    .map(|(c, _)| c)
                    .collect()
            })
            .collect()
    }

    fn switches_of(&self, g: usize, c: usize) -> Option<Arc<FaultSwitches>> {
        self.switches.get(g)?.get(c)?.clone()
    }

    fn inject_fault(&mut self) -> Check {
        let fault = Fault::random(&mut self.rng);
        let candidates = if fault.damages() {
            self.eligible_leaves()
        } else {
            (0..self.layout.groups)
                .flat_map(|g| (0..self.layout.width).map(move |c| (g, c)))
                .collect()
        };
        if candidates.is_empty() {
            return Ok(());
        }
        let (g, c) = candidates[self.rng.gen_range(0..candidates.len())];
        let probability = self.rng.gen_range(0.05..0.6);
        self.note(format!("fault {} on group {g} leaf {c}", fault.name()));
        *self.stats.faults.entry(fault.name()).or_default() += 1;
        if fault == Fault::BitRot {
            self.rot(g, c)?;
        } else if let Some(sw) = self.switches_of(g, c) {
            let mut s = current_settings(&sw);
            match fault {
                Fault::Vanish => s.vanish = true,
                Fault::DropWrites => s.stale = true,
                Fault::ReadErrors => s.fail_reads = probability,
                Fault::CorruptReads => s.corrupt = probability,
                Fault::WriteErrors => s.fail_writes = probability,
                Fault::TornWrites => s.tear = probability,
                Fault::Delay => s.delay_us = self.rng.gen_range(20..300),
                Fault::BitRot => {}
            }
            sw.apply(&s);
            if fault.damages() {
                self.active[g].insert(c);
            }
        }
        if fault.damages() {
            self.damaged[g].insert(c);
        }
        self.verify(&format!("after {} on group {g} leaf {c}", fault.name()))
    }

    /// Overwrites random 4 KiB sectors near the start of a leaf's data area with garbage.
    fn rot(&mut self, g: usize, c: usize) -> Check {
        let path = self.leaves[g][c].clone();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| format!("rot {}: {e}", path.display()))?;
        let data_end = (LEAF_BYTES / (256 << 10)) * (256 << 10) - LEAF_END_RESERVE;
        let span = (data_end - LEAF_DATA_START).min(24 * MIB) / 4096;
        let count = self.rng.gen_range(16..400);
        let mut junk = vec![0u8; 4096];
        for _ in 0..count {
            self.rng.fill_bytes(&mut junk);
            let sector = self.rng.gen_range(0..span);
            file.write_all_at(&junk, LEAF_DATA_START + sector * 4096)
                .map_err(|e| format!("rot {}: {e}", path.display()))?;
        }
        Ok(())
    }

    /// Switches off the faults of a leaf, except vanishing (a vanished leaf comes back
    /// only when the pool is opened again). Its data stays suspect until a scrub.
    fn heal(&mut self) -> Check {
        let active: Vec<(usize, usize)> = self
            .active
            .iter()
            .enumerate()
            .flat_map(|(g, s)| s.iter().map(move |&c| (g, c)))
            .collect();
        if active.is_empty() {
            return Ok(());
        }
        let (g, c) = active[self.rng.gen_range(0..active.len())];
        let Some(sw) = self.switches_of(g, c) else {
            return Ok(());
        };
        let vanished = sw.vanished.load(Ordering::Relaxed);
        self.note(format!("heal group {g} leaf {c}"));
        sw.apply(&FaultSettings {
            vanish: vanished,
            ..FaultSettings::default()
        });
        if !vanished {
            self.active[g].remove(&c);
        }
        Ok(())
    }

    /// Moves the counts of I/O faults the current fault leaves injected to the stats.
    fn collect_io_faults(&mut self) {
        for sw in self.switches.iter().flatten().flatten() {
            self.stats.io_faults += sw.injected.swap(0, Ordering::Relaxed)
                + sw.injected_writes.swap(0, Ordering::Relaxed);
        }
    }

    /// Drops the store without a final sync (a crash), reopens the pool and checks it is
    /// at the last synced txg with the synced contents.
    fn kill_and_reopen(&mut self) -> Check {
        self.note("kill and reopen".into());
        *self.stats.faults.entry("kill").or_default() += 1;
        self.collect_io_faults();
        self.store = None;
        let pool = Pool::open(&self.home, POOL).map_err(|e| format!("reopen after kill: {e}"))?;
        let expected_txg = self.synced_txg;
        self.attach(pool)?;
        if self.synced_txg != expected_txg {
            return Err(format!(
                "reopened at txg {} after a kill, but txg {expected_txg} was the last synced",
                self.synced_txg
            ));
        }
        self.model = self.synced.clone();
        self.verify("after kill and reopen")?;
        self.maybe_resilver()
    }

    /// Resilvers half of the time after the pool was opened again (so stale leaves also
    /// meet more faults and reads before they are resilvered).
    fn maybe_resilver(&mut self) -> Check {
        if self.rng.gen_bool(0.5) {
            self.resilver()?;
        }
        Ok(())
    }

    /// Closes the store (final sync), exports the pool and imports it by scanning.
    fn export_and_import(&mut self) -> Check {
        self.note("export and import".into());
        *self.stats.faults.entry("reimport").or_default() += 1;
        self.collect_io_faults();
        let store = self.store.take().expect("open");
        let pool = store
            .close()
            .map_err(|e| format!("close for export: {e}"))?;
        self.synced = self.model.clone();
        pool.export().map_err(|e| format!("export: {e}"))?;
        let pool = Pool::import(
            &self.home,
            std::slice::from_ref(&self.leaves_dir),
            POOL,
            false,
            false,
        )
        .map_err(|e| format!("import: {e}"))?;
        self.attach(pool)?;
        self.verify("after export and import")?;
        self.maybe_resilver()
    }

    fn run_scrub(&mut self) -> Result<ScrubProgress, String> {
        let (p, end) = self
            .store()
            .scrub(None, Duration::from_secs(3600), &mut |_| {
                ScrubControl::Continue
            })
            .map_err(|e| format!("scrub: {e}"))?;
        self.stats.scrubs += 1;
        self.stats.repaired_bytes += p.repaired_bytes;
        // A scrub syncs the open txg before it starts.
        self.synced = self.model.clone();
        self.synced_txg = self.store().open_txg() - 1;
        if end != ScrubEnd::Finished {
            return Err(format!("scrub ended {end:?}"));
        }
        if p.errors != 0 {
            return Err(format!(
                "scrub found {} errors with faults within redundancy (damaged leaves {:?}, faulted {:?}): {p:?}",
                p.errors, self.damaged, self.active
            ));
        }
        Ok(p)
    }

    /// Scrubs; a clean scrub repaired every leaf that is not faulted now.
    fn scrub(&mut self) -> Check {
        self.note("scrub".into());
        self.run_scrub()?;
        let unreadable = self.unreadable();
        for ((damaged, active), skipped) in
            self.damaged.iter_mut().zip(&self.active).zip(&unreadable)
        {
            // The scrub repaired what it could read; leaves it skipped stay suspect.
            let kept: BTreeSet<usize> = damaged.intersection(skipped).copied().collect();
            *damaged = kept.union(active).copied().collect();
        }
        self.verify("after scrub")
    }

    /// End of an iteration: sync, scrub with the faults still on, reopen with all faults
    /// gone, scrub twice (the second must find nothing to repair), verify each time.
    fn finish(&mut self) -> Check {
        self.step += 1;
        self.sync()?;
        self.verify("at the end")?;
        self.scrub()?;
        self.export_and_import()?;
        self.bring_everything_back()?;
        self.scrub()?;
        self.note("second scrub".into());
        let p = self.run_scrub()?;
        if p.repaired_bytes != 0 {
            return Err(format!(
                "a second scrub with no faults left still repaired {} bytes: {p:?}",
                p.repaired_bytes
            ));
        }
        self.verify("after the final scrubs")?;
        self.kill_and_reopen()?;
        self.collect_io_faults();
        Ok(())
    }
}

impl Run {
    /// Onlines every offline leaf and resilvers until no leaf is stale.
    fn bring_everything_back(&mut self) -> Check {
        let offline: Vec<String> = self
            .store()
            .pool()
            .tops()
            .iter()
            .enumerate()
            .flat_map(|(g, t)| {
                t.children
                    .iter()
                    .enumerate()
                    .filter(|(_, ch)| ch.offline.load(Ordering::Relaxed))
                    .map(move |(c, _)| (g, c))
            })
            .map(|(g, c)| self.leaves[g][c].display().to_string())
            .collect();
        for device in offline {
            self.note(format!("online {device}"));
            self.with_closed_store("online", |pool, _| {
                pool.online(&device)
                    .map(|_| ())
                    .map_err(|e| format!("online {device}: {e}"))
            })?;
        }
        self.resilver()?;
        if self.store().pool().needs_resilver() {
            return Err("a leaf is still stale after a finished resilver".into());
        }
        Ok(())
    }
}

/// The settings a switchboard holds now (to add one fault to those already on).
fn current_settings(sw: &FaultSwitches) -> FaultSettings {
    let p = |a: &std::sync::atomic::AtomicU32| f64::from(a.load(Ordering::Relaxed)) / 1e6;
    FaultSettings {
        fail_reads: p(&sw.read_error_ppm),
        fail_writes: p(&sw.write_error_ppm),
        fail_data_writes: p(&sw.data_write_error_ppm),
        corrupt: p(&sw.corrupt_read_ppm),
        tear: p(&sw.torn_write_ppm),
        delay_us: sw.delay_us.load(Ordering::Relaxed),
        bandwidth: sw.throttle_bytes_per_sec.load(Ordering::Relaxed),
        vanish: sw.vanished.load(Ordering::Relaxed),
        stale: sw.drop_writes.load(Ordering::Relaxed),
        serial: sw.serial.load(Ordering::Relaxed),
        seed: None,
        control: None,
    }
}
