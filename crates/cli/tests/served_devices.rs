//! `attach`, `detach`, `add` and `remove` against a pool that `cairn serve` holds: they run
//! in the service while clients write (issue 14), and the pool reads back whole, after a
//! re-import too.

mod support;

use std::time::Duration;

use support::served::{
    check_numbered, export_and_import, put_numbered, scrub_is_clean, serve, serve_with,
    start_and_wait_for, status_when, while_putting,
};
use support::{
    cairn, fails, files, grow_files, ok, pool_size, pseudo_random, spare_state, state_of, MIB,
};

/// Waits until `cairn events` shows `n` events of `class` (the service writes its events
/// within a second); more is a failure too.
fn events_reach(home: &std::path::Path, class: &str, n: usize) {
    let start = std::time::Instant::now();
    loop {
        let events = ok(&cairn(home, &["events", "-H", "tank"]));
        let seen = events.matches(class).count();
        if seen == n {
            return;
        }
        assert!(
            seen < n && start.elapsed() < Duration::from_secs(10),
            "{seen} {class} events, {n} expected: {events}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A disk becomes a mirror and a three-way mirror while a client writes; the new sides
/// are resilvered by the service and hold everything; a detached side is free for reuse
/// at once (labels cleared, its lock released) while the service goes on.
#[test]
fn attach_and_detach_run_in_the_service_while_clients_write() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 3, 128 * MIB);
    ok(&cairn(&home, &["create", "tank", &d[0]]));
    let put = |i: usize| put_numbered(&home, dir.path(), i);
    (0..4).for_each(put);
    let served = serve(&home, "tank");
    let attached = while_putting(
        &home,
        dir.path(),
        4..12,
        Duration::from_millis(200),
        &["attach", "tank", &d[0], &d[1]],
    );
    assert!(
        attached.starts_with("resilvered ") && attached.contains("with 0 errors"),
        "{attached}"
    );
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(st.contains("mirror-0") && st.contains(&d[1]), "{st}");
    // Writes taken while the attach ran reached d1 too (or its DTL, resilvered since).
    ok(&cairn(&home, &["resilver", "tank"]));
    ok(&cairn(&home, &["offline", "tank", &d[0]]));
    check_numbered(&home, 12);
    ok(&cairn(&home, &["online", "tank", &d[0]]));
    ok(&cairn(&home, &["resilver", "tank"]));
    ok(&cairn(&home, &["attach", "tank", &d[1], &d[2]]));
    let e = fails(&cairn(&home, &["attach", "tank", &d[0], &d[2]]));
    assert!(e.contains("already part of this pool"), "{e}");
    // Detach while a client writes; the side that left is free at once.
    while_putting(
        &home,
        dir.path(),
        12..16,
        Duration::from_millis(100),
        &["detach", "tank", &d[0]],
    );
    let e = fails(&cairn(&home, &["labels", &d[0]]));
    assert!(e.contains("no valid cairn label"), "{e}");
    ok(&cairn(&home, &["create", "other", &d[0]]));
    ok(&cairn(&home, &["destroy", "other"]));
    ok(&cairn(&home, &["detach", "tank", &d[1]]));
    let e = fails(&cairn(&home, &["detach", "tank", &d[2]]));
    assert!(e.contains("only a side of a mirror"), "{e}");
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(!st.contains("mirror-0") && st.contains(&d[2]), "{st}");
    let history = ok(&cairn(&home, &["history", "tank"]));
    assert!(
        history.contains(&format!("cairn detach tank {}", d[1])),
        "{history}"
    );
    events_reach(&home, "vdev_attach", 2);
    events_reach(&home, "vdev_remove", 2);
    check_numbered(&home, 16);
    served.stop();
    export_and_import(&home, dir.path());
    check_numbered(&home, 16);
    scrub_is_clean(&home);
}

/// Detaching the side a resilver is copying to, while it runs (as `zpool detach` cancels
/// a replace): the resilver pauses, the side goes, nothing is left to resilver, and the
/// pool holds everything. The side the resilver copies from cannot go.
#[test]
fn detach_while_the_service_resilvers() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 128 * MIB);
    ok(&cairn(&home, &["create", "tank", &d[0]]));
    let put = |i: usize| put_numbered(&home, dir.path(), i);
    (0..12).for_each(put);
    // 2 MB/s: copying 12 MiB to a new side takes several seconds.
    let served = serve_with(&home, "tank", &[("CAIRN_RESILVER_RATE", "2M")]);
    let attach = start_and_wait_for(
        &home,
        &["attach", "tank", &d[0], &d[1]],
        "resilver in progress",
    );
    let e = fails(&cairn(&home, &["detach", "tank", &d[0]]));
    assert!(e.contains("no valid replicas"), "{e}");
    let start = std::time::Instant::now();
    ok(&cairn(&home, &["detach", "tank", &d[1]]));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the resilver paused late"
    );
    let said = attach.wait_with_output().unwrap();
    assert!(said.status.success(), "{said:?}");
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        !st.contains(&d[1]) && !st.contains("resilver in progress"),
        "{st}"
    );
    let e = fails(&cairn(&home, &["labels", &d[1]]));
    assert!(e.contains("no valid cairn label"), "{e}");
    check_numbered(&home, 12);
    served.stop();
    check_numbered(&home, 12);
    scrub_is_clean(&home);
}

