//! The intent log's state (`crate::intent_log` is the log itself): the intents kept
//! outside the store lock (`IntentLog`), the chain of the open txg under it (`LogChain`),
//! and the `sync` / `logbias` policies. Depends on no store module that uses it, so
//! `core` and `fs` can hold these types.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use cairn_pool::io::bp::Dva;

use crate::dnode::ObjectKind;
use crate::intent_format::{LogBlockAddr, LogHead, LoggedCreate, LoggedRename, LoggedXattr};

/// Whether the attributes of an object of this kind are logged (ATTR records): files,
/// directories, symbolic links and special files. A volume's are not (it has none worth
/// an fsync), nor those of the store's own objects.
pub(crate) fn attrs_logged(kind: ObjectKind) -> bool {
    matches!(
        kind,
        ObjectKind::File | ObjectKind::Directory | ObjectKind::Symlink | ObjectKind::Special
    )
}

/// A chain this long (blocks, or bytes logged) makes the next log commit sync the txg.
pub(crate) const MAX_CHAIN_BLOCKS: usize = 8192;
pub(crate) const MAX_CHAIN_BYTES: u64 = 256 << 20;

/// The `sync` property: when writes must be durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncPolicy {
    /// FLUSH, FUA and fsync make writes durable (through the log).
    Standard,
    /// Every write is durable when it returns.
    Always,
    /// FLUSH and fsync return at once; writes are durable when their txg commits.
    Disabled,
}

/// How a dataset's writes are logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogPolicy {
    pub sync: SyncPolicy,
    /// `logbias=throughput`: every write goes to a block of its own, logged by pointer.
    pub by_pointer: bool,
}

/// A change waiting to be logged.
#[derive(Clone, Debug)]
pub(crate) enum IntentOp {
    Write {
        offset: u64,
        len: u64,
    },
    Truncate {
        size: u64,
    },
    Punch {
        offset: u64,
        len: u64,
    },
    /// A file's attributes changed (the commit logs them as they are then).
    Attr,
    /// A node was made (`posix::make_node`); the intent's object is the new node.
    Create(Box<LoggedCreate>),
    /// The intent's object was renamed; `other`: the object an exchange swapped it with,
    /// or the one it replaced.
    Rename {
        rename: Box<LoggedRename>,
        other: Option<u64>,
    },
    /// The intent's object got the name `name` in `dir`.
    Link {
        dir: u64,
        name: Box<str>,
    },
    /// The intent's object lost the name `name` in `dir` (`rmdir`: an empty directory).
    Remove {
        dir: u64,
        name: Box<str>,
        rmdir: bool,
    },
    /// An extended attribute of the intent's object was set or removed (the value as it
    /// was then: a later change is an intent of its own).
    Xattr(Box<LoggedXattr>),
}

