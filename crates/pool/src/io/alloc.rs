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
        }
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
        self.metaslabs[m].insert(offset, len);
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
        let n = self.vdevs.len();
        let first = self.pick_vdev();
        let mut used_vdevs: Vec<usize> = Vec::new();
        for c in 0..copies {
            let mut placed = None;
            for k in 0..n {
                let v = (first + c + k) % n;
                if used_vdevs.contains(&v) && used_vdevs.len() < n {
                    continue;
                }
                let len = asize_of(v);
                // A second copy on the same vdev goes to another metaslab.
                let avoid = dvas[..c]
                    .iter()
                    .find(|d| d.vdev as usize == v)
                    .map(|d| self.vdevs[v].metaslab_of(d.offset));
                if let Some(off) = self.vdevs[v].alloc(len, avoid, metadata) {
                    placed = Some(Dva {
                        vdev: v as u32,
                        offset: off,
                        asize: len,
                    });
                    used_vdevs.push(v);
                    break;
                }
            }
            match placed {
                Some(d) => dvas[c] = d,
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

    /// The vdev for the next block: stay on the rotor for ALIQUOT bytes, skip full ones.
    fn pick_vdev(&mut self) -> usize {
        let n = self.vdevs.len();
        if self.rotor_bytes >= ALIQUOT {
            self.rotor = (self.rotor + 1) % n;
            self.rotor_bytes = 0;
        }
        let frac = |v: &VdevAllocator| v.free_bytes() as f64 / v.size().max(1) as f64;
        let best = self.vdevs.iter().map(frac).fold(0.0, f64::max);
        for k in 0..n {
            let v = (self.rotor + k) % n;
            if frac(&self.vdevs[v]) >= best * 0.5 {
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
}

/// Encodes the allocated extents of every vdev plus deferred frees (txg, dva):
/// `magic u32 | version u32 | nvdevs u32 | per vdev: count u64, (offset u64, len u64)… |
///  ndeferred u64 | (txg u64, vdev u32, pad u32, offset u64, asize u64)…`
pub fn encode_space_map(alloc: &Allocator, deferred: &[(u64, Dva)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&SPACE_MAP_MAGIC.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&(alloc.vdevs.len() as u32).to_le_bytes());
    for v in &alloc.vdevs {
        let ext = v.allocated_extents();
        out.extend_from_slice(&(ext.len() as u64).to_le_bytes());
        for (o, l) in ext {
            out.extend_from_slice(&o.to_le_bytes());
            out.extend_from_slice(&l.to_le_bytes());
        }
    }
    out.extend_from_slice(&(deferred.len() as u64).to_le_bytes());
    for (txg, d) in deferred {
        out.extend_from_slice(&txg.to_le_bytes());
        out.extend_from_slice(&d.vdev.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&d.offset.to_le_bytes());
        out.extend_from_slice(&d.asize.to_le_bytes());
    }
    out
}

const SPACE_MAP_MAGIC: u32 = 0x5350_4d31; // "SPM1"

/// Loads a space map into fresh allocators; returns the deferred frees. Every extent is
/// checked, so a damaged map is an error, never a panic or a double allocation.
pub fn decode_space_map(buf: &[u8], alloc: &mut Allocator) -> Result<Vec<(u64, Dva)>, String> {
    let mut r = Reader { buf, pos: 0 };
    if r.u32()? != SPACE_MAP_MAGIC {
        return Err("bad space map magic".into());
    }
    if r.u32()? != 1 {
        return Err("unsupported space map version".into());
    }
    let nvdevs = r.u32()? as usize;
    // Fewer vdevs than the pool: vdevs added (`cairn add`) since it was written are empty.
    if nvdevs > alloc.vdevs.len() {
        return Err(format!(
            "space map has {nvdevs} vdevs, pool has {}",
            alloc.vdevs.len()
        ));
    }
    for v in alloc.vdevs.iter_mut().take(nvdevs) {
        let count = r.u64()?;
        for _ in 0..count {
            let (o, l) = (r.u64()?, r.u64()?);
            if l == 0 || o.checked_add(l).is_none() {
                return Err(format!("bad extent ({o}, {l})"));
            }
            v.claim(o, l)?;
        }
    }
    let n = r.u64()?;
    let mut deferred = Vec::new();
    for _ in 0..n {
        let txg = r.u64()?;
        let vdev = r.u32()?;
        let _pad = r.u32()?;
        let (offset, asize) = (r.u64()?, r.u64()?);
        if vdev as usize >= alloc.vdevs.len() || asize == 0 {
            return Err(format!("bad deferred free on vdev {vdev}"));
        }
        deferred.push((
            txg,
            Dva {
                vdev,
                offset,
                asize,
            },
        ));
    }
    Ok(deferred)
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| "space map is truncated".to_string())?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, String> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}
