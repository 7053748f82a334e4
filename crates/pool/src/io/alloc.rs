//! The allocator: free space of each top-level vdev, kept per metaslab in range trees.
//!
//! ```text
//!  vdev address space: | ms 0 | ms 1 | ms 2 | … | ms n-1 | remainder (unused) |
//!  each metaslab:      free segments  BTreeMap<start, end>   (merged on free)
//! ```
//! Metaslab count and size come from the geometry crate (the same rule `plan` uses).
//! Metadata (indirect blocks, dnodes, tables, space maps: small and of varying size) is
//! allocated from the last metaslab backward, data from the first forward: freed metadata
//! leaves holes next to other metadata, not between data blocks where they would be too
//! small to reuse.
//! Allocation is first-fit from a cursor that moves forward, so a stream of writes lands
//! contiguously on the vdev (sequential leaf I/O). New data rotates over top-level vdevs
//! in runs of `ALIQUOT` bytes, skipping vdevs much fuller than the emptiest one.
//!
//! The allocated extents are persisted as a *space map* (`encode_space_map`): a sorted list
//! of (offset, length) per vdev, rewritten condensed at every txg sync.

use std::collections::BTreeMap;

use cairn_geometry::{metaslab_layout, ZfsEra};

use cairn_codec::{DecodeError, Reader};

use crate::io::bp::Dva;

/// Bytes written to one top-level vdev before moving to the next (ZFS's metaslab_aliquot).
const ALIQUOT: u64 = 1 << 20;

#[derive(Clone, Debug)]
struct Metaslab {
    start: u64,
    size: u64,
    /// start → end of each free segment.
    free: BTreeMap<u64, u64>,
    free_bytes: u64,
}

impl Metaslab {
    fn new(start: u64, size: u64) -> Metaslab {
        let mut free = BTreeMap::new();
        free.insert(start, start + size);
        Metaslab {
            start,
            size,
            free,
            free_bytes: size,
        }
    }

    /// First free segment of at least `len` bytes at or after `from`, then from the start.
    fn alloc(&mut self, len: u64, from: u64, align: u64) -> Option<u64> {
        let pick = |free: &BTreeMap<u64, u64>, lo: u64| {
            free.range(..).find_map(|(&s, &e)| {
                let s2 = s.max(lo).next_multiple_of(align);
                (e > s2 && e - s2 >= len && s2 >= lo).then_some(s2)
            })
        };
        let at = pick(&self.free, from).or_else(|| pick(&self.free, self.start))?;
        debug_assert!(
            at >= self.start && at + len <= self.start + self.size && at.is_multiple_of(align),
            "allocation [{at}, +{len}) lies in its metaslab and is aligned to {align}"
        );
        self.remove(at, len);
        Some(at)
    }

    /// Marks [at, at+len) allocated; it must be free.
    fn remove(&mut self, at: u64, len: u64) {
        let (&s, &e) = self
            .free
            .range(..=at)
            .next_back()
            .expect("allocated range lies in a free segment");
        assert!(at >= s && at + len <= e, "range [{at}, +{len}) is not free");
        self.free.remove(&s);
        if s < at {
            self.free.insert(s, at);
        }
        if at + len < e {
            self.free.insert(at + len, e);
        }
        self.free_bytes -= len;
    }

    /// Returns [at, at+len) to the free tree, merging with neighbours.
    fn insert(&mut self, at: u64, len: u64) {
        let mut start = at;
        let mut end = at + len;
        if let Some((&s, &e)) = self.free.range(..=at).next_back() {
            assert!(e <= at, "double free of [{at}, +{len})");
            if e == at {
                start = s;
                self.free.remove(&s);
            }
        }
        if let Some((&s, &e)) = self.free.range(at..).next() {
            assert!(s >= end, "double free of [{at}, +{len})");
            if s == end {
                end = e;
                self.free.remove(&s);
            }
        }
        self.free.insert(start, end);
        self.free_bytes += len;
        debug_assert!(
            self.free_bytes <= self.size,
            "a metaslab never has more free bytes than it holds"
        );
    }
}

