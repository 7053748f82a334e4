//! The RAID1 study rerun on two simulated WD 4 TB disks: the 29 fio jobs of "Comparison of
//! raid1 performance — md, gflash, gmirror, zfs mirror" (2015), every read policy, side by
//! side with the published figures (`data/raid1_*.csv`, copied from the study).
//!
//! ```text
//! job 9 "randread bs=4k qd=4" becomes
//!   Job { bs: 4096, Random { lo: 10 MiB, hi: 3 TiB, read_pct: 100, qd: 4 }, 60 s }
//! run once per policy over [Hdd(wd_re_4tb), Hdd(wd_re_4tb)], the same seed for every
//! policy (so two policies that decide alike give identical figures); compared with
//!   md 199 IOPS (policy md), gflash 212 (nearest), gmirror 192 (load), zfs 144 (least-queue).
//! job 24 (resync at 45 %): the same random reads at qd 32 while disk 1 is resynchronised
//! from 45 % of its capacity at 1 MB/s (md's speed_limit_min while other I/O runs); the
//! progress is the imitated implementation's (md's for round-robin and auto).
//! ```
//!
//! Lab choices (docs/bench/lab.md): the host dispatches at most 16 commands per disk (more
//! wait in the host's queue; fitted, see the doc), 0.1 ms between a completion and a client's next
//! request; the 1 TiB sequential writes are sampled in 4 equal slices of their range.

use serde::Serialize;

use crate::device::Device;
use crate::fio::{self, Job, JobResult, Pattern, Resync};
use crate::hdd::{Hdd, HddParams};
use crate::policy::Policy;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;
/// Host time between a completion and the client's next request (fio, system call, md).
const THINK_MS: f64 = 0.1;
/// Commands the host keeps dispatched per disk.
const HOST_QUEUE: usize = 16;
const FIO_CSV: &str = include_str!("../data/raid1_mirror_fio.csv");
const RESYNC_CSV: &str = include_str!("../data/raid1_resync_read.csv");

/// The four implementations of the study and the policy that imitates each.
pub const IMPLS: [(&str, Policy); 4] = [
    ("md", Policy::Md),
    ("gflash", Policy::Nearest),
    ("gmirror", Policy::Load),
    ("zfs", Policy::LeastQueue),
];

/// What kind of figure a job is compared on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    RandomWrite,
    SeqWrite,
    RandomRead,
    Mixed,
    Streams,
    Resync,
}

/// One job of the study.
#[derive(Clone, Debug)]
pub struct StudyJob {
    pub job: u32,
    pub kind: Kind,
    pub title: String,
    /// Runs whose results are added (the sequential writes are sampled in slices).
    pub runs: Vec<Job>,
}

/// One published figure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Published {
    pub job: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub part: Option<&'static str>,
    #[serde(rename = "impl")]
    pub implementation: String,
    pub iops: f64,
    pub kbs: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_pct: Option<f64>,
}

/// One lab figure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LabResult {
    pub job: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub part: Option<&'static str>,
    pub policy: Policy,
    pub iops: f64,
    pub kbs: f64,
}

/// The study's output.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub study: &'static str,
    pub seed: u64,
    pub runtime_s: f64,
    /// Measured on real devices (`--real`): wall-clock seconds, not virtual ones.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub real_devices: bool,
    pub results: Vec<LabResult>,
    pub published: Vec<Published>,
}

/// Parses the published figures (fio jobs 1–20 and resync jobs 21–29).
pub fn published() -> Vec<Published> {
    let mut out = Vec::new();
    for row in csv_rows(FIO_CSV, "job,") {
        let (job, part) = match row[0].as_str() {
            "16r" => (16, Some("r")),
            "16w" => (16, Some("w")),
            j => match j.parse() {
                Ok(n) => (n, None),
                Err(_) => continue,
            },
        };
        for (k, (name, _)) in IMPLS.iter().enumerate() {
            let kbs = row.get(2 + 2 * k).and_then(|x| x.parse().ok());
            let iops = row.get(3 + 2 * k).and_then(|x| x.parse().ok());
            if let (Some(kbs), Some(iops)) = (kbs, iops) {
                let implementation = name.to_string();
                out.push(Published {
                    job,
                    part,
                    implementation,
                    iops,
                    kbs,
                    sync_pct: None,
                });
            }
        }
    }
    for row in csv_rows(RESYNC_CSV, "job,") {
        let Ok(job) = row[0].parse::<u32>() else {
            continue;
        };
        for (k, (name, _)) in IMPLS.iter().enumerate() {
            let pct = row.get(1 + 2 * k).and_then(|x| x.parse().ok());
            let iops: Option<f64> = row.get(2 + 2 * k).and_then(|x| x.parse().ok());
            if let (Some(pct), Some(iops)) = (pct, iops) {
                out.push(Published {
                    job,
                    part: None,
                    implementation: name.to_string(),
                    iops,
                    kbs: iops * 4.0,
                    sync_pct: Some(pct),
                });
            }
        }
    }
    out
}

