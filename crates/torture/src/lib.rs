//! Torture and crash testing of the whole engine (docs/design.md).
//!
//! - [`torture`]: a ztest-like, seeded, randomized run: random layouts, a random workload
//!   checked against an in-memory model, and random faults kept within redundancy.
//! - [`crashloop`]: a harness that runs a writer process, kills it with SIGKILL at random
//!   moments, re-imports, and checks every acknowledged write.
//! - [`writer`]: the writer the crash loop kills, and the rules that say what the pool
//!   must hold after it died.
//!
//! Both print the seed they ran with; a failing run keeps its leaf files and prints the
//! command that replays it. docs/torture.md describes the fault model.

pub mod crashloop;
pub mod layout;
pub mod model;
pub mod torture;
pub mod writer;

use cairn_objset::StoreError;
use cairn_pool::PoolError;

/// Errors that stop a run (not findings: those are `Violation`s in the reports).
#[derive(Debug, thiserror::Error)]
pub enum TortureError {
    #[error("pool: {0}")]
    Pool(#[from] PoolError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("writer process: {0}")]
    Writer(String),
    #[error("bad argument: {0}")]
    BadArgument(String),
}

impl TortureError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> TortureError {
        TortureError::Io {
            what: what.into(),
            source,
        }
    }
}

/// A random 64-bit seed (for runs started without `--seed`).
pub fn random_seed() -> u64 {
    rand::random::<u64>() >> 1
}
