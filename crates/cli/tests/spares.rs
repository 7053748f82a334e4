//! Detaching inside a `spare-N` group (issue 12, item 8), as zpool: the spare gives the
//! slot back, or the failed leaf gives it to the spare for good; no redundancy is lost
//! beyond the side detached, and every leaf is found by the name `status` shows.

mod support;

use support::{cairn, fails, files, ok, ok_bytes, pseudo_random, spare_state, state_of, MIB};

/// A 3-way mirror (d0 d1 d2) with spare s0 standing in for d0, resilvered; `data` in it.
fn pool_with_spare_in_use(
    dir: &std::path::Path,
) -> (std::path::PathBuf, Vec<String>, String, Vec<u8>) {
    let home = dir.join("home");
    let d = files(dir, 4, 128 * MIB);
    let spare = d[3].clone();
    ok(&cairn(
        &home,
        &[
            "create", "tank", "mirror", &d[0], &d[1], &d[2], "spare", &spare,
        ],
    ));
    let data = pseudo_random(6 * MIB as usize, 11);
    let src = dir.join("data");
    std::fs::write(&src, &data).unwrap();
    ok(&cairn(
        &home,
        &["put", &src.display().to_string(), "tank/data"],
    ));
    ok(&cairn(&home, &["offline", "tank", &d[1]]));
    ok(&cairn(&home, &["online", "tank", &d[1]]));
    // d0 becomes unreadable garbage-free: missing. The spare takes its slot.
    std::fs::rename(&d[0], dir.join("d0.away")).unwrap();
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert_eq!(spare_state(&st, &spare), "INUSE", "{st}");
    ok(&cairn(&home, &["resilver", "tank"]));
    (home, d, spare, data)
}

#[test]
fn detaching_the_spare_gives_the_slot_back_and_the_spare_is_avail_again() {
    let dir = tempfile::tempdir().unwrap();
    let (home, d, spare, data) = pool_with_spare_in_use(dir.path());
    // Written while the spare serves d0's slot: d0 misses it.
    let later = pseudo_random(3 * MIB as usize, 12);
    let src = dir.path().join("later");
    std::fs::write(&src, &later).unwrap();
    ok(&cairn(
        &home,
        &["put", &src.display().to_string(), "tank/later"],
    ));
    ok(&cairn(&home, &["detach", "tank", &spare]));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert_eq!(spare_state(&st, &spare), "AVAIL", "{st}");
    assert!(st.contains("mirror-0"), "still a 3-way mirror: {st}");
    for leaf in &d[..3] {
        assert!(
            st.contains(leaf.as_str()),
            "{leaf} still in the mirror: {st}"
        );
    }
    assert!(!st.contains("spare-0"), "{st}");
    assert!(st.contains("state: DEGRADED"), "d0 is still missing: {st}");
    assert_eq!(ok_bytes(&cairn(&home, &["cat", "tank/data"])), data);
    // The disk comes back: online finds it by its name and resilvers it.
    std::fs::rename(dir.path().join("d0.away"), &d[0]).unwrap();
    ok(&cairn(&home, &["online", "tank", &d[0]]));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(st.contains("state: ONLINE"), "{st}");
    // d0 was resilvered with everything it missed since it failed: alone, it serves both.
    ok(&cairn(&home, &["offline", "tank", &d[1]]));
    ok(&cairn(&home, &["offline", "tank", &d[2]]));
    assert_eq!(ok_bytes(&cairn(&home, &["cat", "tank/data"])), data);
    assert_eq!(ok_bytes(&cairn(&home, &["cat", "tank/later"])), later);
    ok(&cairn(&home, &["online", "tank", &d[1]]));
    ok(&cairn(&home, &["online", "tank", &d[2]]));
    let scrub = ok(&cairn(&home, &["scrub", "tank"]));
    assert!(
        scrub.contains("repaired 0") && scrub.contains(", 0 errors"),
        "{scrub}"
    );
}

#[test]
fn detaching_the_failed_leaf_keeps_the_spare_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let (home, d, spare, data) = pool_with_spare_in_use(dir.path());
    // offline of the replaced leaf says what to do instead.
    let e = fails(&cairn(&home, &["offline", "tank", &d[0]]));
    assert!(
        e.contains("already serves in its place") && e.contains("detach"),
        "{e}"
    );
    ok(&cairn(&home, &["detach", "tank", &d[0]]));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(!st.contains("spares") && !st.contains("spare-0"), "{st}");
    assert_eq!(state_of(&st, &spare), "ONLINE", "{st}");
    assert!(
        st.contains("state: ONLINE") && st.contains("mirror-0"),
        "{st}"
    );
    assert!(st.contains(&d[1]) && st.contains(&d[2]), "{st}");
    assert_eq!(ok_bytes(&cairn(&home, &["cat", "tank/data"])), data);
    let scrub = ok(&cairn(&home, &["scrub", "tank"]));
    assert!(scrub.contains(", 0 errors"), "{scrub}");
    // Survives export and import.
    ok(&cairn(&home, &["export", "tank"]));
    ok(&cairn(
        &home,
        &["import", "-d", &dir.path().display().to_string(), "tank"],
    ));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        st.contains("state: ONLINE") && !st.contains("spares"),
        "{st}"
    );
}
