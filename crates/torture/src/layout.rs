//! Random pool layouts over sparse leaf files, and opening a pool with every leaf wrapped
//! in a `FaultLeaf` so faults can be switched on under the engine.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_pool::{CreateOptions, Home, Pool};
use cairn_vdev::{FaultLeaf, FaultSwitches, Leaf};
use rand::Rng;

use crate::TortureError;

/// Name of every pool these tests create.
pub const POOL: &str = "tank";

/// One kind of top-level vdev and how many of them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Layout {
    /// `mirror`, `raidz1`, `raidz2` or `raidz3`.
    pub kind: String,
    /// Leaves per group.
    pub width: usize,
    /// Groups (top-level vdevs) striped together.
    pub groups: usize,
    /// Size of every leaf file (sparse).
    pub leaf_bytes: u64,
}

impl Layout {
    /// A random layout: a mirror of 2–3, raidz1 of 3–5, raidz2 of 4–6 or raidz3 of 5–7,
    /// one or two of them.
    pub fn random(rng: &mut impl Rng, leaf_bytes: u64) -> Layout {
        let (kind, width) = match rng.gen_range(0..4) {
            0 => ("mirror", rng.gen_range(2..=3)),
            1 => ("raidz1", rng.gen_range(3..=5)),
            2 => ("raidz2", rng.gen_range(4..=6)),
            _ => ("raidz3", rng.gen_range(5..=7)),
        };
        Layout {
            kind: kind.to_string(),
            width,
            groups: rng.gen_range(1..=2),
            leaf_bytes,
        }
    }

    /// Failed or damaged leaves a group survives.
    pub fn redundancy(&self) -> usize {
        match self.kind.as_str() {
            "mirror" => self.width - 1,
            "raidz1" => 1,
            "raidz2" => 2,
            "raidz3" => 3,
            _ => 0,
        }
    }

    /// `raidz2 6 ×2` style description.
    pub fn describe(&self) -> String {
        if self.groups == 1 {
            format!("{} of {}", self.kind, self.width)
        } else {
            format!("{} × {} of {}", self.groups, self.kind, self.width)
        }
    }

    /// Creates the leaf files in `dir/leaves` and the pool (state in `dir/home`); returns
    /// the home and the leaf paths, group by group.
    pub fn create(&self, dir: &Path) -> Result<(Home, Vec<Vec<PathBuf>>), TortureError> {
        let leaves_dir = dir.join("leaves");
        std::fs::create_dir_all(&leaves_dir)
            .map_err(|e| TortureError::io(leaves_dir.display().to_string(), e))?;
        let mut tokens = Vec::new();
        let mut groups = Vec::new();
        for g in 0..self.groups {
            tokens.push(self.kind.clone());
            let mut paths = Vec::new();
            for c in 0..self.width {
                let path = leaves_dir.join(format!("g{g}-d{c}"));
                std::fs::File::create(&path)
                    .and_then(|f| f.set_len(self.leaf_bytes))
                    .map_err(|e| TortureError::io(path.display().to_string(), e))?;
                tokens.push(path.display().to_string());
                paths.push(path);
            }
            groups.push(paths);
        }
        let home = Home::at(dir.join("home"));
        Pool::create(&home, POOL, &tokens, CreateOptions::default())?;
        Ok((home, groups))
    }
}

/// The fault switches of every leaf of an open pool, group by group (`None`: the leaf
/// could not be opened).
pub type Switchboard = Vec<Vec<Option<Arc<FaultSwitches>>>>;

/// Wraps every opened leaf of `pool` in a `FaultLeaf` (all faults off).
pub fn wrap_leaves(pool: &mut Pool) -> Switchboard {
    let mut board: Switchboard = pool
        .tops()
        .iter()
        .map(|top| vec![None; top.children.len()])
        .collect();
    for slot in pool.leaf_slots() {
        pool.wrap_leaf(slot, |inner: Arc<dyn Leaf>| {
            let leaf = FaultLeaf::new(inner);
            board[slot.top][slot.child] = Some(leaf.switches.clone());
            Arc::new(leaf)
        });
    }
    board
}

/// Directory holding the leaf files of a run directory.
pub fn leaves_dir(dir: &Path) -> PathBuf {
    dir.join("leaves")
}
