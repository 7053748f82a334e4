//! The intent log (ZFS's ZIL): FLUSH, FUA and fsync return once the writes they cover are
//! in a chain of log blocks, without waiting for a txg sync. Blocks and records on disk:
//! `crate::intent_format`.
//!
//! ```text
//!  write/punch/truncate ──► store (open txg) ──► then an intent {seq, object, range} is
//!                                                 appended to `Pending` (no data copied)
//!  commit_log()  one committer at a time; the others queue and most find their writes
//!                already durable when their turn comes (group commit)
//!    1 take the pending intents of every dataset that can log (`take_loggable`); read
//!      their data from the store as it is now
//!    2 under the store lock: still the same chain? allocate the log blocks (and a block
//!      of its own for each large write, logged by pointer); take the read gate
//!    3 write the blocks, flush the leaves: durable up to the last intent taken
//!  txg sync      retires the chain (its blocks freed with the txg) and allocates the head of
//!                a new one, which the new root block names; at the commit the intents the
//!                txg covers are dropped and the new chain becomes current
//!  import        the chain the root block names is read to its first block that does not
//!                verify; its blocks and the blocks its records point to are claimed
//!                (allocated in memory); its records are applied to the open txg, which is
//!                synced once, at the end. Reads are speculative (a block the crash cut
//!                charges no device), and a block logged by pointer that cannot be read in
//!                the chain's last block ends it
//! ```
//!
//! Invariants (why an acknowledged write survives a crash at any moment):
//! - An intent is appended only after its write is in the store, so a sync that takes the
//!   store lock later includes it; a sync clears only the intents appended before it took
//!   the lock (`LogChain::covered`), and marks them durable only once it committed.
//! - Records in chain C carry data read while C was current (the generation check in step
//!   2), so replaying C onto the root block that names C never puts back older data.
//! - A log commit writes its blocks holding the read gate, which every sync takes
//!   exclusively first: no sync frees or reuses a chain's blocks while they are written.
//! - Changes the log has no record for (attributes of a volume, a create, rename or
//!   removal through a path rather than `posix`, an object freed other than at its last
//!   close) mark their dataset `unlogged`, as does a directory with a change other than a
//!   logged create, rename, link or removal (`LogChain::dir_changes` counts every insert
//!   and removal, and the logged ones: `crate::intent_names`); a dataset change (create,
//!   destroy, a property; not the unlinked set, which replay rebuilds) blocks every
//!   dataset. A log commit for a blocked dataset syncs the txg instead. A commit for another dataset takes the intents of
//!   every dataset that can log and leaves the blocked ones' for the sync (checked again
//!   under the lock before the blocks are allocated), so each dataset replays to a state
//!   it had: its last txg plus the writes logged before its first unrecorded change. (An
//!   object belongs to one dataset, and a freed id is used again only after the txg that
//!   freed it, so no record names an object another dataset changed.)
//! - The attributes (mode, owner, times; a file's size by a TRUNCATE) of files,
//!   directories, symbolic links and special files are logged: every such object a commit
//!   covers gets an ATTR record after its data, with the attributes as they are at the
//!   commit, so replay also keeps a file's mtime.
//! - Data is read at commit time, so a record holds the newest bytes of its range; every
//!   record is applied whole at replay, so no unacknowledged write appears in part.
//! - A replay overwrites nothing the committed root block or its chain needs before its
//!   one sync commits: no sync runs part-way (`sync_allowed_midway`) and nothing is
//!   allocated over the claimed chain, so an import cut short replays the same chain again.
//! - A namespace intent (CREATE, RENAME, LINK, REMOVE; XATTR too) is appended under the
//!   store lock (`note_namespace`), so a sync covers it exactly when it covers the change: replaying
//!   chain C onto the root block that names C finds the state the change was made in (a
//!   created node's id free: a freed id is used again only after the txg that freed it).
//!   Replay repeats it with the same `posix` code (`crate::intent_names`).
//! - Intents are kept only once the log is armed, which the first commit does under the
//!   committer lock before it syncs: a commit that finds the log armed runs after that
//!   sync, which covered every write that kept no intent.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use cairn_pool::io::bp::{BlockKind, Dva};
use cairn_pool::io::pipeline::{prepare, PreparedBlock};

