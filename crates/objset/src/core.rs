//! The store's shared state: `State` (everything a txg changes, behind one lock) and
//! `StoreCore` (the pool, that lock, the read gate and the background writers' signals).
//! Every other store module adds methods to `StoreCore`; this one depends on none of them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Condvar, Mutex, MutexGuard, RwLock};

use cairn_pool::io::alloc::Allocator;
use cairn_pool::io::bp::{BlockPointer, Dva};
use cairn_pool::Pool;

use crate::config::StoreConfig;
use crate::dataset::DatasetTable;
use crate::error::StoreError;
use crate::object::{IndirectCache, ObjectState};

/// Object id of the dataset table.
pub const DATASET_TABLE_OBJECT: u64 = 1;
/// Txgs a freed block waits before reuse (see `crate::store`).
pub(crate) const FREE_DELAY_TXGS: u64 = 2;

/// Blocks read for a read-modify-write outside the store lock: block id → (the pointer it
/// was read from, its contents).
pub(crate) type Prefetched = HashMap<u64, (BlockPointer, Vec<u8>)>;

/// Mutable state of the store, behind one lock.
#[derive(Clone)]
pub(crate) struct State {
    pub txg: u64,
    pub alloc: Allocator,
    /// (txg freed, dva): released `FREE_DELAY_TXGS` txgs later.
    pub deferred: Vec<(u64, Dva)>,
    pub meta: ObjectState,
    pub objects: HashMap<u64, ObjectState>,
    pub cache: IndirectCache,
    pub next_object: u64,
    pub free_objects: BTreeSet<u64>,
    pub datasets: DatasetTable,
    pub datasets_dirty: bool,
    /// The dataset table changed only in its unlinked sets (`crate::unlinked`), which a
    /// log replay rebuilds: written at the sync like `datasets_dirty`, but does not stop
    /// the log.
    pub unlinked_dirty: bool,
    pub dirty_bytes: u64,
    pub root_bp: BlockPointer,
    pub space_map_bps: Vec<BlockPointer>,
    /// The error log: objects found damaged beyond redundancy, (dataset id, object id) →
    /// the txg in which that was last seen. Kept in the root block (see `decode_error_log`).
    pub damaged: BTreeMap<(u32, u64), u64>,
    /// Entries the root block had no room for when it was last written (counted, not named).
    pub damaged_unlisted: u64,
    /// The error log changed since the last sync (a sync must write it even if no data did).
    pub damaged_dirty: bool,
    /// The background writer's progress in the open txg.
    pub presync: Presync,
    /// Bytes written in the open txg per dataset id (`crate::quota`).
    pub pending: HashMap<u32, u64>,
    /// Directories decoded once and changed in memory (`crate::dircache`).
    pub dirs: crate::dircache::DirCache,
    /// Snapshots' dead lists and override lists (`crate::snapshot`).
    pub snaps: crate::snapshot::SnapLists,
    /// The intent log's chain for the open txg (`crate::intent_log`).
    pub log: crate::intent_state::LogChain,
}

/// What the background writer is doing (see `crate::writer`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Presync {
    /// Batches taken and not yet landed (at most one per writer thread).
    pub in_flight: usize,
    /// Bumped when a sync takes the blocks of the batches in flight back: they must not land.
    pub generation: u64,
    /// Numbers the batches (keys of `inflight`).
    pub next_batch: u64,
    /// DVAs allocated for each batch in flight (deferred if a sync takes it back).
    pub inflight: BTreeMap<u64, Vec<Dva>>,
    /// Dirty bytes already taken in the open txg (the rest is the backlog).
    pub taken_bytes: u64,
    /// Dirty bytes of the open txg whose blocks background batches have been given space
    /// for (landed or in flight; a block changed again after that counts again in
    /// `dirty_bytes`, and its written copy stays allocated). The space check counts only
    /// `dirty_bytes` minus these as still to be allocated.
    pub allocated_bytes: u64,
    /// Blocks that landed in `written` since the store opened.
    pub landed_blocks: u64,
    /// Objects given a whole dirty block since the writer last looked at them: the only
    /// ones `take_batch` looks at (scanning every object in memory, under the state lock,
    /// each time a few MiB of small files had been written cost more than the writes).
    /// A superset is harmless: an object with nothing to take is dropped from it.
    pub candidates: BTreeSet<u64>,
    /// The drain pass in progress, which writers are paced against (`crate::writer`).
    pub drain_pace: Option<DrainPace>,
}

