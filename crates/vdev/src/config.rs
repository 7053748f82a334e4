//! The pool configuration: the vdev tree as stored in every label.

use cairn_geometry::{VdevShape, MAX_ASHIFT, MIN_ASHIFT};
use serde::{Deserialize, Serialize};

/// Pool state recorded in labels (like ZFS's POOL_STATE_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolState {
    /// Imported by some process (maybe this host, maybe not).
    Active,
    /// Cleanly exported; anyone may import.
    Exported,
    /// Destroyed; `import -D` could bring it back.
    Destroyed,
}

/// Whole-pool configuration (ZFS keeps the same in its label nvlist).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolConfig {
    pub name: String,
    pub guid: u64,
    /// Txg at which this config was written; the highest wins on import.
    pub txg: u64,
    pub state: PoolState,
    /// Who imported the pool (host + cairn state directory), when `state` is active.
    #[serde(default)]
    pub owner: Option<Owner>,
    pub vdevs: Vec<TopConfig>,
    /// Resilver in progress (its resume point).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resilver: Option<ResilverCheckpoint>,
    /// The current or last scrub (absent: never scrubbed since this field exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrub: Option<crate::scan::ScrubState>,
    /// The last finished resilver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_resilver: Option<crate::scan::ResilverRecord>,
    /// Hot spares.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spares: Vec<SpareConfig>,
    /// GUID sums of the vdev trees this pool had before a service changed its vdevs
    /// (attach, detach, add, remove while in use): the uberblocks written before the
    /// change carry them and still belong to the pool (newest last, at most 8).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prior_guid_sums: Vec<u64>,
    /// Pool properties (absent in labels written before they existed: the defaults).
    #[serde(default, skip_serializing_if = "PoolProps::is_default")]
    pub props: PoolProps,
}

/// Pool-wide properties kept in the label config, where the pool layer reads them before
/// any store is open (`cairn create -o PROP=V`, `cairn set PROP=V POOL`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolProps {
    /// Which mirror side serves a read (`crate::readpolicy`).
    #[serde(default)]
    pub readpolicy: crate::readpolicy::Policy,
    /// The administrator's note on the pool (zpool's `comment`), shown by `get` and kept
    /// with the pool through export and import.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub comment: String,
    /// A blank device that appears at the path of a leaf that is missing, faulted or
    /// removed is put in its place and resilvered (zpool's `autoreplace`; the service
    /// that holds the pool looks every second).
    #[serde(default, skip_serializing_if = "is_off")]
    pub autoreplace: bool,
    /// A top-level vdev whose devices all grew takes the new room when the pool is opened
    /// (zpool's `autoexpand`; `cairn online -e` does it once).
    #[serde(default, skip_serializing_if = "is_off")]
    pub autoexpand: bool,
    /// What I/O does when the pool cannot write (zpool's `failmode`): the pool is
    /// suspended until `cairn clear`; see `FailMode`.
    #[serde(default, skip_serializing_if = "FailMode::is_wait")]
    pub failmode: FailMode,
}

/// What happens when a txg cannot be written because more devices failed than the
/// redundancy covers (zpool's `failmode`). In a pool held by `cairn serve` the txg's writes
/// wait in every mode but `panic`, and `cairn clear` (once the devices are back) retries
/// them; a one-shot command gets the I/O error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailMode {
    /// Every write, sync and flush waits until the pool is cleared.
    #[default]
    Wait,
    /// New writes and flushes fail at once with an I/O error; the txg waits.
    Continue,
    /// The service ends at once, writing nothing more (as a crash).
    Panic,
}

impl FailMode {
    pub fn is_wait(&self) -> bool {
        *self == FailMode::Wait
    }

    pub fn name(self) -> &'static str {
        match self {
            FailMode::Wait => "wait",
            FailMode::Continue => "continue",
            FailMode::Panic => "panic",
        }
    }

    fn parse(value: &str) -> Option<FailMode> {
        [FailMode::Wait, FailMode::Continue, FailMode::Panic]
            .into_iter()
            .find(|m| m.name() == value)
    }
}

fn is_off(flag: &bool) -> bool {
    !*flag
}

fn on_off(name: &str, value: &str) -> Result<bool, PropError> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(PropError::NotOnOff {
            name: name.to_string(),
            value: value.to_string(),
        }),
    }
}

/// Longest pool comment, in bytes (as zpool: printable ASCII only).
pub const MAX_COMMENT: usize = 32;

impl PoolProps {
    /// Every pool property name `set`/`get` know.
    pub const NAMES: [&'static str; 5] = [
        "readpolicy",
        "comment",
        "autoreplace",
        "autoexpand",
        "failmode",
    ];

    pub fn is_default(&self) -> bool {
        *self == PoolProps::default()
    }

