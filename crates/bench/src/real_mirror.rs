//! `cairn bench lab raid1 --real DEV0 DEV1 --yes`: the RAID1 study's fio jobs on a real
//! two-way mirror, once per read policy.
//!
//! ```text
//! per policy:  create mirror DEV0 DEV1 (readpolicy=P) ─ file of SIZE bytes, 16 KiB records,
//!              written 1 MiB a call and synced ─ pool reopened (cold caches) ─ the file's
//!              block map read (indirect blocks in memory) ─ jobs, each:
//!
//!   client 0 ─ read/write ─ read/write ─ …   (a thread per fio client: qd clients for a
//!   client 1 ─ read/write ─ …                 random job, one per stream; each keeps one
//!   …                                         request in flight, as fio's psync does)
//!   ├──────────── runtime (wall clock) ────────────┤ + the closing sync of any writes
//! ```
//!
//! The resync jobs (21–29) come last: side 1 is detached and attached again, and before
//! each the pool's own resilver copies until the job's share of the file is on side 1, then
//! pauses while the job reads (policies that read from a resyncing side use what it holds).
//!
//! The study's offsets are on a 4 TB disk; here they are scaled onto the file (`scale`:
//! a random job over [10 MiB, 3 TiB) reads over the same fraction of the file, a stream at
//! 3,040 GiB starts at the same fraction of it and runs to the end of the file, then starts
//! over). Writes go through the pool's transaction groups, so a job with writes ends with a
//! sync, and its time counts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cairn_lab::fio::{Job, JobResult, Pattern};
use cairn_lab::raid1::{self, Kind, Report, StudyJob};
use cairn_lab::Policy;
use cairn_objset::resilver::{ResilverEnd, ResilverOptions, ResilverProgress};
use cairn_objset::scrub::ScrubControl;
use cairn_objset::{Resolved, Store};
use cairn_pool::{Home, Pool};
use rand::{Rng, SeedableRng};

use crate::real_dd::{create, drop_page_cache, in_scratch_pool, pattern, text, POOL};

/// The mirror's file.
const FILE: &str = "cairnlab/raid1";
/// The study's disks: the jobs' offsets are fractions of this.
pub const STUDY_DISK_BYTES: u64 = 4_000_787_030_016;

/// What a fio client does: random offsets in a byte range, or one sequential stream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Client {
    Random { lo: u64, hi: u64 },
    Stream { offset: u64, len: u64 },
}

/// One job on the real mirror (offsets already scaled onto the file).
#[derive(Clone, Debug, PartialEq)]
pub struct RealJob {
    pub bs: u64,
    /// Percent of requests that read (sequential jobs: 100 or 0).
    pub read_pct: u32,
    pub clients: Vec<Client>,
    pub runtime: Duration,
}

/// What one job did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RealJobResult {
    pub read_ios: u64,
    pub write_ios: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub elapsed_s: f64,
}

/// A job read while side 1 resyncs: `pct` % of the file already copied to it.
#[derive(Clone, Debug, PartialEq)]
pub struct ResyncJob {
    pub job: RealJob,
    pub pct: f64,
}

/// Makes the mirror over `devices` with `readpolicy`, fills a file of `size` bytes, and
/// runs `jobs` on it in turn, then `resync` (`run_resync`); the pool is destroyed after.
/// `scratch` holds the pool's state (made, and removed after). Results in that order.
pub fn run(
    scratch: &std::path::Path,
    devices: &[String],
    readpolicy: &str,
    size: u64,
    jobs: &[RealJob],
    resync: &[ResyncJob],
) -> Result<Vec<RealJobResult>, String> {
    in_scratch_pool(scratch, |home| {
        run_in(home, devices, readpolicy, size, jobs, resync)
    })
}

