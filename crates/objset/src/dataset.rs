//! Datasets (file systems and volumes), their properties with zfs-style inheritance, and
//! their space accounting. The table lives in object 1 of the pool.
//!
//! ```text
//!  table: magic u32 "DST1" | count u64 | entries…
//!  entry: id u32 | parent u32 (u32::MAX for the root) | kind u8 | name str | object u64 |
//!         created_txg u64 | used u64 | logical u64 | physical u64 | nprops u64 | (key str, value str)…
//! ```

use std::collections::BTreeMap;

use crate::codec::{DecodeError, Reader, Writer};
use crate::error::StoreError;

pub const NO_PARENT: u32 = u32::MAX;
const TABLE_MAGIC: u32 = 0x3154_5344; // "DST1"

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DatasetKind {
    Filesystem,
    Volume,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dataset {
    pub id: u32,
    pub parent: u32,
    pub kind: DatasetKind,
    /// Full name, `pool/a/b`.
    pub name: String,
    /// Root directory object (file system) or data object (volume).
    pub object: u64,
    pub created_txg: u64,
    /// Space charged to objects of this dataset itself (zfs list REFER).
    pub used: u64,
    pub logical: u64,
    pub physical: u64,
    /// Locally set properties.
    pub props: BTreeMap<String, String>,
}

/// A clone's origin snapshot, `POOL/DS@SNAP` (internal; shown as `origin`).
pub const ORIGIN_PROP: &str = "cairn:origin";
/// The object holding a clone's clone map: the origin snapshot's ids → the clone's
/// (internal; `crate::id_map`). Clones made before it was kept have none.
pub const CLONE_MAP_PROP: &str = "cairn:clone-map";
/// Bytes of its origin's blocks a clone no longer uses (internal).
pub const ORIGIN_RELEASED_PROP: &str = "cairn:origin-released";
/// The dataset property naming the receive map's object (internal: never sent, not shown;
/// `crate::receive`).
pub const RECEIVE_MAP_PROP: &str = "cairn:receive-map";
/// The dataset property holding a partial receive's resume token (not sent;
/// `crate::receive`).
pub const RESUME_TOKEN_PROP: &str = "receive_resume_token";
/// Set on a dataset while a stream is being received into it (`crate::receive`): the guid
/// of the incremental's origin snapshot, or 0 for a dataset the stream makes. Found at
/// import, it means the receive was cut by a crash: the dataset is destroyed or rolled back.
pub const RECEIVING_PROP: &str = "cairn:receiving";
/// The dataset's unlinked set: files with no name left that were still open
/// (`crate::unlinked`).
pub const UNLINKED_PROP: &str = "cairn:unlinked";

/// Whether a property is kept by cairn itself (not sent, not set by users).
pub fn is_internal_property(key: &str) -> bool {
    key.starts_with("cairn:")
}

/// Properties cairn knows, with defaults; `inherit` says whether children inherit it.
pub const PROPERTIES: &[(&str, &str, bool)] = &[
    ("compression", "lz4", true),
    ("checksum", "fletcher4", true),
    ("recordsize", "128K", true),
    ("copies", "1", true),
    ("readonly", "off", true),
    ("volsize", "-", false),
    ("volblocksize", "16K", false),
    // File systems (mounted over FUSE): where, whether, and how.
    ("mountpoint", "-", true),
    ("canmount", "on", false),
    ("atime", "relatime", true),
    ("xattr", "on", true),
    // `.zfs` in the root's listing (`crate::snapshot`; FUSE's snapdir).
    ("snapdir", "hidden", true),
    // Automatic snapshots and their retention (`crate::autosnap`).
    ("snapshot:schedule", "none", true),
    // Space limits and guarantees (`crate::quota`).
    ("quota", "none", false),
    ("refquota", "none", false),
    ("reservation", "none", false),
    // The intent log (`crate::intent_log`): when writes are durable, and how they are
    // logged.
    ("sync", "standard", true),
    ("logbias", "latency", true),
];

/// Parses a size like `128K`, `1M`, `512`, `10G`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = s[i..].to_ascii_uppercase();
            let m: u64 = match unit.trim_end_matches('B').trim_end_matches('I') {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                _ => return None,
            };
            (&s[..i], m)
        }
        None => (s, 1),
    };
    // Whole numbers exactly, with overflow an error (not a wrap to 2^64 - 1).
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult);
    }
    let n: f64 = num.parse().ok()?;
    let bytes = n * mult as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// Checks a dataset or volume name before anything is opened: `POOL/NAME[/…]`, each
