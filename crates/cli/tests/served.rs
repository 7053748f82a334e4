//! Commands against a pool that `cairn serve` holds: they run in the serving process (over
//! its control socket) with the same output and exit codes as in-process (issue 14).

mod support;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use support::served::{
    check_numbered, put_numbered, scrub_is_clean, serve, start_and_wait_for, wait_for_socket,
    while_putting,
};
use support::{
    cairn, cairn_cmd, fails, files, ok, ok_bytes, paused_then_canceled, pseudo_random, MIB,
};

/// Exit code, standard output and standard error, `txg` numbers blanked (a served pool may
/// have synced more often).
fn seen(out: &Output) -> (Option<i32>, String, String) {
    let blank = |b: &[u8]| {
        let text = String::from_utf8_lossy(b).into_owned();
        let mut v: serde_json::Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(_) => return text,
        };
        if let Some(pools) = v.get_mut("pools").and_then(|p| p.as_array_mut()) {
            for p in pools {
                p["txg"] = serde_json::Value::Null;
            }
        }
        v.to_string()
    };
    (out.status.code(), blank(&out.stdout), blank(&out.stderr))
}

/// A pool with files, a dataset and a volume.
fn pool_with_data(dir: &Path) -> PathBuf {
    let home = dir.join("home");
    let d = files(dir, 3, 128 * MIB);
    ok(&cairn(
        &home,
        &["create", "tank", "raidz1", &d[0], &d[1], &d[2]],
    ));
    ok(&cairn(&home, &["dataset", "create", "tank/docs"]));
    ok(&cairn(&home, &["set", "compression=zstd", "tank/docs"]));
    ok(&cairn(&home, &["volume", "create", "-V", "8M", "tank/vol"]));
    let src = dir.join("big");
    std::fs::write(&src, pseudo_random(3 * MIB as usize, 7)).unwrap();
    ok(&cairn(
        &home,
        &["put", src.to_str().unwrap(), "tank/docs/big"],
    ));
    ok(&cairn(&home, &["mkdir", "tank/docs/sub"]));
    home
}

#[test]
fn every_everyday_command_gives_the_same_output_and_exit_code_served_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let home = pool_with_data(dir.path());
    let commands: Vec<Vec<&str>> = vec![
        vec!["ls", "tank/docs"],
        vec!["ls", "-p", "--json", "tank/docs"],
        vec!["cat", "tank/docs/big"],
        vec!["get", "tank/docs/big", "-"],
        vec!["dataset", "list", "tank"],
        vec!["dataset", "list", "-H", "-p", "tank"],
        vec!["list", "-t", "all", "tank"],
        vec!["list", "-t", "filesystem", "-H", "tank"],
        vec!["list", "-t", "snapshot", "tank/docs"],
        vec!["get", "all", "tank/docs"],
        vec!["get", "-H", "compression,recordsize", "tank/docs"],
        vec!["get", "--json", "readpolicy", "tank"],
        vec!["get", "-p", "all", "tank"],
        vec!["status", "--json", "tank"],
        vec!["status", "tank"],
        vec!["history", "tank"],
        // Errors: the same message and exit code.
        vec!["cat", "tank/docs/missing"],
        vec!["ls", "tank/nope"],
        vec!["get", "nosuchprop", "tank/docs"],
        vec!["dataset", "create", "tank/docs"],
        vec!["rm", "tank/docs/sub/none"],
        vec!["put", "/nonexistent/file", "tank/docs/x"],
    ];
    let run_all = || -> Vec<_> {
        commands
            .iter()
            .map(|c| (c.clone(), seen(&cairn(&home, c))))
            .collect()
    };
    let alone = run_all();
    let served = serve(&home, "tank");
    let through = run_all();
    for ((cmd, a), (_, b)) in alone.iter().zip(&through) {
        assert_eq!(a, b, "cairn {cmd:?}: in-process vs served");
    }
    let cat = cairn(&home, &["cat", "tank/docs/big"]);
    assert_eq!(cat.stdout, pseudo_random(3 * MIB as usize, 7));
    let missing = alone
        .iter()
        .find(|(c, _)| c[1] == "tank/docs/missing")
        .unwrap();
    assert_eq!(missing.1 .0, Some(1));
    assert!(missing.1 .2.contains("no such file"), "{:?}", missing.1);
    served.stop();
}