use crate::core::{State, StoreCore};
use crate::dnode::ObjectKind;
use crate::error::StoreError;
use crate::fs::Resolved;
use crate::intent_format::{
    capacity, LogBlock, LogBlockAddr, LogHead, LoggedAttrs, Record, LOG_HEADER, MAX_LOG_BLOCK,
};
use crate::intent_state::{
    attrs_logged, Intent, IntentOp, LogPolicy, SyncPolicy, MAX_CHAIN_BLOCKS,
};
use crate::props::raw_props;

/// Writes at least this large go to a block of their own and are logged by pointer (ZFS's
/// `zfs_immediate_write_sz`, 32 KiB).
const IMMEDIATE_WRITE: u64 = 32 << 10;
/// Smallest log block.
const MIN_LOG_BLOCK: u64 = 8 << 10;
/// A commit with more bytes written than this syncs the txg instead: the writes would
/// otherwise be written twice, to the log and by the txg, for no gain in latency.
const MAX_COMMIT_BYTES: u64 = 32 << 20;

/// Log blocks and pointer blocks of one commit, allocated, ready to write.
struct CommitPlan {
    blocks: Vec<(Dva, Vec<u8>)>,
}

/// A record whose data goes to a block of its own.
struct PointerData {
    block: PreparedBlock,
    object: u64,
    offset: u64,
}

/// What a commit logs, in order: records with data inline, and writes logged by pointer.
enum Planned {
    Inline(Record),
    Pointed(PointerData),
}

impl StoreCore {
    /// The `sync` and `logbias` properties of a dataset.
    pub(crate) fn log_policy(&self, st: &State, dataset: u32) -> LogPolicy {
        let sync = match st.datasets.property(dataset, "sync").0.as_str() {
            "always" => SyncPolicy::Always,
            "disabled" => SyncPolicy::Disabled,
            _ => SyncPolicy::Standard,
        };
        let by_pointer = st.datasets.property(dataset, "logbias").0 == "throughput";
        LogPolicy { sync, by_pointer }
    }

    /// The `sync` property of a dataset (what FLUSH and fsync on it do).
    pub fn sync_policy(&self, dataset: u32) -> SyncPolicy {
        self.log_policy(&self.lock(), dataset).sync
    }

    /// After a write, punch or truncate returned from the store: keeps its intent, and under
    /// `sync=always` makes it durable before returning.
    pub(crate) fn note_intent(
        &self,
        policy: LogPolicy,
        target: Resolved,
        op: IntentOp,
    ) -> Result<(), StoreError> {
        if policy.sync == SyncPolicy::Disabled {
            return Ok(());
        }
        if policy.sync == SyncPolicy::Always || self.intent.is_armed() {
            let object = (target.dataset, target.object, target.kind);
            self.intent.append(object, op, policy.by_pointer);
        }
        if policy.sync == SyncPolicy::Always {
            return self.commit_log_for(Some(target.dataset));
        }
        Ok(())
    }

    /// FLUSH or fsync on a dataset: every write, punch and truncate of it that returned
    /// before this call is durable when it returns (none are under `sync=disabled`).
    pub fn sync_writes(&self, dataset: u32) -> Result<(), StoreError> {
        match self.sync_policy(dataset) {
            SyncPolicy::Disabled => Ok(()),
            _ => self.commit_log_for(Some(dataset)),
        }
    }

    /// Makes every write, punch and truncate of the pool that returned before this call
    /// durable: through the intent log when it can, else by a txg sync.
    pub fn commit_log(&self) -> Result<(), StoreError> {
        self.commit_log_for(None)
    }

