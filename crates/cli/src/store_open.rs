//! Opening a pool's store for one command and closing it after (`open`, `finish`), and the
//! pool named by a `POOL[/…]` argument.

use cairn_objset::Store;
use cairn_pool::Pool;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The pool of `POOL/DS…`, `POOL@SNAP` or `POOL/DS@SNAP/PATH`.
pub(crate) fn pool_of(path: &str) -> &str {
    path.split(['/', '@']).next().unwrap_or(path)
}

/// Opens the pool and its store.
pub fn open(name: &str) -> Result<Store, String> {
    let pool = Pool::open(&crate::home(), name).map_err(err)?;
    Store::open(pool).map_err(err)
}

/// Syncs (which also writes the error log) and records the leaves' counters.
pub fn finish(store: Store) -> Result<(), String> {
    let pool = store.close().map_err(err)?;
    pool.save_record().map_err(err)
}