/// `cat` and `get … -` of a path in a snapshot write to the client's standard output when
/// served (they wrote to the service's own, and the client got nothing with exit 0).
#[test]
fn cat_of_a_snapshot_path_reaches_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let home = pool_with_data(dir.path());
    ok(&cairn(&home, &["snapshot", "tank/docs@s"]));
    ok(&cairn(&home, &["rm", "tank/docs/big"]));
    let commands = [
        vec!["cat", "tank/docs@s/big"],
        vec!["get", "tank/docs@s/big", "-"],
    ];
    let alone: Vec<_> = commands.iter().map(|c| seen(&cairn(&home, c))).collect();
    let served = serve(&home, "tank");
    for (c, a) in commands.iter().zip(&alone) {
        let out = cairn(&home, c);
        assert!(
            out.stdout == pseudo_random(3 * MIB as usize, 7),
            "cairn {c:?} served"
        );
        assert_eq!(&seen(&out), a, "cairn {c:?}: in-process vs served");
    }
    served.stop();
}

/// A service that ends (kill -9) before it answers: the client fails and says so, for a
/// snapshot request as for a command run in the service (a snapshot took the empty answer
/// for success and exited 0).
#[test]
fn a_service_that_dies_before_answering_fails_the_command() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let home = pool_with_data(dir.path());
    std::fs::create_dir_all(home.join("run")).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(home.join("run/tank.sock")).unwrap();
    let dying = std::thread::spawn(move || {
        // snapshot; destroy (asks the mode, then the snapshots); mkdir.
        for _ in 0..4 {
            let (mut conn, _) = listener.accept().unwrap();
            let mut line = [0u8; 1];
            while conn.read(&mut line).unwrap_or(0) == 1 && line[0] != b'\n' {}
            drop(conn); // gone without a word
        }
    });
    for c in [
        vec!["snapshot", "tank/docs@x"],
        vec!["destroy", "tank/docs@x"],
        vec!["mkdir", "tank/docs/x"],
    ] {
        let e = fails(&cairn(&home, &c));
        assert!(
            e.contains("ended before the command finished"),
            "{c:?}: {e}"
        );
    }
    dying.join().unwrap();
}

