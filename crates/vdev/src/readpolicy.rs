//! Mirror read policies: which side of a mirror serves a read.
//!
//! The decisions look only at a small [`DiskView`] per side (no simulator types), so a real
//! pool's mirror can call them with what it knows: reads in flight, the end of the last I/O
//! issued (the head position), recent offsets, whether the device is non-rotating and, for
//! a side being resynchronised, the watermark below which it already holds the data.
//!
//! ```text
//! Two sides, a read of 4 KiB at 1 000 MiB:
//!             in flight   last end    queued offsets        centroid
//!   disk 0        2       3 000 MiB   {3 000, 2 990} MiB    2 996.7 MiB
//!   disk 1        1         900 MiB   {  900}        MiB      900   MiB
//!
//!   round-robin   alternates, whatever the state
//!   least-queue   ZFS: in flight + seek penalty (0 if continuing, 2 within 1 MiB, 5 else)
//!                 -> disk 0: 2+5 = 7, disk 1: 1+5 = 6             -> disk 1
//!   load          gmirror: moving average of the queue, −2 continuing, −1 within 1 MiB
//!   md            first side continuing its stream or idle, else nearest head
//!                 -> none idle; |1000−3000| > |1000−900|           -> disk 1
//!   nearest       gflash: continuing (≤ 256 KiB after last end) stays; idle beats busy;
//!                 idle: nearest head; busy: min (queue+1)·|offset − centroid|
//!                 -> disk 0: 3·1996.7 = 5990, disk 1: 2·100 = 200   -> disk 1
//!   auto          cairn: a read continuing a recent stream of any side (one of its last
//!                 8 read ends) goes to the side with fewest commands, continuing side
//!                 −1; else gflash's rules with busy: min (queue+1)·(|offset − centroid| + 1 MiB)
//!                 -> 3·(1996.7+1) > 2·(100+1) MiB                      -> disk 1
//! ```
//!
//! Reads during resync: a side with a watermark serves a read only below it, and only for
//! policies whose implementations allowed it (md, gflash, auto); the ZFS- and
//! gmirror-like policies do not read from a resyncing side at all. Sources: the Linux md
//! raid1 `read_balance`, gmirror's `g_mirror_request_load`, the gflash description and ZFS
//! `vdev_mirror_load` as summarised in the study notes (issue 17); written from those
//! descriptions.

/// What a policy may know about one side of a mirror.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiskView {
    /// I/Os issued to the side and not completed.
    pub inflight: usize,
    /// End offset (bytes) of the last I/O issued: where the head will be.
    pub last_end: u64,
    /// End offset of the last read issued (md's `next_seq_sect`).
    pub stream_end: u64,
    /// Ends of the last few reads issued (several streams on one side), newest last.
    pub recent_ends: Vec<u64>,
    /// Mean of the head position and the offsets in flight, bytes.
    pub centroid: f64,
    /// Moving average of the queue length (gmirror's load).
    pub load: f64,
    pub nonrot: bool,
    /// `Some(w)`: the side is being resynchronised and holds valid data below byte `w`.
    /// `Some(0)` says it holds nothing a read may use (a real mirror also marks a side
    /// that is offline, faulted or missing so); a real mirror, whose resilver copies in
    /// block-tree order rather than by offset, sets `w` per read: above the read when the
    /// resilver already copied it there, else 0.
    pub resync: Option<u64>,
}

/// A read policy.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    RoundRobin,
    LeastQueue,
    Load,
    Md,
    Nearest,
    #[default]
    Auto,
}

/// A `readpolicy` value that names no policy.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad readpolicy '{0}': valid values are auto, round-robin, least-queue, load, md, nearest")]
pub struct BadPolicy(pub String);

impl std::str::FromStr for Policy {
    type Err = BadPolicy;
    fn from_str(s: &str) -> Result<Policy, BadPolicy> {
        Policy::parse(s).ok_or_else(|| BadPolicy(s.to_string()))
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Policy {
    /// Every policy, in table order.
    pub const ALL: [Policy; 6] = [
        Policy::RoundRobin,
        Policy::LeastQueue,
        Policy::Load,
        Policy::Md,
        Policy::Nearest,
        Policy::Auto,
    ];

    /// The property value (`round-robin`, `least-queue`, …).
    pub fn name(self) -> &'static str {
        match self {
            Policy::RoundRobin => "round-robin",
            Policy::LeastQueue => "least-queue",
            Policy::Load => "load",
            Policy::Md => "md",
            Policy::Nearest => "nearest",
            Policy::Auto => "auto",
        }
    }

    /// Parses a property value.
    pub fn parse(s: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == s)
    }