    /// A log commit that makes the writes of `scope` (a dataset; None: every dataset)
    /// durable. It also takes the other datasets' intents that can be logged now (group
    /// commit); a dataset with a change the log cannot record makes a commit for it a sync.
    pub(crate) fn commit_log_for(&self, scope: Option<u32>) -> Result<(), StoreError> {
        self.refuse_if_suspended()?;
        let target = self.intent.appended();
        let _committer = self
            .intent
            .committer
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // Armed under the committer lock: a commit that finds the log armed runs after the
        // sync of the one that armed it, which covered the writes that kept no intents.
        let was_armed = self.intent.armed.swap(true, Ordering::SeqCst);
        if !was_armed {
            // Writes before now kept no intents: only a sync covers them.
            return self.sync_for_log();
        }
        let Some((intents, generation)) = self.take_loggable(scope, target) else {
            return self.sync_for_log();
        };
        if intents.is_empty() {
            return Ok(());
        }
        if written_bytes(&intents) > MAX_COMMIT_BYTES {
            return self.sync_for_log();
        }
        match self.log_intents(&intents, generation) {
            Ok(true) => Ok(()),
            // The intents taken are gone from the list: a sync covers them (and the chain,
            // if a write to it failed, is marked broken).
            Ok(false) | Err(_) => self.sync_for_log(),
        }
    }

    /// Under the committer lock: the pending intents of every dataset that can log now,
    /// taken from the list, and the chain's generation. None: `scope` cannot log (a sync
    /// must cover it). Empty: every intent of `scope` up to `target` is durable already
    /// (an earlier commit took it and finished before this one got the committer lock).
    fn take_loggable(&self, scope: Option<u32>, target: u64) -> Option<(Vec<Intent>, u64)> {
        let st = self.lock();
        let blocked = unloggable_datasets(&st)?;
        let scope_blocked = match scope {
            Some(dataset) => blocked.contains(&dataset),
            None => !blocked.is_empty(),
        };
        if scope_blocked {
            return None;
        }
        let mut p = self.intent.pending();
        let wanted = |i: &Intent| i.seq <= target && scope.is_none_or(|d| i.dataset == d);
        if !p.intents.iter().any(wanted) {
            return Some((Vec::new(), st.log.generation));
        }
        // Intents of datasets that cannot log stay for the sync that will cover them.
        let (taken, kept) = std::mem::take(&mut p.intents)
            .into_iter()
            .partition(|i| !blocked.contains(&i.dataset));
        p.intents = kept;
        Some((taken, st.log.generation))
    }

    /// A txg sync for a log commit that cannot use the log.
    fn sync_for_log(&self) -> Result<(), StoreError> {
        let mut st = self.wait_for_writer(self.lock());
        self.sync_locked(&mut st).map(|_| ())
    }

    /// Steps 1–3 of a log commit (see the module's diagram); false: the intents could not
    /// be logged (a change the log cannot record came meanwhile), a sync must cover them.
    fn log_intents(&self, intents: &[Intent], generation: u64) -> Result<bool, StoreError> {
        let batch = self.read_intents(intents)?;
        let mut st = self.lock();
        if st.log.generation != generation {
            // A txg committed since the intents were taken: it holds every one of them.
            return Ok(true);
        }
        // A dataset of these intents made a change the log cannot record meanwhile: its
        // records, replayed over the committed txg without that change, could be wrong.
        match unloggable_datasets(&st) {
            Some(blocked) if intents.iter().all(|i| !blocked.contains(&i.dataset)) => {}
            _ => return Ok(false),
        }
        let plan = match self.plan_commit(&mut st, batch) {
            Ok(plan) => plan,
            Err(e) => {
                st.log.broken = true;
                return Err(e);
            }
        };
        let gate = self.read_gate.read().unwrap_or_else(|p| p.into_inner());
        drop(st);
        let written = self.write_plan(&plan);
        drop(gate);
        if written.is_err() {
            self.lock().log.broken = true;
        }
        written.map(|()| true)
    }

