//! I/O classes, as zpool's: every leaf request is counted under one (`iostat -q`, `-w`).
//!
//! The class is decided where the work is issued, not passed down every call: a caller
//! that knows what its I/O is for enters a scope (`let _c = io_class::enter(IoClass::Scrub)`)
//! and `MeteredLeaf` asks `for_request` which class each request of this thread is in.
//!
//! ```text
//!  scrub / resilver ──enter(Scrub)──┐
//!  txg sync, background writer ──enter(AsyncWrite)──┤  thread-local scope
//!  intent log commit ──enter(SyncWrite)──┘           │
//!                                                    ▼
//!  on_leaf_io(items) ── captures the scope at submit ──► I/O thread: scope set around the job
//!                                                    ▼
//!  MeteredLeaf::read_at/write_at ── for_request(dir) ──► counters of that class
//! ```
//! Rules that keep the counts right:
//! - A scope's class applies to requests in its own direction (Scrub and the reads are
//!   reads; Trim and the writes are writes). A request in the other direction, or with no
//!   scope, takes its direction's default: SyncRead for reads (someone waits for them) and
//!   AsyncWrite for writes (the txg sync writes them) — as ZFS issues a scrub's repair
//!   writes as async writes and its sync thread's reads as sync reads.
//! - Scopes nest: a guard restores the scope it found, so an inner scope never leaks out.
//! - Work handed to another thread carries the submitter's scope (`threads` captures it
//!   when it queues a job and sets it on the worker around the job); a thread spawned by
//!   hand must enter the scope itself.

use std::cell::Cell;

use serde::{Deserialize, Serialize};

/// What a leaf request is for, as zpool's I/O classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoClass {
    /// Reads someone waits for (file and metadata reads).
    SyncRead,
    /// Writes someone waits for (intent log commits).
    SyncWrite,
    /// Reads nobody waits for yet (read-ahead).
    AsyncRead,
    /// Writes of a txg (the sync and the background writers).
    AsyncWrite,
    /// Scrub and resilver reads.
    Scrub,
    /// Frees sent to the device (TRIM, hole punching).
    Trim,
}

/// How many classes there are (the length of per-class counter arrays).
pub const CLASSES: usize = 6;

impl IoClass {
    /// Every class, in `index` order (zpool's column order).
    pub const ALL: [IoClass; CLASSES] = [
        IoClass::SyncRead,
        IoClass::SyncWrite,
        IoClass::AsyncRead,
        IoClass::AsyncWrite,
        IoClass::Scrub,
        IoClass::Trim,
    ];

    /// Position in per-class arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name in `--json` (and in zpool's `-r` header): `sync_read`, …, `scrub`, `trim`.
    pub fn name(self) -> &'static str {
        match self {
            IoClass::SyncRead => "sync_read",
            IoClass::SyncWrite => "sync_write",
            IoClass::AsyncRead => "async_read",
            IoClass::AsyncWrite => "async_write",
            IoClass::Scrub => "scrub",
            IoClass::Trim => "trim",
        }
    }

    /// Whether the class's requests are reads.
    pub fn is_read(self) -> bool {
        matches!(
            self,
            IoClass::SyncRead | IoClass::AsyncRead | IoClass::Scrub
        )
    }
}

thread_local! {
    /// The class the caller entered on this thread (`enter`), if any.
    static SCOPE: Cell<Option<IoClass>> = const { Cell::new(None) };
}

/// Ends a scope entered with `enter`: puts back the scope that was in force before.
#[must_use = "the scope ends when the guard is dropped"]
pub struct ClassGuard {
    outer: Option<IoClass>,
}

impl Drop for ClassGuard {
    fn drop(&mut self) {
        SCOPE.with(|s| s.set(self.outer));
    }
}

/// Counts this thread's leaf requests under `class` until the guard is dropped.
pub fn enter(class: IoClass) -> ClassGuard {
    set_scope(Some(class))
}

/// The scope in force on this thread (to carry it to another thread).
pub fn scope() -> Option<IoClass> {
    SCOPE.with(|s| s.get())
}

/// Sets the scope (or none) until the guard is dropped: how a worker takes on the scope
/// its submitter had.
pub fn set_scope(scope: Option<IoClass>) -> ClassGuard {
    ClassGuard {
        outer: SCOPE.with(|s| s.replace(scope)),
    }
}

/// The class of a request this thread issues now: the scope's if it is of the request's
/// direction, else the direction's default.
pub fn for_request(is_read: bool) -> IoClass {
    match scope() {
        Some(c) if c.is_read() == is_read => c,
        _ if is_read => IoClass::SyncRead,
        _ => IoClass::AsyncWrite,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_nest_and_apply_to_their_direction_only() {
        assert_eq!(for_request(true), IoClass::SyncRead);
        assert_eq!(for_request(false), IoClass::AsyncWrite);
        {
            let _scrub = enter(IoClass::Scrub);
            assert_eq!(for_request(true), IoClass::Scrub);
            // A scrub's repair write is an async write, as in ZFS.
            assert_eq!(for_request(false), IoClass::AsyncWrite);
            {
                let _log = enter(IoClass::SyncWrite);
                assert_eq!(for_request(false), IoClass::SyncWrite);
                assert_eq!(for_request(true), IoClass::SyncRead);
            }
            assert_eq!(for_request(true), IoClass::Scrub);
        }
        assert_eq!(scope(), None);
        for (i, c) in IoClass::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
        }
    }
}
