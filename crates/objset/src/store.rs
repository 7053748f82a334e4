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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;

use cairn_pool::io::alloc::{decode_space_map, encode_space_map, Allocator, VdevAllocator};
use cairn_pool::io::bp::{BlockKind, BlockPointer, Dva, BP_SIZE};
use cairn_pool::io::checksum::ChecksumKind;
use cairn_pool::io::compress::{Compression, CompressionSetting};
use cairn_pool::io::pipeline::{prepare, WriteProps};
use cairn_pool::{Pool, PoolError};

use crate::codec::{Reader, Writer};
use crate::dataset::{parse_size, DatasetTable};
use crate::dnode::{Dnode, ObjectKind, DNODE_BLOCK_SIZE, DNODE_SIZE};
use crate::error::StoreError;
use crate::object::{
    block_base, block_for_update, read_for_update, read_object, sync_object, BlockBase,
    IndirectCache, ObjectState, SyncCtx,
};

/// Object id of the dataset table.
pub const DATASET_TABLE_OBJECT: u64 = 1;
const ROOT_MAGIC: u64 = 0x3153_4f4e_5249_4143; // "CAIRNOS1"
/// The root block holds the object-table dnode and up to `MAX_SPACE_MAP_CHUNKS` pointers.
const ROOT_BLOCK_SIZE: usize = 16 << 10;
/// Space map chunk size; halved (down to `MIN_SPACE_MAP_CHUNK`) when free space is too
/// fragmented to hold chunks this large.
const SPACE_MAP_CHUNK: usize = 128 << 10;
const MIN_SPACE_MAP_CHUNK: usize = 16 << 10;
const MAX_SPACE_MAP_CHUNKS: usize = 120;
/// Error log in the root block: header and entry sizes (see `decode_error_log`).
const ERRLOG_MAGIC: u32 = 0x474f_4c45; // "ELOG"
const ERRLOG_HEADER: usize = 16;
const ERRLOG_ENTRY: usize = 20;
/// Txgs a freed block waits before reuse (see module docs).
const FREE_DELAY_TXGS: u64 = 2;

/// Tunables.
#[derive(Clone, Copy, Debug)]
pub struct StoreConfig {
    /// Dirty data that forces a sync (default: 1/8 of RAM, at most 4 GiB).
    pub dirty_max: u64,
    /// Copies of metadata blocks (root block gets one more, up to 3).
    pub metadata_copies: usize,
    /// Write whole dirty data blocks in the background while the txg is open (the sync
    /// then only links them into the tree).
    pub background_writer: bool,
    /// Writer threads, each with a batch of its own in flight: one compresses and
    /// checksums while another's parity and leaf writes run, so the stages overlap.
    pub background_writers: usize,
    /// Dirty bytes the background writer takes at a time (it starts when this much waits;
    /// writers pause when four times this much waits).
    pub background_batch: u64,
}

/// The defaults the binary chose for every store of the process (`set_default_config`).
static CHOSEN_CONFIG: std::sync::OnceLock<StoreConfig> = std::sync::OnceLock::new();

impl StoreConfig {
    /// Makes `config` what `StoreConfig::default()` returns from now on (the binary calls
    /// it once with the tunables in force; this crate reads no environment). A second call
    /// changes nothing and returns false.
    pub fn set_default(config: StoreConfig) -> bool {
        CHOSEN_CONFIG.set(config).is_ok()
    }

    /// The built-in defaults, whatever the binary chose.
    pub fn builtin() -> StoreConfig {
        StoreConfig {
            dirty_max: default_dirty_max(),
            metadata_copies: 2,
            background_writer: true,
            background_writers: default_background_writers(),
            background_batch: default_background_batch(),
        }
    }
}

impl Default for StoreConfig {
    /// The binary's choice (`set_default`), else the built-in defaults.
    fn default() -> Self {
        CHOSEN_CONFIG
            .get()
            .copied()
            .unwrap_or_else(StoreConfig::builtin)
    }
}

/// 4 MiB: small enough that a batch is still in the CPU caches when its checksums, parity
/// and leaf writes read it again (32 MiB batches wrote raidz2 ~25 % slower on the bench
/// machine, docs/bench/io.md).
pub const DEFAULT_BACKGROUND_BATCH: u64 = 4 << 20;
/// Smallest background batch accepted.
pub const MIN_BACKGROUND_BATCH: u64 = 64 << 10;

fn default_background_batch() -> u64 {
    DEFAULT_BACKGROUND_BATCH
}

/// Two: while one batch is in its parity and leaf writes, the next is compressed and
/// checksummed (on 2 cores, 1 → 2 writers took raidz2 and mirror writes from ~1.3 to
/// ~1.5 GB/s, docs/bench/io.md).
pub const DEFAULT_BACKGROUND_WRITERS: usize = 2;
/// Most background writer threads accepted.
pub const MAX_BACKGROUND_WRITERS: usize = 16;

fn default_background_writers() -> usize {
    DEFAULT_BACKGROUND_WRITERS
}

/// Smallest dirty cap accepted.
pub const MIN_DIRTY_MAX: u64 = 1 << 20;

/// 1/8 of RAM, at most 4 GiB.
pub fn default_dirty_max() -> u64 {
    let ram = cairn_pool::io::cache::total_ram_bytes();
    (ram / 8).min(4 << 30)
}