#[test]
fn changes_made_through_the_service_are_committed_and_in_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let home = pool_with_data(dir.path());
    let served = serve(&home, "tank");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("local"), b"relative paths are the client's\n").unwrap();
    let in_work = |args: &[&str]| {
        cairn_cmd(&home)
            .current_dir(&work)
            .args(args)
            .output()
            .unwrap()
    };
    // Relative paths are resolved in the client's working directory.
    ok(&in_work(&["put", "local", "tank/docs/"]));
    ok(&in_work(&["get", "tank/docs/local", "back"]));
    assert_eq!(
        std::fs::read(work.join("back")).unwrap(),
        b"relative paths are the client's\n"
    );
    // Standard input goes along.
    let mut put = cairn_cmd(&home)
        .args(["put", "-", "tank/docs/stdin"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    put.stdin
        .take()
        .unwrap()
        .write_all(&pseudo_random(MIB as usize, 3))
        .unwrap();
    assert!(put.wait().unwrap().success());
    ok(&cairn(&home, &["mkdir", "tank/docs/a/b"]));
    ok(&cairn(&home, &["rm", "tank/docs/big"]));
    ok(&cairn(&home, &["dataset", "create", "tank/media"]));
    ok(&cairn(
        &home,
        &["volume", "create", "-V", "4M", "tank/vol2"],
    ));
    ok(&cairn(&home, &["set", "recordsize=64K", "tank/media"]));
    ok(&cairn(&home, &["dataset", "create", "tank/tmp"]));
    ok(&cairn(&home, &["destroy", "tank/tmp"]));
    let scrub = ok(&cairn(&home, &["scrub", "tank"]));
    assert!(
        scrub.starts_with("scrub of 'tank' repaired 0B (0 bytes), 0 errors"),
        "{scrub}"
    );
    // Its events reach `cairn events` while the service runs.
    let start = Instant::now();
    loop {
        let events = ok(&cairn(&home, &["events", "-H", "tank"]));
        if events.contains("scrub_finish") {
            assert!(events.contains("scrub_start"), "{events}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no scrub events: {events}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A device the service holds is refused to another pool, with what to do.
    let d0 = dir.path().join("d0");
    let e = fails(&cairn(
        &home,
        &["create", "-f", "other", d0.to_str().unwrap()],
    ));
    assert!(
        e.contains("in use by another process") && e.contains("stop that process"),
        "{e}"
    );
    // A device command the service cannot do names the device.
    let e = fails(&cairn(&home, &["detach", "tank", "x"]));
    assert!(e.contains("cannot find 'x'"), "{e}");
    // Pool properties change in the service, in force at once and in the labels.
    ok(&cairn(&home, &["set", "readpolicy=md", "tank"]));
    ok(&cairn(&home, &["set", "comment=served", "tank"]));
    let got = ok(&cairn(&home, &["get", "-H", "readpolicy,comment", "tank"]));
    assert!(
        got.contains("tank\treadpolicy\tmd\tlocal") && got.contains("tank\tcomment\tserved\tlocal"),
        "{got}"
    );
    let e = fails(&cairn(&home, &["set", "readpolicy=fast", "tank"]));
    assert!(e.contains("valid values are auto"), "{e}");
    let history = ok(&cairn(&home, &["history", "tank"]));
    // kill -9: everything acknowledged was synced before the command answered.
    let mut served = served;
    served.child.kill().unwrap();
    served.child.wait().unwrap();
    let _ = std::fs::remove_file(&served.socket);
    let ls = ok(&cairn(&home, &["ls", "tank/docs"]));
    for name in ["local", "stdin", "a/"] {
        assert!(ls.contains(name), "{name} missing: {ls}");
    }
    assert!(!ls.contains("big"), "{ls}");
    assert_eq!(
        ok(&cairn(&home, &["get", "-H", "recordsize", "tank/media"])),
        "tank/media\trecordsize\t64K\tlocal\n"
    );
    let datasets = ok(&cairn(&home, &["dataset", "list", "-H", "tank"]));
    assert!(
        datasets.contains("tank/vol2") && !datasets.contains("tank/tmp"),
        "{datasets}"
    );
    let got = ok(&cairn(&home, &["get", "-H", "readpolicy,comment", "tank"]));
    assert!(
        got.contains("\tmd\t") && got.contains("\tserved\t"),
        "{got}"
    );
    for cmd in [
        "cairn dataset create tank/media",
        "cairn volume create -V 4M tank/vol2",
        "cairn set recordsize=64K tank/media",
        "cairn destroy tank/tmp",
        "cairn scrub tank",
    ] {
        assert!(history.contains(cmd), "{cmd} not in {history}");
    }
    assert!(!history.contains("cairn put"), "{history}");
    assert!(ok(&cairn(&home, &["scrub", "tank"])).contains("0 errors"));
}

#[test]
fn concurrent_clients_are_served_concurrently_and_correctly() {
    let dir = tempfile::tempdir().unwrap();
    let home = pool_with_data(dir.path());
    let served = serve(&home, "tank");
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let home = home.clone();
            let dir = dir.path().to_path_buf();
            std::thread::spawn(move || {
                for i in 0..12u64 {
                    let data = pseudo_random(64 << 10, t * 100 + i);
                    let src = dir.join(format!("src-{t}-{i}"));
                    std::fs::write(&src, &data).unwrap();
                    let name = format!("tank/docs/t{t}-{i}");
                    ok(&cairn(&home, &["put", src.to_str().unwrap(), &name]));
                    let back = cairn(&home, &["cat", &name]);
                    assert!(back.status.success());
                    assert!(back.stdout == data, "{name} read back differs");
                    if i % 3 == 0 {
                        ok(&cairn(&home, &["rm", &name]));
                    }
                }
            })
        })
        .collect();
    // A status meanwhile is answered while the others run.
    assert!(ok(&cairn(&home, &["status", "tank"])).contains("ONLINE"));
    for t in threads {
        t.join().unwrap();
    }
    served.stop();
    let ls = ok(&cairn(&home, &["ls", "tank/docs"]));
    for t in 0..4 {
        for i in 0..12 {
            assert_eq!(
                ls.contains(&format!("t{t}-{i}\n")),
                i % 3 != 0,
                "t{t}-{i}: {ls}"
            );
        }
    }
}

#[test]
fn malformed_requests_and_closed_pipes_do_not_hurt_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let home = pool_with_data(dir.path());
    let served = serve(&home, "tank");
    assert!(served
        .ask(b"nonsense\n")
        .starts_with("error: unknown request"));
    assert!(served
        .ask(b"exec {not json\n")
        .starts_with("error: bad exec request"));
    assert!(served
        .ask(b"exec {\"argv\":[\"ls\",\"tank\"],\"cwd\":\"/\"}\n")
        .starts_with("error: exec needs standard input, output and error"));
    assert!(served.ask(&[0xff, 0xfe, b'\n']).starts_with("error:"));
    assert!(served.ask(b"").starts_with("error: unknown request"));
    // An `ls` whose reader is gone ends by SIGPIPE as in-process, quietly.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = cairn_cmd(&home)
        .args(["ls", "tank/docs"])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The service still answers.
    assert!(ok(&cairn(&home, &["ls", "tank/docs"])).contains("big"));
    served.stop();
}

/// The systemd unit's command line serves every imported pool, one process each, and
/// stops them all on SIGTERM.
#[test]
fn the_systemd_unit_serves_every_imported_pool() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../contrib/cairn.service"
    ))
    .unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let mut words = exec.split_whitespace();
    assert!(words.next().unwrap().ends_with("/cairn"), "{exec}");
    let args: Vec<&str> = words.collect();
    assert_eq!(args, ["serve", "--all"]);

    let dir = tempfile::tempdir().unwrap();
    let home = pool_with_data(dir.path());
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let d = files(&other, 2, 64 * MIB);
    ok(&cairn(&home, &["create", "second", "mirror", &d[0], &d[1]]));
    let mut service = cairn_cmd(&home)
        .args(&args)
        .args(["--duration", "300"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    for pool in ["tank", "second"] {
        let socket = home.join("run").join(format!("{pool}.sock"));
        while UnixStream::connect(&socket).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{pool} not served"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    ok(&cairn(&home, &["mkdir", "second/served"]));
    assert!(ok(&cairn(&home, &["ls", "tank/docs"])).contains("big"));
    // Exporting one pool ends its process only; the other pool stays served.
    ok(&cairn(&home, &["export", "second"]));
    assert!(ok(&cairn(&home, &["ls", "tank/docs"])).contains("big"));
    assert!(UnixStream::connect(home.join("run/tank.sock")).is_ok());
    // SAFETY: sending SIGTERM to our own child process.
    unsafe { libc::kill(service.id() as i32, libc::SIGTERM) };
    assert!(service.wait().unwrap().success());
    ok(&cairn(
        &home,
        &["import", "-d", other.to_str().unwrap(), "second"],
    ));
    assert!(ok(&cairn(&home, &["ls", "second"])).contains("served/"));
    let e = fails(&cairn(&home, &["serve", "--all", "--nbd", "127.0.0.1:0"]));
    assert!(e.contains("one process per pool"), "{e}");
}

/// The control socket is private (0600 in a 0700 directory), and a user other than the
/// service's (and root) who reaches it anyway is refused (SO_PEERCRED).
#[test]
fn another_user_cannot_use_the_service() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/usr/bin/setpriv").exists() {
        eprintln!("skipped: needs root and setpriv to act as another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = pool_with_data(dir.path());
    let served = serve(&home, "tank");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&served.socket), 0o600);
    assert_eq!(mode(served.socket.parent().unwrap()), 0o700);
    let nobody = |args: &[&str]| {
        std::process::Command::new("/usr/bin/setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_cairn"))
            .args(args)
            .env("CAIRN_HOME", &home)
            .output()
            .unwrap()
    };
    // As it is: the user cannot even reach the state directory.
    fails(&nobody(&["mkdir", "tank/docs/by-nobody"]));
    // Opened up by mistake: the service itself refuses the user.
    for p in [
        dir.path(),
        &home,
        served.socket.parent().unwrap(),
        &served.socket,
    ] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let e = fails(&nobody(&["mkdir", "tank/docs/by-nobody"]));
    assert!(e.contains("may not use this service"), "{e}");
    assert!(!ok(&cairn(&home, &["ls", "tank/docs"])).contains("by-nobody"));
    served.stop();
}