/// A side of a mirror is detached and a log device removed while the service scrubs
/// (zpool lets both run during a scrub): the scrub goes on and ends clean, and the pool
/// holds everything, after a re-import too.
#[test]
fn detach_and_remove_while_the_service_scrubs() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 4, 128 * MIB);
    ok(&cairn(
        &home,
        &[
            "create", "tank", "mirror", &d[0], &d[1], &d[2], "log", &d[3],
        ],
    ));
    (0..8).for_each(|i| put_numbered(&home, dir.path(), i));
    let served = serve(&home, "tank");
    // 8 MiB examined at 2 MB/s: the scrub runs for about 4 s.
    let scrub = start_and_wait_for(
        &home,
        &["scrub", "--rate", "2M", "tank"],
        "scan: scrub scanning",
    );
    ok(&cairn(&home, &["detach", "tank", &d[0]]));
    ok(&cairn(&home, &["remove", "tank", &d[3]]));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        st.contains("scan: scrub scanning") && !st.contains(&d[0]) && !st.contains(&d[3]),
        "the scrub ended before the changes: {st}"
    );
    let said = scrub.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&said.stdout);
    assert!(
        said.status.success() && out.contains(" 0 errors"),
        "{said:?}"
    );
    for gone in [&d[0], &d[3]] {
        let e = fails(&cairn(&home, &["labels", gone]));
        assert!(e.contains("no valid cairn label"), "{e}");
    }
    check_numbered(&home, 8);
    served.stop();
    export_and_import(&home, dir.path());
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        st.contains(&d[1]) && st.contains(&d[2]) && !st.contains(&d[0]),
        "{st}"
    );
    check_numbered(&home, 8);
    scrub_is_clean(&home);
}

