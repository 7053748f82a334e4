//! A simulated hard disk: service time from the mechanics, in virtual time.
//!
//! Service time (Ruemmler & Wilkes 1994; DiskSim's decomposition, hdd_model.md §1):
//!
//! ```text
//! T = t_overhead + max(t_seek(|Δcyl|) [+ write settle], t_head_switch if the head changes)
//!   + t_rotation (until the target sector's angle passes under the head)
//!   + t_transfer (len / (spt·512·rps), plus σ revolutions per track boundary crossed)
//!
//! Worked example, WD 4 TB at 7200 rpm (T_rev = 8.333 ms), head idle on cylinder 0, head
//! 0 at t = 0, read 4 KiB at byte 150 000 000 · 512 (sector 150 000 000: zone 1, cylinder
//! 4882, head 8, sector 384 of 3072, global track 48 828; σ = 1/0.93 − 1 = 0.075269 rev):
//!   overhead 0.25 ms, seek(4882 · 303 104/314 054 = 4712 table cylinders) = 2.80 ms
//!   (longer than the 1.0 ms head switch)                      -> head arrives at 3.05 ms
//!   angle under the head at 3.05 ms = frac(3.05 / 8.333)      = 0.3660 rev
//!   target angle = frac(48 828·σ + 384/3072) = frac(3675.2258 + 0.125) = 0.3508 rev
//!   rotation = frac(0.3508 − 0.3660) · 8.333                   = 8.207 ms (just missed)
//!   transfer = 4096 / (3072·512) · 8.333                       = 0.0217 ms
//!   data under the head until                                  ≈ 11.278 ms
//! ```
//!
//! The angle under the heads is the real rotational position, `(t / T_rev) mod 1`, so NCQ
//! reordering by shortest positioning time first (SPTF: seek + rotation of every queued
//! command, the cheapest served next), streams and a mirror's "nearest head" behave as on
//! a drive. The write cache acknowledges a write after the interface transfer while it has
//! room (bytes and entries) and destages with SPTF, in idle time or under pressure; FLUSH
//! completes when the cache is empty. After a read the drive reads ahead (a segment of
//! `readahead_bytes`) until another command needs the arm; after a read that continues a
//! stream it reads at least `seq_readahead_bytes` before it switches, as drives do to keep
//! interleaved streams efficient. 512e drives (4 KiB physical) pay one revolution of
//! read-modify-write for a write that does not cover whole physical sectors.
//!
//! Simplifications (documented in docs/bench/lab.md): the track skew σ is the one that
//! gives the measured sustained rate (0.93 × media), not DiskSim's 0.14 rev with serpentine
//! bands; a transfer crossing a zone keeps the first zone's rate; no starvation aging in
//! SPTF; the host LBA range is mapped proportionally onto the model's sectors.

use std::collections::VecDeque;

use crate::device::{Cmd, Device, Done, Op};
use crate::mech::{angle, Layout, Place, SeekCurve};

/// Logical / physical sector sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum SectorFormat {
    /// 512-byte logical and physical sectors.
    N512,
    /// 512-byte logical, 4 KiB physical sectors (Advanced Format, "512 emulation").
    E512,
    /// 4 KiB logical and physical sectors.
    K4n,
}

impl SectorFormat {
    /// Physical sector size in bytes.
    pub fn physical(self) -> u64 {
        match self {
            SectorFormat::N512 => 512,
            SectorFormat::E512 | SectorFormat::K4n => 4096,
        }
    }

    /// Logical sector size in bytes.
    pub fn logical(self) -> u64 {
        match self {
            SectorFormat::N512 | SectorFormat::E512 => 512,
            SectorFormat::K4n => 4096,
        }
    }

    /// True when a write of `len` bytes at `offset` must read-modify-write a physical sector.
    pub fn needs_rmw(self, offset: u64, len: u64) -> bool {
        let p = self.physical();
        offset % p != 0 || len % p != 0
    }
}