/// Scrubs read data blocks outside the store lock while writers overwrite files (freeing
/// and reusing blocks, syncing after every put): every scrub finds nothing wrong and the
/// data reads back.
#[test]
fn scrubs_beside_overwriting_writers_find_nothing_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let home = pool_with_data(dir.path());
    let served = serve(&home, "tank");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..2u64)
        .map(|t| {
            let (home, dir, stop) = (home.clone(), dir.path().to_path_buf(), stop.clone());
            std::thread::spawn(move || {
                let mut round = 0u64;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let src = dir.join(format!("w{t}"));
                    std::fs::write(&src, pseudo_random(2 * MIB as usize, t * 1000 + round))
                        .unwrap();
                    let dest = format!("tank/docs/w{t}");
                    ok(&cairn(&home, &["put", "-f", src.to_str().unwrap(), &dest]));
                    round += 1;
                }
                round
            })
        })
        .collect();
    for _ in 0..6 {
        let out = ok(&cairn(&home, &["scrub", "tank"]));
        assert!(out.contains(", 0 errors"), "{out}");
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let rounds: Vec<u64> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    served.stop();
    for (t, &n) in rounds.iter().enumerate() {
        let back = cairn(&home, &["cat", &format!("tank/docs/w{t}")]);
        assert_eq!(
            back.stdout,
            pseudo_random(2 * MIB as usize, t as u64 * 1000 + n - 1)
        );
    }
    let out = ok(&cairn(&home, &["scrub", "tank"]));
    assert!(out.contains("repaired 0B (0 bytes), 0 errors"), "{out}");
}