/// A data mirror and a log device are added while a client writes; new writes use the
/// new vdev; the log device is removed again (labels cleared), with a disk added after it
/// (it leaves a hole), and the pool re-imports with everything. What cannot be done is
/// refused as in-process.
#[test]
fn add_and_remove_run_in_the_service_while_clients_write() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 6, 128 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    let put = |i: usize| put_numbered(&home, dir.path(), i);
    (0..4).for_each(put);
    let served = serve(&home, "tank");
    let before = pool_size(&home);
    while_putting(
        &home,
        dir.path(),
        4..10,
        Duration::from_millis(200),
        &["add", "tank", "mirror", &d[2], &d[3]],
    );
    let after = pool_size(&home);
    assert!(after > before, "size {before} -> {after}");
    (10..24).for_each(put);
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(st.contains("mirror-1") && st.contains(&d[3]), "{st}");
    let iostat = ok(&cairn(&home, &["iostat", "-v", "-H", "-p", "tank"]));
    let mirror1 = iostat
        .lines()
        .find(|l| l.trim_start().starts_with("mirror-1"))
        .unwrap_or_else(|| panic!("{iostat}"));
    let alloc: u64 = mirror1.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(alloc > 0, "nothing was written to the new vdev: {iostat}");
    // Refusals, as in-process.
    let e = fails(&cairn(&home, &["add", "tank", &d[4]]));
    assert!(e.contains("mismatched replication"), "{e}");
    let e = fails(&cairn(&home, &["remove", "tank", "mirror-1"]));
    assert!(e.contains("only log devices can be removed"), "{e}");
    events_reach(&home, "vdev_add", 1);
    // A log device comes and goes while fsync'd writes would use it; a vdev added after
    // it keeps its index (the log leaves a hole).
    ok(&cairn(&home, &["add", "tank", "log", &d[4]]));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(st.contains("logs") && st.contains(&d[4]), "{st}");
    (24..26).for_each(put);
    ok(&cairn(&home, &["add", "-f", "tank", &d[5]]));
    (26..30).for_each(put);
    ok(&cairn(&home, &["remove", "tank", &d[4]]));
    let e = fails(&cairn(&home, &["labels", &d[4]]));
    assert!(e.contains("no valid cairn label"), "{e}");
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(!st.contains(&d[4]) && !st.contains("hole"), "{st}");
    (30..32).for_each(put);
    check_numbered(&home, 32);
    served.stop();
    export_and_import(&home, dir.path());
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        st.contains("mirror-1") && st.contains(&d[5]) && !st.contains(&d[4]),
        "{st}"
    );
    check_numbered(&home, 32);
    scrub_is_clean(&home);
}

/// Vdevs grow under the service: by `online -e`, and with `autoexpand=on` by themselves
/// (the service measures its devices every second); the new room takes data the old
/// vdev could not hold, and the pool re-imports with it.
#[test]
fn vdevs_grow_under_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 128 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    let size = || pool_size(&home);
    let grow = |len: u64| grow_files(&d, len);
    let big = |name: &str, mib: usize, seed: u64| {
        let src = dir.path().join(name);
        std::fs::write(&src, pseudo_random(mib * MIB as usize, seed)).unwrap();
        src.to_str().unwrap().to_string()
    };
    let (first, second, third) = (
        big("first", 40, 1),
        big("second", 60, 2),
        big("third", 100, 3),
    );
    ok(&cairn(&home, &["put", &first, "tank/first"]));
    let served = serve(&home, "tank");
    let before = size();
    grow(256 * MIB);
    let e = fails(&cairn(&home, &["put", &second, "tank/second"]));
    assert!(e.contains("out of space"), "{e}");
    let out = ok(&cairn(&home, &["online", "-e", "tank", &d[0]]));
    assert!(out.contains("expanded a vdev from"), "{out}");
    let grown = size();
    assert!(grown > before + 100 * MIB, "{before} -> {grown}");
    ok(&cairn(&home, &["put", &second, "tank/second"]));
    ok(&cairn(&home, &["set", "autoexpand=on", "tank"]));
    grow(384 * MIB);
    let start = std::time::Instant::now();
    while size() < grown + 100 * MIB {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "autoexpand did not grow the vdev"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    ok(&cairn(&home, &["put", &third, "tank/third"]));
    let events = ok(&cairn(&home, &["events", "-H", "tank"]));
    assert_eq!(events.matches("vdev_expand").count(), 2, "{events}");
    served.stop();
    export_and_import(&home, dir.path());
    for (name, src) in [("first", &first), ("second", &second), ("third", &third)] {
        let got = cairn(&home, &["cat", &format!("tank/{name}")]).stdout;
        assert!(got == std::fs::read(src).unwrap(), "{name} differs");
    }
    scrub_is_clean(&home);
}

