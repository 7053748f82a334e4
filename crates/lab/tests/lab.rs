//! The simulator against its check values (hdd_model.md §6, within 10 %), the SSD model,
//! sector formats, the write cache, determinism, and the RAID1 study against the published
//! figures (docs/bench/lab.md lists which jobs are compared and why).

use std::sync::OnceLock;

use cairn_lab::fio::{self, Job, JobResult, Pattern};
use cairn_lab::raid1::{self, Report, IMPLS};
use cairn_lab::*;

const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;

fn hdds(n: usize, p: &HddParams) -> Vec<Box<dyn Device>> {
    (0..n)
        .map(|_| Box::new(Hdd::new(p.clone())) as Box<dyn Device>)
        .collect()
}

fn job(bs: u64, pattern: Pattern, secs: f64) -> Job {
    Job {
        bs,
        pattern,
        runtime_ms: secs * 1000.0,
        think_ms: 0.01,
        host_queue: 0,
        warmup_ms: 0.0,
        resync: None,
    }
}

fn randread(n: usize, policy: Policy, hi: u64, qd: usize) -> JobResult {
    let j = job(
        4096,
        Pattern::Random {
            lo: 0,
            hi,
            read_pct: 100,
            qd,
        },
        20.0,
    );
    fio::run(hdds(n, &HddParams::wd_re_4tb()), policy, &j, 7)
}

/// `x` within ±10 % of `target`.
fn within10(what: &str, x: f64, target: f64) {
    println!("{what}: {x:.1} (target {target})");
    assert!(
        (x - target).abs() <= 0.10 * target,
        "{what}: {x:.1} not within 10 % of {target}"
    );
}

// Targets: the middle of the doc's simulated range (its Monte-Carlo), which also lies within
// 10 % of the measured column.
#[test]
fn check_qd1_full_span_single_disk() {
    within10(
        "QD1 3 TiB",
        randread(1, Policy::Md, 3 * TIB, 1).iops(),
        90.5,
    );
}

#[test]
fn check_qd1_8gib_window() {
    within10(
        "QD1 8 GiB",
        randread(1, Policy::Md, 8 * GIB, 1).iops(),
        165.0,
    );
}

#[test]
fn check_qd32_8gib_window() {
    within10(
        "QD32 8 GiB",
        randread(1, Policy::Md, 8 * GIB, 32).iops(),
        438.0,
    );
}

#[test]
fn check_qd16_full_span_single_disk() {
    within10(
        "QD16 3 TiB",
        randread(1, Policy::Md, 3 * TIB, 16).iops(),
        168.5,
    );
}

#[test]
fn check_mirror_qd1_disk0_always_and_nearest_head() {
    within10(
        "mirror QD1 disk 0",
        randread(2, Policy::Md, 3 * TIB, 1).iops(),
        90.0,
    );
    within10(
        "mirror QD1 nearest",
        randread(2, Policy::Nearest, 3 * TIB, 1).iops(),
        106.0,
    );
}

#[test]
fn sequential_read_at_the_outer_edge_is_093_of_the_media_rate() {
    let j = job(
        128 << 10,
        Pattern::Sequential {
            streams: vec![(0, 2 * GIB)],
            read: true,
        },
        10.0,
    );
    let mbs = fio::run(hdds(1, &HddParams::wd_re_4tb()), Policy::Md, &j, 1).mbs();
    within10("sequential read outer edge MB/s", mbs, 0.93 * 188.7);
    within10("… against the measured WD4000FYYZ", mbs, 177.8);
}

#[test]
fn inner_zones_are_slower() {
    let p = HddParams::wd_re_4tb();
    let inner = p.capacity_bytes - 4 * GIB;
    let j = job(
        128 << 10,
        Pattern::Sequential {
            streams: vec![(inner, 2 * GIB)],
            read: true,
        },
        5.0,
    );
    let mbs = fio::run(hdds(1, &p), Policy::Md, &j, 1).mbs();
    within10("sequential read inner edge MB/s", mbs, 0.93 * 95.8);
}

