//! An open pool: its config, its top-level vdevs, and the lifecycle operations
//! (create, open by name, import by scanning, export, destroy).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cairn_geometry::{leaf_asize, pool_space, PoolSpace, VdevSpaceInput, ZfsEra};
use cairn_vdev::label::LeafLabels;
use cairn_vdev::label_io::{read_leaf_labels, write_leaf_config, write_leaf_uberblock};
use cairn_vdev::scan::{ResilverRecord, ScanRecords, ScrubState};
use cairn_vdev::{
    new_guid, Child, FileLeaf, IoReport, LabelConfig, Leaf, LeafConfig, LeafOptions, Owner,
    PoolConfig, PoolState, ResilverCheckpoint, Slot, TopConfig, TopVdev, Uberblock, VdevError,
};

use crate::error::PoolError;
use crate::events::Event;
use crate::home::{Home, LeafCounters, PoolRecord};
use crate::leaves::open_leaf;
use crate::owner::PoolLock;
use crate::spec::{check_replication, TopSpec};

// A block pointer fits in an uberblock's root pointer (the copy in `write_uberblock`).
const _: () = assert!(crate::io::bp::BP_SIZE <= cairn_vdev::label::ROOT_POINTER_SIZE);

/// Txg of a freshly created pool's first config and uberblock.
const INITIAL_TXG: u64 = 4;

/// Options of `cairn create`.
#[derive(Clone, Debug, Default)]
pub struct CreateOptions {
    /// Sector size exponent; probed from the devices when `None`.
    pub ashift: Option<u32>,
    /// Override replication-mismatch and device-in-use checks.
    pub force: bool,
    /// Compute and print only; write nothing.
    pub dry_run: bool,
    /// Open leaves with O_DIRECT.
    pub direct: bool,
    /// Pool properties (`-o readpolicy=…`).
    pub props: cairn_vdev::PoolProps,
}

pub use crate::health::Health;

/// An imported, open pool. Its leaves stay locked while this value lives.
#[derive(Debug)]
pub struct Pool {
    pub config: PoolConfig,
    /// The vdev tree: private to the pool crate. Others read it through `tops()` and ask
    /// for leaves by slot (`crate::leaf_slots`).
    pub(crate) tops: crate::vdev_tree::VdevTree,
    /// Warnings and notes gathered while creating or opening (printed by the CLI).
    pub notes: Vec<String>,
    pub(crate) home: Home,
    /// Resume point of a resilver in progress (persisted with the config).
    pub(crate) resilver: std::sync::Mutex<Option<ResilverCheckpoint>>,
    /// The current or last scrub and the last resilver (persisted with the config).
    pub(crate) scan: std::sync::Mutex<ScanRecords>,
    /// Pool properties in force (`set` changes them while the pool serves; written with
    /// the config).
    props: std::sync::Mutex<cairn_vdev::PoolProps>,
    /// A scrub runs in this process (one at a time per pool: `claim_scrub`).
    scrub_running: std::sync::atomic::AtomicBool,
    /// Resilvers running in this process (`enter_resilver`), and device changes that wait
    /// for them to pause (`hold_scans`): a resilver addresses leaves by slot, which
    /// `detach` and `remove` move.
    resilvers_running: std::sync::atomic::AtomicUsize,
    scans_held: std::sync::atomic::AtomicUsize,
    /// Writes of the open txg waiting for `cairn clear` (`crate::suspension`).
    pub(crate) suspension: crate::suspension::Suspension,
    /// Txg of the newest config written to the labels: config writes between syncs (DTL,
    /// resilver progress) take the next number so the newest config always wins on open.
    pub(crate) config_txg: std::sync::atomic::AtomicU64,
    /// Hot spare devices, one per `config.spares` entry (`None`: could not be opened, or
    /// in use since the pool was opened).
    pub spare_leaves: Vec<Option<Arc<dyn Leaf>>>,
    /// Hot spares added while the pool is in use (`add_spares_in_use`), after
    /// `config.spares` / `spare_leaves`; `settle_spares` folds them in.
    pub(crate) added_spares: std::sync::Mutex<Vec<(cairn_vdev::SpareConfig, Arc<dyn Leaf>)>>,
    /// Spares a `detach` in a `spare-N` group gave back while the pool was in use, with
    /// their open devices (only a lookup: whether a spare is AVAIL, the tree says; see
    /// `spares_as_the_tree_says`).
    pub(crate) returned_spares: std::sync::Mutex<Vec<(u64, Arc<dyn Leaf>)>>,
    /// Held while hot spares are put in, so two threads never pick the same spare.
    pub(crate) spare_lock: std::sync::Mutex<()>,
    /// Verified contents of recently read blocks.
    pub cache: crate::io::cache::BlockCache,
    /// This process owns the pool while the value lives (see `owner`).
    _owner: PoolLock,
    /// When the pool was imported or created here (seconds since the epoch; kept in the
    /// pool record).
    pub(crate) imported_at: std::sync::atomic::AtomicU64,
    /// Raw bytes allocated per top-level vdev at the last txg sync (`note_allocated`).
    allocated: std::sync::Mutex<Vec<u64>>,
    /// Events not yet in the state directory's file (`crate::events`).
    events: std::sync::Mutex<Vec<Event>>,
    /// Each leaf's health and error counters as last reported (events are the changes).
    seen: std::sync::Mutex<crate::home::SeenLeaves>,
    /// `PoolConfig::prior_guid_sums` in force (a vdev change in use adds one).
    prior_guid_sums: std::sync::Mutex<Vec<u64>>,
}

/// Result of `create` (also of `create -n`, which returns no pool).
#[derive(Debug)]
pub struct CreateOutcome {
    pub config: PoolConfig,
    pub space: PoolSpace,
    pub notes: Vec<String>,
    pub pool: Option<Pool>,
}

/// A pool found by scanning devices.
#[derive(Clone, Debug)]
pub struct FoundPool {
    pub config: PoolConfig,
    /// Leaf GUID → path where it was found now.
    pub found: BTreeMap<u64, PathBuf>,
    /// Leaves a newer cairn has written to (path, why): the pool must not be imported.
    pub newer: Vec<(PathBuf, String)>,
}

impl FoundPool {
    /// Leaves of the config that were not found.
    pub fn missing(&self) -> Vec<&LeafConfig> {
        self.config
            .vdevs
            .iter()
            .flat_map(|t| t.leaves.iter())
            .filter(|l| !self.found.contains_key(&l.guid))
            .collect()
    }
    /// Whether every top-level vdev has enough leaves to serve data.
    pub fn importable(&self) -> bool {
        // A missing log device does not keep a pool from importing (its log is lost).
        self.config.vdevs.iter().filter(|t| !t.log).all(|t| {
            let missing = t
                .leaves
                .iter()
                .filter(|l| !self.found.contains_key(&l.guid))
                .count();
            missing <= t.shape.redundancy()
        })
    }
}

