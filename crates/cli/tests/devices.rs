//! Device management end to end: offline/online with a DTL resilver, a disk lost and
//! replaced at the same path, attach (disk → mirror → 3-way), detach, add (refused on a
//! redundancy mismatch without -f), clear, and status's states, reasons and action lines.

mod support;

use std::path::{Path, PathBuf};

use support::{cairn, fails, files, ok, pseudo_random, MIB};

fn file(dir: &Path, name: &str, size: u64) -> String {
    let p: PathBuf = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(size).unwrap();
    p.display().to_string()
}

fn put(home: &Path, dir: &Path, name: &str, len: usize, seed: u8) -> Vec<u8> {
    let data: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i >> 9) as u8)
        .collect();
    let src = dir.join(format!("src-{name}"));
    std::fs::write(&src, &data).unwrap();
    ok(&cairn(
        home,
        &["put", src.to_str().unwrap(), &format!("tank/{name}")],
    ));
    data
}

fn cat(home: &Path, name: &str) -> Vec<u8> {
    let out = cairn(home, &["cat", &format!("tank/{name}")]);
    assert!(
        out.status.success(),
        "cat {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn state_of(status: &str, device: &str) -> String {
    status
        .lines()
        .find(|l| l.contains(device))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("")
        .to_string()
}

#[test]
fn offline_online_replace_and_scrub_clean() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d: Vec<String> = (0..3)
        .map(|i| file(dir.path(), &format!("d{i}"), 64 * MIB))
        .collect();
    ok(&cairn(
        &home,
        &["create", "tank", "raidz1", &d[0], &d[1], &d[2]],
    ));
    let a = put(&home, dir.path(), "a", 3 << 20, 1);

    ok(&cairn(&home, &["offline", "tank", &d[1]]));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert_eq!(state_of(&st, &d[1]), "OFFLINE", "{st}");
    assert!(
        st.contains("state: DEGRADED") && st.contains("action: Online the device"),
        "{st}"
    );
    // A second leaf cannot go: raidz1 has no redundancy left.
    let e = fails(&cairn(&home, &["offline", "tank", &d[2]]));
    assert!(e.contains("no valid replicas"), "{e}");
    let b = put(&home, dir.path(), "b", 2 << 20, 2);

    let out = ok(&cairn(&home, &["online", "tank", &d[1]]));
    assert!(out.contains("resilvered"), "{out}");
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        st.contains("state: ONLINE") && st.contains("scan: resilvered"),
        "{st}"
    );
    assert!(cat(&home, "a") == a, "a differs");
    assert!(cat(&home, "b") == b, "b differs");

    // The disk dies: a blank file at the same path, replaced in place.
    std::fs::remove_file(&d[0]).unwrap();
    file(dir.path(), "d0", 64 * MIB);
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert_eq!(state_of(&st, &d[0]), "UNAVAIL", "{st}");
    assert!(st.contains("cairn replace tank"), "{st}");
    ok(&cairn(&home, &["replace", "tank", &d[0]]));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(st.contains("state: ONLINE"), "{st}");
    let scrub = ok(&cairn(&home, &["scrub", "-w", "tank"]));
    assert!(
        scrub.contains("repaired 0B") || scrub.contains("repaired 0 "),
        "{scrub}"
    );
    assert!(cat(&home, "a") == a, "a differs");
    assert!(cat(&home, "b") == b, "b differs");
}

