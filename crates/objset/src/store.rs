//! The store: objects and datasets on a pool, grouped into transaction groups.
//!
//! ```text
//!  uberblock (in every label ring) ──► root block (3 copies)
//!       root block: txg, next object id, object-table dnode, space-map chunk pointers
//!         ├─► object table (object 0): dnodes, 64 per 16 KiB block ─► every object's tree
//!         │     object 1: dataset table   object 2…: directories, files, volumes
//!         └─► space map chunks: allocated extents + deferred frees
//! ```
//! Writes go to the open txg in memory. `sync` writes every dirty object (new blocks only),
//! the dataset table, the object table, then the space map and the root block, flushes every
//! leaf, and only then writes the uberblock: the commit point. Blocks freed in txg F are
//! reused from txg F+2 on, so the trees of the two previous uberblocks stay intact.
//!
//! While the txg is open, background writers (`crate::writer`) already compress, checksum
//! and write whole dirty data blocks; the sync then only links them into the tree. They
//! commit nothing themselves, so txgs end exactly where they would without them.
//!
//! The store is split by job, each module adding methods to `StoreCore` (`crate::core`):
//!
//! | module | job |
//! |---|---|
//! | `store` (here) | open (load the newest tree that loads), create, close |
//! | `core` | `State` and `StoreCore`: what the lock protects |
//! | `config` | tunables |
//! | `root` | the root block and the error log in it |
//! | `object_io` | objects in the open txg, the object table |
//! | `txg` | the txg sync |
//! | `space` | space accounting and reservations |
//! | `props` | write properties of datasets and metadata |

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Deref;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use cairn_pool::io::alloc::{decode_space_map, Allocator, VdevAllocator};
use cairn_pool::io::bp::{BlockPointer, BP_SIZE};
use cairn_pool::{Pool, PoolError};

use crate::config::StoreConfig;
use crate::core::{now_ns, Presync, State, StoreCore, DATASET_TABLE_OBJECT};
use crate::dataset::DatasetTable;
use crate::dnode::{Dnode, ObjectKind, DNODE_BLOCK_SIZE};
use crate::error::StoreError;
use crate::object::ObjectState;
use crate::object_io::load_object_bytes;
use crate::root::RootBlock;

/// An open store: its core, and the threads working on it (background writers, prefetch).
pub struct Store {
    core: Option<Arc<StoreCore>>,
    threads: Vec<JoinHandle<()>>,
}

impl Deref for Store {
    type Target = StoreCore;
    fn deref(&self) -> &StoreCore {
        self.core.as_ref().expect("store is open")
    }
}

impl Store {
    /// Opens the store of a pool; a pool that never synced a tree gets an empty store with
    /// its root file system (named like the pool).
    pub fn open(pool: Pool) -> Result<Store, StoreError> {
        Store::open_with(pool, StoreConfig::default())
    }

    pub fn open_with(pool: Pool, config: StoreConfig) -> Result<Store, StoreError> {
        let core = Arc::new(StoreCore::open_with(pool, config)?);
        let mut store = Store {
            core: Some(Arc::clone(&core)),
            threads: Vec::new(),
        };
        if core.readahead.enabled() {
            let c = Arc::clone(&core);
            store.start_thread("cairn-prefetch".into(), move || c.prefetch_worker())?;
        }
        // Before anything is written: the chain's blocks after its head are free in the
        // space map of the txg it follows (`crate::intent_log`).
        core.replay_log()?;
        // A receive a crash cut shows nothing of itself (`crate::receive`).
        core.undo_interrupted_receives()?;
        // Files unlinked while open that a crash kept from being freed at their last close.
        core.free_unlinked()?;
        if config.background_writer {
            for i in 0..config.background_writers.max(1) {
                let c = Arc::clone(&core);
                store.start_thread(format!("cairn-writer-{i}"), move || c.background_writer())?;
            }
            core.writers_running.store(true, Ordering::SeqCst);
        }
        Ok(store)
    }

    /// Starts one of the store's threads (dropping the store stops the ones started).
    fn start_thread(
        &mut self,
        name: String,
        body: impl FnOnce() + Send + 'static,
    ) -> Result<(), StoreError> {
        let h = std::thread::Builder::new()
            .name(name)
            .spawn(body)
            .map_err(|source| StoreError::LocalIo {
                path: "starting the store's threads".into(),
                source,
            })?;
        self.threads.push(h);
        Ok(())
    }

    /// Stops the background writers and the prefetch thread.
    fn stop_threads(&mut self) {
        if self.threads.is_empty() {
            return;
        }
        self.stop.store(true, Ordering::SeqCst);
        {
            let _st = self.lock();
            self.presync_cv.notify_all();
        }
        self.readahead.shut_down();
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }

    /// Syncs and returns the pool (for export).
    pub fn close(mut self) -> Result<Pool, StoreError> {
        self.stop_threads();
        self.sync()?;
        let core = self.core.take().expect("open");
        match Arc::try_unwrap(core) {
            Ok(core) => Ok(core.pool),
            Err(_) => unreachable!("the writer threads holding other references were joined"),
        }
    }
}

