//! The control socket of a pool held by `cairn serve`: other `cairn` commands (status, list,
//! iostat) ask the process that owns the pool instead of opening it themselves (docs/design.md).
//! This module is the client side (`ask`, `exec`); the serving side is `crate::control_server`.
//!
//! ```text
//!  $CAIRN_HOME/run/POOL.sock   one request line → the answer as text, then close
//!    status [-v]   the rendered `status`
//!    list          one `list` row as JSON
//!    iostat        the pool's I/O since import (`cairn_pool::iostat::PoolIo`) as JSON
//!    mode          `service`, or `until-unmounted PID` for a process that serves mounts
//!                  only and exits when the last is unmounted
//!    mount SPEC    mounts DATASET[=DIR][:ro] in the serving process (`cairn mount`)
//!    snapshot [-r] DS@NAME…   takes snapshots in the serving process: `ok` or `error: …`
//!    destroy-snapshot DS@NAME destroys one: the bytes freed, or `error: …`
//!    diff FROM TO  `cairn diff` in the serving process, as JSON
//!    hold|release [-r] TAG DS@NAME…   user holds: `ok` or `error: …`
//!    snapshots     every snapshot (`cairn_objset::snapshot_ops::SnapshotInfo`) as JSON
//!    status-json   the pool's entry of `status --json`
//!    history [-l]  the rendered `history` of the pool
//!    exec {"argv":[…],"cwd":"…"}   runs a `cairn` command line in the serving process
//!                  (`crate::served`) with the client's standard input, output and error
//!                  passed along as descriptors (SCM_RIGHTS); answers `exit CODE`
//! ```
//!
//! Every connection is answered on a thread of its own (at most `MAX_CLIENTS` at once; more
//! are told to retry), so a long scrub or `cat` does not hold up a `status`.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use cairn_pool::Home;

/// Where the owner of `pool` listens.
pub fn socket_path(home: &Home, pool: &str) -> PathBuf {
    home.root().join("run").join(format!("{pool}.sock"))
}

/// Sends one request to the process holding `pool`; `None` when no process serves it.
/// Every answer ends with a newline: none at all (the service was killed or stopped
/// before it answered) comes back as an `error: ` answer, never as an empty success.
pub fn ask(home: &Home, pool: &str, request: &str) -> Option<String> {
    let mut s = UnixStream::connect(socket_path(home, pool)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3600))).ok()?;
    writeln!(s, "{request}").ok()?;
    let mut answer = String::new();
    let read = s.read_to_string(&mut answer);
    if read.is_err() || answer.is_empty() {
        return Some(format!(
            "error: the process serving '{pool}' ended before the command finished; see `cairn status {pool}` and retry\n"
        ));
    }
    Some(answer)
}

#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct ExecRequest {
    pub argv: Vec<String>,
    pub cwd: PathBuf,
}

/// Room for the control message of up to 3 descriptors.
pub(crate) const CMSG_SPACE: usize = 64;

fn send_with_fds(conn: &UnixStream, data: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut control = [0u64; CMSG_SPACE / 8];
    // SAFETY: as in `recv_with_fds`; the control buffer has room for 3 descriptors.
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        let bytes = std::mem::size_of_val(fds) as u32;
        msg.msg_controllen = libc::CMSG_SPACE(bytes) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(bytes) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<RawFd>(),
            fds.len(),
        );
        libc::sendmsg(conn.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    if sent < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let rest = &data[sent as usize..];
    (&*conn).write_all(rest)
}

/// Runs `argv` (this command line without the program name) in the process that serves
/// `pool`, with this process's standard streams; its exit code, or `None` when no process
/// serves the pool.
pub fn exec(home: &Home, pool: &str, argv: &[String]) -> Option<i32> {
    let conn = UnixStream::connect(socket_path(home, pool)).ok()?;
    let request = ExecRequest {
        argv: argv.to_vec(),
        cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
    };
    let line = format!("exec {}\n", serde_json::to_string(&request).ok()?);
    if let Err(e) = send_with_fds(&conn, line.as_bytes(), &[0, 1, 2]) {
        eprintln!("cairn: cannot reach the process serving '{pool}': {e}");
        return Some(1);
    }
    let mut answer = String::new();
    let _ = (&conn).read_to_string(&mut answer);
    match answer
        .trim()
        .strip_prefix("exit ")
        .and_then(|c| c.parse().ok())
    {
        Some(code) => Some(code),
        None if answer.starts_with("error: unknown request") => {
            eprintln!("cairn: the process serving '{pool}' is an older cairn that cannot run this command; stop it (`kill` its PID) and retry");
            Some(1)
        }
        None if answer.trim().is_empty() => {
            eprintln!("cairn: the process serving '{pool}' ended before the command finished; see `cairn status {pool}` and retry");
            Some(1)
        }
        None => {
            eprintln!("cairn: {}", answer.trim());
            Some(1)
        }
    }
}

/// Asks the process serving `pool` (if one does) to end so that this process can export or
/// destroy the pool, and waits until it has let the pool go. `Ok` also when no process
/// serves it.
pub fn release(home: &Home, pool: &str, force: bool) -> Result<(), String> {
    let request = if force { "release -f" } else { "release" };
    let Some(answer) = ask(home, pool, request) else {
        return Ok(());
    };
    let answer = answer.trim();
    let Some(pid) = answer
        .strip_prefix("released ")
        .and_then(|p| p.parse::<i32>().ok())
    else {
        return Err(answer.strip_prefix("error: ").unwrap_or(answer).to_string());
    };
    let start = std::time::Instant::now();
    while !has_exited(pid) {
        if start.elapsed() > RELEASE_WAIT {
            return Err(format!(
                "the process serving '{pool}' (PID {pid}) is still syncing after {} s; retry when it has ended",
                RELEASE_WAIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// How long `release` waits for the service to sync and close the pool.
const RELEASE_WAIT: Duration = Duration::from_secs(300);

/// Whether process `pid` has ended (gone, or a zombie its parent has not reaped yet).
fn has_exited(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
        Err(_) => true,
    }
}