#[test]
fn attach_detach_add_and_clear() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d: Vec<String> = (0..6)
        .map(|i| file(dir.path(), &format!("d{i}"), 64 * MIB))
        .collect();
    ok(&cairn(&home, &["create", "tank", &d[0]]));
    let a = put(&home, dir.path(), "a", 2 << 20, 3);
    ok(&cairn(
        &home,
        &["attach", "--rate", "1G", "tank", &d[0], &d[1]],
    ));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(st.contains("mirror-0") && st.contains(&d[1]), "{st}");
    ok(&cairn(&home, &["attach", "tank", &d[1], &d[2]]));
    let json = ok(&cairn(&home, &["status", "--json", "tank"]));
    assert!(json.contains("\"kind\":\"mirror\""), "{json}");
    assert_eq!(json.matches("\"resilvering\":false").count(), 3, "{json}");
    // Every side holds the data: detach the original two and read.
    ok(&cairn(&home, &["detach", "tank", &d[0]]));
    ok(&cairn(&home, &["detach", "tank", &d[1]]));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(!st.contains("mirror-0") && !st.contains(&d[0]), "{st}");
    assert!(cat(&home, "a") == a, "a differs");
    let e = fails(&cairn(&home, &["detach", "tank", &d[2]]));
    assert!(e.contains("only a side of a mirror"), "{e}");

    let e = fails(&cairn(&home, &["add", "tank", "mirror", &d[3], &d[4]]));
    assert!(e.contains("mismatched replication level"), "{e}");
    ok(&cairn(
        &home,
        &["add", "-f", "tank", "mirror", &d[3], &d[4]],
    ));
    let b = put(&home, dir.path(), "b", 4 << 20, 4);
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(st.contains("mirror-1") && st.contains(&d[4]), "{st}");
    ok(&cairn(&home, &["clear", "tank"]));
    assert!(cat(&home, "a") == a, "a differs");
    assert!(cat(&home, "b") == b, "b differs");
    let e = fails(&cairn(&home, &["replace", "tank", "nonesuch", &d[5]]));
    assert!(e.contains("no such device"), "{e}");
    // Each change is an event, as zpool's: two attaches, two detaches, one add.
    let events = ok(&cairn(&home, &["events", "-H", "tank"]));
    for (class, n) in [("vdev_attach", 2), ("vdev_remove", 2), ("vdev_add", 1)] {
        assert_eq!(events.matches(class).count(), n, "{class}: {events}");
    }
}

#[test]
fn hot_spare_takes_over_and_returns_after_replace() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d: Vec<String> = (0..2)
        .map(|i| file(dir.path(), &format!("d{i}"), 64 * MIB))
        .collect();
    let spare = file(dir.path(), "s0", 64 * MIB);
    ok(&cairn(
        &home,
        &["create", "tank", "mirror", &d[0], &d[1], "spare", &spare],
    ));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        st.contains("spares") && state_of(&st, &spare) == "AVAIL",
        "{st}"
    );
    let a = put(&home, dir.path(), "a", 3 << 20, 5);
    // d0 dies: the next open puts the spare in its slot; the resilver fills it.
    std::fs::remove_file(&d[0]).unwrap();
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        st.contains("INUSE") && st.contains(&format!("standing in for {}", d[0])),
        "{st}"
    );
    ok(&cairn(&home, &["resilver", "tank"]));
    // Resilvered, the spare holds the data; the pool stays DEGRADED (as zpool shows a
    // spare group) until the failed disk is replaced.
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        st.contains("state: DEGRADED")
            && st.contains("spare-0")
            && st.contains("holds all its data")
            && st.contains(&format!("cairn replace tank {}", d[0])),
        "{st}"
    );
    assert!(cat(&home, "a") == a, "a differs");
    // Replacing the failed disk releases the spare.
    let new = file(dir.path(), "new0", 64 * MIB);
    ok(&cairn(&home, &["replace", "tank", &d[0], &new]));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        state_of(&st, &spare) == "AVAIL" && state_of(&st, &new) == "ONLINE",
        "{st}"
    );
    let scrub = ok(&cairn(&home, &["scrub", "-w", "tank"]));
    assert!(
        scrub.contains("with 0 errors") || scrub.contains(", 0 errors"),
        "{scrub}"
    );
    assert!(cat(&home, "a") == a, "a differs");
    let e = fails(&cairn(&home, &["create", "tank2", &d[1], "spare"]));
    assert!(e.contains("'spare' needs at least one device"), "{e}");
}