#[test]
fn smaller_capacity_keeps_the_stroke_and_scales_the_rate() {
    let p = HddParams::wd_re_4tb().with_capacity(2_000_398_934_016);
    let j = job(
        128 << 10,
        Pattern::Sequential {
            streams: vec![(0, GIB)],
            read: true,
        },
        5.0,
    );
    let mbs = fio::run(hdds(1, &p), Policy::Md, &j, 1).mbs();
    assert!(
        mbs < 0.93 * 188.7 * 0.92 && mbs > 0.93 * 188.7 * 0.8,
        "2 TB outer rate {mbs}"
    );
    let rr = job(
        4096,
        Pattern::Random {
            lo: 0,
            hi: p.capacity_bytes,
            read_pct: 100,
            qd: 1,
        },
        10.0,
    );
    let iops = fio::run(hdds(1, &p), Policy::Md, &rr, 3).iops();
    within10("2 TB QD1 full span", iops, 85.0);
}

#[test]
fn rpm_changes_rotation() {
    let slow = HddParams::wd_re_4tb().with_rpm(5400.0);
    let j = job(
        4096,
        Pattern::Random {
            lo: 0,
            hi: 8 * GIB,
            read_pct: 100,
            qd: 1,
        },
        10.0,
    );
    let a = fio::run(hdds(1, &slow), Policy::Md, &j, 1).iops();
    let b = fio::run(hdds(1, &HddParams::wd_re_4tb()), Policy::Md, &j, 1).iops();
    assert!(a < 0.85 * b, "5400 rpm {a} vs 7200 rpm {b}");
}

#[test]
fn partial_physical_sector_writes_cost_a_revolution_on_512e() {
    let mut p = HddParams::wd_re_4tb().with_format(SectorFormat::E512);
    p.write_cache = false;
    let run = |bs: u64, p: &HddParams| {
        let pattern = Pattern::Random {
            lo: 0,
            hi: 3 * TIB,
            read_pct: 0,
            qd: 1,
        };
        let j = job(bs, pattern, 10.0);
        1000.0 / fio::run(hdds(1, p), Policy::Md, &j, 1).iops()
    };
    // random writes without cache: 3.5 KiB ones (not whole 4 KiB sectors) pay one more
    // revolution (8.33 ms) than 4 KiB ones; on 512n they do not
    let aligned = run(4096, &p);
    let partial = run(3584, &p);
    let n512 = run(3584, &p.clone().with_format(SectorFormat::N512));
    println!("ms per write: 512e aligned {aligned:.2}, 512e partial {partial:.2}, 512n {n512:.2}");
    within10("512e RMW cost, ms", partial - aligned, 8.33);
    assert!(
        (n512 - aligned).abs() < 1.0,
        "512n {n512} aligned {aligned}"
    );
}

#[test]
fn write_cache_acknowledges_early_and_flush_waits_for_destage() {
    let mut d = Hdd::new(HddParams::wd_re_4tb());
    let mut out = Vec::new();
    for i in 0..8 {
        d.submit(
            0.0,
            Cmd {
                id: i,
                op: Op::Write,
                offset: i * 100 * GIB,
                len: 4096,
            },
        );
    }
    d.submit(
        0.0,
        Cmd {
            id: 99,
            op: Op::Flush,
            offset: 0,
            len: 0,
        },
    );
    while let Some(t) = d.next_event() {
        d.advance(t, &mut out);
    }
    let acked: Vec<f64> = out.iter().filter(|x| x.id < 8).map(|x| x.time).collect();
    let flush = out.iter().find(|x| x.id == 99).map(|x| x.time);
    assert_eq!(acked.len(), 8);
    assert!(
        acked.iter().all(|&t| t < 1.0),
        "cached writes acknowledged at {acked:?}"
    );
    // 8 random destages need several ms each
    assert!(flush.is_some_and(|t| t > 8.0 * 3.0), "flush at {flush:?}");
}

