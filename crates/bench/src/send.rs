//! `cairn bench send`: how fast `cairn send` streams a snapshot, how fast `receive` takes
//! it back, and how little an incremental reads. Issue "Restore points": a full send ≥ 1
//! GB/s on tmpfs leaves; an incremental of 1 % changed data reads ≤ 2 % of the dataset.
//!
//! ```text
//!  raidz1 of 3 leaf files on tmpfs; a dataset of SIZE bytes of incompressible data in
//!  files of 256 MiB (128 KiB records)                        → @a
//!  rewrite CHANGED % of the records, at random              → @b
//!  each step on a freshly imported pool (no cached blocks):
//!    send @a          → GB/s of file data, bytes read from the leaves (to /dev/null)
//!    receive it       → GB/s into a new dataset of the same pool (synced), from memory
//!    send -i @a @b    → seconds, bytes read from the leaves / SIZE
//! ```

use std::path::{Path, PathBuf};
use std::time::Instant;

use cairn_objset::receive::ReceiveOptions;
use cairn_objset::send::SendOptions;
use cairn_objset::{DatasetKind, Store};
use cairn_pool::{CreateOptions, Home, Pool};
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::io::{emit_json, machine, make_leaves, parse_size, pattern};

const MIB: u64 = 1 << 20;
const FILE: u64 = 256 * MIB;
const RECORD: u64 = 128 << 10;
const POOL: &str = "sendbench";

#[derive(clap::Args, Debug, Clone)]
pub struct SendBenchArgs {
    /// Dataset size (K/M/G suffixes).
    #[arg(long, default_value = "2G")]
    pub size: String,
    /// Percent of the records rewritten between the two snapshots.
    #[arg(long, default_value_t = 1.0)]
    pub changed_pct: f64,
    /// Folder for the leaf files (tmpfs, to measure the engine rather than a disk).
    #[arg(long, default_value = "/dev/shm/cairn-sendbench")]
    pub dir: PathBuf,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON to this file.
    #[arg(long)]
    pub json_out: Option<PathBuf>,
}

/// One timed stream operation.
#[derive(Clone, Debug, Serialize)]
pub struct Timed {
    pub secs: f64,
    /// File (and volume) bytes the stream carried.
    pub data_bytes: u64,
    pub stream_bytes: u64,
    /// Bytes read from the leaves meanwhile (parity included).
    pub leaf_read_bytes: u64,
    /// data_bytes / secs.
    pub gb_per_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SendReport {
    pub machine: String,
    pub layout: String,
    pub dataset_bytes: u64,
    pub changed_pct: f64,
    pub write_secs: f64,
    pub full_send: Timed,
    pub full_receive: Timed,
    pub incremental_send: Timed,
    /// incremental_send.leaf_read_bytes / dataset_bytes, in percent.
    pub incremental_read_pct: f64,
}

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

fn open(home: &Home) -> Result<Store, String> {
    Store::open(Pool::open(home, POOL).map_err(e)?).map_err(e)
}

fn dev_null() -> Result<std::io::BufWriter<std::fs::File>, String> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .map_err(e)?;
    Ok(std::io::BufWriter::with_capacity(1 << 20, f))
}

fn leaf_reads(store: &Store) -> u64 {
    store
        .pool()
        .io_snapshot()
        .tops
        .iter()
        .map(|t| t.total().read_bytes)
        .sum()
}

/// Runs `f` on a freshly opened store (nothing cached), timing it and counting leaf reads.
fn timed(
    home: &Home,
    f: impl FnOnce(&Store) -> Result<cairn_objset::stream::StreamStats, String>,
) -> Result<Timed, String> {
    let store = open(home)?;
    let before = leaf_reads(&store);
    let t = Instant::now();
    let stats = f(&store)?;
    let secs = t.elapsed().as_secs_f64();
    let leaf_read_bytes = leaf_reads(&store) - before;
    store.close().map_err(e)?;
    Ok(Timed {
        secs,
        data_bytes: stats.data_bytes,
        stream_bytes: stats.stream_bytes,
        leaf_read_bytes,
        gb_per_s: stats.data_bytes as f64 / secs / 1e9,
    })
}

/// The dataset: `size` bytes of the random pattern in files of 256 MiB; returns seconds.
fn write_dataset(store: &Store, size: u64) -> Result<f64, String> {
    let pattern = pattern();
    let t = Instant::now();
    let mut at = 0u64;
    for i in 0..size.div_ceil(FILE) {
        let path = format!("{POOL}/fs/f{i}");
        store.create_file(&path, false).map_err(e)?;
        let r = store.resolve(&path).map_err(e)?;
        let len = FILE.min(size - at);
        let mut off = 0;
        while off < len {
            let n = MIB.min(len - off);
            let start = ((at + off) as usize * 7) % (pattern.len() - MIB as usize);
            store
                .write(&r, off, &pattern[start..start + n as usize])
                .map_err(e)?;
            off += n;
        }
        at += len;
    }
    store.sync().map_err(e)?;
    Ok(t.elapsed().as_secs_f64())
}