/// Checks a pool name against zpool's rules.
pub fn validate_pool_name(name: &str) -> Result<(), PoolError> {
    let bad = |why: &str| {
        Err(PoolError::BadName {
            name: name.to_string(),
            why: why.to_string(),
        })
    };
    if name.is_empty() || name.len() > 200 {
        return bad("must be 1 to 200 characters");
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return bad("must begin with a letter");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-.:".contains(c))
    {
        return bad("may contain only letters, digits, '_', '-', '.' and ':'");
    }
    if [
        "mirror", "raidz", "raidz1", "raidz2", "raidz3", "draid", "spare", "log", "cache",
    ]
    .contains(&name)
        || name.starts_with("raidz")
        || name.starts_with("mirror")
    {
        return bad("is a reserved vdev keyword");
    }
    Ok(())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

pub(crate) fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn owner_of(home: &Home) -> Result<Owner, PoolError> {
    Ok(Owner {
        hostname: hostname(),
        home_id: home.id()?,
    })
}

/// Space inputs for the geometry module: one entry per top-level vdev.
pub fn space_inputs(config: &PoolConfig) -> Vec<VdevSpaceInput> {
    top_space_inputs(config.vdevs.iter())
}

fn top_space_inputs<'a>(tops: impl Iterator<Item = &'a TopConfig>) -> Vec<VdevSpaceInput> {
    tops.filter(|t| !t.log)
        .map(|t| VdevSpaceInput {
            shape: t.shape,
            min_leaf_asize: t.leaves.iter().map(|l| l.asize).min().unwrap_or(0),
            ashift: t.ashift,
        })
        .collect()
}

/// Capacity of a pool config under cairn's rules (the same function the planner calls).
pub fn config_space(config: &PoolConfig) -> PoolSpace {
    pool_space(&space_inputs(config), ZfsEra::Cairn)
}

pub(crate) fn ashift_for(
    leaves: &[Arc<dyn Leaf>],
    requested: Option<u32>,
) -> Result<u32, PoolError> {
    let probed = leaves
        .iter()
        .map(|l| l.physical_sector_size().max(512).trailing_zeros())
        .max()
        .unwrap_or(12);
    match requested {
        None => Ok(probed.clamp(cairn_geometry::MIN_ASHIFT, cairn_geometry::MAX_ASHIFT)),
        Some(a) if (cairn_geometry::MIN_ASHIFT..=cairn_geometry::MAX_ASHIFT).contains(&a) => Ok(a),
        Some(a) => Err(PoolError::BadOption(format!(
            "ashift={a} is out of range; use 9 (512 B) to 16 (64 KiB), usually 12"
        ))),
    }
}

pub(crate) fn open_new_leaves(
    specs: &[TopSpec],
    opts: &CreateOptions,
    home: &Home,
) -> Result<Vec<Vec<Arc<dyn Leaf>>>, PoolError> {
    let leaf_opts = LeafOptions {
        direct: opts.direct,
        ..LeafOptions::default()
    };
    let mut tops = Vec::with_capacity(specs.len());
    for spec in specs {
        let mut leaves = Vec::with_capacity(spec.devices.len());
        for dev in &spec.devices {
            let leaf = open_leaf(dev, leaf_opts)?;
            refuse_if_in_use(leaf.as_ref(), home, opts.force)?;
            leaves.push(leaf);
        }
        tops.push(leaves);
    }
    Ok(tops)
}

/// Refuses a new device whose labels name a pool: always when that pool is active and
/// imported here or held by a process (as zpool, `-f` does not override an active pool);
/// otherwise (exported, or active on another host) unless `force`. Destroyed pools' devices
/// are free.
pub(crate) fn refuse_if_in_use(leaf: &dyn Leaf, home: &Home, force: bool) -> Result<(), PoolError> {
    let labels = read_leaf_labels(leaf);
    if let Some(cfg) = labels.best_config() {
        refuse_if_active(leaf, home, cfg)?;
    }
    if force {
        return Ok(());
    }
    if let Some(e) = labels.written_by_newer_cairn() {
        return Err(PoolError::NewerDevice {
            path: leaf.path().to_string(),
            why: e.to_string(),
        });
    }
    let Some(cfg) = labels.best_config() else {
        return Ok(());
    };
    let state = match cfg.pool.state {
        PoolState::Destroyed => return Ok(()),
        PoolState::Active => "active",
        PoolState::Exported => "exported",
    };
    Err(PoolError::DeviceInUse {
        path: leaf.path().to_string(),
        pool: cfg.pool.name.clone(),
        state: state.to_string(),
    })
}

/// A device of an active pool that a process holds or that is imported here is never
/// taken, not even with -f.
fn refuse_if_active(leaf: &dyn Leaf, home: &Home, cfg: &LabelConfig) -> Result<(), PoolError> {
    if cfg.pool.state != PoolState::Active {
        return Ok(());
    }
    let why = if crate::owner::PoolLock::held_by_other(home.lock_dir(), cfg.pool.guid) {
        "in use by another process"
    } else if home.name_of_guid(cfg.pool.guid).is_some() {
        "imported here"
    } else {
        return Ok(());
    };
    Err(PoolError::DeviceOfActivePool {
        path: leaf.path().to_string(),
        pool: cfg.pool.name.clone(),
        why: why.to_string(),
    })
}

/// Why `import` found no pool of that name: and, when a newer cairn labelled some of the
/// devices (whose pools this one cannot read), which.
fn no_such_pool(dirs: &[PathBuf]) -> String {
    let listed = dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let mut why = format!(
        "no such pool among the devices in {listed}; `cairn import -d DIR` lists what is there"
    );
    if let Some((path, e)) = newer_labelled_devices(dirs).first() {
        why.push_str(&format!(
            "; '{}' holds labels of a newer cairn ({e}): upgrade cairn to import its pool",
            path.display()
        ));
    }
    why
}

/// Devices in `dirs` whose labels only a newer cairn can read.
fn newer_labelled_devices(dirs: &[PathBuf]) -> Vec<(PathBuf, String)> {
    let devices = labelled_devices(dirs).unwrap_or_default();
    devices
        .into_iter()
        .filter_map(|(path, labels)| {
            let why = labels.written_by_newer_cairn()?.to_string();
            Some((path, why))
        })
        .collect()
}

/// Every file in `dirs` that opens as a leaf, with its labels (read-only, unlocked), in
/// path order within each directory.
fn labelled_devices(dirs: &[PathBuf]) -> Result<Vec<(PathBuf, LeafLabels)>, PoolError> {
    let mut out = Vec::new();
    for dir in dirs {
        let dir = &std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
        let entries = std::fs::read_dir(dir).map_err(|e| PoolError::ScanDir {
            dir: dir.display().to_string(),
            source: e,
        })?;
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            if let Ok(leaf) = FileLeaf::open(&path, LeafOptions::inspect()) {
                let labels = read_leaf_labels(&leaf);
                out.push((path, labels));
            }
        }
    }
    Ok(out)
}

impl Pool {
    /// `cairn create`: validates the layout, opens and checks the devices, and (unless
    /// `dry_run`) writes labels and records the pool in `home`.
    pub fn create(
        home: &Home,
        name: &str,
        vdev_tokens: &[String],
        opts: CreateOptions,
    ) -> Result<CreateOutcome, PoolError> {
        validate_pool_name(name)?;
        let (vdev_tokens, spare_devices) = crate::spec::split_spares(vdev_tokens)?;
        let (mut specs, log_specs) = crate::spec::parse_with_logs(&vdev_tokens, false)?;
        if !opts.force {
            check_replication(&specs)?;
        }
        // Log vdevs come after the data vdevs (their ids follow).
        let first_log = specs.len();
        specs.extend(log_specs);
        if !opts.dry_run && home.exists(name) {
            return Err(PoolError::PoolExists(name.to_string()));
        }
        let leaves = open_new_leaves(&specs, &opts, home)?;
        let all: Vec<Arc<dyn Leaf>> = leaves.iter().flatten().cloned().collect();
        let ashift = ashift_for(&all, opts.ashift)?;
        if opts.direct {
            refuse_unaligned_direct(&all, ashift)?;
        }
        let mut notes = sector_warnings(&all, ashift);
        let vdevs = top_configs(&specs, &leaves, ashift, 0, first_log, &mut notes);
        let config = PoolConfig::new(
            name,
            new_guid(),
            INITIAL_TXG,
            Some(owner_of(home)?),
            vdevs,
            opts.props,
        );
        config.validate().map_err(PoolError::BadSpec)?;
        let space = config_space(&config);
        if opts.dry_run {
            return Ok(CreateOutcome {
                config,
                space,
                notes,
                pool: None,
            });
        }
        let tops = build_tops(&config, |guid| {
            all.iter()
                .zip(config.vdevs.iter().flat_map(|t| t.leaves.iter()))
                .find(|(_, lc)| lc.guid == guid)
                .map(|(l, _)| Ok(l.clone()))
                .unwrap_or_else(|| Err("not opened".to_string()))
        });
        let lock = PoolLock::acquire(home.lock_dir(), config.guid, name)?;
        let pool = Pool::assemble(config.clone(), tops, home, lock);
        let mut pool = pool;
        pool.notes = notes.clone();
        pool.write_labels(true)?;
        pool.add_spares(&spare_devices, opts.force)?;
        pool.post_event("sysevent.fs.zfs.pool_create", None, &[]);
        pool.save_record()?;
        Ok(CreateOutcome {
            config,
            space,
            notes,
            pool: Some(pool),
        })
    }