#[test]
fn ssd_iops_saturate_with_queue_depth_and_writes_fall_off_a_cliff() {
    let ssd = || vec![Box::new(Ssd::new(SsdParams::sata_256gb())) as Box<dyn Device>];
    // the fitted setup time includes the host's share (fio measured through the kernel)
    let job = |bs, pattern, secs| Job {
        think_ms: 0.0,
        ..job(bs, pattern, secs)
    };
    let rd = |qd| {
        let j = job(
            4096,
            Pattern::Random {
                lo: 0,
                hi: 200 * GIB,
                read_pct: 100,
                qd,
            },
            2.0,
        );
        fio::run(ssd(), Policy::Auto, &j, 1).iops()
    };
    within10("SSD QD1 read", rd(1), 8959.0);
    within10("SSD QD32 read", rd(32), 100_035.0);
    let mut p = SsdParams::sata_256gb();
    p.free_pool_bytes = 0; // a full drive
    let j = job(
        4096,
        Pattern::Random {
            lo: 0,
            hi: 200 * GIB,
            read_pct: 0,
            qd: 32,
        },
        2.0,
    );
    let full = fio::run(
        vec![Box::new(Ssd::new(p)) as Box<dyn Device>],
        Policy::Auto,
        &j,
        1,
    );
    within10("SSD QD32 write, full", full.iops(), 14_548.0);
    let fresh = fio::run(ssd(), Policy::Auto, &j, 1);
    within10("SSD QD32 write, fresh", fresh.iops(), 90_754.0);
}

#[test]
fn same_seed_same_results_other_seed_other_results() {
    let a = randread(2, Policy::Nearest, 3 * TIB, 8);
    let b = randread(2, Policy::Nearest, 3 * TIB, 8);
    assert_eq!(a, b);
    let j = job(
        4096,
        Pattern::Random {
            lo: 0,
            hi: 3 * TIB,
            read_pct: 100,
            qd: 8,
        },
        20.0,
    );
    let c = fio::run(hdds(2, &HddParams::wd_re_4tb()), Policy::Nearest, &j, 8);
    assert_ne!(a, c);
}

// ---- the RAID1 study ----------------------------------------------------------------------

/// Virtual seconds per job in these tests (the CLI's default is 60).
const STUDY_SECS: f64 = 20.0;

fn study() -> &'static Report {
    static R: OnceLock<Report> = OnceLock::new();
    R.get_or_init(|| raid1::run(1, STUDY_SECS, &Policy::ALL, &[]))
}

fn fig(r: &Report, job: u32, part: Option<&str>, p: Policy) -> f64 {
    r.lab(job, part, p).map(|x| x.kbs).unwrap_or(f64::NAN)
}

/// Jobs where an implementation's behaviour is mechanical and the lab reproduces it
/// (docs/bench/lab.md explains the others: md's and gmirror's multi-stream bouncing, ZFS's
/// zvol).
fn mechanical(implementation: &str) -> Vec<u32> {
    let mut jobs: Vec<u32> = (6..=15).chain([17]).chain(21..=29).collect();
    if implementation == "zfs" {
        jobs.clear();
    }
    jobs
}

#[test]
fn imitating_policies_land_within_20_percent_of_the_published_figures() {
    let r = study();
    let mut bad = Vec::new();
    for (name, policy) in IMPLS {
        for job in mechanical(name) {
            let paper = r.paper(job, None, name).map(|p| p.kbs).unwrap_or(f64::NAN);
            let lab = fig(r, job, None, policy);
            let ratio = lab / paper;
            println!("{name:8} job {job:2}: lab {lab:9.0} published {paper:9.0} KB/s ({ratio:.2})");
            if !(0.8..=1.2).contains(&ratio) {
                bad.push((name, job, ratio));
            }
        }
    }
    assert!(bad.is_empty(), "outside ±20 %: {bad:?}");
}

