//! A simulated SATA SSD: `t = t_setup(q) + len / bw`, IOPS saturating with queue depth, a
//! shared host link, and a write cliff once the free-block pool has been written
//! (hdd_model.md §7, Samsung 850 PRO 256 GB measurements).
//!
//! ```text
//! Saturating IOPS:  IOPS(q) = I∞ · q / (q + k)   ⇒ by Little's law the time of one
//! command with q in flight is  t_setup(q) = q / IOPS(q) = (q + k) / I∞.
//!
//! Bandwidth terms from 128 KiB QD1: read 437.9 MiB/s ⇒ 0.286 ms ≈ 0.111 + 131 072 / bw
//!   ⇒ bw ≈ 750 000 B/ms (4 KiB: 0.0055 ms); write 407.8 MiB/s ⇒ bw ≈ 485 000 B/ms.
//! Reads, fitted to QD1 = 8 959 and QD32 = 100 035 IOPS (4 KiB), bandwidth term removed:
//!   (1 + k)/I∞ = 1/8 959 s − 0.0055 ms = 0.1061 ms, (32 + k)/I∞ = 32/100 035 s − 0.0055 ms
//!   = 0.3144 ms  ⇒  k = 14.8, I∞ = 148 800/s: QD1 0.1116 ms → 8 959 IOPS,
//!   QD32 0.3199 ms per command, 32 in flight → 100 k IOPS.
//! Writes, QD1 = 27 303, QD32 = 90 754 (bandwidth term 0.0084 ms):  k = 1.77, I∞ = 98 100/s.
//! Write cliff (drive full, no TRIM headroom): every write also occupies one garbage-
//!   collection engine for 0.0204 ms + len / 84 300 B/ms: 4 KiB → 14.5 k IOPS at any
//!   depth (measured 14 370 / 14 548), 128 KiB → 80 MiB/s (measured 79.5 MiB/s).
//! ```
//!
//! Simplifications: reads are not slowed by garbage collection; TRIM is not modelled (the
//! pool only shrinks).

use crate::device::{Cmd, Device, Done, Op};

/// Parameters of a simulated SSD.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SsdParams {
    pub capacity_bytes: u64,
    pub read_iops_max: f64,
    pub read_k: f64,
    pub write_iops_max: f64,
    pub write_k: f64,
    pub read_bytes_per_ms: f64,
    pub write_bytes_per_ms: f64,
    pub link_bytes_per_ms: f64,
    /// Bytes that can be written before the cliff.
    pub free_pool_bytes: u64,
    pub gc_fixed_ms: f64,
    pub gc_bytes_per_ms: f64,
}

impl SsdParams {
    /// A Samsung 850 PRO 256 GB class drive (fresh: the pool is 7 % of the capacity).
    pub fn sata_256gb() -> SsdParams {
        SsdParams::with_capacity(256_060_514_304)
    }

    /// The same drive class at another capacity.
    pub fn with_capacity(bytes: u64) -> SsdParams {
        SsdParams {
            capacity_bytes: bytes.max(1 << 20),
            read_iops_max: 148_800.0,
            read_k: 14.8,
            write_iops_max: 98_100.0,
            write_k: 1.77,
            read_bytes_per_ms: 750_000.0,
            write_bytes_per_ms: 485_000.0,
            link_bytes_per_ms: 560_000.0,
            free_pool_bytes: bytes / 100 * 7,
            gc_fixed_ms: 0.0204,
            gc_bytes_per_ms: 84_300.0,
        }
    }
}

/// A simulated SSD.
#[derive(Clone, Debug)]
pub struct Ssd {
    p: SsdParams,
    inflight: Vec<Done>,
    link_free: f64,
    gc_free: f64,
    written: u64,
}

impl Ssd {
    pub fn new(p: SsdParams) -> Ssd {
        Ssd {
            p,
            inflight: Vec::new(),
            link_free: 0.0,
            gc_free: 0.0,
            written: 0,
        }
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// `t_setup(q)` in ms for reads or writes.
    pub fn setup_ms(&self, write: bool, q: usize) -> f64 {
        let (imax, k) = if write {
            (self.p.write_iops_max, self.p.write_k)
        } else {
            (self.p.read_iops_max, self.p.read_k)
        };
        (q as f64 + k) / imax * 1000.0
    }
}

impl Device for Ssd {
    fn submit(&mut self, now: f64, cmd: Cmd) {
        let q = self.inflight.len() + 1;
        let write = cmd.op == Op::Write;
        let bw = if write {
            self.p.write_bytes_per_ms
        } else {
            self.p.read_bytes_per_ms
        };
        let mut done = match cmd.op {
            Op::Flush => now + 0.05,
            _ => now + self.setup_ms(write, q) + cmd.len as f64 / bw,
        };
        let link = cmd.len as f64 / self.p.link_bytes_per_ms;
        self.link_free = self.link_free.max(now) + link;
        done = done.max(self.link_free);
        if write {
            self.written += cmd.len;
            if self.written > self.p.free_pool_bytes {
                let gc = self.p.gc_fixed_ms + cmd.len as f64 / self.p.gc_bytes_per_ms;
                self.gc_free = self.gc_free.max(now) + gc;
                done = done.max(self.gc_free);
            }
        }
        self.inflight.push(Done {
            id: cmd.id,
            time: done,
        });
    }

    fn next_event(&self) -> Option<f64> {
        self.inflight.iter().map(|d| d.time).reduce(f64::min)
    }

    fn advance(&mut self, now: f64, out: &mut Vec<Done>) {
        let mut due: Vec<Done> = self
            .inflight
            .iter()
            .copied()
            .filter(|d| d.time <= now)
            .collect();
        self.inflight.retain(|d| d.time > now);
        due.sort_by(|a, b| a.time.total_cmp(&b.time).then(a.id.cmp(&b.id)));
        out.extend(due);
    }

    fn capacity(&self) -> u64 {
        self.p.capacity_bytes
    }

    fn nonrot(&self) -> bool {
        true
    }

    fn outstanding(&self) -> usize {
        self.inflight.len()
    }
}
