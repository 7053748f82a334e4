//! Namespace changes in the intent log (the log itself: `crate::intent_log`): the intents
//! `posix::make_node`, `rename`, `link` and `remove_name` keep (CREATE, RENAME, LINK and
//! REMOVE records; `xattr::set_xattr` keeps XATTR ones the same way), and how replay
//! applies those records.
//!
//! ```text
//!  make_node / rename / link / remove_name, under the store lock:
//!    marks = dir_marks(dirs it may change)        each directory's change count now
//!    the change itself (dir_insert/dir_remove count every change)
//!    note_namespace(marks, intent)                the changes since the marks count as
//!                                                 logged; the intent is appended
//!  a directory with more changes than logged ones (a change through a path rather than
//!  `posix`, a failed change part-way) blocks its dataset's log:
//!  `intent_log::unloggable_datasets`
//! ```
//! Invariants:
//! - The intent is appended under the store lock, so a sync covers it exactly when it
//!   covers the change: replaying chain C onto the root block that names C finds the
//!   state the change was made in (a created node's id free, a renamed name there).
//! - Only a change that succeeded counts as logged, and only if its intent is kept; a
//!   change that failed part-way leaves its directory blocking, and a dataset that keeps
//!   no intent (`sync=disabled`, the log not armed yet) is marked unlogged.
//! - Replay runs the same `posix` code under the logged ids and names; an object a
//!   replayed rename or removal leaves without a name is freed (no one has it open at
//!   import), and later records of it are skipped (`live_dnode`). Live, such an object
//!   is freed at its last close without blocking the log (`free_nameless_locked`).

use std::sync::MutexGuard;

use crate::core::{State, StoreCore};
use crate::dir::NAME_MAX;
use crate::dnode::NewNode;
use crate::error::StoreError;
use crate::intent_format::{LoggedCreate, LoggedRename};
use crate::intent_state::{IntentOp, SyncPolicy};

/// The change counts of the directories a namespace change may touch, taken before it,
/// and the log's generation then (a txg committed inside the change, as a full pool's
/// space check may, starts the counts again from zero).
pub(crate) struct DirMarks {
    generation: u64,
    counts: Vec<(u64, u64)>,
}

/// A namespace change to keep as an intent.
pub(crate) struct NamespaceIntent {
    pub dataset: u32,
    pub object: u64,
    pub kind: crate::dnode::ObjectKind,
    pub op: IntentOp,
}

/// Before a change a namespace record will describe: the change counts of `dirs`.
pub(crate) fn dir_marks(st: &State, dirs: &[u64]) -> DirMarks {
    let mut counts: Vec<(u64, u64)> = dirs
        .iter()
        .map(|d| (*d, st.log.dir_changes.get(d).map_or(0, |c| c.all)))
        .collect();
    counts.sort_unstable();
    counts.dedup();
    DirMarks {
        generation: st.log.generation,
        counts,
    }
}

impl StoreCore {
    /// After a namespace change succeeded (store lock held since `dir_marks`): keeps its
    /// intent (`note_namespace`), lets the lock go, and under `sync=always` commits it.
    pub(crate) fn log_namespace(
        &self,
        mut st: MutexGuard<'_, State>,
        marks: DirMarks,
        intent: NamespaceIntent,
    ) -> Result<(), StoreError> {
        let dataset = intent.dataset;
        let commit = self.note_namespace(&mut st, marks, intent);
        drop(st);
        if commit {
            self.commit_log_for(Some(dataset))?;
        }
        Ok(())
    }

    /// Keeps a namespace change's intent and counts the directory changes since the marks
    /// as logged; a dataset that keeps no intent is marked unlogged instead. True:
    /// `sync=always`, the caller commits.
    fn note_namespace(&self, st: &mut State, marks: DirMarks, intent: NamespaceIntent) -> bool {
        let policy = self.log_policy(st, intent.dataset);
        let kept = match policy.sync {
            SyncPolicy::Always => true,
            SyncPolicy::Standard => self.intent.is_armed(),
            SyncPolicy::Disabled => false,
        };
        if !kept {
            st.log.unlogged.insert(intent.dataset);
            return false;
        }
        let synced_since = marks.generation != st.log.generation;
        for (dir, before) in marks.counts {
            let before = if synced_since { 0 } else { before };
            let c = st.log.dir_changes.entry(dir).or_default();
            // (A count below its mark cannot happen; if it did, the directory blocks.)
            if let Some(changes) = c.all.checked_sub(before) {
                c.logged = (c.logged + changes).min(c.all);
            }
        }
        let object = (intent.dataset, intent.object, intent.kind);
        self.intent.append(object, intent.op, false);
        policy.sync == SyncPolicy::Always
    }

