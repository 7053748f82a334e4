//! Pool history (`zpool history`): every command that changed the pool, kept in the pool
//! itself, so it survives export, import and a move to another machine.
//!
//! ```text
//!  dataset table ─ pool section ─ history_object ──► object (kind Table, dataset POOL_OBJECTS)
//!     one record per line, JSON:
//!     {"time":1764021000,"txg":12,"command":"cairn create tank mirror /d0 /d1","user":"root","host":"nas"}
//! ```
//!
//! The object is created with the first record and charged to no dataset. It holds at most
//! `HISTORY_MAX` bytes: when a record would not fit, the oldest records go (the first one,
//! the pool's creation, always stays), as ZFS keeps its history ring. A record is written in
//! the open txg, so it is committed with the change it describes (or, for commands that
//! change only labels, by the txg the history append itself syncs).
//!
//! Lines that do not decode (a damaged block reads as an error, not garbage: checksums)
//! are skipped, never a panic.

use serde::{Deserialize, Serialize};

use crate::core::{State, StoreCore};
use crate::dataset::POOL_OBJECTS;
use crate::dnode::ObjectKind;
use crate::error::StoreError;
use crate::object_io::load_object_bytes;

/// Most bytes of history kept (ZFS keeps 0.1 % of the pool, at least 128 KiB, at most 1 GiB;
/// ours is a fixed 1 MiB: thousands of commands).
pub const HISTORY_MAX: usize = 1 << 20;

/// Block size of the history object.
const HISTORY_BLOCK: u32 = 16 << 10;

/// One command that changed the pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryRecord {
    /// Seconds since the Unix epoch.
    pub time: u64,
    /// The open txg when it was recorded.
    pub txg: u64,
    /// The command line, as typed (program name `cairn`).
    pub command: String,
    /// Who ran it (user name or uid) and where (host name): `history -l`.
    pub user: String,
    pub host: String,
}

impl HistoryRecord {
    fn line(&self) -> String {
        serde_json::to_string(self).expect("records serialize") + "\n"
    }
}

/// Parses the object's lines; undecodable lines are skipped.
pub fn parse_records(bytes: &[u8]) -> Vec<HistoryRecord> {
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect()
}

/// The records to keep when `new` is added to `old`: all of them if they fit in `max`
/// bytes, else the first (creation) and as many of the newest as fit in half of `max`.
fn trimmed(mut old: Vec<HistoryRecord>, new: HistoryRecord, max: usize) -> Vec<HistoryRecord> {
    old.push(new);
    let total: usize = old.iter().map(|r| r.line().len()).sum();
    if total <= max || old.len() < 3 {
        return old;
    }
    let first = old.remove(0);
    let mut budget = (max / 2).saturating_sub(first.line().len());
    let mut kept: Vec<HistoryRecord> = Vec::new();
    for r in old.into_iter().rev() {
        let len = r.line().len();
        if len > budget && !kept.is_empty() {
            break;
        }
        budget = budget.saturating_sub(len);
        kept.push(r);
    }
    kept.push(first);
    kept.reverse();
    kept
}

impl StoreCore {
    /// Appends a record of `command` (run by `user` on `host`) in the open txg.
    pub fn log_history(&self, command: &str, user: &str, host: &str) -> Result<(), StoreError> {
        let mut st = self.lock();
        let record = HistoryRecord {
            time: crate::core::now_ns() / 1_000_000_000,
            txg: st.txg,
            command: command.to_string(),
            user: user.to_string(),
            host: host.to_string(),
        };
        let id = match st.datasets.pool.history_object {
            0 => {
                let id = self.create_object_locked(
                    &mut st,
                    ObjectKind::Table,
                    POOL_OBJECTS,
                    HISTORY_BLOCK,
                )?;
                st.datasets.pool.history_object = id;
                st.datasets_dirty = true;
                id
            }
            id => id,
        };
        let size = self.object_mut(&mut st, id)?.dnode.size;
        let line = record.line();
        if size as usize + line.len() <= HISTORY_MAX {
            return self.write_locked(&mut st, id, size, line.as_bytes());
        }
        let old = parse_records(&load_object_bytes(self.pool(), &mut st, id)?);
        let text: String = trimmed(old, record, HISTORY_MAX)
            .iter()
            .map(HistoryRecord::line)
            .collect();
        self.truncate_locked(&mut st, id, 0)?;
        self.write_locked(&mut st, id, 0, text.as_bytes())
    }

    /// Every record kept, oldest first.
    pub fn history(&self) -> Result<Vec<HistoryRecord>, StoreError> {
        let mut st = self.lock();
        history_of(self, &mut st)
    }
}

fn history_of(store: &StoreCore, st: &mut State) -> Result<Vec<HistoryRecord>, StoreError> {
    match st.datasets.pool.history_object {
        0 => Ok(Vec::new()),
        id => Ok(parse_records(&load_object_bytes(store.pool(), st, id)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(i: u64, len: usize) -> HistoryRecord {
        HistoryRecord {
            time: i,
            txg: i,
            command: format!("cairn set x={i} {}", "y".repeat(len)),
            user: "root".into(),
            host: "nas".into(),
        }
    }

    #[test]
    fn records_round_trip_and_garbage_lines_are_skipped() {
        let mut bytes = rec(1, 3).line().into_bytes();
        bytes.extend_from_slice(b"{not json\n\xff\xfe\n");
        bytes.extend_from_slice(rec(2, 3).line().as_bytes());
        assert_eq!(parse_records(&bytes), vec![rec(1, 3), rec(2, 3)]);
    }

    #[test]
    fn a_full_history_keeps_the_first_record_and_the_newest() {
        let old: Vec<HistoryRecord> = (0..100).map(|i| rec(i, 50)).collect();
        let line = rec(0, 50).line().len();
        let kept = trimmed(old, rec(100, 50), 40 * line);
        assert_eq!(kept[0], rec(0, 50), "creation stays");
        assert_eq!(
            kept.last().unwrap(),
            &rec(100, 50),
            "the new record is kept"
        );
        let total: usize = kept.iter().map(|r| r.line().len()).sum();
        assert!(total <= 20 * line + line, "{total}");
        let times: Vec<u64> = kept.iter().map(|r| r.time).collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
        // Below the cap nothing goes.
        let few: Vec<HistoryRecord> = (0..3).map(|i| rec(i, 5)).collect();
        assert_eq!(trimmed(few, rec(3, 5), HISTORY_MAX).len(), 4);
    }
}
