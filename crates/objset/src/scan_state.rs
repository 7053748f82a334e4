//! A pool's scan state machine: running, pausing and canceling its scrub, and the
//! requests another process leaves for the process that scrubs. The state itself is kept
//! in the pool, in the config of every label (`cairn_vdev::scan`: `ScrubState` and the
//! last `ResilverRecord`), so it survives export and import and moves with the pool; the
//! CLI only parses arguments and prints.
//!
//! ```text
//!  labels' config   scrub: ScrubState        written at each change of phase and every
//!                                            PERSIST_EVERY while a scrub runs
//!  $CAIRN_HOME/state/POOL.scan-ctl.json   "pause" | "stop": asks the scrubbing process
//!
//!              run_scrub                pause (no process scrubs) / request "pause"
//!   (none) ───────────────► scanning ───────────────────────────► paused
//!   paused ── run_scrub ──►    │   └── stop / request "stop" ──► canceled
//!                              └── every block read ───────────► finished
//! ```
//! A resilver in progress is not here: its resume point is in the labels too
//! (`Pool::resilver_checkpoint`), and its record when it finishes
//! (`Pool::record_finished_resilver`).
//!
//! Releases before 2026-11-26 kept the scrub state in `$CAIRN_HOME/state/POOL.scan.json`;
//! that file is not read (a scrub paused then starts over) and `forget` removes it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cairn_pool::{Home, Pool};

pub use cairn_vdev::scan::{ResilverRecord, ScanPhase, ScanRecords, ScrubState};

use crate::error::StoreError;
use crate::read_latency::ScrubPacer;
use crate::scrub::{ScrubControl, ScrubEnd, ScrubProgress};
use crate::store::Store;

/// How often a running scrub writes its progress to the labels (ZFS writes its scan state
/// with every txg, about as often). Phase changes are written at once.
pub const PERSIST_EVERY: Duration = Duration::from_secs(5);

/// What another process asks of the process that is scrubbing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScrubRequest {
    Pause,
    Stop,
}

/// Unix time in seconds.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The phase a scrub is in after it ended this way.
fn phase_after(end: &ScrubEnd) -> ScanPhase {
    match end {
        ScrubEnd::Finished => ScanPhase::Finished,
        ScrubEnd::Paused => ScanPhase::Paused,
        ScrubEnd::Stopped => ScanPhase::Canceled,
    }
}

/// `cairn scrub -p|-s` on a pool this process owns: a scrub running here (another thread
/// of a service) is asked through `requests`; one that no process runs (paused, or cut by
/// a crash) changes state in the labels, and the next `run_scrub` resumes (paused) or
/// starts over (canceled). Returns false when there is no scrub in progress.
pub fn pause_or_cancel(
    pool: &Pool,
    requests: &ScrubRequests,
    request: ScrubRequest,
) -> Result<bool, StoreError> {
    if pool.scrub_runs_here() {
        requests.send(request)?;
        return Ok(true);
    }
    let Some(mut s) = pool
        .scan_records()
        .scrub
        .filter(|s| s.state.is_in_progress())
    else {
        return Ok(false);
    };
    s.state = match request {
        ScrubRequest::Pause => ScanPhase::Paused,
        ScrubRequest::Stop => ScanPhase::Canceled,
    };
    s.ended = unix_now();
    pool.set_scrub_state(s, true)?;
    Ok(true)
}

/// The mailbox through which another process asks the scrubbing one to pause or stop.
#[derive(Clone, Debug)]
pub struct ScrubRequests {
    request: PathBuf,
    /// Where releases before the scan state moved into the pool kept it (removed by
    /// `forget`).
    old_files: [PathBuf; 3],
}

fn io_error(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::LocalIo {
        path: path.display().to_string(),
        source,
    }
}

impl ScrubRequests {
    /// The mailbox of pool `pool` in `home`'s state directory.
    pub fn of(home: &Home, pool: &str) -> ScrubRequests {
        let file = |what: &str| {
            home.root()
                .join("state")
                .join(format!("{pool}.{what}.json"))
        };
        ScrubRequests {
            request: file("scan-ctl"),
            old_files: [file("scan"), file("resilver"), file("errors")],
        }
    }

    /// Leaves `request` for the process that is scrubbing.
    pub fn send(&self, request: ScrubRequest) -> Result<(), StoreError> {
        let text = match request {
            ScrubRequest::Pause => "pause",
            ScrubRequest::Stop => "stop",
        };
        if let Some(dir) = self.request.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
        }
        std::fs::write(&self.request, text).map_err(|e| io_error(&self.request, e))
    }

    /// The request left for this process, if any.
    pub fn request(&self) -> Option<ScrubRequest> {
        match std::fs::read_to_string(&self.request).ok()?.trim() {
            "pause" => Some(ScrubRequest::Pause),
            "stop" => Some(ScrubRequest::Stop),
            _ => None,
        }
    }

    fn clear(&self) {
        let _ = std::fs::remove_file(&self.request);
    }

    /// Forgets requests, and the state files of older releases (export, destroy).
    pub fn forget(&self) {
        for path in self.old_files.iter().chain([&self.request]) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Blocks a rate-limited scrub reads per hold of the store lock.
/// What holds a scrub back so the pool's other users keep their share: a rate (bytes
/// examined per second), and a latency budget (the p99 of foreground reads the scrub keeps
/// to by pausing between slices: `crate::read_latency`). Both may apply; neither is the
/// default (full speed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrubPacing {
    pub rate: Option<u64>,
    pub latency_budget: Option<Duration>,
}

