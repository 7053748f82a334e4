//! A fio-equivalent, closed-loop job runner over simulated disks combined as a mirror (one
//! side is a single disk), in virtual time.
//!
//! ```text
//! randread bs=4k qd=2 over a 2-disk mirror (the test below runs this case):
//!
//!   t=0      client 0 → read A → policy → disk 0     client 1 → read B → policy → disk 1
//!   t=t1     disk 0 completes A → client 0 counts it, waits think_ms, issues C
//!   t=t2     disk 1 completes B → client 1 …
//!   … until the runtime (virtual ms) is reached; IOPS = completions / runtime.
//!
//! A write goes to every side and completes when the last side has it. A resync copies
//! disk 0 → disk 1 in chunks (read, then write) at most at `rate`, advancing the watermark
//! below which disk 1 may serve reads.
//! ```
//!
//! Offsets of random jobs come from a `StdRng` seeded by the caller: one seed, one result.

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::device::{Cmd, Device, Done, Op};
use crate::policy::{MirrorState, Policy};

/// What the clients do.
#[derive(Clone, Debug, PartialEq)]
pub enum Pattern {
    /// `qd` clients, each with one request outstanding, uniformly random aligned offsets in
    /// `[lo, hi)`, reads with probability `read_pct` %.
    Random {
        lo: u64,
        hi: u64,
        read_pct: u32,
        qd: usize,
    },
    /// One client per stream `(offset, size)`, sequential, one request outstanding each.
    Sequential {
        streams: Vec<(u64, u64)>,
        read: bool,
    },
}

/// A background resync of side 1 from side 0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Resync {
    /// Bytes of side 1 already valid when the job starts.
    pub watermark: u64,
    pub chunk: u64,
    /// Most bytes copied per ms.
    pub rate_bytes_per_ms: f64,
}

/// One job.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    pub bs: u64,
    pub pattern: Pattern,
    pub runtime_ms: f64,
    /// Host time between a completion and the client's next request, ms.
    pub think_ms: f64,
    /// Most commands the host keeps dispatched to one disk (the OS I/O scheduler's
    /// dispatch limit; more wait in the host's FIFO). 0: no limit.
    pub host_queue: usize,
    /// Completions before this time are not counted (and the time not either).
    pub warmup_ms: f64,
    pub resync: Option<Resync>,
}

/// What a job did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct JobResult {
    pub read_ios: u64,
    pub write_ios: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub elapsed_ms: f64,
    /// Resync watermark at the end, if a resync ran.
    pub watermark: Option<u64>,
}

impl JobResult {
    fn per_s(&self, x: u64) -> f64 {
        if self.elapsed_ms > 0.0 {
            x as f64 * 1000.0 / self.elapsed_ms
        } else {
            0.0
        }
    }

    pub fn iops(&self) -> f64 {
        self.per_s(self.read_ios + self.write_ios)
    }
    pub fn read_iops(&self) -> f64 {
        self.per_s(self.read_ios)
    }
    pub fn write_iops(&self) -> f64 {
        self.per_s(self.write_ios)
    }
    /// KiB/s, as fio prints "KB/s".
    pub fn kbs(&self) -> f64 {
        self.per_s(self.read_bytes + self.write_bytes) / 1024.0
    }
    pub fn read_kbs(&self) -> f64 {
        self.per_s(self.read_bytes) / 1024.0
    }
    pub fn write_kbs(&self) -> f64 {
        self.per_s(self.write_bytes) / 1024.0
    }
    /// MB/s (10^6 bytes).
    pub fn mbs(&self) -> f64 {
        self.per_s(self.read_bytes + self.write_bytes) / 1e6
    }

    /// Sums the work of several runs (their elapsed times add).
    pub fn combine(parts: &[JobResult]) -> JobResult {
        let mut r = JobResult::default();
        for p in parts {
            r.read_ios += p.read_ios;
            r.write_ios += p.write_ios;
            r.read_bytes += p.read_bytes;
            r.write_bytes += p.write_bytes;
            r.elapsed_ms += p.elapsed_ms;
            r.watermark = p.watermark.or(r.watermark);
        }
        r
    }
}