/// Splits CSV lines (no comments, no header) into fields; quoted fields may hold commas.
pub(crate) fn csv_rows(text: &str, header: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with(header))
    {
        let (mut fields, mut cur, mut quoted) = (Vec::new(), String::new(), false);
        for ch in line.chars() {
            match ch {
                '"' => quoted = !quoted,
                ',' if !quoted => fields.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        fields.push(cur);
        rows.push(fields);
    }
    rows
}

fn base(bs: u64, pattern: Pattern, runtime_ms: f64) -> Job {
    Job {
        bs,
        pattern,
        runtime_ms,
        think_ms: THINK_MS,
        host_queue: HOST_QUEUE,
        warmup_ms: 0.0,
        resync: None,
    }
}

fn random(qd: usize, read_pct: u32, bs: u64, lo: u64, runtime_ms: f64) -> Job {
    base(
        bs,
        Pattern::Random {
            lo,
            hi: 3 * TIB,
            read_pct,
            qd,
        },
        runtime_ms,
    )
}

fn streams(list: &[(u64, u64)], runtime_ms: f64) -> Job {
    let streams = list.iter().map(|&(o, s)| (o * GIB, s * GIB)).collect();
    base(
        128 << 10,
        Pattern::Sequential {
            streams,
            read: true,
        },
        runtime_ms,
    )
}

/// The 1 TiB sequential write at `offset`, sampled in 4 slices of `runtime_ms / 4`.
fn seq_write(offset: u64, runtime_ms: f64) -> Vec<Job> {
    (0..4u64)
        .map(|k| {
            let start = offset + k * (TIB / 4);
            let pattern = Pattern::Sequential {
                streams: vec![(start, TIB / 4)],
                read: false,
            };
            let mut job = base(128 << 10, pattern, runtime_ms / 4.0);
            // the first second fills the drives' write caches at interface speed
            job.warmup_ms = (runtime_ms / 16.0).min(1000.0);
            job
        })
        .collect()
}

/// The study's jobs with a virtual runtime of `runtime_s` seconds each.
pub fn jobs(runtime_s: f64) -> Vec<StudyJob> {
    let ms = runtime_s.max(0.001) * 1000.0;
    let mut v = Vec::new();
    let mut push = |job: u32, kind: Kind, title: &str, runs: Vec<Job>| {
        v.push(StudyJob {
            job,
            kind,
            title: title.to_string(),
            runs,
        });
    };
    push(
        1,
        Kind::RandomWrite,
        "randwrite 4k qd1 3t",
        vec![random(1, 0, 4096, 0, ms)],
    );
    for (j, off) in [(2, 0), (3, 1), (4, 2)] {
        push(
            j,
            Kind::SeqWrite,
            &format!("write 128k offset {off}t 1t"),
            seq_write(off * TIB, ms),
        );
    }
    push(
        5,
        Kind::RandomWrite,
        "randwrite 4k qd1 3t",
        vec![random(1, 0, 4096, 0, ms)],
    );
    for (j, qd) in (6..).zip([1, 2, 3, 4, 6, 8, 12, 16, 24, 32]) {
        let title = format!("randread 4k qd{qd} 3t");
        push(
            j,
            Kind::RandomRead,
            &title,
            vec![random(qd, 100, 4096, 10 * MIB, ms)],
        );
    }
    push(
        16,
        Kind::Mixed,
        "randrw 67/33 8k qd32",
        vec![random(32, 67, 8192, 0, ms)],
    );
    push(
        17,
        Kind::Streams,
        "read 128k 1 stream",
        vec![streams(&[(32, 8)], ms)],
    );
    push(
        18,
        Kind::Streams,
        "read 128k 2 streams",
        vec![streams(&[(16, 4), (3040, 4)], ms)],
    );
    let three = [(8, 2), (12, 2), (3030, 2)];
    push(
        19,
        Kind::Streams,
        "read 128k 3 streams",
        vec![streams(&three, ms)],
    );
    let four = [(2, 1), (6, 1), (3022, 1), (3026, 1)];
    push(
        20,
        Kind::Streams,
        "read 128k 4 streams",
        vec![streams(&four, ms)],
    );
    for j in 21..=29 {
        // the resync itself is set per policy by `runs_for`
        let title = format!("randread 4k qd32 during resync ({j})");
        push(j, Kind::Resync, &title, vec![random(32, 100, 4096, 0, ms)]);
    }
    v
}

/// Resync progress (%) of a resync job for `policy`: the imitated implementation's column
/// of the published table, md's for the policies that imitate none.
pub fn sync_pct(job: u32, policy: Policy) -> Option<f64> {
    let name = IMPLS
        .iter()
        .find(|(_, p)| *p == policy)
        .map_or("md", |(n, _)| *n);
    published()
        .into_iter()
        .find(|p| p.job == job && p.implementation == name)
        .and_then(|p| p.sync_pct)
}

/// The runs of `job` for `policy` (resync jobs start at the policy's progress).
fn runs_for(job: &StudyJob, policy: Policy) -> Vec<Job> {
    let mut runs = job.runs.clone();
    if job.kind != Kind::Resync {
        return runs;
    }
    let pct = sync_pct(job.job, policy).unwrap_or(100.0);
    let cap = HddParams::wd_re_4tb().capacity_bytes;
    for r in &mut runs {
        r.resync = (pct < 100.0).then(|| Resync {
            watermark: (cap as f64 * pct / 100.0) as u64 / 4096 * 4096,
            chunk: 64 << 10,
            rate_bytes_per_ms: 1000.0,
        });
    }
    runs
}

/// Runs one study job under one policy.
pub fn run_job(job: &StudyJob, policy: Policy, seed: u64) -> JobResult {
    let parts: Vec<JobResult> = runs_for(job, policy)
        .iter()
        .enumerate()
        .map(|(k, j)| {
            let disks: Vec<Box<dyn Device>> = (0..2)
                .map(|_| Box::new(Hdd::new(HddParams::wd_re_4tb())) as Box<dyn Device>)
                .collect();
            let s = seed ^ (u64::from(job.job) << 32) ^ k as u64;
            fio::run(disks, policy, j, s)
        })
        .collect();
    JobResult::combine(&parts)
}

/// Runs the study: `policies` on every job (all jobs when `only` is empty).
pub fn run(seed: u64, runtime_s: f64, policies: &[Policy], only: &[u32]) -> Report {
    let mut results = Vec::new();
    for job in jobs(runtime_s)
        .iter()
        .filter(|j| only.is_empty() || only.contains(&j.job))
    {
        for &p in policies {
            push_result(&mut results, job, p, &run_job(job, p, seed));
        }
    }
    Report::new(seed, runtime_s, results)
}

/// Adds what `job` did under `policy` to `results` (a mixed job as a read and a write row).
pub fn push_result(results: &mut Vec<LabResult>, job: &StudyJob, policy: Policy, r: &JobResult) {
    let mut row = |part, iops, kbs| {
        results.push(LabResult {
            job: job.job,
            part,
            policy,
            iops,
            kbs,
        });
    };
    if job.kind == Kind::Mixed {
        row(Some("r"), r.read_iops(), r.read_kbs());
        row(Some("w"), r.write_iops(), r.write_kbs());
    } else {
        row(None, r.iops(), r.kbs());
    }
}

impl Report {
    /// The report of `results` beside the published figures (simulated disks).
    pub fn new(seed: u64, runtime_s: f64, results: Vec<LabResult>) -> Report {
        Report {
            study: "raid1",
            seed,
            runtime_s,
            real_devices: false,
            results,
            published: published(),
        }
    }

    /// A lab figure.
    pub fn lab(&self, job: u32, part: Option<&str>, policy: Policy) -> Option<&LabResult> {
        self.results
            .iter()
            .find(|r| r.job == job && r.part == part && r.policy == policy)
    }

    /// A published figure.
    pub fn paper(&self, job: u32, part: Option<&str>, implementation: &str) -> Option<&Published> {
        self.published
            .iter()
            .find(|p| p.job == job && p.part == part && p.implementation == implementation)
    }

    /// The side-by-side text table (IOPS; MB/s for sequential jobs).
    pub fn table(&self) -> String {
        let policies: Vec<Policy> = Policy::ALL
            .into_iter()
            .filter(|p| self.results.iter().any(|r| r.policy == *p))
            .collect();
        let mut out = String::from("job  unit  | published: md  gflash gmirror    zfs | ");
        out += if self.real_devices { "real:" } else { "lab:" };
        for p in &policies {
            out += &format!(" {:>11}", p.name());
        }
        out.push('\n');
        let mut keys: Vec<(u32, Option<&'static str>)> =
            self.results.iter().map(|r| (r.job, r.part)).collect();
        let mut seen = std::collections::HashSet::new();
        keys.retain(|k| seen.insert(*k));
        for (job, part) in keys {
            out += &self.table_row(job, part, &policies);
        }
        out
    }

    fn table_row(&self, job: u32, part: Option<&'static str>, policies: &[Policy]) -> String {
        let seq = matches!(job, 2..=4 | 17..=20);
        let fig = |iops: f64, kbs: f64| if seq { kbs * 1024.0 / 1e6 } else { iops };
        let label = format!("{job}{}", part.unwrap_or(""));
        let mut line = format!("{label:<4} {:<5} |", if seq { "MB/s" } else { "IOPS" });
        for (name, _) in IMPLS {
            match self.paper(job, part, name) {
                Some(p) => line += &format!(" {:>7.0}", fig(p.iops, p.kbs)),
                None => line += "       -",
            }
        }
        line += " |     ";
        for &p in policies {
            match self.lab(job, part, p) {
                Some(r) => line += &format!(" {:>11.0}", fig(r.iops, r.kbs)),
                None => line += "           -",
            }
        }
        line.push('\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_figures_are_all_parsed() {
        let p = published();
        // 21 fio rows (1–15, 16r, 16w, 17–20) and 9 resync rows, 4 implementations each
        assert_eq!(p.len(), (21 + 9) * 4);
        let md6 = p
            .iter()
            .find(|x| x.job == 6 && x.implementation == "md")
            .map(|x| x.iops);
        assert_eq!(md6, Some(87.0));
        let g29 = p
            .iter()
            .find(|x| x.job == 29 && x.implementation == "gflash");
        assert_eq!(g29.and_then(|x| x.sync_pct), Some(100.0));
        assert_eq!(jobs(1.0).len(), 29);
    }

    #[test]
    fn worked_example_of_the_module_comment() {
        let j9 = &jobs(60.0)[8];
        assert_eq!(j9.job, 9);
        let want = Pattern::Random {
            lo: 10 * MIB,
            hi: 3 * TIB,
            read_pct: 100,
            qd: 4,
        };
        assert_eq!((j9.runs[0].bs, &j9.runs[0].pattern), (4096, &want));
        assert_eq!(j9.runs[0].runtime_ms, 60_000.0);
        let p = published();
        let iops = |name: &str| p.iter().find(|x| x.job == 9 && x.implementation == name);
        assert_eq!(iops("gflash").map(|x| x.iops), Some(212.0));
        assert_eq!(sync_pct(24, Policy::Md), Some(45.0));
        assert_eq!(sync_pct(24, Policy::Auto), Some(45.0));
        assert_eq!(sync_pct(29, Policy::Load), Some(95.0));
        let r = runs_for(&jobs(1.0)[23], Policy::Md);
        let w = r[0]
            .resync
            .map(|x| x.watermark as f64 / HddParams::wd_re_4tb().capacity_bytes as f64);
        assert!(w.is_some_and(|w| (w - 0.45).abs() < 1e-3));
    }
}