    /// Whether a resyncing side serves reads below its watermark under this policy.
    pub fn reads_from_resyncing(self) -> bool {
        matches!(self, Policy::Md | Policy::Nearest | Policy::Auto)
    }
}

const MIB: u64 = 1 << 20;
/// Read ends remembered per side.
const RECENT: usize = 8;
/// gflash's stream window after a side's last issued offset.
const STREAM_WINDOW: u64 = 256 << 10;

/// True when side `d` may serve a read of `[offset, offset+len)` under `policy`.
pub fn eligible(policy: Policy, d: &DiskView, offset: u64, len: u64) -> bool {
    match d.resync {
        None => true,
        Some(w) => policy.reads_from_resyncing() && offset + len <= w,
    }
}

/// Chooses a side for a read. `rotor` is the caller's counter (round-robin, and ZFS's
/// choice among equally loaded sides). `None` when no side may serve it.
pub fn choose(
    policy: Policy,
    disks: &[DiskView],
    offset: u64,
    len: u64,
    rotor: u64,
) -> Option<usize> {
    let ok: Vec<usize> = (0..disks.len())
        .filter(|&i| eligible(policy, &disks[i], offset, len))
        .collect();
    if ok.len() <= 1 {
        return ok.first().copied();
    }
    let pick = match policy {
        Policy::RoundRobin => ok[(rotor % ok.len() as u64) as usize],
        Policy::LeastQueue => least_queue(disks, &ok, offset, rotor),
        Policy::Load => gmirror_load(disks, &ok, offset),
        Policy::Md => md(disks, &ok, offset),
        Policy::Nearest => gflash(disks, &ok, offset),
        Policy::Auto => auto(disks, &ok, offset),
    };
    Some(pick)
}

fn argmin(ok: &[usize], mut key: impl FnMut(usize) -> f64) -> usize {
    let mut best = (f64::INFINITY, ok[0]);
    for &i in ok {
        let k = key(i);
        if k < best.0 {
            best = (k, i);
        }
    }
    best.1
}

/// ZFS `vdev_mirror_load`: in-flight count plus a seek increment; a random side among ties.
fn least_queue(disks: &[DiskView], ok: &[usize], offset: u64, rotor: u64) -> usize {
    let score = |i: usize| {
        let d = &disks[i];
        let inc = match (
            d.nonrot,
            d.last_end == offset,
            d.last_end.abs_diff(offset) < MIB,
        ) {
            (true, true, _) => 0,
            (true, false, _) => 1,
            (false, true, _) => 0,
            (false, false, true) => 2,
            (false, false, false) => 5,
        };
        d.inflight + inc
    };
    let best = ok.iter().map(|&i| score(i)).min().unwrap_or(0);
    let ties: Vec<usize> = ok.iter().copied().filter(|&i| score(i) == best).collect();
    ties[(mix(rotor) % ties.len() as u64) as usize]
}

/// gmirror `load`: the moving-average load, minus 2 for a read continuing the side's last
/// request and 1 within 1 MiB of it.
fn gmirror_load(disks: &[DiskView], ok: &[usize], offset: u64) -> usize {
    argmin(ok, |i| {
        let d = &disks[i];
        let bonus = if d.last_end == offset {
            2.0
        } else if d.last_end.abs_diff(offset) < MIB {
            1.0
        } else {
            0.0
        };
        d.load - bonus
    })
}

/// Linux md raid1 `read_balance`: the first side that continues a stream or is idle;
/// otherwise the nearest head (shortest queue among SSDs).
fn md(disks: &[DiskView], ok: &[usize], offset: u64) -> usize {
    for &i in ok {
        let d = &disks[i];
        if d.stream_end == offset || d.last_end == offset || d.inflight == 0 {
            return i;
        }
    }
    if ok.iter().any(|&i| disks[i].nonrot) {
        return argmin(ok, |i| disks[i].inflight as f64);
    }
    argmin(ok, |i| disks[i].last_end.abs_diff(offset) as f64)
}

/// gflash: continuing stays; idle beats busy; nearest head among idle; among busy the
/// smallest (queue + 1) × distance to the centroid.
fn gflash(disks: &[DiskView], ok: &[usize], offset: u64) -> usize {
    if let Some(i) = continuing(disks, ok, offset) {
        return i;
    }
    if let Some(i) = nearest_idle(disks, ok, offset) {
        return i;
    }
    argmin(ok, |i| {
        let d = &disks[i];
        (d.inflight + 1) as f64 * (offset as f64 - d.centroid).abs()
    })
}

