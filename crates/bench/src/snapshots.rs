//! `cairn bench snapshot`: how long taking and destroying a snapshot takes as a dataset
//! grows, side by side with zfs-fuse's `zfs snapshot` / `zfs destroy` on the same kind of
//! leaves. Issue "Restore points": creation must stay flat (< 10 ms) whatever the dataset
//! size; a destroy must cost in proportion to the blocks it frees, not to the dataset.
//!
//! ```text
//!  per size S: a stripe of two sparse files; compression lz4; S bytes in files of 1 GiB
//!  whose 128 KiB records each hold 4 KiB of random bytes and zeros (so 64 GiB of
//!  logical data — 524,288 records, each a real block pointer — costs ~2 GiB of disk)
//!    s0..s4   five snapshots, one 4 KiB change before each        → create ms
//!    rewrite 1/8 of the files
//!    destroy s0..s3 (each frees nothing: s4 still holds it all)   → destroy ms, 0 freed
//!    destroy s4 (frees the rewritten eighth)                      → destroy ms, S/8 freed
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cairn_objset::{DatasetKind, Store};
use cairn_pool::{CreateOptions, Home, Pool};
use serde::Serialize;

use crate::io::{
    emit_json, machine, make_leaves, parse_size, pattern, run_cmd, zfs_fuse_installed, ZfsFuse,
    PREALLOCATE,
};

const GIB: u64 = 1 << 30;
const RECORD: usize = 128 << 10;
const RANDOM_PER_RECORD: usize = 4 << 10;
const SNAPSHOTS: usize = 5;

