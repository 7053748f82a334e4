//! The store's tunables (`StoreConfig`): the dirty cap that forces a txg sync and the
//! background writers' batch size and count. The binary fills them once (its `tunables`
//! module) and sets them as the process's default; this crate reads no environment.

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
    /// Largest sequential read-ahead window on pools with a rotating leaf (0: none;
    /// `crate::readahead`).
    pub readahead_max: u64,
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
            readahead_max: DEFAULT_READAHEAD_MAX,
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

/// 8 MiB, as OpenZFS's `zfetch_max_distance`.
pub const DEFAULT_READAHEAD_MAX: u64 = 8 << 20;

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
