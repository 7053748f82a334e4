//! File systems over FUSE: `cairn mount` / `umount` with real system calls through the
//! kernel, what persists across unmount and remount, and fsync across `kill -9`.
//! (The POSIX conformance suite, pjdfstest, runs from scripts/fs-check.sh.)

mod support;

use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// FUSE needs /dev/fuse and root (to mount with allow_other); say why when it is missing.
fn fuse_available() -> bool {
    let root = unsafe { libc::geteuid() } == 0;
    let dev = Path::new("/dev/fuse").exists();
    if !(root && dev) {
        eprintln!("SKIPPED: FUSE tests need root and /dev/fuse (root: {root}, /dev/fuse: {dev})");
    }
    root && dev
}

struct Setup {
    home: PathBuf,
    mnt: PathBuf,
    _tmp: tempfile::TempDir,
}

/// A test that fails while mounted must not leave its serving process and mount behind:
/// detach the mount (the server then syncs, exports and exits).
impl Drop for Setup {
    fn drop(&mut self) {
        if String::from_utf8_lossy(&cairn(&self.home, &["mount"]).stdout).contains("tank/") {
            let _ = cairn(&self.home, &["umount", "-f", self.mnt.to_str().unwrap()]);
        }
    }
}

fn pool() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let leaves = files(tmp.path(), 3, 256 * MIB);
    let mut args = vec!["create", "tank", "raidz1"];
    args.extend(leaves.iter().map(|s| s.as_str()));
    ok(&cairn(&home, &args));
    ok(&cairn(&home, &["dataset", "create", "tank/fs"]));
    let mnt = tmp.path().join("mnt");
    Setup {
        _tmp: tmp,
        home,
        mnt,
    }
}

fn mount(s: &Setup) {
    ok(&cairn(
        &s.home,
        &["mount", "tank/fs", s.mnt.to_str().unwrap()],
    ));
}

fn umount(s: &Setup) {
    ok(&cairn(&s.home, &["umount", s.mnt.to_str().unwrap()]));
}

fn setxattr(path: &Path, name: &str, value: &[u8]) -> i32 {
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    }
}

fn getxattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 65536];
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (r >= 0).then(|| {
        buf.truncate(r as usize);
        buf
    })
}

fn seek(f: &fs::File, offset: i64, whence: i32) -> i64 {
    unsafe { libc::lseek(f.as_raw_fd(), offset, whence) }
}

#[test]
fn posix_operations_persist_across_unmount() {
    if !fuse_available() {
        return;
    }
    let s = pool();
    mount(&s);
    let m = &s.mnt;
    let data = pseudo_random(3 * MIB as usize + 123, 7);
    fs::write(m.join("a.bin"), &data).unwrap();
    fs::create_dir_all(m.join("d1/d2")).unwrap();
    fs::hard_link(m.join("a.bin"), m.join("d1/hard")).unwrap();
    std::os::unix::fs::symlink("../a.bin", m.join("d1/ln")).unwrap();
    fs::rename(m.join("d1/d2"), m.join("moved")).unwrap();
    fs::set_permissions(m.join("a.bin"), fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(setxattr(&m.join("a.bin"), "user.DOSATTRIB", b"0x23"), 0);
    assert_eq!(fs::metadata(m.join("a.bin")).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(m.join("d1")).unwrap().nlink(),
        2,
        "d2 moved out"
    );
    assert_eq!(
        fs::read(m.join("d1/ln")).unwrap(),
        data,
        "through the symlink"
    );

    // A sparse file past 4 GiB: the hole reads as zeros, SEEK_DATA / SEEK_HOLE find it.
    let big = m.join("sparse");
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&big)
        .unwrap();
    f.seek(SeekFrom::Start(5 << 30)).unwrap();
    f.write_all(b"tail").unwrap();
    f.sync_all().unwrap();
    assert_eq!(f.metadata().unwrap().len(), (5 << 30) + 4);
    assert_eq!(seek(&f, 0, libc::SEEK_HOLE), 0);
    let data_at = seek(&f, 0, libc::SEEK_DATA);
    assert!(data_at > 0 && data_at <= 5 << 30, "data at {data_at}");
    let mut buf = [1u8; 16];
    f.seek(SeekFrom::Start(1 << 30)).unwrap();
    f.read_exact(&mut buf).unwrap();
    assert_eq!(buf, [0u8; 16]);
    drop(f);
    // Punching a hole zeroes and frees a range, the size stays.
    let f = OpenOptions::new()
        .write(true)
        .open(m.join("a.bin"))
        .unwrap();
    let r = unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            1 << 20,
        )
    };
    assert_eq!(r, 0, "punch hole: {}", std::io::Error::last_os_error());
    drop(f);
    let mut expect = data.clone();
    expect[..1 << 20].fill(0);
    umount(&s);
    assert!(
        fs::read_dir(m).unwrap().next().is_none(),
        "unmounted: the directory is empty"
    );

    // The CLI (no mount) sees what the mount wrote.
    let out = ok_bytes(&cairn(&s.home, &["cat", "tank/fs/d1/hard"]));
    assert!(out == expect, "file read back through the CLI differs");
    mount(&s);
    assert_eq!(fs::read(m.join("a.bin")).unwrap(), expect);
    let meta = fs::metadata(m.join("a.bin")).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o640);
    assert_eq!(meta.nlink(), 2);
    assert_eq!(
        getxattr(&m.join("a.bin"), "user.DOSATTRIB").as_deref(),
        Some(&b"0x23"[..])
    );
    assert_eq!(
        fs::read_link(m.join("d1/ln")).unwrap(),
        Path::new("../a.bin")
    );
    assert!(m.join("moved").is_dir() && !m.join("d1/d2").exists());
    // Removing every name frees the object; the pool scrubs clean.
    fs::remove_file(m.join("a.bin")).unwrap();
    fs::remove_file(m.join("d1/hard")).unwrap();
    fs::remove_file(m.join("sparse")).unwrap();
    umount(&s);
    let scrub = ok(&cairn(&s.home, &["scrub", "tank"]));
    assert!(scrub.contains("0 errors"), "{scrub}");
}

