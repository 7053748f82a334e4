//! `cairn put` is all or nothing (issue 12, item 6): a failed or killed put leaves the old
//! file (or none) under the final name, never a part of the new one; a destination ending
//! in `/` must name an existing dataset or directory.

mod support;

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use support::{cairn, cairn_cmd, fails, files, ok, ok_bytes, pseudo_random, MIB};

fn names_in(home: &std::path::Path, dir: &str) -> Vec<String> {
    ok(&cairn(home, &["ls", dir]))
        .lines()
        .filter_map(|l| l.split_whitespace().last().map(String::from))
        .collect()
}

#[test]
fn a_missing_dataset_with_a_slash_is_an_error_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 128 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    let f = dir.path().join("f");
    std::fs::write(&f, b"hello").unwrap();
    let f = f.display().to_string();
    let e = fails(&cairn(&home, &["put", &f, "tank/nosuchds/"]));
    assert!(
        e.contains("not a dataset or directory") && e.contains("dataset create"),
        "{e}"
    );
    assert!(names_in(&home, "tank").is_empty());
    // Into an existing dataset with a slash: the file keeps its name.
    ok(&cairn(&home, &["dataset", "create", "tank/ds"]));
    ok(&cairn(&home, &["put", &f, "tank/ds/"]));
    assert_eq!(names_in(&home, "tank/ds"), ["f"]);
    assert_eq!(ok_bytes(&cairn(&home, &["cat", "tank/ds/f"])), b"hello");
}

#[test]
fn a_put_that_runs_out_of_space_keeps_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 128 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    let old = pseudo_random(8 * MIB as usize, 1);
    let small = dir.path().join("small");
    std::fs::write(&small, &old).unwrap();
    ok(&cairn(
        &home,
        &["put", &small.display().to_string(), "tank/f"],
    ));
    let big = dir.path().join("big");
    std::fs::write(&big, pseudo_random(200 * MIB as usize, 2)).unwrap();
    let e = fails(&cairn(
        &home,
        &["put", "-f", &big.display().to_string(), "tank/f"],
    ));
    assert!(e.contains("out of space"), "{e}");
    assert_eq!(ok_bytes(&cairn(&home, &["cat", "tank/f"])), old);
    assert_eq!(names_in(&home, "tank"), ["f"], "no partial file is left");
    let scrub = ok(&cairn(&home, &["scrub", "tank"]));
    assert!(scrub.contains(", 0 errors"), "{scrub}");
    // The space of the partial copy came back: a file that fits goes in.
    let fits = dir.path().join("fits");
    std::fs::write(&fits, pseudo_random(20 * MIB as usize, 3)).unwrap();
    ok(&cairn(
        &home,
        &["put", &fits.display().to_string(), "tank/g"],
    ));
}

#[test]
fn a_killed_put_leaves_the_old_file_and_the_next_put_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 256 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    let old = pseudo_random(3 * MIB as usize, 4);
    let src = dir.path().join("old");
    std::fs::write(&src, &old).unwrap();
    ok(&cairn(
        &home,
        &["put", &src.display().to_string(), "tank/f"],
    ));
    for round in 0..3u64 {
        // A small dirty cap: the partial new copy reaches the disk in several txgs.
        let mut put = cairn_cmd(&home)
            .args(["--tunable", "dirty_max=1M", "put", "-f", "-", "tank/f"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = put.stdin.take().unwrap();
        for i in 0..(4 + round * 3) {
            stdin
                .write_all(&pseudo_random(MIB as usize, 100 + i))
                .unwrap();
        }
        std::thread::sleep(Duration::from_millis(150));
        put.kill().unwrap();
        put.wait().unwrap();
        drop(stdin);
        assert_eq!(
            ok_bytes(&cairn(&home, &["cat", "tank/f"])),
            old,
            "round {round}: the final name still holds the old file"
        );
    }
    let scrub = ok(&cairn(&home, &["scrub", "tank"]));
    assert!(scrub.contains(", 0 errors"), "{scrub}");
    // The next put into the directory removes what killed puts left.
    let other = dir.path().join("other");
    std::fs::write(&other, b"x").unwrap();
    ok(&cairn(
        &home,
        &["put", &other.display().to_string(), "tank/other"],
    ));
    assert_eq!(names_in(&home, "tank"), ["f", "other"]);
}
