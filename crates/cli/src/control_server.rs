//! The serving side of the control socket (`crate::control` has the requests and the
//! client): a thread of `cairn serve` that answers each request from the open store.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_objset::Store;
use cairn_pool::status::{render_status_with, ListRow};
use cairn_pool::Home;

use crate::control::{socket_path, ExecRequest, CMSG_SPACE};

/// What the serving process offers besides the store.
pub struct Serving {
    /// It exits when its last mount is gone (started by `cairn mount`).
    pub until_unmounted: bool,
    pub mounts: Arc<crate::mount_table::MountTable>,
    /// NBD clients connected now (an export or destroy of the pool waits for none).
    pub nbd_clients: Box<dyn Fn() -> usize + Send + Sync>,
    /// Set to end the service (`release`).
    pub stop: &'static AtomicBool,
}

fn answer(store: &Store, serving: &Serving, request: &str) -> String {
    let pool = store.pool().name().to_string();
    match request.trim() {
        r if r == "history" || r == "history -l" => {
            crate::history_cmd::render_all(store, &pool, r.ends_with("-l"))
                .unwrap_or_else(|e| format!("error: {e}\n"))
        }
        "status-json" => {
            let errors = crate::data_cmds::data_errors(store.error_log());
            serde_json::to_string(&crate::pool_cmds::status_value(store.pool(), &errors))
                .unwrap_or_default()
        }
        "mode" if serving.until_unmounted => {
            format!("until-unmounted {}\n", std::process::id())
        }
        "mode" => "service\n".into(),
        "release" => release(&pool, serving, false),
        "release -f" => release(&pool, serving, true),
        r if r.starts_with("mount ") => match serving.mounts.mount_spec(&r[6..]) {
            Ok(done) => format!("{done} (served by PID {})\n", std::process::id()),
            Err(e) => format!("error: {e}\n"),
        },
        r if r == "status" || r == "status -v" => {
            let scan = crate::scrub_cmd::scan_line(store.pool());
            let errors = crate::data_cmds::data_errors(store.error_log());
            render_status_with(store.pool(), r.ends_with("-v"), scan.as_deref(), &errors)
        }
        r if r.starts_with("snapshot ")
            || r.starts_with("destroy-snapshot ")
            || r.starts_with("diff ")
            || r.starts_with("hold ")
            || r.starts_with("release ") =>
        {
            crate::snapshot_cmds::serve_request(store, r)
        }
        "snapshots" => store
            .snapshots(None)
            .map(|s| serde_json::to_string(&s).unwrap_or_default())
            .unwrap_or_else(|e| format!("error: {e}\n")),
        "iostat" => serde_json::to_string(&store.pool().io_snapshot()).unwrap_or_default(),
        "list" => {
            let usage = store.space();
            let row = ListRow::with_usage(store.pool(), usage.alloc, usage.used);
            serde_json::to_string(&row).unwrap_or_default()
        }
        other => format!("error: unknown request '{other}'\n"),
    }
}

/// Ends the service so that `cairn export` or `destroy` can take the pool: refused while
/// NBD clients are connected or a mount is in use, unless forced (as `zpool export -f`,
/// which unmounts what is busy). Answers `released PID`; the service then unmounts, syncs,
/// closes the pool and exits.
fn release(pool: &str, serving: &Serving, force: bool) -> String {
    let clients = (serving.nbd_clients)();
    if clients > 0 && !force {
        return format!(
            "error: pool '{pool}' is busy: {clients} NBD client(s) are connected to its volumes; disconnect them, or use -f to drop them\n"
        );
    }
    if let Err(e) = serving.mounts.unmount_all(force) {
        return format!("error: {e}\n");
    }
    serving.stop.store(true, Ordering::SeqCst);
    format!("released {}\n", std::process::id())
}

