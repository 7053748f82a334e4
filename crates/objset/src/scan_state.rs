//! A pool's scan state: where its scrub stands (a typed `ScanPhase`), the request another
//! process left for a running scrub, and the last finished resilver — kept in the pool's
//! state directory, for `status`'s `scan:` line and for resuming. The engine owns the
//! state machine (`Store::run_scrub`, `ScanFiles::pause_or_cancel`); the CLI only parses
//! arguments and prints.
//!
//! ```text
//!  $CAIRN_HOME/state/POOL.scan.json       ScrubState { state, progress, started, ended }
//!  $CAIRN_HOME/state/POOL.scan-ctl.json   "pause" | "stop": asks the scrubbing process
//!  $CAIRN_HOME/state/POOL.resilver.json   ResilverRecord of the last finished resilver
//!
//!              run_scrub                pause (no process scrubs) / request "pause"
//!   (none) ───────────────► scanning ───────────────────────────► paused
//!   paused ── run_scrub ──►    │   └── stop / request "stop" ──► canceled
//!                              └── every block read ───────────► finished
//! ```
//! A resilver in progress is not here: its resume point is in the labels
//! (`Pool::resilver_checkpoint`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use cairn_pool::Home;
use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::resilver::ResilverProgress;
use crate::scrub::{ScrubControl, ScrubEnd, ScrubProgress};
use crate::store::Store;

/// Where a scrub is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanPhase {
    Scanning,
    Paused,
    Finished,
    Canceled,
}

impl ScanPhase {
    /// As `status` and `cairn scrub` name it.
    pub fn name(self) -> &'static str {
        match self {
            ScanPhase::Scanning => "scanning",
            ScanPhase::Paused => "paused",
            ScanPhase::Finished => "finished",
            ScanPhase::Canceled => "canceled",
        }
    }

    /// A scrub that has not ended (it resumes from its progress).
    pub fn is_in_progress(self) -> bool {
        matches!(self, ScanPhase::Scanning | ScanPhase::Paused)
    }

    fn after(end: &ScrubEnd) -> ScanPhase {
        match end {
            ScrubEnd::Finished => ScanPhase::Finished,
            ScrubEnd::Paused => ScanPhase::Paused,
            ScrubEnd::Stopped => ScanPhase::Canceled,
        }
    }
}

/// The pool's current or last scrub.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScrubState {
    pub state: ScanPhase,
    pub progress: ScrubProgress,
    /// Unix seconds it started (a resumed scrub keeps its start).
    pub started: u64,
    /// Unix seconds it ended or paused; 0 while scanning.
    pub ended: u64,
}

/// What another process asks of the process that is scrubbing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScrubRequest {
    Pause,
    Stop,
}

/// The last finished resilver.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ResilverRecord {
    pub repaired_bytes: u64,
    pub errors: u64,
    pub elapsed_secs: f64,
    pub ended: u64,
}

/// Unix time in seconds.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The scan state files of one pool.
#[derive(Clone, Debug)]
pub struct ScanFiles {
    scan: PathBuf,
    request: PathBuf,
    resilver: PathBuf,
    /// Where releases before the error log moved into the pool kept it.
    old_errors: PathBuf,
}

fn io_error(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::LocalIo {
        path: path.display().to_string(),
        source,
    }
}

impl ScanFiles {
    /// The files of pool `pool` in `home`'s state directory.
    pub fn of(home: &Home, pool: &str) -> ScanFiles {
        let file = |what: &str| {
            home.root()
                .join("state")
                .join(format!("{pool}.{what}.json"))
        };
        ScanFiles {
            scan: file("scan"),
            request: file("scan-ctl"),
            resilver: file("resilver"),
            old_errors: file("errors"),
        }
    }

    /// The current or last scrub; `None` if the pool was never scrubbed here.
    pub fn scrub(&self) -> Option<ScrubState> {
        serde_json::from_slice(&std::fs::read(&self.scan).ok()?).ok()
    }