    /// Opens an imported pool by name (from `home`), locking its leaves. Leaves that are
    /// missing or carry another label are reported UNAVAIL; the pool still opens if every
    /// top-level vdev can serve data.
    pub fn open(home: &Home, name: &str) -> Result<Pool, PoolError> {
        let record = home.load(name)?;
        let lock = PoolLock::acquire(home.lock_dir(), record.guid, name)?;
        let mut opened: BTreeMap<u64, Result<Member, String>> = BTreeMap::new();
        for (&guid, path) in &record.leaves {
            match open_member(path, record.guid, guid) {
                Err(MemberError::Locked { path }) => return Err(in_use_by_device(name, &path)),
                Err(MemberError::Newer { why }) => {
                    return Err(PoolError::NewerPool {
                        pool: name.to_string(),
                        path: path.clone(),
                        why,
                    })
                }
                member => opened.insert(guid, member.map_err(String::from)),
            };
        }
        let config = opened
            .values()
            .filter_map(|r| r.as_ref().ok())
            .map(|(_, c)| &c.pool)
            .max_by_key(|c| c.txg)
            .cloned()
            .ok_or_else(|| PoolError::Unavailable {
                pool: name.to_string(),
                why: format!(
                    "none of its devices could be opened ({})",
                    opened
                        .values()
                        .filter_map(|r| r.as_ref().err())
                        .next()
                        .cloned()
                        .unwrap_or_default()
                ),
            })?;
        let tops = build_tops(&config, |guid| match opened.get(&guid) {
            Some(Ok((leaf, _))) => Ok(leaf.clone()),
            Some(Err(why)) => Err(why.clone()),
            None => Err("not in this host's record of the pool".into()),
        });
        let mut pool = Pool::assemble(config, tops, home, lock);
        pool.open_spares();
        pool.activate_spares()?;
        if pool.props().autoexpand {
            pool.expand()?;
        }
        pool.apply_counters(&record.counters);
        pool.apply_io_counts(&record);
        *pool.seen.lock().unwrap_or_else(|p| p.into_inner()) = home.load_seen(name);
        pool.note_leaf_changes();
        Ok(pool)
    }

    /// The newest config in the labels of a pool this state directory knows, read without
    /// taking the pool (read-only, no locks): what another process that holds the pool
    /// last wrote, e.g. the state of the scrub it runs.
    pub fn peek_config(home: &Home, name: &str) -> Result<PoolConfig, PoolError> {
        let record = home.load(name)?;
        record
            .leaves
            .iter()
            .filter_map(|(&guid, path)| {
                let leaf = open_leaf(path, LeafOptions::inspect()).ok()?;
                let labels = read_leaf_labels(leaf.as_ref());
                let cfg = labels.best_config()?;
                (cfg.pool.guid == record.guid && cfg.leaf_guid == guid).then(|| cfg.pool.clone())
            })
            .max_by_key(|c| c.txg)
            .ok_or_else(|| PoolError::Unavailable {
                pool: name.to_string(),
                why: "none of its devices has a readable label".into(),
            })
    }

    /// Scans `dirs` for devices with cairn labels; returns the pools found.
    pub fn scan(dirs: &[PathBuf], include_destroyed: bool) -> Result<Vec<FoundPool>, PoolError> {
        let mut pools: BTreeMap<u64, FoundPool> = BTreeMap::new();
        for (path, labels) in labelled_devices(dirs)? {
            let Some(cfg) = labels.best_config() else {
                continue;
            };
            if cfg.pool.state == PoolState::Destroyed && !include_destroyed {
                continue;
            }
            let entry = pools.entry(cfg.pool.guid).or_insert_with(|| FoundPool {
                config: cfg.pool.clone(),
                found: BTreeMap::new(),
                newer: Vec::new(),
            });
            if let Some(e) = labels.written_by_newer_cairn() {
                entry.newer.push((path.clone(), e.to_string()));
            }
            if cfg.pool.txg > entry.config.txg {
                entry.config = cfg.pool.clone();
            }
            let path = simulated_spec(&cfg.pool, cfg.leaf_guid, &path).unwrap_or(path);
            entry.found.insert(cfg.leaf_guid, path);
        }
        Ok(pools.into_values().collect())
    }

    /// `cairn import -d DIR… POOL`: finds the pool by name or GUID among scanned devices,
    /// refuses one that another importer holds (unless `force`), and takes it over.
    pub fn import(
        home: &Home,
        dirs: &[PathBuf],
        name_or_guid: &str,
        force: bool,
        include_destroyed: bool,
    ) -> Result<Pool, PoolError> {
        let import_err = |why: String| PoolError::Import {
            pool: name_or_guid.to_string(),
            why,
        };
        let found = Pool::scan(dirs, include_destroyed)?;
        let mut matches: Vec<FoundPool> = found
            .into_iter()
            .filter(|p| p.config.name == name_or_guid || p.config.guid.to_string() == name_or_guid)
            .collect();
        let fp = match matches.len() {
            0 => return Err(import_err(no_such_pool(dirs))),
            1 => matches.remove(0),
            _ => return Err(import_err(
                "more than one pool has this name; import by numeric GUID (see `cairn import -d DIR`)".into(),
            )),
        };
        let name = fp.config.name.clone();
        if home.exists(&name) {
            return Err(import_err(format!(
                "a pool named '{name}' is already imported; export it first"
            )));
        }
        let me = owner_of(home)?;
        if fp.config.state == PoolState::Active && !force {
            if let Some(owner) = &fp.config.owner {
                if owner != &me {
                    return Err(import_err(format!(
                        "the pool is in use: imported by host '{}' (state directory id {}) and not exported; \
                         export it there, or use -f if you are sure nothing uses it",
                        owner.hostname, owner.home_id
                    )));
                }
            }
        }
        if let Some((path, why)) = fp.newer.first() {
            return Err(PoolError::NewerPool {
                pool: name,
                path: path.display().to_string(),
                why: why.clone(),
            });
        }
        if !fp.importable() {
            let missing: Vec<String> = fp.missing().iter().map(|l| l.path.clone()).collect();
            return Err(import_err(format!(
                "too many devices are missing ({}); add their directories with -d",
                missing.join(", ")
            )));
        }
        let lock = PoolLock::acquire(home.lock_dir(), fp.config.guid, &name)?;
        let opened = open_found_leaves(&fp, &name)?;
        let config = imported_config(&fp, me);
        let tops = build_tops(&config, |guid| {
            opened
                .get(&guid)
                .cloned()
                .unwrap_or_else(|| Err("not found by the device scan".into()))
        });
        let mut pool = Pool::assemble(config, tops, home, lock);
        if pool.uberblocks().is_empty() {
            // Labels name the pool, but no uberblock leads to its data: writing anything
            // now (a config with a fresh uberblock) would bury the way back for good.
            return Err(PoolError::NoUberblock { pool: name });
        }
        pool.open_spares();
        pool.bump_config()?;
        pool.post_event("sysevent.fs.zfs.pool_import", None, &[]);
        pool.note_leaf_changes();
        pool.save_record()?;
        Ok(pool)
    }

    /// `cairn export`: marks the pool exported on every leaf and forgets it here.
    pub fn export(mut self) -> Result<(), PoolError> {
        self.config.state = PoolState::Exported;
        self.config.owner = None;
        self.bump_config()?;
        self.post_event("sysevent.fs.zfs.pool_export", None, &[]);
        self.home.remove(&self.config.name)
    }

    /// `cairn destroy`: marks the pool destroyed on every leaf and forgets it here.
    pub fn destroy(mut self) -> Result<(), PoolError> {
        self.config.state = PoolState::Destroyed;
        self.config.owner = None;
        self.bump_config()?;
        self.post_event("sysevent.fs.zfs.pool_destroy", None, &[]);
        self.home.remove(&self.config.name)
    }

