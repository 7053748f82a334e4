//! The control socket of a pool held by `cairn serve`: other `cairn` commands (status, list,
//! scrub) ask the process that owns the pool instead of opening it themselves (docs/design.md).
//! This module is the client side (`ask`); the serving side is `crate::control_server`.
//!
//! ```text
//!  $CAIRN_HOME/run/POOL.sock   one request line → the answer as text, then close
//!    status [-v]   the rendered `status`
//!    list          one `list` row as JSON
//!    iostat        the pool's I/O since import (`cairn_pool::iostat::PoolIo`) as JSON
//!    scrub         runs a scrub in the serving process, answers its summary line
//!    mode          `service`, or `until-unmounted PID` for a process that serves mounts
//!                  only and exits when the last is unmounted
//!    mount SPEC    mounts DATASET[=DIR][:ro] in the serving process (`cairn mount`)
//!    snapshot [-r] DS@NAME…   takes snapshots in the serving process: `ok` or `error: …`
//!    destroy-snapshot DS@NAME destroys one: the bytes freed, or `error: …`
//!    diff FROM TO  `cairn diff` in the serving process, as JSON
//!    hold|release [-r] TAG DS@NAME…   user holds: `ok` or `error: …`
//!    snapshots     every snapshot (`cairn_objset::snapshot_ops::SnapshotInfo`) as JSON
//! ```

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use cairn_pool::Home;

/// Where the owner of `pool` listens.
pub fn socket_path(home: &Home, pool: &str) -> PathBuf {
    home.root().join("run").join(format!("{pool}.sock"))
}

/// Sends one request to the process holding `pool`; `None` when no process serves it.
pub fn ask(home: &Home, pool: &str, request: &str) -> Option<String> {
    let mut s = UnixStream::connect(socket_path(home, pool)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3600))).ok()?;
    writeln!(s, "{request}").ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    Some(answer)
}
