//! The pool's side of a suspension (`crate::suspension` has the state and the rules):
//! txg writes retried while the pool is suspended, `clear`'s resume, and what reports see.

use std::time::{Duration, Instant};

use cairn_vdev::{FailMode, VdevError};

use crate::error::PoolError;
use crate::pool::Pool;

/// How long `clear` waits for the retried writes to say whether the devices are back.
const VERDICT_WAIT: Duration = Duration::from_secs(10);

/// Where `probe_writes` writes: the start of the 3.5 MiB each leaf keeps after its front
/// labels (ZFS's boot reserve), which holds nothing.
const PROBE_OFFSET: u64 = 2 * cairn_geometry::LABEL_SIZE;
const _: () = assert!(PROBE_OFFSET + (1 << 16) <= cairn_geometry::LEAF_DATA_START);

/// Whether `e` means devices are gone or refuse writes (not a bug, not a full pool): the
/// errors a suspended pool waits out.
pub fn is_device_loss(e: &PoolError) -> bool {
    matches!(
        e,
        PoolError::Vdev(
            VdevError::Missing { .. } | VdevError::Io { .. } | VdevError::TooManyFailures { .. }
        ) | PoolError::Unavailable { .. }
    )
}

/// A txg sync in progress (`Pool::begin_sync`); ends it when dropped.
pub struct SyncGuard<'a> {
    pool: &'a Pool,
    /// Whether this sync is undone, not waited out, when its devices fail part-way.
    pub undoable: bool,
}

impl Drop for SyncGuard<'_> {
    fn drop(&mut self) {
        self.pool.suspension.lock().undoable_sync = false;
    }
}

impl Pool {
    /// Lets txg writes wait for `cairn clear` when devices fail (the service does; a
    /// one-shot command never sets it, so it gets the error).
    pub fn set_resumable(&self, on: bool) {
        self.suspension.lock().resumable = on;
    }

    /// Whether every data top-level vdev takes a write now: one sector of zeros into each
    /// usable leaf's reserved area; a vdev fails when more leaves refuse than it survives.
    /// (Under `failmode=continue` a txg sync asks first, so that a pool that cannot write
    /// is suspended before the sync changes anything and the store stays readable; `clear`
    /// asks before it resumes.)
    pub fn probe_writes(&self) -> Result<(), PoolError> {
        for top in self.tops.iter().filter(|t| !t.is_log() && !t.is_hole()) {
            let zeros = vec![0u8; top.sector() as usize];
            let failed = top
                .children
                .iter()
                .filter(|c| {
                    let took = c.is_usable()
                        && c.leaf
                            .as_ref()
                            .is_some_and(|l| l.write_at(&zeros, PROBE_OFFSET).is_ok());
                    !took
                })
                .count();
            let survives = match top.shape() {
                cairn_geometry::VdevShape::Mirror { .. } => top.children.len() - 1,
                shape => shape.redundancy(),
            };
            if failed > survives {
                return Err(PoolError::Vdev(VdevError::TooManyFailures {
                    vdev: top.display_name(),
                    offset: PROBE_OFFSET,
                    failed,
                    parity: survives,
                }));
            }
        }
        Ok(())
    }

    /// Under `failmode=continue` in a pool that can be resumed: suspends the pool if it
    /// cannot take writes now (`probe_writes`), before a txg sync starts; the error says
    /// why. A sync that fails later than this is undone by the store (`write_or_suspend`),
    /// except in its last steps (the DTLs, the spare take-over, the uberblock), which wait
    /// as under `wait`.
    pub fn suspend_unless_writable(&self) -> Result<(), PoolError> {
        if !self.undoes_failed_syncs() {
            return Ok(());
        }
        self.probe_writes().inspect_err(|e| {
            self.suspend_io(e);
        })
    }

    /// Why the pool's I/O is suspended, if it is.
    pub fn io_suspended(&self) -> Option<String> {
        self.suspension.lock().reason.clone()
    }

