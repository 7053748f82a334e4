//! The control socket of a pool held by `cairn serve`: other `cairn` commands (status, list,
//! scrub) ask the process that owns the pool instead of opening it themselves (docs/design.md).
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

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_objset::scrub::ScrubControl;
use cairn_objset::Store;
use cairn_pool::status::{render_status_with, ListRow};
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

/// What the serving process offers besides the store.
pub struct Serving {
    /// It exits when its last mount is gone (started by `cairn mount`).
    pub until_unmounted: bool,
    pub mounts: Arc<crate::mount_table::MountTable>,
}

fn answer(home: &Home, store: &Store, serving: &Serving, request: &str) -> String {
    let pool = store.pool().name().to_string();
    match request.trim() {
        "mode" if serving.until_unmounted => {
            format!("until-unmounted {}\n", std::process::id())
        }
        "mode" => "service\n".into(),
        r if r.starts_with("mount ") => match serving.mounts.mount_spec(&r[6..]) {
            Ok(done) => format!("{done} (served by PID {})\n", std::process::id()),
            Err(e) => format!("error: {e}\n"),
        },
        r if r == "status" || r == "status -v" => {
            let scan = crate::data_cmds::scan_line(home, &pool);
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
        "scrub" => match store.scrub(None, Duration::from_secs(3600), &mut |_| ScrubControl::Continue) {
            Ok((p, _)) => format!(
                "scrub of '{pool}' repaired {} bytes, {} errors, {} blocks in {:.1} s (in the serving process)\n",
                p.repaired_bytes, p.errors, p.blocks, p.elapsed_secs
            ),
            Err(e) => format!("error: {e}\n"),
        },
        other => format!("error: unknown request '{other}'\n"),
    }
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
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)?;
    listener.set_nonblocking(true)?;
    Ok(std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((mut conn, _)) => {
                    let _ = conn.set_nonblocking(false);
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut line = String::new();
                    if BufReader::new(&mut conn).read_line(&mut line).is_ok() {
                        let reply = answer(&home, &store, &serving, &line);
                        let _ = conn.write_all(reply.as_bytes());
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        let _ = std::fs::remove_file(&path);
    }))
}