/// Free space of one top-level vdev.
#[derive(Clone, Debug)]
pub struct VdevAllocator {
    metaslabs: Vec<Metaslab>,
    ms_shift: u32,
    /// Sector size: every allocation is aligned to it.
    sector: u64,
    /// Where the next allocation starts looking (keeps writes sequential).
    cursor: u64,
    /// A log device: only intent-log blocks are allocated here (`Allocator::alloc_log`).
    pub log: bool,
    /// A log device on its way out of the pool in use (`cairn remove`): nothing more is
    /// allocated here.
    pub retired: bool,
}

impl VdevAllocator {
    /// All space free: metaslabs per the geometry module's rule.
    pub fn new(vdev_asize: u64, ashift: u32) -> VdevAllocator {
        let layout = metaslab_layout(vdev_asize, ZfsEra::Cairn);
        let metaslabs = (0..layout.count)
            .map(|i| Metaslab::new(i * layout.size, layout.size))
            .collect();
        VdevAllocator {
            metaslabs,
            ms_shift: layout.shift,
            sector: 1 << ashift,
            cursor: 0,
            log: false,
            retired: false,
        }
    }

    /// This vdev's allocator over the vdev grown to `vdev_asize` (`cairn online -e` on a
    /// pool in use): metaslabs as `new` lays them out for the new size, with the same
    /// extents allocated (each lies inside one old metaslab, and a larger vdev's metaslabs
    /// are the same size or a power-of-two multiple, aligned alike: as at an open).
    pub fn regrown(&self, vdev_asize: u64) -> Result<VdevAllocator, String> {
        let mut grown = VdevAllocator::new(vdev_asize, self.sector.trailing_zeros());
        grown.log = self.log;
        grown.retired = self.retired;
        for (offset, len) in self.allocated_extents() {
            grown.claim(offset, len)?;
        }
        Ok(grown)
    }

    /// Total bytes in metaslabs (zpool list SIZE for this vdev).
    pub fn size(&self) -> u64 {
        self.metaslabs.iter().map(|m| m.size).sum()
    }

    pub fn free_bytes(&self) -> u64 {
        self.metaslabs.iter().map(|m| m.free_bytes).sum()
    }

    pub fn allocated_bytes(&self) -> u64 {
        self.size() - self.free_bytes()
    }

    /// Allocates `len` bytes; `avoid` = a metaslab to stay away from (ditto copies);
    /// `metadata` = from the metadata end of the vdev.
    pub fn alloc(&mut self, len: u64, avoid: Option<usize>, metadata: bool) -> Option<u64> {
        assert!(
            len > 0 && len.is_multiple_of(self.sector),
            "allocation of {len} bytes is not sector-sized"
        );
        if metadata {
            return self.alloc_metadata(len, avoid);
        }
        let n = self.metaslabs.len();
        let first = ((self.cursor >> self.ms_shift) as usize).min(n.saturating_sub(1));
        let first = match avoid {
            Some(a) if a == first => (first + n / 2) % n.max(1),
            _ => first,
        };
        for i in 0..n {
            let m = (first + i) % n;
            if Some(m) == avoid && n > 1 {
                continue;
            }
            let ms = &mut self.metaslabs[m];
            if ms.free_bytes < len {
                continue;
            }
            let from = if i == 0 {
                self.cursor.max(ms.start)
            } else {
                ms.start
            };
            if let Some(at) = ms.alloc(len, from, self.sector) {
                if avoid.is_none() {
                    self.cursor = at + len;
                }
                return Some(at);
            }
        }
        None
    }

    /// Metadata: metaslabs from the last one backward, first fit inside each.
    fn alloc_metadata(&mut self, len: u64, avoid: Option<usize>) -> Option<u64> {
        let n = self.metaslabs.len();
        for m in (0..n).rev() {
            if Some(m) == avoid && n > 1 {
                continue;
            }
            let ms = &mut self.metaslabs[m];
            if ms.free_bytes < len {
                continue;
            }
            if let Some(at) = ms.alloc(len, ms.start, self.sector) {
                return Some(at);
            }
        }
        None
    }

    /// Index of the metaslab holding `offset`.
    pub fn metaslab_of(&self, offset: u64) -> usize {
        (offset >> self.ms_shift) as usize
    }