    /// Writes the scrub state (whole, through a temporary file).
    pub fn save_scrub(&self, state: &ScrubState) -> Result<(), StoreError> {
        if let Some(dir) = self.scan.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
        }
        let tmp = self.scan.with_extension("tmp");
        let bytes = serde_json::to_vec_pretty(state).expect("a scrub state serializes");
        std::fs::write(&tmp, bytes).map_err(|e| io_error(&tmp, e))?;
        std::fs::rename(&tmp, &self.scan).map_err(|e| io_error(&self.scan, e))
    }

    /// Whether a process is scrubbing (as far as the state says).
    pub fn is_scanning(&self) -> bool {
        self.scrub().is_some_and(|s| s.state == ScanPhase::Scanning)
    }

    /// Pauses or cancels the scrub when no process is running it: the state changes, and
    /// the next `run_scrub` resumes (paused) or starts over (canceled). Returns false when
    /// there is no scrub in progress.
    pub fn pause_or_cancel(&self, request: ScrubRequest) -> Result<bool, StoreError> {
        let Some(mut s) = self.scrub().filter(|s| s.state.is_in_progress()) else {
            return Ok(false);
        };
        s.state = match request {
            ScrubRequest::Pause => ScanPhase::Paused,
            ScrubRequest::Stop => ScanPhase::Canceled,
        };
        self.save_scrub(&s)?;
        Ok(true)
    }

    /// Leaves `request` for the process that is scrubbing.
    pub fn send_request(&self, request: ScrubRequest) -> Result<(), StoreError> {
        let text = match request {
            ScrubRequest::Pause => "pause",
            ScrubRequest::Stop => "stop",
        };
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

    fn clear_request(&self) {
        let _ = std::fs::remove_file(&self.request);
    }

    /// Keeps a finished resilver for `status`.
    pub fn record_resilver(&self, p: &ResilverProgress) {
        let record = ResilverRecord {
            repaired_bytes: p.repaired_bytes,
            errors: p.errors,
            elapsed_secs: p.elapsed_secs,
            ended: unix_now(),
        };
        if let (Some(dir), Ok(text)) = (self.resilver.parent(), serde_json::to_string(&record)) {
            let _ = std::fs::create_dir_all(dir);
            let _ = std::fs::write(&self.resilver, text);
        }
    }

    /// The last finished resilver, unless a scrub was recorded after it (the `scan:` line
    /// shows whichever is newer).
    pub fn last_resilver(&self) -> Option<ResilverRecord> {
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        if modified(&self.scan) > modified(&self.resilver) {
            return None;
        }
        serde_json::from_str(&std::fs::read_to_string(&self.resilver).ok()?).ok()
    }

    /// Forgets the scrub state and requests (export, destroy).
    pub fn forget(&self) {
        for path in [&self.scan, &self.old_errors, &self.request] {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Blocks a rate-limited scrub reads per hold of the store lock.
const RATED_SCRUB_SLICE: u64 = 8;

impl Store {
    /// Runs the pool's scrub, or resumes the one paused or interrupted, keeping its state
    /// in `files` every `interval` and at the end; a request another process leaves
    /// (`ScanFiles::send_request`) pauses or stops it. `progress` sees each step.
    ///
    /// With `rate` (bytes per second) it examines no faster, in small slices of the pool
    /// (`Store::scrub_in_slices`) so that it holds the store lock only briefly each time.
    pub fn run_scrub(
        &self,
        files: &ScanFiles,
        interval: Duration,
        rate: Option<u64>,
        progress: &mut dyn FnMut(&ScrubProgress),
    ) -> Result<(ScrubState, ScrubEnd), StoreError> {
        files.clear_request();
        let resume = files.scrub().filter(|s| s.state.is_in_progress());
        let started = resume.as_ref().map(|s| s.started).unwrap_or_else(unix_now);
        let began = std::time::Instant::now();
        let mut saved = None::<std::time::Instant>;
        let mut report = |p: &ScrubProgress| {
            if let Some(rate) = rate {
                // Behind the rate: wait until the bytes examined so far are due.
                let due = Duration::from_secs_f64(p.examined_bytes as f64 / rate as f64);
                if let Some(wait) = due.checked_sub(began.elapsed()) {
                    std::thread::sleep(wait.min(Duration::from_secs(1)));
                }
                if saved.is_some_and(|t| t.elapsed() < Duration::from_millis(500)) {
                    return ScrubControl::Continue;
                }
                saved = Some(std::time::Instant::now());
            }
            let _ = files.save_scrub(&ScrubState {
                state: ScanPhase::Scanning,
                progress: p.clone(),
                started,
                ended: 0,
            });
            progress(p);
            match files.request() {
                Some(ScrubRequest::Pause) => ScrubControl::Pause,
                Some(ScrubRequest::Stop) => ScrubControl::Stop,
                None => ScrubControl::Continue,
            }
        };
        let resume_from = resume.as_ref().map(|s| &s.progress);
        let (p, end) = match rate {
            Some(_) => self.scrub_in_slices(
                resume_from,
                Duration::from_millis(10),
                RATED_SCRUB_SLICE,
                &mut report,
            ),
            None => self.scrub(resume_from, interval, &mut report),
        }?;
        files.clear_request();
        let state = ScrubState {
            state: ScanPhase::after(&end),
            progress: p,
            started,
            ended: unix_now(),
        };
        files.save_scrub(&state)?;
        Ok((state, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_file_keeps_its_words() {
        let s = ScrubState {
            state: ScanPhase::Paused,
            progress: ScrubProgress::default(),
            started: 1,
            ended: 2,
        };
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["state"], "paused");
        let back: ScrubState = serde_json::from_value(json).unwrap();
        assert_eq!(back.state, ScanPhase::Paused);
    }

    #[test]
    fn pause_and_cancel_without_a_scrubbing_process() {
        let dir = tempfile::tempdir().unwrap();
        let files = ScanFiles::of(&Home::at(dir.path()), "tank");
        assert!(
            !files.pause_or_cancel(ScrubRequest::Pause).unwrap(),
            "none yet"
        );
        let scanning = ScrubState {
            state: ScanPhase::Scanning,
            progress: ScrubProgress::default(),
            started: 1,
            ended: 0,
        };
        files.save_scrub(&scanning).unwrap();
        assert!(files.is_scanning());
        assert!(files.pause_or_cancel(ScrubRequest::Pause).unwrap());
        assert_eq!(files.scrub().unwrap().state, ScanPhase::Paused);
        assert!(files.pause_or_cancel(ScrubRequest::Stop).unwrap());
        assert_eq!(files.scrub().unwrap().state, ScanPhase::Canceled);
        assert!(!files.pause_or_cancel(ScrubRequest::Stop).unwrap(), "ended");
        files.send_request(ScrubRequest::Pause).unwrap();
        assert_eq!(files.request(), Some(ScrubRequest::Pause));
        files.forget();
        assert!(files.scrub().is_none() && files.request().is_none());
    }
}