/// A drain pass's yardstick for pacing writers: it converges only if the writers dirty less
/// than `limit` bytes while it runs (the next pass must be at most half this one).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DrainPace {
    /// `State::dirty_bytes` when the pass began.
    pub dirty_at_start: u64,
    pub limit: u64,
}

/// The state and pool behind an open store, shared with its background writer.
pub struct StoreCore {
    pub(crate) pool: Pool,
    state: Mutex<State>,
    /// Readers fetch blocks without the state lock but hold this gate shared; a txg sync
    /// takes it exclusively before it releases deferred frees, so no block can be reused
    /// while a reader is still fetching it.
    pub(crate) read_gate: RwLock<()>,
    pub config: StoreConfig,
    /// Wakes the background writer (work or stop) and whoever waits for it.
    pub(crate) presync_cv: Condvar,
    pub(crate) stop: AtomicBool,
    /// Intents waiting to be logged, and the log's committer (`crate::intent_log`).
    pub(crate) intent: crate::intent_state::IntentLog,
    /// How long foreground reads took lately (a scrub's latency budget).
    pub(crate) read_latency: crate::read_latency::ReadLatency,
    /// Sequential read streams and what was fetched ahead of them.
    pub(crate) readahead: crate::readahead::ReadAhead,
    /// `State::txg`, for threads that must not wait for the state lock (the prefetch
    /// thread, which holds the read gate). Set by the sync's commit, under the gate.
    pub(crate) open_txg_now: AtomicU64,
    /// Set while the intent log is replayed at import: no sync may run part-way
    /// (`StoreCore::sync_allowed_midway`).
    pub(crate) replaying: AtomicBool,
    /// Set once the background writer threads run (`Store::open_with` starts them after
    /// the replay): until then writers never wait for them (`StoreCore::throttle`).
    pub(crate) writers_running: AtomicBool,
}

pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl StoreCore {
    pub(crate) fn new(pool: Pool, state: State, config: StoreConfig) -> StoreCore {
        pool.note_allocated(
            state
                .alloc
                .vdevs
                .iter()
                .map(|v| v.allocated_bytes())
                .collect(),
        );
        let readahead_max = match pool.has_rotating_leaf() {
            true => config.readahead_max,
            false => 0,
        };
        StoreCore {
            readahead: crate::readahead::ReadAhead::new(readahead_max),
            open_txg_now: AtomicU64::new(state.txg),
            replaying: AtomicBool::new(false),
            writers_running: AtomicBool::new(false),
            pool,
            state: Mutex::new(state),
            read_gate: RwLock::new(()),
            config,
            presync_cv: Condvar::new(),
            stop: AtomicBool::new(false),
            intent: Default::default(),
            read_latency: Default::default(),
        }
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state lock for a report (`status`, `list`), or None while the pool is suspended
    /// and a sync waiting for `cairn clear` holds it: an administrator must see why the
    /// pool stopped without waiting for it to start again.
    pub(crate) fn lock_for_report(&self) -> Option<MutexGuard<'_, State>> {
        loop {
            match self.state.try_lock() {
                Ok(st) => return Some(st),
                Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => {
                    if self.pool.io_suspended().is_some() {
                        return None;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            }
        }
    }

    /// Puts available hot spares in the slots of leaves that became FAULTED or REMOVED
    /// (every txg sync does it too; this is for a pool that is only read). The spares need
    /// a resilver (`resilver`) afterwards. Returns whether a spare was put in.
    pub fn take_over_failed_leaves(&self) -> Result<bool, StoreError> {
        let _no_sync = self.lock();
        Ok(self.pool.take_over_failed_leaves()?)
    }

    /// The txg that the next sync will commit.
    pub fn open_txg(&self) -> u64 {
        self.lock().txg
    }
}