#[test]
fn temporary_offline_ends_at_import_which_resilvers() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d: Vec<String> = (0..2)
        .map(|i| file(dir.path(), &format!("d{i}"), 64 * MIB))
        .collect();
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    let a = put(&home, dir.path(), "a", 1 << 20, 7);
    ok(&cairn(&home, &["offline", "-t", "tank", &d[1]]));
    let b = put(&home, dir.path(), "b", 2 << 20, 8);
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert_eq!(state_of(&st, &d[1]), "OFFLINE", "{st}");
    ok(&cairn(&home, &["export", "tank"]));
    let out = ok(&cairn(
        &home,
        &["import", "-d", dir.path().to_str().unwrap(), "tank"],
    ));
    assert!(out.contains("resilvered"), "{out}");
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        st.contains("state: ONLINE") && state_of(&st, &d[1]) == "ONLINE",
        "{st}"
    );
    // The returned side holds everything: take the other one out and read.
    ok(&cairn(&home, &["offline", "tank", &d[0]]));
    assert!(cat(&home, "a") == a, "a differs");
    assert!(cat(&home, "b") == b, "b differs");
}

/// `cairn serve` heals the pool it serves: a mirror side that starts failing every I/O
/// (its fault control file flipped) while a client writes gets the hot spare in its slot,
/// the serving process resilvers the spare in the background, the client reads back what
/// it wrote, and after the server stops `replace` returns the spare to AVAIL.
#[test]
fn served_pool_puts_the_spare_in_and_resilvers_it() {
    use cairn_nbd::{parse_nbd_url, NbdClient};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d0 = file(dir.path(), "d0", 64 * MIB);
    let d1 = file(dir.path(), "d1", 64 * MIB);
    let spare = file(dir.path(), "s0", 64 * MIB);
    let failing = format!("fault:{d0}");
    ok(&cairn(
        &home,
        &["create", "tank", "mirror", &failing, &d1, "spare", &spare],
    ));
    ok(&cairn(
        &home,
        &["volume", "create", "-V", "32M", "-b", "16K", "tank/vol"],
    ));
    let socket = dir.path().join("nbd.sock");
    let serve = |home: &Path| {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["serve", "--nbd-socket", socket.to_str().unwrap()])
            .args(["--sync-interval", "0.5", "--duration", "120", "tank"])
            .env("CAIRN_HOME", home)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while !socket.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "serve did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        child
    };
    let stop = |mut child: std::process::Child| {
        // SAFETY: sending SIGTERM to our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        assert!(child.wait().unwrap().success(), "serve failed");
        let _ = std::fs::remove_file(&socket);
    };
    let url = parse_nbd_url(&format!("nbd+unix:///tank/vol?socket={}", socket.display())).unwrap();
    let data: Vec<u8> = (0..24 << 20)
        .map(|i: usize| (i as u8).wrapping_mul(13) ^ (i >> 11) as u8)
        .collect();
    let server = serve(&home);
    let mut client = NbdClient::connect(&url).unwrap();
    let chunk = 1 << 20;
    for (i, piece) in data.chunks(chunk).enumerate() {
        if i == 8 {
            // d0 starts failing every read and write. The leaf looks at its control file
            // at most every CONTROL_POLL: wait, so that the writes left are sure to see it
            // (the sixteen left can take less than that).
            std::fs::write(format!("{d0}.fault"), "fail_reads=1&fail_writes=1").unwrap();
            std::thread::sleep(cairn_vdev::fault::CONTROL_POLL + Duration::from_millis(50));
        }
        client.write_at(piece, (i * chunk) as u64, false).unwrap();
        client.flush().unwrap();
    }
    // The serving process puts the spare in and resilvers it meanwhile.
    let start = Instant::now();
    let st = loop {
        let st = ok(&cairn(&home, &["status", "tank"]));
        if st.contains("holds all its data") {
            break st;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "no resilvered spare: {st}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        st.contains("spare-0") && st.contains("INUSE") && st.contains("FAULTED"),
        "{st}"
    );
    let mut back = vec![0u8; data.len()];
    for (i, piece) in back.chunks_mut(chunk).enumerate() {
        client.read_at(piece, (i * chunk) as u64).unwrap();
    }
    assert!(back == data, "the volume reads back different data");
    client.disconnect();
    stop(server);
    // The labels say the same to a process that opens the pool.
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        st.contains("state: DEGRADED")
            && st.contains("spare-0")
            && st.contains("INUSE")
            && st.contains("holds all its data"),
        "{st}"
    );
    std::fs::remove_file(format!("{d0}.fault")).unwrap();
    let new = file(dir.path(), "new0", 64 * MIB);
    ok(&cairn(&home, &["replace", "tank", &failing, &new]));
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        state_of(&st, &spare) == "AVAIL" && st.contains("state: ONLINE"),
        "{st}"
    );
    let scrub = ok(&cairn(&home, &["scrub", "-w", "tank"]));
    assert!(scrub.contains("0 errors"), "{scrub}");
    let server = serve(&home);
    let mut client = NbdClient::connect(&url).unwrap();
    let mut back = vec![0u8; data.len()];
    for (i, piece) in back.chunks_mut(chunk).enumerate() {
        client.read_at(piece, (i * chunk) as u64).unwrap();
    }
    assert!(
        back == data,
        "after replace the volume reads back different data"
    );
    client.disconnect();
    stop(server);
}

