//! `cairn crashloop`: runs the writer ([`crate::writer`]) as a child process under load,
//! kills it with SIGKILL at a random moment, re-opens the pool and checks that every
//! acknowledged record is intact, that nothing beyond the in-flight txg is visible, and
//! that a scrub finds nothing wrong. Then again, on the same pool.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cairn_objset::scrub::{ScrubControl, ScrubEnd};
use cairn_objset::Store;
use cairn_pool::{Home, Pool};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::layout::{Layout, POOL};
use crate::writer::{self, Announcement};
use crate::TortureError;

/// Arguments of `cairn crashloop`.
#[derive(clap::Args, Debug, Clone)]
pub struct CrashLoopArgs {
    /// Kill-and-check rounds.
    #[arg(long, default_value_t = 100)]
    pub iterations: u64,
    /// Seed of the kill moments and batch sizes (default: random; printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Pool layout: mirror, raidz1, raidz2 or raidz3.
    #[arg(long, default_value = "raidz2")]
    pub layout: String,
    /// Leaves in the group.
    #[arg(long, default_value_t = 5)]
    pub width: usize,
    /// The writer is killed after a random time from 0 to this many milliseconds.
    #[arg(long, default_value_t = 800)]
    pub max_kill_ms: u64,
    /// Directory for the leaf files (the `cairn` binary gives the system temp directory
    /// when the flag is absent; this library reads no environment).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the leaf files even when every round passed.
    #[arg(long)]
    pub keep: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report to this file.
    #[arg(long, value_name = "FILE")]
    pub json_out: Option<PathBuf>,
}

/// How to start the writer: a program and the arguments before `--home …`.
#[derive(Clone, Debug)]
pub struct WriterCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// A round that found the pool not holding what was acknowledged.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CrashViolation {
    pub iteration: u64,
    pub message: String,
}

/// What a crash loop did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CrashLoopReport {
    pub seed: u64,
    pub layout: String,
    pub iterations: u64,
    /// Rounds whose writer was killed before it acknowledged anything.
    pub killed_before_first_sync: u64,
    /// Txgs the writers acknowledged in all rounds.
    pub acknowledged_txgs: u64,
    /// Records on disk at the end.
    pub records: u64,
    /// Rounds where the pool held the in-flight txg (synced, not yet acknowledged).
    pub inflight_txg_survived: u64,
    pub scrubbed_bytes: u64,
    pub elapsed_secs: f64,
    pub violations: Vec<CrashViolation>,
    /// Where the leaf files are (kept on a violation or with --keep).
    pub kept_dir: Option<String>,
}

/// `cairn crashloop`.
pub fn run(args: &CrashLoopArgs, writer: &WriterCommand) -> Result<CrashLoopReport, TortureError> {
    let seed = args.seed.unwrap_or_else(crate::random_seed);
    let layout = redundant_layout(args)?;
    let dir = pool_dir(args, seed)?;
    eprintln!(
        "crashloop: seed {seed}, {} rounds on {}, pool in {}",
        args.iterations,
        layout.describe(),
        dir.path().display()
    );
    let home = create_pool(&layout, dir.path())?;
    let mut report = CrashLoopReport {
        seed,
        layout: layout.describe(),
        ..CrashLoopReport::default()
    };
    let start = Instant::now();
    report.records = run_rounds(args, writer, &home, dir.path(), start, &mut report);
    report.elapsed_secs = start.elapsed().as_secs_f64();
    if !report.violations.is_empty() || args.keep {
        report.kept_dir = Some(dir.keep().display().to_string());
    }
    if let Some(path) = &args.json_out {
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        std::fs::write(path, text).map_err(|e| TortureError::io(path.display().to_string(), e))?;
    }
    Ok(report)
}

