//! `cairn bench io`: sequential write and read of one large incompressible file through the
//! whole stack (object store, checksums, compression attempt, parity, leaves) on files in
//! tmpfs, per layout; and the same file through zfs-fuse on the same files when installed.
//! Prints MB/s, CPU seconds and peak RSS, and JSON.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_objset::{Resolved, Store, StoreConfig};
use cairn_pool::{CreateOptions, Home, Pool};
use rand::{RngCore, SeedableRng};
use serde::Serialize;

/// Bytes per write/read call.
const CHUNK: usize = 1 << 20;
/// Size of the random pattern that the file repeats (incompressible per block).
const PATTERN: usize = 64 << 20;

#[derive(clap::Args, Debug, Clone)]
pub struct IoBenchArgs {
    /// Bytes written and read per layout (K/M/G suffixes).
    #[arg(long, default_value = "4G")]
    pub size: String,
    /// Folder for the leaf files (tmpfs, so the disks are not the limit).
    #[arg(long, default_value = "/dev/shm")]
    pub dir: PathBuf,
    /// Layouts: raidzPxW (one raidz of W leaves), mirrorNxG (G mirrors of N), stripeN.
    #[arg(long, value_delimiter = ',', default_value = "raidz2x6,mirror2x3")]
    pub layouts: Vec<String>,
    /// Skip the zfs-fuse comparison.
    #[arg(long)]
    pub no_zfs_fuse: bool,
    /// Leave the leaf files sparse: tmpfs then allocates and zeroes pages inside the timed
    /// writes, which a disk does not do (default: written once with zeros, for both
    /// engines).
    #[arg(long)]
    pub sparse: bool,
    /// Checksum of the data blocks: fletcher4 (the default of cairn and ZFS, `checksum=on`),
    /// blake3 or sha256. Both engines use it where they can (zfs-fuse has no blake3 and
    /// keeps fletcher4).
    #[arg(long, default_value = "fletcher4")]
    pub checksum: String,
    /// The pool's failmode, in a pool held as by the service (resumable): under `continue`
    /// every txg sync first copies the store's state, so that a sync that loses its devices
    /// part-way can be undone. Not for zfs-fuse.
    #[arg(long, default_value = "wait", value_parser = ["wait", "continue"])]
    pub failmode: String,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON to this file.
    #[arg(long)]
    pub json_out: Option<PathBuf>,
}

#[derive(Clone, Debug, Serialize)]
pub struct IoResult {
    pub engine: String,
    pub layout: String,
    /// Checksum of the data blocks.
    pub checksum: String,
    /// cairn's pool failmode (`wait` for zfs-fuse).
    pub failmode: String,
    pub bytes: u64,
    pub write_mbs: f64,
    pub read_mbs: f64,
    pub write_cpu_secs: f64,
    pub read_cpu_secs: f64,
    /// Peak resident set of the process so far, MiB.
    pub peak_rss_mib: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    machine: String,
    dirty_max_mib: u64,
    leaves_preallocated: bool,
    results: Vec<IoResult>,
    ratios_vs_zfs_fuse: Vec<(String, f64, f64)>,
}

pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (n, m) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    n.parse::<u64>()
        .map(|v| v * m)
        .map_err(|_| format!("bad size '{s}'"))
}

/// (zpool tokens with placeholders dN, number of leaves, data fraction).
fn layout_tokens(layout: &str) -> Result<(Vec<String>, usize, f64), String> {
    let bad = || format!("unknown layout '{layout}': use raidzPxW, mirrorNxG or stripeN");
    if let Some(rest) = layout.strip_prefix("raidz") {
        let (p, w) = rest.split_once('x').ok_or_else(bad)?;
        let (p, w): (usize, usize) = (p.parse().map_err(|_| bad())?, w.parse().map_err(|_| bad())?);
        let mut t = vec![format!("raidz{p}")];
        t.extend((0..w).map(|i| format!("d{i}")));
        return Ok((t, w, (w - p) as f64 / w as f64));
    }
    if let Some(rest) = layout.strip_prefix("mirror") {
        let (n, g) = rest.split_once('x').ok_or_else(bad)?;
        let (n, g): (usize, usize) = (n.parse().map_err(|_| bad())?, g.parse().map_err(|_| bad())?);
        let mut t = Vec::new();
        for j in 0..g {
            t.push("mirror".to_string());
            t.extend((0..n).map(|i| format!("d{}", j * n + i)));
        }
        return Ok((t, n * g, 1.0 / n as f64));
    }
    if let Some(n) = layout.strip_prefix("stripe") {
        let n: usize = n.parse().map_err(|_| bad())?;
        return Ok(((0..n).map(|i| format!("d{i}")).collect(), n, 1.0));
    }
    Err(bad())
}