/// A hot spare added in the service is AVAIL at once, and takes the place of a leaf that
/// fails afterwards (the service puts it in and resilvers it); the pool re-imports with
/// it in use and everything readable.
#[test]
fn a_spare_added_in_the_service_takes_over_a_failing_leaf() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 3, 128 * MIB);
    let failing = format!("fault:{}", d[0]);
    ok(&cairn(
        &home,
        &["create", "tank", "mirror", &failing, &d[1]],
    ));
    let put = |i: usize| put_numbered(&home, dir.path(), i);
    (0..4).for_each(put);
    let served = serve(&home, "tank");
    ok(&cairn(&home, &["add", "tank", "spare", &d[2]]));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(st.contains("spares") && st.contains("AVAIL"), "{st}");
    let e = fails(&cairn(&home, &["add", "tank", "spare", &d[2]]));
    assert!(e.contains("already part of this pool"), "{e}");
    std::fs::create_dir(dir.path().join("x")).unwrap();
    let extra = files(&dir.path().join("x"), 1, 128 * MIB);
    let e = fails(&cairn(
        &home,
        &["add", "tank", "spare", &extra[0], &extra[0]],
    ));
    assert!(e.contains("named twice"), "{e}");
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        !st.contains(&extra[0]),
        "nothing of a refused add is kept: {st}"
    );
    // d0 fails every read and write from now on (the fault leaf polls its control file).
    set_fault(&d[0], "fail_reads=1&fail_writes=1");
    (4..8).for_each(put);
    let st = spare_in_and_resilvered(&home);
    assert!(st.contains("spare-0"), "{st}");
    check_numbered(&home, 8);
    served.stop();
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(st.contains("spare-0") && st.contains("INUSE"), "{st}");
    check_numbered(&home, 8);
}

fn nothing_to_resilver(st: &str) -> bool {
    !st.contains("resilver in progress") && !st.contains("needs resilver")
}

/// Waits until `status` shows a spare in use and nothing left to resilver.
fn spare_in_and_resilvered(home: &std::path::Path) -> String {
    status_when(home, "spare in use", |st| {
        st.contains("INUSE") && nothing_to_resilver(st)
    })
}

/// Waits until `status` shows nothing left to resilver.
fn resilvered(home: &std::path::Path) -> String {
    status_when(home, "end of the resilver", nothing_to_resilver)
}

/// Sets what the fault leaf over `path` fails ("" for nothing) and waits for it to see it.
fn set_fault(path: &str, how: &str) {
    std::fs::write(format!("{path}.fault"), how).unwrap();
    std::thread::sleep(cairn_vdev::fault::CONTROL_POLL + Duration::from_millis(50));
}

/// Reads every numbered file with `other` offline, so the side under test serves them
/// alone, then brings `other` back and waits for its resilver.
fn check_alone(home: &std::path::Path, other: &str, n: usize) {
    ok(&cairn(home, &["offline", "tank", other]));
    check_numbered(home, n);
    ok(&cairn(home, &["online", "tank", other]));
    resilvered(home);
}

