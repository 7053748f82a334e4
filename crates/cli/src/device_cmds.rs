//! Device management: offline, online, replace, attach, detach, add, clear, resilver.
//!
//! Each `cairn` command is its own process, so commands that leave a leaf needing data
//! (online, replace, attach, clear) run the resilver to completion in the foreground. Its
//! resume point is in the labels: a resilver cut short (Ctrl-C, crash, power loss) goes on
//! with `cairn resilver POOL`, or the next device command.

use std::io::IsTerminal;
use std::time::Duration;

use cairn_geometry::format_zfs_size;
use cairn_objset::resilver::{ResilverEnd, ResilverOptions, ResilverProgress};
use cairn_objset::scan_state::unix_now;
use cairn_objset::scrub::ScrubControl;
use cairn_objset::Store;
use cairn_pool::devices::DeviceOutcome;
use cairn_pool::Pool;
use clap::Args;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// How a foreground resilver runs.
#[derive(Args, Debug, Clone, Default)]
pub struct ResilverFlags {
    /// Show a progress bar while resilvering.
    #[arg(short = 'w')]
    wait: bool,
    /// Limit resilver writes, e.g. `--rate 100M` (bytes per second; K/M/G suffixes).
    /// Default: the `resilver_rate` tunable (`CAIRN_RESILVER_RATE`), else unlimited.
    #[arg(long, value_name = "BYTES_PER_SEC")]
    rate: Option<String>,
}

#[derive(Args, Debug)]
pub struct OfflineArgs {
    /// Temporary: the device comes back online at the next import.
    #[arg(short = 't')]
    temporary: bool,
    pub(crate) pool: String,
    #[arg(required = true)]
    devices: Vec<String>,
}