/// Blocks read for a read-modify-write outside the store lock: block id → (the pointer it
/// was read from, its contents).
pub(crate) type Prefetched = HashMap<u64, (BlockPointer, Vec<u8>)>;

/// Mutable state of the store, behind one lock.
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
}

/// What the background writer is doing (see `crate::writer`).
#[derive(Debug, Default)]
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
    /// Blocks that landed in `written` since the store opened.
    pub landed_blocks: u64,
}

/// The state and pool behind an open store, shared with its background writer.
pub struct StoreCore {
    pool: Pool,
    state: Mutex<State>,
    /// Readers fetch blocks without the state lock but hold this gate shared; a txg sync
    /// takes it exclusively before it releases deferred frees, so no block can be reused
    /// while a reader is still fetching it.
    pub(crate) read_gate: RwLock<()>,
    pub config: StoreConfig,
    /// Wakes the background writer (work or stop) and whoever waits for it.
    pub(crate) presync_cv: Condvar,
    pub(crate) stop: AtomicBool,
}

/// An open store: its core, and the background writer threads working on it.
pub struct Store {
    core: Option<Arc<StoreCore>>,
    writers: Vec<JoinHandle<()>>,
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
            writers: Vec::new(),
        };
        if config.background_writer {
            for i in 0..config.background_writers.max(1) {
                let c = Arc::clone(&core);
                let h = std::thread::Builder::new()
                    .name(format!("cairn-writer-{i}"))
                    .spawn(move || c.background_writer())
                    .map_err(|source| StoreError::LocalIo {
                        path: "starting the background writer threads".into(),
                        source,
                    })?; // (dropping `store` stops the ones started)
                store.writers.push(h);
            }
        }
        Ok(store)
    }

    fn stop_writer(&mut self) {
        if self.writers.is_empty() {
            return;
        }
        self.stop.store(true, Ordering::SeqCst);
        {
            let _st = self.lock();
            self.presync_cv.notify_all();
        }
        for h in self.writers.drain(..) {
            let _ = h.join();
        }
    }

    /// Syncs and returns the pool (for export).
    pub fn close(mut self) -> Result<Pool, StoreError> {
        self.stop_writer();
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
        self.stop_writer();
    }
}

pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn fresh_allocator(pool: &Pool) -> Allocator {
    Allocator::new(
        pool.tops
            .iter()
            .map(|t| VdevAllocator::new(t.config.asize, t.ashift()))
            .collect(),
    )
}

/// The decoded root block.
struct RootBlock {
    txg: u64,
    next_object: u64,
    meta: Dnode,
    space_map_len: u64,
    space_map_bps: Vec<BlockPointer>,
    /// The error log (see `decode_error_log`) and how many entries did not fit.
    damaged: BTreeMap<(u32, u64), u64>,
    damaged_unlisted: u64,
}

impl RootBlock {
    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(ROOT_MAGIC)
            .u32(1)
            .u32(0)
            .u64(self.txg)
            .u64(self.next_object);
        let mut d = [0u8; DNODE_SIZE];
        self.meta.encode(&mut d);
        w.buf.extend_from_slice(&d);
        w.u64(self.space_map_len)
            .u64(self.space_map_bps.len() as u64);
        for bp in &self.space_map_bps {
            w.buf.extend_from_slice(&bp.to_bytes());
        }
        // The error log fills the rest of the block; entries beyond it are only counted.
        let room = (ROOT_BLOCK_SIZE - w.buf.len() - ERRLOG_HEADER) / ERRLOG_ENTRY;
        let listed = self.damaged.len().min(room);
        let unlisted = self.damaged_unlisted + (self.damaged.len() - listed) as u64;
        w.u32(ERRLOG_MAGIC).u32(listed as u32).u64(unlisted);
        for (&(ds, obj), &seen) in self.damaged.iter().take(listed) {
            w.u32(ds).u64(obj).u64(seen);
        }
        assert!(w.buf.len() <= ROOT_BLOCK_SIZE, "root block overflows");
        w.buf.resize(ROOT_BLOCK_SIZE, 0);
        w.buf
    }

    fn decode(buf: &[u8]) -> Result<RootBlock, StoreError> {
        let corrupt = |e: crate::codec::DecodeError| StoreError::Corrupt(e.to_string());
        let mut r = Reader::new(buf, "root block");
        if r.u64().map_err(corrupt)? != ROOT_MAGIC {
            return Err(StoreError::Corrupt("root block: bad magic".into()));
        }
        if r.u32().map_err(corrupt)? != 1 {
            return Err(StoreError::Corrupt(
                "root block: unsupported version".into(),
            ));
        }
        let _ = r.u32().map_err(corrupt)?;
        let txg = r.u64().map_err(corrupt)?;
        let next_object = r.u64().map_err(corrupt)?;
        let dn_at = 32;
        let meta =
            Dnode::decode(buf.get(dn_at..dn_at + DNODE_SIZE).unwrap_or(&[])).map_err(corrupt)?;
        let mut r = Reader::new(buf.get(dn_at + DNODE_SIZE..).unwrap_or(&[]), "root block");
        let space_map_len = r.u64().map_err(corrupt)?;
        let n = r.u64().map_err(corrupt)? as usize;
        if n > MAX_SPACE_MAP_CHUNKS {
            return Err(StoreError::Corrupt(format!(
                "root block: {n} space map chunks"
            )));
        }
        let base = dn_at + DNODE_SIZE + 16;
        let mut space_map_bps = Vec::with_capacity(n);
        for i in 0..n {
            let at = base + i * BP_SIZE;
            let bytes = buf
                .get(at..at + BP_SIZE)
                .ok_or_else(|| StoreError::Corrupt("root block truncated".into()))?;
            space_map_bps
                .push(BlockPointer::decode(bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?);
        }
        let (damaged, damaged_unlisted) =
            decode_error_log(buf.get(base + n * BP_SIZE..).unwrap_or(&[])).map_err(corrupt)?;
        Ok(RootBlock {
            txg,
            next_object,
            meta,
            space_map_len,
            space_map_bps,
            damaged,
            damaged_unlisted,
        })
    }
}

