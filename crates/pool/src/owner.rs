//! One owner per pool: a process owns a pool whole or not at all.
//!
//! Two locks make a process the pool's owner, taken in this order:
//!
//! ```text
//!  1. the pool lock   LOCK_DIR/pool-<GUID>.lock   flock(LOCK_EX|LOCK_NB); the file then says
//!                                                  "<pid>\n<command line>\n" for the message
//!                                                  another process prints when refused
//!  2. every leaf      flock on each device (cairn_vdev::FileLeaf), all or none
//! ```
//!
//! The pool lock is keyed by the pool GUID (not its name: two state directories may know one
//! pool under two names) and lives in a directory shared by every user of the machine, so
//! two processes with different `$CAIRN_HOME` still exclude each other. A leaf that another
//! process holds is never counted as missing: the open fails whole, naming the holder
//! (before this, two `cairn put` each took part of a mirror and both wrote DEGRADED).
//!
//! Locks die with their process (flock), so a `kill -9` leaves nothing to clean up; lock files
//! are never removed (removing one while another process waits on it would let two owners
//! in), they are a few bytes each in a tmpfs.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::PoolError;

/// Where pool locks live when nothing else is chosen: the machine's lock directory, else
/// a folder in /tmp (both cleared at boot, as a held lock is meaningless after a reboot).
pub fn default_lock_dir() -> PathBuf {
    let run_lock = Path::new("/run/lock");
    if run_lock.is_dir() && writable(run_lock) {
        run_lock.join("cairn")
    } else {
        PathBuf::from("/tmp/cairn-locks")
    }
}

fn writable(dir: &Path) -> bool {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap_or_default();
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// The process that holds a pool, as its lock file describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    pub command: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PID {} (`{}`)", self.pid, self.command)
    }
}

/// A held pool lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct PoolLock {
    _file: File,
}

impl PoolLock {
    /// Takes the lock of pool `guid` (named `name` in messages), or says who holds it.
    pub fn acquire(dir: &Path, guid: u64, name: &str) -> Result<PoolLock, PoolError> {
        let path = lock_path(dir, guid);
        let mut file = open_lock_file(dir, &path)?;
        // SAFETY: flock on a valid, owned descriptor.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(PoolError::InUse {
                    pool: name.to_string(),
                    holder: read_holder(&mut file).map(|h| h.to_string()),
                });
            }
            return Err(lock_err(&path, err));
        }
        // Best effort: the holder's description is only for messages.
        let me = format!("{}\n{}\n", std::process::id(), own_command_line());
        if file.set_len(0).is_ok() && file.rewind().is_ok() {
            let _ = file.write_all(me.as_bytes());
        }
        Ok(PoolLock { _file: file })
    }

    /// Whether some process holds pool `guid` right now (without taking its lock).
    pub fn held_by_other(dir: &Path, guid: u64) -> bool {
        let Ok(file) = File::open(lock_path(dir, guid)) else {
            return false;
        };
        // SAFETY: flock on a valid, owned descriptor; released at once.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
        rc != 0
    }
}

fn lock_path(dir: &Path, guid: u64) -> PathBuf {
    dir.join(format!("pool-{guid:016x}.lock"))
}

fn lock_err(path: &Path, source: std::io::Error) -> PoolError {
    PoolError::State {
        path: path.display().to_string(),
        source,
    }
}

/// Opens (creating) a lock file; the directory is created world-writable and sticky, like
/// /tmp, so every user of the machine shares it. Read-only when another user owns the file.
fn open_lock_file(dir: &Path, path: &Path) -> Result<File, PoolError> {
    if !dir.is_dir() {
        std::fs::create_dir_all(dir).map_err(|e| lock_err(dir, e))?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777));
    }
    let rw = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path);
    match rw {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            File::open(path).map_err(|e| lock_err(path, e))
        }
        Err(e) => Err(lock_err(path, e)),
    }
}

fn read_holder(file: &mut File) -> Option<Holder> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.take(4096).read_to_string(&mut text).ok()?;
    parse_holder(&text)
}

/// Parses a lock file's "<pid>\n<command>\n".
fn parse_holder(text: &str) -> Option<Holder> {
    let mut lines = text.lines();
    let pid = lines.next()?.trim().parse().ok()?;
    let command = lines.next().unwrap_or("").trim().to_string();
    Some(Holder { pid, command })
}

/// This process's command line, as `ps` shows it (program base name and arguments).
fn own_command_line() -> String {
    let raw = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let mut words = raw
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned());
    let program = words
        .next()
        .map(|p| p.rsplit('/').next().unwrap_or(&p).to_string())
        .unwrap_or_else(|| "cairn".into());
    std::iter::once(program)
        .chain(words)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_of_one_pool_is_refused_with_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let held = PoolLock::acquire(dir.path(), 42, "tank").unwrap();
        assert!(PoolLock::held_by_other(dir.path(), 42));
        match PoolLock::acquire(dir.path(), 42, "tank") {
            Err(PoolError::InUse { pool, holder }) => {
                assert_eq!(pool, "tank");
                let holder = holder.expect("the holder wrote its pid");
                assert!(
                    holder.starts_with(&format!("PID {} (`", std::process::id())),
                    "{holder}"
                );
            }
            other => panic!("expected InUse, got {other:?}"),
        }
        // Another pool is independent; the lock is free again once dropped.
        let _other = PoolLock::acquire(dir.path(), 43, "other").unwrap();
        drop(held);
        assert!(!PoolLock::held_by_other(dir.path(), 42));
        PoolLock::acquire(dir.path(), 42, "tank").unwrap();
    }

    #[test]
    fn holder_text_parses_and_garbage_does_not() {
        assert_eq!(
            parse_holder("12\ncairn put a tank/\n"),
            Some(Holder {
                pid: 12,
                command: "cairn put a tank/".into()
            })
        );
        assert_eq!(parse_holder(""), None);
        assert_eq!(parse_holder("x\ny"), None);
    }
}