/// Who issued a device command.
#[derive(Clone, Copy, Debug)]
enum Owner {
    Client(usize),
    ResyncRead,
    ResyncWrite,
}

#[derive(Clone, Copy, Debug)]
struct UserReq {
    owner: Owner,
    op: Op,
    offset: u64,
    len: u64,
    remaining: usize,
}

struct ResyncRun {
    spec: Resync,
    watermark: u64,
    busy: bool,
    next_at: f64,
    end: u64,
}

/// The running simulation of one job.
struct Sim<'a> {
    disks: Vec<Box<dyn Device>>,
    state: MirrorState,
    policy: Policy,
    job: &'a Job,
    rng: StdRng,
    reqs: HashMap<u64, UserReq>,
    cmds: HashMap<u64, (u64, usize)>,
    next_id: u64,
    wake: Vec<(f64, usize)>,
    held: Vec<std::collections::VecDeque<Cmd>>,
    /// Per disk, the offset of the last command the host dispatched from `held`.
    elevator: Vec<u64>,
    cursors: Vec<(u64, u64)>,
    resync: Option<ResyncRun>,
    res: JobResult,
    last_done: f64,
}

/// Which waiting command a host elevator dispatches next: the lowest offset at or above
/// `head` (the last one dispatched), else the lowest — a one-way C-SCAN, as Linux's
/// mq-deadline and FreeBSD's bioq_disksort order a disk's waiting requests.
fn elevator_pick(held: &std::collections::VecDeque<Cmd>, head: u64) -> Option<usize> {
    let lowest = |ahead_only: bool| {
        held.iter()
            .enumerate()
            .filter(|(_, c)| !ahead_only || c.offset >= head)
            .min_by_key(|(_, c)| c.offset)
            .map(|(i, _)| i)
    };
    lowest(true).or_else(|| lowest(false))
}

/// Runs `job` over `disks` combined as a mirror with read policy `policy`.
pub fn run(disks: Vec<Box<dyn Device>>, policy: Policy, job: &Job, seed: u64) -> JobResult {
    let nonrot: Vec<bool> = disks.iter().map(|d| d.nonrot()).collect();
    let capacity = disks.iter().map(|d| d.capacity()).min().unwrap_or(0);
    let n = disks.len();
    let mut sim = Sim {
        state: MirrorState::new(&nonrot),
        disks,
        policy,
        job,
        rng: StdRng::seed_from_u64(seed),
        reqs: HashMap::new(),
        cmds: HashMap::new(),
        next_id: 0,
        wake: Vec::new(),
        held: Vec::new(),
        elevator: vec![0; n],
        cursors: Vec::new(),
        resync: None,
        res: JobResult::default(),
        last_done: 0.0,
    };
    sim.held = vec![std::collections::VecDeque::new(); n];
    sim.start(capacity);
    sim.main_loop();
    sim.res.elapsed_ms = (sim.job.runtime_ms.min(sim.last_done) - sim.job.warmup_ms).max(1e-9);
    sim.res.watermark = sim.resync.as_ref().map(|r| r.watermark);
    sim.res
}