/// `cairn resilver -w` against a served pool waits for the service's own background
/// resilver and reports it as an in-process resilver does.
#[test]
fn resilver_waits_for_the_service_resilvering_a_spare() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 3, 128 * MIB);
    ok(&cairn(
        &home,
        &["create", "tank", "mirror", &d[0], &d[1], "spare", &d[2]],
    ));
    let src = dir.path().join("data");
    std::fs::write(&src, pseudo_random(16 * MIB as usize, 4)).unwrap();
    ok(&cairn(&home, &["put", src.to_str().unwrap(), "tank/data"]));
    // d0 is gone: the spare takes its slot and needs a resilver.
    std::fs::rename(&d[0], dir.path().join("d0.away")).unwrap();
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(st.contains("INUSE"), "{st}");
    let socket = home.join("run").join("tank.sock");
    let mut child = cairn_cmd(&home)
        .args([
            "--tunable",
            "resilver_rate=6M",
            "serve",
            "--duration",
            "120",
            "tank",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    wait_for_socket(&socket);
    let e = fails(&cairn(&home, &["resilver", "--rate", "1M", "tank"]));
    assert!(e.contains("resilver_rate"), "{e}");
    let out = cairn(&home, &["resilver", "-w", "tank"]);
    let text = ok(&out);
    assert!(
        text.starts_with("resilvered 16") && text.contains("with 0 errors"),
        "{text}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("resilver: "),
        "no progress under -w"
    );
    assert!(
        start.elapsed() >= Duration::from_secs(2),
        "not paced by the service"
    );
    assert_eq!(
        ok(&cairn(&home, &["resilver", "tank"])),
        "pool 'tank' needs no resilver\n"
    );
    // SAFETY: sending SIGTERM to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    assert_eq!(
        cairn(&home, &["cat", "tank/data"]).stdout,
        pseudo_random(16 * MIB as usize, 4)
    );
}

/// send, receive (incremental too) and clone run in the serving process: the stream goes
/// through the client's standard output and input, and the results read back.
#[test]
fn send_receive_and_clone_run_in_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let home = pool_with_data(dir.path());
    let big = pseudo_random(3 * MIB as usize, 7);
    ok(&cairn(&home, &["snapshot", "tank/docs@a"]));
    let served = serve(&home, "tank");
    let stream = dir.path().join("stream");
    let run_with = |args: &[&str], stdin: Option<&Path>, stdout: Option<&Path>| {
        let mut c = cairn_cmd(&home);
        c.args(args);
        if let Some(p) = stdin {
            c.stdin(std::fs::File::open(p).unwrap());
        }
        if let Some(p) = stdout {
            c.stdout(std::fs::File::create(p).unwrap());
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run_with(&["send", "tank/docs@a"], None, Some(&stream));
    assert!(std::fs::metadata(&stream).unwrap().len() > 3 * MIB);
    let said = run_with(&["receive", "-v", "tank/copy"], Some(&stream), None);
    assert!(said.contains("1 stream"), "{said}");
    assert!(ok_bytes(&cairn(&home, &["cat", "tank/copy/big"])) == big);
    // An incremental, through the same pipes.
    let src = dir.path().join("small");
    std::fs::write(&src, b"new file").unwrap();
    ok(&cairn(
        &home,
        &["put", src.to_str().unwrap(), "tank/docs/new"],
    ));
    ok(&cairn(&home, &["snapshot", "tank/docs@b"]));
    run_with(&["send", "-i", "@a", "tank/docs@b"], None, Some(&stream));
    assert!(std::fs::metadata(&stream).unwrap().len() < MIB);
    run_with(&["receive", "tank/copy"], Some(&stream), None);
    assert_eq!(ok(&cairn(&home, &["cat", "tank/copy/new"])), "new file");
    run_with(&["clone", "tank/docs@a", "tank/fork"], None, None);
    assert!(ok_bytes(&cairn(&home, &["cat", "tank/fork/big"])) == big);
    let e = fails(&cairn(&home, &["receive", "tank/copy"]));
    assert!(e.contains("empty"), "{e}");
    // Promote: the fork takes @a, tank/docs becomes its clone.
    let said = run_with(&["promote", "-v", "tank/fork"], None, None);
    assert!(said.contains("took @a"), "{said}");
    let origin = ok(&cairn(&home, &["get", "-H", "origin", "tank/docs"]));
    assert!(origin.contains("tank/fork@a"), "{origin}");
    let snaps = ok(&cairn(&home, &["list", "-H", "-t", "snapshot", "tank"]));
    assert!(
        snaps.contains("tank/fork@a") && !snaps.contains("tank/docs@a"),
        "{snaps}"
    );
    assert!(ok_bytes(&cairn(&home, &["cat", "tank/fork@a/big"])) == big);
    // The usual end of a promote: the clone takes the old name, the old dataset goes.
    ok(&cairn(&home, &["rename", "tank/docs", "tank/old"]));
    ok(&cairn(&home, &["rename", "tank/fork", "tank/docs"]));
    let origin = ok(&cairn(&home, &["get", "-H", "origin", "tank/old"]));
    assert!(origin.contains("tank/docs@a"), "{origin}");
    ok(&cairn(&home, &["destroy", "-r", "tank/old"]));
    assert!(ok_bytes(&cairn(&home, &["cat", "tank/docs@a/big"])) == big);
    ok(&cairn(&home, &["rename", "tank/docs@a", "@first"]));
    assert!(ok_bytes(&cairn(&home, &["cat", "tank/docs@first/big"])) == big);
    served.stop();
    let history = ok(&cairn(&home, &["history"]));
    assert!(
        history.contains("receive tank/copy")
            && history.contains("clone tank/docs@a")
            && history.contains("promote -v tank/fork")
            && history.contains("rename tank/fork tank/docs"),
        "{history}"
    );
}

/// `scrub -p` and `-s` run in the service: a scrub one client runs there is paused from
/// another; a second scrub at once is refused; the paused one is canceled by the service
/// though no thread scrubs (issue 13: the state is the engine's, kept in the pool).
#[test]
fn scrub_pause_and_cancel_run_in_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let home = pool_with_data(dir.path());
    let src = dir.path().join("f");
    std::fs::write(&src, pseudo_random(16 * MIB as usize, 5)).unwrap();
    ok(&cairn(&home, &["put", src.to_str().unwrap(), "tank/f"]));
    let served = serve(&home, "tank");
    let e = fails(&cairn(&home, &["scrub", "-p", "tank"]));
    assert!(e.contains("no scrub in progress"), "{e}");
    let slow = start_and_wait_for(
        &home,
        &["scrub", "--rate", "2M", "tank"],
        "scan: scrub scanning",
    );
    let e = fails(&cairn(&home, &["scrub", "tank"]));
    assert!(e.contains("is being scrubbed already"), "{e}");
    ok(&cairn(&home, &["scrub", "-p", "tank"]));
    paused_then_canceled(&home, slow);
    served.stop();
    // The service wrote it to the labels.
    let status = ok(&cairn(&home, &["status", "tank"]));
    assert!(status.contains("scan: scrub canceled"), "{status}");
}