#[derive(clap::Args, Debug, Clone)]
pub struct SnapshotBenchArgs {
    /// Dataset sizes (logical bytes, K/M/G suffixes).
    #[arg(long, value_delimiter = ',', default_value = "1G,64G")]
    pub sizes: Vec<String>,
    /// Folder for the (sparse) leaf files.
    #[arg(long, default_value = "/var/tmp/cairn-snapbench")]
    pub dir: PathBuf,
    /// Skip the zfs-fuse comparison.
    #[arg(long)]
    pub no_zfs_fuse: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON to this file.
    #[arg(long)]
    pub json_out: Option<PathBuf>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Destroy {
    pub snapshot: String,
    pub freed_bytes: u64,
    pub ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SnapshotResult {
    pub engine: String,
    pub logical_bytes: u64,
    pub files: u64,
    pub write_secs: f64,
    pub create_ms: Vec<f64>,
    pub create_median_ms: f64,
    pub destroys: Vec<Destroy>,
}

/// One 1 MiB write: 8 records of 4 KiB random bytes (varying with `seed`) and zeros.
fn chunk(pattern: &[u8], seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; 8 * RECORD];
    for (i, rec) in out.chunks_mut(RECORD).enumerate() {
        let at = ((seed * 8 + i as u64) * RANDOM_PER_RECORD as u64) as usize
            % (pattern.len() - RANDOM_PER_RECORD);
        rec[..RANDOM_PER_RECORD].copy_from_slice(&pattern[at..at + RANDOM_PER_RECORD]);
    }
    out
}

/// Where `fill` sends each chunk: (offset, bytes).
type Sink<'a> = dyn FnMut(u64, &[u8]) -> Result<(), String> + 'a;

/// Writes file `i` (`bytes` long) through `write(offset, data)`.
fn fill(pattern: &[u8], i: u64, bytes: u64, write: &mut Sink<'_>) -> Result<(), String> {
    let mut off = 0u64;
    while off < bytes {
        let c = chunk(pattern, i * 1024 + off / (1 << 20));
        let n = (bytes - off).min(c.len() as u64) as usize;
        write(off, &c[..n])?;
        off += n as u64;
    }
    Ok(())
}

fn layout(size: u64) -> (u64, u64) {
    let files = size.div_ceil(GIB).max(1);
    (files, size / files)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

fn bench_cairn(dir: &Path, size: u64, pattern: &[u8]) -> Result<SnapshotResult, String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let leaves = make_leaves(dir, 2, size / 16 + 4 * GIB)?;
    let tokens: Vec<String> = leaves.iter().map(|p| p.display().to_string()).collect();
    let home = Home::at(dir.join("home"));
    let pool = Pool::create(&home, "snapbench", &tokens, CreateOptions::default())
        .map_err(|x| e(&x))?
        .pool
        .ok_or("dry run")?;
    let store = Store::open(pool).map_err(|x| e(&x))?;
    let (files, per_file) = layout(size);
    let fs = "snapbench/fs";
    store
        .dataset_create(fs, DatasetKind::Filesystem, Default::default(), None, false)
        .map_err(|x| e(&x))?;
    store
        .set_property(fs, "compression", "lz4")
        .map_err(|x| e(&x))?;
    let write_file = |i: u64| -> Result<(), String> {
        let path = format!("{fs}/f{i}");
        store.create_file(&path, true).map_err(|x| e(&x))?;
        let r = store.resolve(&path).map_err(|x| e(&x))?;
        fill(pattern, i, per_file, &mut |off, data| {
            store.write(&r, off, data).map_err(|x| e(&x))
        })
    };
    let t0 = Instant::now();
    for i in 0..files {
        write_file(i)?;
    }
    store.sync().map_err(|x| e(&x))?;
    let write_secs = t0.elapsed().as_secs_f64();
    let mut create_ms = Vec::new();
    for s in 0..SNAPSHOTS {
        let path = format!("{fs}/touch");
        store.create_file(&path, true).map_err(|x| e(&x))?;
        let r = store.resolve(&path).map_err(|x| e(&x))?;
        store.write(&r, 0, &[s as u8; 4096]).map_err(|x| e(&x))?;
        let t = Instant::now();
        store
            .snapshot_create(&[format!("{fs}@s{s}")], false)
            .map_err(|x| e(&x))?;
        create_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    for i in 0..files.div_ceil(8) {
        write_file(i)?;
    }
    store.sync().map_err(|x| e(&x))?;
    let mut destroys = Vec::new();
    for s in 0..SNAPSHOTS {
        let name = format!("{fs}@s{s}");
        let t = Instant::now();
        let freed_bytes = store.snapshot_destroy(&name).map_err(|x| e(&x))?;
        destroys.push(Destroy {
            snapshot: name,
            freed_bytes,
            ms: t.elapsed().as_secs_f64() * 1e3,
        });
    }
    drop(store);
    let _ = std::fs::remove_dir_all(dir);
    Ok(SnapshotResult {
        engine: "cairn".into(),
        logical_bytes: size,
        files,
        write_secs,
        create_median_ms: median(&create_ms),
        create_ms,
        destroys,
    })
}

/// Runs `zfs ARGS`, timed in ms (the command's start-up is part of it, as a user sees it).
fn timed_zfs(args: &[&str]) -> Result<f64, String> {
    let t = Instant::now();
    run_cmd("zfs", args)?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

fn bench_zfs_fuse(dir: &Path, size: u64, pattern: &[u8]) -> Result<SnapshotResult, String> {
    let leaves = make_leaves(dir, 2, size / 16 + 4 * GIB)?;
    let mnt = dir.join("mnt");
    let _daemon = ZfsFuse::start()?;
    let name = format!("cairnsnap{}", std::process::id());
    let mut args = vec![
        "create",
        "-f",
        "-m",
        mnt.to_str().ok_or("path")?,
        name.as_str(),
    ];
    let leaf_paths: Vec<String> = leaves.iter().map(|p| p.display().to_string()).collect();
    args.extend(leaf_paths.iter().map(String::as_str));
    run_cmd("zpool", &args)?;
    let result = zfs_fuse_steps(&name, &mnt, size, pattern);
    if let Err(e) = run_cmd("zpool", &["destroy", "-f", &name]) {
        eprintln!("zfs-fuse: {e}");
    }
    let _ = std::fs::remove_dir_all(dir);
    result
}

fn zfs_fuse_steps(
    name: &str,
    mnt: &Path,
    size: u64,
    pattern: &[u8],
) -> Result<SnapshotResult, String> {
    let fs = format!("{name}/fs");
    run_cmd("zfs", &["create", "-o", "compression=lz4", &fs])
        .or_else(|_| run_cmd("zfs", &["create", "-o", "compression=on", &fs]))?;
    let (files, per_file) = layout(size);
    let dir = mnt.join("fs");
    let write_file = |i: u64| -> Result<(), String> {
        let path = dir.join(format!("f{i}"));
        let mut f = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        fill(pattern, i, per_file, &mut |_, data| {
            f.write_all(data).map_err(|e| e.to_string())
        })?;
        f.sync_all().map_err(|e| e.to_string())
    };
    let t0 = Instant::now();
    for i in 0..files {
        write_file(i)?;
    }
    let write_secs = t0.elapsed().as_secs_f64();
    let mut create_ms = Vec::new();
    for s in 0..SNAPSHOTS {
        std::fs::write(dir.join("touch"), [s as u8; 4096]).map_err(|e| e.to_string())?;
        create_ms.push(timed_zfs(&["snapshot", &format!("{fs}@s{s}")])?);
    }
    for i in 0..files.div_ceil(8) {
        write_file(i)?;
    }
    let mut destroys = Vec::new();
    for s in 0..SNAPSHOTS {
        let snap = format!("{fs}@s{s}");
        let used = zfs_used(&snap)?;
        let ms = timed_zfs(&["destroy", &snap])?;
        destroys.push(Destroy {
            snapshot: snap,
            freed_bytes: used,
            ms,
        });
    }
    Ok(SnapshotResult {
        engine: "zfs-fuse".into(),
        logical_bytes: size,
        files,
        write_secs,
        create_median_ms: median(&create_ms),
        create_ms,
        destroys,
    })
}

/// A snapshot's `used` as zfs reports it (what its destroy frees).
fn zfs_used(snap: &str) -> Result<u64, String> {
    let out = std::process::Command::new("zfs")
        .args(["get", "-Hp", "-o", "value", "used", snap])
        .output()
        .map_err(|e| format!("zfs: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| {
            format!(
                "zfs get used {snap}: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

#[derive(Debug, Serialize)]
struct Report {
    machine: String,
    results: Vec<SnapshotResult>,
}

pub fn run(a: &SnapshotBenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    PREALLOCATE.store(false, std::sync::atomic::Ordering::Relaxed);
    let pattern = pattern();
    let peer = !a.no_zfs_fuse && zfs_fuse_installed();
    let mut results = Vec::new();
    for s in &a.sizes {
        let size = parse_size(s)?;
        eprintln!("cairn: {s} ...");
        results.push(bench_cairn(&a.dir.join("cairn"), size, &pattern)?);
        if peer {
            eprintln!("zfs-fuse: {s} ...");
            results.push(bench_zfs_fuse(&a.dir.join("zfs"), size, &pattern)?);
        }
    }
    let report = Report {
        machine: machine(),
        results,
    };
    if emit_json(&report, a.json_out.as_deref(), a.json)? {
        return Ok(());
    }
    print_table(&report);
    Ok(())
}

fn print_table(report: &Report) {
    println!("machine: {}", report.machine);
    println!(
        "{:<9} {:>9} {:>6} {:>9} {:>12} {:>14} {:>14}",
        "engine", "logical", "files", "write s", "create ms", "destroy 0 B", "destroy freed"
    );
    for r in &report.results {
        let empty = r
            .destroys
            .iter()
            .filter(|d| d.freed_bytes == 0)
            .map(|d| d.ms);
        let empty: Vec<f64> = empty.collect();
        let big = r.destroys.iter().max_by_key(|d| d.freed_bytes);
        println!(
            "{:<9} {:>8}G {:>6} {:>9.1} {:>12.2} {:>12.2}ms {:>8.2}ms/{}M",
            r.engine,
            r.logical_bytes / GIB,
            r.files,
            r.write_secs,
            r.create_median_ms,
            if empty.is_empty() {
                f64::NAN
            } else {
                median(&empty)
            },
            big.map_or(f64::NAN, |d| d.ms),
            big.map_or(0, |d| d.freed_bytes >> 20),
        );
    }
}
