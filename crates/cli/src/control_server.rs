//! The serving side of the control socket (`crate::control` has the requests and the
//! client): a thread of `cairn serve` that answers each request from the open store.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_objset::scrub::ScrubControl;
use cairn_objset::Store;
use cairn_pool::status::{render_status_with, ListRow};
use cairn_pool::Home;

use crate::control::socket_path;

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
            let scan = crate::scrub_cmd::scan_line(home, &pool);
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