fn continuing(disks: &[DiskView], ok: &[usize], offset: u64) -> Option<usize> {
    ok.iter()
        .copied()
        .find(|&i| within_stream(disks[i].last_end, offset))
}

/// A read at `offset` continues a stream that ended at `end`.
fn within_stream(end: u64, offset: u64) -> bool {
    offset >= end && offset - end <= STREAM_WINDOW
}

/// It continues the side's last read or one of its recent ones.
fn continues_recent(d: &DiskView, offset: u64) -> bool {
    within_stream(d.last_end, offset) || d.recent_ends.iter().any(|&e| within_stream(e, offset))
}

/// Among idle sides, the one whose head is nearest (`None` when every side is busy).
fn nearest_idle(disks: &[DiskView], ok: &[usize], offset: u64) -> Option<usize> {
    let idle: Vec<usize> = ok
        .iter()
        .copied()
        .filter(|&i| disks[i].inflight == 0)
        .collect();
    (!idle.is_empty()).then(|| argmin(&idle, |i| disks[i].last_end.abs_diff(offset) as f64))
}

/// cairn's default. A read continuing one of the recent streams of any side (within
/// 256 KiB after one of its last 8 read ends) goes to the side with the fewest commands, a
/// continuing side counting one command less: streams spread over both sides, whose drives
/// read ahead, instead of queueing behind each other. Otherwise gflash's rules: idle sides
/// first, nearest head; busy sides: min (queue + 1) · (|offset − centroid| + 1 MiB). SSDs:
/// shortest queue.
fn auto(disks: &[DiskView], ok: &[usize], offset: u64) -> usize {
    if ok.iter().any(|&i| continues_recent(&disks[i], offset)) {
        // streams: the side with the fewest commands, a continuing side winning ties
        return argmin(ok, |i| {
            let d = &disks[i];
            d.inflight as f64
                + if continues_recent(d, offset) {
                    0.0
                } else {
                    1.0
                }
        });
    }
    if ok.iter().all(|&i| disks[i].nonrot) {
        return argmin(ok, |i| disks[i].inflight as f64);
    }
    if let Some(i) = nearest_idle(disks, ok, offset) {
        return i;
    }
    argmin(ok, |i| {
        let d = &disks[i];
        (d.inflight + 1) as f64 * ((offset as f64 - d.centroid).abs() + MIB as f64)
    })
}

/// A 64-bit mix (splitmix64) for ZFS's random choice among ties.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The per-side state a mirror keeps for its policy: it records every I/O issued and
/// completed and produces the [`DiskView`]s.
#[derive(Clone, Debug, Default)]
pub struct MirrorState {
    views: Vec<DiskView>,
    queued: Vec<Vec<u64>>,
    rotor: u64,
}

impl MirrorState {
    /// State for `n` sides; `nonrot[i]` for SSD sides.
    pub fn new(nonrot: &[bool]) -> MirrorState {
        MirrorState {
            views: nonrot
                .iter()
                .map(|&n| DiskView {
                    nonrot: n,
                    ..DiskView::default()
                })
                .collect(),
            queued: vec![Vec::new(); nonrot.len()],
            rotor: 0,
        }
    }

    /// The current views.
    pub fn views(&self) -> &[DiskView] {
        &self.views
    }

    /// Sets or clears a side's resync watermark.
    pub fn set_resync(&mut self, side: usize, watermark: Option<u64>) {
        if let Some(v) = self.views.get_mut(side) {
            v.resync = watermark;
        }
    }

    /// Chooses a side for a read with `policy`.
    pub fn choose(&mut self, policy: Policy, offset: u64, len: u64) -> Option<usize> {
        self.rotor = self.rotor.wrapping_add(1);
        choose(policy, &self.views, offset, len, self.rotor)
    }

    /// As [`MirrorState::choose`], but the sides are offered starting at a rotating one,
    /// so sides the policy finds equally good take turns (a real mirror: every side is
    /// read, and latent damage on any of them is found; ZFS picks among ties at random).
    pub fn choose_rotated(&mut self, policy: Policy, offset: u64, len: u64) -> Option<usize> {
        self.rotor = self.rotor.wrapping_add(1);
        let n = self.views.len();
        if n == 0 || policy == Policy::RoundRobin {
            // round-robin rotates by itself (rotating the views too would cancel it)
            return choose(policy, &self.views, offset, len, self.rotor);
        }
        let start = (self.rotor % n as u64) as usize;
        let views: Vec<DiskView> = (0..n)
            .map(|i| self.views[(start + i) % n].clone())
            .collect();
        choose(policy, &views, offset, len, self.rotor).map(|i| (start + i) % n)
    }