    /// A pool value over built top-level vdevs.
    fn assemble(config: PoolConfig, tops: Vec<TopVdev>, home: &Home, lock: PoolLock) -> Pool {
        Pool {
            _owner: lock,
            imported_at: std::sync::atomic::AtomicU64::new(unix_now()),
            allocated: std::sync::Mutex::new(Vec::new()),
            events: std::sync::Mutex::new(Vec::new()),
            seen: std::sync::Mutex::new(BTreeMap::new()),
            resilver: std::sync::Mutex::new(config.resilver.clone()),
            scan: std::sync::Mutex::new(ScanRecords {
                scrub: config.scrub.clone(),
                last_resilver: config.last_resilver.clone(),
            }),
            scrub_running: std::sync::atomic::AtomicBool::new(false),
            resilvers_running: std::sync::atomic::AtomicUsize::new(0),
            scans_held: std::sync::atomic::AtomicUsize::new(0),
            suspension: Default::default(),
            props: std::sync::Mutex::new(config.props.clone()),
            config_txg: std::sync::atomic::AtomicU64::new(config.txg),
            prior_guid_sums: std::sync::Mutex::new(config.prior_guid_sums.clone()),
            config,
            tops: crate::vdev_tree::VdevTree::new(tops),
            notes: Vec::new(),
            home: home.clone(),
            spare_leaves: Vec::new(),
            added_spares: std::sync::Mutex::new(Vec::new()),
            returned_spares: std::sync::Mutex::new(Vec::new()),
            spare_lock: std::sync::Mutex::new(()),
            cache: Default::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Capacity (SIZE, usable, slop, AVAIL) under cairn's rules.
    pub fn space(&self) -> PoolSpace {
        pool_space(
            &top_space_inputs(self.tops.iter().map(|t| &t.config)),
            ZfsEra::Cairn,
        )
    }

    /// Each top-level vdev's allocatable size and ashift, in vdev order (the allocator's
    /// vdevs).
    pub fn top_extents(&self) -> Vec<(u64, u32)> {
        self.tops
            .iter()
            .map(|t| (t.config.asize, t.ashift()))
            .collect()
    }

    /// Each top-level vdev's deflate ratio (`zfs list` bytes per 512 raw bytes allocated),
    /// in vdev order.
    pub fn deflate_ratios(&self) -> Vec<u64> {
        self.tops
            .iter()
            .map(|t| t.shape().deflate_ratio(t.ashift()))
            .collect()
    }

    /// Health of one leaf.
    pub fn leaf_health(child: &Child) -> Health {
        if child.offline.load(Ordering::Relaxed) {
            Health::Offline
        } else if child.leaf.is_none() {
            Health::Unavail
        } else if child.faulted.load(Ordering::Relaxed) {
            Health::Faulted
        } else if child.removed.load(Ordering::Relaxed) {
            Health::Removed
        } else {
            Health::Online
        }
    }

    /// Health of a top-level vdev. A hot spare standing in for a failed leaf leaves it
    /// DEGRADED (as zpool's `spare-N` group is) until the failed leaf is replaced.
    pub fn top_health(top: &TopVdev) -> Health {
        let spare_in = top.children.iter().any(|s| s.replaced().is_some());
        match top.unusable_children() {
            0 if spare_in => Health::Degraded,
            0 => Health::Online,
            n if n <= top.shape().redundancy() => Health::Degraded,
            _ => Health::Unavail,
        }
    }

    /// Health of the pool.
    pub fn health(&self) -> Health {
        if self.io_suspended().is_some() {
            return Health::Suspended;
        }
        let tops: Vec<Health> = self.tops.iter().map(Pool::top_health).collect();
        let data_unavail = self
            .tops
            .iter()
            .zip(&tops)
            .any(|(t, h)| *h == Health::Unavail && !t.is_log());
        if data_unavail {
            Health::Unavail
        } else if tops.contains(&Health::Unavail) {
            // A lost log device: the data is all there, sync writes wait for txgs.
            Health::Degraded
        } else if tops.contains(&Health::Degraded) {
            Health::Degraded
        } else {
            Health::Online
        }
    }

    /// Writes a block to a top-level vdev (the object store's allocator picks offsets).
    pub fn write_block(
        &self,
        vdev: usize,
        offset: u64,
        data: &[u8],
    ) -> Result<IoReport, PoolError> {
        Ok(self.top(vdev)?.write_block(offset, data)?)
    }

    /// Reads a block from a top-level vdev.
    pub fn read_block(
        &self,
        vdev: usize,
        offset: u64,
        out: &mut [u8],
        verify: Option<cairn_vdev::top::Verifier<'_>>,
    ) -> Result<IoReport, PoolError> {
        Ok(self.top(vdev)?.read_block(offset, out, verify)?)
    }

    /// Reads a block that may never have been written (`TopVdev::read_block_speculative`):
    /// the intent log's chain ends at the first block that does not verify, and that is
    /// no device's fault.
    pub fn read_block_speculative(
        &self,
        vdev: usize,
        offset: u64,
        out: &mut [u8],
        verify: cairn_vdev::top::Verifier<'_>,
    ) -> Result<IoReport, PoolError> {
        Ok(self
            .top(vdev)?
            .read_block_speculative(offset, out, verify)?)
    }

    fn top(&self, vdev: usize) -> Result<&TopVdev, PoolError> {
        self.tops.get(vdev).ok_or_else(|| {
            PoolError::BadOption(format!(
                "pool '{}' has no top-level vdev {vdev}",
                self.name()
            ))
        })
    }

    /// Flushes every leaf.
    pub fn flush(&self) -> Result<(), PoolError> {
        for top in self.tops.iter() {
            top.flush()?;
        }
        Ok(())
    }

    /// Flushes the leaves of one top-level vdev (after an intent-log write to it).
    pub fn flush_vdev(&self, vdev: usize) -> Result<(), PoolError> {
        Ok(self.top(vdev)?.flush()?)
    }

    /// Persists error counters (and current leaf paths) in the state directory.
    pub fn save_record(&self) -> Result<(), PoolError> {
        self.note_leaf_changes();
        self.flush_events();
        let mut leaves = BTreeMap::new();
        let mut counters = BTreeMap::new();
        for top in self.tops.iter() {
            for child in &top.children {
                leaves.insert(child.guid, child.path.clone());
                let (read, write, checksum) = child.stats.snapshot();
                counters.insert(
                    child.guid,
                    LeafCounters {
                        read,
                        write,
                        checksum,
                    },
                );
            }
        }
        self.home.save(&PoolRecord {
            name: self.config.name.clone(),
            guid: self.config.guid,
            leaves,
            counters,
            iostat: Some(self.io_snapshot()),
        })
    }

    /// `cairn clear`: resets error counters.
    pub fn clear_errors(&self) -> Result<(), PoolError> {
        self.apply_counters(&BTreeMap::new());
        self.save_record()
    }

    /// Records an event (written to the state directory at the next save, or on drop).
    pub fn post_event(&self, class: &str, vdev: Option<&str>, details: &[(&str, String)]) {
        let event = Event {
            time_ns: unix_now_ns(),
            class: class.to_string(),
            pool: self.config.name.clone(),
            pool_guid: self.config.guid,
            vdev: vdev.map(String::from),
            details: details
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        };
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event);
    }

    /// Writes the pending events to the state directory (best effort: an event that cannot
    /// be written is not worth failing a command over).
    pub fn flush_events(&self) {
        let pending = std::mem::take(&mut *self.events.lock().unwrap_or_else(|p| p.into_inner()));
        let _ = crate::events::append(&self.home, &pending);
    }

    /// Posts a statechange for every leaf whose health changed since last seen, and an
    /// ereport for every leaf whose error counters grew (ZFS posts one per error; the count
    /// is in the details here); what was posted is remembered beside the pool record.
    pub fn note_leaf_changes(&self) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let before = seen.clone();
        for child in self.tops.iter().flat_map(|t| t.children.iter()) {
            let health = Pool::leaf_health(child);
            let (read, write, checksum) = child.stats.snapshot();
            let now = LeafCounters {
                read,
                write,
                checksum,
            };
            let Some(&(was, before)) = seen.get(&child.guid) else {
                seen.insert(child.guid, (health, now));
                continue;
            };
            let path = Some(child.path.as_str());
            if was != health {
                let change = [("from", was.to_string()), ("to", health.to_string())];
                self.post_event("resource.fs.zfs.statechange", path, &change);
            }
            for (class, n, m) in [
                ("ereport.fs.zfs.checksum", now.checksum, before.checksum),
                (
                    "ereport.fs.zfs.io",
                    now.read + now.write,
                    before.read + before.write,
                ),
            ] {
                if n > m {
                    self.post_event(class, path, &[("count", (n - m).to_string())]);
                }
            }
            seen.insert(child.guid, (health, now));
        }
        if *seen != before && self.home.exists(&self.config.name) {
            let _ = self.home.save_seen(&self.config.name, &seen);
        }
    }

