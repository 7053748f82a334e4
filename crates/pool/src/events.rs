//! Pool events (`zpool events`): errors, state changes, scrub and resilver start and finish,
//! hot spares, imports and exports — what an admin watches to learn that something happened.
//!
//! ```text
//!  engine ── Pool::post_event ──► Pool.events (in memory)
//!                                   └─ flushed by save_record / drop ──► $CAIRN_HOME/events.jsonl
//!  cairn events [-f] [-v] ◄───────────────────────────────────────────── (one JSON event a line)
//! ```
//!
//! ZFS keeps its events in kernel memory; cairn's commands are processes that come and go,
//! so the events go to a file in the state directory, shared by every pool of it, and kept
//! to the newest `KEEP_BYTES`. Leaf state changes and error counts are found by comparing
//! each leaf with what the pool record said when the pool was opened (and at each save), so
//! a disk that vanished between two commands is reported by the next one.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::home::Home;

/// The events file is cut to its newest half when it grows past this.
pub const KEEP_BYTES: u64 = 4 << 20;

/// One event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Nanoseconds since the Unix epoch.
    pub time_ns: u64,
    /// ZFS's class names: `sysevent.fs.zfs.scrub_start`, `ereport.fs.zfs.checksum`,
    /// `resource.fs.zfs.statechange`, …
    pub class: String,
    pub pool: String,
    pub pool_guid: u64,
    /// The leaf concerned, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vdev: Option<String>,
    /// Everything else (`-v`), by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub details: BTreeMap<String, String>,
}

/// Where the events of a state directory go.
pub fn events_path(home: &Home) -> PathBuf {
    home.root().join("events.jsonl")
}

/// Appends `events` to the state directory's file (cutting it to its newest half when it
/// grew past `KEEP_BYTES`). Each event is one line written whole, so processes that
/// append at once do not mix their lines.
pub fn append(home: &Home, events: &[Event]) -> std::io::Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let path = events_path(home);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut text = String::new();
    for e in events {
        text += &serde_json::to_string(e).map_err(std::io::Error::other)?;
        text.push('\n');
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    f.write_all(text.as_bytes())?;
    if f.metadata()?.len() > KEEP_BYTES {
        keep_newest_half(&path)?;
    }
    Ok(())
}

fn keep_newest_half(path: &Path) -> std::io::Result<()> {
    let text = std::fs::read_to_string(path)?;
    let cut = text.len() / 2;
    let start = text[cut..].find('\n').map_or(text.len(), |i| cut + i + 1);
    let tmp = path.with_extension("jsonl.tmp");
    std::fs::write(&tmp, &text[start..])?;
    std::fs::rename(&tmp, path)
}

/// Every event of the file (lines that do not decode are skipped), oldest first.
pub fn read(home: &Home) -> std::io::Result<Vec<Event>> {
    match std::fs::read_to_string(events_path(home)) {
        Ok(text) => Ok(parse(&text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Events in `text`, one JSON object a line.
pub fn parse(text: &str) -> Vec<Event> {
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `cairn events -c`: forgets every event.
pub fn clear(home: &Home) -> std::io::Result<()> {
    match std::fs::remove_file(events_path(home)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(i: u64) -> Event {
        Event {
            time_ns: i,
            class: "sysevent.fs.zfs.scrub_start".into(),
            pool: "tank".into(),
            pool_guid: 7,
            vdev: None,
            details: BTreeMap::new(),
        }
    }

    #[test]
    fn events_append_read_and_stay_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        assert!(read(&home).unwrap().is_empty());
        append(&home, &[ev(1), ev(2)]).unwrap();
        append(&home, &[ev(3)]).unwrap();
        let times: Vec<u64> = read(&home).unwrap().iter().map(|e| e.time_ns).collect();
        assert_eq!(times, [1, 2, 3]);
        // Past the bound the oldest half goes; the newest stays.
        let many: Vec<Event> = (4..60_000).map(ev).collect();
        append(&home, &many).unwrap();
        let kept = read(&home).unwrap();
        assert!(std::fs::metadata(events_path(&home)).unwrap().len() <= KEEP_BYTES);
        assert_eq!(kept.last().unwrap().time_ns, 59_999);
        assert!(kept.first().unwrap().time_ns > 3);
        clear(&home).unwrap();
        assert!(read(&home).unwrap().is_empty());
        // Garbage lines are skipped, never a panic.
        assert_eq!(parse("{oops\n\u{0}\n").len(), 0);
    }
}