#[derive(Args, Debug)]
pub struct OnlineArgs {
    /// Expand: a vdev whose devices all grew takes the new room (as `autoexpand=on` does
    /// at every open).
    #[arg(short = 'e')]
    expand: bool,
    #[command(flatten)]
    flags: ResilverFlags,
    pub(crate) pool: String,
    #[arg(required = true)]
    devices: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ReplaceArgs {
    /// Use NEW even if it holds another pool's label.
    #[arg(short = 'f')]
    force: bool,
    #[command(flatten)]
    flags: ResilverFlags,
    pub(crate) pool: String,
    /// The device to replace (path, file name or GUID).
    old: String,
    /// The new device; omitted, a new disk at OLD's path.
    new: Option<String>,
}

#[derive(Args, Debug)]
pub struct AttachArgs {
    /// Use NEW even if it holds another pool's label.
    #[arg(short = 'f')]
    force: bool,
    #[command(flatten)]
    flags: ResilverFlags,
    pub(crate) pool: String,
    /// A disk (becomes a mirror) or a side of a mirror (the mirror gets wider).
    existing: String,
    new: String,
}

#[derive(Args, Debug)]
pub struct DetachArgs {
    pub(crate) pool: String,
    device: String,
}

#[derive(Args, Debug)]
pub struct RemoveArgs {
    pub(crate) pool: String,
    /// A log device: a leaf's path or name, or its group (`mirror-1`).
    device: String,
}

#[derive(Args, Debug)]
pub struct AddArgs {
    /// Allow a redundancy level that differs from the pool's, and used devices.
    #[arg(short = 'f')]
    force: bool,
    pub(crate) pool: String,
    /// Vdev specification, as for `create`.
    #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
    vdevs: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ClearArgs {
    #[command(flatten)]
    flags: ResilverFlags,
    pub(crate) pool: String,
    /// Only this device (default: every device).
    device: Option<String>,
}

#[derive(Args, Debug)]
pub struct ResilverArgs {
    #[command(flatten)]
    flags: ResilverFlags,
    pub(crate) pool: String,
}

/// Opens a pool, applies `op`, and resilvers in the foreground when a leaf needs it.
fn device_op(
    name: &str,
    flags: &ResilverFlags,
    op: impl FnOnce(&mut Pool) -> Result<DeviceOutcome, cairn_pool::PoolError>,
) -> Result<(), String> {
    let home = crate::home();
    let mut pool = Pool::open(&home, name).map_err(err)?;
    op(&mut pool).map_err(err)?;
    if pool.needs_resilver() {
        run_resilver(pool, flags)?;
    }
    Ok(())
}

/// `device_op` run by the service that holds the pool (`crate::served`): `op` changes the
/// pool in use, and a leaf that needs data is resilvered by the service's own background
/// resilver, which this waits for and reports as a foreground resilver does.
fn in_use_op(
    name: &str,
    flags: &ResilverFlags,
    op: impl FnOnce(&Pool) -> Result<DeviceOutcome, cairn_pool::PoolError>,
) -> Result<(), String> {
    in_use_store_op(name, flags, |store| Ok(op(store.pool())?))
}

/// `in_use_op` for changes the store takes part in (the allocator, a txg sync).
fn in_use_store_op(
    name: &str,
    flags: &ResilverFlags,
    op: impl FnOnce(&Store) -> Result<DeviceOutcome, cairn_objset::StoreError>,
) -> Result<(), String> {
    if flags.rate.is_some() {
        return Err(rate_refused(name));
    }
    let store = crate::store_open::open(name)?;
    if op(&store).map_err(err)? == DeviceOutcome::NeedsResilver {
        wait_for_service_resilver(&store, flags);
    }
    Ok(())
}

fn rate_refused(pool: &str) -> String {
    format!(
        "--rate: the service holding '{pool}' resilvers at the rate it was started with (the resilver_rate tunable); restart it with `--tunable resilver_rate=R`, or run the command with the pool not served"
    )
}

pub fn offline(a: OfflineArgs) -> Result<(), String> {
    if crate::served::active() {
        let store = crate::store_open::open(&a.pool)?;
        for d in &a.devices {
            store.pool().offline_in_use(d, a.temporary).map_err(err)?;
        }
        return Ok(());
    }
    let home = crate::home();
    let mut pool = Pool::open(&home, &a.pool).map_err(err)?;
    for d in &a.devices {
        pool.offline(d, a.temporary).map_err(err)?;
    }
    Ok(())
}

pub fn online(a: OnlineArgs) -> Result<(), String> {
    if crate::served::active() {
        return in_use_store_op(&a.pool, &a.flags, |store| {
            let mut outcome = DeviceOutcome::Done;
            for d in &a.devices {
                if store.pool().online_in_use(d)? == DeviceOutcome::NeedsResilver {
                    outcome = DeviceOutcome::NeedsResilver;
                }
            }
            if a.expand {
                print_expanded(&store.expand_in_use()?);
            }
            Ok(outcome)
        });
    }
    device_op(&a.pool, &a.flags, |pool| {
        let mut outcome = DeviceOutcome::Done;
        for d in &a.devices {
            if pool.online(d)? == DeviceOutcome::NeedsResilver {
                outcome = DeviceOutcome::NeedsResilver;
            }
        }
        if a.expand {
            print_expanded(&pool.expand()?);
        }
        Ok(outcome)
    })
}

/// "expanded a vdev from OLD to NEW", a line per vdev grown.
fn print_expanded(grown: &[(usize, u64, u64)]) {
    for &(_, old, new) in grown {
        outln!(
            "expanded a vdev from {} to {}",
            format_zfs_size(old),
            format_zfs_size(new)
        );
    }
}

pub fn replace(a: ReplaceArgs) -> Result<(), String> {
    if crate::served::active() {
        return in_use_op(&a.pool, &a.flags, |pool| {
            pool.replace_in_use(&a.old, a.new.as_deref(), a.force)
        });
    }
    device_op(&a.pool, &a.flags, |pool| {
        pool.replace(&a.old, a.new.as_deref(), a.force)
    })
}

pub fn attach(a: AttachArgs) -> Result<(), String> {
    if crate::served::active() {
        return in_use_store_op(&a.pool, &a.flags, |store| {
            store.attach_in_use(&a.existing, &a.new, a.force)
        });
    }
    device_op(&a.pool, &a.flags, |pool| {
        pool.attach(&a.existing, &a.new, a.force)
    })
}

pub fn detach(a: DetachArgs) -> Result<(), String> {
    if crate::served::active() {
        let store = crate::store_open::open(&a.pool)?;
        return store.detach_in_use(&a.device).map_err(err);
    }
    let home = crate::home();
    let mut pool = Pool::open(&home, &a.pool).map_err(err)?;
    pool.detach(&a.device).map_err(err)?;
    Ok(())
}

pub fn add(a: AddArgs) -> Result<(), String> {
    if crate::served::active() {
        let store = crate::store_open::open(&a.pool)?;
        return store.add_in_use(&a.vdevs, a.force).map(|_| ()).map_err(err);
    }
    let home = crate::home();
    let mut pool = Pool::open(&home, &a.pool).map_err(err)?;
    pool.add(&a.vdevs, a.force).map_err(err)?;
    Ok(())
}

/// `cairn remove POOL DEV`: the store retires the intent log on the device (syncs), then
/// the pool drops it and clears its labels.
pub fn remove(a: RemoveArgs) -> Result<(), String> {
    if crate::served::active() {
        let store = crate::store_open::open(&a.pool)?;
        return store.remove_log_in_use(&a.device).map_err(err);
    }
    let home = crate::home();
    let pool = Pool::open(&home, &a.pool).map_err(err)?;
    pool.find_log_device(&a.device).map_err(err)?;
    let store = cairn_objset::Store::open(pool).map_err(err)?;
    store.release_log_devices().map_err(err)?;
    let mut pool = store.close().map_err(err)?;
    pool.remove_log(&a.device).map_err(err)?;
    Ok(())
}

pub fn clear(a: ClearArgs) -> Result<(), String> {
    if crate::served::active() {
        return in_use_op(&a.pool, &a.flags, |pool| {
            pool.clear_in_use(a.device.as_deref())
        });
    }
    device_op(&a.pool, &a.flags, |pool| {
        pool.clear_device(a.device.as_deref())
    })
}

pub fn resilver(a: ResilverArgs) -> Result<(), String> {
    if crate::served::active() {
        return resilver_served(&a);
    }
    let home = crate::home();
    let pool = Pool::open(&home, &a.pool).map_err(err)?;
    if !pool.needs_resilver() {
        println!("pool '{}' needs no resilver", a.pool);
        return Ok(());
    }
    run_resilver(pool, &a.flags)
}

/// `cairn resilver [-w] POOL` run by the service that holds the pool: the service
/// resilvers by itself in the background; this waits until it is done (printing progress
/// under `-w`) and reports it as an in-process resilver does.
fn resilver_served(a: &ResilverArgs) -> Result<(), String> {
    let store = crate::store_open::open(&a.pool)?;
    if !store.pool().needs_resilver() {
        outln!("pool '{}' needs no resilver", a.pool);
        return Ok(());
    }
    if a.flags.rate.is_some() {
        return Err(rate_refused(&a.pool));
    }
    wait_for_service_resilver(&store, &a.flags);
    Ok(())
}

/// Waits until the service's background resilver has made every leaf whole (progress under
/// `-w`) and prints its result as an in-process resilver does.
fn wait_for_service_resilver(store: &Store, flags: &ResilverFlags) {
    let pool = store.pool().name().to_string();
    let asked = unix_now();
    let mut shown = std::time::Instant::now();
    while store.pool().needs_resilver() {
        if flags.wait && shown.elapsed() >= Duration::from_secs(1) {
            shown = std::time::Instant::now();
            if let Some(line) = resilver_scan_line(store.pool()) {
                errln!("resilver: {}", line.trim());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The resilver records itself as it finishes, just after the leaves are whole. None
    // comes when the leaf went instead (a detach paused the resilver).
    for _ in 0..100 {
        if !store.pool().resilver_runs_here() && store.pool().resilver_checkpoint().is_none() {
            let done = store.pool().scan_records().last_resilver;
            if done.is_none_or(|r| r.ended < asked) {
                break;
            }
        }
        let record = store
            .pool()
            .scan_records()
            .last_resilver
            .filter(|r| r.ended >= asked);
        if let Some(r) = record {
            let rate = (r.repaired_bytes as f64 / r.elapsed_secs.max(1e-9)) as u64;
            outln!(
                "resilvered {} in {:.1} s ({}/s) with {} errors",
                format_zfs_size(r.repaired_bytes),
                r.elapsed_secs,
                format_zfs_size(rate),
                r.errors
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    outln!("pool '{pool}' needs no resilver");
}

/// The `resilver_rate` tunable (bytes per second), for resilvers nobody started by hand.
pub fn env_rate() -> Result<Option<u64>, String> {
    parse_rate(&ResilverFlags::default())
}

/// The `--rate` value, or the `resilver_rate` tunable (`CAIRN_RESILVER_RATE`).
fn parse_rate(flags: &ResilverFlags) -> Result<Option<u64>, String> {
    let Some(text) = &flags.rate else {
        return Ok(crate::tunables::get().resilver_rate());
    };
    cairn_objset::dataset::parse_size(text)
        .filter(|&r| r > 0)
        .map(Some)
        .ok_or_else(|| format!("bad resilver rate '{text}': give bytes per second, e.g. 100M"))
}

/// Runs the resilver of every stale leaf to completion, with a progress bar under `-w`.
pub fn run_resilver(pool: Pool, flags: &ResilverFlags) -> Result<(), String> {
    let opts = ResilverOptions {
        rate: parse_rate(flags)?,
        checkpoint_every: Duration::from_secs(2),
        ..ResilverOptions::default()
    };
    let store = Store::open(pool).map_err(err)?;
    let bar = (flags.wait && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(1000);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "resilver [{bar:40}] {percent}% {msg} eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let mut report = |p: &ResilverProgress| {
        if let Some(bar) = &bar {
            bar.set_position((p.fraction() * 1000.0) as u64);
            bar.set_message(format!(
                "{} copied at {}/s",
                format_zfs_size(p.repaired_bytes),
                format_zfs_size(p.rate() as u64)
            ));
        } else if flags.wait {
            eprintln!(
                "resilver: {:.1}% done, {} copied at {}/s",
                p.fraction() * 100.0,
                format_zfs_size(p.repaired_bytes),
                format_zfs_size(p.rate() as u64)
            );
        }
        ScrubControl::Continue
    };
    let (p, end) = store.resilver(opts, &mut report).map_err(err)?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    store.close().map_err(err)?.save_record().map_err(err)?;
    if end == ResilverEnd::Finished {
        println!(
            "resilvered {} in {:.1} s ({}/s) with {} errors",
            format_zfs_size(p.repaired_bytes),
            p.elapsed_secs,
            format_zfs_size(p.rate() as u64),
            p.errors
        );
    }
    Ok(())
}

/// `2026-11-22 13:47:49 UTC` from Unix seconds (proleptic Gregorian calendar).
fn utc(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    // Days to civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

fn hms(secs: u64) -> String {
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// The resilver `scan:` line of `status`: one in progress (from the resume point in the
/// labels), else the last one that finished; `None` when there is neither.
pub fn resilver_scan_line(pool: &Pool) -> Option<String> {
    if let Some(cp) = pool.resilver_checkpoint() {
        let elapsed = unix_now().saturating_sub(cp.started).max(1);
        let rate = cp.examined_bytes / elapsed;
        let left = cp.total_bytes.saturating_sub(cp.examined_bytes);
        let pct = if cp.total_bytes > 0 {
            100.0 * cp.examined_bytes as f64 / cp.total_bytes as f64
        } else {
            0.0
        };
        let eta = left
            .checked_div(rate)
            .map(hms)
            .unwrap_or_else(|| "unknown".into());
        return Some(format!(
            "resilver in progress since {}, {} of {} examined at {}/s, {pct:.1}% done, {} copied, {eta} to go",
            utc(cp.started),
            format_zfs_size(cp.examined_bytes),
            format_zfs_size(cp.total_bytes),
            format_zfs_size(rate),
            format_zfs_size(cp.repaired_bytes),
        ));
    }
    let records = pool.scan_records();
    let record = records.resilver_if_newest()?;
    Some(format!(
        "resilvered {} in {} with {} errors on {}",
        format_zfs_size(record.repaired_bytes),
        hms(record.elapsed_secs as u64),
        record.errors,
        utc(record.ended)
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_dates() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(super::utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(super::utc(1_795_355_269), "2026-11-22 13:47:49 UTC");
    }
}