/// Log devices: created, added, listed under `logs`, removed. A log device with vdevs
/// after it leaves a hole in its place (as zpool's hole vdev), so the data on those vdevs
/// keeps the index its DVAs name; the hole is never shown.
#[test]
fn log_devices_are_created_added_listed_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d: Vec<String> = (0..8)
        .map(|i| file(dir.path(), &format!("d{i}"), 64 * MIB))
        .collect();
    ok(&cairn(
        &home,
        &[
            "create", "tank", "raidz1", &d[0], &d[1], &d[2], "log", "mirror", &d[3], &d[4],
        ],
    ));
    let status = ok(&cairn(&home, &["status", "tank"]));
    let logs_at = status.find("\tlogs\n").expect(&status);
    assert!(status[logs_at..].contains("mirror-1"), "{status}");
    assert!(status[..logs_at].contains("raidz1-0"), "{status}");
    let a = put(&home, dir.path(), "a", 2 << 20, 3);
    // Refused: a data vdev, a raidz log.
    let e = fails(&cairn(&home, &["remove", "tank", "raidz1-0"]));
    assert!(e.contains("only log devices can be removed"), "{e}");
    let e = fails(&cairn(
        &home,
        &["add", "tank", "log", "raidz1", &d[5], "/nonexistent"],
    ));
    assert!(e.contains("raidz"), "{e}");
    // A data mirror and another log after the mirror log; then the mirror log goes.
    ok(&cairn(
        &home,
        &["add", "-f", "tank", "mirror", &d[6], &d[7]],
    ));
    ok(&cairn(&home, &["add", "tank", "log", &d[5]]));
    ok(&cairn(&home, &["remove", "tank", "mirror-1"]));
    let status = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        !status.contains("mirror-1") && !status.contains("hole") && status.contains("mirror-2"),
        "{status}"
    );
    let e = fails(&cairn(&home, &["remove", "tank", "hole-1"]));
    assert!(e.contains("no such device"), "{e}");
    let iostat = ok(&cairn(&home, &["iostat", "-v", "tank"]));
    assert!(!iostat.contains("hole"), "{iostat}");
    // New data lands on the vdev after the hole too.
    let b = put(&home, dir.path(), "b", 8 << 20, 5);
    let iostat = ok(&cairn(&home, &["iostat", "-v", "-H", "-p", "tank"]));
    let mirror2 = iostat
        .lines()
        .find(|l| l.trim_start().starts_with("mirror-2"))
        .unwrap_or_else(|| panic!("{iostat}"));
    let alloc: u64 = mirror2.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(alloc > 0, "nothing was written to mirror-2: {iostat}");
    // The last one goes as before.
    ok(&cairn(&home, &["remove", "tank", &d[5]]));
    let status = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        !status.contains("logs") && !status.contains(&d[3]) && !status.contains(&d[5]),
        "{status}"
    );
    // The removed devices are free to use: their labels are gone.
    let e = fails(&cairn(&home, &["labels", &d[3]]));
    assert!(!e.is_empty());
    ok(&cairn(&home, &["create", "other", &d[3], &d[4], &d[5]]));
    // The pool lost nothing, survives an export and import, and scrubs clean.
    assert_eq!(cat(&home, "a"), a);
    ok(&cairn(&home, &["export", "tank"]));
    ok(&cairn(
        &home,
        &["import", "-d", dir.path().to_str().unwrap(), "tank"],
    ));
    assert_eq!(cat(&home, "a"), a);
    assert_eq!(cat(&home, "b"), b);
    let status = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        status.contains("mirror-2") && !status.contains("hole"),
        "{status}"
    );
    ok(&cairn(&home, &["scrub", "tank"]));
    let status = ok(&cairn(&home, &["status", "tank"]));
    assert!(status.contains("No known data errors"), "{status}");
    // A log device added now takes the next index; the hole stays.
    ok(&cairn(&home, &["destroy", "other"]));
    ok(&cairn(&home, &["add", "tank", "log", &d[3]]));
    let status = ok(&cairn(&home, &["status", "tank"]));
    assert!(
        status.contains("logs") && status.contains(&d[3]),
        "{status}"
    );
}