/// Dropping a store without `close` is a crash: nothing more is synced (an in-flight
/// background batch finishes, but nothing commits it).
impl Drop for Store {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

fn fresh_allocator(pool: &Pool) -> Allocator {
    Allocator::new(
        pool.top_extents()
            .into_iter()
            .zip(pool.tops())
            .map(|((asize, ashift), top)| {
                if top.is_hole() {
                    return crate::vdev_changes::hole_allocator(top);
                }
                let mut v = VdevAllocator::new(asize, ashift);
                v.log = top.is_log();
                v
            })
            .collect(),
    )
}

/// The error log of a pool's newest tree that loads, read without opening the store (so
/// nothing is written: for `status` on a pool no process holds).
pub fn read_error_log(pool: &Pool) -> Result<crate::fs::ErrorLog, StoreError> {
    Ok(match StoreCore::load_newest(pool)? {
        Some(mut state) => crate::fs::error_log_of(pool, &mut state),
        None => crate::fs::ErrorLog::default(),
    })
}

impl StoreCore {
    fn open_with(pool: Pool, config: StoreConfig) -> Result<StoreCore, StoreError> {
        match StoreCore::load_newest(&pool)? {
            Some(state) => Ok(StoreCore::new(pool, state, config)),
            None => StoreCore::create(pool, config),
        }
    }

    /// The tree of the newest uberblock whose tree loads; `None` for a pool that never
    /// synced a tree (its only uberblocks are `create`'s, with an empty root); the last
    /// error if none loads. No readable uberblock at all is damage, never a new pool: the
    /// labels say the pool exists, and an empty tree written now would bury its data.
    fn load_newest(pool: &Pool) -> Result<Option<State>, StoreError> {
        let uberblocks = pool.uberblocks();
        if uberblocks.is_empty() {
            return Err(StoreError::Pool(PoolError::NoUberblock {
                pool: pool.name().to_string(),
            }));
        }
        let mut last_err = None;
        for ub in uberblocks {
            if ub.root.iter().all(|&b| b == 0) {
                continue;
            }
            match StoreCore::load(pool, &ub.root[..BP_SIZE], ub.txg) {
                Ok(state) => return Ok(Some(state)),
                Err(e) => last_err = Some(e),
            }
        }
        match last_err {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    /// Reads the tree of one uberblock; any damage is an error (the caller tries an older one).
    fn load(pool: &Pool, root_bytes: &[u8], ub_txg: u64) -> Result<State, StoreError> {
        let root_bp =
            BlockPointer::decode(root_bytes).map_err(|e| StoreError::corrupt("uberblock", e))?;
        let root = RootBlock::decode(&pool.read_bp(&root_bp)?)?;
        let mut map = Vec::new();
        for bp in &root.space_map_bps {
            map.extend_from_slice(&pool.read_bp(bp)?);
        }
        // The length comes from disk: it must lie within the chunks it names.
        if root.space_map_len > map.len() as u64 {
            return Err(StoreError::corrupt(
                "root block",
                format!(
                    "space map of {} bytes in {} bytes of chunks",
                    root.space_map_len,
                    map.len()
                ),
            ));
        }
        map.truncate(root.space_map_len as usize);
        let mut alloc = fresh_allocator(pool);
        let deferred = decode_space_map(&map, &mut alloc)
            .map_err(|why| StoreError::corrupt("space map", why))?;
        let mut state = State {
            txg: ub_txg.max(root.txg) + 1,
            alloc,
            deferred,
            meta: ObjectState::new(root.meta),
            objects: HashMap::new(),
            cache: HashMap::new(),
            next_object: root.next_object,
            free_objects: BTreeSet::new(),
            datasets: DatasetTable::default(),
            datasets_dirty: false,
            unlinked_dirty: false,
            dirty_bytes: 0,
            root_bp,
            space_map_bps: root.space_map_bps,
            damaged: root.damaged,
            damaged_unlisted: root.damaged_unlisted,
            damaged_dirty: false,
            presync: Presync::default(),
            dirs: Default::default(),
            pending: HashMap::new(),
            snaps: Default::default(),
            log: crate::intent_state::LogChain::from_root(root.log),
        };
        let table = load_object_bytes(pool, &mut state, DATASET_TABLE_OBJECT)?;
        state.datasets = DatasetTable::decode(&table).map_err(|e| {
            StoreError::corrupt_object("dataset table", crate::core::DATASET_TABLE_OBJECT, e)
        })?;
        crate::snapshot_ops::load_lists(pool, &mut state)?;
        Ok(state)
    }

    /// A new, empty store: object table, dataset table, root file system.
    fn create(pool: Pool, config: StoreConfig) -> Result<StoreCore, StoreError> {
        let txg = pool.uberblocks().first().map(|u| u.txg).unwrap_or(0) + 1;
        let mut meta = Dnode::new(ObjectKind::Table, 0, DNODE_BLOCK_SIZE, now_ns());
        meta.nlink = 0;
        let state = State {
            txg,
            alloc: fresh_allocator(&pool),
            deferred: Vec::new(),
            meta: ObjectState::new(meta),
            objects: HashMap::new(),
            cache: HashMap::new(),
            next_object: 1,
            free_objects: BTreeSet::new(),
            datasets: DatasetTable::default(),
            datasets_dirty: true,
            unlinked_dirty: false,
            dirty_bytes: 0,
            root_bp: BlockPointer::HOLE,
            space_map_bps: Vec::new(),
            damaged: BTreeMap::new(),
            damaged_unlisted: 0,
            damaged_dirty: false,
            presync: Presync::default(),
            dirs: Default::default(),
            pending: HashMap::new(),
            snaps: Default::default(),
            log: Default::default(),
        };
        let store = StoreCore::new(pool, state, config);
        {
            let mut st = store.lock();
            let table = store.create_object_locked(&mut st, ObjectKind::Table, 0, 16 << 10)?;
            assert_eq!(table, DATASET_TABLE_OBJECT);
            let name = store.pool.name().to_string();
            store.create_dataset_locked(
                &mut st,
                &name,
                None,
                crate::dataset::DatasetKind::Filesystem,
                Default::default(),
                0,
            )?;
        }
        store.sync()?;
        Ok(store)
    }
}
