//! Snapshots through the `cairn` binary with zfs's grammar: snapshot, list -t snapshot,
//! reading `DS@NAME/PATH`, rollback, destroy of one, a range and -r, and the space
//! properties; every change lands in the pool history.

mod support;

use support::{cairn, fails, files, ok, ok_bytes, pseudo_random, MIB};

#[test]
fn snapshot_read_rollback_and_destroy_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 3, 256 * MIB);
    ok(&cairn(
        &home,
        &["create", "tank", "raidz1", &d[0], &d[1], &d[2]],
    ));
    ok(&cairn(&home, &["dataset", "create", "-p", "tank/fs/child"]));
    let v1 = pseudo_random(3 * MIB as usize, 1);
    let v2 = pseudo_random(3 * MIB as usize, 2);
    let src = dir.path().join("src");
    std::fs::write(&src, &v1).unwrap();
    ok(&cairn(
        &home,
        &["put", src.to_str().unwrap(), "tank/fs/file"],
    ));
    ok(&cairn(&home, &["snapshot", "-r", "tank/fs@monday"]));
    std::fs::write(&src, &v2).unwrap();
    ok(&cairn(
        &home,
        &["put", "-f", src.to_str().unwrap(), "tank/fs/file"],
    ));
    ok(&cairn(
        &home,
        &["snapshot", "tank/fs@tuesday", "tank/fs@wednesday"],
    ));

    // Reading: the file as each snapshot saw it, and the live one.
    assert!(ok_bytes(&cairn(&home, &["cat", "tank/fs@monday/file"])) == v1);
    assert!(ok_bytes(&cairn(&home, &["cat", "tank/fs@tuesday/file"])) == v2);
    assert!(ok_bytes(&cairn(&home, &["cat", "tank/fs/file"])) == v2);
    let listing = ok(&cairn(&home, &["ls", "tank/fs@monday"]));
    assert!(listing.contains("file"), "{listing}");
    let e = fails(&cairn(&home, &["cat", "tank/fs@friday/file"]));
    assert!(e.contains("tank/fs@friday"), "{e}");

    // Listing and space: monday alone holds the first version of the file.
    let list = ok(&cairn(
        &home,
        &["list", "-t", "snapshot", "-H", "-p", "tank"],
    ));
    let rows: Vec<Vec<&str>> = list.lines().map(|l| l.split('\t').collect()).collect();
    let names: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(
        names,
        [
            "tank/fs@monday",
            "tank/fs@tuesday",
            "tank/fs@wednesday",
            "tank/fs/child@monday"
        ]
    );
    let monday_used: u64 = rows[0][1].parse().unwrap();
    assert!(monday_used >= 3 * MIB, "{list}");
    let by_snaps = ok(&cairn(&home, &["get", "-H", "usedbysnapshots", "tank/fs"]));
    assert!(by_snaps.contains(&monday_used.to_string()), "{by_snaps}");

    // send | receive: a stream in a file, into a second pool.
    let stream = dir.path().join("stream");
    let out = std::fs::File::create(&stream).unwrap();
    let st = support::cairn_cmd(&home)
        .args(["send", "tank/fs@monday"])
        .stdout(out)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::create_dir(dir.path().join("two")).unwrap();
    let e2 = files(&dir.path().join("two"), 1, 128 * MIB);
    ok(&cairn(&home, &["create", "backup", &e2[0]]));
    let st = support::cairn_cmd(&home)
        .args(["receive", "backup/fs"])
        .stdin(std::fs::File::open(&stream).unwrap())
        .status()
        .unwrap();
    assert!(st.success());
    assert!(ok_bytes(&cairn(&home, &["cat", "backup/fs/file"])) == v1);
    assert!(ok_bytes(&cairn(&home, &["cat", "backup/fs@monday/file"])) == v1);
    let e = fails(&cairn(&home, &["send", "tank/fs@nope"]));
    assert!(e.contains("tank/fs@nope"), "{e}");
    // An incremental from monday: only the change travels, and the copy follows.
    ok(&cairn(&home, &["snapshot", "tank/fs@inc"]));
    let out = std::fs::File::create(&stream).unwrap();
    let st = support::cairn_cmd(&home)
        .args(["send", "-i", "@monday", "tank/fs@inc"])
        .stdout(out)
        .status()
        .unwrap();
    assert!(st.success());
    assert!(std::fs::metadata(&stream).unwrap().len() < 2 * v1.len() as u64);
    let got = support::cairn_cmd(&home)
        .args(["receive", "-v", "backup/fs"])
        .stdin(std::fs::File::open(&stream).unwrap())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&got.stdout);
    assert!(got.status.success() && said.contains("1 stream,"), "{said}");
    let now = ok_bytes(&cairn(&home, &["cat", "tank/fs/file"]));
    assert!(ok_bytes(&cairn(&home, &["cat", "backup/fs@inc/file"])) == now);
    // A stream cut in half, received with -s, resumes with send -t.
    let out = std::fs::File::create(&stream).unwrap();
    let st = support::cairn_cmd(&home)
        .args(["send", "tank/fs@inc"])
        .stdout(out)
        .status()
        .unwrap();
    assert!(st.success());
    let bytes = std::fs::read(&stream).unwrap();
    std::fs::write(&stream, &bytes[..bytes.len() / 2]).unwrap();
    let cut = support::cairn_cmd(&home)
        .args(["receive", "-s", "backup/half"])
        .stdin(std::fs::File::open(&stream).unwrap())
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&cut.stderr);
    assert!(!cut.status.success() && e.contains("send -t"), "{e}");
    let token = ok(&cairn(
        &home,
        &["get", "-H", "receive_resume_token", "backup/half"],
    ));
    let token = token.split('\t').nth(2).unwrap().trim().to_string();
    let out = std::fs::File::create(&stream).unwrap();
    let st = support::cairn_cmd(&home)
        .args(["send", "-t", &token])
        .stdout(out)
        .status()
        .unwrap();
    assert!(st.success());
    assert!(std::fs::metadata(&stream).unwrap().len() < bytes.len() as u64);
    let st = support::cairn_cmd(&home)
        .args(["receive", "-s", "backup/half"])
        .stdin(std::fs::File::open(&stream).unwrap())
        .status()
        .unwrap();
    assert!(st.success());
    assert!(ok_bytes(&cairn(&home, &["cat", "backup/half@inc/file"])) == now);
    // A clone of monday: writable, reads as monday, and keeps monday from being destroyed.
    ok(&cairn(&home, &["clone", "tank/fs@monday", "tank/monday"]));
    assert!(ok_bytes(&cairn(&home, &["cat", "tank/monday/file"])) == v1);
    let origin = ok(&cairn(&home, &["get", "-H", "origin", "tank/monday"]));
    assert!(origin.contains("tank/fs@monday"), "{origin}");
    ok(&cairn(
        &home,
        &["put", "-f", src.to_str().unwrap(), "tank/monday/file"],
    ));
    assert!(ok_bytes(&cairn(&home, &["cat", "tank/fs@monday/file"])) == v1);
    let e = fails(&cairn(&home, &["destroy", "tank/fs@monday"]));
    assert!(e.contains("clones") && e.contains("tank/monday"), "{e}");
    ok(&cairn(&home, &["destroy", "tank/monday"]));

    // diff: what changed since monday (the file was replaced: same name, new object).
    ok(&cairn(&home, &["mkdir", "tank/fs/newdir"]));
    let d = ok(&cairn(&home, &["diff", "tank/fs@monday"]));
    assert!(d.lines().any(|l| l == "+\t/newdir"), "{d}");
    assert!(d.lines().any(|l| l == "M\t/"), "{d}");
    assert!(d.lines().any(|l| l.ends_with("\t/file")), "{d}");
    let d = ok(&cairn(
        &home,
        &["diff", "tank/fs@tuesday", "tank/fs@wednesday"],
    ));
    assert_eq!(d, "", "nothing changed between tuesday and wednesday");
    let e = fails(&cairn(
        &home,
        &["diff", "tank/fs@tuesday", "tank/fs@monday"],
    ));
    assert!(e.contains("later snapshot"), "{e}");

    // Rollback to monday needs -r (newer snapshots exist); then the old file is back.
    let e = fails(&cairn(&home, &["rollback", "tank/fs@monday"]));
    assert!(e.contains("rollback -r"), "{e}");
    ok(&cairn(&home, &["rollback", "-r", "tank/fs@monday"]));
    assert!(ok_bytes(&cairn(&home, &["cat", "tank/fs/file"])) == v1);
    let list = ok(&cairn(&home, &["list", "-t", "snapshot", "-H", "tank"]));
    assert_eq!(list.lines().count(), 2, "{list}");

    // A held snapshot cannot be destroyed until released.
    ok(&cairn(&home, &["hold", "-r", "keep", "tank/fs@monday"]));
    let holds = ok(&cairn(
        &home,
        &["holds", "tank/fs@monday", "tank/fs/child@monday"],
    ));
    assert_eq!(
        holds.lines().filter(|l| l.ends_with(" keep")).count(),
        2,
        "{holds}"
    );
    let e = fails(&cairn(&home, &["destroy", "tank/fs/child@monday"]));
    assert!(
        e.contains("is held (keep)") && e.contains("cairn release"),
        "{e}"
    );
    let e = fails(&cairn(&home, &["hold", "keep", "tank/fs@monday"]));
    assert!(e.contains("already has a hold"), "{e}");
    ok(&cairn(&home, &["release", "-r", "keep", "tank/fs@monday"]));

    // Destroy: -n changes nothing, -r takes the child's too, then the dataset can go.
    ok(&cairn(&home, &["snapshot", "tank/fs@a", "tank/fs@b"]));
    let dry = ok(&cairn(&home, &["destroy", "-n", "tank/fs@monday%b"]));
    assert_eq!(dry.lines().count(), 3, "{dry}");
    assert_eq!(
        ok(&cairn(&home, &["list", "-t", "snapshot", "-H", "tank"]))
            .lines()
            .count(),
        4
    );
    ok(&cairn(&home, &["destroy", "tank/fs@a%b"]));
    let e = fails(&cairn(&home, &["destroy", "tank/fs"]));
    assert!(
        e.contains("has snapshots") || e.contains("has children"),
        "{e}"
    );
    ok(&cairn(&home, &["destroy", "-r", "tank/fs@monday"]));
    assert_eq!(
        ok(&cairn(&home, &["list", "-t", "snapshot", "-H", "tank"])),
        ""
    );
    let history = ok(&cairn(&home, &["history", "tank"]));
    for cmd in [
        "snapshot -r tank/fs@monday",
        "rollback -r tank/fs@monday",
        "destroy tank/fs@a%b",
    ] {
        assert!(history.contains(cmd), "{cmd} missing from:\n{history}");
    }
    ok(&cairn(&home, &["destroy", "-r", "tank/fs"]));
    ok(&cairn(&home, &["export", "tank"]));
}

