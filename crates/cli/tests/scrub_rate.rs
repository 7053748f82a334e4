//! `cairn scrub --rate` (and the `scrub_rate` tunable) keeps a scrub to a pace (issue 14).

mod support;

use std::time::Instant;

use support::{cairn, cairn_cmd, fails, files, ok, pseudo_random, MIB};

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
