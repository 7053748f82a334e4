//! `dd` of one file on a layout of simulated disks: the file's records are mapped to
//! per-disk requests with the pool's own geometry (`cairn-geometry`: the RAID-Z column map
//! and `asize`), each disk is driven with its requests, and the slowest disk sets the time.
//!
//! ```text
//! raidz2 of 5, ashift 9, records of 128 KiB (256 sectors of 512 B):
//!   data columns = 5 − 2 = 3: q = 256 div 3 = 85 rows, r = 1 -> bc = 3 big columns,
//!   tot = 256 + 2·86 = 428 sectors, asize = roundup(428, 3) = 429 (one skip sector).
//!   Record k sits at vdev sector 429·k; its columns go to children (f + c) mod 5:
//!   86 sectors (44 032 B) on 3 children and 85 (43 520 B) on 2 — neither a multiple of
//!   4 KiB, so on 512e disks the write cache's extents end inside physical sectors and
//!   destaging them costs a read-modify-write revolution (the MacZFS study's ashift 9
//!   penalty). With ashift 12 every column is whole 4 KiB sectors.
//! ```
//!
//! Model: records go to the groups in turn and are allocated one after another in each
//! group; writes to one disk that touch are merged up to 1 MiB (ZFS's aggregation), each
//! disk has at most 10 commands in flight (ZFS's per-vdev queue) and ends with a FLUSH (the
//! transaction group's sync). The read starts from cold caches and reads the data columns
//! (mirrors: runs of 128 records, 16 MiB, alternate over the sides). The disks do not wait for each other
//! (no transaction-group barriers), compression and metadata are not modelled.

use cairn_geometry::raidz_map;

use crate::device::{Cmd, Device, Done, Op};
use crate::spec::{DiskModel, GroupKind, LayoutSpec};

/// ZFS's default record size.
pub const RECORD: u64 = 128 << 10;
/// Labels and boot area before a leaf's data (as `LEAF_DATA_START` in the pool).
const DATA_START: u64 = 4 << 20;
const MAX_MERGE: u64 = 1 << 20;
const QUEUE: usize = 10;
/// Records read in a row from one side of a mirror (16 MiB).
const MIRROR_RUN: u64 = 128;

/// One dd run's result.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DdResult {
    pub layout: String,
    pub disks: usize,
    pub ashift: u32,
    pub bs: u64,
    pub size: u64,
    pub write_mbs: f64,
    pub read_mbs: f64,
}

/// Per-disk request lists (offset, length) for writing (`write`) or reading a file of
/// `size` bytes.
pub fn requests(l: &LayoutSpec, ashift: u32, size: u64, write: bool) -> Vec<Vec<(u64, u64)>> {
    let n = l.groups * l.width;
    let mut per: Vec<Vec<(u64, u64)>> = vec![Vec::new(); n];
    let mut next = vec![0u64; l.groups];
    let records = size.div_ceil(RECORD);
    let sector = 1u64 << ashift;
    for r in 0..records {
        let g = (r % l.groups as u64) as usize;
        let base = g * l.width;
        match l.kind {
            GroupKind::Raidz(p) => {
                let map = raidz_map(next[g], RECORD, l.width, p, ashift);
                let cols = if write {
                    &map.columns[..]
                } else {
                    map.data_columns()
                };
                for c in cols {
                    push(&mut per[base + c.child], DATA_START + c.offset, c.size);
                }
                next[g] += map.asize;
            }
            GroupKind::Mirror => {
                let len = RECORD.div_ceil(sector) * sector;
                if write {
                    for side in 0..l.width {
                        push(&mut per[base + side], DATA_START + next[g], len);
                    }
                } else {
                    // runs of MIRROR_RUN records per side: a disk skips the other sides'
                    // runs with a short seek instead of reading past them
                    let side = ((r / l.groups as u64 / MIRROR_RUN) % l.width as u64) as usize;
                    push(&mut per[base + side], DATA_START + next[g], len);
                }
                next[g] += len;
            }
            GroupKind::Stripe => {
                let len = RECORD.div_ceil(sector) * sector;
                push(&mut per[base], DATA_START + next[g], len);
                next[g] += len;
            }
        }
    }
    per
}

/// Appends a request, merging it into the previous one when they touch.
fn push(list: &mut Vec<(u64, u64)>, offset: u64, len: u64) {
    if let Some(last) = list.last_mut() {
        if last.0 + last.1 == offset && last.1 + len <= MAX_MERGE {
            last.1 += len;
            return;
        }
    }
    list.push((offset, len));
}