    /// Returns a range to the free space.
    pub fn free(&mut self, offset: u64, len: u64) {
        let m = self.metaslab_of(offset);
        debug_assert!(
            offset + len <= self.metaslabs[m].start + self.metaslabs[m].size,
            "freed range [{offset}, +{len}) lies in one metaslab"
        );
        self.metaslabs[m].insert(offset, len);
    }

    /// Checks that [offset, offset+len) lies inside one metaslab and is allocated whole:
    /// what a deferred free read from disk must be before it may be freed at a sync.
    pub fn check_allocated(&self, offset: u64, len: u64) -> Result<(), String> {
        let end = offset
            .checked_add(len)
            .ok_or_else(|| format!("range [{offset}, +{len}) overflows"))?;
        let ms = self
            .metaslabs
            .get(self.metaslab_of(offset))
            .ok_or_else(|| format!("range at {offset} lies past the last metaslab"))?;
        if len == 0 || end > ms.start + ms.size {
            return Err(format!(
                "range [{offset}, +{len}) crosses a metaslab boundary"
            ));
        }
        let touches_free = ms
            .free
            .range(..end)
            .next_back()
            .is_some_and(|(_, &e)| e > offset);
        if touches_free {
            return Err(format!("range [{offset}, +{len}) is not allocated"));
        }
        Ok(())
    }

    /// Marks a range allocated (when loading a space map).
    pub fn claim(&mut self, offset: u64, len: u64) -> Result<(), String> {
        let m = self.metaslab_of(offset);
        let ms = self
            .metaslabs
            .get_mut(m)
            .ok_or_else(|| format!("extent at {offset} lies past the last metaslab"))?;
        if offset + len > ms.start + ms.size {
            return Err(format!(
                "extent [{offset}, +{len}) crosses a metaslab boundary"
            ));
        }
        let free_here = ms
            .free
            .range(..=offset)
            .next_back()
            .is_some_and(|(&s, &e)| s <= offset && offset + len <= e);
        if !free_here {
            return Err(format!("extent [{offset}, +{len}) is allocated twice"));
        }
        ms.remove(offset, len);
        Ok(())
    }

    /// Allocated extents, sorted (the space map).
    pub fn allocated_extents(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for ms in &self.metaslabs {
            let mut pos = ms.start;
            for (&s, &e) in &ms.free {
                if s > pos {
                    out.push((pos, s - pos));
                }
                pos = e;
            }
            if pos < ms.start + ms.size {
                out.push((pos, ms.start + ms.size - pos));
            }
        }
        out
    }
}

/// Free space of the whole pool.
#[derive(Clone, Debug)]
pub struct Allocator {
    pub vdevs: Vec<VdevAllocator>,
    rotor: usize,
    rotor_bytes: u64,
}

impl Allocator {
    pub fn new(vdevs: Vec<VdevAllocator>) -> Allocator {
        Allocator {
            vdevs,
            rotor: 0,
            rotor_bytes: 0,
        }
    }

    /// Bytes allocated on all vdevs (zpool list ALLOC).
    pub fn allocated_bytes(&self) -> u64 {
        self.vdevs.iter().map(|v| v.allocated_bytes()).sum()
    }

    /// Allocates `copies` DVAs for a block; `asize_of(vdev)` gives its size on each vdev.
    /// Copies go to different top-level vdevs where there are enough, else to distant
    /// metaslabs of the same one.
    pub fn alloc_block(
        &mut self,
        copies: usize,
        asize_of: &dyn Fn(usize) -> u64,
        metadata: bool,
    ) -> Option<[Dva; 3]> {
        assert!((1..=3).contains(&copies));
        let mut dvas = [Dva::default(); 3];
        let first = self.pick_vdev();
        let mut used_vdevs: Vec<usize> = Vec::new();
        for c in 0..copies {
            // A further copy on a vdev that already holds one goes to another metaslab when
            // there is room there, else anywhere on it (as ZFS's ditto blocks fall back).
            let mut placed =
                self.place_copy(&dvas[..c], first + c, &used_vdevs, asize_of, metadata, true);
            if placed.is_none() {
                placed = self.place_copy(
                    &dvas[..c],
                    first + c,
                    &used_vdevs,
                    asize_of,
                    metadata,
                    false,
                );
            }
            match placed {
                Some(d) => {
                    used_vdevs.push(d.vdev as usize);
                    dvas[c] = d;
                }
                None => {
                    for d in dvas.iter().filter(|d| !d.is_empty()) {
                        self.vdevs[d.vdev as usize].free(d.offset, d.asize);
                    }
                    return None;
                }
            }
        }
        if !metadata {
            self.rotor_bytes += dvas[0].asize;
        }
        Some(dvas)
    }

