//! The writer the crash loop kills, and what the pool must hold after it died.
//!
//! The writer appends numbered records, a few per txg. Record `i`:
//! - creates `tank/rec/r{i}` with `record_bytes(i)` and removes `tank/rec/r{i-WINDOW}`,
//! - replaces the whole of `tank/slot/s{i % SLOTS}` with `record_bytes(i)`,
//! - overwrites block `i % BIG_BLOCKS` of the file `tank/big` and block `i % VOL_BLOCKS`
//!   of the volume `tank/vol` with `block_bytes(i, …)`.
//!
//! Each txg also rewrites `tank/next`, the number of records applied. Before a sync the
//! writer prints `begin next=N txg=T`; once the sync returned it prints
//! `synced next=N txg=T`: records below N are acknowledged. So the pool's whole contents
//! are a function of N alone ([`verify_state`]), and after a kill N on disk must lie
//! between the last acknowledged and the last begun value.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;

use cairn_objset::{DatasetKind, Store, StoreConfig, StoreError};
use cairn_pool::{Home, Pool};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

use crate::model::first_difference;
use crate::TortureError;

/// Record files kept (older ones are removed).
pub const WINDOW: u64 = 48;
/// Files replaced whole, round robin.
pub const SLOTS: u64 = 8;
/// Blocks of `tank/big`, overwritten in place round robin.
pub const BIG_BLOCKS: u64 = 64;
pub const BIG_BLOCK: usize = 16 << 10;
/// Blocks of the volume, overwritten round robin.
pub const VOL_BLOCKS: u64 = 1024;
pub const VOL_BLOCK: usize = 4096;
/// Largest record.
pub const MAX_RECORD: usize = 96 << 10;

const REC_DIR: &str = "tank/rec";
const SLOT_DIR: &str = "tank/slot";
const BIG: &str = "tank/big";
const VOLUME: &str = "tank/vol";
const MARKER: &str = "tank/next";

/// Store settings of writer and checker: no sync but the writer's own (a txg holds whole
/// batches of records).
pub fn store_config() -> StoreConfig {
    StoreConfig {
        dirty_max: 1 << 30,
        ..StoreConfig::default()
    }
}

/// Arguments of the hidden `cairn __crash-writer` (and of `cairn-crash-writer`).
#[derive(clap::Args, Debug, Clone)]
pub struct WriterArgs {
    /// State directory of the pool (as CAIRN_HOME).
    #[arg(long)]
    pub home: PathBuf,
    /// Pool name.
    #[arg(long, default_value = "tank")]
    pub pool: String,
    /// Seed for the batch sizes.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Contents of record `i`.
pub fn record_bytes(i: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(i ^ 0x5EC0_4D00_0000_0000);
    let mut data = vec![0u8; rng.gen_range(1..=MAX_RECORD)];
    rng.fill_bytes(&mut data);
    data
}

/// Contents of the `len`-byte block that record `i` writes into `tank/big` or the volume.
pub fn block_bytes(i: u64, len: usize) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(i ^ 0xB10C_0000_0000_0000);
    let mut data = vec![0u8; len];
    rng.fill_bytes(&mut data);
    data
}

fn rec_path(i: u64) -> String {
    format!("{REC_DIR}/r{i}")
}

fn slot_path(s: u64) -> String {
    format!("{SLOT_DIR}/s{s}")
}

/// Creates the writer's files, volume and marker (N = 0) and syncs.
pub fn setup(store: &Store) -> Result<(), StoreError> {
    store.mkdir(REC_DIR)?;
    store.mkdir(SLOT_DIR)?;
    for s in 0..SLOTS {
        store.create_file(&slot_path(s), true)?;
    }
    store.create_file(BIG, true)?;
    let big = store.resolve(BIG)?;
    store.truncate(&big, BIG_BLOCKS * BIG_BLOCK as u64)?;
    store.dataset_create(
        VOLUME,
        DatasetKind::Volume,
        [("volblocksize".to_string(), "4K".to_string())].into(),
        Some(VOL_BLOCKS * VOL_BLOCK as u64),
        false,
    )?;
    write_marker(store, 0)?;
    store.sync()?;
    Ok(())
}

fn write_whole(store: &Store, path: &str, data: &[u8]) -> Result<(), StoreError> {
    store.create_file(path, true)?;
    let r = store.resolve(path)?;
    store.write(&r, 0, data)
}

fn write_marker(store: &Store, next: u64) -> Result<(), StoreError> {
    write_whole(store, MARKER, &next.to_le_bytes())
}

/// Number of records applied, from the marker file.
pub fn read_marker(store: &Store) -> Result<u64, StoreError> {
    let r = store.resolve(MARKER)?;
    let mut buf = [0u8; 8];
    let n = store.read(&r, 0, &mut buf)?;
    if n != 8 {
        return Err(StoreError::corrupt_object(
            "torture marker file",
            r.object,
            format!("{MARKER} holds {n} bytes, not 8"),
        ));
    }
    Ok(u64::from_le_bytes(buf))
}

/// Applies record `i` (in the open txg).
pub fn apply_record(store: &Store, i: u64) -> Result<(), StoreError> {
    let data = record_bytes(i);
    write_whole(store, &rec_path(i), &data)?;
    if i >= WINDOW {
        store.remove(&rec_path(i - WINDOW), false)?;
    }
    write_whole(store, &slot_path(i % SLOTS), &data)?;
    let big = store.resolve(BIG)?;
    let at = (i % BIG_BLOCKS) * BIG_BLOCK as u64;
    store.write(&big, at, &block_bytes(i, BIG_BLOCK))?;
    let vol = store.resolve(VOLUME)?;
    let at = (i % VOL_BLOCKS) * VOL_BLOCK as u64;
    store.write(&vol, at, &block_bytes(i, VOL_BLOCK))
}