/// The `spare-N` group under the service, as zpool: `detach` of the spare gives the slot
/// back to the failed leaf (the spare is AVAIL again, the leaf is resilvered with every
/// txg it missed once it is online, and then serves every file alone); `online` of a
/// failed leaf takes its slot back the same way; `replace` of a failed leaf puts a new
/// device in (resilvered, the spare AVAIL again); `detach` of the failed leaf keeps the
/// spare in its slot for good. The pool re-imports with everything and scrubs clean.
#[test]
fn spare_groups_change_in_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 4, 128 * MIB);
    let failing = format!("fault:{}", d[0]);
    ok(&cairn(
        &home,
        &[
            "create", "tank", "mirror", &failing, &d[1], "spare", &d[2], &d[3],
        ],
    ));
    let put = |i: usize| put_numbered(&home, dir.path(), i);
    (0..4).for_each(put);
    let served = serve(&home, "tank");
    let fault = |how: &str| set_fault(&d[0], how);
    // Round 1: d0 fails, a spare takes over; files written while it serves; the spare
    // is detached (d0 has its slot back, faulted), d0 is mended and brought online.
    fault("fail_reads=1&fail_writes=1");
    (4..6).for_each(put);
    let st = spare_in_and_resilvered(&home);
    let first = if spare_state(&st, &d[2]) == "INUSE" {
        &d[2]
    } else {
        &d[3]
    };
    (6..10).for_each(put);
    // Refused: giving the slot back while the other side is offline (nothing would hold
    // the data whole), a replace by a device of the pool, an offline inside the group.
    ok(&cairn(&home, &["offline", "tank", &d[1]]));
    let e = fails(&cairn(&home, &["detach", "tank", first]));
    assert!(e.contains("no valid replicas"), "{e}");
    ok(&cairn(&home, &["online", "tank", &d[1]]));
    resilvered(&home);
    let e = fails(&cairn(&home, &["replace", "tank", &failing, &d[1]]));
    assert!(e.contains("already part of this pool"), "{e}");
    let e = fails(&cairn(&home, &["offline", "tank", &failing]));
    assert!(
        e.contains("inside a spare group") && e.contains("detach"),
        "{e}"
    );
    ok(&cairn(&home, &["detach", "tank", first]));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        !st.contains("spare-0") && spare_state(&st, first) == "AVAIL" && st.contains("DEGRADED"),
        "{st}"
    );
    check_numbered(&home, 10);
    fault("");
    ok(&cairn(&home, &["online", "tank", &failing]));
    let st = resilvered(&home);
    assert_eq!(state_of(&st, &failing), "ONLINE", "{st}");
    check_alone(&home, &d[1], 10);
    // Round 2: d0 fails again and a spare takes over; `online d0` once d0 is mended
    // gives the slot back the same way.
    fault("fail_reads=1&fail_writes=1");
    (10..12).for_each(put);
    spare_in_and_resilvered(&home);
    (12..14).for_each(put);
    fault("");
    ok(&cairn(&home, &["online", "tank", &failing]));
    let st = resilvered(&home);
    assert!(
        !st.contains("spare-0") && !st.contains("INUSE") && state_of(&st, &failing) == "ONLINE",
        "{st}"
    );
    check_alone(&home, &d[1], 14);
    // Round 3: d0 fails again; `replace` puts a new device (n0, itself a fault leaf for
    // round 4) in its slot: n0 is resilvered with everything, the spare is AVAIL again.
    fault("fail_reads=1&fail_writes=1");
    (14..16).for_each(put);
    spare_in_and_resilvered(&home);
    std::fs::create_dir(dir.path().join("n")).unwrap();
    let n0 = files(&dir.path().join("n"), 1, 128 * MIB).remove(0);
    let new = format!("fault:{n0}");
    let e = fails(&cairn(&home, &["replace", "tank", &failing]));
    assert!(
        e.contains("still there and open") && e.contains("online"),
        "{e}"
    );
    ok(&cairn(&home, &["replace", "tank", &failing, &new]));
    let st = resilvered(&home);
    assert!(
        !st.contains("spare-0")
            && !st.contains(&d[0])
            && state_of(&st, &new) == "ONLINE"
            && spare_state(&st, &d[2]) == "AVAIL"
            && spare_state(&st, &d[3]) == "AVAIL",
        "{st}"
    );
    check_alone(&home, &d[1], 16);
    // Round 4: n0 fails for good; detaching it keeps the spare in its slot.
    set_fault(&n0, "fail_reads=1&fail_writes=1");
    (16..18).for_each(put);
    let st = spare_in_and_resilvered(&home);
    let (kept, other) = match spare_state(&st, &d[2]).as_str() {
        "INUSE" => (&d[2], &d[3]),
        _ => (&d[3], &d[2]),
    };
    ok(&cairn(&home, &["detach", "tank", &new]));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        !st.contains("spare-0")
            && !st.contains(&n0)
            && state_of(&st, kept) == "ONLINE"
            && spare_state(&st, kept).is_empty()
            && spare_state(&st, other) == "AVAIL"
            && st.contains("state: ONLINE"),
        "{st}"
    );
    check_alone(&home, &d[1], 18);
    served.stop();
    export_and_import(&home, dir.path());
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        state_of(&st, kept) == "ONLINE" && spare_state(&st, other) == "AVAIL",
        "{st}"
    );
    check_numbered(&home, 18);
    scrub_is_clean(&home);
}