/// offline, online and clear run in the service while clients write through it: a leaf
/// taken offline misses the writes, comes back stale, and the service's resilver gives it
/// every block it missed, including the writes that raced with `online` (checked by
/// reading everything with another leaf offline, then a scrub).
#[test]
fn offline_online_and_clear_run_in_the_service_while_clients_write() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 3, 128 * MIB);
    ok(&cairn(
        &home,
        &["create", "tank", "raidz1", &d[0], &d[1], &d[2]],
    ));
    let served = serve(&home, "tank");
    ok(&cairn(&home, &["offline", "tank", &d[1]]));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(st.contains("DEGRADED") && st.contains("OFFLINE"), "{st}");
    let e = fails(&cairn(&home, &["offline", "tank", &d[2]]));
    assert!(e.contains("no valid replicas"), "{e}");
    // Writers keep writing through the service before, during and after `online`.
    let put = |i: usize| put_numbered(&home, dir.path(), i);
    for i in 0..4 {
        put(i);
    }
    let writer = while_putting(
        &home,
        dir.path(),
        4..16,
        Duration::from_millis(300),
        &["online", "tank", &d[1]],
    );
    assert!(
        writer.starts_with("resilvered ") && writer.contains("with 0 errors"),
        "{writer}"
    );
    // Writes the service took after the resilver began still reach d1 (or its DTL): wait
    // for any resilver they need, then read everything without d0.
    ok(&cairn(&home, &["resilver", "tank"]));
    ok(&cairn(&home, &["offline", "tank", &d[0]]));
    check_numbered(&home, 16);
    ok(&cairn(&home, &["online", "tank", &d[0]]));
    ok(&cairn(&home, &["resilver", "tank"]));
    ok(&cairn(&home, &["clear", "tank"]));
    let st = ok(&cairn(&home, &["status", "-x", "tank"]));
    assert!(st.contains("healthy"), "{st}");
    let history = ok(&cairn(&home, &["history", "tank"]));
    assert!(
        history.contains(&format!("cairn offline tank {}", d[1])),
        "{history}"
    );
    // A temporary offline lasts until the next import.
    ok(&cairn(&home, &["offline", "-t", "tank", &d[2]]));
    served.stop();
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(st.contains("OFFLINE"), "{st}");
    ok(&cairn(&home, &["export", "tank"]));
    ok(&cairn(
        &home,
        &["import", "-d", dir.path().to_str().unwrap(), "tank"],
    ));
    ok(&cairn(&home, &["resilver", "tank"]));
    scrub_is_clean(&home);
    let st = ok(&cairn(&home, &["status", "-x"]));
    assert_eq!(st, "all pools are healthy\n");
}