impl Sim<'_> {
    fn start(&mut self, capacity: u64) {
        let clients = match &self.job.pattern {
            Pattern::Random { qd, .. } => {
                self.cursors = vec![(0, u64::MAX); *qd];
                *qd
            }
            Pattern::Sequential { streams, .. } => {
                self.cursors = streams.iter().map(|&(o, s)| (o, o + s)).collect();
                streams.len()
            }
        };
        self.wake = (0..clients).map(|c| (0.0, c)).collect();
        if let Some(spec) = self.job.resync {
            if self.disks.len() >= 2 && spec.watermark < capacity && spec.chunk > 0 {
                self.state.set_resync(1, Some(spec.watermark));
                self.resync = Some(ResyncRun {
                    spec,
                    watermark: spec.watermark,
                    busy: false,
                    next_at: 0.0,
                    end: capacity,
                });
            }
        }
    }

    fn next_time(&self) -> Option<f64> {
        let dev = self.disks.iter().filter_map(|d| d.next_event());
        let wake = self.wake.iter().map(|w| w.0);
        let rs = self
            .resync
            .as_ref()
            .filter(|r| !r.busy && r.watermark < r.end)
            .map(|r| r.next_at);
        dev.chain(wake).chain(rs).reduce(f64::min)
    }

    fn main_loop(&mut self) {
        let mut done: Vec<Done> = Vec::new();
        while let Some(now) = self.next_time() {
            if now > self.job.runtime_ms {
                break;
            }
            for i in 0..self.disks.len() {
                if self.disks[i].next_event().is_some_and(|t| t <= now) {
                    done.clear();
                    self.disks[i].advance(now, &mut done);
                    for d in done.clone() {
                        self.completed(i, d);
                    }
                    self.dispatch_held(now, i);
                }
            }
            let due: Vec<usize> = self
                .wake
                .iter()
                .filter(|w| w.0 <= now)
                .map(|w| w.1)
                .collect();
            self.wake.retain(|w| w.0 > now);
            for c in due {
                self.issue(now, c);
            }
            self.resync_step(now);
        }
    }

    fn submit(&mut self, now: f64, disk: usize, user: u64, op: Op, offset: u64, len: u64) {
        let id = self.next_id;
        self.next_id += 1;
        self.cmds.insert(id, (user, disk));
        self.state.issued(disk, offset, len, op == Op::Read);
        let cmd = Cmd {
            id,
            op,
            offset,
            len,
        };
        let limit = self.job.host_queue;
        if limit > 0 && self.disks[disk].outstanding() >= limit {
            self.held[disk].push_back(cmd);
        } else {
            self.disks[disk].submit(now, cmd);
        }
    }

    fn dispatch_held(&mut self, now: f64, disk: usize) {
        let limit = self.job.host_queue;
        while self.disks[disk].outstanding() < limit.max(1) {
            match self.next_held(disk) {
                Some(c) => {
                    self.elevator[disk] = c.offset;
                    self.disks[disk].submit(now, c)
                }
                None => break,
            }
        }
    }

    /// The held command the host's elevator dispatches next to `disk`.
    fn next_held(&mut self, disk: usize) -> Option<Cmd> {
        let pick = elevator_pick(&self.held[disk], self.elevator[disk])?;
        self.held[disk].remove(pick)
    }

    fn new_user(&mut self, owner: Owner, op: Op, offset: u64, len: u64, remaining: usize) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let req = UserReq {
            owner,
            op,
            offset,
            len,
            remaining,
        };
        self.reqs.insert(id, req);
        id
    }

    /// Client `c` issues its next request.
    fn issue(&mut self, now: f64, c: usize) {
        let bs = self.job.bs;
        let (offset, read) = match &self.job.pattern {
            Pattern::Random {
                lo, hi, read_pct, ..
            } => {
                let slots = (hi.saturating_sub(*lo) / bs).max(1);
                let off = lo + self.rng.gen_range(0..slots) * bs;
                (off, self.rng.gen_range(0..100) < *read_pct)
            }
            Pattern::Sequential { read, .. } => {
                let (pos, end) = self.cursors[c];
                if pos >= end {
                    return;
                }
                self.cursors[c].0 = pos + bs;
                (pos, *read)
            }
        };
        let owner = Owner::Client(c);
        if read {
            let side = self.state.choose(self.policy, offset, bs).unwrap_or(0);
            let u = self.new_user(owner, Op::Read, offset, bs, 1);
            self.submit(now, side, u, Op::Read, offset, bs);
        } else {
            let n = self.disks.len();
            let u = self.new_user(owner, Op::Write, offset, bs, n);
            for side in 0..n {
                self.submit(now, side, u, Op::Write, offset, bs);
            }
        }
    }

    fn completed(&mut self, disk: usize, d: Done) {
        let Some((user, _)) = self.cmds.remove(&d.id) else {
            return;
        };
        let Some(req) = self.reqs.get_mut(&user) else {
            return;
        };
        req.remaining -= 1;
        let req = *req;
        self.state.completed(disk, req.offset);
        if req.remaining > 0 {
            return;
        }
        self.reqs.remove(&user);
        match req.owner {
            Owner::Client(c) => {
                if d.time <= self.job.runtime_ms && d.time >= self.job.warmup_ms {
                    self.count(req.op, req.len);
                    self.last_done = self.last_done.max(d.time);
                }
                self.wake.push((d.time + self.job.think_ms, c));
            }
            Owner::ResyncRead => {
                let u = self.new_user(Owner::ResyncWrite, Op::Write, req.offset, req.len, 1);
                self.submit(d.time, 1, u, Op::Write, req.offset, req.len);
            }
            Owner::ResyncWrite => self.resync_advanced(req.offset + req.len),
        }
    }

    fn count(&mut self, op: Op, len: u64) {
        if op == Op::Read {
            self.res.read_ios += 1;
            self.res.read_bytes += len;
        } else {
            self.res.write_ios += 1;
            self.res.write_bytes += len;
        }
    }

    fn resync_advanced(&mut self, end: u64) {
        let Some(r) = self.resync.as_mut() else {
            return;
        };
        r.busy = false;
        r.watermark = end.min(r.end);
        let w = (r.watermark < r.end).then_some(r.watermark);
        self.state.set_resync(1, w);
    }

    fn resync_step(&mut self, now: f64) {
        let Some(r) = self.resync.as_mut() else {
            return;
        };
        if r.busy || r.watermark >= r.end || r.next_at > now {
            return;
        }
        let (off, len) = (r.watermark, r.spec.chunk.min(r.end - r.watermark));
        r.busy = true;
        r.next_at = now + len as f64 / r.spec.rate_bytes_per_ms.max(1e-9);
        let u = self.new_user(Owner::ResyncRead, Op::Read, off, len, 1);
        self.submit(now, 0, u, Op::Read, off, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hdd::{Hdd, HddParams};

    #[test]
    fn the_host_elevator_sweeps_up_then_wraps_to_the_lowest() {
        let mut held: std::collections::VecDeque<Cmd> = [50, 10, 70, 30]
            .into_iter()
            .map(|offset| Cmd {
                id: offset,
                op: Op::Read,
                offset,
                len: 1,
            })
            .collect();
        let mut head = 40;
        let mut order = Vec::new();
        while let Some(i) = elevator_pick(&held, head) {
            head = held[i].offset;
            order.push(held.remove(i).unwrap().offset);
        }
        assert_eq!(order, [50, 70, 10, 30]);
    }

    #[test]
    fn worked_example_of_the_module_comment() {
        let disks = || -> Vec<Box<dyn Device>> {
            (0..2)
                .map(|_| Box::new(Hdd::new(HddParams::wd_re_4tb())) as Box<dyn Device>)
                .collect()
        };
        let pattern = Pattern::Random {
            lo: 0,
            hi: 1 << 41,
            read_pct: 100,
            qd: 2,
        };
        let job = Job {
            bs: 4096,
            pattern,
            runtime_ms: 5000.0,
            think_ms: 0.01,
            host_queue: 0,
            warmup_ms: 0.0,
            resync: None,
        };
        let r = run(disks(), Policy::RoundRobin, &job, 3);
        // two clients, each ~11 ms per read on its own disk: ~180 IOPS in 5 s
        assert!(r.read_ios > 700 && r.read_ios < 1100, "{r:?}");
        assert_eq!(r.write_ios, 0);
        // writes go to both sides; a resync advances the watermark
        let mut w = job.clone();
        w.pattern = Pattern::Sequential {
            streams: vec![(0, 1 << 30)],
            read: false,
        };
        w.bs = 1 << 20;
        w.resync = Some(Resync {
            watermark: 0,
            chunk: 1 << 20,
            rate_bytes_per_ms: 10_000.0,
        });
        let r = run(disks(), Policy::Md, &w, 3);
        assert!(r.write_ios > 100, "{r:?}");
        assert!(r.watermark.is_some_and(|m| m > 0), "{r:?}");
    }
}