    /// Places one copy, preferring vdevs without a copy; `spread` keeps it off the
    /// metaslabs of earlier copies on the same vdev.
    fn place_copy(
        &mut self,
        earlier: &[Dva],
        start: usize,
        used_vdevs: &[usize],
        asize_of: &dyn Fn(usize) -> u64,
        metadata: bool,
        spread: bool,
    ) -> Option<Dva> {
        let n = self.vdevs.len();
        let data_vdevs = self.vdevs.iter().filter(|v| !v.log).count();
        for k in 0..n {
            let v = (start + k) % n;
            if self.vdevs[v].log || (used_vdevs.contains(&v) && used_vdevs.len() < data_vdevs) {
                continue;
            }
            let len = asize_of(v);
            let avoid = if spread {
                earlier
                    .iter()
                    .find(|d| d.vdev as usize == v)
                    .map(|d| self.vdevs[v].metaslab_of(d.offset))
            } else {
                None
            };
            if let Some(offset) = self.vdevs[v].alloc(len, avoid, metadata) {
                return Some(Dva {
                    vdev: v as u32,
                    offset,
                    asize: len,
                });
            }
        }
        None
    }

    /// The vdev for the next block: stay on the rotor for ALIQUOT bytes, skip full ones.
    fn pick_vdev(&mut self) -> usize {
        let n = self.vdevs.len();
        if self.rotor_bytes >= ALIQUOT {
            self.rotor = (self.rotor + 1) % n;
            self.rotor_bytes = 0;
        }
        let frac = |v: &VdevAllocator| v.free_bytes() as f64 / v.size().max(1) as f64;
        let best = self
            .vdevs
            .iter()
            .filter(|v| !v.log)
            .map(frac)
            .fold(0.0, f64::max);
        for k in 0..n {
            let v = (self.rotor + k) % n;
            if !self.vdevs[v].log && frac(&self.vdevs[v]) >= best * 0.5 {
                if k != 0 {
                    self.rotor = v;
                    self.rotor_bytes = 0;
                }
                return v;
            }
        }
        self.rotor
    }

    pub fn free(&mut self, dva: &Dva) {
        self.vdevs[dva.vdev as usize].free(dva.offset, dva.asize);
    }

    /// One copy of an intent-log block on a log device that `usable` accepts (in turn, so
    /// several log devices share the load); None when there is none or all are full.
    pub fn alloc_log(
        &mut self,
        asize_of: &dyn Fn(usize) -> u64,
        usable: &dyn Fn(usize) -> bool,
    ) -> Option<Dva> {
        let logs: Vec<usize> = (0..self.vdevs.len())
            .filter(|&v| self.vdevs[v].log && !self.vdevs[v].retired && usable(v))
            .collect();
        for k in 0..logs.len() {
            let v = logs[(self.rotor + k) % logs.len()];
            let len = asize_of(v);
            if let Some(offset) = self.vdevs[v].alloc(len, None, false) {
                return Some(Dva {
                    vdev: v as u32,
                    offset,
                    asize: len,
                });
            }
        }
        None
    }
}

