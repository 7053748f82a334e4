//! `$CAIRN_HOME`: where cairn remembers the pools this user has imported (like
//! `/etc/zfs/zpool.cache`), so later commands find a pool by name.
//!
//! ```text
//! $CAIRN_HOME/home-id          random id of this state directory (the pool "owner")
//! $CAIRN_HOME/pools/NAME.json  PoolRecord: guid, leaf paths, error counters
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::PoolError;

/// Error counters of one leaf, kept between commands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeafCounters {
    pub read: u64,
    pub write: u64,
    pub checksum: u64,
}

/// What `$CAIRN_HOME` remembers of an imported pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolRecord {
    pub name: String,
    pub guid: u64,
    /// Leaf GUID → last known path.
    pub leaves: BTreeMap<u64, String>,
    /// Leaf GUID → error counters since import or the last `clear`.
    #[serde(default)]
    pub counters: BTreeMap<u64, LeafCounters>,
    /// I/O since import (`cairn iostat`), summed over the processes that held the pool,
    /// as the last of them saw it.
    #[serde(default)]
    pub iostat: Option<crate::iostat::PoolIo>,
}

/// What events last reported of each leaf (`crate::events`): leaf GUID → (health, error
/// counters). Kept beside the pool record, written only when an event was posted.
pub type SeenLeaves = BTreeMap<u64, (crate::health::Health, LeafCounters)>;

/// The state directory.
#[derive(Clone, Debug)]
pub struct Home {
    root: PathBuf,
    /// Where pool locks live (shared by every state directory of the machine).
    lock_dir: PathBuf,
}

fn state_err(path: &Path, source: std::io::Error) -> PoolError {
    PoolError::State {
        path: path.display().to_string(),
        source,
    }
}

impl Home {
    /// A state directory at `root`, with the machine's pool lock directory.
    pub fn at(root: impl Into<PathBuf>) -> Home {
        Home {
            root: root.into(),
            lock_dir: crate::owner::default_lock_dir(),
        }
    }

    /// The same state directory with pool locks in `dir` instead.
    pub fn with_lock_dir(self, dir: impl Into<PathBuf>) -> Home {
        Home {
            lock_dir: dir.into(),
            ..self
        }
    }

    pub fn lock_dir(&self) -> &Path {
        &self.lock_dir
    }

    /// Name of the imported pool with GUID `guid`, if this state directory has one.
    pub fn name_of_guid(&self, guid: u64) -> Option<String> {
        let names = self.pool_names().ok()?;
        names
            .into_iter()
            .find(|n| self.load(n).is_ok_and(|r| r.guid == guid))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn pools_dir(&self) -> PathBuf {
        self.root.join("pools")
    }

    fn record_path(&self, name: &str) -> PathBuf {
        self.pools_dir().join(format!("{name}.json"))
    }

    fn seen_path(&self, name: &str) -> PathBuf {
        self.pools_dir().join(format!("{name}.seen"))
    }

    /// What events last reported of pool `name`'s leaves (empty if nothing yet).
    pub fn load_seen(&self, name: &str) -> SeenLeaves {
        std::fs::read_to_string(self.seen_path(name))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    /// Keeps what events reported of pool `name`'s leaves (atomically).
    pub fn save_seen(&self, name: &str, seen: &SeenLeaves) -> Result<(), PoolError> {
        let path = self.seen_path(name);
        let tmp = path.with_extension("seen.tmp");
        let text = serde_json::to_string(seen).expect("leaf states serialize");
        std::fs::write(&tmp, text).map_err(|e| state_err(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| state_err(&path, e))
    }

    /// This state directory's owner id (created on first use).
    pub fn id(&self) -> Result<u64, PoolError> {
        let path = self.root.join("home-id");
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Ok(id) = text.trim().parse::<u64>() {
                return Ok(id);
            }
        }
        std::fs::create_dir_all(&self.root).map_err(|e| state_err(&self.root, e))?;
        let id = cairn_vdev::new_guid();
        std::fs::write(&path, format!("{id}\n")).map_err(|e| state_err(&path, e))?;
        Ok(id)
    }

    pub fn load(&self, name: &str) -> Result<PoolRecord, PoolError> {
        let path = self.record_path(name);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(PoolError::NoSuchPool(name.to_string()))
            }
            Err(e) => return Err(state_err(&path, e)),
        };
        serde_json::from_str(&text).map_err(|e| PoolError::CorruptState {
            path: path.display().to_string(),
            why: e.to_string(),
        })
    }

    pub fn exists(&self, name: &str) -> bool {
        self.record_path(name).exists()
    }

    /// Writes a record atomically (temp file + rename).
    pub fn save(&self, record: &PoolRecord) -> Result<(), PoolError> {
        let dir = self.pools_dir();
        std::fs::create_dir_all(&dir).map_err(|e| state_err(&dir, e))?;
        let path = self.record_path(&record.name);
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_string_pretty(record).expect("records serialize");
        std::fs::write(&tmp, text).map_err(|e| state_err(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| state_err(&path, e))
    }

    pub fn remove(&self, name: &str) -> Result<(), PoolError> {
        let _ = std::fs::remove_file(self.seen_path(name));
        let path = self.record_path(name);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(state_err(&path, e)),
        }
    }

    /// Names of all imported pools, sorted.
    pub fn pool_names(&self) -> Result<Vec<String>, PoolError> {
        let dir = self.pools_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(state_err(&dir, e)),
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_suffix(".json").map(String::from)
            })
            .collect();
        names.sort();
        Ok(names)
    }
}
