use cairn_lab::fio::{self, Job, Pattern};
use cairn_lab::*;

const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;

fn disks(n: usize) -> Vec<Box<dyn Device>> {
    let w: f64 = std::env::var("AGE").ok().and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let mut p = HddParams::wd_re_4tb();
    p.sptf_age_weight = w;
    p.ncq_depth = std::env::var("NCQ").ok().and_then(|s| s.parse().ok()).unwrap_or(32);
    (0..n).map(|_| Box::new(Hdd::new(p.clone())) as Box<dyn Device>).collect()
}

fn rr(n: usize, p: Policy, lo: u64, hi: u64, qd: usize, pct: u32, bs: u64) -> fio::JobResult {
    let job = Job { bs, pattern: Pattern::Random { lo, hi, read_pct: pct, qd }, runtime_ms: 30_000.0, think_ms: 0.01, host_queue: std::env::var("HQ").ok().and_then(|s| s.parse().ok()).unwrap_or(0), warmup_ms: 0.0, resync: None };
    fio::run(disks(n), p, &job, 1)
}

#[test]
#[ignore]
fn explore() {
    println!("qd1 3t {:.1}", rr(1, Policy::Md, 10 << 20, 3 * TIB, 1, 100, 4096).iops());
    println!("qd1 8g {:.1}", rr(1, Policy::Md, 0, 8 * GIB, 1, 100, 4096).iops());
    println!("qd32 8g {:.1}", rr(1, Policy::Md, 0, 8 * GIB, 32, 100, 4096).iops());
    println!("qd16 3t {:.1}", rr(1, Policy::Md, 0, 3 * TIB, 16, 100, 4096).iops());
    println!("qd32 3t 1disk {:.1}", rr(1, Policy::Md, 0, 3 * TIB, 32, 100, 4096).iops());
    println!("wqd1 8g {:.1}", rr(1, Policy::Md, 0, 8 * GIB, 1, 0, 4096).iops());
    println!("wqd1 3t mirror {:.1}", rr(2, Policy::Md, 0, 3 * TIB, 1, 0, 4096).iops());
    let r = rr(2, Policy::Md, 0, 3 * TIB, 32, 67, 8192);
    println!("randrw {:.1} {:.1}", r.read_iops(), r.write_iops());
    for p in Policy::ALL {
        let a = rr(2, p, 10 << 20, 3 * TIB, 1, 100, 4096).iops();
        let b = rr(2, p, 10 << 20, 3 * TIB, 32, 100, 4096).iops();
        println!("mirror {:?} qd1 {a:.1} qd32 {b:.1}", p);
    }
    let job = Job { bs: 128 << 10, pattern: Pattern::Sequential { streams: vec![(0, 8 * GIB)], read: true }, runtime_ms: 20_000.0, think_ms: 0.01, host_queue: std::env::var("HQ").ok().and_then(|s| s.parse().ok()).unwrap_or(0), warmup_ms: 0.0, resync: None };
    println!("seq read {:.1} MB/s", fio::run(disks(1), Policy::Md, &job, 1).mbs());
    let job = Job { bs: 128 << 10, pattern: Pattern::Sequential { streams: vec![(0, 8 * GIB)], read: false }, runtime_ms: 20_000.0, think_ms: 0.01, host_queue: std::env::var("HQ").ok().and_then(|s| s.parse().ok()).unwrap_or(0), warmup_ms: 0.0, resync: None };
    println!("seq write {:.1} MB/s", fio::run(disks(1), Policy::Md, &job, 1).mbs());
}

#[test]
#[ignore]
fn study() {
    let t = std::time::Instant::now();
    let rt: f64 = std::env::var("RT").ok().and_then(|s| s.parse().ok()).unwrap_or(20.0);
    let r = cairn_lab::raid1::run(1, rt, &Policy::ALL, &[]);
    println!("{}", r.table());
    println!("cpu {:?}", t.elapsed());
}