    /// Log replay: makes the node a CREATE record logged, under its id. False: the node is
    /// there already under that name (nothing to do).
    pub(crate) fn replay_create(&self, id: u64, c: &LoggedCreate) -> Result<bool, StoreError> {
        let mut st = self.lock();
        if self.entry_of(&mut st, c.parent, &c.name) == Some(id) {
            return Ok(false);
        }
        let new = NewNode {
            kind: c.kind,
            mode: c.mode,
            uid: c.uid,
            gid: c.gid,
            rdev: c.rdev,
        };
        let target = (!c.target.is_empty()).then_some(&c.target[..]);
        self.make_node_locked(&mut st, c.parent, &c.name, new, target, Some(id))
            .map_err(|e| not_replayed(id, "CREATE", &c.name, c.parent, e))?;
        Ok(true)
    }

    /// Log replay: repeats the rename a RENAME record logged, whose source must name the
    /// record's object.
    pub(crate) fn replay_rename(&self, id: u64, r: &LoggedRename) -> Result<bool, StoreError> {
        let mut st = self.lock();
        if self.entry_of(&mut st, r.from_dir, &r.from) != Some(id) {
            let e = StoreError::NotFound(format!("\"{}\" naming object {id}", r.from));
            return Err(not_replayed(id, "RENAME", &r.from, r.from_dir, e));
        }
        let replaced = self
            .rename_locked(&mut st, r.from_dir, &r.from, r.to_dir, &r.to, r.mode)
            .map_err(|e| not_replayed(id, "RENAME", &r.to, r.to_dir, e))?;
        if let Some(gone) = replaced.filter(|u| u.nlink == 0) {
            self.free_nameless_locked(&mut st, gone.object)?;
        }
        Ok(true)
    }

    /// Log replay: removes the name a REMOVE record logged, which must name the record's
    /// object; an object left without a name is freed (nothing has it open at import).
    pub(crate) fn replay_remove(
        &self,
        id: u64,
        dir: u64,
        name: &str,
        rmdir: bool,
    ) -> Result<bool, StoreError> {
        let mut st = self.lock();
        if self.entry_of(&mut st, dir, name) != Some(id) {
            let e = StoreError::NotFound(format!("\"{name}\" naming object {id}"));
            return Err(not_replayed(id, "REMOVE", name, dir, e));
        }
        let (left, _, _) = self
            .remove_name_locked(&mut st, dir, name, rmdir)
            .map_err(|e| not_replayed(id, "REMOVE", name, dir, e))?;
        if left.nlink == 0 {
            self.free_nameless_locked(&mut st, id)?;
        }
        Ok(true)
    }

    /// Log replay: gives the record's object the name a LINK record logged.
    pub(crate) fn replay_link(&self, id: u64, dir: u64, name: &str) -> Result<bool, StoreError> {
        let mut st = self.lock();
        if self.entry_of(&mut st, dir, name) == Some(id) {
            return Ok(false);
        }
        self.link_locked(&mut st, id, dir, name)
            .map_err(|e| not_replayed(id, "LINK", name, dir, e))?;
        Ok(true)
    }

    /// The object `name` names in directory `dir`, if `dir` is a directory that has it.
    fn entry_of(&self, st: &mut State, dir: u64, name: &str) -> Option<u64> {
        if name.len() > NAME_MAX {
            return None;
        }
        let is_dir = self
            .object_mut(st, dir)
            .is_ok_and(|o| o.dnode.kind == crate::dnode::ObjectKind::Directory);
        if !is_dir {
            return None;
        }
        self.dir_lookup(st, dir, name)
            .ok()
            .flatten()
            .map(|e| e.object)
    }
}

/// The error of a namespace record that does not replay: the log does not fit the pool.
fn not_replayed(id: u64, kind: &str, name: &str, dir: u64, e: StoreError) -> StoreError {
    StoreError::corrupt_object(
        "intent log",
        id,
        format!("its {kind} record (\"{name}\" in directory {dir}) does not replay: {e}"),
    )
}
