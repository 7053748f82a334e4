//! Snapshots: a dataset as it was at a committed txg, kept by keeping its blocks (issue
//! "Restore points"). This module holds what is recorded and the rule that decides what a
//! txg may free; `snapshot_ops` takes, destroys and rolls back; `snapshot_read` reads one.
//!
//! Blocks — the dead-list rule (ZFS's, from Ahrens' "space accounting with dead lists"):
//! ```text
//!  txg ─────10─────────20 (S1)─────────30 (S2)─────────40──► head
//!  block A  born 10 ──────────────── killed 25      → dead list of S2 (born ≤ S1, died
//!                                                      while S1 was the newest)
//!  block B            born 22 ────────────── killed 35  → dead list of the head (born ≤ S2)
//!  block C                              born 32 ─── killed 38  → freed at once (born after
//!                                                               the newest snapshot)
//! ```
//! - A block the live dataset stops using is freed if it was born after the dataset's
//!   newest snapshot, else it goes on the head's dead list (`floor` below).
//! - Taking a snapshot hands the head's dead list to the new snapshot; the head starts an
//!   empty one.
//! - Destroying snapshot S (previous P, next N: a snapshot or the head) frees the blocks on
//!   N's dead list born after P (S alone held them) and moves S's dead list to N. So S's
//!   `used` (what destroying it frees) is that part of N's list; every block held only by
//!   snapshots is on exactly one list of its dataset (`usedbysnapshots` is their sum).
//!
//! Dnodes — override lists: every dataset shares the object table, which is rewritten
//! copy-on-write as usual, so a snapshot keeps no old object table. Instead, the first time
//! after a snapshot that a txg changes or frees a dnode of its dataset, the dnode as it was
//! is saved in the newest snapshot's override list (`TxgSync::save_overrides`). Snapshot S
//! reads object X as: S's overrides, then each newer snapshot's, then the live object
//! table; and only if that dnode belongs to the dataset and was created at or before S's
//! txg. Object ids that a dataset with snapshots frees are not reused (a rollback puts the
//! objects back under their ids).

use std::collections::{BTreeMap, HashMap, HashSet};

use cairn_pool::io::bp::{BlockPointer, BP_SIZE};

use crate::codec::{DecodeError, Reader, Writer};
use crate::dnode::{Dnode, DNODE_SIZE};

/// One snapshot as the dataset table records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotRecord {
    /// The dataset it shows.
    pub dataset: u32,
    /// The part after `@`.
    pub name: String,
    /// The committed txg it shows.
    pub txg: u64,
    pub created_ns: u64,
    /// Random identity (for streams: an incremental names the snapshot it starts from).
    pub guid: u64,
    /// The dataset's REFER, logical and physical bytes at that txg.
    pub referenced: u64,
    pub logical: u64,
    pub physical: u64,
    /// Pool objects holding its dead list and its override list.
    pub dead_object: u64,
    pub override_object: u64,
    /// User holds (`cairn hold TAG`): a held snapshot cannot be destroyed.
    pub holds: Vec<String>,
    /// The root object it shows, when that is not its dataset's: a snapshot that came to
    /// its dataset by `promote` shows the objects of the dataset it was taken of
    /// (`crate::promote`). 0: the dataset's root.
    pub root: u64,
}

/// The snapshots of a pool: a section of the dataset table after the pool section.
///
/// ```text
///  u32 magic "SNP1" | u64 nheads | nheads × (dataset u32, head dead-list object u64)
///  u64 nrecords | nrecords × (dataset u32 | name str | txg u64 | created_ns u64 |
///                              guid u64 | referenced u64 | logical u64 | physical u64 |
///                              dead_object u64 | override_object u64 |
///                              nholds u64 | nholds × tag str)
/// ```
/// Records are kept in (dataset, txg) order, oldest first. A pool with snapshots writes
/// root block version 2, so a cairn that does not know them refuses it instead of freeing
/// their blocks.
///
/// Magic "SNP2" instead (written only when a snapshot came by `promote`, which also sets a
/// root block feature flag): each record ends with `root u64` (0: the dataset's root).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotSection {
    pub records: Vec<SnapshotRecord>,
    /// Dataset → the object holding its head's dead list (datasets that had a snapshot).
    pub heads: BTreeMap<u32, u64>,
}

const SECTION_MAGIC: u32 = 0x3150_4e53; // "SNP1"
const SECTION_MAGIC_ROOTS: u32 = 0x3250_4e53; // "SNP2"
/// Bytes of one record besides its name (for `Reader::count`).
const RECORD_MIN: usize = 4 + 4 + 9 * 8;