fn run_in(
    home: &Home,
    devices: &[String],
    readpolicy: &str,
    size: u64,
    jobs: &[RealJob],
    resync: &[ResyncJob],
) -> Result<Vec<RealJobResult>, String> {
    let mut tokens = vec!["mirror".to_string()];
    tokens.extend(devices.iter().cloned());
    create(home, &tokens, 12)?;
    let pool = Pool::open(home, POOL).map_err(text)?;
    pool.set_property("readpolicy", readpolicy).map_err(text)?;
    drop(pool);
    fill(home, size)?;
    drop_page_cache();
    let store = Store::open(Pool::open(home, POOL).map_err(text)?).map_err(text)?;
    let file = store.resolve(FILE).map_err(text)?;
    load_block_map(&store, &file, size)?;
    let mut results = Vec::new();
    for (k, job) in jobs.iter().enumerate() {
        results.push(run_job(&store, &file, job, k as u64)?);
    }
    if !resync.is_empty() {
        results.extend(run_resync(
            &store,
            &file,
            devices,
            size,
            resync,
            jobs.len(),
        )?);
    }
    store.close().map_err(text)?;
    Ok(results)
}

/// The resync jobs: side 1 is detached and attached again (stale whole), and before each
/// job the pool's resilver copies until `pct` % of the file is on side 1, then pauses while
/// the job reads (the study's md resynced at 1 MB/s while it read: a minute of that moves
/// the watermark by 0.002 % of its disk). Jobs in increasing `pct`.
fn run_resync(
    store: &Store,
    file: &Resolved,
    devices: &[String],
    size: u64,
    jobs: &[ResyncJob],
    seed: usize,
) -> Result<Vec<RealJobResult>, String> {
    store.detach_in_use(&devices[1]).map_err(text)?;
    store
        .attach_in_use(&devices[0], &devices[1], true)
        .map_err(text)?;
    let mut results = Vec::new();
    // bytes on side 1 so far (each resumed resilver counts from 0); None once done
    let mut copied = Some(0);
    for (k, job) in jobs.iter().enumerate() {
        // at 100 % the resilver finishes (the pool's metadata is copied too)
        let target = match job.pct >= 100.0 {
            true => u64::MAX,
            false => (size as f64 * job.pct / 100.0) as u64,
        };
        if let Some(before) = copied.filter(|&c| c < target) {
            copied = resilver_until(store, target - before)?.map(|more| before + more);
        }
        match copied {
            Some(c) => eprintln!(
                "resync: {:.1} % of the file copied to side 1 (the study: {} %)",
                c as f64 * 100.0 / size.max(1) as f64,
                job.pct
            ),
            None => eprintln!("resync: done (the study: {} %)", job.pct),
        }
        results.push(run_job(store, file, &job.job, (seed + k) as u64)?);
    }
    Ok(results)
}

/// Runs (or resumes) the pool's resilver until this run has written `target` bytes to the
/// stale side (or it is done); it pauses there, keeping what it copied readable from that
/// side. Returns the bytes this run copied (small batches: it overshoots by at most one),
/// `None` once done.
fn resilver_until(store: &Store, target: u64) -> Result<Option<u64>, String> {
    let opts = ResilverOptions {
        checkpoint_every: Duration::from_millis(5),
        batch_bytes: RESYNC_BATCH_BYTES,
        ..ResilverOptions::default()
    };
    let mut copied = 0;
    let mut report = |p: &ResilverProgress| {
        copied = p.repaired_bytes;
        match p.repaired_bytes >= target {
            true => ScrubControl::Pause,
            false => ScrubControl::Continue,
        }
    };
    let (p, end) = store.resilver(opts, &mut report).map_err(text)?;
    Ok((end == ResilverEnd::Paused).then(|| copied.max(p.repaired_bytes)))
}

/// Bytes the resync jobs' resilver copies between checks of its progress.
const RESYNC_BATCH_BYTES: u64 = 4 << 20;