/// `export` and `destroy` of a served pool: the service lets the pool go (unmounting its
/// file systems) and the command runs in-process; refused while an NBD client is connected
/// or a mount is in use, unless `-f`.
#[test]
fn export_and_destroy_take_the_pool_from_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let home = pool_with_data(dir.path());
    ok(&cairn(&home, &["dataset", "create", "tank/fs"]));
    let nbd = dir.path().join("nbd.sock");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mount = format!("tank/fs={}", mnt.display());
    let start_service = |with_mount: bool| {
        let mut cmd = cairn_cmd(&home);
        cmd.args(["serve", "--nbd-socket", nbd.to_str().unwrap()]);
        if with_mount {
            cmd.args(["--mount", &mount]);
        }
        let child = cmd
            .arg("tank")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while UnixStream::connect(home.join("run/tank.sock")).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "serve did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        child
    };
    let fuse = std::path::Path::new("/dev/fuse").exists();
    let mut service = start_service(fuse);
    // An NBD client connected: refused, and the service goes on.
    let client = UnixStream::connect(&nbd).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let e = fails(&cairn(&home, &["export", "tank"]));
    assert!(e.contains("busy") && e.contains("NBD client"), "{e}");
    drop(client);
    if fuse {
        // A mount in use: refused.
        let open = std::fs::File::create(mnt.join("held")).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let e = fails(&cairn(&home, &["export", "tank"]));
        assert!(e.contains("cannot unmount"), "{e}");
        drop(open);
        std::thread::sleep(Duration::from_millis(200));
    }
    ok(&cairn(&home, &["ls", "tank/docs"]));
    ok(&cairn(&home, &["export", "tank"]));
    assert!(service.wait().unwrap().success(), "the service failed");
    let e = fails(&cairn(&home, &["status", "tank"]));
    assert!(e.contains("no such pool"), "{e}");
    ok(&cairn(
        &home,
        &["import", "-d", dir.path().to_str().unwrap(), "tank"],
    ));
    let history = ok(&cairn(&home, &["history", "tank"]));
    assert!(history.contains("cairn export tank"), "{history}");
    assert_eq!(
        cairn(&home, &["cat", "tank/docs/big"]).stdout,
        pseudo_random(3 * MIB as usize, 7)
    );
    // -f drops a connected client.
    let mut service = start_service(false);
    let client = UnixStream::connect(&nbd).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    ok(&cairn(&home, &["destroy", "-f", "tank"]));
    assert!(service.wait().unwrap().success(), "the service failed");
    drop(client);
    let e = fails(&cairn(&home, &["status", "tank"]));
    assert!(e.contains("no such pool"), "{e}");
}

/// `replace` runs in the service while clients write: the new device serves the slot at
/// once (stale), the service resilvers it, and the old device is let go with its labels
/// cleared. Then everything reads back with another leaf offline, after a re-import too.
#[test]
fn replace_runs_in_the_service_while_clients_write() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 4, 128 * MIB);
    ok(&cairn(
        &home,
        &["create", "tank", "raidz1", &d[0], &d[1], &d[2]],
    ));
    let put = |i: usize| put_numbered(&home, dir.path(), i);
    (0..4).for_each(put);
    let served = serve(&home, "tank");
    let replaced = while_putting(
        &home,
        dir.path(),
        4..12,
        Duration::from_millis(200),
        &["replace", "tank", &d[1], &d[3]],
    );
    assert!(
        replaced.starts_with("resilvered ") && replaced.contains("with 0 errors"),
        "{replaced}"
    );
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        st.contains(&d[3]) && !st.contains(&format!("{}\n", d[1])),
        "{st}"
    );
    // The old device is free for reuse: no pool label is left on it.
    let e = fails(&cairn(&home, &["labels", &d[1]]));
    assert!(e.contains("no valid cairn label"), "{e}");
    // A device of the pool is refused with advice.
    let e = fails(&cairn(&home, &["replace", "tank", &d[0], &d[2]]));
    assert!(e.contains("already part of this pool"), "{e}");
    // The same device again: resilvered in place with everything.
    let again = ok(&cairn(&home, &["replace", "tank", &d[2]]));
    assert!(again.starts_with("resilvered "), "{again}");
    ok(&cairn(&home, &["resilver", "tank"]));
    ok(&cairn(&home, &["offline", "tank", &d[0]]));
    check_numbered(&home, 12);
    ok(&cairn(&home, &["online", "tank", &d[0]]));
    served.stop();
    ok(&cairn(&home, &["export", "tank"]));
    ok(&cairn(
        &home,
        &["import", "-d", dir.path().to_str().unwrap(), "tank"],
    ));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(st.contains(&d[3]) && st.contains("ONLINE"), "{st}");
    ok(&cairn(&home, &["resilver", "tank"]));
    scrub_is_clean(&home);
    check_numbered(&home, 12);
}