/// The pool service takes the automatic snapshots a dataset's `snapshot:schedule` asks for
/// (inherited by children), records them in the history, and a bad schedule is refused.
#[test]
fn the_service_takes_scheduled_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 128 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    ok(&cairn(&home, &["dataset", "create", "-p", "tank/fs/child"]));
    let e = fails(&cairn(
        &home,
        &["set", "snapshot:schedule=hourly", "tank/fs"],
    ));
    assert!(e.contains("PERIOD=COUNT"), "{e}");
    ok(&cairn(
        &home,
        &["set", "snapshot:schedule=hourly=24,daily=7", "tank/fs"],
    ));
    let hour = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 3600
    };
    let started = hour();
    ok(&cairn(&home, &["serve", "--duration", "1", "tank"]));
    let list = ok(&cairn(&home, &["list", "-t", "snapshot", "-H", "tank"]));
    let names: Vec<&str> = list
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(names.len(), 4, "{list}");
    for ds in [
        "tank/fs@auto_hourly-",
        "tank/fs@auto_daily-",
        "tank/fs/child@auto_hourly-",
    ] {
        assert!(
            names.iter().any(|n| n.starts_with(ds)),
            "{ds} missing: {list}"
        );
    }
    // Within the same hour and day, a second run takes nothing new.
    ok(&cairn(&home, &["serve", "--duration", "1", "tank"]));
    let again = ok(&cairn(&home, &["list", "-t", "snapshot", "-H", "tank"]));
    if hour() == started {
        assert_eq!(again.lines().count(), 4, "{again}");
    }
    let history = ok(&cairn(&home, &["history", "tank"]));
    assert!(
        history.contains("cairn auto-snapshot tank/fs@auto_hourly-"),
        "{history}"
    );
}