    /// Sets property `name` from its text form.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), PropError> {
        match name {
            "readpolicy" => {
                self.readpolicy = value.parse().map_err(PropError::BadReadPolicy)?;
                Ok(())
            }
            "comment" => {
                let printable = value.bytes().all(|b| (0x20..0x7f).contains(&b));
                if value.len() > MAX_COMMENT || !printable {
                    return Err(PropError::BadComment(value.to_string()));
                }
                self.comment = value.to_string();
                Ok(())
            }
            "autoreplace" => {
                self.autoreplace = on_off(name, value)?;
                Ok(())
            }
            "autoexpand" => {
                self.autoexpand = on_off(name, value)?;
                Ok(())
            }
            "failmode" => {
                self.failmode =
                    FailMode::parse(value).ok_or_else(|| PropError::BadFailMode(value.into()))?;
                Ok(())
            }
            _ => Err(PropError::Unknown(name.to_string())),
        }
    }

    /// The text form of property `name`.
    pub fn get(&self, name: &str) -> Result<String, PropError> {
        match name {
            "readpolicy" => Ok(self.readpolicy.name().to_string()),
            "comment" if self.comment.is_empty() => Ok("-".to_string()),
            "comment" => Ok(self.comment.clone()),
            "autoreplace" => Ok(if self.autoreplace { "on" } else { "off" }.to_string()),
            "autoexpand" => Ok(if self.autoexpand { "on" } else { "off" }.to_string()),
            "failmode" => Ok(self.failmode.name().to_string()),
            _ => Err(PropError::Unknown(name.to_string())),
        }
    }
}

/// A pool property that cannot be set.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PropError {
    #[error("unknown pool property '{0}' (pool properties: readpolicy, comment, autoreplace, autoexpand, failmode)")]
    Unknown(String),
    #[error("{name}={value}: give on or off")]
    NotOnOff { name: String, value: String },
    #[error("comment {0:?}: give at most 32 printable ASCII characters (\"\" clears it)")]
    BadComment(String),
    #[error(transparent)]
    BadReadPolicy(crate::readpolicy::BadPolicy),
    #[error("bad failmode '{0}': valid values are wait, continue, panic")]
    BadFailMode(String),
}

/// A hot spare: AVAIL, or standing in for a failed leaf (`replacing`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpareConfig {
    pub guid: u64,
    pub path: String,
    pub asize: u64,
    /// The failed leaf whose slot the spare took; `replace` of that leaf releases it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacing: Option<LeafConfig>,
}

/// Identity of the importer of a pool: refuses a second import from elsewhere.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub hostname: String,
    /// Random id of the `$CAIRN_HOME` that imported the pool.
    pub home_id: u64,
}

/// One top-level vdev.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopConfig {
    /// Index in the pool (the `vdev` of a DVA).
    pub id: u32,
    pub guid: u64,
    pub shape: VdevShape,
    pub ashift: u32,
    /// Size of the vdev's address space (geometry `vdev_asize`).
    pub asize: u64,
    pub leaves: Vec<LeafConfig>,
    /// A separate intent-log device (`log DEV`): holds only intent-log blocks, adds no
    /// capacity, and a pool imports without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub log: bool,
    /// A placeholder where a log device was removed (ZFS's hole vdev): vdevs added after
    /// it keep their index, which their DVAs name. No leaves, no address space (every
    /// I/O to it is refused), never shown. A config with a hole is label config version 2.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hole: bool,
}

impl TopConfig {
    /// The placeholder left at index `id` by a removed log device of sector size
    /// `2^ashift`.
    pub fn hole(id: u32, ashift: u32) -> TopConfig {
        TopConfig {
            id,
            guid: 0,
            shape: VdevShape::Disk,
            ashift,
            asize: 0,
            leaves: Vec::new(),
            log: true,
            hole: true,
        }
    }
}

/// One leaf.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LeafConfig {
    pub guid: u64,
    /// Path when last opened: a hint only; import matches leaves by GUID.
    pub path: String,
    /// Usable size (A_leaf) when added.
    pub asize: u64,
    /// Set when the administrator took the leaf offline.
    #[serde(default)]
    pub offline: bool,
    /// `offline -t`: the leaf comes back online at the next import.
    #[serde(default)]
    pub offline_temporary: bool,
    /// Set when the leaf failed too many I/Os; `cairn clear` or `online` lifts it.
    #[serde(default)]
    pub faulted: bool,
    /// Dirty time log: txg ranges `[start, end)` whose writes this leaf missed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dtl: Vec<(u64, u64)>,
    /// The administrator detached the hot spare that stood in for this leaf: no spare
    /// takes its slot again by itself until the leaf is back online or replaced.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spare_declined: bool,
}

impl LeafConfig {
    /// A healthy leaf that holds everything.
    pub fn new(guid: u64, path: String, asize: u64) -> LeafConfig {
        LeafConfig {
            guid,
            path,
            asize,
            offline: false,
            offline_temporary: false,
            faulted: false,
            dtl: Vec::new(),
            spare_declined: false,
        }
    }
}