/// Writes the file whole (16 KiB records, the default volblocksize of ZFS and cairn
/// volumes) and syncs.
fn fill(home: &Home, size: u64) -> Result<(), String> {
    let store = Store::open(Pool::open(home, POOL).map_err(text)?).map_err(text)?;
    for (key, value) in [("compression", "off"), ("recordsize", "16K")] {
        store.set_property(POOL, key, value).map_err(text)?;
    }
    store.create_file(FILE, true).map_err(text)?;
    let file = store.resolve(FILE).map_err(text)?;
    let block = pattern(1 << 20);
    let mut off = 0;
    while off < size {
        let len = (block.len() as u64).min(size - off) as usize;
        store.write(&file, off, &block[..len]).map_err(text)?;
        off += len as u64;
    }
    store.close().map_err(text)?.save_record().map_err(text)
}

/// Reads the file's block map (its indirect blocks) into memory, as `allocation_map` does
/// for SEEK_DATA, so that a job's reads cost the data's positioning alone: the study
/// measured md, gmirror and gflash on raw disks, which have no metadata to look up, and a
/// cold map would add a seek to the pool's metadata for most reads.
fn load_block_map(store: &Store, file: &Resolved, size: u64) -> Result<(), String> {
    let mut offset = 0;
    while offset < size {
        let runs = store
            .allocation_map(file, offset, size - offset)
            .map_err(text)?;
        let covered: u64 = runs.iter().map(|&(bytes, _)| bytes).sum();
        if covered == 0 {
            break;
        }
        offset += covered;
    }
    Ok(())
}

/// Counters the clients add to.
#[derive(Default)]
struct Tally {
    read_ios: AtomicU64,
    write_ios: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
}

/// Runs one job: a thread per client until the runtime is up, then a sync if it wrote.
fn run_job(
    store: &Store,
    file: &Resolved,
    job: &RealJob,
    seed: u64,
) -> Result<RealJobResult, String> {
    let tally = Tally::default();
    let began = Instant::now();
    let deadline = began + job.runtime;
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = job
            .clients
            .iter()
            .enumerate()
            .map(|(c, client)| {
                let tally = &tally;
                s.spawn(move || {
                    let rng = rand::rngs::StdRng::seed_from_u64(seed << 16 | c as u64);
                    run_client(store, file, job, *client, rng, deadline, tally)
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a client panicked".into()))
                    .err()
            })
            .collect()
    });
    if let Some(e) = failures.into_iter().next() {
        return Err(e);
    }
    if tally.write_ios.load(Ordering::Relaxed) > 0 {
        store.sync().map_err(text)?;
    }
    Ok(RealJobResult {
        read_ios: tally.read_ios.into_inner(),
        write_ios: tally.write_ios.into_inner(),
        read_bytes: tally.read_bytes.into_inner(),
        write_bytes: tally.write_bytes.into_inner(),
        elapsed_s: began.elapsed().as_secs_f64(),
    })
}