/// `cairn send -i`'s output piped into `cairn receive`; returns receive's output.
fn send_into(home: &std::path::Path, send: &[&str], receive: &[&str]) -> std::process::Output {
    use std::process::Stdio;
    let mut tx = support::cairn_cmd(home)
        .args(send)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = support::cairn_cmd(home)
        .args(receive)
        .stdin(tx.stdout.take().unwrap())
        .output()
        .unwrap();
    assert!(tx.wait().unwrap().success(), "send {send:?}");
    rx
}

/// The bytes of `cairn send ARGS`.
fn stream_of(home: &std::path::Path, args: &[&str]) -> usize {
    let out = support::cairn_cmd(home).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout.len()
}

/// A clone goes to another pool as an incremental from its origin: `send -i DS@O
/// CLONE@C | receive -o origin=COPY@O NEW` makes a clone there that reads as the sender's,
/// the stream carries only the change, and another origin is refused with nothing made.
#[test]
fn a_clone_is_sent_as_an_incremental_from_its_origin() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 256 * MIB);
    ok(&cairn(&home, &["create", "tank", &d[0]]));
    ok(&cairn(&home, &["create", "backup", &d[1]]));
    ok(&cairn(&home, &["dataset", "create", "tank/fs"]));
    let src = dir.path().join("src");
    for i in 0..8 {
        std::fs::write(&src, pseudo_random(2 * MIB as usize, i)).unwrap();
        let to = format!("tank/fs/f{i}");
        ok(&cairn(&home, &["put", src.to_str().unwrap(), &to]));
    }
    ok(&cairn(&home, &["snapshot", "tank/fs@o"]));
    ok(&cairn(&home, &["clone", "tank/fs@o", "tank/cl"]));
    std::fs::write(&src, b"the clone's own file").unwrap();
    ok(&cairn(
        &home,
        &["put", src.to_str().unwrap(), "tank/cl/new"],
    ));
    ok(&cairn(&home, &["rm", "tank/cl/f1"]));
    ok(&cairn(&home, &["snapshot", "tank/cl@c"]));

    let e = fails(&cairn(&home, &["send", "-i", "@o", "tank/cl@c"]));
    assert!(e.contains("name the origin in full"), "{e}");
    let got = send_into(&home, &["send", "tank/fs@o"], &["receive", "backup/fs"]);
    assert!(got.status.success());
    let full = stream_of(&home, &["send", "tank/cl@c"]);
    let inc = stream_of(&home, &["send", "-i", "tank/fs@o", "tank/cl@c"]);
    assert!(inc * 10 < full, "incremental {inc} bytes, full {full}");

    // Another origin: refused, nothing made.
    ok(&cairn(&home, &["dataset", "create", "backup/other"]));
    ok(&cairn(&home, &["snapshot", "backup/other@o"]));
    let send = ["send", "-i", "tank/fs@o", "tank/cl@c"];
    let got = send_into(
        &home,
        &send,
        &["receive", "-o", "origin=backup/other@o", "backup/cl"],
    );
    let e = String::from_utf8_lossy(&got.stderr);
    assert!(
        !got.status.success() && e.contains("not the snapshot this stream starts from"),
        "{e}"
    );
    fails(&cairn(&home, &["ls", "backup/cl"]));

    let got = send_into(
        &home,
        &send,
        &["receive", "-o", "origin=backup/fs@o", "backup/cl"],
    );
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    for f in ["f0", "f2", "f7", "new"] {
        let (a, b) = (format!("tank/cl@c/{f}"), format!("backup/cl@c/{f}"));
        assert!(
            ok_bytes(&cairn(&home, &["cat", &a])) == ok_bytes(&cairn(&home, &["cat", &b])),
            "{f}"
        );
    }
    fails(&cairn(&home, &["cat", "backup/cl/f1"]));
    let origin = ok(&cairn(&home, &["get", "-H", "origin", "backup/cl"]));
    assert!(origin.contains("backup/fs@o"), "{origin}");
}