/// Parameters of a simulated hard disk.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct HddParams {
    pub capacity_bytes: u64,
    pub rpm: f64,
    pub format: SectorFormat,
    /// Controller time per host command, ms.
    pub overhead_ms: f64,
    /// Extra settle time of a write after a seek, ms.
    pub write_settle_ms: f64,
    pub head_switch_ms: f64,
    /// Revolutions lost per track boundary in a sequential transfer.
    pub track_skew_rev: f64,
    /// Multiplier of the zone table's sectors per track (smaller, older platters); the
    /// zones' cylinder counts then scale so that the layout holds the capacity.
    pub rate_scale: f64,
    pub ncq_depth: usize,
    /// SPTF with aging: ms of positioning forgiven per ms a command has waited.
    pub sptf_age_weight: f64,
    pub write_cache: bool,
    pub cache_bytes: u64,
    /// Most dirty extents the write cache holds.
    pub write_cache_entries: usize,
    pub readahead_bytes: u64,
    pub seq_readahead_bytes: u64,
    pub read_segments: usize,
    /// Host interface rate, bytes per ms (cache hits, cached writes).
    pub interface_bytes_per_ms: f64,
}

impl HddParams {
    /// The WD Re 4 TB (WD4000FYYZ) 7200 rpm defaults of hdd_model.md §7.
    pub fn wd_re_4tb() -> HddParams {
        HddParams {
            capacity_bytes: 7_814_037_168 * 512,
            rpm: 7200.0,
            format: SectorFormat::N512,
            overhead_ms: 0.25,
            write_settle_ms: 0.5,
            head_switch_ms: 1.0,
            track_skew_rev: 1.0 / 0.93 - 1.0,
            rate_scale: 1.0,
            ncq_depth: 32,
            sptf_age_weight: 0.0,
            write_cache: true,
            cache_bytes: 64 << 20,
            write_cache_entries: 32,
            readahead_bytes: 3072 * 512,
            seq_readahead_bytes: 512 << 10,
            read_segments: 32,
            interface_bytes_per_ms: 550_000.0,
        }
    }

    /// Another capacity on the same mechanics: the seek curve spans the whole stroke and
    /// the zone rates scale by (capacity / 4 TB)^0.2 (≈ 0.87 at 2 TB, hdd_model.md §7's
    /// advice for the WD Black 2 TB; ≈ 0.76 at 1 TB); larger disks keep the 4 TB rates.
    pub fn with_capacity(mut self, bytes: u64) -> HddParams {
        self.capacity_bytes = bytes.max(1 << 20);
        self.rate_scale = (bytes as f64 / 4.0e12).min(1.0).powf(0.2);
        self
    }

    /// Another spindle speed (rotation and media rate scale with it; the seek curve does not).
    pub fn with_rpm(mut self, rpm: f64) -> HddParams {
        self.rpm = if rpm.is_finite() && rpm >= 1000.0 {
            rpm
        } else {
            7200.0
        };
        self
    }

    /// Another sector format.
    pub fn with_format(mut self, format: SectorFormat) -> HddParams {
        self.format = format;
        self
    }

    /// One revolution, ms.
    pub fn rev_ms(&self) -> f64 {
        60_000.0 / self.rpm
    }

    /// Media rate of a track of `spt` sectors, bytes per ms (no switches).
    pub fn media_bytes_per_ms(&self, spt: u32) -> f64 {
        f64::from(spt) * 512.0 / self.rev_ms()
    }
}

/// A command waiting in the NCQ.
#[derive(Clone, Copy, Debug)]
struct Queued {
    cmd: Cmd,
    arrived: f64,
}

/// Dirty bytes of the write cache, host byte range.
#[derive(Clone, Copy, Debug)]
struct Extent {
    start: u64,
    end: u64,
    rmw: bool,
}

#[derive(Clone, Copy, Debug)]
enum Work {
    /// A read: the data is acknowledged at `data_end`, the arm reads ahead until `ra_end`.
    Read {
        seg_start: u64,
        data_end: u64,
        ra_end: u64,
    },
    /// A write-through host write.
    Write { cmd: Cmd },
    /// Destage of a dirty extent.
    Destage { ext: Extent },
}

#[derive(Clone, Copy, Debug)]
struct Active {
    end: f64,
    work: Work,
}