    /// Runs `op`, a write of the open txg; while it fails because devices are lost and
    /// the pool may wait (`failmode` wait or continue, a resumable owner), the pool is
    /// suspended and `op` is run again after each `resume_io`.
    pub fn retry_while_suspended<T>(
        &self,
        mut op: impl FnMut() -> Result<T, PoolError>,
    ) -> Result<T, PoolError> {
        let mut waited_on = None;
        loop {
            match op() {
                Ok(v) => {
                    if let Some(g) = waited_on {
                        let mut s = self.suspension.lock();
                        s.retried_ok = s.retried_ok.max(g);
                        self.suspension.notify();
                    }
                    return Ok(v);
                }
                Err(e) if is_device_loss(&e) => {
                    let Some(g) = self.suspend_io(&e) else {
                        return Err(e);
                    };
                    if !self.wait_for_resume() {
                        return Err(e);
                    }
                    waited_on = Some(g);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts a txg sync (the caller holds the store's state lock: one at a time). Under
    /// `failmode=continue` in a pool that can be resumed, the sync is undoable: its writes
    /// before the commit point fail at once (`write_or_suspend`) and the caller undoes it.
    /// Decided once for the whole sync, until the guard is dropped.
    pub fn begin_sync(&self) -> SyncGuard<'_> {
        let undoable = self.undoes_failed_syncs();
        self.suspension.lock().undoable_sync = undoable;
        SyncGuard {
            pool: self,
            undoable,
        }
    }

    /// A write of a txg sync before its commit point. In an undoable sync (`begin_sync`) a
    /// device loss suspends the pool and is returned at once, so that reads go on while the
    /// caller undoes the sync; otherwise as `retry_while_suspended`.
    pub fn write_or_suspend<T>(
        &self,
        mut op: impl FnMut() -> Result<T, PoolError>,
    ) -> Result<T, PoolError> {
        if !self.suspension.lock().undoable_sync {
            return self.retry_while_suspended(op);
        }
        op().inspect_err(|e| {
            if is_device_loss(e) {
                self.suspend_io(e);
            }
        })
    }

    /// Whether a txg sync that loses its devices before its commit point is undone rather
    /// than waited out: under `failmode=continue`, in a pool that can be resumed.
    fn undoes_failed_syncs(&self) -> bool {
        let resumable = {
            let s = self.suspension.lock();
            s.resumable && !s.abandoned
        };
        resumable && self.props().failmode == FailMode::Continue
    }

    /// Marks a resumable pool suspended by `e` (once per suspension: an event). Returns the
    /// suspension's generation, or None if this failure does not wait (`failmode=panic`,
    /// whose service then ends, or a one-shot command, whose pool is not suspended).
    fn suspend_io(&self, e: &PoolError) -> Option<u64> {
        let failmode = self.props().failmode;
        let mut s = self.suspension.lock();
        if !s.resumable {
            // A one-shot command: the error goes to its caller, the pool is not suspended.
            return None;
        }
        let newly = s.reason.is_none();
        if newly {
            s.generation += 1;
            s.reason = Some(e.to_string());
            self.suspension.notify();
        }
        let waits = !s.abandoned && failmode != FailMode::Panic;
        let generation = s.generation;
        drop(s);
        if newly {
            self.post_event(
                "ereport.fs.zfs.io_failure",
                None,
                &[
                    ("failmode", failmode.name().to_string()),
                    ("error", e.to_string()),
                ],
            );
        }
        waits.then_some(generation)
    }

    /// Waits until the pool is resumed (true) or abandoned (false).
    fn wait_for_resume(&self) -> bool {
        let mut s = self.suspension.lock();
        s.waiting += 1;
        while s.reason.is_some() && !s.abandoned {
            s = self.suspension.wait(s);
        }
        s.waiting -= 1;
        !s.abandoned
    }

    /// Lets the waiting writes go again (`cairn clear`, after the devices were brought
    /// back) and waits for their verdict: Ok when one succeeded or none was waiting, an
    /// error when they failed again (the pool stays suspended).
    pub fn resume_io(&self) -> Result<(), PoolError> {
        if self.io_suspended().is_none() {
            return Ok(());
        }
        self.probe_writes().map_err(|e| self.still_suspended(e))?;
        let mut s = self.suspension.lock();
        if s.reason.take().is_none() {
            return Ok(());
        }
        if s.waiting == 0 {
            // Nothing waits (under `continue` the suspension came before a sync began):
            // the probe was the verdict.
            self.suspension.notify();
            return Ok(());
        }
        let g = s.generation;
        self.suspension.notify();
        let deadline = Instant::now() + VERDICT_WAIT;
        while s.retried_ok < g && s.generation == g && !s.abandoned {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // Still writing: the devices take the retried writes so far.
                return Ok(());
            }
            s = self.suspension.wait_timeout(s, left);
        }
        match s.reason.clone() {
            Some(why) if s.generation > g => {
                drop(s);
                Err(self.still_suspended(why))
            }
            _ => Ok(()),
        }
    }

    /// `error` of a `clear` that could not bring the devices back, saying so when the
    /// pool is suspended (it stays so).
    pub(crate) fn still_suspended(&self, error: impl std::fmt::Display) -> PoolError {
        PoolError::Unavailable {
            pool: self.name().to_string(),
            why: format!(
                "its I/O is still suspended: {error}; bring the devices back, then run `cairn clear {}` again",
                self.name()
            ),
        }
    }

    /// Ends every wait for good (the owner stops): waiting writes fail with their error.
    pub fn abandon_suspended_io(&self) {
        self.suspension.lock().abandoned = true;
        self.suspension.notify();
    }
}

impl Pool {
    /// Under `failmode=continue`, why new writes and flushes fail now (the pool is
    /// suspended); None when they may go on (or wait, under `wait`).
    pub fn refuses_new_writes(&self) -> Option<String> {
        let why = self.io_suspended()?;
        (self.props().failmode == FailMode::Continue).then(|| {
            format!(
                "its I/O is suspended ({why}) and failmode=continue: bring the devices back, then run `cairn clear {}`",
                self.name()
            )
        })
    }
}