/// A resilver in progress, persisted so an interrupted one resumes where it was.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResilverCheckpoint {
    /// Unix time the resilver started.
    pub started: u64,
    /// Next object to walk (0: start with the pool's metadata).
    pub next_object: u64,
    /// Next block id inside `next_object` (a resilver resumes inside a large object).
    #[serde(default)]
    pub next_block: u64,
    /// Bytes of blocks examined and rewritten so far.
    pub examined_bytes: u64,
    pub repaired_bytes: u64,
    /// Bytes allocated when the resilver started (upper bound of the work).
    pub total_bytes: u64,
    /// The leaves it copies to, each with the DTL it copies. A resilver resumes only for
    /// leaves it already had with the same DTLs: a leaf added since, or one that missed
    /// more txgs, needs the walk from the start. Empty in resume points written before
    /// 2026-11-26, which resume as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<ResilverTarget>,
}

/// A leaf a resilver copies to, with the txg ranges it copies (its DTL at the start).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResilverTarget {
    pub guid: u64,
    pub dtl: Vec<(u64, u64)>,
}

/// Full-copy DTL of a new or replaced leaf: every txg.
pub const DTL_EVERYTHING: (u64, u64) = (0, u64::MAX);

impl PoolConfig {
    /// The config of a new pool: active (imported by `owner`), at `txg`, nothing scanned,
    /// no spares yet.
    pub fn new(
        name: &str,
        guid: u64,
        txg: u64,
        owner: Option<Owner>,
        vdevs: Vec<TopConfig>,
        props: PoolProps,
    ) -> PoolConfig {
        PoolConfig {
            name: name.to_string(),
            guid,
            txg,
            state: PoolState::Active,
            owner,
            vdevs,
            resilver: None,
            scrub: None,
            last_resilver: None,
            spares: Vec::new(),
            prior_guid_sums: Vec::new(),
            props,
        }
    }

    /// Checks the invariants a decoded config must hold, so later code can rely on them.
    pub fn validate(&self) -> Result<(), String> {
        if self.name.is_empty() || self.name.len() > 255 {
            return Err(format!("bad pool name length {}", self.name.len()));
        }
        if self.vdevs.iter().all(|t| t.log) {
            return Err("pool has no data vdevs (only log devices or holes)".into());
        }
        for (i, top) in self.vdevs.iter().enumerate() {
            if top.id as usize != i {
                return Err(format!("vdev {i} has id {}", top.id));
            }
            if !(MIN_ASHIFT..=MAX_ASHIFT).contains(&top.ashift) {
                return Err(format!("vdev {i}: ashift {} out of range", top.ashift));
            }
            let n = top.leaves.len();
            if top.hole {
                if n != 0 || top.asize != 0 || !top.log || top.shape != VdevShape::Disk {
                    return Err(format!("vdev {i}: a hole with leaves or space"));
                }
                continue;
            }
            let ok = match top.shape {
                VdevShape::Disk => n == 1,
                VdevShape::Mirror { children } => children == n && n >= 2,
                VdevShape::Raidz { width, parity } => {
                    width == n && (1..=3).contains(&parity) && width > parity && width <= 255
                }
            };
            if !ok {
                return Err(format!(
                    "vdev {i}: shape {:?} does not match its {n} leaves",
                    top.shape
                ));
            }
        }
        Ok(())
    }

    /// The label config version this config needs: 2 with a hole vdev (an older cairn
    /// would take the hole for a log device without leaves), else 1.
    pub fn format_version(&self) -> u32 {
        if self.vdevs.iter().any(|t| t.hole) {
            2
        } else {
            1
        }
    }

    /// Sum of all leaf GUIDs (stored in uberblocks).
    pub fn guid_sum(&self) -> u64 {
        self.vdevs
            .iter()
            .flat_map(|t| t.leaves.iter())
            .fold(self.guid, |a, l| a.wrapping_add(l.guid))
    }
}

/// Name of a top-level vdev as `zpool status` prints it (`raidz2-0`, `mirror-1`).
pub fn top_display_name(shape: VdevShape, id: u32) -> Option<String> {
    match shape {
        VdevShape::Disk => None,
        VdevShape::Mirror { .. } => Some(format!("mirror-{id}")),
        VdevShape::Raidz { parity, .. } => Some(format!("raidz{parity}-{id}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failmode_sets_gets_and_refuses_what_it_does_not_know() {
        let mut p = PoolProps::default();
        assert_eq!(p.get("failmode").unwrap(), "wait");
        for v in ["continue", "panic", "wait"] {
            p.set("failmode", v).unwrap();
            assert_eq!(p.get("failmode").unwrap(), v);
        }
        let e = p.set("failmode", "retry").unwrap_err().to_string();
        assert!(e.contains("wait, continue, panic"), "{e}");
        // The default is not written, so labels of older pools and of newer ones agree.
        assert!(p.is_default());
        p.set("failmode", "panic").unwrap();
        let json = serde_json::to_string(&p).unwrap();
        assert!(json.contains("\"failmode\":\"panic\""), "{json}");
        let back: PoolProps = serde_json::from_str(&json).unwrap();
        assert_eq!(back, p);
        let old: PoolProps = serde_json::from_str("{\"readpolicy\":\"auto\"}").unwrap();
        assert_eq!(old.failmode, FailMode::Wait);
    }
}