/// The one-group layout of the arguments, with 128 MiB leaves; it must survive a lost leaf.
fn redundant_layout(args: &CrashLoopArgs) -> Result<Layout, TortureError> {
    let layout = Layout {
        kind: args.layout.clone(),
        width: args.width,
        groups: 1,
        leaf_bytes: 128 << 20,
    };
    if layout.redundancy() == 0 {
        return Err(TortureError::BadArgument(format!(
            "layout '{}': use mirror, raidz1, raidz2 or raidz3",
            args.layout
        )));
    }
    Ok(layout)
}

/// A new folder for the leaf files under `--dir`, named after the seed (removed when
/// dropped, unless kept).
fn pool_dir(args: &CrashLoopArgs, seed: u64) -> Result<tempfile::TempDir, TortureError> {
    let base = args.dir.clone().ok_or_else(|| {
        TortureError::BadArgument("no directory for the leaf files: give --dir DIR".into())
    })?;
    std::fs::create_dir_all(&base).map_err(|e| TortureError::io(base.display().to_string(), e))?;
    tempfile::Builder::new()
        .prefix(&format!("cairn-crashloop-{seed}-"))
        .tempdir_in(&base)
        .map_err(|e| TortureError::io(base.display().to_string(), e))
}

/// Creates the pool of `layout` in `dir`, set up for the writer, and closes it again.
fn create_pool(layout: &Layout, dir: &Path) -> Result<Home, TortureError> {
    let (home, _) = layout.create(dir)?;
    let store = Store::open_with(Pool::open(&home, POOL)?, writer::store_config())?;
    writer::setup(&store)?;
    Ok(home)
}

/// The kill-and-check rounds (kill moments and writer seeds drawn from the report's seed),
/// counted into `report`, until the last one or the first violation. Returns the records
/// verified on disk at the end.
fn run_rounds(
    args: &CrashLoopArgs,
    writer: &WriterCommand,
    home: &Home,
    dir: &Path,
    start: Instant,
    report: &mut CrashLoopReport,
) -> u64 {
    let mut rng = StdRng::seed_from_u64(report.seed);
    let mut verified = 0u64;
    for iteration in 0..args.iterations {
        let kill_after = Duration::from_millis(rng.gen_range(0..=args.max_kill_ms));
        let round = run_round(writer, home, dir, rng.gen(), kill_after, verified);
        report.iterations += 1;
        match round {
            Ok(r) => {
                report.count_round(&r);
                verified = r.on_disk;
            }
            Err(message) => {
                eprintln!("crashloop: VIOLATION in round {iteration}: {message}");
                report
                    .violations
                    .push(CrashViolation { iteration, message });
                break;
            }
        }
        if (iteration + 1) % 50 == 0 {
            eprintln!(
                "crashloop: {} rounds, {verified} records, {} violations ({:.0} s)",
                iteration + 1,
                report.violations.len(),
                start.elapsed().as_secs_f64()
            );
        }
    }
    verified
}

impl CrashLoopReport {
    /// Adds what a round that passed saw.
    fn count_round(&mut self, r: &RoundOutcome) {
        self.acknowledged_txgs += r.acknowledged_txgs;
        self.killed_before_first_sync += u64::from(r.acknowledged_txgs == 0);
        self.inflight_txg_survived += u64::from(r.on_disk > r.acknowledged);
        self.scrubbed_bytes += r.scrubbed_bytes;
    }
}

/// Prints a crash-loop report.
pub fn print_report(report: &CrashLoopReport, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(report).unwrap_or_default()
        );
        return;
    }
    println!(
        "crashloop: seed {}: {} iterations on {}, {} acknowledged txgs, {} records, {} violations in {:.1} s",
        report.seed,
        report.iterations,
        report.layout,
        report.acknowledged_txgs,
        report.records,
        report.violations.len(),
        report.elapsed_secs
    );
    for v in &report.violations {
        println!("VIOLATION in round {}: {}", v.iteration, v.message);
    }
    if let Some(dir) = &report.kept_dir {
        println!("  leaf files kept in {dir}");
    }
}

