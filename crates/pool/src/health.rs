//! Health of a leaf, a top-level vdev or the pool, as `zpool status` names it.

/// Health of a leaf, a top-level vdev or the pool, as `zpool status` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Health {
    Online,
    Degraded,
    Faulted,
    Offline,
    Unavail,
    Removed,
    /// The pool's writes wait for `cairn clear` (`crate::suspension`); pools only.
    Suspended,
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Health::Online => "ONLINE",
            Health::Degraded => "DEGRADED",
            Health::Faulted => "FAULTED",
            Health::Offline => "OFFLINE",
            Health::Unavail => "UNAVAIL",
            Health::Removed => "REMOVED",
            Health::Suspended => "SUSPENDED",
        })
    }
}