fn cpu_secs() -> f64 {
    // SAFETY: getrusage fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn peak_rss_mib() -> f64 {
    // SAFETY: as above.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_maxrss as f64 / 1024.0
}

pub(crate) fn pattern() -> Vec<u8> {
    let mut p = vec![0u8; PATTERN];
    rand::rngs::StdRng::seed_from_u64(1).fill_bytes(&mut p);
    p
}

/// The chunk at `offset` of the benchmark file (the pattern repeated).
fn chunk_at(pattern: &[u8], offset: u64, len: usize) -> &[u8] {
    let start = (offset as usize) % pattern.len();
    &pattern[start..start + len]
}

/// Whether leaf files are preallocated (set once from the command line).
pub(crate) static PREALLOCATE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(true);

pub(crate) fn make_leaves(dir: &Path, n: usize, size: u64) -> Result<Vec<PathBuf>, String> {
    use std::os::unix::fs::FileExt;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let preallocate = PREALLOCATE.load(std::sync::atomic::Ordering::Relaxed);
    (0..n)
        .map(|i| {
            let p = dir.join(format!("d{i}"));
            let f = std::fs::File::create(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            f.set_len(size).map_err(|e| e.to_string())?;
            if preallocate {
                // Written once with zeros, not only fallocated: on a virtual machine whose
                // host backs guest memory lazily, the first touch of a page costs a host
                // fault (here a fallocated tmpfs file is first written at 0.8 GB/s, then
                // at 2.7 GB/s), a cost a disk that exists does not have.
                let zeros = vec![0u8; 1 << 20];
                let mut at = 0u64;
                while at < size {
                    let n = (size - at).min(zeros.len() as u64) as usize;
                    f.write_all_at(&zeros[..n], at)
                        .map_err(|e| format!("{}: {e} (use --sparse)", p.display()))?;
                    at += n as u64;
                }
            }
            Ok(p)
        })
        .collect()
}

/// One measurement: a file of `bytes` bytes (the pattern repeated) written, then read back,
/// on a pool of `layout`, its data blocks checksummed with `checksum`.
struct Case<'a> {
    layout: &'a str,
    checksum: &'a str,
    failmode: &'a str,
    bytes: u64,
    pattern: &'a [u8],
}

impl Case<'_> {
    /// What `engine` measured: the file written in `write`, `read_bytes` of it read in `read`.
    fn result(&self, engine: &str, write: Timing, read_bytes: u64, read: Timing) -> IoResult {
        IoResult {
            engine: engine.into(),
            layout: self.layout.into(),
            checksum: self.checksum.into(),
            failmode: if engine == "cairn" {
                self.failmode
            } else {
                "wait"
            }
            .into(),
            bytes: self.bytes,
            write_mbs: self.bytes as f64 / 1e6 / write.secs,
            read_mbs: read_bytes as f64 / 1e6 / read.secs,
            write_cpu_secs: write.cpu_secs,
            read_cpu_secs: read.cpu_secs,
            peak_rss_mib: peak_rss_mib(),
        }
    }
}

/// Wall-clock and CPU seconds (of this process) of one timed phase.
struct Timing {
    secs: f64,
    cpu_secs: f64,
}

/// Runs `phase`; returns what it returned and the time it took.
fn timed<T>(phase: impl FnOnce() -> Result<T, String>) -> Result<(T, Timing), String> {
    let (t0, c0) = (Instant::now(), cpu_secs());
    let out = phase()?;
    let timing = Timing {
        secs: t0.elapsed().as_secs_f64(),
        cpu_secs: cpu_secs() - c0,
    };
    Ok((out, timing))
}