/// The writer: opens the pool, then appends batches of records until it is killed.
pub fn run(args: &WriterArgs) -> Result<(), TortureError> {
    let home = Home::at(&args.home);
    let pool = Pool::open(&home, &args.pool)?;
    let store = Store::open_with(pool, store_config())?;
    let mut next = read_marker(&store)?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut out = std::io::stdout().lock();
    loop {
        let batch = rng.gen_range(1..=6);
        for i in next..next + batch {
            apply_record(&store, i)?;
        }
        next += batch;
        write_marker(&store, next)?;
        let txg = store.open_txg();
        announce(&mut out, "begin", next, txg)?;
        store.sync()?;
        announce(&mut out, "synced", next, txg)?;
    }
}

fn announce(out: &mut impl Write, what: &str, next: u64, txg: u64) -> Result<(), TortureError> {
    writeln!(out, "{what} next={next} txg={txg}")
        .and_then(|()| out.flush())
        .map_err(|e| TortureError::io("stdout", e))
}

/// A line the writer printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Announcement {
    Begin { next: u64, txg: u64 },
    Synced { next: u64, txg: u64 },
}

/// Parses a `begin|synced next=N txg=T` line.
pub fn parse_announcement(line: &str) -> Option<Announcement> {
    let mut words = line.split_whitespace();
    let what = words.next()?;
    let next = words.next()?.strip_prefix("next=")?.parse().ok()?;
    let txg = words.next()?.strip_prefix("txg=")?.parse().ok()?;
    match what {
        "begin" => Some(Announcement::Begin { next, txg }),
        "synced" => Some(Announcement::Synced { next, txg }),
        _ => None,
    }
}

/// Checks the pool holds exactly the state after `next` records; describes what differs.
pub fn verify_state(store: &Store, next: u64) -> Result<(), String> {
    let read_all = |path: &str, len: usize| -> Result<Vec<u8>, String> {
        let r = store.resolve(path).map_err(|e| format!("{path}: {e}"))?;
        let mut buf = vec![0u8; len + 1];
        let n = store
            .read(&r, 0, &mut buf)
            .map_err(|e| format!("reading {path}: {e}"))?;
        buf.truncate(n);
        Ok(buf)
    };
    let expect = |path: &str, want: &[u8]| -> Result<(), String> {
        let got = read_all(path, want.len())?;
        match first_difference(&got, want) {
            None => Ok(()),
            Some(at) => Err(format!(
                "{path}: {} bytes, expected {}; first difference at byte {at}",
                got.len(),
                want.len()
            )),
        }
    };
    let first_kept = next.saturating_sub(WINDOW);
    let want_names: BTreeSet<String> = (first_kept..next).map(|i| format!("r{i}")).collect();
    let names: BTreeSet<String> = store
        .list(REC_DIR)
        .map_err(|e| format!("listing {REC_DIR}: {e}"))?
        .into_iter()
        .map(|e| e.name)
        .collect();
    if names != want_names {
        let extra: Vec<_> = names.difference(&want_names).collect();
        let missing: Vec<_> = want_names.difference(&names).collect();
        return Err(format!(
            "{REC_DIR} after {next} records: extra {extra:?}, missing {missing:?}"
        ));
    }
    for i in first_kept..next {
        expect(&rec_path(i), &record_bytes(i))?;
    }
    for s in 0..SLOTS {
        let latest = latest_below(next, s, SLOTS);
        expect(&slot_path(s), &latest.map(record_bytes).unwrap_or_default())?;
    }
    let mut big = Vec::with_capacity(BIG_BLOCKS as usize * BIG_BLOCK);
    for b in 0..BIG_BLOCKS {
        big.extend(block_or_zeros(latest_below(next, b, BIG_BLOCKS), BIG_BLOCK));
    }
    expect(BIG, &big)?;
    let mut vol = Vec::with_capacity(VOL_BLOCKS as usize * VOL_BLOCK);
    for b in 0..VOL_BLOCKS {
        vol.extend(block_or_zeros(latest_below(next, b, VOL_BLOCKS), VOL_BLOCK));
    }
    expect(VOLUME, &vol)
}

/// The largest record number below `next` that is `k` modulo `m`.
fn latest_below(next: u64, k: u64, m: u64) -> Option<u64> {
    if next <= k {
        return None;
    }
    Some(k + (next - 1 - k) / m * m)
}

fn block_or_zeros(record: Option<u64>, len: usize) -> Vec<u8> {
    record.map_or_else(|| vec![0u8; len], |i| block_bytes(i, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_below_finds_the_last_writer_of_a_slot() {
        assert_eq!(latest_below(0, 0, 8), None);
        assert_eq!(latest_below(1, 0, 8), Some(0));
        assert_eq!(latest_below(8, 7, 8), Some(7));
        assert_eq!(latest_below(9, 0, 8), Some(8));
        assert_eq!(latest_below(17, 3, 8), Some(11));
        assert_eq!(latest_below(3, 5, 8), None);
    }

    #[test]
    fn announcements_round_trip() {
        assert_eq!(
            parse_announcement("synced next=12 txg=9"),
            Some(Announcement::Synced { next: 12, txg: 9 })
        );
        assert_eq!(
            parse_announcement("begin next=3 txg=5"),
            Some(Announcement::Begin { next: 3, txg: 5 })
        );
        assert_eq!(parse_announcement("synced next=x txg=1"), None);
        assert_eq!(parse_announcement("garbage"), None);
    }
}