/// Read jobs: the random-read sweep, the mix's read part, the streams and the resync jobs.
fn read_jobs() -> Vec<(u32, Option<&'static str>)> {
    let mut v: Vec<(u32, Option<&'static str>)> = (6..=15).map(|j| (j, None)).collect();
    v.push((16, Some("r")));
    v.extend((17..=29).map(|j| (j, None)));
    v
}

#[test]
fn auto_beats_gflash_published_on_every_read_job() {
    let r = study();
    for (job, part) in read_jobs() {
        let paper = r
            .paper(job, part, "gflash")
            .map(|p| p.kbs)
            .unwrap_or(f64::NAN);
        let auto = fig(r, job, part, Policy::Auto);
        println!(
            "job {job:2}{}: auto {auto:9.0} gflash {paper:9.0} KB/s",
            part.unwrap_or(" ")
        );
        assert!(auto >= paper, "job {job}: auto {auto} < gflash {paper}");
    }
}

#[test]
fn auto_is_at_least_as_good_as_every_policy_in_the_same_run() {
    let r = study();
    for (job, part) in read_jobs() {
        let auto = fig(r, job, part, Policy::Auto);
        for p in Policy::ALL {
            let other = fig(r, job, part, p);
            // 1 %: two policies that decide differently draw different random offsets'
            // timing (documented in docs/bench/lab.md)
            assert!(
                auto >= 0.99 * other,
                "job {job}: auto {auto} < {} {other}",
                p.name()
            );
        }
    }
}

#[test]
fn the_study_is_deterministic() {
    let a = raid1::run(5, 2.0, &[Policy::Auto, Policy::Md], &[6, 15, 18, 24]);
    let b = raid1::run(5, 2.0, &[Policy::Auto, Policy::Md], &[6, 15, 18, 24]);
    let ja = serde_json::to_string(&a).unwrap_or_default();
    let jb = serde_json::to_string(&b).unwrap_or_default();
    assert!(!ja.is_empty());
    assert_eq!(ja, jb);
}

#[test]
fn layouts_rank_like_the_published_24_disk_study() {
    use cairn_lab::layouts::{run, Study, STUDY_HOST_WRITE_MBS};
    // with the study machine's write ceiling (700 MB/s, visible in its own table)
    let r =
        run(Study::Hdd, 2 * GIB, Some(STUDY_HOST_WRITE_MBS)).expect("the embedded layouts parse");
    println!("{}", r.table());
    assert_eq!(r.rows.len(), 26);
    assert!(r.spearman_read >= 0.8, "read ρ {:.2}", r.spearman_read);
    assert!(r.spearman_write >= 0.8, "write ρ {:.2}", r.spearman_write);
    // the disks alone (no ceiling) rank writes at 0.76 only: the issue's 0.8 needs the
    // host's ceiling (docs/bench/lab.md)
    let bare = run(Study::Hdd, 2 * GIB, None).expect("the embedded layouts parse");
    assert!(
        bare.spearman_write >= 0.7,
        "write ρ without ceiling {:.2}",
        bare.spearman_write
    );
}

/// The study's SSD table: reads rank well once the host's read ceiling (2 GB/s, visible in
/// its table) is in; writes do not (the host's raidz writes plateau by parity level, which
/// the lab does not model: docs/bench/lab.md). Guards the recorded figures.
#[test]
fn ssd_layouts_run_and_rank_reads_like_the_published_table() {
    use cairn_lab::layouts::{run, Study};
    let r = run(Study::Ssd, 2 * GIB, Some(Study::Ssd.host_write_mbs()))
        .expect("the embedded SSD layouts parse");
    assert_eq!(r.rows.len(), 16);
    assert!(r.spearman_read >= 0.7, "read ρ {:.2}", r.spearman_read);
    assert!(r.spearman_write >= 0.5, "write ρ {:.2}", r.spearman_write);
}