/// Creates the leaf files of `layout` in `dir`, sized for a file of `bytes` bytes (by the
/// layout's data fraction, with a quarter and 256 MiB to spare), and returns the pool's
/// tokens (`zpool create` style) naming them.
fn make_layout(dir: &Path, layout: &str, bytes: u64) -> Result<Vec<String>, String> {
    let (template, n, fraction) = layout_tokens(layout)?;
    let leaf_size = ((bytes as f64 / fraction / n as f64) * 1.25) as u64 + (256 << 20);
    let leaves = make_leaves(dir, n, leaf_size)?;
    Ok(template
        .iter()
        .map(
            |t| match t.strip_prefix('d').and_then(|i| i.parse::<usize>().ok()) {
                Some(i) => leaves[i].display().to_string(),
                None => t.clone(),
            },
        )
        .collect())
}

/// An error as the text this benchmark reports.
fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// cairn on `case`: the file written and synced, the pool closed and opened again (nothing
/// cached), the file read back. Removes `dir` afterwards.
fn bench_cairn(dir: &Path, case: &Case) -> Result<IoResult, String> {
    let tokens = make_layout(dir, case.layout, case.bytes)?;
    let home = Home::at(dir.join("home"));
    let store = create_bench_store(&home, &tokens, case)?;
    let file = store.resolve("bench/file").map_err(text)?;
    let ((), write) = timed(|| write_to_store(&store, &file, case))?;
    let pool = store.close().map_err(text)?;
    drop(pool);

    let store = Store::open(Pool::open(&home, "bench").map_err(text)?).map_err(text)?;
    let file = store.resolve("bench/file").map_err(text)?;
    let ((), read) = timed(|| read_from_store(&store, &file, case))?;
    drop(store);
    let _ = std::fs::remove_dir_all(dir);
    Ok(case.result("cairn", write, case.bytes, read))
}

/// The pool `bench` over `tokens` with the case's failmode (resumable, as in the service),
/// its root file system lz4-compressed and checksummed with the case's checksum, holding
/// the empty file `bench/file`.
fn create_bench_store(home: &Home, tokens: &[String], case: &Case) -> Result<Store, String> {
    let pool = Pool::create(home, "bench", tokens, CreateOptions::default())
        .map_err(text)?
        .pool
        .ok_or("dry run")?;
    pool.set_resumable(true);
    pool.set_property("failmode", case.failmode).map_err(text)?;
    let store = Store::open(pool).map_err(text)?;
    store
        .set_property("bench", "compression", "lz4")
        .map_err(text)?;
    store
        .set_property("bench", "checksum", case.checksum)
        .map_err(text)?;
    store.create_file("bench/file", true).map_err(text)?;
    Ok(store)
}

/// Writes the case's file into `file`, a chunk per call, and syncs.
fn write_to_store(store: &Store, file: &Resolved, case: &Case) -> Result<(), String> {
    let mut off = 0u64;
    while off < case.bytes {
        let len = CHUNK.min((case.bytes - off) as usize);
        store
            .write(file, off, chunk_at(case.pattern, off, len))
            .map_err(text)?;
        off += len as u64;
    }
    store.sync().map_err(text)?;
    Ok(())
}

/// Reads the case's file back from `file`, a chunk per call; fails if it ends early or if
/// a spot-checked chunk is wrong.
fn read_from_store(store: &Store, file: &Resolved, case: &Case) -> Result<(), String> {
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    let mut i = 0u64;
    while off < case.bytes {
        let n = store.read(file, off, &mut buf).map_err(text)?;
        if n == 0 {
            return Err(format!("file ended early at {off}"));
        }
        // Spot-check the contents (every 64th chunk) so a fast wrong answer cannot pass.
        if i.is_multiple_of(64) && buf[..n] != *chunk_at(case.pattern, off, n) {
            return Err(format!("read back wrong data at offset {off}"));
        }
        off += n as u64;
        i += 1;
    }
    Ok(())
}

/// A zfs-fuse daemon for the duration of the benchmark.
pub(crate) struct ZfsFuse {
    daemon: Child,
}