/// Rewrites `pct` % of the dataset's records at random places.
fn change(store: &Store, size: u64, pct: f64) -> Result<(), String> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let records = size / RECORD;
    let n = ((records as f64) * pct / 100.0).round() as u64;
    let mut data = vec![0u8; RECORD as usize];
    for _ in 0..n {
        let rec = rng.gen_range(0..records);
        let (file, off) = ((rec * RECORD) / FILE, (rec * RECORD) % FILE);
        rng.fill(&mut data[..]);
        let r = store.resolve(&format!("{POOL}/fs/f{file}")).map_err(e)?;
        store.write(&r, off, &data).map_err(e)?;
    }
    store.sync().map(|_| ()).map_err(e)
}

fn bench(dir: &Path, size: u64, pct: f64) -> Result<SendReport, String> {
    // (What a run that failed left behind.)
    let _ = std::fs::remove_dir_all(dir);
    // (Room for the dataset, its 1 % change and the received copy, with raidz1 padding.)
    let leaves = make_leaves(dir, 3, size + size / 4 + 1024 * MIB)?;
    let mut tokens = vec!["raidz1".to_string()];
    tokens.extend(leaves.iter().map(|p| p.display().to_string()));
    let home = Home::at(dir.join("home"));
    Pool::create(&home, POOL, &tokens, CreateOptions::default()).map_err(e)?;
    let store = open(&home)?;
    let fs = format!("{POOL}/fs");
    store
        .dataset_create(
            &fs,
            DatasetKind::Filesystem,
            Default::default(),
            None,
            false,
        )
        .map_err(e)?;
    let write_secs = write_dataset(&store, size)?;
    store
        .snapshot_create(&[format!("{fs}@a")], false)
        .map_err(e)?;
    change(&store, size, pct)?;
    store
        .snapshot_create(&[format!("{fs}@b")], false)
        .map_err(e)?;
    store.close().map_err(e)?;

    // Sent to /dev/null through the buffer `cairn send` uses (what the sender costs, as
    // into a pipe whose reader keeps up), then again into memory, untimed, for the receive.
    let full_send = timed(&home, |s| {
        s.send(
            &format!("{fs}@a"),
            &SendOptions::default(),
            &mut dev_null()?,
        )
        .map_err(e)
    })?;
    let mut stream = Vec::new();
    open(&home)?
        .send(&format!("{fs}@a"), &SendOptions::default(), &mut stream)
        .map_err(e)?;
    let full_receive = timed(&home, |s| {
        let stats = s
            .receive(
                &format!("{POOL}/copy"),
                &ReceiveOptions::default(),
                &mut &stream[..],
            )
            .map_err(e)?;
        s.sync().map_err(e)?;
        Ok(stats)
    })?;
    drop(stream);
    let opts = SendOptions {
        from: Some("@a".into()),
        ..SendOptions::default()
    };
    let incremental_send = timed(&home, |s| {
        s.send(&format!("{fs}@b"), &opts, &mut dev_null()?)
            .map_err(e)
    })?;
    let _ = std::fs::remove_dir_all(dir);
    Ok(SendReport {
        machine: machine(),
        layout: "raidz1 of 3 files on tmpfs".into(),
        dataset_bytes: size,
        changed_pct: pct,
        write_secs,
        incremental_read_pct: incremental_send.leaf_read_bytes as f64 * 100.0 / size as f64,
        full_send,
        full_receive,
        incremental_send,
    })
}

pub fn run(a: &SendBenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let size = parse_size(&a.size)?;
    let report = bench(&a.dir, size, a.changed_pct);
    let _ = std::fs::remove_dir_all(&a.dir);
    let report = report?;
    if emit_json(&report, a.json_out.as_deref(), a.json)? {
        return Ok(());
    }
    println!("machine: {}", report.machine);
    println!(
        "{}, {} MiB of incompressible data, {}% of records rewritten between @a and @b",
        report.layout,
        size / MIB,
        a.changed_pct
    );
    println!(
        "{:<18} {:>8} {:>10} {:>13} {:>15}",
        "step", "secs", "GB/s", "stream MiB", "leaf reads MiB"
    );
    for (name, t) in [
        ("send @a (full)", &report.full_send),
        ("receive (full)", &report.full_receive),
        ("send -i @a @b", &report.incremental_send),
    ] {
        println!(
            "{:<18} {:>8.3} {:>10.2} {:>13.1} {:>15.1}",
            name,
            t.secs,
            t.gb_per_s,
            t.stream_bytes as f64 / MIB as f64,
            t.leaf_read_bytes as f64 / MIB as f64
        );
    }
    println!(
        "incremental read {:.2}% of the dataset",
        report.incremental_read_pct
    );
    Ok(())
}