#[test]
fn mount_refuses_what_it_cannot_serve() {
    if !fuse_available() {
        return;
    }
    let s = pool();
    let err = fails(&cairn(
        &s.home,
        &["mount", "tank/nope", s.mnt.to_str().unwrap()],
    ));
    assert!(err.contains("does not exist"), "{err}");
    mount(&s);
    let err = fails(&cairn(&s.home, &["mount", "tank/fs", "/tmp"]));
    assert!(err.contains("already mounted"), "{err}");
    // The serving process runs CLI commands, but not ones that would change a mounted
    // file system behind the kernel's caches: those say where it is mounted.
    let err = fails(&cairn(&s.home, &["mkdir", "tank/fs/x"]));
    assert!(
        err.contains("in use") && err.contains("mounted at") && err.contains("cairn umount"),
        "{err}"
    );
    let err = fails(&cairn(&s.home, &["destroy", "tank/fs"]));
    assert!(err.contains("mounted at"), "{err}");
    let err = fails(&cairn(&s.home, &["rename", "tank/fs", "tank/moved"]));
    assert!(err.contains("mounted at"), "{err}");
    // Reading it, and changing what is not mounted, go through the service.
    ok(&cairn(&s.home, &["ls", "tank/fs"]));
    ok(&cairn(&s.home, &["mkdir", "tank/elsewhere"]));
    umount(&s);
    ok(&cairn(&s.home, &["mkdir", "tank/fs/x"]));
    let err = fails(&cairn(&s.home, &["umount", s.mnt.to_str().unwrap()]));
    assert!(err.contains("not a mounted cairn file system"), "{err}");
}