/// One client: one request in flight until `deadline` (a stream that reaches its end
/// starts over).
fn run_client(
    store: &Store,
    file: &Resolved,
    job: &RealJob,
    client: Client,
    mut rng: rand::rngs::StdRng,
    deadline: Instant,
    tally: &Tally,
) -> Result<(), String> {
    let bs = job.bs;
    let data = pattern(bs);
    let mut buf = vec![0u8; bs as usize];
    let mut next = match client {
        Client::Stream { offset, .. } => offset,
        Client::Random { .. } => 0,
    };
    while Instant::now() < deadline {
        let offset = match client {
            Client::Random { lo, hi } => lo + rng.gen_range(0..((hi - lo) / bs).max(1)) * bs,
            Client::Stream { offset, len } => {
                if next + bs > offset + len {
                    next = offset; // a stream scaled onto the file starts over
                }
                next += bs;
                next - bs
            }
        };
        if rng.gen_range(0..100) < job.read_pct {
            let n = store.read(file, offset, &mut buf).map_err(text)?;
            tally.read_ios.fetch_add(1, Ordering::Relaxed);
            tally.read_bytes.fetch_add(n as u64, Ordering::Relaxed);
        } else {
            store.write(file, offset, &data).map_err(text)?;
            tally.write_ios.fetch_add(1, Ordering::Relaxed);
            tally.write_bytes.fetch_add(bs, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// The RAID1 study on a real mirror of the two `devices`: per policy its own pool and
/// file of `size` bytes, then the jobs (all when `only` is empty) of `runtime_s` wall
/// seconds each, the resync jobs (21–29) last, on a real resilver of side 1 held at each
/// job's progress (`run_resync`).
pub fn study(
    scratch: &std::path::Path,
    devices: &[String],
    size: u64,
    runtime_s: f64,
    policies: &[Policy],
    only: &[u32],
) -> Result<Report, String> {
    let (resyncs, jobs): (Vec<StudyJob>, Vec<StudyJob>) = raid1::jobs(runtime_s)
        .into_iter()
        .filter(|j| only.is_empty() || only.contains(&j.job))
        .partition(|j| j.kind == Kind::Resync);
    let runs: Vec<RealJob> = jobs
        .iter()
        .flat_map(|j| j.runs.iter().map(|r| real_job(r, size)))
        .collect();
    let mut results = Vec::new();
    for &policy in policies {
        let resync = resync_runs(&resyncs, policy, size);
        let done = run(scratch, devices, policy.name(), size, &runs, &resync)?;
        let mut done = done.into_iter();
        for job in jobs.iter().chain(&resyncs) {
            let parts: Vec<JobResult> =
                done.by_ref().take(job.runs.len()).map(lab_result).collect();
            let r = JobResult::combine(&parts);
            eprintln!(
                "{} job {}: {:.0} IOPS, {:.1} MB/s",
                policy.name(),
                job.job,
                r.iops(),
                r.mbs()
            );
            raid1::push_result(&mut results, job, policy, &r);
        }
    }
    let mut report = Report::new(0, runtime_s, results);
    report.real_devices = true;
    Ok(report)
}

/// The resync jobs' runs under `policy`, each at the progress the study measured for the
/// implementation the policy imitates (md's for the others), as the lab runs them.
fn resync_runs(resyncs: &[StudyJob], policy: Policy, size: u64) -> Vec<ResyncJob> {
    resyncs
        .iter()
        .flat_map(|j| {
            let pct = raid1::sync_pct(j.job, policy).unwrap_or(100.0);
            j.runs.iter().map(move |r| ResyncJob {
                job: real_job(r, size),
                pct,
            })
        })
        .collect()
}

/// A lab job with its offsets scaled from the study's 4 TB disk onto a file of `size`.
fn real_job(job: &Job, size: u64) -> RealJob {
    let bs = job.bs;
    let scale =
        |x: u64| (u128::from(x) * u128::from(size) / u128::from(STUDY_DISK_BYTES)) as u64 / bs * bs;
    let (read_pct, clients) = match &job.pattern {
        Pattern::Random {
            lo,
            hi,
            read_pct,
            qd,
        } => {
            let (lo, hi) = (scale(*lo), scale(*hi).max(scale(*lo) + bs));
            (*read_pct, vec![Client::Random { lo, hi }; *qd])
        }
        Pattern::Sequential { streams, read } => {
            let clients = streams
                .iter()
                .map(|&(offset, _)| {
                    // to the end of the file: a stream scaled down whole would be read
                    // again from the block cache within the runtime
                    let offset = scale(offset).min(size.saturating_sub(bs) / bs * bs);
                    let len = (size - offset).max(bs);
                    Client::Stream { offset, len }
                })
                .collect();
            (if *read { 100 } else { 0 }, clients)
        }
    };
    RealJob {
        bs,
        read_pct,
        clients,
        runtime: Duration::from_secs_f64(job.runtime_ms / 1000.0),
    }
}

fn lab_result(r: RealJobResult) -> JobResult {
    JobResult {
        read_ios: r.read_ios,
        write_ios: r.write_ios,
        read_bytes: r.read_bytes,
        write_bytes: r.write_bytes,
        elapsed_ms: r.elapsed_s * 1000.0,
        watermark: None,
    }
}