/// The error log after the space map pointers of a root block (ZFS keeps its errlog in
/// the MOS; ours must fit in the root block, so entries beyond its room are only counted).
/// Root blocks written before the log existed hold zeros there: an empty log.
///
/// ```text
///  u32 magic "ELOG" | u32 listed | u64 unlisted | listed × (u32 dataset, u64 object, u64 txg)
/// ```
type ErrorLogEntries = BTreeMap<(u32, u64), u64>;

fn decode_error_log(buf: &[u8]) -> Result<(ErrorLogEntries, u64), crate::codec::DecodeError> {
    let mut r = Reader::new(buf, "error log");
    let mut log = BTreeMap::new();
    match r.u32()? {
        0 => return Ok((log, 0)),
        ERRLOG_MAGIC => {}
        other => return Err(r.err(format!("bad magic {other:#x}"))),
    }
    let listed = r.u32()? as usize;
    let unlisted = r.u64()?;
    if listed > buf.len() / ERRLOG_ENTRY {
        return Err(r.err(format!("{listed} entries in {} bytes", buf.len())));
    }
    for _ in 0..listed {
        let key = (r.u32()?, r.u64()?);
        log.insert(key, r.u64()?);
    }
    Ok((log, unlisted))
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

    fn new(pool: Pool, state: State, config: StoreConfig) -> StoreCore {
        StoreCore {
            pool,
            state: Mutex::new(state),
            read_gate: RwLock::new(()),
            config,
            presync_cv: Condvar::new(),
            stop: AtomicBool::new(false),
        }
    }

    /// Reads the tree of one uberblock; any damage is an error (the caller tries an older one).
    fn load(pool: &Pool, root_bytes: &[u8], ub_txg: u64) -> Result<State, StoreError> {
        let root_bp =
            BlockPointer::decode(root_bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let root = RootBlock::decode(&pool.read_bp(&root_bp)?)?;
        let mut map = Vec::with_capacity(root.space_map_len as usize);
        for bp in &root.space_map_bps {
            map.extend_from_slice(&pool.read_bp(bp)?);
        }
        map.truncate(root.space_map_len as usize);
        let mut alloc = fresh_allocator(pool);
        let deferred = decode_space_map(&map, &mut alloc).map_err(StoreError::Corrupt)?;
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
            dirty_bytes: 0,
            root_bp,
            space_map_bps: root.space_map_bps,
            damaged: root.damaged,
            damaged_unlisted: root.damaged_unlisted,
            damaged_dirty: false,
            presync: Presync::default(),
        };
        let table = load_object_bytes(pool, &mut state, DATASET_TABLE_OBJECT)?;
        state.datasets =
            DatasetTable::decode(&table).map_err(|e| StoreError::Corrupt(e.to_string()))?;
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
            dirty_bytes: 0,
            root_bp: BlockPointer::HOLE,
            space_map_bps: Vec::new(),
            damaged: BTreeMap::new(),
            damaged_unlisted: 0,
            damaged_dirty: false,
            presync: Presync::default(),
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

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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

    // ---- objects ----------------------------------------------------------------------

    pub(crate) fn create_object_locked(
        &self,
        st: &mut State,
        kind: ObjectKind,
        dataset: u32,
        block_size: u32,
    ) -> Result<u64, StoreError> {
        assert!(block_size.is_power_of_two() && (512..=1 << 20).contains(&block_size));
        let id = match st.free_objects.pop_first() {
            Some(id) => id,
            None => {
                let id = st.next_object;
                st.next_object += 1;
                id
            }
        };
        let mut obj = ObjectState::new(Dnode::new(kind, dataset, block_size, now_ns()));
        obj.dnode_dirty = true;
        st.objects.insert(id, obj);
        Ok(id)
    }

    /// Loads an object's state (dnode from the object table) into memory.
    pub(crate) fn object_mut<'a>(
        &self,
        st: &'a mut State,
        id: u64,
    ) -> Result<&'a mut ObjectState, StoreError> {
        if !st.objects.contains_key(&id) {
            let dnode = read_dnode(&self.pool, st, id)?;
            if dnode.kind == ObjectKind::Free {
                return Err(StoreError::Corrupt(format!("object {id} is free")));
            }
            st.objects.insert(id, ObjectState::new(dnode));
        }
        Ok(st.objects.get_mut(&id).expect("inserted"))
    }

    pub fn dnode(&self, id: u64) -> Result<Dnode, StoreError> {
        let mut st = self.lock();
        Ok(self.object_mut(&mut st, id)?.dnode)
    }

    /// Writes `data` at `offset` of an object in the open txg.
    pub(crate) fn write_locked(
        &self,
        st: &mut State,
        id: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<(), StoreError> {
        self.write_locked_with(st, id, offset, data, &mut Prefetched::new())
    }

    /// Blocks a write of `len` bytes at `offset` covers only in part, are not dirty, and
    /// whose current contents are on disk and not in `prefetched` yet: what a
    /// read-modify-write must read first. Only the first and the last block of a range can
    /// be partial.
    pub(crate) fn blocks_to_prefetch(
        &self,
        st: &mut State,
        id: u64,
        offset: u64,
        len: usize,
        prefetched: &Prefetched,
    ) -> Result<Vec<(u64, BlockPointer)>, StoreError> {
        let bs = u64::from(self.object_mut(st, id)?.dnode.block_size);
        let end = offset + len as u64;
        let mut partial: Vec<u64> = Vec::new();
        if len == 0 {
            return Ok(Vec::new());
        }
        if !offset.is_multiple_of(bs) || end - offset < bs {
            partial.push(offset / bs);
        }
        if !end.is_multiple_of(bs) && (end - 1) / bs != offset / bs {
            partial.push((end - 1) / bs);
        }
        let State { objects, cache, .. } = st;
        let obj = objects.get(&id).expect("loaded");
        let mut wanted = Vec::new();
        for blkid in partial {
            if obj.dirty.contains_key(&blkid) {
                continue;
            }
            if let BlockBase::Disk(bp) = block_base(&self.pool, cache, id, obj, blkid)? {
                if prefetched.get(&blkid).is_none_or(|(p, _)| *p != bp) {
                    wanted.push((blkid, bp));
                }
            }
        }
        Ok(wanted)
    }

    /// `write_locked`, taking the current contents of partly written blocks from
    /// `prefetched` when they were read from the block the object still points to.
    pub(crate) fn write_locked_with(
        &self,
        st: &mut State,
        id: u64,
        offset: u64,
        data: &[u8],
        prefetched: &mut Prefetched,
    ) -> Result<(), StoreError> {
        let obj = self.object_mut(st, id)?;
        let bs = u64::from(obj.dnode.block_size);
        let mut added = 0u64;
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let blkid = pos / bs;
            let within = (pos % bs) as usize;
            let n = (bs as usize - within).min(data.len() - done);
            let whole = within == 0 && n == bs as usize;
            let present = st
                .objects
                .get(&id)
                .expect("loaded")
                .dirty
                .contains_key(&blkid);
            // A partial write to a block not yet dirty starts from its current contents.
            let base = if present || whole {
                None
            } else {
                let obj = st.objects.get(&id).expect("loaded");
                Some(
                    match block_base(&self.pool, &mut st.cache, id, obj, blkid)? {
                        BlockBase::Zeros => vec![0u8; bs as usize],
                        BlockBase::Syncing => obj.syncing[&blkid].as_ref().clone(),
                        BlockBase::Disk(bp) => match prefetched.remove(&blkid) {
                            Some((read_from, mut block)) if read_from == bp => {
                                block.resize(bs as usize, 0);
                                block
                            }
                            _ => read_for_update(&self.pool, &bp, bs as usize)?,
                        },
                    },
                )
            };
            let obj = st.objects.get_mut(&id).expect("loaded");
            if !present {
                obj.punched.remove(&blkid);
                added += bs;
                if let Some(bp) = obj.forget_presynced(blkid) {
                    defer_free(st, &bp);
                }
            }
            let obj = st.objects.get_mut(&id).expect("loaded");

            let piece = &data[done..done + n];
            if whole {
                // A whole block: take the data as is (no zero fill, no second copy).
                obj.dirty.insert(blkid, piece.to_vec());
                obj.written_whole.insert(blkid);
            } else {
                obj.written_whole.remove(&blkid);
                let block = obj
                    .dirty
                    .entry(blkid)
                    .or_insert_with(|| base.unwrap_or_default());
                block[within..within + n].copy_from_slice(piece);
            }
            done += n;
        }
        let obj = st.objects.get_mut(&id).expect("loaded");
        let end = offset + data.len() as u64;
        if end > obj.dnode.size {
            obj.dnode.size = end;
        }
        obj.dnode.mtime_ns = now_ns();
        obj.dnode_dirty = true;
        st.dirty_bytes += added;
        Ok(())
    }

    /// Sets an object's size; shrinking frees blocks past the end at sync.
    pub(crate) fn truncate_locked(
        &self,
        st: &mut State,
        id: u64,
        size: u64,
    ) -> Result<(), StoreError> {
        let obj = self.object_mut(st, id)?;
        let bs = u64::from(obj.dnode.block_size);
        obj.dnode_dirty = true;
        if size >= obj.dnode.size {
            obj.dnode.size = size;
            return Ok(());
        }
        let keep_blocks = size.div_ceil(bs);
        forget_presynced(st, id, keep_blocks..);
        let obj = st.objects.get_mut(&id).expect("loaded");
        obj.dirty.retain(|&b, _| b < keep_blocks);
        obj.punched.retain(|&b| b < keep_blocks);
        obj.truncate_from = Some(
            obj.truncate_from
                .map_or(keep_blocks, |f| f.min(keep_blocks)),
        );
        obj.dnode.size = size;
        // Zero the tail of the last kept block so a later extension reads zeros.
        let tail = size % bs;
        if tail != 0 {
            let last = keep_blocks - 1;
            self.write_locked(st, id, last * bs + tail, &vec![0u8; (bs - tail) as usize])?;
            st.objects.get_mut(&id).expect("loaded").dnode.size = size;
        }
        Ok(())
    }

    /// Makes [offset, offset+len) read as zeros, freeing whole blocks inside it.
    pub(crate) fn punch_locked(
        &self,
        st: &mut State,
        id: u64,
        offset: u64,
        len: u64,
    ) -> Result<(), StoreError> {
        let obj = self.object_mut(st, id)?;
        let bs = u64::from(obj.dnode.block_size);
        let size = obj.dnode.size;
        let end = (offset + len).min(size);
        if offset >= end {
            return Ok(());
        }
        let first_full = offset.div_ceil(bs);
        let last_full = end / bs; // exclusive
        if first_full < last_full {
            forget_presynced(st, id, first_full..last_full);
            let obj = st.objects.get_mut(&id).expect("loaded");
            for b in first_full..last_full {
                if obj.dirty.remove(&b).is_some() {
                    st.dirty_bytes = st.dirty_bytes.saturating_sub(bs);
                }
                obj.punched.insert(b);
            }
            obj.dnode_dirty = true;
        }
        // Partial blocks at either end are zeroed by writing.
        let head_end = (first_full * bs).min(end);
        if offset < head_end {
            self.write_locked(st, id, offset, &vec![0u8; (head_end - offset) as usize])?;
        }
        let tail_start = (last_full * bs).max(head_end);
        if tail_start < end {
            self.write_locked(st, id, tail_start, &vec![0u8; (end - tail_start) as usize])?;
        }
        Ok(())
    }

    /// Deletes an object: its blocks are freed at sync and its id reused afterwards.
    pub(crate) fn free_object_locked(&self, st: &mut State, id: u64) -> Result<(), StoreError> {
        self.object_mut(st, id)?;
        forget_presynced(st, id, ..);
        let obj = st.objects.get_mut(&id).expect("loaded");
        let held = obj.dirty_bytes();
        obj.freeing = true;
        obj.dirty.clear();
        obj.dnode_dirty = true;
        st.dirty_bytes = st.dirty_bytes.saturating_sub(held);
        // A freed object leaves the error log (its id may be reused by a new object).
        let logged = st.damaged.len();
        st.damaged.retain(|&(_, object), _| object != id);
        st.damaged_dirty |= st.damaged.len() != logged;
        Ok(())
    }

    /// Whether the open txg holds enough dirty data to sync now.
    pub(crate) fn over_dirty_limit(&self, st: &State) -> bool {
        st.dirty_bytes >= self.config.dirty_max
    }

    // ---- space --------------------------------------------------------------------------

    /// Bytes allocated in `zfs list` units (asize × deflate ratio / 512, per vdev).
    pub(crate) fn deflated_alloc(&self, st: &State) -> u64 {
        st.alloc
            .vdevs
            .iter()
            .zip(&self.pool.tops)
            .map(|(v, t)| (v.allocated_bytes() >> 9) * t.shape().deflate_ratio(t.ashift()))
            .sum()
    }

    /// Pool space now: (zpool SIZE, ALLOC raw, AVAIL as zfs list).
    pub fn space(&self) -> PoolUsage {
        let st = self.lock();
        let geo = self.pool.space();
        let used = self.deflated_alloc(&st);
        PoolUsage {
            size: geo.size,
            alloc: st.alloc.allocated_bytes(),
            used,
            avail: geo.dspace.saturating_sub(geo.slop).saturating_sub(used),
            dirty: st.dirty_bytes,
        }
    }

    /// Whether `more` bytes fit next to what is allocated and dirty, outside the slop.
    fn space_fits(&self, st: &State, more: u64) -> bool {
        let geo = self.pool.space();
        let used = self.deflated_alloc(st) + st.dirty_bytes + more;
        used <= geo.dspace.saturating_sub(geo.slop)
    }

    /// Reserves room for `more` bytes of new data. Every dirty block needs new space
    /// (copy-on-write), and overwritten blocks stay allocated for two more txgs; so when the
    /// space does not fit, sync the open txg and let deferred frees drain (up to three
    /// syncs, like ZFS's write throttle waiting for txgs) before answering ENOSPC. The slop
    /// reserve keeps deletes and syncs possible on a full pool.
    pub(crate) fn reserve_space(&self, st: &mut State, more: u64) -> Result<(), StoreError> {
        for _ in 0..=FREE_DELAY_TXGS {
            if self.space_fits(st, more) {
                return Ok(());
            }
            if st.dirty_bytes == 0 && st.deferred.is_empty() {
                break;
            }
            self.sync_locked(st)?;
        }
        if self.space_fits(st, more) {
            Ok(())
        } else {
            Err(StoreError::NoSpace(self.pool.name().to_string()))
        }
    }

    // ---- sync ---------------------------------------------------------------------------

    /// Commits the open txg; returns its number. A failed sync leaves the on-disk pool at
    /// the previous txg (reopen the store to continue from there).
    pub fn sync(&self) -> Result<u64, StoreError> {
        let mut st = self.wait_for_writer(self.lock());
        self.sync_locked(&mut st)
    }

    pub(crate) fn sync_locked(&self, st: &mut State) -> Result<u64, StoreError> {
        let txg = st.txg;
        self.take_back_background_batch(st);
        // Blocks freed two txgs ago are no longer referenced by any kept uberblock. Wait for
        // readers still fetching blocks they looked up earlier (and for a background batch
        // still writing into space it was given).
        let _no_readers = self.read_gate.write().unwrap_or_else(|p| p.into_inner());
        let (release, keep): (Vec<_>, Vec<_>) = st
            .deferred
            .drain(..)
            .partition(|(f, _)| *f + FREE_DELAY_TXGS <= txg);
        st.deferred = keep;
        for (_, dva) in &release {
            st.alloc.free(dva);
        }
        let mut freed: Vec<Dva> = Vec::new();
        let props_by_dataset = self.write_props(st);
        let metadata_copies = self.config.metadata_copies.min(3);
        // 1. Every dirty object but the tables.
        let ids: Vec<u64> = st
            .objects
            .iter()
            .filter(|(&id, o)| id != DATASET_TABLE_OBJECT && o.is_dirty())
            .map(|(&id, _)| id)
            .collect();
        for id in &ids {
            let obj = st.objects.get_mut(id).expect("listed");
            let before = (obj.dnode.used, obj.dnode.logical, obj.dnode.physical);
            let props = props_by_dataset
                .get(&obj.dnode.dataset)
                .copied()
                .unwrap_or_else(default_data_props);
            let mut ctx = SyncCtx {
                pool: &self.pool,
                alloc: &mut st.alloc,
                freed: &mut freed,
                cache: &mut st.cache,
                txg,
                metadata_copies,
            };
            sync_object(&mut ctx, *id, obj, props)?;
            let after = (obj.dnode.used, obj.dnode.logical, obj.dnode.physical);
            if let Some(ds) = st.datasets.by_id_mut(obj.dnode.dataset) {
                ds.used = (ds.used + after.0).saturating_sub(before.0);
                ds.logical = (ds.logical + after.1).saturating_sub(before.1);
                ds.physical = (ds.physical + after.2).saturating_sub(before.2);
                st.datasets_dirty |= after != before;
            }
        }
        // 2. The dataset table.
        if st.datasets_dirty {
            let bytes = st.datasets.encode();
            self.truncate_locked(st, DATASET_TABLE_OBJECT, 0)?;
            self.write_locked(st, DATASET_TABLE_OBJECT, 0, &bytes)?;
            let obj = st.objects.get_mut(&DATASET_TABLE_OBJECT).expect("written");
            let mut ctx = SyncCtx {
                pool: &self.pool,
                alloc: &mut st.alloc,
                freed: &mut freed,
                cache: &mut st.cache,
                txg,
                metadata_copies,
            };
            sync_object(
                &mut ctx,
                DATASET_TABLE_OBJECT,
                obj,
                BlockKind::Metadata.metadata_props(0, metadata_copies),
            )?;
            st.datasets_dirty = false;
        }
        // 3. Dnodes into the object table, then the object table itself.
        let mut dnode_ids: Vec<u64> = st
            .objects
            .iter()
            .filter(|(_, o)| o.dnode_dirty)
            .map(|(&id, _)| id)
            .collect();
        dnode_ids.sort_unstable();
        for id in &dnode_ids {
            let obj = st.objects.get_mut(id).expect("listed");
            let dnode = if obj.freeing { Dnode::FREE } else { obj.dnode };
            obj.dnode_dirty = false;
            let mut bytes = [0u8; DNODE_SIZE];
            dnode.encode(&mut bytes);
            write_meta(&self.pool, st, *id, &bytes)?;
        }
        let mut ctx = SyncCtx {
            pool: &self.pool,
            alloc: &mut st.alloc,
            freed: &mut freed,
            cache: &mut st.cache,
            txg,
            metadata_copies,
        };
        let meta_props = WriteProps {
            kind: BlockKind::Dnodes,
            ..BlockKind::Dnodes.metadata_props(0, metadata_copies)
        };
        if st.meta.is_dirty() {
            sync_object(&mut ctx, 0, &mut st.meta, meta_props)?;
        }
        st.meta.dnode_dirty = false;
        for id in &dnode_ids {
            if st.objects.get(id).is_some_and(|o| o.freeing) {
                st.objects.remove(id);
                st.free_objects.insert(*id);
            }
        }
        // 4. Space map and root block: allocate the root block first so the map includes it.
        freed.extend(st.root_bp.copies().copied());
        for bp in std::mem::take(&mut st.space_map_bps) {
            freed.extend(bp.copies().copied());
        }
        st.deferred.extend(freed.into_iter().map(|d| (txg, d)));
        let sector = self.pool.max_sector();
        let root_copies = (metadata_copies + 1).min(3);
        let root_dvas = self.pool.allocate(
            &mut st.alloc,
            (ROOT_BLOCK_SIZE as u64).next_multiple_of(sector),
            root_copies,
            true,
        )?;
        let (map_len, map_bps) = self.write_space_map(st, txg, sector, metadata_copies)?;
        let root = RootBlock {
            txg,
            next_object: st.next_object,
            meta: st.meta.dnode,
            space_map_len: map_len,
            space_map_bps: map_bps.clone(),
            damaged: st.damaged.clone(),
            damaged_unlisted: st.damaged_unlisted,
        };
        let block = prepare(
            &root.encode(),
            raw_props(BlockKind::ObjsetRoot, root_copies),
            sector,
        );
        debug_assert_eq!(
            block.physical.len() as u64,
            (ROOT_BLOCK_SIZE as u64).next_multiple_of(sector)
        );
        let root_bp = self
            .pool
            .write_at_dvas(&mut st.alloc, root_dvas, &block, txg)?;
        // 5. Commit: everything durable, then the uberblock.
        self.pool.flush()?;
        // Leaves that missed this txg get it in their DTL before the txg is committed.
        self.pool.record_synced_txg(txg)?;
        // A leaf that failed for good gets a hot spare in its slot now (its config reaches
        // the labels first; this txg's uberblock already names the spare).
        self.pool.take_over_failed_leaves()?;
        self.pool.write_uberblock(txg, &root_bp.to_bytes())?;
        st.root_bp = root_bp;
        st.space_map_bps = map_bps;
        st.txg = txg + 1;
        st.damaged_dirty = false;
        st.dirty_bytes = 0;
        st.presync.taken_bytes = 0;
        st.objects.retain(|_, o| o.is_dirty());
        Ok(txg)
    }

    /// Encodes the space map (which must include its own chunks), writes it uncompressed.
    fn write_space_map(
        &self,
        st: &mut State,
        txg: u64,
        sector: u64,
        copies: usize,
    ) -> Result<(u64, Vec<BlockPointer>), StoreError> {
        let mut slack = 64 * 16 + 4096;
        let mut chunk_size = SPACE_MAP_CHUNK;
        for _attempt in 0..16 {
            let estimate = encode_space_map(&st.alloc, &st.deferred).len() + slack;
            let chunks = estimate.div_ceil(chunk_size);
            if chunks > MAX_SPACE_MAP_CHUNKS {
                return Err(StoreError::Corrupt(format!(
                    "space map of {estimate} bytes does not fit in {MAX_SPACE_MAP_CHUNKS} chunks of {chunk_size} bytes (pool too fragmented)"
                )));
            }
            let mut sizes = Vec::with_capacity(chunks);
            let mut left = estimate;
            for _ in 0..chunks {
                let n = left.min(chunk_size);
                sizes.push((n as u64).next_multiple_of(sector) as usize);
                left -= n;
            }
            let mut dvas = Vec::with_capacity(chunks);
            let mut fragmented = false;
            for &sz in &sizes {
                match self.pool.allocate(&mut st.alloc, sz as u64, copies, true) {
                    Ok(d) => dvas.push(d),
                    Err(cairn_pool::PoolError::NoSpace(_)) if chunk_size > MIN_SPACE_MAP_CHUNK => {
                        fragmented = true;
                        break;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let map = encode_space_map(&st.alloc, &st.deferred);
            let capacity: usize = sizes.iter().sum();
            if fragmented || map.len() > capacity {
                for d in dvas.iter().flat_map(|d| d.iter()).filter(|d| !d.is_empty()) {
                    st.alloc.free(d);
                }
                if fragmented {
                    chunk_size /= 2;
                } else {
                    slack *= 4;
                }
                continue;
            }
            let mut bps = Vec::with_capacity(chunks);
            let mut pos = 0;
            for (sz, dva) in sizes.iter().zip(dvas) {
                let mut chunk = vec![0u8; *sz];
                let n = map.len().saturating_sub(pos).min(*sz);
                chunk[..n].copy_from_slice(&map[pos..pos + n]);
                pos += n;
                let block = prepare(&chunk, raw_props(BlockKind::Metadata, copies), sector);
                bps.push(self.pool.write_at_dvas(&mut st.alloc, dva, &block, txg)?);
            }
            return Ok((map.len() as u64, bps));
        }
        Err(StoreError::NoSpace(self.pool.name().to_string()))
    }

    /// Write props of every dataset, resolved through inheritance.
    pub(crate) fn write_props(&self, st: &State) -> HashMap<u32, WriteProps> {
        st.datasets
            .datasets
            .iter()
            .map(|d| (d.id, props_of(&st.datasets, d.id)))
            .collect()
    }
}

/// Space of the pool as the store sees it.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct PoolUsage {
    pub size: u64,
    /// Raw allocated bytes (zpool list ALLOC).
    pub alloc: u64,
    /// Allocated, in zfs list units.
    pub used: u64,
    pub avail: u64,
    /// Dirty bytes waiting for the next sync.
    pub dirty: u64,
}

fn raw_props(kind: BlockKind, copies: usize) -> WriteProps {
    WriteProps {
        compression: CompressionSetting::OFF,
        checksum: ChecksumKind::Blake3,
        copies,
        kind,
        level: 0,
    }
}

fn default_data_props() -> WriteProps {
    WriteProps {
        compression: CompressionSetting::LZ4,
        checksum: ChecksumKind::Fletcher4,
        copies: 1,
        kind: BlockKind::Data,
        level: 0,
    }
}

/// Data write props of a dataset from its effective properties.
pub fn props_of(table: &DatasetTable, id: u32) -> WriteProps {
    let get = |k: &str| table.property(id, k).0;
    WriteProps {
        compression: CompressionSetting::parse(&get("compression"))
            .unwrap_or(CompressionSetting::LZ4),
        checksum: ChecksumKind::from_name(&get("checksum")).unwrap_or(ChecksumKind::Blake3),
        copies: get("copies").parse().unwrap_or(1),
        kind: BlockKind::Data,
        level: 0,
    }
}

/// Effective block size property (`recordsize` / `volblocksize`) in bytes.
pub fn size_property(table: &DatasetTable, id: u32, key: &str) -> u32 {
    parse_size(&table.property(id, key).0).unwrap_or(128 << 10) as u32
}

/// Reads dnode `id` from the object table (object 0).
fn read_dnode(pool: &Pool, st: &mut State, id: u64) -> Result<Dnode, StoreError> {
    if id >= st.next_object {
        return Err(StoreError::Corrupt(format!("object {id} does not exist")));
    }
    let mut buf = [0u8; DNODE_SIZE];
    let n = read_object(
        pool,
        &mut st.cache,
        0,
        &st.meta,
        id * DNODE_SIZE as u64,
        &mut buf,
    )?;
    if n < DNODE_SIZE {
        return Ok(Dnode::FREE);
    }
    Dnode::decode(&buf).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// Writes dnode bytes for `id` into the object table's dirty blocks.
fn write_meta(
    pool: &Pool,
    st: &mut State,
    id: u64,
    bytes: &[u8; DNODE_SIZE],
) -> Result<(), StoreError> {
    let bs = u64::from(st.meta.dnode.block_size);
    let offset = id * DNODE_SIZE as u64;
    let blkid = offset / bs;
    if !st.meta.dirty.contains_key(&blkid) {
        let block = block_for_update(pool, &mut st.cache, 0, &st.meta, blkid)?;
        st.meta.dirty.insert(blkid, block);
    }
    let within = (offset % bs) as usize;
    st.meta.dirty.get_mut(&blkid).expect("inserted")[within..within + DNODE_SIZE]
        .copy_from_slice(bytes);
    st.meta.dnode.size = st.meta.dnode.size.max(offset + DNODE_SIZE as u64);
    Ok(())
}

/// Whole contents of an object (tables, directories).
pub(crate) fn load_object_bytes(
    pool: &Pool,
    st: &mut State,
    id: u64,
) -> Result<Vec<u8>, StoreError> {
    if !st.objects.contains_key(&id) {
        let dnode = read_dnode(pool, st, id)?;
        st.objects.insert(id, ObjectState::new(dnode));
    }
    let obj = st.objects.get(&id).expect("loaded");
    let mut buf = vec![0u8; obj.dnode.size as usize];
    read_object(pool, &mut st.cache, id, obj, 0, &mut buf)?;
    Ok(buf)
}

/// Compression of metadata is lz4; exposed for tests.
pub fn metadata_compression() -> Compression {
    Compression::Lz4
}

/// Hands the copies of a block that was written but never linked to the deferred frees of
/// the open txg (a reader may still be fetching it; the read gate covers the release).
pub(crate) fn defer_free(st: &mut State, bp: &BlockPointer) {
    let txg = st.txg;
    st.deferred.extend(bp.copies().map(|d| (txg, *d)));
}

/// Forgets what the background writer did for `blocks` of object `id`, which change again.
fn forget_presynced(st: &mut State, id: u64, blocks: impl std::ops::RangeBounds<u64> + Clone) {
    let Some(obj) = st.objects.get_mut(&id) else {
        return;
    };
    let mut keys: Vec<u64> = obj.syncing.range(blocks.clone()).map(|(k, _)| *k).collect();
    keys.extend(obj.written.range(blocks).map(|(k, _)| *k));
    let freed: Vec<BlockPointer> = keys
        .into_iter()
        .filter_map(|b| obj.forget_presynced(b))
        .collect();
    for bp in &freed {
        defer_free(st, bp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with(chunks: usize, damaged: usize) -> RootBlock {
        RootBlock {
            txg: 7,
            next_object: 42,
            meta: Dnode::new(ObjectKind::Table, 0, DNODE_BLOCK_SIZE, 1),
            space_map_len: 100,
            space_map_bps: vec![BlockPointer::HOLE; chunks],
            damaged: (0..damaged as u64).map(|i| ((1, i + 2), 5 + i)).collect(),
            damaged_unlisted: 0,
        }
    }

    #[test]
    fn error_log_round_trips_in_the_root_block() {
        let root = root_with(3, 10);
        let back = RootBlock::decode(&root.encode()).unwrap();
        assert_eq!(back.damaged, root.damaged);
        assert_eq!(back.damaged_unlisted, 0);
        assert_eq!(back.space_map_bps.len(), 3);
    }

    #[test]
    fn a_full_error_log_counts_what_it_cannot_name() {
        // With every space-map chunk in use, the log has the least room.
        let root = root_with(MAX_SPACE_MAP_CHUNKS, 5000);
        let back = RootBlock::decode(&root.encode()).unwrap();
        assert!(!back.damaged.is_empty() && back.damaged.len() < 5000);
        assert_eq!(back.damaged.len() as u64 + back.damaged_unlisted, 5000);
    }

    #[test]
    fn a_root_block_from_before_the_error_log_has_an_empty_log() {
        let mut bytes = root_with(2, 0).encode();
        let at = 32 + DNODE_SIZE + 16 + 2 * BP_SIZE;
        bytes[at..].fill(0);
        let back = RootBlock::decode(&bytes).unwrap();
        assert!(back.damaged.is_empty());
    }

    proptest::proptest! {
        #[test]
        fn error_log_decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = decode_error_log(&bytes);
        }

        #[test]
        fn damaged_root_block_never_panics(at in 0usize..ROOT_BLOCK_SIZE, junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..64)) {
            let mut bytes = root_with(2, 30).encode();
            let end = (at + junk.len()).min(bytes.len());
            bytes[at..end].copy_from_slice(&junk[..end - at]);
            let _ = RootBlock::decode(&bytes);
        }
    }
}