/// Encodes the allocated extents of every vdev plus deferred frees (txg, dva). Offsets and
/// lengths are multiples of 512 B and stored in those units as LEB128 varints, offsets as
/// the gap after the previous extent, so a fragmented map costs ~4 bytes per extent:
/// `magic u32 | version u32 | nvdevs u32 | per vdev: count, (gap, len)… | ndeferred,
///  (txg, vdev, offset, asize)…` (all after `nvdevs` are varints).
pub fn encode_space_map(alloc: &Allocator, deferred: &[(u64, Dva)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&SPACE_MAP_MAGIC.to_le_bytes());
    out.extend_from_slice(&SPACE_MAP_VERSION.to_le_bytes());
    out.extend_from_slice(&(alloc.vdevs.len() as u32).to_le_bytes());
    for v in &alloc.vdevs {
        let ext = v.allocated_extents();
        put_varint(&mut out, ext.len() as u64);
        let mut prev_end = 0u64;
        for (o, l) in ext {
            put_varint(&mut out, (o - prev_end) >> 9);
            put_varint(&mut out, l >> 9);
            prev_end = o + l;
        }
    }
    put_varint(&mut out, deferred.len() as u64);
    for (txg, d) in deferred {
        put_varint(&mut out, *txg);
        put_varint(&mut out, u64::from(d.vdev));
        put_varint(&mut out, d.offset >> 9);
        put_varint(&mut out, d.asize >> 9);
    }
    out
}

/// 0x5350_4d31, "SPM1" as a number: the bytes on disk are "1MPS" (no version digit at the
/// end, so only the version field says a map is newer).
const SPACE_MAP_MAGIC: u32 = 0x5350_4d31;
const SPACE_MAP_VERSION: u32 = 2;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Loads a space map into fresh allocators; returns the deferred frees. Every extent is
/// checked, so a damaged map is an error (what is wrong, at which byte), never a panic or a
/// double allocation; a map newer than this code is `DecodeKind::NewerVersion`.
pub fn decode_space_map(buf: &[u8], alloc: &mut Allocator) -> Result<Vec<(u64, Dva)>, DecodeError> {
    let mut r = Reader::new(buf, "space map");
    r.magic(&SPACE_MAP_MAGIC.to_le_bytes())?;
    r.version(SPACE_MAP_VERSION, SPACE_MAP_VERSION)?;
    let nvdevs = r.u32()? as usize;
    // Fewer vdevs than the pool: vdevs added (`cairn add`) since it was written are empty.
    // More: the last ones were log devices removed since (`cairn remove`), which must be.
    let units = |r: &mut Reader| -> Result<u64, DecodeError> {
        let v = varint(r)?;
        v.checked_mul(512)
            .ok_or_else(|| r.err(format!("extent out of range ({v} units)")))
    };
    let present = alloc.vdevs.len();
    for i in 0..nvdevs {
        let count = varint(&mut r)?;
        let Some(v) = alloc.vdevs.get_mut(i) else {
            if count != 0 {
                return Err(r.err(format!(
                    "{count} extents on vdev {i}, but the pool has {present} vdevs"
                )));
            }
            continue;
        };
        let mut prev_end = 0u64;
        for _ in 0..count {
            let gap = units(&mut r)?;
            let o = prev_end
                .checked_add(gap)
                .ok_or_else(|| r.err("extent out of range"))?;
            let l = units(&mut r)?;
            if l == 0 || o.checked_add(l).is_none() {
                return Err(r.err(format!("bad extent ({o}, {l})")));
            }
            v.claim(o, l).map_err(|why| r.err(why))?;
            prev_end = o + l;
        }
    }
    let n = varint(&mut r)?;
    let mut deferred = Vec::new();
    for _ in 0..n {
        let txg = varint(&mut r)?;
        let vdev = varint(&mut r)?;
        let (offset, asize) = (units(&mut r)?, units(&mut r)?);
        if vdev as usize >= alloc.vdevs.len() || asize == 0 {
            return Err(r.err(format!("bad deferred free on vdev {vdev}")));
        }
        // Freed at a later sync: it must be allocated now (a free of free space, or past
        // the vdev, would trip the allocator's invariants).
        alloc.vdevs[vdev as usize]
            .check_allocated(offset, asize)
            .map_err(|why| r.err(format!("bad deferred free on vdev {vdev}: {why}")))?;
        deferred.push((
            txg,
            Dva {
                vdev: vdev as u32,
                offset,
                asize,
            },
        ));
    }
    check_no_overlap(&deferred).map_err(|why| r.err(why))?;
    Ok(deferred)
}