impl ZfsFuse {
    pub(crate) fn start() -> Result<ZfsFuse, String> {
        let daemon = Command::new("zfs-fuse")
            .args(["--no-daemon", "--no-kstat-mount"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start zfs-fuse: {e}"))?;
        let z = ZfsFuse { daemon };
        for _ in 0..100 {
            if Command::new("zpool")
                .arg("list")
                .output()
                .is_ok_and(|o| o.status.success())
            {
                return Ok(z);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err("zfs-fuse did not come up within 10 s".into())
    }
}

impl Drop for ZfsFuse {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

pub(crate) fn run_cmd(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// zfs-fuse on `case`, through its mount: the file written and synced, the pool exported
/// and imported (which drops zfs-fuse's ARC), the file read back. Destroys the pool and
/// removes `dir` afterwards.
fn bench_zfs_fuse(dir: &Path, case: &Case) -> Result<IoResult, String> {
    let tokens = make_layout(dir, case.layout, case.bytes)?;
    let mnt = dir.join("mnt");
    let _daemon = ZfsFuse::start()?;
    let name = zfs_pool_name(case.layout);
    let name = name.as_str();
    let mut args: Vec<&str> = vec!["create", "-f", "-m", mnt.to_str().ok_or("path")?, name];
    args.extend(tokens.iter().map(String::as_str));
    run_cmd("zpool", &args)?;
    let result = (|| {
        set_zfs_properties(name, case.checksum)?;
        let path = mnt.join("file");
        let ((), write) = timed(|| write_to_file(&path, case))?;
        // Export/import drops zfs-fuse's ARC so the read comes from the leaves.
        run_cmd("zpool", &["export", name])?;
        run_cmd(
            "zpool",
            &["import", "-d", dir.to_str().ok_or("path")?, name],
        )?;
        let mut f = std::fs::File::open(&path).map_err(|e| e.to_string())?;
        let (read_bytes, read) = timed(|| read_to_end(&mut f, case.bytes))?;
        // zfs-fuse works in its daemon: this process's CPU time is only the client side.
        Ok::<_, String>(case.result("zfs-fuse", write, read_bytes, read))
    })();
    if let Err(e) = run_cmd("zpool", &["destroy", "-f", name]) {
        eprintln!("zfs-fuse: {e}");
    }
    let _ = std::fs::remove_dir_all(dir);
    result
}

/// A pool name of this run and layout: zfs-fuse remembers pools of earlier (interrupted)
/// runs, and one whose destroy did not finish.
fn zfs_pool_name(layout: &str) -> String {
    format!(
        "cairnbench{}{}",
        std::process::id(),
        layout.replace(|c: char| !c.is_ascii_alphanumeric(), "")
    )
}

/// lz4 (or zfs-fuse's default compression if it has no lz4), and `checksum` unless it is
/// the default.
fn set_zfs_properties(name: &str, checksum: &str) -> Result<(), String> {
    run_cmd("zfs", &["set", "compression=lz4", name])
        .or_else(|_| run_cmd("zfs", &["set", "compression=on", name]))?;
    if checksum != "fletcher4" {
        run_cmd("zfs", &["set", &format!("checksum={checksum}"), name])?;
    }
    Ok(())
}

/// Creates the file at `path` and writes the case's file into it, a chunk per call, and
/// syncs it.
fn write_to_file(path: &Path, case: &Case) -> Result<(), String> {
    let mut f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut off = 0u64;
    while off < case.bytes {
        let len = CHUNK.min((case.bytes - off) as usize);
        f.write_all(chunk_at(case.pattern, off, len))
            .map_err(|e| e.to_string())?;
        off += len as u64;
    }
    f.sync_all().map_err(|e| e.to_string())
}

/// Reads `f` a chunk per call until its end or `bytes` bytes; returns the bytes read.
fn read_to_end(f: &mut std::fs::File, bytes: u64) -> Result<u64, String> {
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    while off < bytes {
        let n = f.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        off += n as u64;
    }
    Ok(off)
}

pub(crate) fn zfs_fuse_installed() -> bool {
    Command::new("zfs-fuse").arg("--help").output().is_ok()
}

/// `cairn bench io`: each layout with cairn, then with zfs-fuse if installed (and not
/// skipped); prints the table (or JSON).
pub fn run(a: &IoBenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let bytes = parse_size(&a.size)?;
    PREALLOCATE.store(!a.sparse, std::sync::atomic::Ordering::Relaxed);
    let pattern = pattern();
    let base = a.dir.join(format!("cairn-bench-io-{}", std::process::id()));
    let mut results = Vec::new();
    let mut ratios = Vec::new();
    for layout in &a.layouts {
        if !a.json {
            eprintln!("cairn: {layout}, {} MiB …", bytes >> 20);
        }
        let case = Case {
            layout,
            checksum: &a.checksum,
            failmode: &a.failmode,
            bytes,
            pattern: &pattern,
        };
        let ours = bench_cairn(&base.join(format!("cairn-{layout}")), &case)?;
        results.push(ours.clone());
        if !a.no_zfs_fuse && zfs_fuse_installed() {
            if let Some(z) = compare_with_zfs_fuse(a, &base, &case) {
                ratios.push((
                    layout.clone(),
                    ours.write_mbs / z.write_mbs,
                    ours.read_mbs / z.read_mbs,
                ));
                results.push(z);
            }
        } else if !a.no_zfs_fuse {
            eprintln!("zfs-fuse is not installed (Debian package zfs-fuse): no comparison");
        }
    }
    let _ = std::fs::remove_dir_all(&base);
    let report = Report {
        machine: machine(),
        dirty_max_mib: StoreConfig::default().dirty_max >> 20,
        leaves_preallocated: !a.sparse,
        results,
        ratios_vs_zfs_fuse: ratios,
    };
    if emit_json(&report, a.json_out.as_deref(), a.json)? {
        return Ok(());
    }
    print_report(&report, a.sparse);
    Ok(())
}

/// zfs-fuse on the layout of `case` (with the checksum closest to cairn's), in a folder of
/// `base`; None (said on stderr) if it failed.
fn compare_with_zfs_fuse(a: &IoBenchArgs, base: &Path, case: &Case) -> Option<IoResult> {
    let layout = case.layout;
    if !a.json {
        eprintln!("zfs-fuse: {layout} …");
    }
    // zfs-fuse's default (checksum=on) is fletcher4; it has no blake3.
    let zfs_checksum = if a.checksum == "sha256" {
        "sha256"
    } else {
        "fletcher4"
    };
    let zfs_case = Case {
        checksum: zfs_checksum,
        ..*case
    };
    match bench_zfs_fuse(&base.join(format!("zfs-{layout}")), &zfs_case) {
        Ok(z) => Some(z),
        Err(e) => {
            eprintln!("zfs-fuse comparison skipped for {layout}: {e}");
            None
        }
    }
}

/// The table: a line per result, then cairn's speed over zfs-fuse's per layout.
fn print_report(report: &Report, sparse: bool) {
    println!(
        "{}  (dirty cap {} MiB, leaf files {})",
        report.machine,
        report.dirty_max_mib,
        if sparse {
            "sparse"
        } else {
            "written once with zeros"
        }
    );
    println!(
        "{:<9} {:<10} {:<9} {:<8} {:>8} {:>10} {:>10} {:>9} {:>9} {:>9}",
        "engine",
        "layout",
        "checksum",
        "failmode",
        "MiB",
        "write MB/s",
        "read MB/s",
        "write CPU",
        "read CPU",
        "peak RSS"
    );
    for r in &report.results {
        println!(
            "{:<9} {:<10} {:<9} {:<8} {:>8} {:>10.0} {:>10.0} {:>8.1}s {:>8.1}s {:>6.0}MiB",
            r.engine,
            r.layout,
            r.checksum,
            r.failmode,
            r.bytes >> 20,
            r.write_mbs,
            r.read_mbs,
            r.write_cpu_secs,
            r.read_cpu_secs,
            r.peak_rss_mib
        );
    }
    for (layout, w, r) in &report.ratios_vs_zfs_fuse {
        println!("cairn / zfs-fuse on {layout}: write {w:.1}x, read {r:.1}x");
    }
}

pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    format!(
        "{cpu}, {} cores",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    )
}

/// Writes `report` as JSON to `json_out` (if given) and, with `json`, prints it; returns
/// whether it was printed (the caller then prints no table).
pub(crate) fn emit_json<T: serde::Serialize>(
    report: &T,
    json_out: Option<&std::path::Path>,
    json: bool,
) -> Result<bool, Box<dyn std::error::Error>> {
    let text = serde_json::to_string_pretty(report)?;
    if let Some(p) = json_out {
        std::fs::write(p, &text)?;
    }
    if json {
        println!("{text}");
    }
    Ok(json)
}
