//! `cairn scrub --rate` (and the `scrub_rate` tunable) keeps a scrub to a pace (issue 14).

mod support;

use std::time::Instant;

use support::{cairn, cairn_cmd, fails, files, ok, paused_then_canceled, pseudo_random, MIB};

#[test]
fn a_rate_limited_scrub_keeps_its_pace_and_finds_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 128 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    let src = dir.path().join("f");
    std::fs::write(&src, pseudo_random(16 * MIB as usize, 9)).unwrap();
    ok(&cairn(&home, &["put", src.to_str().unwrap(), "tank/f"]));
    let timed = |args: &[&str]| {
        let start = Instant::now();
        let out = ok(&cairn(&home, args));
        (start.elapsed().as_secs_f64(), out)
    };
    let (fast, out) = timed(&["scrub", "tank"]);
    assert!(out.contains("0 errors"), "{out}");
    // 16 MiB of file data examined at 8 MiB/s: about 2 s.
    let (slow, out) = timed(&["scrub", "--rate", "8M", "tank"]);
    assert!(out.contains("0 errors"), "{out}");
    assert!(
        (1.6..6.0).contains(&slow),
        "--rate 8M took {slow:.2} s (unlimited: {fast:.2} s)"
    );
    assert!(
        fast < slow / 2.0,
        "unlimited {fast:.2} s, limited {slow:.2} s"
    );
    // The tunable sets the default.
    let start = Instant::now();
    let out = cairn_cmd(&home)
        .args(["--tunable", "scrub_rate=16M", "scrub", "tank"])
        .output()
        .unwrap();
    ok(&out);
    let t = start.elapsed().as_secs_f64();
    assert!((0.8..4.0).contains(&t), "scrub_rate=16M took {t:.2} s");
    let e = fails(&cairn(&home, &["scrub", "--rate", "fast", "tank"]));
    assert!(
        e.contains("bad scrub rate 'fast'") && e.contains("e.g. 50M"),
        "{e}"
    );
}

/// The scrub's state is kept in the pool (issue 13): a scrub another shell pauses is
/// paused in the labels, a paused one is canceled without a process running it, and the
/// `scan:` line moves with the pool to another state directory.
#[test]
fn the_scrub_state_is_kept_in_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let leaves = dir.path().join("leaves");
    std::fs::create_dir(&leaves).unwrap();
    let d = files(&leaves, 2, 128 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    let src = dir.path().join("f");
    std::fs::write(&src, pseudo_random(16 * MIB as usize, 3)).unwrap();
    ok(&cairn(&home, &["put", src.to_str().unwrap(), "tank/f"]));
    // A slow scrub in one process, paused from another (which cannot take the pool, and
    // reads the scrub's state from the labels).
    let slow = cairn_cmd(&home)
        .args(["scrub", "--rate", "2M", "tank"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut paused = None;
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let out = cairn(&home, &["scrub", "-p", "tank"]);
        if out.status.success() {
            paused = Some(out);
            break;
        }
    }
    assert!(paused.is_some(), "scrub -p never found the running scrub");
    // Canceled with no process scrubbing: the labels change.
    paused_then_canceled(&home, slow);
    let e = fails(&cairn(&home, &["scrub", "-s", "tank"]));
    assert!(e.contains("no scrub in progress"), "{e}");
    // A finished scrub's line goes with the pool to a state directory that never saw it.
    ok(&cairn(&home, &["scrub", "tank"]));
    ok(&cairn(&home, &["export", "tank"]));
    let other = dir.path().join("other-home");
    ok(&cairn(
        &other,
        &["import", "-d", leaves.to_str().unwrap(), "tank"],
    ));
    let status = ok(&cairn(&other, &["status", "tank"]));
    assert!(status.contains("scan: scrub repaired 0B"), "{status}");
}