    /// Step 1: the records for `intents`, with their data as the store holds it now.
    fn read_intents(&self, intents: &[Intent]) -> Result<Vec<Planned>, StoreError> {
        let mut batch = Vec::with_capacity(intents.len());
        let sector = self.pool.max_sector();
        let keep = last_of_each_range(intents);
        for (intent, _) in intents.iter().zip(keep).filter(|(_, k)| *k) {
            let object = intent.object;
            match &intent.op {
                &IntentOp::Truncate { size } => {
                    batch.push(Planned::Inline(Record::Truncate { object, size }))
                }
                &IntentOp::Punch { offset, len } => batch.push(Planned::Inline(Record::Punch {
                    object,
                    offset,
                    bytes: len,
                })),
                IntentOp::Attr => {}
                IntentOp::Create(create) => batch.push(Planned::Inline(Record::Create {
                    object,
                    create: (**create).clone(),
                })),
                IntentOp::Rename { rename, .. } => batch.push(Planned::Inline(Record::Rename {
                    object,
                    rename: (**rename).clone(),
                })),
                IntentOp::Link { dir, name } => batch.push(Planned::Inline(Record::Link {
                    object,
                    dir: *dir,
                    name: name.to_string(),
                })),
                IntentOp::Remove { dir, name, rmdir } => {
                    batch.push(Planned::Inline(Record::Remove {
                        object,
                        dir: *dir,
                        name: name.to_string(),
                        rmdir: *rmdir,
                    }))
                }
                IntentOp::Xattr(x) => batch.push(Planned::Inline(Record::Xattr {
                    object,
                    xattr: (**x).clone(),
                })),
                &IntentOp::Write { offset, len } => {
                    let mut data = vec![0u8; len as usize];
                    let target = Resolved {
                        dataset: intent.dataset,
                        object,
                        kind: intent.kind,
                    };
                    let n = match self.read(&target, offset, &mut data) {
                        Ok(n) => n,
                        // Freed since (its last name went, a REMOVE or RENAME record
                        // follows): replay frees it too.
                        Err(_) if self.live_dnode(object).is_none() => continue,
                        Err(e) => return Err(e),
                    };
                    data.truncate(n);
                    if data.is_empty() {
                        continue;
                    }
                    if intent.by_pointer || data.len() as u64 >= IMMEDIATE_WRITE {
                        let block = prepare(&data, raw_props(BlockKind::Data, 1), sector);
                        batch.push(Planned::Pointed(PointerData {
                            block,
                            object,
                            offset,
                        }));
                    } else {
                        batch.push(Planned::Inline(Record::Write {
                            object,
                            offset,
                            data,
                        }));
                    }
                }
            }
        }
        self.attr_records(intents, &mut batch);
        Ok(batch)
    }

    /// An ATTR record for each file, directory, symbolic link or special file `intents`
    /// cover (and the directories and other objects a namespace change touched: their
    /// times changed), with its attributes as they are now (after the batch's data: replay
    /// sets them last). Objects gone since are skipped.
    fn attr_records(&self, intents: &[Intent], batch: &mut Vec<Planned>) {
        let touched = intents.iter().flat_map(|i| i.op.also_changed());
        let mut files: Vec<u64> = intents
            .iter()
            .filter(|i| attrs_logged(i.kind))
            .map(|i| i.object)
            .chain(touched)
            .collect();
        files.sort_unstable();
        files.dedup();
        for object in files {
            let Some(dn) = self.live_dnode(object) else {
                continue;
            };
            let attrs = LoggedAttrs {
                mode: dn.mode,
                uid: dn.uid,
                gid: dn.gid,
                atime_ns: dn.atime_ns,
                mtime_ns: dn.mtime_ns,
                ctime_ns: dn.ctime_ns,
            };
            batch.push(Planned::Inline(Record::Attr { object, attrs }));
        }
    }

    /// Step 2: allocates the pointer blocks and the log blocks (each naming the next,
    /// allocated now too) and encodes them.
    fn plan_commit(&self, st: &mut State, batch: Vec<Planned>) -> Result<CommitPlan, StoreError> {
        let txg = st.txg;
        let mut plan = CommitPlan { blocks: Vec::new() };
        let mut records = Vec::with_capacity(batch.len());
        for planned in batch {
            let p = match planned {
                Planned::Inline(r) => {
                    records.push(r);
                    continue;
                }
                Planned::Pointed(p) => p,
            };
            let psize = p.block.physical.len() as u64;
            let dvas = self.pool.allocate_log(&mut st.alloc, psize)?;
            st.log.allocated.push(dvas[0]);
            st.log.bytes += psize;
            let bp = p.block.pointer(dvas, txg);
            plan.blocks.push((dvas[0], p.block.physical.to_vec()));
            records.push(Record::WriteBlock {
                object: p.object,
                offset: p.offset,
                bytes: u64::from(p.block.lsize),
                bp,
            });
        }
        self.pack_log_blocks(st, records, &mut plan)?;
        Ok(plan)
    }