/// Starts the serving process in the foreground of a child, so the test can kill it.
fn serve_child(s: &Setup) -> Child {
    let spec = format!("tank/fs={}", s.mnt.display());
    let child = cairn_cmd(&s.home)
        .args([
            "serve",
            "--mount",
            &spec,
            "--sync-interval",
            "30",
            "--until-unmounted",
            "tank",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let listed = || String::from_utf8_lossy(&cairn(&s.home, &["mount"]).stdout).contains("tank/fs");
    while !listed() {
        assert!(Instant::now() < deadline, "mount did not appear");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// A writer appends records with fsync after each; the server is killed at a random
/// moment. After cleaning the stale mount and mounting again, every record whose fsync
/// returned is there, whole. Rounds: CAIRN_FSKILL_ROUNDS (default 8; the recorded run in
/// docs/bench/fs.md used more).
#[test]
fn fsynced_appends_survive_kill_9() {
    if !fuse_available() {
        return;
    }
    let rounds: u64 = std::env::var("CAIRN_FSKILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    appends_survive_kill_9(rounds, false);
}

/// The same with the file opened O_DSYNC and no fsync: the kernel makes each write an
/// fsync, which the intent log answers.
#[test]
fn o_dsync_appends_survive_kill_9() {
    if !fuse_available() {
        return;
    }
    appends_survive_kill_9(4, true);
}

fn appends_survive_kill_9(rounds: u64, dsync: bool) {
    let s = pool();
    let mut acked_total = 0usize;
    for round in 0..rounds {
        let mut server = serve_child(&s);
        let path = s.mnt.join("log");
        let base = fs::metadata(&path).map(|m| m.len() as usize).unwrap_or(0);
        let writer = std::thread::spawn(move || {
            let mut acked = Vec::new();
            let mut options = OpenOptions::new();
            options.create(true).append(true);
            if dsync {
                std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_DSYNC);
            }
            let Ok(mut f) = options.open(&path) else {
                return acked;
            };
            for i in 0.. {
                let rec = pseudo_random(1000 + (i % 7) * 3000, round * 100_000 + i as u64);
                if f.write_all(&rec).is_err() || (!dsync && f.sync_all().is_err()) {
                    break;
                }
                acked.push(rec);
            }
            acked
        });
        std::thread::sleep(Duration::from_millis(100 + (round * 37) % 400));
        server.kill().unwrap();
        server.wait().unwrap();
        let acked = writer.join().unwrap();
        // The mount is stale now; `umount -f` cleans it up.
        ok(&cairn(&s.home, &["umount", "-f", s.mnt.to_str().unwrap()]));
        let mut server = serve_child(&s);
        let now = fs::read(s.mnt.join("log")).unwrap_or_default();
        let acked_bytes: usize = acked.iter().map(|r| r.len()).sum();
        assert!(
            now.len() >= base + acked_bytes,
            "round {round}: {} bytes after the crash, {base} + {acked_bytes} were fsync'd",
            now.len()
        );
        let mut pos = base;
        for r in &acked {
            assert!(
                now[pos..pos + r.len()] == r[..],
                "round {round}: a fsync'd record differs"
            );
            pos += r.len();
        }
        acked_total += acked.len();
        unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
        server.wait().unwrap();
    }
    let how = if dsync { "O_DSYNC" } else { "fsync'd" };
    eprintln!("{rounds} kill -9 rounds, {acked_total} {how} records, all intact");
    let scrub = ok(&cairn(&s.home, &["scrub", "tank"]));
    assert!(scrub.contains("0 errors"), "{scrub}");
}

/// A refquota through the mount: statfs shows it, writing past it fails with EDQUOT at the
/// write itself (the kernel's writeback cache, which would acknowledge writes and report at
/// fsync, is off for a dataset under a quota), and the file system stays usable.
#[test]
fn quota_is_edquot_through_the_mount() {
    if !fuse_available() {
        return;
    }
    let s = pool();
    ok(&cairn(&s.home, &["set", "refquota=8M", "tank/fs"]));
    ok(&cairn(&s.home, &["set", "compression=off", "tank/fs"]));
    mount(&s);
    let st = nix_statvfs(&s.mnt);
    assert!(st <= 8 << 20, "statfs AVAIL {st} > refquota");
    let big = pseudo_random(16 << 20, 3);
    let mut f = fs::File::create(s.mnt.join("big")).unwrap();
    let e = f
        .write_all(&big)
        .expect_err("write() of 16 MiB past an 8 MiB refquota");
    drop(f);
    assert_eq!(e.raw_os_error(), Some(libc::EDQUOT), "{e}");
    fs::remove_file(s.mnt.join("big")).unwrap();
    let small = pseudo_random(2 << 20, 4);
    let mut f = fs::File::create(s.mnt.join("small")).unwrap();
    f.write_all(&small).unwrap();
    f.sync_all().unwrap();
    drop(f);
    umount(&s);
    assert!(ok_bytes(&cairn(&s.home, &["cat", "tank/fs/small"])) == small);
}

/// Set-user-ID and set-group-ID bits are cleared by the file system
/// (FUSE_HANDLE_KILLPRIV_V2), as Linux clears them: on chown (by root too), on a write or
/// truncate by a user without CAP_FSETID, not on root's write.
#[test]
fn set_id_bits_are_cleared_as_linux_clears_them() {
    if !fuse_available() {
        return;
    }
    let s = pool();
    // (The test's temporary directory is 0700; the unprivileged writer must reach the mount.)
    fs::set_permissions(s._tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    mount(&s);
    let f = s.mnt.join("prog");
    let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o7777;
    let as_user = |script: &str| {
        use std::os::unix::process::CommandExt;
        let st = std::process::Command::new("sh")
            .args(["-c", script, "sh", f.to_str().unwrap()])
            .uid(65534)
            .gid(65534)
            .status()
            .unwrap();
        assert!(st.success(), "{script}: {st}");
    };
    fs::write(&f, b"#!/bin/sh\n").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o6777)).unwrap();
    OpenOptions::new()
        .append(true)
        .open(&f)
        .unwrap()
        .write_all(b"# root\n")
        .unwrap();
    assert_eq!(mode(&f), 0o6777, "root's write keeps them");
    as_user("printf x >> \"$1\"");
    assert_eq!(
        mode(&f),
        0o0777,
        "an unprivileged write clears both (group-exec is set)"
    );
    fs::set_permissions(&f, fs::Permissions::from_mode(0o6767)).unwrap();
    as_user("truncate -s 1 \"$1\"");
    assert_eq!(
        mode(&f),
        0o2767,
        "truncate: set-group-ID without group-exec stays"
    );
    fs::set_permissions(&f, fs::Permissions::from_mode(0o6755)).unwrap();
    std::os::unix::fs::chown(&f, Some(65534), None).unwrap();
    assert_eq!(mode(&f), 0o0755, "chown by root clears both");
    let d = s.mnt.join("dir");
    fs::create_dir(&d).unwrap();
    fs::set_permissions(&d, fs::Permissions::from_mode(0o2775)).unwrap();
    std::os::unix::fs::chown(&d, Some(65534), None).unwrap();
    assert_eq!(mode(&d), 0o2775, "a directory keeps set-group-ID");
    umount(&s);
    mount(&s);
    assert_eq!(mode(&f), 0o0755, "as stored");
    umount(&s);
}

fn nix_statvfs(p: &Path) -> u64 {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st.f_bavail * st.f_frsize
}

/// A running service takes `cairn mount` over its control socket (no second process), two
/// datasets of one pool are served side by side, and unmounting leaves the service running.
#[test]
fn a_running_service_mounts_through_its_control_socket() {
    if !fuse_available() {
        return;
    }
    let s = pool();
    ok(&cairn(&s.home, &["dataset", "create", "tank/other"]));
    let sock = s.home.join("nbd.sock");
    let mut service = cairn_cmd(&s.home)
        .args(["serve", "--nbd-socket", sock.to_str().unwrap(), "tank"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    // Until the service has bound its control socket, `status` would open the pool in-process
    // (and could win the race for it), and `mount` would start a serving process of its own.
    let control = s.home.join("run").join("tank.sock");
    while !control.exists() || !cairn(&s.home, &["status", "tank"]).status.success() {
        assert!(Instant::now() < deadline, "the service did not come up");
        assert!(
            service.try_wait().unwrap().is_none(),
            "the service exited before it bound its control socket"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = ok(&cairn(
        &s.home,
        &["mount", "tank/fs", s.mnt.to_str().unwrap()],
    ));
    assert!(
        out.contains(&format!("served by PID {}", service.id())),
        "{out}"
    );
    let other = s.mnt.with_file_name("other");
    ok(&cairn(
        &s.home,
        &["mount", "tank/other", other.to_str().unwrap()],
    ));
    fs::write(s.mnt.join("x"), b"through the service").unwrap();
    fs::write(other.join("y"), b"second dataset").unwrap();
    let listed = ok(&cairn(&s.home, &["mount"]));
    assert!(
        listed.contains("tank/fs") && listed.contains("tank/other"),
        "{listed}"
    );
    umount(&s);
    ok(&cairn(&s.home, &["umount", "tank/other"]));
    assert!(
        service.try_wait().unwrap().is_none(),
        "the service keeps running"
    );
    ok(&cairn(&s.home, &["status", "tank"]));
    unsafe { libc::kill(service.id() as i32, libc::SIGTERM) };
    assert!(service.wait().unwrap().success());
    assert_eq!(
        ok_bytes(&cairn(&s.home, &["cat", "tank/fs/x"])),
        b"through the service"
    );
    assert_eq!(
        ok_bytes(&cairn(&s.home, &["cat", "tank/other/y"])),
        b"second dataset"
    );
}

/// `.zfs/snapshot/NAME` shows each snapshot read-only: files restore with a copy, nothing
/// under it can change, it stays out of the root's listing (snapdir=hidden), and a snapshot
/// taken while mounted (through the serving process) appears at once.
#[test]
fn snapshots_are_read_only_under_dot_zfs() {
    if !fuse_available() {
        return;
    }
    let s = pool();
    let old = pseudo_random(2 * MIB as usize + 17, 11);
    let src = s.home.with_file_name("src");
    fs::write(&src, &old).unwrap();
    ok(&cairn(
        &s.home,
        &["put", src.to_str().unwrap(), "tank/fs/report"],
    ));
    ok(&cairn(&s.home, &["mkdir", "tank/fs/dir"]));
    ok(&cairn(&s.home, &["snapshot", "tank/fs@before"]));
    mount(&s);
    let m = &s.mnt;
    let new = pseudo_random(MIB as usize, 12);
    fs::write(m.join("report"), &new).unwrap();
    fs::remove_dir(m.join("dir")).unwrap();
    let snap = m.join(".zfs/snapshot/before");
    assert!(fs::read(snap.join("report")).unwrap() == old);
    assert!(snap.join("dir").is_dir());
    let names = |p: &Path| -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&m.join(".zfs/snapshot")), ["before"]);
    assert_eq!(names(m), ["report"], ".zfs is hidden from the listing");
    for e in [
        fs::write(snap.join("new"), b"x").unwrap_err(),
        fs::remove_file(snap.join("report")).unwrap_err(),
        fs::create_dir(snap.join("d2")).unwrap_err(),
        OpenOptions::new()
            .write(true)
            .open(snap.join("report"))
            .unwrap_err(),
    ] {
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    }
    // Restore by copying out of the snapshot.
    fs::copy(snap.join("report"), m.join("restored")).unwrap();
    assert!(fs::read(m.join("restored")).unwrap() == old);
    // A snapshot taken now goes through the serving process and shows the new contents.
    ok(&cairn(&s.home, &["snapshot", "tank/fs@during"]));
    assert!(fs::read(m.join(".zfs/snapshot/during/report")).unwrap() == new);
    let listed = ok(&cairn(&s.home, &["list", "-t", "snapshot", "-H", "tank"]));
    assert_eq!(listed.lines().count(), 2, "{listed}");
    ok(&cairn(&s.home, &["destroy", "tank/fs@during"]));
    assert!(!m.join(".zfs/snapshot/during").exists());
    umount(&s);
    assert!(ok_bytes(&cairn(&s.home, &["cat", "tank/fs@before/report"])) == old);
}

/// Directories made with `cairn mkdir` count their links as the mount does: removing one
/// through the mount leaves its parent alive (it used to drop the root to 0 links, and the
/// kernel then refused every create in it).
#[test]
fn a_directory_made_by_the_cli_can_be_removed_through_the_mount() {
    if !fuse_available() {
        return;
    }
    let s = pool();
    ok(&cairn(&s.home, &["mkdir", "tank/fs/a/b"]));
    mount(&s);
    let m = &s.mnt;
    assert_eq!(fs::metadata(m).unwrap().nlink(), 3);
    assert_eq!(fs::metadata(m.join("a")).unwrap().nlink(), 3);
    fs::remove_dir(m.join("a/b")).unwrap();
    fs::remove_dir(m.join("a")).unwrap();
    assert_eq!(fs::metadata(m).unwrap().nlink(), 2);
    fs::write(m.join("after"), b"created").unwrap();
    umount(&s);
}

/// `cairn rollback` of a mounted dataset (issue 16): the service unmounts it, rolls back
/// and mounts it again at the same place, so the mount shows the snapshot's files at once;
/// a mount in use is refused and nothing changes.
#[test]
fn rollback_of_a_mounted_dataset_remounts_it() {
    if !fuse_available() {
        return;
    }
    let s = pool();
    mount(&s);
    let m = &s.mnt;
    fs::write(m.join("kept"), b"before").unwrap();
    ok(&cairn(&s.home, &["snapshot", "tank/fs@s"]));
    fs::write(m.join("kept"), b"after, longer").unwrap();
    fs::write(m.join("new"), b"gone after the rollback").unwrap();
    // In use: a file open in the mount.
    let open = fs::File::open(m.join("new")).unwrap();
    let e = fails(&cairn(&s.home, &["rollback", "tank/fs@s"]));
    assert!(e.contains("in use") && e.contains("cairn umount"), "{e}");
    assert_eq!(fs::read(m.join("kept")).unwrap(), b"after, longer");
    drop(open);
    ok(&cairn(&s.home, &["rollback", "tank/fs@s"]));
    assert_eq!(fs::read(m.join("kept")).unwrap(), b"before");
    assert!(!m.join("new").exists());
    // Still served by the same mount table: writes go on, and umount works.
    fs::write(m.join("later"), b"x").unwrap();
    let mounts = ok(&cairn(&s.home, &["mount"]));
    assert!(mounts.contains("tank/fs"), "{mounts}");
    umount(&s);
    let ls = ok(&cairn(&s.home, &["ls", "tank/fs"]));
    assert!(
        ls.contains("kept") && ls.contains("later") && !ls.contains("new"),
        "{ls}"
    );
}