/// Drives one device with `reqs` (at most `QUEUE` in flight), then a FLUSH when writing;
/// returns the virtual time (ms) at which the last one completed.
pub fn drive(dev: &mut dyn Device, reqs: &[(u64, u64)], write: bool) -> f64 {
    let op = if write { Op::Write } else { Op::Read };
    let (mut next, mut inflight, mut now, mut flushed) = (0usize, 0usize, 0.0f64, !write);
    let mut out: Vec<Done> = Vec::new();
    loop {
        while inflight < QUEUE && next < reqs.len() {
            let (offset, len) = reqs[next];
            dev.submit(
                now,
                Cmd {
                    id: next as u64,
                    op,
                    offset,
                    len,
                },
            );
            next += 1;
            inflight += 1;
        }
        if next == reqs.len() && inflight == 0 && !flushed {
            dev.submit(
                now,
                Cmd {
                    id: u64::MAX,
                    op: Op::Flush,
                    offset: 0,
                    len: 0,
                },
            );
            inflight += 1;
            flushed = true;
        }
        let Some(t) = dev.next_event() else {
            return now;
        };
        now = t;
        out.clear();
        dev.advance(now, &mut out);
        inflight = inflight.saturating_sub(out.len());
    }
}

/// What to write: a file of `size` bytes with dd's block size `bs` on a pool of sector
/// size `1 << ashift`; `host_write_mbs` and `host_read_mbs` cap the rates (the host's own
/// ceilings: checksums, copies, the transaction-group sync, the HBA), `None` for no cap.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DdJob {
    pub ashift: u32,
    pub bs: u64,
    pub size: u64,
    pub host_write_mbs: Option<f64>,
    pub host_read_mbs: Option<f64>,
}

/// Writes then reads a file on `disks` laid out as `l` (named `name`).
pub fn run(disks: &[DiskModel], l: &LayoutSpec, name: &str, job: DdJob) -> DdResult {
    let DdJob {
        ashift,
        bs,
        size,
        host_write_mbs,
        host_read_mbs,
    } = job;
    let n = l.groups * l.width;
    let phase = |write: bool| {
        let reqs = requests(l, ashift, size, write);
        let mut worst = 0.0f64;
        for (d, r) in disks.iter().take(n).zip(&reqs) {
            let mut dev = d.build();
            worst = worst.max(drive(dev.as_mut(), r, write));
        }
        let mbs = if worst > 0.0 {
            size as f64 / 1e6 / (worst / 1000.0)
        } else {
            0.0
        };
        let cap = if write { host_write_mbs } else { host_read_mbs };
        match cap {
            Some(cap) if cap > 0.0 => mbs.min(cap),
            _ => mbs,
        }
    };
    DdResult {
        layout: name.to_string(),
        disks: disks.len(),
        ashift,
        bs,
        size,
        write_mbs: phase(true),
        read_mbs: phase(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{parse_disks, parse_layout};

    #[test]
    fn worked_example_of_the_module_comment() {
        let m = raidz_map(0, RECORD, 5, 2, 9);
        assert_eq!(m.asize >> 9, 429);
        let mut sizes: Vec<u64> = m.columns.iter().map(|c| c.size).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, vec![43_520, 43_520, 44_032, 44_032, 44_032]);
        let l = parse_layout("raidz2", 5).unwrap_or(LayoutSpec {
            groups: 0,
            kind: GroupKind::Stripe,
            width: 0,
        });
        let per = requests(&l, 9, 4 * RECORD, true);
        let bytes: u64 = per.iter().flatten().map(|r| r.1).sum();
        assert_eq!(bytes, 4 * (428 << 9));
    }

    #[test]
    fn ashift_9_on_512e_writes_slower_than_ashift_12() {
        let disks = parse_disks("5x2TB,512e").unwrap_or_default();
        let l = parse_layout("raidz2", 5).unwrap_or(LayoutSpec {
            groups: 0,
            kind: GroupKind::Stripe,
            width: 0,
        });
        let job = |ashift| DdJob {
            ashift,
            bs: 1 << 20,
            size: 1 << 30,
            host_write_mbs: None,
            host_read_mbs: None,
        };
        let a9 = run(&disks, &l, "raidz2", job(9));
        let a12 = run(&disks, &l, "raidz2", job(12));
        println!("{a9:?}\n{a12:?}");
        assert!(
            a9.write_mbs < 0.8 * a12.write_mbs,
            "ashift 9 {a9:?} vs 12 {a12:?}"
        );
        // 3 data disks streaming: reads near 3 × a 2 TB disk's outer rate
        assert!(a12.read_mbs > 300.0 && a12.read_mbs < 600.0, "{a12:?}");
    }
}