impl IntentOp {
    /// Objects besides the intent's own whose attributes the change touched (directories'
    /// times, an exchanged or replaced object's ctime): each gets an ATTR record.
    pub(crate) fn also_changed(&self) -> Vec<u64> {
        match self {
            IntentOp::Create(c) => vec![c.parent],
            IntentOp::Rename { rename, other } => {
                let mut v = vec![rename.from_dir, rename.to_dir];
                v.extend(*other);
                v
            }
            IntentOp::Link { dir, .. } | IntentOp::Remove { dir, .. } => vec![*dir],
            _ => Vec::new(),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Intent {
    pub seq: u64,
    pub dataset: u32,
    pub object: u64,
    pub kind: ObjectKind,
    pub op: IntentOp,
    pub by_pointer: bool,
}

#[derive(Default)]
pub(crate) struct Pending {
    pub intents: Vec<Intent>,
    /// Seq of the last intent appended.
    pub appended: u64,
}

/// The log's state outside the store lock.
#[derive(Default)]
pub(crate) struct IntentLog {
    pending: Mutex<Pending>,
    /// Held by the one thread committing the log (`crate::intent_log`'s diagram).
    pub committer: Mutex<()>,
    /// Intents are kept only once something asked for the log (the first commit syncs).
    pub armed: AtomicBool,
}

impl IntentLog {
    pub(crate) fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends an intent for `object` of `dataset`, numbered after the last one.
    pub(crate) fn append(
        &self,
        (dataset, object, kind): (u32, u64, ObjectKind),
        op: IntentOp,
        by_pointer: bool,
    ) {
        let mut p = self.pending();
        p.appended += 1;
        let seq = p.appended;
        p.intents.push(Intent {
            seq,
            dataset,
            object,
            kind,
            op,
            by_pointer,
        });
    }

    /// Seq of the last intent appended (what a sync covers).
    pub(crate) fn appended(&self) -> u64 {
        self.pending().appended
    }

    /// A sync committed every intent up to `seq`.
    pub(crate) fn committed(&self, seq: u64) {
        self.pending().intents.retain(|i| i.seq > seq);
    }

    pub(crate) fn is_armed(&self) -> bool {
        self.armed.load(Ordering::SeqCst)
    }
}

/// Changes to one directory's entries in the open txg: every insert and removal
/// (`dir_ops`), and those a namespace intent records (`crate::intent_names`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DirChanges {
    pub all: u64,
    pub logged: u64,
}

/// The chain of the open txg, under the store lock.
#[derive(Clone, Debug, Default)]
pub(crate) struct LogChain {
    /// What the committed root block names (None: no chain; a log commit syncs instead).
    pub head: Option<LogHead>,
    /// Where the next log block goes, and its seq.
    pub tail: LogBlockAddr,
    pub next_seq: u64,
    /// Blocks of this chain allocated in the allocator (freed when it retires).
    pub allocated: Vec<Dva>,
    /// Blocks and bytes written to this chain.
    pub blocks: usize,
    pub bytes: u64,
    /// Bumped at every commit of a txg.
    pub generation: u64,
    /// Datasets with a change in the open txg the log cannot record (a create, a removal,
    /// an xattr…): a log commit for one of them syncs the txg instead. The others go on
    /// logging: as ZFS keeps a log per dataset, a create in one file system does not turn
    /// every FLUSH of a volume beside it into a txg sync.
    pub unlogged: BTreeSet<u32>,
    /// Changes to directories' entries in the open txg, by directory. A changed directory
    /// blocks its dataset's log unless every change to it is one a record logs.
    pub dir_changes: BTreeMap<u64, DirChanges>,
    /// A log write failed: the chain cannot go on until the next sync.
    pub broken: bool,
    /// Prepared by the sync in progress: the next chain, and the intents it covers.
    pub next: Option<(LogHead, Vec<Dva>)>,
    pub covered: u64,
}

impl LogChain {
    /// The chain a root block names, as loaded (its head is allocated in the space map).
    pub(crate) fn from_root(head: Option<LogHead>) -> LogChain {
        let mut chain = LogChain::default();
        if let Some(h) = head {
            chain.install(h, vec![h.head.dva]);
        }
        chain
    }

    pub(crate) fn install(&mut self, head: LogHead, allocated: Vec<Dva>) {
        self.head = Some(head);
        self.tail = head.head;
        self.next_seq = 0;
        self.allocated = allocated;
        self.blocks = 0;
        self.bytes = 0;
        self.forget_changes();
        self.broken = false;
    }

    /// A txg committed: what made datasets unloggable is in it.
    pub(crate) fn forget_changes(&mut self) {
        self.unlogged.clear();
        self.dir_changes.clear();
    }

    /// Whether every change to directory `dir`'s entries in the open txg is logged.
    pub(crate) fn dir_fully_logged(&self, dir: u64) -> bool {
        self.dir_changes
            .get(&dir)
            .is_some_and(|c| c.all == c.logged)
    }

    /// The head the sync in progress will name in its root block.
    pub(crate) fn next_head(&self) -> Option<LogHead> {
        self.next.as_ref().map(|(h, _)| *h)
    }

    /// Whether the chain can take records at all (whichever dataset they are of).
    pub(crate) fn usable(&self) -> bool {
        self.head.is_some()
            && !self.broken
            && self.blocks < MAX_CHAIN_BLOCKS
            && self.bytes < MAX_CHAIN_BYTES
    }
}
