//! A pool served by `cairn serve` for a test, and numbered files to write through it and
//! check afterwards.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::{cairn, cairn_cmd, ok, pseudo_random, MIB};

pub struct Served {
    pub child: Child,
    pub socket: PathBuf,
}

pub fn serve(home: &Path, pool: &str) -> Served {
    serve_with(home, pool, &[])
}

/// `serve`, with environment variables for the service (tunables such as
/// `CAIRN_RESILVER_RATE`).
pub fn serve_with(home: &Path, pool: &str, env: &[(&str, &str)]) -> Served {
    let socket = home.join("run").join(format!("{pool}.sock"));
    let child = cairn_cmd(home)
        .envs(env.iter().copied())
        .args(["serve", "--sync-interval", "0.5", "--duration", "300", pool])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_socket(&socket);
    Served { child, socket }
}

/// Waits (up to 30 s) until a service answers on its control socket.
pub fn wait_for_socket(socket: &Path) {
    let start = Instant::now();
    while UnixStream::connect(socket).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "serve did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Served {
    pub fn stop(mut self) {
        // SAFETY: sending SIGTERM to our own child process.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        assert!(self.child.wait().unwrap().success(), "serve failed");
        assert!(!self.socket.exists());
    }
    pub fn ask(&self, request: &[u8]) -> String {
        use std::io::Read;
        let mut s = UnixStream::connect(&self.socket).unwrap();
        s.write_all(request).unwrap();
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer
    }
}

/// Puts `tank/f{i}`: 1 MiB and `i` pages of bytes made from `i`.
pub fn put_numbered(home: &Path, dir: &Path, i: usize) {
    let src = dir.join(format!("src{i}"));
    std::fs::write(&src, pseudo_random(MIB as usize + i * 4096, i as u64)).unwrap();
    ok(&cairn(
        home,
        &["put", src.to_str().unwrap(), &format!("tank/f{i}")],
    ));
}

/// `tank/f0` … `tank/f{n-1}` read back as `put_numbered` wrote them.
pub fn check_numbered(home: &Path, n: usize) {
    for i in 0..n {
        let got = cairn(home, &["cat", &format!("tank/f{i}")]);
        assert_eq!(
            got.stdout,
            pseudo_random(MIB as usize + i * 4096, i as u64),
            "f{i}"
        );
    }
}

/// A scrub of `tank` repairs nothing and finds no error.
pub fn scrub_is_clean(home: &Path) {
    let scrub = ok(&cairn(home, &["scrub", "tank"]));
    assert!(
        scrub.contains("repaired 0") && scrub.contains(" 0 errors"),
        "{scrub}"
    );
}

/// Runs `cairn ARGS` (which must succeed; its output is returned) while another thread
/// puts `tank/f{i}` for every `i` in `files`, starting `head_start` before it.
pub fn while_putting(
    home: &Path,
    dir: &Path,
    files: std::ops::Range<usize>,
    head_start: Duration,
    args: &[&str],
) -> String {
    std::thread::scope(|s| {
        let w = s.spawn(|| files.for_each(|i| put_numbered(home, dir, i)));
        std::thread::sleep(head_start);
        let out = ok(&cairn(home, args));
        w.join().unwrap();
        out
    })
}

/// Starts `cairn ARGS` (a scrub or resilver that runs a while) and returns once `status`
/// of `tank` says `status_says`, within 20 s; the command's output is piped.
pub fn start_and_wait_for(home: &Path, args: &[&str], status_says: &str) -> Child {
    let child = cairn_cmd(home)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !ok(&cairn(home, &["status", "tank"])).contains(status_says) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "`cairn {}` never got to '{status_says}'",
            args.join(" ")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// Waits (up to 60 s) until `done` holds for `status` of `tank` (`what` says what is
/// awaited); returns that status.
pub fn status_when(home: &std::path::Path, what: &str, done: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let st = ok(&cairn(home, &["status", "tank"]));
        if done(&st) {
            return st;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no {what}: {st}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Exports `tank` (the service stopped) and imports it again from the files in `dir`.
pub fn export_and_import(home: &std::path::Path, dir: &std::path::Path) {
    ok(&cairn(home, &["export", "tank"]));
    ok(&cairn(
        home,
        &["import", "-d", dir.to_str().unwrap(), "tank"],
    ));
}