/// `autoreplace=on`: a blank device at a missing leaf's path is put in its place by the
/// service and resilvered; with it off, nothing happens.
#[test]
fn autoreplace_puts_a_new_device_in_a_missing_leafs_place() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 3, 128 * MIB);
    ok(&cairn(
        &home,
        &["create", "tank", "raidz1", &d[0], &d[1], &d[2]],
    ));
    let src = dir.path().join("data");
    std::fs::write(&src, pseudo_random(8 * MIB as usize, 9)).unwrap();
    ok(&cairn(&home, &["put", src.to_str().unwrap(), "tank/data"]));
    ok(&cairn(&home, &["export", "tank"]));
    // d1 dies; a new blank disk goes in its bay.
    std::fs::remove_file(&d[1]).unwrap();
    std::fs::File::create(&d[1])
        .unwrap()
        .set_len(128 * MIB)
        .unwrap();
    ok(&cairn(
        &home,
        &["import", "-d", dir.path().to_str().unwrap(), "tank"],
    ));
    assert!(ok(&cairn(&home, &["status", "tank"])).contains("DEGRADED"));
    let served = serve(&home, "tank");
    std::thread::sleep(Duration::from_millis(2500));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        st.contains("DEGRADED"),
        "replaced with autoreplace off: {st}"
    );
    ok(&cairn(&home, &["set", "autoreplace=on", "tank"]));
    assert_eq!(
        ok(&cairn(&home, &["get", "-H", "autoreplace", "tank"])),
        "tank\tautoreplace\ton\tlocal\n"
    );
    let start = Instant::now();
    loop {
        let history = ok(&cairn(&home, &["history", "tank"]));
        if history.contains("(autoreplace)") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "not replaced: {history}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    ok(&cairn(&home, &["resilver", "tank"]));
    ok(&cairn(&home, &["offline", "tank", &d[0]]));
    assert_eq!(
        cairn(&home, &["cat", "tank/data"]).stdout,
        pseudo_random(8 * MIB as usize, 9)
    );
    ok(&cairn(&home, &["online", "tank", &d[0]]));
    let e = fails(&cairn(&home, &["set", "autoreplace=yes", "tank"]));
    assert!(e.contains("give on or off"), "{e}");
    served.stop();
    scrub_is_clean(&home);
    assert_eq!(
        ok(&cairn(&home, &["status", "-x"])),
        "all pools are healthy\n"
    );
}

/// `scrub --latency-budget`: a scrub yields to foreground reads that are slower than the
/// budget (here 1 µs, which every read exceeds: the scrub pauses ever longer between its
/// slices), and runs at full speed while nobody reads. Leaves that take 1 ms per I/O make
/// the scrub long enough for the pacer to act.
#[test]
fn a_scrub_with_a_latency_budget_yields_to_readers() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 3, 128 * MIB);
    let slow: Vec<String> = d.iter().map(|p| format!("fault:{p}?delay_ms=1")).collect();
    ok(&cairn(
        &home,
        &["create", "tank", "raidz1", &slow[0], &slow[1], &slow[2]],
    ));
    let src = dir.path().join("data");
    std::fs::write(&src, pseudo_random(16 * MIB as usize, 5)).unwrap();
    ok(&cairn(&home, &["put", src.to_str().unwrap(), "tank/data"]));
    let served = serve(&home, "tank");
    let timed = |args: &[&str]| {
        let start = Instant::now();
        let out = ok(&cairn(&home, args));
        assert!(out.contains(" 0 errors"), "{out}");
        start.elapsed().as_secs_f64()
    };
    let alone = timed(&["scrub", "--latency-budget", "1us", "tank"]);
    let reading = std::sync::atomic::AtomicBool::new(true);
    std::thread::scope(|s| {
        s.spawn(|| {
            while reading.load(std::sync::atomic::Ordering::Relaxed) {
                ok_bytes(&cairn(&home, &["cat", "tank/data"]));
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        // The same scrub beside the readers is still going after three times as long (and
        // at least 3 s); then it is stopped.
        let mut scrub = cairn_cmd(&home)
            .args(["scrub", "--latency-budget", "1us", "tank"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_secs_f64((alone * 3.0).max(3.0)));
        let still = scrub.try_wait().unwrap().is_none();
        ok(&cairn(&home, &["scrub", "-s", "tank"]));
        let _ = scrub.wait();
        reading.store(false, std::sync::atomic::Ordering::Relaxed);
        assert!(
            still,
            "the scrub beside readers ended as fast as alone ({alone:.2} s)"
        );
    });
    let e = fails(&cairn(
        &home,
        &["scrub", "--latency-budget", "soon", "tank"],
    ));
    assert!(e.contains("bad latency budget 'soon'"), "{e}");
    served.stop();
}