impl ScrubPacing {
    /// Unpaced, but at most `rate` bytes per second when given.
    pub fn rate(rate: Option<u64>) -> ScrubPacing {
        ScrubPacing {
            rate,
            latency_budget: None,
        }
    }

    /// The blocks per slice of a scrub paced between its slices (`None`: not paced).
    fn slice(&self) -> Option<u64> {
        match (self.rate, self.latency_budget) {
            (_, Some(_)) => Some(BUDGETED_SCRUB_SLICE),
            (Some(_), None) => Some(RATED_SCRUB_SLICE),
            (None, None) => None,
        }
    }
}

/// Data blocks per slice of a scrub held to a rate.
const RATED_SCRUB_SLICE: u64 = 8;
/// Data blocks per slice of a scrub held to a latency budget: a read that arrives while
/// the scrub reads waits behind one block's I/O at most, not a slice of eight.
const BUDGETED_SCRUB_SLICE: u64 = 1;

impl Store {
    /// Runs the pool's scrub, or resumes the one paused or interrupted, keeping its state
    /// in the pool (`PERSIST_EVERY` and at each change of phase); a request another
    /// process leaves (`ScrubRequests::send`) pauses or stops it. `progress` sees each
    /// step, about every `interval`.
    ///
    /// With `rate` (bytes per second) it examines no faster, in small slices of the pool
    /// (`Store::scrub_in_slices`) so that it holds the store lock only briefly each time.
    pub fn run_scrub(
        &self,
        requests: &ScrubRequests,
        interval: Duration,
        pacing: ScrubPacing,
        progress: &mut dyn FnMut(&ScrubProgress),
    ) -> Result<(ScrubState, ScrubEnd), StoreError> {
        let pool = self.pool();
        if !pool.claim_scrub() {
            return Err(StoreError::ScrubRunning(pool.name().to_string()));
        }
        let result = self.run_claimed_scrub(requests, interval, pacing, progress);
        pool.release_scrub();
        result
    }

    /// `run_scrub` once this process is the pool's one scrubber.
    fn run_claimed_scrub(
        &self,
        requests: &ScrubRequests,
        interval: Duration,
        pacing: ScrubPacing,
        progress: &mut dyn FnMut(&ScrubProgress),
    ) -> Result<(ScrubState, ScrubEnd), StoreError> {
        requests.clear();
        let pool = self.pool();
        let resume = pool
            .scan_records()
            .scrub
            .filter(|s| s.state.is_in_progress());
        let started = resume.as_ref().map(|s| s.started).unwrap_or_else(unix_now);
        let scanning = |p: &ScrubProgress| ScrubState {
            state: ScanPhase::Scanning,
            progress: p.clone(),
            started,
            ended: 0,
        };
        let resume_from = resume.as_ref().map(|s| s.progress.clone());
        let first = resume_from.clone().unwrap_or_else(|| ScrubProgress {
            total_bytes: self.space().alloc,
            ..ScrubProgress::default()
        });
        pool.set_scrub_state(scanning(&first), true)?;
        let began = Instant::now();
        let examined_before = first.examined_bytes;
        let mut persisted = Instant::now();
        let mut pacer = pacing.latency_budget.map(ScrubPacer::new);
        let mut report = |p: &ScrubProgress| {
            if let Some(rate) = pacing.rate {
                // Behind the rate: wait until the bytes examined in this run are due.
                let examined = p.examined_bytes.saturating_sub(examined_before);
                let due = Duration::from_secs_f64(examined as f64 / rate as f64);
                if let Some(wait) = due.checked_sub(began.elapsed()) {
                    std::thread::sleep(wait.min(Duration::from_secs(1)));
                }
            }
            if let Some(pacer) = &mut pacer {
                std::thread::sleep(pacer.pause_for(&self.read_latency));
            }
            let persist = persisted.elapsed() >= PERSIST_EVERY;
            if persist {
                persisted = Instant::now();
            }
            // A failed label write is retried at the next step; the scrub goes on.
            let _ = pool.set_scrub_state(scanning(p), persist);
            progress(p);
            match requests.request() {
                Some(ScrubRequest::Pause) => ScrubControl::Pause,
                Some(ScrubRequest::Stop) => ScrubControl::Stop,
                None => ScrubControl::Continue,
            }
        };
        let (p, end) = match pacing.slice() {
            // `report` paces: it runs after every slice, or a fast pool would scan
            // unpaced between reports (16 MiB in 10 ms here, then one capped sleep)
            Some(slice) => {
                self.scrub_in_slices(resume_from.as_ref(), Duration::ZERO, slice, &mut report)
            }
            None => self.scrub(resume_from.as_ref(), interval, &mut report),
        }?;
        requests.clear();
        let state = ScrubState {
            state: phase_after(&end),
            progress: p,
            started,
            ended: unix_now(),
        };
        pool.set_scrub_state(state.clone(), true)?;
        Ok((state, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_go_through_the_mailbox() {
        let dir = tempfile::tempdir().unwrap();
        let requests = ScrubRequests::of(&Home::at(dir.path()), "tank");
        assert_eq!(requests.request(), None);
        requests.send(ScrubRequest::Pause).unwrap();
        assert_eq!(requests.request(), Some(ScrubRequest::Pause));
        requests.send(ScrubRequest::Stop).unwrap();
        assert_eq!(requests.request(), Some(ScrubRequest::Stop));
        requests.forget();
        assert_eq!(requests.request(), None);
    }
}
