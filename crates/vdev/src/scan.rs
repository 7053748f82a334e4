//! The pool's scan records: where its scrub stands and how its last resilver ended. They
//! are part of the pool config in every label (as ZFS keeps its scan state in the MOS), so
//! they travel with the pool: `status` after an export and import on another machine
//! shows the same `scan:` line, and a paused scrub resumes there.
//!
//! ```text
//!  label config ─┬─ scrub:          ScrubState { state, progress, started, ended }
//!                └─ last_resilver:  ResilverRecord { repaired_bytes, errors, … ended }
//!
//!              run_scrub                pause (no process scrubs) / request "pause"
//!   (none) ───────────────► scanning ───────────────────────────► paused
//!   paused ── run_scrub ──►    │   └── stop / request "stop" ──► canceled
//!                              └── every block read ───────────► finished
//! ```
//! A resilver in progress is recorded by its resume point (`ResilverCheckpoint`), not
//! here. The state machine is the engine's (`cairn_objset::scan_state`); this module only
//! holds the records and says which of the two is the newer.

use serde::{Deserialize, Serialize};

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
}

/// How far a scrub got.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScrubProgress {
    /// Bytes allocated when the scrub started (what it has to examine).
    pub total_bytes: u64,
    pub examined_bytes: u64,
    pub repaired_bytes: u64,
    /// Blocks that could not be repaired.
    pub errors: u64,
    pub blocks: u64,
    /// Next object to scrub (resume point).
    pub next_object: u64,
    /// Next block id inside `next_object` (resume point inside a large object).
    #[serde(default)]
    pub next_block: u64,
    /// Txg the scrub examined (the one synced as it started): error-log entries last seen
    /// up to it and not seen again by the scrub are dropped when it completes. 0 = unknown
    /// (keep them all).
    #[serde(default)]
    pub scanned_txg: u64,
    pub elapsed_secs: f64,
}

impl ScrubProgress {
    /// Bytes per second so far.
    pub fn rate(&self) -> f64 {
        if self.elapsed_secs > 0.0 {
            self.examined_bytes as f64 / self.elapsed_secs
        } else {
            0.0
        }
    }

    /// Estimated seconds left.
    pub fn eta_secs(&self) -> Option<f64> {
        let rate = self.rate();
        (rate > 0.0).then(|| self.total_bytes.saturating_sub(self.examined_bytes) as f64 / rate)
    }
}

/// The pool's current or last scrub.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScrubState {
    pub state: ScanPhase,
    pub progress: ScrubProgress,
    /// Unix seconds it started (a resumed scrub keeps its start).
    pub started: u64,
    /// Unix seconds it ended or paused; 0 while scanning.
    pub ended: u64,
}

impl ScrubState {
    /// Unix seconds of its last change: its end, or its start while it runs.
    pub fn last_change(&self) -> u64 {
        self.ended.max(self.started)
    }
}

/// The last finished resilver.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResilverRecord {
    pub repaired_bytes: u64,
    pub errors: u64,
    pub elapsed_secs: f64,
    /// Unix seconds it ended.
    pub ended: u64,
}

/// Both records, as the pool keeps them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScanRecords {
    pub scrub: Option<ScrubState>,
    pub last_resilver: Option<ResilverRecord>,
}

impl ScanRecords {
    /// The last resilver, unless a scrub changed after it ended (the `scan:` line shows
    /// whichever is newer, as `zpool status` does).
    pub fn resilver_if_newest(&self) -> Option<&ResilverRecord> {
        let resilver = self.last_resilver.as_ref()?;
        match &self.scrub {
            Some(s) if s.last_change() > resilver.ended => None,
            _ => Some(resilver),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_keeps_its_words() {
        let s = ScrubState {
            state: ScanPhase::Paused,
            progress: ScrubProgress::default(),
            started: 1,
            ended: 2,
        };
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["state"], "paused");
        let back: ScrubState = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn the_newer_scan_is_shown() {
        let resilver = ResilverRecord {
            ended: 100,
            ..ResilverRecord::default()
        };
        let scrub = |started, ended| ScrubState {
            state: ScanPhase::Finished,
            progress: ScrubProgress::default(),
            started,
            ended,
        };
        let mut r = ScanRecords {
            scrub: Some(scrub(10, 20)),
            last_resilver: Some(resilver),
        };
        assert!(r.resilver_if_newest().is_some(), "the scrub is older");
        r.scrub = Some(scrub(150, 0));
        assert!(r.resilver_if_newest().is_none(), "a scrub began after it");
        r.scrub = None;
        assert!(r.resilver_if_newest().is_some());
        r.last_resilver = None;
        assert!(r.resilver_if_newest().is_none());
    }
}