/// What one round saw.
struct RoundOutcome {
    acknowledged_txgs: u64,
    /// Records acknowledged (or verified before the round).
    acknowledged: u64,
    /// Records found on disk.
    on_disk: u64,
    scrubbed_bytes: u64,
}

/// Starts the writer, kills it after `kill_after`, and checks the pool.
fn run_round(
    writer: &WriterCommand,
    home: &Home,
    dir: &Path,
    seed: u64,
    kill_after: Duration,
    verified: u64,
) -> Result<RoundOutcome, String> {
    let (mut child, lines) = spawn_writer(writer, home, dir, seed)?;
    std::thread::sleep(kill_after);
    let _ = child.kill();
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the writer: {e}"))?;
    let announcements = lines.join().unwrap_or_default();
    if status.signal() != Some(SIGKILL) {
        let stderr = std::fs::read_to_string(dir.join("writer.stderr")).unwrap_or_default();
        return Err(format!(
            "the writer exited by itself ({status}): {}",
            stderr.trim()
        ));
    }
    let mut acknowledged = verified;
    let mut begun = verified;
    let mut acknowledged_txgs = 0;
    for a in announcements {
        match a {
            Announcement::Begin { next, .. } => begun = begun.max(next),
            Announcement::Synced { next, .. } => {
                acknowledged = acknowledged.max(next);
                acknowledged_txgs += 1;
            }
        }
    }
    let (on_disk, scrubbed_bytes) = check_pool(home, acknowledged, begun.max(acknowledged))?;
    Ok(RoundOutcome {
        acknowledged_txgs,
        acknowledged,
        on_disk,
        scrubbed_bytes,
    })
}

/// Signal number of SIGKILL (what `Child::kill` sends).
const SIGKILL: i32 = 9;

fn spawn_writer(
    writer: &WriterCommand,
    home: &Home,
    dir: &Path,
    seed: u64,
) -> Result<(Child, JoinHandle<Vec<Announcement>>), String> {
    let stderr = std::fs::File::create(dir.join("writer.stderr"))
        .map_err(|e| format!("writer.stderr: {e}"))?;
    let mut child = Command::new(&writer.program)
        .args(&writer.args)
        .arg("--home")
        .arg(home.root())
        .args(["--pool", POOL, "--seed", &seed.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", writer.program.display()))?;
    let stdout = child.stdout.take().ok_or("the writer has no stdout")?;
    let lines = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| writer::parse_announcement(&l))
            .collect()
    });
    Ok((child, lines))
}

/// Opens the pool as the writer left it and checks it; returns the records on disk and
/// the bytes the scrub examined.
fn check_pool(home: &Home, acknowledged: u64, begun: u64) -> Result<(u64, u64), String> {
    let pool =
        Pool::open(home, POOL).map_err(|e| format!("opening the pool after the kill: {e}"))?;
    let store = Store::open_with(pool, writer::store_config())
        .map_err(|e| format!("opening the store after the kill: {e}"))?;
    let on_disk = writer::read_marker(&store).map_err(|e| format!("reading the marker: {e}"))?;
    if on_disk < acknowledged {
        return Err(format!(
            "lost acknowledged writes: the pool holds {on_disk} records, {acknowledged} were acknowledged"
        ));
    }
    if on_disk > begun {
        return Err(format!(
            "the pool holds {on_disk} records, but the writer never began a txg beyond {begun}"
        ));
    }
    writer::verify_state(&store, on_disk).map_err(|e| format!("after {on_disk} records: {e}"))?;
    let (p, end) = store
        .scrub(None, Duration::from_secs(3600), &mut |_| {
            ScrubControl::Continue
        })
        .map_err(|e| format!("scrub: {e}"))?;
    if end != ScrubEnd::Finished || p.errors != 0 || p.repaired_bytes != 0 {
        return Err(format!("scrub after the kill is not clean: {end:?} {p:?}"));
    }
    Ok((on_disk, p.examined_bytes))
}