/// Two deferred frees of one range would free it twice.
fn check_no_overlap(deferred: &[(u64, Dva)]) -> Result<(), String> {
    let mut ranges: Vec<(u32, u64, u64)> = deferred
        .iter()
        .map(|(_, d)| (d.vdev, d.offset, d.offset + d.asize))
        .collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        if w[0].0 == w[1].0 && w[1].1 < w[0].2 {
            return Err(format!(
                "deferred frees overlap on vdev {} at {}",
                w[1].0, w[1].1
            ));
        }
    }
    Ok(())
}

/// A LEB128 varint of at most 10 bytes.
fn varint(r: &mut Reader) -> Result<u64, DecodeError> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = r.u8()?;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(r.err("varint too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocator() -> Allocator {
        Allocator::new(vec![
            VdevAllocator::new(1 << 30, 12),
            VdevAllocator::new(1 << 30, 9),
        ])
    }

    #[test]
    fn space_map_round_trips_and_rejects_damage() {
        let mut a = allocator();
        let mut deferred = Vec::new();
        for i in 0..500u64 {
            let dvas = a
                .alloc_block(
                    1 + (i % 2) as usize,
                    &|v| if v == 0 { 16384 } else { 4608 },
                    i % 3 == 0,
                )
                .unwrap();
            if i % 7 == 0 {
                deferred.push((i, dvas[0]));
            }
            if i % 5 == 0 {
                a.free(&dvas[0]);
                if i % 7 == 0 {
                    deferred.pop();
                }
            }
        }
        let map = encode_space_map(&a, &deferred);
        let mut b = allocator();
        assert_eq!(decode_space_map(&map, &mut b).unwrap(), deferred);
        for (x, y) in a.vdevs.iter().zip(&b.vdevs) {
            assert_eq!(x.allocated_extents(), y.allocated_extents());
        }
        for cut in [0, 5, 12, map.len() / 2, map.len() - 1] {
            assert!(
                decode_space_map(&map[..cut], &mut allocator()).is_err(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_newer_map_version_is_not_damage() {
        let mut map = encode_space_map(&allocator(), &[]);
        map[4..8].copy_from_slice(&(SPACE_MAP_VERSION + 1).to_le_bytes());
        let e = decode_space_map(&map, &mut allocator()).unwrap_err();
        assert_eq!(
            (e.offset, e.kind),
            (4, cairn_codec::DecodeKind::NewerVersion)
        );
        assert!(e.to_string().contains("upgrade cairn"), "{e}");
        map[4..8].copy_from_slice(&1u32.to_le_bytes());
        let e = decode_space_map(&map, &mut allocator()).unwrap_err();
        assert_eq!(e.kind, cairn_codec::DecodeKind::BadValue);
        map[0] ^= 1;
        let e = decode_space_map(&map, &mut allocator()).unwrap_err();
        assert_eq!((e.offset, e.kind), (0, cairn_codec::DecodeKind::BadValue));
        assert!(
            e.to_string().starts_with("corrupt space map: bad magic"),
            "{e}"
        );
    }

    #[test]
    fn a_map_written_before_cairn_add_loads_into_more_vdevs() {
        let mut one = Allocator::new(vec![VdevAllocator::new(1 << 30, 12)]);
        one.alloc_block(1, &|_| 1 << 20, false).unwrap();
        let map = encode_space_map(&one, &[]);
        let mut two = allocator();
        decode_space_map(&map, &mut two).unwrap();
        assert_eq!(two.vdevs[0].allocated_bytes(), 1 << 20);
        assert_eq!(two.vdevs[1].allocated_bytes(), 0);
        // More vdevs in the map than in the pool: empty ones were log devices since
        // removed; extents on them are damage.
        let one = || Allocator::new(vec![VdevAllocator::new(1 << 30, 12)]);
        let map = encode_space_map(&allocator(), &[]);
        decode_space_map(&map, &mut one()).unwrap();
        let mut used = allocator();
        used.vdevs[1].alloc(1 << 20, None, false).unwrap();
        let map = encode_space_map(&used, &[]);
        assert!(decode_space_map(&map, &mut one()).is_err());
    }

    #[test]
    fn second_copy_shares_a_metaslab_when_only_one_has_room() {
        // One vdev; fill every metaslab but the last with data.
        let mut a = Allocator::new(vec![VdevAllocator::new(1 << 30, 12)]);
        let ms = a.vdevs[0].metaslabs.len();
        let ms_size = a.vdevs[0].metaslabs[0].size;
        for _ in 0..ms - 1 {
            a.alloc_block(1, &|_| ms_size, false).unwrap();
        }
        assert_eq!(
            a.vdevs[0].metaslabs[..ms - 1]
                .iter()
                .map(|m| m.free_bytes)
                .sum::<u64>(),
            0
        );
        let dvas = a
            .alloc_block(2, &|_| 16384, true)
            .expect("both copies in the last metaslab");
        assert_eq!(a.vdevs[0].metaslab_of(dvas[0].offset), ms - 1);
        assert_eq!(a.vdevs[0].metaslab_of(dvas[1].offset), ms - 1);
        assert_ne!(dvas[0].offset, dvas[1].offset);
    }

    /// A space map with one allocated extent and the deferred frees given, as the encoder
    /// would write them (varints, 512-byte units).
    fn map_with_deferred(frees: &[(u64, u64, u64)]) -> Vec<u8> {
        let mut a = allocator();
        a.vdevs[0].claim(1 << 20, 64 << 10).unwrap();
        let deferred: Vec<(u64, Dva)> = frees
            .iter()
            .map(|&(txg, offset, asize)| {
                (
                    txg,
                    Dva {
                        vdev: 0,
                        offset,
                        asize,
                    },
                )
            })
            .collect();
        encode_space_map(&a, &deferred)
    }

    /// Frees the deferred frees as a txg sync does; panics on a bad one.
    fn release(alloc: &mut Allocator, deferred: &[(u64, Dva)]) {
        for (_, dva) in deferred {
            alloc.free(dva);
        }
    }

    #[test]
    fn deferred_frees_of_unallocated_or_overlapping_space_are_refused() {
        // Good: inside the allocated extent.
        let ok = map_with_deferred(&[(5, 1 << 20, 4096), (6, (1 << 20) + 8192, 4096)]);
        let mut a = allocator();
        let deferred = decode_space_map(&ok, &mut a).unwrap();
        release(&mut a, &deferred);
        // Free space, past the vdev, twice the same range, across a metaslab: each would
        // have tripped an allocator assertion at the next sync.
        for bad in [
            map_with_deferred(&[(5, 4 << 20, 4096)]),
            map_with_deferred(&[(5, 1 << 40, 4096)]),
            map_with_deferred(&[(5, 1 << 20, 4096), (6, 1 << 20, 8192)]),
            map_with_deferred(&[(5, (1 << 20) + (60 << 10), 8192)]),
        ] {
            let e = decode_space_map(&bad, &mut allocator()).unwrap_err();
            assert!(e.to_string().contains("deferred free"), "{e}");
            assert_eq!(e.kind, cairn_codec::DecodeKind::BadValue);
        }
    }

    proptest::proptest! {
        #[test]
        fn a_damaged_map_that_decodes_can_be_released(
            flips in proptest::collection::vec((0usize..4096, proptest::prelude::any::<u8>()), 1..6)
        ) {
            let mut map = map_with_deferred(&[(5, 1 << 20, 4096), (6, (1 << 20) + 8192, 4096)]);
            for (at, x) in flips {
                let i = at % map.len();
                map[i] ^= x;
            }
            let mut a = allocator();
            if let Ok(deferred) = decode_space_map(&map, &mut a) {
                release(&mut a, &deferred);
            }
        }

        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let mut with_header = SPACE_MAP_MAGIC.to_le_bytes().to_vec();
            with_header.extend_from_slice(&SPACE_MAP_VERSION.to_le_bytes());
            with_header.extend_from_slice(&2u32.to_le_bytes());
            with_header.extend_from_slice(&bytes);
            let _ = decode_space_map(&with_header, &mut allocator());
            let _ = decode_space_map(&bytes, &mut allocator());
        }
    }
}