/// Serves control requests until `stop`; removes the socket afterwards.
pub fn spawn(
    home: Home,
    store: Arc<Store>,
    serving: Serving,
    stop: &'static AtomicBool,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let path = socket_path(&home, store.pool().name());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Private: only this user (and root) may reach the service, which runs commands.
    {
        use std::os::unix::fs::PermissionsExt;
        if let Some(dir) = path.parent() {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    listener.set_nonblocking(true)?;
    let serving = Arc::new(serving);
    let clients = Arc::new(AtomicUsize::new(0));
    Ok(std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((mut conn, _)) => {
                    let _ = conn.set_nonblocking(false);
                    if clients.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
                        clients.fetch_sub(1, Ordering::SeqCst);
                        let _ = conn.write_all(b"error: the service is busy, retry\n");
                        continue;
                    }
                    let (store, serving, clients) =
                        (store.clone(), serving.clone(), clients.clone());
                    let spawned = std::thread::Builder::new()
                        .name("cairn-control".into())
                        .spawn(move || {
                            serve_one(&store, &serving, conn);
                            clients.fetch_sub(1, Ordering::SeqCst);
                        });
                    if spawned.is_err() {
                        // (the closure, and with it the connection, is dropped: the client
                        // sees the socket closed and reports it)
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        let _ = std::fs::remove_file(&path);
    }))
}

/// Connections answered at once.
const MAX_CLIENTS: usize = 64;
/// The longest request line.
const MAX_REQUEST: usize = 1 << 20;

/// Reads one request and answers it; never panics on what a client sends.
fn serve_one(store: &Arc<Store>, serving: &Serving, mut conn: UnixStream) {
    if let Err(e) = check_peer(&conn) {
        let _ = writeln!(conn, "error: {e}");
        return;
    }
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let (line, fds) = match recv_request(&conn) {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(conn, "error: {e}");
            return;
        }
    };
    let reply = if let Some(json) = line.trim().strip_prefix("exec ") {
        let code = exec_request(store, serving, json, fds, &conn);
        format!("exit {code}\n")
    } else {
        let request = line.clone();
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            answer(store, serving, &request)
        }));
        run.unwrap_or_else(|_| "error: the service failed to answer (see its log)\n".into())
    };
    let _ = conn.write_all(reply.as_bytes());
}

/// Runs a command line for a client; its exit code.
fn exec_request(
    store: &Arc<Store>,
    serving: &Serving,
    json: &str,
    fds: Vec<File>,
    conn: &UnixStream,
) -> i32 {
    let _ = conn.set_read_timeout(None);
    let req: ExecRequest = match serde_json::from_str(json) {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(&*conn, "error: bad exec request: {e}");
            return 2;
        }
    };
    let [stdin, stdout, stderr]: [File; 3] = match fds.try_into() {
        Ok(f) => f,
        Err(_) => {
            let _ = writeln!(&*conn, "error: exec needs standard input, output and error");
            return 2;
        }
    };
    // Relative paths in the command are the client's: this thread takes a working
    // directory of its own (CLONE_FS) and moves to the client's.
    // SAFETY: unshare(CLONE_FS) only detaches this thread's fs attributes (cwd, umask).
    if unsafe { libc::unshare(libc::CLONE_FS) } != 0 || std::env::set_current_dir(&req.cwd).is_err()
    {
        let _ = writeln!(
            &stderr,
            "cairn: the service cannot use the working directory {}; give absolute paths",
            req.cwd.display()
        );
        return 1;
    }
    let ctx = crate::served::Ctx {
        pool: store.pool().name().to_string(),
        store: store.clone(),
        stdin,
        stdout,
        stderr,
        mounted: serving.mounts.mounted(),
        mounts: serving.mounts.clone(),
    };
    crate::served::with_ctx(ctx, || {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::run_served(store, &req.argv)
        })) {
            Ok(code) => code,
            Err(p) if p.is::<crate::served::ClosedOutput>() => 141,
            Err(_) => {
                errln!("cairn: the service failed running the command (see its log)");
                1
            }
        }
    })
}

/// Only root and the user the service runs as may use it (SO_PEERCRED).
fn check_peer(conn: &UnixStream) -> Result<(), String> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let r = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if r != 0 {
        return Err("cannot tell who is asking (SO_PEERCRED failed)".into());
    }
    if cred.uid != 0 && cred.uid != me {
        return Err(format!(
            "user {} may not use this service (it runs as user {me}); run cairn as that user or root",
            cred.uid
        ));
    }
    Ok(())
}

/// Reads one request line with the descriptors passed along with it.
fn recv_request(conn: &UnixStream) -> Result<(String, Vec<File>), String> {
    let mut data = Vec::new();
    let mut fds = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = recv_with_fds(conn, &mut buf, &mut fds)
            .map_err(|e| format!("reading the request: {e}"))?;
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
        if data.contains(&b'\n') {
            break;
        }
        if data.len() > MAX_REQUEST {
            return Err("request too long".into());
        }
    }
    let end = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let line = String::from_utf8(data[..end].to_vec())
        .map_err(|_| "the request is not UTF-8".to_string())?;
    Ok((line, fds))
}

fn recv_with_fds(conn: &UnixStream, buf: &mut [u8], fds: &mut Vec<File>) -> std::io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; CMSG_SPACE / 8];
    // SAFETY: msghdr is plain data; every pointer set below outlives the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_SPACE as _;
    // SAFETY: recvmsg writes at most iov_len bytes and msg_controllen control bytes.
    let n = unsafe { libc::recvmsg(conn.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the CMSG_* macros walk the control buffer the kernel just filled.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let len = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    fds.push(File::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(n as usize)
}
