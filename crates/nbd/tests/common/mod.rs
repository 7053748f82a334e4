//! Helpers shared by the NBD integration tests: serving exports in-process and running the
//! real client tools (qemu-img, nbdinfo, nbdcopy, fio, nbdkit) as child processes.
#![allow(dead_code)]

use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use cairn_nbd::{BlockExport, ExportTable, NbdServer, RunningServer};

/// Debian package of each tool the tests run.
pub fn package_of(tool: &str) -> &'static str {
    match tool {
        "qemu-img" => "qemu-utils",
        "nbdinfo" | "nbdcopy" | "nbdfuse" => "libnbd-bin",
        "fio" => "fio",
        "nbdkit" => "nbdkit",
        _ => "coreutils",
    }
}

/// Fails the test (never skips) when a tool is missing, naming the package to install.
pub fn require(tool: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "'{tool}' is not installed: these tests need it; install the Debian package '{pkg}' (apt-get install {pkg})",
        pkg = package_of(tool)
    );
}

/// Runs a tool under `timeout` so a stuck server fails the test instead of hanging it.
pub fn run(tool: &str, args: &[&str]) -> Output {
    require(tool);
    let out = Command::new("timeout")
        .arg("120")
        .arg(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {tool}: {e}"));
    out
}

/// Runs a tool and asserts success; returns stdout.
pub fn run_ok(tool: &str, args: &[&str]) -> String {
    let out = run(tool, args);
    assert!(
        out.status.success(),
        "{tool} {args:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A server on a unix socket in a temporary directory.
pub struct Served {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub server: Option<RunningServer>,
}

impl Served {
    pub fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.socket.display())
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

pub fn table(exports: Vec<(&str, Arc<dyn BlockExport>)>) -> Arc<ExportTable> {
    let t = ExportTable::new();
    for (name, e) in exports {
        t.insert(name, e);
    }
    Arc::new(t)
}

/// Serves `exports` on a unix socket in a fresh temporary directory.
pub fn serve_unix(exports: Vec<(&str, Arc<dyn BlockExport>)>) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nbd.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let server = NbdServer::new(table(exports)).spawn_unix(listener);
    Served {
        dir,
        socket,
        server: Some(server),
    }
}

/// Serves `exports` on 127.0.0.1 (ephemeral port); returns the server and its port.
pub fn serve_tcp(exports: Vec<(&str, Arc<dyn BlockExport>)>) -> (RunningServer, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (NbdServer::new(table(exports)).spawn_tcp(listener), port)
}

/// Writes `len` random bytes to `path`.
pub fn random_file(path: &Path, len: usize) -> Vec<u8> {
    use rand::RngCore;
    let mut data = vec![0u8; len];
    rand::thread_rng().fill_bytes(&mut data);
    std::fs::write(path, &data).unwrap();
    data
}
