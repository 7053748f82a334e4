//! Messages that used to mislead (issue 12, item 12): each says what is wrong and what to do.

mod support;

use support::{cairn, fails, files, ok, MIB};

#[test]
fn bad_input_gets_a_message_that_fits_it() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 128 * MIB);

    let e = fails(&cairn(&home, &["import", "-d", "/nonexistent", "tank"]));
    assert!(
        e.contains("cannot look for devices in '/nonexistent'"),
        "{e}"
    );
    assert!(!e.contains("state directory"), "{e}");

    let e = fails(&cairn(&home, &["create", "tank", "/dev/sdz9"]));
    assert!(e.contains("no such device") && e.contains("lsblk"), "{e}");
    assert!(!e.contains("truncate"), "{e}");

    let e = fails(&cairn(
        &home,
        &["create", "--direct", "-o", "ashift=9", "tank", &d[0]],
    ));
    assert!(
        e.contains("O_DIRECT needs I/O aligned") && e.contains("ashift=12"),
        "{e}"
    );
    assert!(!e.contains("os error 22"), "{e}");

    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    for size in ["0", "99999999999999999999", "1e30", "lots"] {
        let e = fails(&cairn(&home, &["volume", "create", "-V", size, "tank/vol"]));
        assert!(e.contains("bad volume size"), "-V {size}: {e}");
    }
    let e = fails(&cairn(&home, &["dataset", "create", "tank@s1"]));
    assert!(e.contains("snapshot") && !e.contains("no such pool"), "{e}");
    let e = fails(&cairn(&home, &["dataset", "create", "tank/a b"]));
    assert!(e.contains("invalid name"), "{e}");
    // Nothing was created by any of these.
    let list = ok(&cairn(&home, &["dataset", "list", "-H", "tank"]));
    assert_eq!(list.lines().count(), 1, "{list}");
}

#[test]
fn damage_beyond_parity_found_by_a_read_shows_in_status_without_a_scrub() {
    use support::pseudo_random;
    let dir = tempfile::tempdir().unwrap();
    let (home, d, _) = support::raidz1_with_data(dir.path(), 128 * MIB, 16 * MIB as usize, 8);
    // The same rows on two of the three leaves: beyond raidz1's parity.
    for leaf in &d[..2] {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(leaf).unwrap();
        for off in (4 * MIB..40 * MIB).step_by(MIB as usize) {
            f.write_all_at(&pseudo_random(MIB as usize, off), off)
                .unwrap();
        }
    }
    let out = cairn(&home, &["cat", "tank/data"]);
    assert!(
        !out.status.success(),
        "a damaged file reads as an error, never wrong data"
    );
    let status = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        status.contains("status: One or more devices has experienced an error resulting in data"),
        "{status}"
    );
    assert!(
        status.contains("action: Restore the file in question"),
        "{status}"
    );
    assert!(status.contains("errors: 1 data errors"), "{status}");
    let cksum: u64 = status
        .lines()
        .filter(|l| d.iter().any(|p| l.contains(p.as_str())))
        .map(|l| l.split_whitespace().nth(4).unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(cksum > 0, "the leaves read get checksum errors: {status}");
}

#[test]
fn scrub_pause_and_stop_need_a_scrub_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 64 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    let e = fails(&cairn(&home, &["scrub", "-p", "tank"]));
    assert!(e.contains("no scrub in progress"), "{e}");
    ok(&cairn(&home, &["scrub", "tank"]));
    let e = fails(&cairn(&home, &["scrub", "-s", "tank"]));
    assert!(e.contains("no scrub in progress"), "{e}");
    let status = ok(&cairn(&home, &["status", "tank"]));
    assert!(status.contains("scan: scrub repaired"), "{status}");
}
