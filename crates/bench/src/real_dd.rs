//! `cairn bench lab dd --real DEV…`: the lab's dd on real devices. A pool is made over the
//! devices (destroying what they held), one file of `size` bytes is written `bs` bytes a
//! call and synced (as `dd conv=fsync` does), the pool is closed and opened again, the file
//! is read back `bs` a call and checked, and the pool is destroyed.
//!
//! The leaves are opened with O_DIRECT where the devices take it, so the read comes from
//! the devices, not the page cache; where they do not (tmpfs files), the page cache is
//! dropped before the read when this process may (`/proc/sys/vm/drop_caches`, root), and
//! the result says which.
//!
//! Over simulated disks (`sim:` leaves, `cairn bench lab dd --engine`) the phases are timed
//! by the disks' virtual clocks instead (`PhaseClock::Leaves`): the write phase lasts as
//! long as its busiest leaf was busy in it (the pool's writers run beside the caller);
//! the read phase is summed call by call, each call lasting what its busiest leaf spent
//! in it (the caller waits for every read).

use std::time::Instant;

use cairn_objset::{Store, StoreError};
use cairn_pool::{CreateOptions, Home, Pool};
use serde::Serialize;

/// What one run measured.
#[derive(Clone, Debug, Serialize)]
pub struct RealDdResult {
    pub write_mbs: f64,
    pub read_mbs: f64,
    /// How the read avoided the page cache: `o_direct`, `dropped` or `not dropped`.
    pub page_cache: String,
}

/// How a phase is timed.
pub enum PhaseClock<'a> {
    /// Real time.
    Wall,
    /// The busy seconds of each leaf so far (simulated disks): a phase lasts what the
    /// busiest leaf spent in it.
    Leaves(&'a dyn Fn() -> Vec<f64>),
}

impl PhaseClock<'_> {
    fn mark(&self) -> (Instant, Vec<f64>) {
        let leaves = match self {
            PhaseClock::Wall => Vec::new(),
            PhaseClock::Leaves(busy) => busy(),
        };
        (Instant::now(), leaves)
    }

    /// Seconds since `mark`.
    fn secs_since(&self, mark: &(Instant, Vec<f64>)) -> f64 {
        match self {
            PhaseClock::Wall => mark.0.elapsed().as_secs_f64(),
            PhaseClock::Leaves(busy) => busy()
                .iter()
                .zip(&mark.1)
                .map(|(now, then)| now - then)
                .fold(0.0, f64::max),
        }
    }
}

/// The run's pool name (and its dataset and file).
pub(crate) const POOL: &str = "cairnlab";
const FILE: &str = "cairnlab/dd";

pub(crate) fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Runs the dd over a pool of `tokens` (create's grammar) with sectors of 2^`ashift`;
/// the pool's state directory is `scratch` (made, and removed after).
pub fn run(
    scratch: &std::path::Path,
    tokens: &[String],
    job: DdJob,
    clock: PhaseClock,
) -> Result<RealDdResult, String> {
    in_scratch_pool(scratch, |home| run_in(home, tokens, job, &clock))
}

/// Runs `body` with a state directory at `scratch`; afterwards the pool `POOL` it made
/// there is destroyed (its devices free again, whatever `body` returned) and `scratch`
/// removed.
pub(crate) fn in_scratch_pool<T>(
    scratch: &std::path::Path,
    body: impl FnOnce(&Home) -> Result<T, String>,
) -> Result<T, String> {
    let home = Home::at(scratch);
    let result = body(&home);
    if let Ok(pool) = Pool::open(&home, POOL) {
        let _ = pool.destroy();
    }
    let _ = std::fs::remove_dir_all(scratch);
    result
}

/// The dd: sectors of 2^`ashift`, `size` bytes written `bs` a call.
#[derive(Clone, Copy, Debug)]
pub struct DdJob {
    pub ashift: u32,
    pub bs: u64,
    pub size: u64,
}

fn run_in(
    home: &Home,
    tokens: &[String],
    job: DdJob,
    clock: &PhaseClock,
) -> Result<RealDdResult, String> {
    let DdJob { ashift, bs, size } = job;
    let direct = create(home, tokens, ashift)?;
    let block = pattern(bs);
    let store = Store::open(Pool::open(home, POOL).map_err(text)?).map_err(text)?;
    store
        .set_property(POOL, "compression", "off")
        .map_err(text)?;
    store.create_file(FILE, true).map_err(text)?;
    let file = store.resolve(FILE).map_err(text)?;
    let began = clock.mark();
    let mut off = 0;
    while off < size {
        let len = bs.min(size - off) as usize;
        store.write(&file, off, &block[..len]).map_err(text)?;
        off += len as u64;
    }
    store.close().map_err(text)?.save_record().map_err(text)?;
    let write_secs = clock.secs_since(&began);
    let page_cache = match direct {
        true => "o_direct",
        false if drop_page_cache() => "dropped",
        false => "not dropped",
    };
    let store = Store::open(Pool::open(home, POOL).map_err(text)?).map_err(text)?;
    let file = store.resolve(FILE).map_err(text)?;
    let read_secs = read_back(&store, &file, &block, size, clock)?;
    store.close().map_err(text)?;
    let mbs = |secs: f64| size as f64 / 1e6 / secs.max(1e-9);
    Ok(RealDdResult {
        write_mbs: mbs(write_secs),
        read_mbs: mbs(read_secs),
        page_cache: page_cache.to_string(),
    })
}

/// Creates the pool, with O_DIRECT leaves when the devices take them; whether they did.
pub(crate) fn create(home: &Home, tokens: &[String], ashift: u32) -> Result<bool, String> {
    let options = |direct| CreateOptions {
        ashift: Some(ashift),
        direct,
        ..CreateOptions::default()
    };
    if ashift >= 12 {
        if let Ok(made) = Pool::create(home, POOL, tokens, options(true)) {
            drop(made);
            return Ok(true);
        }
    }
    Pool::create(home, POOL, tokens, options(false)).map_err(text)?;
    Ok(false)
}

/// Reads the file back `block.len()` bytes a call; every block must be what was written.
/// Returns the seconds the calls took, summed call by call: the reader waits for each
/// call, so on simulated disks a call lasts as long as its busiest leaf was busy in it
/// (leaves overlap within a call, not across calls).
fn read_back(
    store: &Store,
    file: &cairn_objset::Resolved,
    block: &[u8],
    size: u64,
    clock: &PhaseClock,
) -> Result<f64, String> {
    let mut buf = vec![0u8; block.len()];
    let mut off = 0;
    let mut secs = 0.0;
    while off < size {
        let want = (block.len() as u64).min(size - off) as usize;
        let began = clock.mark();
        let n = store
            .read(file, off, &mut buf[..want])
            .map_err(|e: StoreError| e.to_string())?;
        secs += clock.secs_since(&began);
        if n != want || buf[..n] != block[..n] {
            return Err(format!(
                "read back {n} bytes at {off} that were not written there"
            ));
        }
        off += n as u64;
    }
    Ok(secs)
}

/// `bs` incompressible bytes.
pub(crate) fn pattern(bs: u64) -> Vec<u8> {
    use rand::{RngCore, SeedableRng};
    let mut block = vec![0u8; bs as usize];
    rand::rngs::StdRng::seed_from_u64(bs).fill_bytes(&mut block);
    block
}

/// Drops the kernel's page cache (needs root); whether it could.
pub(crate) fn drop_page_cache() -> bool {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}