/// component as zfs allows (letters, digits, `_-.:`); `@` names a snapshot, which cairn
/// does not have yet.
pub fn validate_dataset_name(name: &str) -> Result<(), StoreError> {
    if name.contains('@') {
        return Err(StoreError::BadName(
            name.to_string(),
            "'@' names a snapshot; a dataset is POOL/NAME".into(),
        ));
    }
    if !name.contains('/') {
        return Err(StoreError::BadName(
            name.to_string(),
            "give POOL/NAME".into(),
        ));
    }
    name.split('/').try_for_each(validate_component)
}

/// `131072` → `128K` (exact powers only, else bytes).
pub fn format_size(n: u64) -> String {
    for (shift, unit) in [(30, "G"), (20, "M"), (10, "K")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

impl Dataset {
    fn encode(&self, w: &mut Writer) {
        w.u32(self.id).u32(self.parent);
        w.u8(match self.kind {
            DatasetKind::Filesystem => 1,
            DatasetKind::Volume => 2,
        });
        w.str(&self.name).u64(self.object).u64(self.created_txg);
        w.u64(self.used).u64(self.logical).u64(self.physical);
        w.u64(self.props.len() as u64);
        for (k, v) in &self.props {
            w.str(k).str(v);
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Dataset, DecodeError> {
        let id = r.u32()?;
        let parent = r.u32()?;
        let kind = match r.u8()? {
            1 => DatasetKind::Filesystem,
            2 => DatasetKind::Volume,
            k => return Err(r.err(format!("dataset kind {k}"))),
        };
        let name = r.str()?;
        let object = r.u64()?;
        let created_txg = r.u64()?;
        let (used, logical, physical) = (r.u64()?, r.u64()?, r.u64()?);
        let n = r.count(8)?;
        let mut props = BTreeMap::new();
        for _ in 0..n {
            let k = r.str()?;
            let v = r.str()?;
            props.insert(k, v);
        }
        Ok(Dataset {
            id,
            parent,
            kind,
            name,
            object,
            created_txg,
            used,
            logical,
            physical,
            props,
        })
    }
}

/// Objects that belong to the pool rather than a dataset (the pool history): charged to no
/// dataset, like objects of ZFS's MOS.
pub const POOL_OBJECTS: u32 = u32::MAX;

/// What the dataset table keeps for the pool as a whole (after the datasets).
///
/// ```text
///  u32 magic "POL1" | u64 history object (0: none yet)
/// ```
/// (Pool properties live in the label config, `cairn_vdev::config::PoolProps`, where the
/// pool layer reads them before any store is open.)
/// Tables written before it existed end after the datasets: an empty section. Readers of
/// that older format ignore the bytes after the datasets, so the format stays compatible
/// both ways.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolSection {
    /// Object holding the pool history (`crate::history`), 0 until the first record.
    pub history_object: u64,
}

const POOL_SECTION_MAGIC: u32 = 0x314c_4f50; // "POL1"

impl PoolSection {
    fn encode(&self, w: &mut Writer) {
        w.u32(POOL_SECTION_MAGIC).u64(self.history_object);
    }

    fn decode(r: &mut Reader<'_>) -> Result<PoolSection, DecodeError> {
        if r.is_at_end() {
            return Ok(PoolSection::default());
        }
        r.magic(&POOL_SECTION_MAGIC.to_le_bytes())?;
        Ok(PoolSection {
            history_object: r.u64()?,
        })
    }
}

/// All datasets of a pool, and what it keeps for the pool as a whole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DatasetTable {
    pub datasets: Vec<Dataset>,
    pub pool: PoolSection,
    /// Snapshots and their lists (`crate::snapshot`); empty in pools without any.
    pub snapshots: crate::snapshot::SnapshotSection,
}

impl DatasetTable {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u32(TABLE_MAGIC).u64(self.datasets.len() as u64);
        for d in &self.datasets {
            d.encode(&mut w);
        }
        self.pool.encode(&mut w);
        self.snapshots.encode(&mut w);
        w.buf
    }

    pub fn decode(buf: &[u8]) -> Result<DatasetTable, DecodeError> {
        let mut r = Reader::new(buf, "dataset table");
        r.magic(&TABLE_MAGIC.to_le_bytes())?;
        let n = r.count(40)?;
        let mut datasets = Vec::with_capacity(n);
        for _ in 0..n {
            datasets.push(Dataset::decode(&mut r)?);
        }
        let pool = PoolSection::decode(&mut r)?;
        let snapshots = crate::snapshot::SnapshotSection::decode(&mut r)?;
        let table = DatasetTable {
            datasets,
            pool,
            snapshots,
        };
        table.check_tree().map_err(|why| r.err(why))?;
        Ok(table)
    }

    /// The datasets must form a tree: ids unique, every parent present, and every chain of
    /// parents ending at the root (a cycle read from disk would send the inheritance and
    /// space walks round forever).
    fn check_tree(&self) -> Result<(), String> {
        let mut ids = std::collections::BTreeSet::new();
        for d in &self.datasets {
            if d.id == NO_PARENT {
                return Err(format!(
                    "dataset {} has the reserved id {NO_PARENT}",
                    d.name
                ));
            }
            if !ids.insert(d.id) {
                return Err(format!("dataset id {} appears twice", d.id));
            }
        }
        for d in &self.datasets {
            let mut at = d;
            for _ in 0..=self.datasets.len() {
                if at.parent == NO_PARENT {
                    break;
                }
                at = self
                    .by_id(at.parent)
                    .ok_or_else(|| format!("dataset {} has a missing parent", d.name))?;
            }
            if at.parent != NO_PARENT {
                return Err(format!("dataset {} is its own ancestor", d.name));
            }
        }
        let orphan = self.snapshots.records.iter().map(|r| r.dataset);
        let orphan = orphan.chain(self.snapshots.heads.keys().copied());
        if let Some(ds) = orphan.into_iter().find(|d| !ids.contains(d)) {
            return Err(format!(
                "a snapshot names dataset id {ds}, which does not exist"
            ));
        }
        Ok(())
    }

    pub fn by_name(&self, name: &str) -> Option<&Dataset> {
        self.datasets.iter().find(|d| d.name == name)
    }
    pub fn by_id(&self, id: u32) -> Option<&Dataset> {
        self.datasets.iter().find(|d| d.id == id)
    }
    pub fn by_id_mut(&mut self, id: u32) -> Option<&mut Dataset> {
        self.datasets.iter_mut().find(|d| d.id == id)
    }
    pub fn children(&self, id: u32) -> impl Iterator<Item = &Dataset> {
        self.datasets.iter().filter(move |d| d.parent == id)
    }
    pub fn next_id(&self) -> u32 {
        self.datasets.iter().map(|d| d.id + 1).max().unwrap_or(0)
    }

    /// Effective value of a property and where it comes from (`local`, `inherited from X`,
    /// `default`).
    pub fn property(&self, id: u32, key: &str) -> (String, String) {
        let inheritable = PROPERTIES
            .iter()
            .find(|p| p.0 == key)
            .map(|p| p.2)
            .unwrap_or(false);
        let default = PROPERTIES
            .iter()
            .find(|p| p.0 == key)
            .map(|p| p.1)
            .unwrap_or("-");
        let mut cur = self.by_id(id);
        let mut first = true;
        while let Some(d) = cur {
            if let Some(v) = d.props.get(key) {
                let source = if first {
                    "local".to_string()
                } else {
                    format!("inherited from {}", d.name)
                };
                return (v.clone(), source);
            }
            if !inheritable {
                break;
            }
            first = false;
            cur = if d.parent == NO_PARENT {
                None
            } else {
                self.by_id(d.parent)
            };
        }
        (default.to_string(), "default".to_string())
    }

    /// Where a file system mounts: its `mountpoint`, or the nearest ancestor's with the rest
    /// of the name appended (as ZFS inherits it), or `/NAME`. `None` for `none`/`legacy`.
    pub fn mountpoint(&self, id: u32) -> Option<String> {
        let mut cur = self.by_id(id)?;
        let name = cur.name.clone();
        loop {
            if let Some(v) = cur.props.get("mountpoint") {
                if v == "none" || v == "legacy" {
                    return None;
                }
                let rest = &name[cur.name.len()..];
                return Some(format!("{}{rest}", v.trim_end_matches('/')).replace("//", "/"));
            }
            if cur.parent == NO_PARENT {
                return Some(format!("/{name}"));
            }
            cur = self.by_id(cur.parent)?;
        }
    }

    /// USED of a dataset: its own space plus all descendants'.
    /// USED of a dataset and its descendants (REFER, less what a clone shares with its
    /// origin snapshot, which the origin is charged for).
    pub fn used_total(&self, id: u32) -> u64 {
        // Saturating: the figures come from disk and must not overflow (found by fuzzing).
        let own = self
            .by_id(id)
            .map(|d| d.used.saturating_sub(self.shared_with_origin(id)))
            .unwrap_or(0);
        self.children(id)
            .map(|c| self.used_total(c.id))
            .fold(own, u64::saturating_add)
    }

    /// The origin snapshot of a clone (`crate::clone`).
    pub fn origin_of(&self, id: u32) -> Option<&crate::snapshot::SnapshotRecord> {
        let full = self.by_id(id)?.props.get(ORIGIN_PROP)?;
        let (ds, snap) = full.split_once('@')?;
        self.snapshots.find(self.by_name(ds)?.id, snap)
    }

    /// Bytes a clone still shares with its origin snapshot: what the snapshot referenced,
    /// less what the clone has since stopped using of it.
    pub fn shared_with_origin(&self, id: u32) -> u64 {
        let Some(origin) = self.origin_of(id) else {
            return 0;
        };
        let released = self
            .by_id(id)
            .and_then(|d| d.props.get(ORIGIN_RELEASED_PROP))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        origin.referenced.saturating_sub(released)
    }

    /// The clones of snapshot `full` (`POOL/DS@SNAP`).
    pub fn clones_of(&self, full: &str) -> Vec<String> {
        self.datasets
            .iter()
            .filter(|d| d.props.get(ORIGIN_PROP).is_some_and(|o| o == full))
            .map(|d| d.name.clone())
            .collect()
    }

    /// (logical, physical) over a dataset and its descendants, for compressratio.
    pub fn bytes_total(&self, id: u32) -> (u64, u64) {
        let (mut l, mut p) = self
            .by_id(id)
            .map(|d| (d.logical, d.physical))
            .unwrap_or((0, 0));
        for c in self.children(id) {
            let (cl, cp) = self.bytes_total(c.id);
            l = l.saturating_add(cl);
            p = p.saturating_add(cp);
        }
        (l, p)
    }
}

/// Checks a dataset name component.
pub fn validate_component(name: &str) -> Result<(), StoreError> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.:".contains(c))
        && name != "."
        && name != "..";
    if ok {
        Ok(())
    } else {
        Err(StoreError::BadName(
            name.to_string(),
            "use letters, digits, '_', '-', '.', ':'".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_properties() {
        assert_eq!(parse_size("128K"), Some(131072));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("10G"), Some(10 << 30));
        assert_eq!(parse_size("1.5K"), Some(1536));
        assert_eq!(parse_size("x"), None);
        assert_eq!(
            parse_size("99999999999999999999"),
            None,
            "no wrap to 2^64 - 1"
        );
        assert_eq!(parse_size("20000000T"), None);
        assert_eq!(parse_size("1e30"), None);
        assert_eq!(parse_size("inf"), None);
        assert!(validate_dataset_name("tank@s1").is_err());
        assert!(validate_dataset_name("tank").is_err());
        assert!(validate_dataset_name("tank/a b").is_err());
        validate_dataset_name("tank/a/b-1.x").unwrap();
    }

    #[test]
    fn inheritance_and_round_trip() {
        let mut t = DatasetTable::default();
        let mk = |id, parent, name: &str| Dataset {
            id,
            parent,
            kind: DatasetKind::Filesystem,
            name: name.into(),
            object: 0,
            created_txg: 1,
            used: 10,
            logical: 20,
            physical: 10,
            props: BTreeMap::new(),
        };
        t.datasets.push(mk(0, NO_PARENT, "tank"));
        t.datasets.push(mk(1, 0, "tank/a"));
        t.datasets.push(mk(2, 1, "tank/a/b"));
        t.by_id_mut(1)
            .unwrap()
            .props
            .insert("compression".into(), "zstd".into());
        assert_eq!(
            t.property(2, "compression"),
            ("zstd".into(), "inherited from tank/a".into())
        );
        assert_eq!(t.property(1, "compression").1, "local");
        assert_eq!(
            t.property(0, "compression"),
            ("lz4".into(), "default".into())
        );
        assert_eq!(t.used_total(0), 30);
        assert_eq!(DatasetTable::decode(&t.encode()).unwrap(), t);
        assert!(DatasetTable::decode(&t.encode()[..30]).is_err());

        // The pool section round-trips; a table written before it existed (ending after
        // the datasets) reads as an empty section.
        let before_pool_section = t.encode();
        let before_pool_section = &before_pool_section[..before_pool_section.len() - 12];
        assert_eq!(DatasetTable::decode(before_pool_section).unwrap(), t);
        t.pool.history_object = 77;
        assert_eq!(DatasetTable::decode(&t.encode()).unwrap(), t);
        let mut bad = t.encode();
        let at = before_pool_section.len();
        bad[at] ^= 0xff;
        assert!(DatasetTable::decode(&bad).is_err());

        // Found by fuzzing: a parent cycle (or a repeated id) read from disk is damage;
        // before, `used_total` recursed until the stack overflowed.
        let mut cycle = t.clone();
        cycle.by_id_mut(0).unwrap().parent = 2;
        let e = DatasetTable::decode(&cycle.encode()).unwrap_err();
        assert!(e.to_string().contains("own ancestor"), "{e}");
        let mut twice = t.clone();
        twice.datasets[2].id = 1;
        assert!(DatasetTable::decode(&twice.encode()).is_err());
        // Found by fuzzing: space figures near 2^64 read from disk added up with overflow.
        let mut huge = t.clone();
        for d in &mut huge.datasets {
            d.used = u64::MAX - 1;
            d.logical = u64::MAX;
            d.physical = u64::MAX;
        }
        let huge = DatasetTable::decode(&huge.encode()).unwrap();
        assert_eq!(huge.used_total(0), u64::MAX);
        assert_eq!(huge.bytes_total(0), (u64::MAX, u64::MAX));
        let mut reserved = t.clone();
        reserved.datasets[2].id = NO_PARENT;
        assert!(DatasetTable::decode(&reserved.encode()).is_err());
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = DatasetTable::decode(&bytes);
        }
    }
}
