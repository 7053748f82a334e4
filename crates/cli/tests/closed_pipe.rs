//! `cairn … | head`: a reader that closes its end early ends cairn as it ends coreutils —
//! by SIGPIPE, with nothing on standard error (issue 12: it used to panic).

mod support;

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

use support::{cairn, cairn_cmd, files, ok, MIB};

/// Runs `cairn ARGS` with standard output a pipe whose reading end is already closed.
fn run_into_closed_pipe(home: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = cairn_cmd(home)
        .args(args)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.signal(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_closed_pipe_ends_every_printing_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 128 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    ok(&cairn(&home, &["mkdir", "tank/a"]));
    for args in [
        vec!["plan", "--disks", "24x4TB"],
        vec!["ls", "tank"],
        vec!["labels", &d[0]],
        vec!["status", "tank"],
        vec!["list"],
        vec!["history", "tank"],
        vec!["iostat", "-v"],
        vec!["events"],
        vec!["tunables"],
    ] {
        let (signal, stderr) = run_into_closed_pipe(&home, &args);
        assert_eq!(signal, Some(libc::SIGPIPE), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?} printed: {stderr}");
    }
    // Nothing was lost on the way: the pool is as it was.
    assert!(ok(&cairn(&home, &["status", "tank"])).contains("ONLINE"));
}