/// A vdev whose devices grew takes the new room: once with `online -e`, and at every open
/// with `autoexpand=on`; the data stays where it was and the new room takes writes.
#[test]
fn a_vdev_grows_with_its_devices() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 128 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    let size = || support::pool_size(&home);
    let first = pseudo_random(40 * MIB as usize, 1);
    let src = dir.path().join("first");
    std::fs::write(&src, &first).unwrap();
    ok(&cairn(&home, &["put", src.to_str().unwrap(), "tank/first"]));
    let grow = |len: u64| support::grow_files(&d, len);
    let before = size();
    grow(256 * MIB);
    assert_eq!(size(), before, "grew without autoexpand or online -e");
    let second = pseudo_random(60 * MIB as usize, 2);
    let src2 = dir.path().join("second");
    std::fs::write(&src2, &second).unwrap();
    let e = fails(&cairn(
        &home,
        &["put", src2.to_str().unwrap(), "tank/second"],
    ));
    assert!(e.contains("out of space"), "{e}");
    let out = ok(&cairn(&home, &["online", "-e", "tank", &d[0]]));
    assert!(out.contains("expanded a vdev from"), "{out}");
    let grown = size();
    assert!(grown > before + 100 * MIB, "{before} -> {grown}");
    // The new room takes data the old vdev could not hold.
    ok(&cairn(
        &home,
        &["put", src2.to_str().unwrap(), "tank/second"],
    ));
    // autoexpand=on: the next open takes what the devices gained since.
    ok(&cairn(&home, &["set", "autoexpand=on", "tank"]));
    ok(&cairn(&home, &["export", "tank"]));
    grow(384 * MIB);
    ok(&cairn(
        &home,
        &["import", "-d", dir.path().to_str().unwrap(), "tank"],
    ));
    let again = size();
    assert!(again > grown + 100 * MIB, "{grown} -> {again}");
    let events = ok(&cairn(&home, &["events", "-H", "tank"]));
    assert!(events.contains("vdev_expand"), "{events}");
    let scrub = ok(&cairn(&home, &["scrub", "tank"]));
    assert!(
        scrub.contains("repaired 0") && scrub.contains(" 0 errors"),
        "{scrub}"
    );
    assert_eq!(cairn(&home, &["cat", "tank/first"]).stdout, first);
    assert_eq!(cairn(&home, &["cat", "tank/second"]).stdout, second);
}
