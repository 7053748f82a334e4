//! `cairn scrub [-w] [-s | -p] POOL` and the scrub's `scan:` line of `status`. The scan
//! state and its transitions are the engine's (`cairn_objset::scan_state`); this module
//! parses the arguments and prints.

use std::time::Duration;

use cairn_geometry::format_zfs_size;
use cairn_objset::scan_state::{
    pause_or_cancel, ScanPhase, ScrubPacing, ScrubRequest, ScrubRequests,
};
use cairn_objset::scrub::{ScrubEnd, ScrubProgress};
use cairn_pool::{Home, Pool};
use clap::Args;

use crate::store_open::{finish, open};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn hms(secs: f64) -> String {
    let s = secs as u64;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// The `scan:` line of `status`: a resilver in progress, else the newer of the last
/// resilver and the current or last scrub.
pub fn scan_line(pool: &Pool) -> Option<String> {
    crate::device_cmds::resilver_scan_line(pool).or_else(|| scrub_line(pool))
}

/// The `scan:` line for the pool's current or last scrub.
fn scrub_line(pool: &Pool) -> Option<String> {
    let s = pool.scan_records().scrub?;
    let p = &s.progress;
    Some(match s.state {
        ScanPhase::Finished => format!(
            "scrub repaired {} in {} with {} errors",
            format_zfs_size(p.repaired_bytes),
            hms(p.elapsed_secs),
            p.errors
        ),
        ScanPhase::Canceled => "scrub canceled".into(),
        ScanPhase::Scanning | ScanPhase::Paused => {
            let pct = if p.total_bytes > 0 {
                100.0 * p.examined_bytes as f64 / p.total_bytes as f64
            } else {
                0.0
            };
            let eta = p.eta_secs().map(hms).unwrap_or_else(|| "unknown".into());
            format!(
                "scrub {}: {} examined of {} at {}/s, {pct:.1}% done, {} repaired, {} errors, {eta} to go",
                s.state.name(),
                format_zfs_size(p.examined_bytes),
                format_zfs_size(p.total_bytes),
                format_zfs_size(p.rate() as u64),
                format_zfs_size(p.repaired_bytes),
                p.errors
            )
        }
    })
}

#[derive(Args, Debug)]
pub struct ScrubArgs {
    /// Show a progress bar and wait (cairn always runs the scrub in this process).
    #[arg(short = 'w')]
    wait: bool,
    /// Stop (cancel) a running or paused scrub.
    #[arg(short = 's', conflicts_with = "pause")]
    stop: bool,
    /// Pause a running scrub; `cairn scrub POOL` resumes it.
    #[arg(short = 'p')]
    pause: bool,
    /// Examine at most this many bytes per second, e.g. 50M (default: the `scrub_rate`
    /// tunable, unlimited when 0), so that the pool's other users keep their share.
    #[arg(long, value_name = "BYTES/S")]
    rate: Option<String>,
    /// Keep the p99 latency of foreground reads (NBD, FUSE, get/cat) under this, e.g.
    /// 5ms: the scrub pauses between small slices while they are slower, and runs at full
    /// speed while nobody reads (default: the `scrub_latency_budget` tunable).
    #[arg(long, value_name = "DURATION")]
    latency_budget: Option<String>,
    pub(crate) pool: String,
}

pub fn scrub(a: ScrubArgs) -> Result<(), String> {
    let home = crate::home();
    let requests = ScrubRequests::of(&home, &a.pool);
    if a.stop || a.pause {
        let request = if a.stop {
            ScrubRequest::Stop
        } else {
            ScrubRequest::Pause
        };
        return pause_or_stop(&home, &a.pool, &requests, request);
    }
    let rate = match &a.rate {
        None => crate::tunables::get().scrub_rate(),
        Some(text) => Some(
            cairn_objset::dataset::parse_size(text)
                .filter(|&r| r > 0)
                .ok_or_else(|| {
                    format!("bad scrub rate '{text}': give bytes per second above 0, e.g. 50M")
                })?,
        ),
    };
    let latency_budget = match &a.latency_budget {
        None => crate::tunables::get().scrub_latency_budget(),
        Some(text) => Some(crate::tunables::parse_duration(text).ok_or_else(|| {
            format!("bad latency budget '{text}': give a duration such as 5ms, 500us or 0.2s")
        })?),
    };
    let pacing = ScrubPacing {
        rate,
        latency_budget,
    };
    let store = open(&a.pool)?;
    let bar =
        (a.wait && crate::served::stderr_is_terminal()).then(|| progress_bar(store.space().alloc));
    let mut show = |p: &ScrubProgress| {
        if let Some(b) = &bar {
            b.set_length(p.total_bytes);
            b.set_position(p.examined_bytes);
            b.set_message(format!(
                "{} repaired, {} errors",
                format_zfs_size(p.repaired_bytes),
                p.errors
            ));
        }
    };
    let (state, end) = store
        .run_scrub(&requests, Duration::from_millis(500), pacing, &mut show)
        .map_err(err)?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let p = &state.progress;
    match end {
        ScrubEnd::Finished => outln!(
            "scrub of '{}' repaired {} ({} bytes), {} errors, {} blocks in {:.1} s",
            a.pool,
            format_zfs_size(p.repaired_bytes),
            p.repaired_bytes,
            p.errors,
            p.blocks,
            p.elapsed_secs
        ),
        _ => outln!("scrub of '{}' {}", a.pool, state.state.name()),
    }
    finish(store)
}

/// `cairn scrub -p|-s`. The process that owns the pool changes the state, or asks its
/// thread that scrubs: the service when it serves the pool, else this one. When another
/// process holds the pool (an in-process `cairn scrub`), its scrub's state is read from the
/// labels without taking the pool, and a running one is asked.
fn pause_or_stop(
    home: &Home,
    pool: &str,
    requests: &ScrubRequests,
    request: ScrubRequest,
) -> Result<(), String> {
    let changed = if let Some(store) = crate::served::store_for(pool)? {
        pause_or_cancel(store.pool(), requests, request).map_err(err)?
    } else {
        match Pool::open(home, pool) {
            Ok(p) => pause_or_cancel(&p, requests, request).map_err(err)?,
            Err(cairn_pool::PoolError::InUse { .. }) => {
                let config = Pool::peek_config(home, pool).map_err(err)?;
                let scanning = config.scrub.is_some_and(|s| s.state == ScanPhase::Scanning);
                if scanning {
                    requests.send(request).map_err(err)?;
                }
                scanning
            }
            Err(e) => return Err(err(e)),
        }
    };
    match changed {
        true => Ok(()),
        false => Err("no scrub in progress".into()),
    }
}

fn progress_bar(total: u64) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(total);
    b.set_style(
        indicatif::ProgressStyle::with_template(
            "scrub [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    b
}
