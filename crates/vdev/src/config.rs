//! The pool configuration: the vdev tree as stored in every label.

use cairn_geometry::{VdevShape, MAX_ASHIFT, MIN_ASHIFT};
use serde::{Deserialize, Serialize};

use crate::label::PoolState;

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
}

impl PoolConfig {
    /// Checks the invariants a decoded config must hold, so later code can rely on them.
    pub fn validate(&self) -> Result<(), String> {
        if self.name.is_empty() || self.name.len() > 255 {
            return Err(format!("bad pool name length {}", self.name.len()));
        }
        if self.vdevs.is_empty() {
            return Err("pool has no vdevs".into());
        }
        for (i, top) in self.vdevs.iter().enumerate() {
            if top.id as usize != i {
                return Err(format!("vdev {i} has id {}", top.id));
            }
            if !(MIN_ASHIFT..=MAX_ASHIFT).contains(&top.ashift) {
                return Err(format!("vdev {i}: ashift {} out of range", top.ashift));
            }
            let n = top.leaves.len();
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
