//! One owner per pool, and nothing lost to a damaged label ring (issue 12, items 1–3 and 7):
//! a pool is owned whole or not at all, a second process is refused naming the holder and
//! changes nothing; `create -f` never takes an active pool's devices; an import that finds
//! labels but no readable uberblock refuses and writes nothing; relative device paths are
//! stored absolute.

mod support;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use support::{cairn, cairn_cmd, fails, files, ok, ok_bytes, pseudo_random, MIB};

fn hash_files(paths: &[String]) -> Vec<blake3::Hash> {
    paths
        .iter()
        .map(|p| blake3::hash(&std::fs::read(p).unwrap()))
        .collect()
}

/// A `cairn put - POOL/DS/NAME` that holds the pool while it waits for standard input.
fn holder_put(home: &Path, dest: &str) -> Child {
    let mut child = cairn_cmd(home)
        .args(["put", "-", dest])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Some bytes so it has certainly opened the pool before the test goes on.
    child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(&pseudo_random(MIB as usize, 7))
        .unwrap();
    child
}

/// Waits until `cmd` is refused because the pool is in use (the holder has opened it).
fn wait_until_refused(home: &Path, args: &[&str]) -> String {
    let start = Instant::now();
    loop {
        let out = cairn(home, args);
        assert!(
            !out.status.success() || start.elapsed() < Duration::from_secs(20),
            "never refused"
        );
        if !out.status.success() {
            let e = String::from_utf8_lossy(&out.stderr).into_owned();
            if e.contains("in use") {
                return e;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_second_process_is_refused_whole_and_names_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 128 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    let small = dir.path().join("small");
    std::fs::write(&small, pseudo_random(300_000, 1)).unwrap();

    let mut holder = holder_put(&home, "tank/big");
    let small_arg = small.display().to_string();
    let e = wait_until_refused(&home, &["put", &small_arg, "tank/small"]);
    let pid = holder.id();
    assert!(
        e.contains(&format!(
            "pool 'tank' is in use by PID {pid} (`cairn put - tank/big`)"
        )),
        "{e}"
    );
    // Read-only commands are refused the same way (no half-open pool, no "missing" disks).
    let e = fails(&cairn(&home, &["status", "tank"]));
    assert!(e.contains("in use by PID"), "{e}");

    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    let status = ok(&cairn(&home, &["status", "tank"]));
    assert!(status.contains("state: ONLINE"), "{status}");
    assert!(
        !status.contains("DEGRADED") && !status.contains("UNAVAIL"),
        "{status}"
    );
    let ls = ok(&cairn(&home, &["ls", "tank"]));
    assert!(ls.contains("big") && !ls.contains("small"), "{ls}");
    let got = ok_bytes(&cairn(&home, &["cat", "tank/big"]));
    assert_eq!(got, pseudo_random(MIB as usize, 7));
    let scrub = ok(&cairn(&home, &["scrub", "tank"]));
    assert!(scrub.contains("0 errors"), "{scrub}");
}

#[test]
fn create_force_never_takes_the_devices_of_an_imported_pool() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 128 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    let before = hash_files(&d);

    // Without -f: refused, and the message no longer suggests -f for an active pool.
    let e = fails(&cairn(&home, &["create", "other", &d[0]]));
    assert!(e.contains("active pool 'tank'"), "{e}");
    assert!(e.contains("-f does not override"), "{e}");
    let e = fails(&cairn(&home, &["create", "-f", "other", &d[0]]));
    assert!(e.contains("active pool 'tank'"), "{e}");
    // From another state directory (the pool is not imported there) while a process holds
    // the pool: the device is locked, refused too.
    let mut holder = holder_put(&home, "tank/f");
    wait_until_refused(&home, &["status", "tank"]);
    let other_home = dir.path().join("home2");
    let e = fails(&cairn(&other_home, &["create", "-f", "other", &d[1]]));
    assert!(e.contains("in use"), "{e}");
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    assert_ne!(before, hash_files(&d), "the holder wrote its file");

    let status = ok(&cairn(&home, &["status", "tank"]));
    assert!(status.contains("state: ONLINE"), "{status}");
    assert_eq!(
        ok_bytes(&cairn(&home, &["cat", "tank/f"])),
        pseudo_random(MIB as usize, 7)
    );
    // Once exported, -f may reuse the devices (as zpool allows).
    ok(&cairn(&home, &["export", "tank"]));
    let e = fails(&cairn(&home, &["create", "other", &d[0]]));
    assert!(
        e.contains("exported pool 'tank'") && e.contains("-f"),
        "{e}"
    );
    ok(&cairn(&home, &["create", "-f", "other", &d[0]]));
}

/// Overwrites the uberblock ring of every label (128 KiB into each 256 KiB label).
fn smash_uberblock_rings(paths: &[String]) {
    use std::os::unix::fs::FileExt;
    for (i, p) in paths.iter().enumerate() {
        let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        let size = f.metadata().unwrap().len();
        for (j, off) in [0x20000, 0x60000, size - 0x60000, size - 0x20000]
            .into_iter()
            .enumerate()
        {
            f.write_all_at(&pseudo_random(0x20000, (i * 4 + j) as u64 + 99), off)
                .unwrap();
        }
    }
}

#[test]
fn import_with_every_uberblock_ring_unreadable_refuses_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (home, d, _) = support::raidz1_with_data(dir.path(), 256 * MIB, 8 * MIB as usize, 3);
    ok(&cairn(&home, &["export", "tank"]));
    smash_uberblock_rings(&d);
    let before = hash_files(&d);

    let scan = dir.path().display().to_string();
    let e = fails(&cairn(&home, &["import", "-d", &scan, "tank"]));
    assert!(e.contains("no uberblock could be read"), "{e}");
    assert!(e.contains("nothing was written"), "{e}");
    assert_eq!(before, hash_files(&d), "a refused import writes nothing");
    assert!(!ok(&cairn(&home, &["list"])).contains("tank"));
    // Asking again changes nothing either (no empty pool was ever created).
    fails(&cairn(&home, &["import", "-d", &scan, "tank"]));
    assert_eq!(before, hash_files(&d));
}

#[test]
fn relative_device_paths_are_stored_absolute() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    files(dir.path(), 3, 128 * MIB);
    let run = |args: &[&str]| {
        cairn_cmd(&home)
            .current_dir(dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    ok(&run(&["create", "tank", "mirror", "d0", "./d1"]));
    ok(&run(&["attach", "tank", "d0", "d2"]));
    // From another directory every leaf is still found.
    let status = ok(&cairn(&home, &["status", "tank"]));
    let abs = dir.path().display().to_string();
    for leaf in ["d0", "d1", "d2"] {
        assert!(status.contains(&format!("{abs}/{leaf}")), "{status}");
    }
    assert!(
        !status.contains("UNAVAIL") && !status.contains("./"),
        "{status}"
    );
    ok(&cairn(&home, &["export", "tank"]));
    ok(&run(&["import", "-d", ".", "tank"]));
    let status = ok(&cairn(&home, &["status", "tank"]));
    assert!(status.contains(&format!("{abs}/d0")), "{status}");
    assert!(status.contains("state: ONLINE"), "{status}");
}