impl SnapshotSection {
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.heads.is_empty()
    }

    /// The snapshots of `dataset`, oldest first.
    pub fn of(&self, dataset: u32) -> impl Iterator<Item = &SnapshotRecord> {
        self.records.iter().filter(move |r| r.dataset == dataset)
    }

    pub fn find(&self, dataset: u32, name: &str) -> Option<&SnapshotRecord> {
        self.of(dataset).find(|r| r.name == name)
    }

    /// The txg of `dataset`'s newest snapshot, 0 when it has none: blocks born at or
    /// before it outlive the head.
    pub fn floor(&self, dataset: u32) -> u64 {
        self.of(dataset).map(|r| r.txg).max().unwrap_or(0)
    }

    pub fn newest(&self, dataset: u32) -> Option<&SnapshotRecord> {
        self.of(dataset).last()
    }

    /// Whether some snapshot shows objects of another dataset (it came by `promote`).
    pub fn has_promoted(&self) -> bool {
        self.records.iter().any(|r| r.root != 0)
    }

    /// Inserts a record after every older or equally old one of its dataset.
    pub fn insert(&mut self, record: SnapshotRecord) {
        let at = self
            .records
            .iter()
            .rposition(|r| (r.dataset, r.txg) <= (record.dataset, record.txg))
            .map_or(0, |i| i + 1);
        self.records.insert(at, record);
    }

    pub(crate) fn encode(&self, w: &mut Writer) {
        if self.is_empty() {
            return;
        }
        let roots = self.has_promoted();
        let magic = if roots {
            SECTION_MAGIC_ROOTS
        } else {
            SECTION_MAGIC
        };
        w.u32(magic).u64(self.heads.len() as u64);
        for (&ds, &obj) in &self.heads {
            w.u32(ds).u64(obj);
        }
        w.u64(self.records.len() as u64);
        for r in &self.records {
            w.u32(r.dataset).str(&r.name).u64(r.txg).u64(r.created_ns);
            w.u64(r.guid)
                .u64(r.referenced)
                .u64(r.logical)
                .u64(r.physical);
            w.u64(r.dead_object).u64(r.override_object);
            w.u64(r.holds.len() as u64);
            for tag in &r.holds {
                w.str(tag);
            }
            if roots {
                w.u64(r.root);
            }
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<SnapshotSection, DecodeError> {
        if r.is_at_end() {
            return Ok(SnapshotSection::default());
        }
        let roots = match r.u32()? {
            SECTION_MAGIC => false,
            SECTION_MAGIC_ROOTS => true,
            other => {
                // SNP3 and later are "upgrade cairn", anything else damage (`Reader::magic`).
                let found = other.to_le_bytes();
                let mut alone = Reader::new(&found, "snapshot section");
                let e = alone.magic(&SECTION_MAGIC_ROOTS.to_le_bytes()).err();
                return Err(e.unwrap_or_else(|| r.err("bad magic")));
            }
        };
        let nheads = r.count(12)?;
        let mut heads = BTreeMap::new();
        for _ in 0..nheads {
            let ds = r.u32()?;
            heads.insert(ds, r.u64()?);
        }
        let n = r.count(RECORD_MIN)?;
        let mut records = Vec::with_capacity(n);
        for _ in 0..n {
            records.push(SnapshotRecord {
                dataset: r.u32()?,
                name: r.str()?,
                txg: r.u64()?,
                created_ns: r.u64()?,
                guid: r.u64()?,
                referenced: r.u64()?,
                logical: r.u64()?,
                physical: r.u64()?,
                dead_object: r.u64()?,
                override_object: r.u64()?,
                holds: {
                    let n = r.count(4)?;
                    (0..n).map(|_| r.str()).collect::<Result<_, _>>()?
                },
                root: if roots { r.u64()? } else { 0 },
            });
        }
        let section = SnapshotSection { records, heads };
        section.check().map_err(|why| r.err(why))?;
        Ok(section)
    }

    /// Order, unique names per dataset, a head for every dataset with snapshots, and no
    /// object named twice (one list freed twice would free live blocks).
    fn check(&self) -> Result<(), String> {
        let mut objects = HashSet::new();
        let mut names = HashSet::new();
        for pair in self.records.windows(2) {
            if (pair[0].dataset, pair[0].txg) > (pair[1].dataset, pair[1].txg) {
                return Err("snapshots out of order".into());
            }
        }
        for r in &self.records {
            if !names.insert((r.dataset, r.name.as_str())) {
                return Err(format!("snapshot '{}' appears twice", r.name));
            }
            if !self.heads.contains_key(&r.dataset) {
                return Err(format!("snapshot '{}' has no head dead list", r.name));
            }
            if r.holds.iter().any(|t| t.is_empty() || t.len() > 255) {
                return Err(format!("snapshot '{}' has an invalid hold tag", r.name));
            }
            for o in [r.dead_object, r.override_object] {
                if o <= 1 || !objects.insert(o) {
                    return Err(format!("snapshot '{}': list object {o} is invalid", r.name));
                }
            }
        }
        for &o in self.heads.values() {
            if o <= 1 || !objects.insert(o) {
                return Err(format!("head dead-list object {o} is invalid"));
            }
        }
        Ok(())
    }
}

/// A dead list in memory: blocks (their pointers hold the birth txg) and how many of them
/// its object already holds. Appended to at every sync; rewritten whole after a destroy or
/// a rollback.
#[derive(Clone, Debug, Default)]
pub(crate) struct BlockList {
    pub bps: Vec<BlockPointer>,
    pub persisted: usize,
    pub rewrite: bool,
}

/// An override list in memory: object id → its dnode as the snapshot saw it, and the ids
/// not yet in its object.
#[derive(Clone, Debug, Default)]
pub(crate) struct DnodeList {
    pub dnodes: BTreeMap<u64, Dnode>,
    pub pending: Vec<u64>,
    pub rewrite: bool,
}

/// Every snapshot list of the pool, by the object that holds it (`State::snaps`).
#[derive(Clone, Debug, Default)]
pub(crate) struct SnapLists {
    pub dead: HashMap<u64, BlockList>,
    pub overrides: HashMap<u64, DnodeList>,
    /// Objects a rollback restored in the open txg: their table dnodes are not saved again.
    pub restored: HashSet<u64>,
    /// Clones destroyed in the open txg → their origin txg: their objects' blocks are freed
    /// at the next sync, after the dataset record is gone, and those born at or before the
    /// origin must still be left to it (`crate::clone`).
    pub destroyed_clones: HashMap<u32, u64>,
    /// Dataset → (open txg, bytes its and its descendants' snapshots hold), for quotas.
    pub subtree_bytes: HashMap<u32, (u64, u64)>,
}

impl SnapLists {
    /// Every block on a dead list: with the live trees, every block the pool holds (what a
    /// scrub reads and a resilver copies).
    pub fn dead_blocks(&self) -> Vec<BlockPointer> {
        let mut lists: Vec<(&u64, &BlockList)> = self.dead.iter().collect();
        lists.sort_by_key(|(o, _)| **o);
        lists
            .into_iter()
            .flat_map(|(_, l)| l.bps.iter().copied())
            .collect()
    }
}

/// One dead-list entry: the block's pointer.
pub(crate) const DEAD_ENTRY: usize = BP_SIZE;
/// One override entry: object id, then the dnode.
pub(crate) const OVERRIDE_ENTRY: usize = 8 + DNODE_SIZE;
const _: () = assert!(OVERRIDE_ENTRY == 264 && DEAD_ENTRY == 128);

impl BlockList {
    pub fn decode(buf: &[u8]) -> Result<BlockList, DecodeError> {
        if !buf.len().is_multiple_of(DEAD_ENTRY) {
            return Err(DecodeError::truncated(
                "dead list",
                buf.len() - buf.len() % DEAD_ENTRY,
                format!("{} bytes is not a whole number of entries", buf.len()),
            ));
        }
        let bps = buf
            .chunks_exact(DEAD_ENTRY)
            .enumerate()
            .map(|(i, c)| {
                BlockPointer::decode(c).map_err(|e| e.within("dead list", i * DEAD_ENTRY))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(BlockList {
            persisted: bps.len(),
            bps,
            rewrite: false,
        })
    }

    /// Entries from `from` on, encoded.
    pub fn encode_from(&self, from: usize) -> Vec<u8> {
        self.bps[from..]
            .iter()
            .flat_map(|bp| bp.to_bytes())
            .collect()
    }

    /// Bytes charged for the listed blocks (as `used` counts them).
    pub fn bytes(&self, charge: impl Fn(&BlockPointer) -> u64) -> u64 {
        self.bps.iter().map(charge).fold(0, u64::saturating_add)
    }
}

impl DnodeList {
    pub fn decode(buf: &[u8]) -> Result<DnodeList, DecodeError> {
        if !buf.len().is_multiple_of(OVERRIDE_ENTRY) {
            return Err(DecodeError::truncated(
                "override list",
                buf.len() - buf.len() % OVERRIDE_ENTRY,
                format!("{} bytes is not a whole number of entries", buf.len()),
            ));
        }
        let mut dnodes = BTreeMap::new();
        let mut r = Reader::new(buf, "override list");
        while !r.is_at_end() {
            let id = r.u64()?;
            dnodes.insert(id, r.nested(DNODE_SIZE, Dnode::decode)?);
        }
        Ok(DnodeList {
            dnodes,
            pending: Vec::new(),
            rewrite: false,
        })
    }

    pub fn encode_entries<'a>(&self, ids: impl Iterator<Item = &'a u64>) -> Vec<u8> {
        let mut out = Vec::new();
        for id in ids {
            let mut entry = [0u8; OVERRIDE_ENTRY];
            entry[..8].copy_from_slice(&id.to_le_bytes());
            self.dnodes[id].encode(&mut entry[8..]);
            out.extend_from_slice(&entry);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(dataset: u32, name: &str, txg: u64, objects: (u64, u64)) -> SnapshotRecord {
        SnapshotRecord {
            dataset,
            name: name.into(),
            txg,
            created_ns: 5,
            guid: 7,
            referenced: 1 << 20,
            logical: 2 << 20,
            physical: 1 << 19,
            dead_object: objects.0,
            override_object: objects.1,
            holds: vec!["keep".into()],
            root: 0,
        }
    }

    #[test]
    fn section_round_trips_and_orders_by_txg() {
        let mut s = SnapshotSection::default();
        s.heads.insert(3, 90);
        s.insert(record(3, "b", 20, (10, 11)));
        s.insert(record(3, "a", 10, (12, 13)));
        s.insert(record(3, "c", 20, (14, 15)));
        let names: Vec<_> = s.of(3).map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(s.floor(3), 20);
        assert_eq!(s.floor(4), 0);
        let mut w = Writer::new();
        s.encode(&mut w);
        let back = SnapshotSection::decode(&mut Reader::new(&w.buf, "t")).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn a_promoted_snapshot_writes_roots_and_round_trips() {
        let mut s = SnapshotSection::default();
        s.heads.insert(3, 90);
        s.insert(record(3, "a", 10, (10, 11)));
        let mut w = Writer::new();
        s.encode(&mut w);
        assert_eq!(&w.buf[..4], b"SNP1");
        s.records[0].root = 77;
        assert!(s.has_promoted());
        let mut w = Writer::new();
        s.encode(&mut w);
        assert_eq!(&w.buf[..4], b"SNP2");
        let back = SnapshotSection::decode(&mut Reader::new(&w.buf, "t")).unwrap();
        assert_eq!(back, s);
        for n in 1..w.buf.len() {
            assert!(SnapshotSection::decode(&mut Reader::new(&w.buf[..n], "t")).is_err());
        }
        // Any byte changed to any of a few values: an error or a section, never a panic.
        for at in 0..w.buf.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut bad = w.buf.clone();
                bad[at] = v;
                let _ = SnapshotSection::decode(&mut Reader::new(&bad, "t"));
            }
        }
        w.buf[3] = b'3';
        let e = SnapshotSection::decode(&mut Reader::new(&w.buf, "t")).unwrap_err();
        assert_eq!(e.kind, crate::codec::DecodeKind::NewerVersion, "{e}");
    }

    #[test]
    fn damaged_sections_are_refused() {
        let mut s = SnapshotSection::default();
        s.heads.insert(3, 90);
        s.insert(record(3, "a", 10, (12, 90)));
        let mut w = Writer::new();
        s.encode(&mut w);
        let e = SnapshotSection::decode(&mut Reader::new(&w.buf, "t")).unwrap_err();
        assert!(e.why.contains("invalid"), "{e}");
        // Every truncation is an error, never a panic.
        let mut s = SnapshotSection::default();
        s.heads.insert(3, 90);
        s.insert(record(3, "a", 10, (12, 13)));
        let mut w = Writer::new();
        s.encode(&mut w);
        for n in 1..w.buf.len() {
            assert!(SnapshotSection::decode(&mut Reader::new(&w.buf[..n], "t")).is_err());
        }
    }

    #[test]
    fn lists_decode_what_they_encode_and_refuse_partial_entries() {
        let list = BlockList {
            bps: vec![BlockPointer::HOLE; 3],
            persisted: 0,
            rewrite: false,
        };
        let bytes = list.encode_from(1);
        assert_eq!(BlockList::decode(&bytes).unwrap().bps.len(), 2);
        assert!(BlockList::decode(&bytes[..100]).is_err());
        assert!(DnodeList::decode(&[0u8; 100]).is_err());
    }
}