    /// Takes over the I/O counted since import by earlier processes (`cairn iostat`).
    fn apply_io_counts(&self, record: &PoolRecord) {
        let Some(io) = &record.iostat else { return };
        for child in self.tops.iter().flat_map(|t| t.children.iter()) {
            let base = io.leaf_counts(child.guid).cloned().unwrap_or_default();
            *child.io_base.lock().unwrap_or_else(|p| p.into_inner()) = base;
        }
        if io.imported_at > 0 {
            self.imported_at.store(io.imported_at, Ordering::Relaxed);
        }
        *self.allocated.lock().unwrap_or_else(|p| p.into_inner()) =
            io.tops.iter().map(|t| t.alloc).collect();
    }

    /// The store reports the raw bytes allocated per top-level vdev at each txg sync.
    pub fn note_allocated(&self, per_top: Vec<u64>) {
        *self.allocated.lock().unwrap_or_else(|p| p.into_inner()) = per_top;
    }

    /// Bytes allocated per top-level vdev as of the last committed txg (`note_allocated`).
    pub fn allocated_per_top(&self) -> Vec<u64> {
        self.allocated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// This pool's I/O since import, now.
    pub fn io_snapshot(&self) -> crate::iostat::PoolIo {
        let allocated = self.allocated_per_top();
        crate::iostat::PoolIo {
            pool: self.name().to_string(),
            imported_at: self.imported_at.load(Ordering::Relaxed),
            taken_at_ns: unix_now_ns(),
            tops: (self.tops.iter().enumerate())
                .filter(|(_, top)| !top.is_hole())
                .map(|(t, top)| {
                    crate::iostat::TopIo::of(top, allocated.get(t).copied().unwrap_or(0))
                })
                .collect(),
        }
    }

    fn apply_counters(&self, counters: &BTreeMap<u64, LeafCounters>) {
        for child in self.tops.iter().flat_map(|t| t.children.iter()) {
            let c = counters.get(&child.guid).copied().unwrap_or_default();
            child.stats.read_errors.store(c.read, Ordering::Relaxed);
            child.stats.write_errors.store(c.write, Ordering::Relaxed);
            child
                .stats
                .checksum_errors
                .store(c.checksum, Ordering::Relaxed);
        }
    }

    /// Moves the config to a txg after every synced one and writes config + uberblock
    /// (pointing at the newest tree) to every usable leaf.
    pub(crate) fn bump_config(&mut self) -> Result<(), PoolError> {
        let newest = self.uberblocks().first().map(|u| u.txg).unwrap_or(0);
        self.config = self.live_config();
        self.config.txg = self.config.txg.max(newest) + 1;
        self.config_txg.store(self.config.txg, Ordering::SeqCst);
        self.write_labels(false)
    }

    /// Sets pool property `name` (`cairn set PROP=VALUE POOL`): in force for the next
    /// read, and in the labels (config only, no new txg) so it survives export/import.
    /// Also while the pool serves (a `cairn serve` runs it for a client).
    pub fn set_property(&self, name: &str, value: &str) -> Result<(), PoolError> {
        let policy = {
            let mut props = self.props.lock().unwrap_or_else(|p| p.into_inner());
            let mut changed = props.clone();
            changed.set(name, value)?;
            *props = changed;
            props.readpolicy
        };
        for top in self.tops.iter() {
            top.set_read_policy(policy);
        }
        self.write_config_labels(0)
    }

    /// The pool properties in force.
    pub fn props(&self) -> cairn_vdev::PoolProps {
        self.props.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Hot spares added while the pool is in use.
    pub(crate) fn added_spare_configs(&self) -> Vec<cairn_vdev::SpareConfig> {
        let added = self.added_spares.lock().unwrap_or_else(|p| p.into_inner());
        added.iter().map(|(c, _)| c.clone()).collect()
    }

    /// The open device of the hot spare `guid`, if any: opened with the pool, given back
    /// by a `detach` in use, or added in use.
    pub fn spare_leaf(&self, guid: u64) -> Option<Arc<dyn Leaf>> {
        let opened = (self.config.spares.iter())
            .zip(&self.spare_leaves)
            .find(|(s, _)| s.guid == guid)
            .and_then(|(_, leaf)| leaf.clone());
        let returned = || {
            let returned = self
                .returned_spares
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            returned
                .iter()
                .find(|(g, _)| *g == guid)
                .map(|(_, l)| l.clone())
        };
        let added = || {
            let added = self.added_spares.lock().unwrap_or_else(|p| p.into_inner());
            added
                .iter()
                .find(|(c, _)| c.guid == guid)
                .map(|(_, l)| l.clone())
        };
        opened.or_else(returned).or_else(added)
    }

    /// GUID sums of earlier vdev trees whose uberblocks still belong to the pool.
    pub(crate) fn prior_guid_sums(&self) -> Vec<u64> {
        self.prior_guid_sums
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Remembers `sum`, the GUID sum before a vdev change in use (the newest 8 are kept).
    pub(crate) fn remember_guid_sum(&self, sum: u64) {
        let mut sums = self
            .prior_guid_sums
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        sums.retain(|&s| s != sum);
        sums.push(sum);
        let extra = sums.len().saturating_sub(8);
        sums.drain(..extra);
    }

    /// The text form of pool property `name`.
    pub fn property(&self, name: &str) -> Result<String, PoolError> {
        Ok(self.props().get(name)?)
    }

    /// The config with each leaf's current state (offline, faulted, DTL) and the resilver
    /// resume point, as the labels should say.
    pub fn live_config(&self) -> PoolConfig {
        let mut config = self.config.clone();
        config.txg = self.config_txg.load(Ordering::SeqCst).max(config.txg);
        // The vdev tree in use says what the vdevs are (a service may have changed them).
        let tops: &[TopVdev] = &self.tops;
        config.vdevs = tops.iter().map(|t| t.config.clone()).collect();
        config.prior_guid_sums = self.prior_guid_sums();
        config.spares.extend(self.added_spare_configs());
        spares_as_the_tree_says(&mut config.spares, tops);
        let PoolConfig { vdevs, spares, .. } = &mut config;
        for (tc, top) in vdevs.iter_mut().zip(tops) {
            for (lc, child) in tc.leaves.iter_mut().zip(&top.children) {
                // A spare that took over since `self.config` was last written: the slot
                // now names the spare, and the spare entry the leaf it stands in for.
                if let (Some(spare), Some(failed)) = (child.spare(), child.replaced()) {
                    if lc.guid != spare.guid {
                        if let Some(entry) = spares.iter_mut().find(|s| s.guid == spare.guid) {
                            let mut old = std::mem::replace(
                                lc,
                                LeafConfig::new(spare.guid, spare.path.clone(), entry.asize),
                            );
                            old.faulted = failed.faulted.load(Ordering::Relaxed);
                            old.dtl = failed.dtl_ranges();
                            entry.replacing = Some(old);
                        }
                    }
                }
                if let Some(device) = child.replacement() {
                    // Replaced while in use: the new device keeps the leaf's GUID.
                    lc.path = device.path.clone();
                }
                lc.offline = child.offline.load(Ordering::Relaxed);
                lc.offline_temporary = child.offline_temporary.load(Ordering::Relaxed);
                lc.spare_declined = child.spare_declined.load(Ordering::Relaxed);
                lc.faulted = child.faulted.load(Ordering::Relaxed);
                lc.dtl = child.dtl_ranges();
            }
        }
        config.resilver = self.resilver_checkpoint();
        config.props = self.props();
        let scan = self.scan_records();
        config.scrub = scan.scrub;
        config.last_resilver = scan.last_resilver;
        config
    }

    /// The resilver in progress, if any.
    pub fn resilver_checkpoint(&self) -> Option<ResilverCheckpoint> {
        self.resilver
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records (and persists) the resilver resume point; `None` when it finished.
    pub fn set_resilver_checkpoint(
        &self,
        checkpoint: Option<ResilverCheckpoint>,
    ) -> Result<(), PoolError> {
        *self.resilver.lock().unwrap_or_else(|p| p.into_inner()) = checkpoint;
        self.write_config_labels(0)
    }

    /// The current or last scrub and the last resilver.
    pub fn scan_records(&self) -> ScanRecords {
        self.scan.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records the scrub's state; with `persist`, the config goes to the labels now (else
    /// with the next config write: a running scrub persists every few seconds).
    pub fn set_scrub_state(&self, state: ScrubState, persist: bool) -> Result<(), PoolError> {
        self.scan.lock().unwrap_or_else(|p| p.into_inner()).scrub = Some(state);
        if persist {
            self.write_config_labels(0)?;
        }
        Ok(())
    }

    /// Makes this process the pool's scrubber: false when a scrub already runs here.
    /// `release_scrub` ends the claim.
    pub fn claim_scrub(&self) -> bool {
        !self.scrub_running.swap(true, Ordering::SeqCst)
    }

    pub fn release_scrub(&self) {
        self.scrub_running.store(false, Ordering::SeqCst);
    }

    /// A resilver starts: `None` while a device change holds scans off (start it again
    /// later), else a guard that counts it as running until dropped.
    ///
    /// With `hold_scans` this is a handshake: each side raises its own counter, then reads
    /// the other's (SeqCst), so at least one of them sees the other and a resilver never
    /// runs during the change.
    pub fn enter_resilver(&self) -> Option<ResilverRunning<'_>> {
        self.resilvers_running.fetch_add(1, Ordering::SeqCst);
        let running = ResilverRunning(self);
        (!self.scans_held()).then_some(running)
    }

    /// Whether a resilver runs in this process.
    pub fn resilver_runs_here(&self) -> bool {
        self.resilvers_running.load(Ordering::SeqCst) > 0
    }

    /// Whether a device change waits for resilvers to pause (they stop at their next
    /// batch, keeping their resume point).
    pub fn scans_held(&self) -> bool {
        self.scans_held.load(Ordering::SeqCst) > 0
    }

    /// Holds resilvers off and waits up to `wait` for running ones to pause; the hold
    /// lasts until the guard drops. `None`: one did not pause in time (the hold is gone).
    pub fn hold_scans(&self, wait: std::time::Duration) -> Option<ScansHeld<'_>> {
        self.scans_held.fetch_add(1, Ordering::SeqCst);
        let held = ScansHeld(self);
        let deadline = std::time::Instant::now() + wait;
        while self.resilvers_running.load(Ordering::SeqCst) > 0 {
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        Some(held)
    }

    /// Whether a scrub runs in this process (its state in the labels may say "scanning"
    /// after a crash too, with nobody running it).
    pub fn scrub_runs_here(&self) -> bool {
        self.scrub_running.load(Ordering::SeqCst)
    }

    /// A resilver finished: its record replaces the last one and its resume point goes,
    /// in one config write.
    pub fn record_finished_resilver(&self, record: ResilverRecord) -> Result<(), PoolError> {
        self.scan
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_resilver = Some(record);
        self.set_resilver_checkpoint(None)
    }

    /// Called by a txg sync after its blocks are durable and before its uberblock: leaves
    /// that could not take this txg's writes get it added to their DTL, and a changed config
    /// is written to the labels first, so a committed txg is never missing from a DTL.
    pub fn record_synced_txg(&self, txg: u64) -> Result<(), PoolError> {
        let mut changed = false;
        for child in self.tops.iter().flat_map(|t| t.children.iter()) {
            changed |= child.note_txg_synced(txg);
        }
        if changed {
            self.write_config_labels(txg)?;
        }
        Ok(())
    }

    /// Writes the live config (no uberblock) to every leaf that takes writes, under a config
    /// txg above every earlier one and at least `min_txg`. Leaves that fail are skipped.
    pub fn write_config_labels(&self, min_txg: u64) -> Result<(), PoolError> {
        let txg = (self.config_txg.load(Ordering::SeqCst) + 1).max(min_txg);
        self.config_txg.store(txg, Ordering::SeqCst);
        let mut config = self.live_config();
        config.txg = txg;
        self.on_every_usable_leaf("the configuration", |top, child, leaf| {
            let label = LabelConfig {
                pool: config.clone(),
                leaf_guid: child.guid,
                top_guid: top.config.guid,
            };
            write_leaf_config(leaf, &label)
        })
    }

    /// Runs `write` on every leaf that takes writes and flushes it; succeeds when at least
    /// one leaf took it (the others are skipped: their DTLs record what they miss).
    fn on_every_usable_leaf(
        &self,
        what: &str,
        write: impl Fn(&TopVdev, &Child, &dyn Leaf) -> Result<(), VdevError>,
    ) -> Result<(), PoolError> {
        let mut written = 0;
        let mut last_err = None;
        for top in self.tops.iter() {
            for child in top.children.iter().filter(|c| c.is_usable()) {
                let Some(leaf) = &child.leaf else { continue };
                let result = write(top, child, leaf.as_ref()).and_then(|_| {
                    leaf.flush().map_err(|e| VdevError::Io {
                        path: child.path.clone(),
                        source: e,
                    })
                });
                match result {
                    Ok(()) => written += 1,
                    Err(e) => last_err = Some(e),
                }
            }
        }
        if written == 0 {
            return Err(last_err
                .map(PoolError::Vdev)
                .unwrap_or(PoolError::Unavailable {
                    pool: self.config.name.clone(),
                    why: format!("no device could take {what}"),
                }));
        }
        Ok(())
    }

    /// Commits a txg: writes its uberblock (root pointer `root`) into every usable leaf's
    /// label ring and flushes. The caller has flushed all blocks of the txg before.
    pub fn write_uberblock(
        &self,
        txg: u64,
        root: &[u8; crate::io::bp::BP_SIZE],
    ) -> Result<(), PoolError> {
        let mut ub = Uberblock {
            txg,
            guid_sum: self.live_config().guid_sum(),
            timestamp: unix_now(),
            root: [0u8; cairn_vdev::label::ROOT_POINTER_SIZE],
        };
        ub.root[..root.len()].copy_from_slice(root);
        self.on_every_usable_leaf("the uberblock", |top, _, leaf| {
            write_leaf_uberblock(leaf, &ub, top.ashift())
        })
    }

    /// Every valid uberblock of this pool on any usable leaf, newest first, one per txg.
    pub fn uberblocks(&self) -> Vec<Uberblock> {
        let sums = accepted_guid_sums(&self.live_config());
        let mut all: Vec<Uberblock> = self
            .tops
            .iter()
            .flat_map(|t| t.children.iter())
            .filter_map(|c| c.leaf.as_ref())
            .flat_map(|l| {
                read_leaf_labels(l.as_ref())
                    .uberblocks
                    .into_iter()
                    .map(|(_, u)| u)
            })
            .filter(|u| sums.contains(&u.guid_sum))
            .collect();
        all.sort_by_key(|u| std::cmp::Reverse(u.txg));
        all.dedup_by_key(|u| u.txg);
        all
    }

    /// Writes the current config (and an uberblock at its txg) to every usable leaf: a
    /// `fresh` pool's uberblock has no tree yet; otherwise it keeps the newest tree.
    fn write_labels(&self, fresh: bool) -> Result<(), PoolError> {
        let root = if fresh {
            Some([0u8; cairn_vdev::label::ROOT_POINTER_SIZE])
        } else {
            self.newest_root()
        };
        self.write_labels_with_root(root)
    }

    /// Writes the config and an uberblock at its txg pointing at `root` to every leaf;
    /// with `root` = `None` (no uberblock of the pool is readable) the config alone. An
    /// uberblock with an empty root is written only by `create`: on any other pool it would
    /// read as "never written" and hide the damage (the store refuses a pool with none).
    pub(crate) fn write_labels_with_root(
        &self,
        root: Option<[u8; cairn_vdev::label::ROOT_POINTER_SIZE]>,
    ) -> Result<(), PoolError> {
        let ub = root.map(|root| Uberblock {
            txg: self.config.txg,
            guid_sum: self.config.guid_sum(),
            timestamp: unix_now(),
            root,
        });
        let mut written = 0;
        let mut last_err = None;
        for top in self.tops.iter() {
            // Faulted and removed leaves are skipped: their labels say what they last held.
            let writable = top.children.iter().filter(|c| {
                !c.faulted.load(Ordering::Relaxed) && !c.removed.load(Ordering::Relaxed)
            });
            for child in writable {
                let Some(leaf) = &child.leaf else { continue };
                let label = LabelConfig {
                    pool: self.config.clone(),
                    leaf_guid: child.guid,
                    top_guid: top.config.guid,
                };
                let result = write_leaf_config(leaf.as_ref(), &label)
                    .and_then(|_| match &ub {
                        Some(ub) => write_leaf_uberblock(leaf.as_ref(), ub, top.ashift()),
                        None => Ok(()),
                    })
                    .and_then(|_| {
                        leaf.flush().map_err(|e| VdevError::Io {
                            path: child.path.clone(),
                            source: e,
                        })
                    });
                match result {
                    Ok(()) => written += 1,
                    Err(e) => last_err = Some(e),
                }
            }
        }
        if written == 0 {
            return Err(last_err
                .map(PoolError::Vdev)
                .unwrap_or(PoolError::Unavailable {
                    pool: self.config.name.clone(),
                    why: "no device could be written".into(),
                }));
        }
        Ok(())
    }

    /// Root pointer of the newest uberblock on any leaf (kept across config updates).
    fn newest_root(&self) -> Option<[u8; cairn_vdev::label::ROOT_POINTER_SIZE]> {
        self.uberblocks().first().map(|u| u.root)
    }
}

impl Drop for Pool {
    /// Events posted since the last save still reach the state directory (best effort:
    /// nothing here can fail a command).
    fn drop(&mut self) {
        self.note_leaf_changes();
        self.flush_events();
    }
}

/// "pool X is in use" when another process holds one of its devices.
fn in_use_by_device(pool: &str, device: &str) -> PoolError {
    PoolError::InUse {
        pool: pool.to_string(),
        holder: Some(format!(
            "another process, which holds its device '{device}'"
        )),
    }
}

/// Leaves by GUID, each opened or why not.
type OpenedLeaves = BTreeMap<u64, Result<Arc<dyn Leaf>, String>>;

/// Opens every leaf the device scan found for an import. A leaf another process holds
/// means the pool is in use.
/// The `sim:FILE?…` spec the config records for leaf `guid` when the scan found it as
/// FILE: the import opens it as the simulated disk it was made as.
fn simulated_spec(config: &PoolConfig, guid: u64, found: &Path) -> Option<PathBuf> {
    let leaf = config
        .vdevs
        .iter()
        .flat_map(|t| t.leaves.iter())
        .find(|l| l.guid == guid)?;
    let backing = cairn_lab::sim_leaf::backing_of(&leaf.path)?;
    (Path::new(backing) == found).then(|| PathBuf::from(&leaf.path))
}

fn open_found_leaves(fp: &FoundPool, name: &str) -> Result<OpenedLeaves, PoolError> {
    let mut opened = BTreeMap::new();
    for (&guid, path) in &fp.found {
        match open_leaf(&path.display().to_string(), LeafOptions::default()) {
            Ok(leaf) => {
                opened.insert(guid, Ok(leaf));
            }
            Err(VdevError::Locked { path }) => return Err(in_use_by_device(name, &path)),
            Err(e) => {
                opened.insert(guid, Err(e.to_string()));
            }
        }
    }
    Ok(opened)
}

/// The config an import writes: leaves at the paths the scan found them, the pool active
/// and owned here, and `offline -t` over (it lasts until the next import).
fn imported_config(fp: &FoundPool, owner: Owner) -> PoolConfig {
    let mut config = fp.config.clone();
    for leaf in config.vdevs.iter_mut().flat_map(|t| t.leaves.iter_mut()) {
        if let Some(path) = fp.found.get(&leaf.guid) {
            leaf.path = path.display().to_string();
        }
        if leaf.offline_temporary {
            leaf.offline = false;
            leaf.offline_temporary = false;
        }
    }
    config.state = PoolState::Active;
    config.owner = Some(owner);
    config
}

/// GUID sums an uberblock of a pool with `config` may carry: the config's own, and the sums
/// from before hot spares took over (the leaves they stand in for counted instead). A spare
/// that takes over in a running pool reaches the labels (config with its GUID) before the
/// next uberblock does; the uberblocks written before still belong to the pool.
pub(crate) fn accepted_guid_sums(config: &PoolConfig) -> Vec<u64> {
    let sum = config.guid_sum();
    let mut sums = vec![sum];
    sums.extend(&config.prior_guid_sums);
    let mut before_all = sum;
    for spare in &config.spares {
        if let Some(failed) = &spare.replacing {
            sums.push(sum.wrapping_sub(spare.guid).wrapping_add(failed.guid));
            before_all = before_all
                .wrapping_sub(spare.guid)
                .wrapping_add(failed.guid);
        }
    }
    sums.push(before_all);
    sums.sort_unstable();
    sums.dedup();
    sums
}

/// An opened leaf of a pool with the config from its labels.
type Member = (Arc<dyn Leaf>, LabelConfig);

/// Why a leaf of an imported pool could not be opened.
#[derive(Debug)]
pub(crate) enum MemberError {
    /// Another process holds the device: the pool is in use, the leaf is not missing.
    Locked { path: String },
    /// Missing, unreadable, unlabelled or another pool's: the leaf is unavailable.
    Unusable(String),
    /// A newer cairn wrote to it: the pool must not be opened (at an older txg, and then
    /// written) by this one.
    Newer { why: String },
}

impl std::fmt::Display for MemberError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemberError::Locked { path } => {
                write!(f, "cannot open '{path}': held by another process")
            }
            MemberError::Unusable(why) => f.write_str(why),
            MemberError::Newer { why } => write!(f, "written by a newer cairn ({why})"),
        }
    }
}

impl From<MemberError> for String {
    fn from(e: MemberError) -> String {
        e.to_string()
    }
}

/// Opens a leaf of an imported pool and checks its label says it belongs there.
pub(crate) fn open_member(
    spec: &str,
    pool_guid: u64,
    leaf_guid: u64,
) -> Result<Member, MemberError> {
    let leaf = open_leaf(spec, LeafOptions::default()).map_err(|e| match e {
        VdevError::Missing { .. } => MemberError::Unusable("cannot open: device is missing".into()),
        VdevError::Locked { path } => MemberError::Locked { path },
        other => MemberError::Unusable(other.to_string()),
    })?;
    let labels = read_leaf_labels(leaf.as_ref());
    if let Some(e) = labels.written_by_newer_cairn() {
        // Not damage, and not to be opened at an older txg.
        return Err(MemberError::Newer { why: e.to_string() });
    }
    let Some(cfg) = labels.best_config().cloned() else {
        return Err(MemberError::Unusable(match labels.first_error() {
            Some(e) => format!("corrupt or missing label: {e}"),
            None => "corrupt or missing label: no label".into(),
        }));
    };
    if cfg.pool.guid != pool_guid || cfg.leaf_guid != leaf_guid {
        return Err(MemberError::Unusable(format!(
            "the device now belongs to another pool ('{}') or is another leaf",
            cfg.pool.name
        )));
    }
    Ok((leaf, cfg))
}

/// The hot spares as the vdev tree in use says, after a `detach` in a `spare-N` group
/// changed them while the pool was in use (`crate::spare_groups_in_use`): a spare that
/// serves a slot as its own leaf was kept there for good and leaves the list; a spare
/// recorded in use that no slot holds any more is AVAIL again. (A spare that took over
/// since the config was written is recorded by `live_config` after this.)
fn spares_as_the_tree_says(spares: &mut Vec<cairn_vdev::SpareConfig>, tops: &[TopVdev]) {
    let mut own_leaves = std::collections::HashSet::new();
    let mut standing_in = std::collections::HashSet::new();
    for slot in tops.iter().flat_map(|t| t.children.iter()) {
        match slot.spare() {
            Some(spare) => standing_in.insert(spare.guid),
            None => own_leaves.insert(slot.guid),
        };
    }
    spares.retain(|s| !own_leaves.contains(&s.guid));
    for spare in spares.iter_mut() {
        if !standing_in.contains(&spare.guid) {
            spare.replacing = None;
        }
    }
}

/// Builds top-level vdevs from a config, asking `open` for each leaf by GUID.
pub(crate) fn build_tops(
    config: &PoolConfig,
    open: impl Fn(u64) -> Result<Arc<dyn Leaf>, String>,
) -> Vec<TopVdev> {
    config
        .vdevs
        .iter()
        .map(|tc| {
            let children = tc
                .leaves
                .iter()
                .map(|lc| {
                    let child = open_child(lc, &open);
                    // A hot spare in the slot: the group shows the leaf it stands in for.
                    match config
                        .spares
                        .iter()
                        .find(|s| s.guid == lc.guid)
                        .and_then(|s| s.replacing.as_ref())
                    {
                        Some(failed) => Arc::new(Slot::with_spare(replaced_child(failed), child)),
                        None => Slot::shared(child),
                    }
                })
                .collect();
            let top = TopVdev::from_slots(tc.clone(), children);
            top.set_read_policy(config.props.readpolicy);
            trust_stale_if_needed(&top);
            top
        })
        .collect()
}

/// The failed leaf a hot spare stands in for, as the config recorded it (not opened: no
/// I/O goes to it until it is replaced).
fn replaced_child(lc: &LeafConfig) -> Child {
    let child = Child::new(lc.guid, lc.path.clone(), None);
    set_leaf_state(&child, lc);
    child
}

/// The state a config records for a leaf, onto its child: offline (and for how long),
/// spare declined, faulted, and its DTL.
fn set_leaf_state(child: &Child, lc: &LeafConfig) {
    child.offline.store(lc.offline, Ordering::Relaxed);
    child
        .offline_temporary
        .store(lc.offline_temporary, Ordering::Relaxed);
    child
        .spare_declined
        .store(lc.spare_declined, Ordering::Relaxed);
    child.faulted.store(lc.faulted, Ordering::Relaxed);
    child.set_dtl(lc.dtl.clone());
}

/// The child for a configured leaf, asking `open` for its device.
fn open_child(lc: &LeafConfig, open: &impl Fn(u64) -> Result<Arc<dyn Leaf>, String>) -> Child {
    let (leaf, why) = match open(lc.guid) {
        Ok(l) => (Some(l), None),
        Err(why) => (None, Some(why)),
    };
    let path = leaf
        .as_ref()
        .map(|l| l.path().to_string())
        .unwrap_or(lc.path.clone());
    let mut child = Child::new(lc.guid, path, leaf);
    child.unavailable_reason = why;
    set_leaf_state(&child, lc);
    // A leaf that missed txgs is not trusted for reads until resilvered.
    child.stale.store(!lc.dtl.is_empty(), Ordering::Relaxed);
    child
}

/// A vdev that cannot serve reads without its stale leaves trusts them again: they hold
/// every block outside their DTL, and checksums catch the blocks they missed. Their DTL
/// stays, so a resilver still copies what they lack once the vdev has the redundancy.
fn trust_stale_if_needed(top: &TopVdev) {
    if top.can_serve() {
        return;
    }
    for child in &top.children {
        child.stale.store(false, Ordering::Relaxed);
    }
}

/// The configs of new top-level vdevs (`create`, `add`): ids from `first_id` in spec order,
/// log devices from spec `first_log` on; notes groups whose devices differ in size.
pub(crate) fn top_configs(
    specs: &[TopSpec],
    leaves: &[Vec<Arc<dyn Leaf>>],
    ashift: u32,
    first_id: usize,
    first_log: usize,
    notes: &mut Vec<String>,
) -> Vec<TopConfig> {
    let mut vdevs = Vec::with_capacity(specs.len());
    for (k, (spec, tleaves)) in specs.iter().zip(leaves).enumerate() {
        let id = first_id + k;
        let shape = spec.shape();
        let sizes: Vec<u64> = tleaves.iter().map(|l| leaf_asize(l.size())).collect();
        let min = *sizes.iter().min().expect("groups are non-empty");
        let lost: u64 = sizes.iter().map(|s| s - min).sum();
        let top = TopConfig {
            id: id as u32,
            guid: new_guid(),
            shape,
            ashift,
            asize: shape.vdev_asize(min),
            leaves: tleaves
                .iter()
                .map(|l| LeafConfig::new(new_guid(), l.path().to_string(), leaf_asize(l.size())))
                .collect(),
            log: k >= first_log,
            hole: false,
        };
        if lost > 0 {
            notes.push(format!(
                "note: the devices of {} differ in size; each is used only up to the smallest ({} bytes usable), {} bytes are left unused",
                cairn_vdev::config::top_display_name(shape, id as u32)
                    .unwrap_or_else(|| tleaves[0].path().to_string()),
                min,
                lost
            ));
        }
        vdevs.push(top);
    }
    vdevs
}

/// O_DIRECT I/O must be aligned to the device's sectors: an ashift below them makes every
/// small write fail with EINVAL, so `--direct` with such an ashift is refused up front.
fn refuse_unaligned_direct(leaves: &[Arc<dyn Leaf>], ashift: u32) -> Result<(), PoolError> {
    match leaves
        .iter()
        .map(|l| l.physical_sector_size())
        .find(|&s| u64::from(s) > 1u64 << ashift)
    {
        Some(sector) => Err(PoolError::BadOption(format!(
            "O_DIRECT needs I/O aligned to the device's {sector}-byte sectors, but ashift={ashift} \
             makes {}-byte blocks: use -o ashift={} (or drop --direct)",
            1u64 << ashift,
            sector.trailing_zeros()
        ))),
        None => Ok(()),
    }
}

/// The "ashift 9 on a 4K disk" warning.
fn sector_warnings(leaves: &[Arc<dyn Leaf>], ashift: u32) -> Vec<String> {
    leaves
        .iter()
        .filter(|l| u64::from(l.physical_sector_size()) > 1u64 << ashift)
        .map(|l| {
            format!(
                "warning: '{}' has {}-byte physical sectors but ashift={ashift} ({} bytes) was chosen; \
                 writes smaller than a sector make the disk read-modify-write (much slower). Use -o ashift={}",
                l.path(),
                l.physical_sector_size(),
                1u64 << ashift,
                l.physical_sector_size().trailing_zeros()
            )
        })
        .collect()
}

/// A resilver counted as running (`Pool::enter_resilver`).
pub struct ResilverRunning<'a>(&'a Pool);

impl Drop for ResilverRunning<'_> {
    fn drop(&mut self) {
        self.0.resilvers_running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Resilvers held off (`Pool::hold_scans`).
pub struct ScansHeld<'a>(&'a Pool);

impl Drop for ScansHeld<'_> {
    fn drop(&mut self) {
        self.0.scans_held.fetch_sub(1, Ordering::SeqCst);
    }
}
