//! A suspended pool (zpool's `failmode`): a txg write that more failed devices refuse
//! than the redundancy covers waits here until the administrator brings the devices back
//! and runs `cairn clear`, then it is issued again — the txg is not lost and nothing is
//! undone (ZFS suspends and reissues its zios the same way).
//!
//! ```text
//!  sync thread:  write ──fails (devices lost)──► suspend(reason) ──wait──┐
//!                  ▲                              generation g           │
//!                  └────────────── retry ◄────────── resume ◄────────────┘
//!  cairn clear:  bring the leaves back ─► resume ─► waits for the retry's verdict:
//!                  ok (retried_ok ≥ g)  or  suspended again (generation > g)
//! ```
//! Rules:
//! - Only a pool whose owner can resume it waits (`set_resumable`, the service); a one-shot
//!   command gets the error at once, as does `failmode=panic` (its service then ends).
//! - Whoever waits holds no pool lock (`retry_while_suspended` runs the operation to its
//!   end first), so `clear`, `status` and `get` go on meanwhile.
//! - `abandon` (the service stopping) ends every wait for good: the operations fail.
//! - Under `failmode=continue` the writes of a sync before its commit point do not wait
//!   (`write_or_suspend`): they suspend the pool and fail, and the store puts back the
//!   state it copied before the sync, so that reads go on; after `clear` the next sync
//!   writes the txg again from the start.
//!
//! This module holds the state; the `Pool` methods that use it are in `crate::suspended_io`.

use std::sync::{Condvar, Mutex, MutexGuard};

#[derive(Debug, Default)]
pub(crate) struct State {
    /// Why the pool is suspended (None: it is not).
    pub(crate) reason: Option<String>,
    /// Bumped at every suspension.
    pub(crate) generation: u64,
    /// The newest suspension whose retried write succeeded.
    pub(crate) retried_ok: u64,
    /// Writes waiting for a resume now.
    pub(crate) waiting: usize,
    /// Suspensions may wait (someone can resume them).
    pub(crate) resumable: bool,
    /// No more waiting: the owner is going away.
    pub(crate) abandoned: bool,
    /// A txg sync that can be undone is running (`Pool::begin_sync`): its writes before
    /// the commit point fail at once instead of waiting.
    pub(crate) undoable_sync: bool,
}

/// The pool's suspension state (`Pool::suspension`).
#[derive(Debug, Default)]
pub struct Suspension {
    state: Mutex<State>,
    changed: Condvar,
}

impl Suspension {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits on the state's change (a suspension, a resume, a verdict, abandon).
    pub(crate) fn wait<'a>(&self, s: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(s).unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn wait_timeout<'a>(
        &self,
        s: MutexGuard<'a, State>,
        timeout: std::time::Duration,
    ) -> MutexGuard<'a, State> {
        self.changed
            .wait_timeout(s, timeout)
            .unwrap_or_else(|p| p.into_inner())
            .0
    }

    pub(crate) fn notify(&self) {
        self.changed.notify_all();
    }
}
