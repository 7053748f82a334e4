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

/// A command's store: opened by this process, or the one its serving process holds when
/// the command runs there for a client of the control socket (`crate::served`).
pub enum Held {
    Own(Store),
    Served(std::sync::Arc<Store>),
}

impl std::ops::Deref for Held {
    type Target = Store;
    fn deref(&self) -> &Store {
        match self {
            Held::Own(s) => s,
            Held::Served(s) => s,
        }
    }
}

/// Opens the pool and its store (or takes the served one).
pub fn open(name: &str) -> Result<Held, String> {
    if let Some(store) = crate::served::store_for(name)? {
        return Ok(Held::Served(store));
    }
    open_store(name).map(Held::Own)
}

/// Opens the pool and its store in this process.
pub fn open_store(name: &str) -> Result<Store, String> {
    let pool = Pool::open(&crate::home(), name).map_err(err)?;
    Store::open(pool).map_err(err)
}

/// Syncs (which also writes the error log) and, for a store this process opened, closes
/// it and records the leaves' counters. A served command's changes are synced before it
/// answers, as they would be by its own process.
pub fn finish(store: Held) -> Result<(), String> {
    match store {
        Held::Own(store) => finish_store(store),
        Held::Served(store) if store.is_dirty() => store.sync().map(|_| ()).map_err(err),
        Held::Served(_) => Ok(()),
    }
}

/// Closes a store this process opened: syncs and records the leaves' counters.
pub fn finish_store(store: Store) -> Result<(), String> {
    let pool = store.close().map_err(err)?;
    pool.save_record().map_err(err)
}