    /// Records an I/O issued to `side`.
    pub fn issued(&mut self, side: usize, offset: u64, len: u64, read: bool) {
        let Some(v) = self.views.get_mut(side) else {
            return;
        };
        v.inflight += 1;
        v.last_end = offset + len;
        if read {
            v.stream_end = offset + len;
            if v.recent_ends.len() >= RECENT {
                v.recent_ends.remove(0);
            }
            v.recent_ends.push(offset + len);
        }
        self.queued[side].push(offset);
        self.update(side);
        for v in &mut self.views {
            v.load = (v.inflight as f64 + 7.0 * v.load) / 8.0;
        }
    }

    /// Records the completion of an I/O issued at `offset` to `side`.
    pub fn completed(&mut self, side: usize, offset: u64) {
        let Some(v) = self.views.get_mut(side) else {
            return;
        };
        v.inflight = v.inflight.saturating_sub(1);
        if let Some(p) = self.queued[side].iter().position(|&o| o == offset) {
            self.queued[side].swap_remove(p);
        }
        self.update(side);
    }

    fn update(&mut self, side: usize) {
        let q = &self.queued[side];
        let v = &mut self.views[side];
        let sum: f64 = q.iter().map(|&o| o as f64).sum::<f64>() + v.last_end as f64;
        v.centroid = sum / (q.len() + 1) as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> Vec<DiskView> {
        let mib = MIB as f64;
        vec![
            DiskView {
                inflight: 2,
                last_end: 3000 * MIB,
                centroid: (3000.0 + 3000.0 + 2990.0) / 3.0 * mib,
                ..DiskView::default()
            },
            DiskView {
                inflight: 1,
                last_end: 900 * MIB,
                centroid: 900.0 * mib,
                ..DiskView::default()
            },
        ]
    }

    #[test]
    fn worked_example_of_the_module_comment() {
        let d = example();
        for p in [
            Policy::LeastQueue,
            Policy::Md,
            Policy::Nearest,
            Policy::Auto,
        ] {
            assert_eq!(choose(p, &d, 1000 * MIB, 4096, 0), Some(1), "{p:?}");
        }
        assert_ne!(
            choose(Policy::RoundRobin, &d, 0, 4096, 0),
            choose(Policy::RoundRobin, &d, 0, 4096, 1)
        );
    }

    #[test]
    fn md_uses_the_first_idle_disk_and_streams_stay() {
        let mut d = vec![DiskView::default(), DiskView::default()];
        d[1].last_end = 5 * MIB;
        assert_eq!(choose(Policy::Md, &d, 5 * MIB + 4096, 4096, 0), Some(0));
        d[0].inflight = 1;
        d[1].inflight = 1;
        d[1].stream_end = 8 * MIB;
        assert_eq!(choose(Policy::Md, &d, 8 * MIB, 4096, 0), Some(1));
    }

    #[test]
    fn resyncing_side_serves_only_below_its_watermark_and_only_for_some_policies() {
        let mut d = vec![DiskView::default(), DiskView::default()];
        d[0].inflight = 5;
        d[1].resync = Some(100 * MIB);
        for p in Policy::ALL {
            let below = choose(p, &d, 10 * MIB, 4096, 7);
            let above = choose(p, &d, 200 * MIB, 4096, 7);
            assert_eq!(above, Some(0), "{p:?}");
            if p.reads_from_resyncing() {
                assert_eq!(below, Some(1), "{p:?}");
            } else {
                assert_eq!(below, Some(0), "{p:?}");
            }
        }
    }

    #[test]
    fn property_values_parse_print_and_bad_ones_list_every_policy() {
        for p in Policy::ALL {
            assert_eq!(p.name().parse::<Policy>(), Ok(p));
            assert_eq!(p.to_string(), p.name());
        }
        assert_eq!(Policy::default(), Policy::Auto);
        let msg = "fastest".parse::<Policy>().unwrap_err().to_string();
        for p in Policy::ALL {
            assert!(msg.contains(p.name()), "{msg}");
        }
    }

    #[test]
    fn state_tracks_inflight_centroid_and_load() {
        let mut s = MirrorState::new(&[false, false]);
        s.issued(0, 10 * MIB, 4096, true);
        s.issued(0, 20 * MIB, 4096, true);
        assert_eq!(s.views()[0].inflight, 2);
        assert!(s.views()[0].load > 0.0);
        s.completed(0, 10 * MIB);
        assert_eq!(s.views()[0].inflight, 1);
        let c = s.views()[0].centroid;
        assert!((c - ((20 * MIB) as f64 + (20 * MIB + 4096) as f64) / 2.0).abs() < 1.0);
    }
}