    /// Packs records into log blocks from the chain's tail on; the last one names a next
    /// block sized for a commit like this one.
    fn pack_log_blocks(
        &self,
        st: &mut State,
        records: Vec<Record>,
        plan: &mut CommitPlan,
    ) -> Result<(), StoreError> {
        let sector = self.pool.max_sector();
        let total: usize = records.iter().map(Record::len).sum();
        let mut left = total;
        let mut records = records.into_iter().peekable();
        loop {
            let here = st.log.tail;
            let room = capacity(here.psize as usize);
            let mut in_block = Vec::new();
            let mut used = 0;
            while let Some(r) = records.next_if(|r| used + r.len() <= room) {
                used += r.len();
                in_block.push(r);
            }
            left -= used;
            let more = records.peek().is_some();
            // The next block: big enough for what is left, or for a commit like this one.
            let want = if more { left } else { total };
            let next_psize = log_block_size(want, sector);
            let dvas = self.pool.allocate_log(&mut st.alloc, next_psize)?;
            st.log.allocated.push(dvas[0]);
            let next = LogBlockAddr {
                dva: dvas[0],
                psize: next_psize as u32,
            };
            let block = LogBlock {
                chain: st.log.head.map_or(0, |h| h.chain),
                seq: st.log.next_seq,
                next,
                records: in_block,
            };
            plan.blocks
                .push((here.dva, block.encode(here.psize as usize)));
            st.log.tail = next;
            st.log.next_seq += 1;
            st.log.blocks += 1;
            st.log.bytes += u64::from(here.psize);
            if !more {
                return Ok(());
            }
        }
    }

    /// Step 3: every block written, then the leaves of the vdevs written flushed.
    fn write_plan(&self, plan: &CommitPlan) -> Result<(), StoreError> {
        // Someone waits for these writes (fsync, FLUSH, sync=always): sync writes.
        let _io = cairn_vdev::io_class::enter(cairn_vdev::io_class::IoClass::SyncWrite);
        let mut written = std::collections::BTreeSet::new();
        for (dva, bytes) in &plan.blocks {
            self.pool
                .write_block(dva.vdev as usize, dva.offset, bytes)?;
            written.insert(dva.vdev as usize);
        }
        for vdev in written {
            self.pool.flush_vdev(vdev)?;
        }
        Ok(())
    }

    /// At the start of a txg sync (store lock and read gate held): retires the current
    /// chain and, if the log is in use, allocates the head of the next one.
    pub(crate) fn log_before_sync(&self, st: &mut State) -> Result<(), StoreError> {
        let txg = st.txg;
        st.log.covered = self.intent.appended();
        let retired = std::mem::take(&mut st.log.allocated);
        st.deferred.extend(retired.into_iter().map(|d| (txg, d)));
        st.log.head = None;
        // Until the commit: a failed sync leaves no usable chain.
        st.log.broken = true;
        st.log.next = None;
        if !self.intent.is_armed() {
            return Ok(());
        }
        let psize = log_block_size(0, self.pool.max_sector());
        let dvas = self.pool.allocate_log(&mut st.alloc, psize)?;
        let head = LogHead {
            chain: chain_id(txg),
            head: LogBlockAddr {
                dva: dvas[0],
                psize: psize as u32,
            },
        };
        st.log.next = Some((head, vec![dvas[0]]));
        Ok(())
    }

    /// After the uberblock of a sync is written: the chain its root block names becomes
    /// current, and the intents the txg covers are durable.
    pub(crate) fn log_after_commit(&self, st: &mut State) {
        st.log.generation += 1;
        match st.log.next.take() {
            Some((head, allocated)) => st.log.install(head, allocated),
            None => {
                st.log.head = None;
                st.log.broken = false;
                st.log.forget_changes();
            }
        }
        self.intent.committed(st.log.covered);
    }
}