/// The arm streaming read-ahead data after a read, until a command needs it.
#[derive(Clone, Copy, Debug)]
struct Prefetch {
    seg_start: u64,
    base: u64,
    t0: f64,
    limit: u64,
}

/// A simulated hard disk.
#[derive(Clone, Debug)]
pub struct Hdd {
    p: HddParams,
    layout: Layout,
    seek: &'static SeekCurve,
    /// Seek-curve cylinders per cylinder of this disk's layout.
    seek_scale: f64,
    cyl: u32,
    head: u32,
    track: u64,
    queue: Vec<Queued>,
    backlog: VecDeque<Cmd>,
    space_wait: VecDeque<Cmd>,
    flushes: Vec<Cmd>,
    acks: Vec<Done>,
    active: Option<Active>,
    dirty: Vec<Extent>,
    dirty_bytes: u64,
    segments: VecDeque<(u64, u64)>,
    pf: Option<Prefetch>,
}

/// Largest dirty extent built by merging sequential writes.
const MAX_EXTENT: u64 = 2 << 20;

impl Hdd {
    /// A disk with the WD 4 TB layout and seek table and the given parameters.
    pub fn new(p: HddParams) -> Hdd {
        let (layout, seek_scale) = Layout::wd4t().scaled(p.rate_scale, p.capacity_bytes / 512);
        Hdd {
            p,
            layout,
            seek: SeekCurve::wd4t(),
            seek_scale,
            cyl: 0,
            head: 0,
            track: 0,
            queue: Vec::new(),
            backlog: VecDeque::new(),
            space_wait: VecDeque::new(),
            flushes: Vec::new(),
            acks: Vec::new(),
            active: None,
            dirty: Vec::new(),
            dirty_bytes: 0,
            segments: VecDeque::new(),
            pf: None,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &HddParams {
        &self.p
    }

    /// The place of host byte `offset` on the platters.
    pub fn place(&self, offset: u64) -> Place {
        self.layout.locate(offset / 512)
    }

    /// Sustained read-ahead rate at `offset` (track switches included), bytes per ms.
    fn stream_rate(&self, offset: u64) -> f64 {
        self.p.media_bytes_per_ms(self.place(offset).spt) / (1.0 + self.p.track_skew_rev)
    }

    /// Media transfer time of `len` bytes from `offset`, ms.
    pub fn transfer_ms(&self, offset: u64, len: u64) -> f64 {
        let pl = self.place(offset);
        let per_track = f64::from(pl.spt) * 512.0;
        let crossings = ((f64::from(pl.sector) * 512.0 + len as f64 - 1.0) / per_track).floor();
        self.p.rev_ms() * (len as f64 / per_track + self.p.track_skew_rev * crossings.max(0.0))
    }

    /// Time at which the head is over `offset`'s first sector when the move starts at `t`.
    fn ready_at(&self, t: f64, offset: u64, write: bool, overhead: f64) -> f64 {
        let pl = self.place(offset);
        let d = pl.cyl.abs_diff(self.cyl);
        let mut mv = self
            .seek
            .time_ms((f64::from(d) * self.seek_scale).round() as u32);
        if write && d > 0 {
            mv += self.p.write_settle_ms;
        }
        if pl.head != self.head && pl.track != self.track + 1 {
            // a switch to the next track is hidden in the track skew
            mv = mv.max(self.p.head_switch_ms);
        }
        let arrive = t + overhead + mv;
        let rev = self.p.rev_ms();
        let under = (arrive / rev).fract();
        let mut wait = (angle(&pl, self.p.track_skew_rev) - under).rem_euclid(1.0);
        if wait > 1.0 - 1e-9 {
            wait = 0.0; // the sector is under the head now (rounding)
        }
        arrive + wait * rev
    }

    /// Read-ahead data buffered at time `t` (end of the live prefetch), if any.
    fn frontier(&self, t: f64) -> Option<(u64, u64)> {
        let pf = self.pf?;
        let got = ((t - pf.t0).max(0.0) * self.stream_rate(pf.base)) as u64 & !511;
        Some((pf.seg_start, (pf.base + got).min(pf.limit)))
    }

    fn cached(&self, now: f64, start: u64, end: u64) -> bool {
        let inside = |&(s, e): &(u64, u64)| s <= start && end <= e;
        self.segments.iter().any(inside)
            || self.frontier(now).is_some_and(|r| inside(&r))
            || self.dirty.iter().any(|x| x.start <= start && end <= x.end)
    }

    fn ncq_used(&self) -> usize {
        let host_active = matches!(
            self.active,
            Some(Active {
                work: Work::Write { .. },
                ..
            })
        );
        self.queue.len() + self.space_wait.len() + self.flushes.len() + usize::from(host_active)
    }

    fn has_room(&self, len: u64) -> bool {
        self.dirty.len() < self.p.write_cache_entries
            && self.dirty_bytes + len <= self.p.cache_bytes
    }

    fn ack_at(&mut self, now: f64, cmd: &Cmd) {
        let t = now + self.p.overhead_ms + cmd.len as f64 / self.p.interface_bytes_per_ms;
        self.acks.push(Done {
            id: cmd.id,
            time: t,
        });
    }

    fn insert_dirty(&mut self, cmd: &Cmd) {
        let (start, end) = (cmd.offset, cmd.offset + cmd.len);
        let rmw = self.p.format.needs_rmw(cmd.offset, cmd.len);
        self.dirty_bytes += cmd.len;
        if let Some(x) = self
            .dirty
            .iter_mut()
            .find(|x| x.end == start && end - x.start <= MAX_EXTENT)
        {
            x.end = end;
            // contiguous pieces cover each other's edges: only the extent's ends count
            x.rmw = self.p.format.needs_rmw(x.start, x.end - x.start);
            return;
        }
        self.dirty.push(Extent { start, end, rmw });
    }

    /// Takes a command into the drive (NCQ has room).
    fn accept(&mut self, now: f64, cmd: Cmd) {
        match cmd.op {
            Op::Read if self.cached(now, cmd.offset, cmd.offset + cmd.len) => {
                self.ack_at(now, &cmd)
            }
            Op::Read => self.queue.push(Queued { cmd, arrived: now }),
            Op::Write if !self.p.write_cache => self.queue.push(Queued { cmd, arrived: now }),
            Op::Write if self.space_wait.is_empty() && self.has_room(cmd.len) => {
                self.insert_dirty(&cmd);
                self.ack_at(now, &cmd);
            }
            Op::Write => self.space_wait.push_back(cmd),
            Op::Flush => self.flushes.push(cmd),
        }
    }

    fn freeze_prefetch(&mut self, now: f64) {
        if let Some((s, e)) = self.frontier(now) {
            if e > s {
                self.segments.push_back((s, e));
                while self.segments.len() > self.p.read_segments {
                    self.segments.pop_front();
                }
                self.set_pos(e);
            }
        }
        self.pf = None;
    }

    /// True when a read at `offset` continues the live read-ahead at time `t`.
    fn continues(&self, t: f64, offset: u64) -> bool {
        self.pf.is_some_and(|pf| {
            let f = self.frontier(t).map_or(pf.base, |r| r.1);
            offset >= pf.seg_start && offset <= f && f < pf.limit
        })
    }

    /// True when a read at `offset` starts where a cached segment ends (a stream).
    fn is_stream(&self, offset: u64) -> bool {
        self.segments.iter().any(|&(_, e)| e == offset)
            || self
                .pf
                .is_some_and(|pf| pf.base <= offset && offset <= pf.limit)
    }

    /// Chooses the next work by SPTF and starts it.
    fn start_next(&mut self, now: f64) {
        if self.active.is_some() {
            return;
        }
        let pressure = self.dirty.len() * 4 >= self.p.write_cache_entries * 3
            || self.dirty_bytes * 4 >= self.p.cache_bytes * 3
            || !self.space_wait.is_empty()
            || !self.flushes.is_empty();
        let with_dirty = self.queue.is_empty() || pressure;
        let ovh = self.p.overhead_ms;
        let mut best: Option<(f64, usize, bool)> = None;
        for (i, q) in self.queue.iter().enumerate() {
            let c = q.cmd;
            let t = if c.op == Op::Read && self.continues(now + ovh, c.offset) {
                now + ovh
            } else {
                self.ready_at(now, c.offset, c.op == Op::Write, ovh)
            };
            let t = t - self.p.sptf_age_weight * (now - q.arrived);
            if best.is_none_or(|b| t < b.0) {
                best = Some((t, i, false));
            }
        }
        if with_dirty {
            for (i, x) in self.dirty.iter().enumerate() {
                let t = self.ready_at(now, x.start, true, 0.0);
                if best.is_none_or(|b| t < b.0) {
                    best = Some((t, i, true));
                }
            }
        }
        match best {
            Some((_, i, false)) => {
                let q = self.queue.swap_remove(i);
                let c = q.cmd;
                let ready = if c.op == Op::Read && self.continues(now + ovh, c.offset) {
                    now + ovh
                } else {
                    self.ready_at(now, c.offset, c.op == Op::Write, ovh)
                };
                self.start_host(now, ready, c);
            }
            Some((ready, i, true)) => {
                let ext = self.dirty.swap_remove(i);
                self.freeze_prefetch(now);
                let mut end = ready + self.transfer_ms(ext.start, ext.end - ext.start);
                if ext.rmw {
                    end += self.p.rev_ms();
                }
                let work = Work::Destage { ext };
                self.active = Some(Active { end, work });
            }
            None => {}
        }
    }

    fn start_host(&mut self, now: f64, ready: f64, cmd: Cmd) {
        let end_off = cmd.offset + cmd.len;
        if cmd.op == Op::Write {
            self.freeze_prefetch(now);
            let mut end = ready + self.transfer_ms(cmd.offset, cmd.len);
            if self.p.format.needs_rmw(cmd.offset, cmd.len) {
                end += self.p.rev_ms();
            }
            self.active = Some(Active {
                end,
                work: Work::Write { cmd },
            });
            return;
        }
        let rate = self.stream_rate(cmd.offset);
        let (seg_start, data_time, stream, head) = if self.continues(ready, cmd.offset) {
            let (s, f) = self.frontier(ready).unwrap_or((cmd.offset, cmd.offset));
            let rest = end_off.saturating_sub(f) as f64 / rate;
            let buffered = cmd.len as f64 / self.p.interface_bytes_per_ms;
            let data_time = ready + rest.max(buffered);
            let head = f.max(end_off) + ((data_time - ready - rest) * rate) as u64;
            (s, data_time, true, head)
        } else {
            let stream = self.is_stream(cmd.offset);
            self.freeze_prefetch(now);
            let data_time = ready + self.transfer_ms(cmd.offset, cmd.len);
            (cmd.offset, data_time, stream, end_off)
        };
        let ra = if stream {
            self.p.seq_readahead_bytes
        } else {
            0
        };
        let ra_end = (end_off + ra).max(head).min(self.p.capacity_bytes);
        let end = data_time + ra_end.saturating_sub(head) as f64 / rate;
        self.acks.push(Done {
            id: cmd.id,
            time: data_time,
        });
        self.pf = None;
        let work = Work::Read {
            seg_start,
            data_end: end_off,
            ra_end,
        };
        self.active = Some(Active { end, work });
    }

    fn complete(&mut self, a: Active, out: &mut Vec<Done>) {
        let now = a.end;
        match a.work {
            Work::Read {
                seg_start,
                data_end,
                ra_end,
            } => {
                self.pf = Some(Prefetch {
                    seg_start,
                    base: ra_end,
                    t0: now,
                    limit: (data_end + self.p.readahead_bytes).max(ra_end),
                });
                self.set_pos(ra_end);
            }
            Work::Write { cmd } => {
                out.push(Done {
                    id: cmd.id,
                    time: now,
                });
                self.set_pos(cmd.offset + cmd.len);
            }
            Work::Destage { ext } => {
                self.dirty_bytes -= ext.end - ext.start;
                self.set_pos(ext.end);
                while let Some(c) = self.space_wait.front().copied() {
                    if !self.has_room(c.len) {
                        break;
                    }
                    self.space_wait.pop_front();
                    self.insert_dirty(&c);
                    self.ack_at(now, &c);
                }
            }
        }
        let writes_pending = self.queue.iter().any(|q| q.cmd.op == Op::Write);
        if self.dirty.is_empty() && self.space_wait.is_empty() && !writes_pending {
            for f in self.flushes.drain(..) {
                out.push(Done {
                    id: f.id,
                    time: now,
                });
            }
        }
    }

    fn set_pos(&mut self, end_off: u64) {
        let pl = self.place(end_off.saturating_sub(1));
        (self.cyl, self.head, self.track) = (pl.cyl, pl.head, pl.track);
    }

    fn refill(&mut self, now: f64) {
        while self.ncq_used() < self.p.ncq_depth {
            match self.backlog.pop_front() {
                Some(c) => self.accept(now, c),
                None => break,
            }
        }
    }
}

impl Device for Hdd {
    fn submit(&mut self, now: f64, cmd: Cmd) {
        if self.ncq_used() >= self.p.ncq_depth || !self.backlog.is_empty() {
            self.backlog.push_back(cmd);
        } else {
            self.accept(now, cmd);
        }
        if cmd.op == Op::Flush {
            self.complete_idle_flush(now);
        }
        self.start_next(now);
    }

    fn next_event(&self) -> Option<f64> {
        let a = self.active.map(|a| a.end);
        let k = self.acks.iter().map(|d| d.time).reduce(f64::min);
        match (a, k) {
            (Some(a), Some(k)) => Some(a.min(k)),
            (a, k) => a.or(k),
        }
    }

    fn advance(&mut self, now: f64, out: &mut Vec<Done>) {
        let mut due: Vec<Done> = Vec::new();
        self.acks.retain(|d| {
            let keep = d.time > now;
            if !keep {
                due.push(*d);
            }
            keep
        });
        due.sort_by(|a, b| a.time.total_cmp(&b.time).then(a.id.cmp(&b.id)));
        out.extend(due);
        if let Some(a) = self.active {
            if a.end <= now {
                self.active = None;
                self.complete(a, out);
            }
        }
        self.refill(now);
        self.start_next(now);
    }

    fn capacity(&self) -> u64 {
        self.p.capacity_bytes
    }

    fn nonrot(&self) -> bool {
        false
    }

    fn outstanding(&self) -> usize {
        self.ncq_used() + self.backlog.len() + self.acks.len()
    }
}

impl Hdd {
    /// A FLUSH with nothing dirty completes after the command overhead.
    fn complete_idle_flush(&mut self, now: f64) {
        let busy_writing = self.queue.iter().any(|q| q.cmd.op == Op::Write)
            || matches!(
                self.active,
                Some(Active {
                    work: Work::Write { .. } | Work::Destage { .. },
                    ..
                })
            );
        if self.dirty.is_empty() && self.space_wait.is_empty() && !busy_writing {
            let t = now + self.p.overhead_ms;
            for f in self.flushes.drain(..) {
                self.acks.push(Done { id: f.id, time: t });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worked_example_of_the_module_comment() {
        let d = Hdd::new(HddParams::wd_re_4tb());
        let off = 150_000_000 * 512;
        let pl = d.place(off);
        let seek = d
            .seek
            .time_ms((f64::from(pl.cyl) * d.seek_scale).round() as u32);
        let ready = d.ready_at(0.0, off, false, 0.25);
        let xfer = d.transfer_ms(off, 4096);
        assert_eq!(
            (pl.zone, pl.cyl, pl.head, pl.sector, pl.track),
            (1, 4882, 8, 384, 48_828)
        );
        assert_eq!((f64::from(pl.cyl) * d.seek_scale).round() as u32, 4712);
        assert!((seek - 2.80).abs() < 0.005, "seek {seek}");
        assert!((ready - 11.257).abs() < 0.001, "ready {ready}");
        assert!((xfer - 0.0217).abs() < 0.0001, "transfer {xfer}");
    }
}