impl StoreCore {
    /// Before a log device leaves the pool (`cairn remove`): the log stops (a later commit
    /// starts it again, on the data vdevs if no log device is left), and three syncs retire
    /// its chain and release the frees deferred behind it. Fails if a log device still
    /// holds anything then.
    pub fn release_log_devices(&self) -> Result<(), StoreError> {
        let _committer = self
            .intent
            .committer
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.intent.armed.store(false, Ordering::SeqCst);
        for _ in 0..=crate::core::FREE_DELAY_TXGS {
            self.sync()?;
        }
        let st = self.lock();
        for (v, a) in st.alloc.vdevs.iter().enumerate() {
            if a.log && a.allocated_bytes() > 0 {
                return Err(StoreError::corrupt(
                    "space map",
                    format!(
                        "log device vdev {v} still holds {} bytes after its log was retired",
                        a.allocated_bytes()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Which intents to log: a write is dropped when a later write of the same object has
/// exactly its range (its data, read at commit time, would be the same bytes).
fn last_of_each_range(intents: &[Intent]) -> Vec<bool> {
    let mut seen = std::collections::HashSet::new();
    let mut keep: Vec<bool> = intents
        .iter()
        .rev()
        .map(|i| match i.op {
            IntentOp::Write { offset, len } => seen.insert((i.object, offset, len)),
            _ => true,
        })
        .collect();
    keep.reverse();
    keep
}

/// Bytes the write intents cover.
fn written_bytes(intents: &[Intent]) -> u64 {
    intents
        .iter()
        .map(|i| match i.op {
            IntentOp::Write { len, .. } => len,
            _ => 0,
        })
        .sum()
}

/// The datasets whose intents cannot be logged now: those with a change in the open txg
/// the log cannot record (`LogChain::unlogged`, and a changed directory, unless every
/// change to it was a create the log records). None: no dataset can log (no usable
/// chain, or the dataset table changed, or a changed directory whose dataset is not
/// known).
fn unloggable_datasets(st: &State) -> Option<BTreeSet<u32>> {
    if !st.log.usable() || st.datasets_dirty {
        return None;
    }
    let mut blocked = st.log.unlogged.clone();
    for dir in st.dirs.dirty_ids() {
        if !st.log.dir_fully_logged(dir) {
            blocked.insert(st.objects.get(&dir)?.dnode.dataset);
        }
    }
    Some(blocked)
}

/// A log block's size for `payload` record bytes: a power of two from MIN_LOG_BLOCK to
/// MAX_LOG_BLOCK, a multiple of the sector.
fn log_block_size(payload: usize, sector: u64) -> u64 {
    let want = (payload + LOG_HEADER) as u64;
    want.next_power_of_two()
        .clamp(
            MIN_LOG_BLOCK.max(sector),
            (MAX_LOG_BLOCK as u64).max(sector),
        )
        .next_multiple_of(sector)
}

/// A chain id no earlier chain of this pool is likely to have had: the txg, mixed with the
/// time (a pool rewound to an older txg reuses txg numbers).
fn chain_id(txg: u64) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(&txg.to_le_bytes());
    h.update(&crate::core::now_ns().to_le_bytes());
    let b = h.finalize();
    u64::from_le_bytes(b.as_bytes()[..8].try_into().expect("8 bytes")) | 1
}

/// Marks the store as replaying its log while alive (`StoreCore::sync_allowed_midway`).
struct Replaying<'a>(&'a StoreCore);

impl<'a> Replaying<'a> {
    fn start(store: &'a StoreCore) -> Replaying<'a> {
        store.replaying.store(true, Ordering::SeqCst);
        Replaying(store)
    }
}

impl Drop for Replaying<'_> {
    fn drop(&mut self) {
        self.0.replaying.store(false, Ordering::SeqCst);
    }
}

impl StoreCore {
    /// Whether a write may sync the txg part-way (the dirty cap, a full pool or quota).
    /// Not while the log is replayed: such a sync would retire the chain before its end is
    /// applied (a crash then loses those records), and its allocations could take the
    /// space of blocks logged by pointer that are still to be read (they are free in the
    /// committed space map). The replay's txg is synced once, whole, at its end; it holds
    /// what the crashed txg held, whatever `dirty_max` is now.
    pub(crate) fn sync_allowed_midway(&self) -> bool {
        !self.replaying.load(Ordering::SeqCst)
    }
}

/// What replaying one record did.
enum Applied {
    Yes,
    /// Its object is gone, or is not a file or volume.
    Skipped,
    /// The block its data was logged in cannot be read (the crash cut its commit, or the
    /// block is damaged).
    DataCut(StoreError),
}

/// What a replay found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    pub blocks: u64,
    pub records: u64,
    /// Records naming an object that no longer exists (skipped).
    pub skipped: u64,
}

impl StoreCore {
    /// At import: applies the chain the root block names (to its first block that does not
    /// verify) to the open txg and syncs it. Nothing is allocated before every block was
    /// read, so blocks allocated after the last commit (free in its space map) are intact.
    pub(crate) fn replay_log(&self) -> Result<ReplayReport, StoreError> {
        let Some(head) = self.lock().log.head else {
            return Ok(ReplayReport::default());
        };
        let blocks = self.read_chain(head);
        self.claim_chain(&blocks);
        let mut report = ReplayReport {
            blocks: blocks.len() as u64,
            ..Default::default()
        };
        let last = blocks.len().saturating_sub(1);
        let _replaying = Replaying::start(self);
        'chain: for (i, block) in blocks.into_iter().enumerate() {
            for record in block.records {
                match self.apply_record(&record)? {
                    Applied::Yes => report.records += 1,
                    Applied::Skipped => {
                        report.records += 1;
                        report.skipped += 1;
                    }
                    // In the chain's last block, its commit is the one the crash cut, so
                    // never acknowledged: the chain ends here, as at a block that does not
                    // verify. (Commits run one at a time: a block after it means its
                    // commit finished, and the data is damaged.)
                    Applied::DataCut(_) if i == last => break 'chain,
                    Applied::DataCut(e) => return Err(e),
                }
            }
        }
        drop(_replaying);
        if report.records > 0 {
            let txg = self.sync()?;
            self.pool.post_event(
                "log_replay",
                None,
                &[
                    ("blocks", report.blocks.to_string()),
                    ("records", report.records.to_string()),
                    ("skipped", report.skipped.to_string()),
                    ("txg", txg.to_string()),
                ],
            );
        }
        Ok(report)
    }

    /// Marks allocated what the committed space map counts free but the chain still needs
    /// until the replay's txg commits (ZFS's `zil_claim`): its blocks after the head (the
    /// head is allocated in the map) and the blocks its records point to. They join the
    /// chain's blocks, which the replay's sync retires into the deferred frees, so no
    /// allocation before that sync's commit can overwrite them and an import cut short
    /// finds the chain whole again. A range already allocated is left alone (the record
    /// pointing there then fails its checksum at replay).
    fn claim_chain(&self, blocks: &[LogBlock]) {
        let mut dvas: Vec<Dva> = blocks.iter().map(|b| b.next.dva).collect();
        for record in blocks.iter().flat_map(|b| &b.records) {
            if let Record::WriteBlock { bp, .. } = record {
                dvas.extend(bp.copies().copied());
            }
        }
        let mut st = self.lock();
        for dva in dvas.into_iter().filter(|d| !d.is_empty()) {
            let Some(vdev) = st.alloc.vdevs.get_mut(dva.vdev as usize) else {
                continue;
            };
            if vdev.claim(dva.offset, dva.asize).is_ok() {
                st.log.allocated.push(dva);
            }
        }
    }

    /// The chain's blocks in order, up to the first that cannot be read or verified, or
    /// belongs to another chain.
    fn read_chain(&self, head: LogHead) -> Vec<LogBlock> {
        let mut out = Vec::new();
        let mut at = head.head;
        while !at.is_empty() && out.len() < MAX_CHAIN_BLOCKS * 4 {
            let psize = at.psize as usize;
            if !(LOG_HEADER..=MAX_LOG_BLOCK).contains(&psize) {
                break;
            }
            let mut buf = vec![0u8; psize];
            let verify = |b: &[u8]| LogBlock::verifies(b);
            // The block after the last one written was allocated but never written: read
            // speculatively, its failure to verify charges no device.
            if self
                .pool
                .read_block_speculative(at.dva.vdev as usize, at.dva.offset, &mut buf, &verify)
                .is_err()
            {
                break;
            }
            let Ok(block) = LogBlock::decode(&buf) else {
                break;
            };
            if block.chain != head.chain || block.seq != out.len() as u64 {
                break;
            }
            at = block.next;
            out.push(block);
        }
        out
    }

    /// Applies one record.
    fn apply_record(&self, record: &Record) -> Result<Applied, StoreError> {
        let namespace = match record {
            Record::Create { object, create } => Some(self.replay_create(*object, create)),
            Record::Rename { object, rename } => Some(self.replay_rename(*object, rename)),
            Record::Link { object, dir, name } => Some(self.replay_link(*object, *dir, name)),
            Record::Remove {
                object,
                dir,
                name,
                rmdir,
            } => Some(self.replay_remove(*object, *dir, name, *rmdir)),
            Record::Xattr { object, xattr } => Some(self.replay_xattr(*object, xattr)),
            _ => None,
        };
        if let Some(applied) = namespace {
            return Ok(match applied? {
                true => Applied::Yes,
                false => Applied::Skipped,
            });
        }
        let Some(dnode) = self.live_dnode(record.object()) else {
            return Ok(Applied::Skipped);
        };
        let applies = match record {
            Record::Attr { .. } => attrs_logged(dnode.kind),
            _ => matches!(dnode.kind, ObjectKind::File | ObjectKind::Volume),
        };
        if !applies {
            return Ok(Applied::Skipped);
        }
        let target = Resolved {
            dataset: dnode.dataset,
            object: record.object(),
            kind: dnode.kind,
        };
        match record {
            Record::Write { offset, data, .. } => {
                self.write_unchecked(&target, *offset, data)?;
            }
            Record::WriteBlock {
                offset, bytes, bp, ..
            } => {
                // Written with the log block that names it: a crash may have cut it
                // (`Pool::read_bp_speculative` charges no device for that).
                let data = match self.pool.read_bp_speculative(bp) {
                    Ok(data) => data,
                    Err(e) => return Ok(Applied::DataCut(e.into())),
                };
                let n = (*bytes as usize).min(data.len());
                self.write_unchecked(&target, *offset, &data[..n])?;
            }
            Record::Truncate { size, .. } if dnode.kind == ObjectKind::File => {
                self.truncate_unlogged(&target, *size)?;
            }
            Record::Truncate { .. } => return Ok(Applied::Skipped),
            Record::Punch { offset, bytes, .. } => {
                self.punch_unlogged(&target, *offset, *bytes)?;
            }
            Record::Attr { attrs, .. } => {
                self.set_logged_attrs(record.object(), attrs)?;
            }
            Record::Create { .. }
            | Record::Rename { .. }
            | Record::Link { .. }
            | Record::Remove { .. }
            | Record::Xattr { .. } => unreachable!("replayed above"),
        }
        Ok(Applied::Yes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_blocks_are_powers_of_two_within_bounds_and_sectors() {
        assert_eq!(log_block_size(0, 4096), 8192);
        assert_eq!(log_block_size(4096 + 24, 4096), 8192);
        assert_eq!(log_block_size(5000, 512), 8192);
        assert_eq!(log_block_size(9000, 4096), 16384);
        assert_eq!(log_block_size(1 << 30, 4096), MAX_LOG_BLOCK as u64);
        assert_eq!(log_block_size(0, 1 << 16), 1 << 16);
        assert_eq!(log_block_size(1 << 30, 1 << 18), 1 << 18);
    }

    fn write(object: u64, offset: u64, len: u64, seq: u64) -> Intent {
        Intent {
            seq,
            dataset: 2,
            object,
            kind: ObjectKind::Volume,
            op: IntentOp::Write { offset, len },
            by_pointer: false,
        }
    }

    #[test]
    fn only_the_last_write_of_a_range_is_logged() {
        let intents = [
            write(5, 0, 4096, 1),
            write(5, 4096, 4096, 2),
            write(6, 0, 4096, 3),
            write(5, 0, 4096, 4),
        ];
        let kept: Vec<u64> = intents
            .iter()
            .zip(last_of_each_range(&intents))
            .filter(|(_, k)| *k)
            .map(|(i, _)| i.seq)
            .collect();
        assert_eq!(kept, vec![2, 3, 4]);
    }
}
