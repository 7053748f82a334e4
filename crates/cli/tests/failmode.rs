//! `failmode` in the service (zpool's): devices that refuse the txg's writes suspend the
//! pool; `status`, `list` and `events` say so; `clear` resumes it once the devices are
//! back, losing nothing. Under `failmode=panic` the service ends at once instead.

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use support::served::{
    check_numbered, export_and_import, put_numbered, scrub_is_clean, serve, status_when,
    wait_for_socket,
};
use support::{cairn, cairn_cmd, fails, files, ok, MIB};

/// Sets what the fault leaves over `paths` fail ("" for nothing) and waits until they
/// have seen it.
fn set_faults(paths: &[String], how: &str) {
    for p in paths {
        std::fs::write(format!("{p}.fault"), how).unwrap();
    }
    std::thread::sleep(cairn_vdev::fault::CONTROL_POLL + Duration::from_millis(100));
}

/// `tank`: a mirror of two fault leaves over files in `dir`, with `tank/f0`, `tank/f1`.
fn faulty_pool(dir: &std::path::Path, home: &std::path::Path) -> Vec<String> {
    let d = files(dir, 2, 128 * MIB);
    let leaves: Vec<String> = d.iter().map(|p| format!("fault:{p}")).collect();
    ok(&cairn(
        home,
        &["create", "tank", "mirror", &leaves[0], &leaves[1]],
    ));
    (0..2).for_each(|i| put_numbered(home, dir, i));
    d
}

/// failmode=wait (the default): a `put` while both sides refuse writes leaves the pool
/// SUSPENDED (status, list, status -x, an io_failure event); `clear` before the devices
/// are back says the pool stays suspended; after, it resumes: the put completes, every
/// file reads back, and after export and import a scrub is clean.
#[test]
fn a_suspended_pool_waits_for_clear_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = faulty_pool(dir.path(), &home);
    let served = serve(&home, "tank");
    let got = ok(&cairn(&home, &["get", "-H", "failmode", "tank"]));
    assert!(got.contains("failmode\twait"), "{got}");
    set_faults(&d, "fail_writes=1");
    let src = dir.path().join("src2");
    std::fs::write(&src, support::pseudo_random(MIB as usize + 2 * 4096, 2)).unwrap();
    let put = cairn_cmd(&home)
        .args(["put", src.to_str().unwrap(), "tank/f2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let st = status_when(&home, "suspension", |st| st.contains("SUSPENDED"));
    assert!(
        st.contains("I/O is suspended (failmode=wait)") && st.contains("'cairn clear tank'"),
        "{st}"
    );
    let list = ok(&cairn(&home, &["list", "tank"]));
    assert!(list.contains("SUSPENDED"), "{list}");
    let x = ok(&cairn(&home, &["status", "-x"]));
    assert!(x.contains("tank") && x.contains("SUSPENDED"), "{x}");
    let e = fails(&cairn(&home, &["clear", "tank"]));
    assert!(e.contains("still suspended"), "{e}");
    set_faults(&d, "");
    ok(&cairn(&home, &["clear", "tank"]));
    let st = status_when(&home, "resume", |st| !st.contains("SUSPENDED"));
    assert!(!st.contains("I/O is suspended"), "{st}");
    let out = put.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_numbered(&home, 3);
    let events = ok(&cairn(&home, &["events"]));
    assert!(events.contains("io_failure"), "{events}");
    served.stop();
    export_and_import(&home, dir.path());
    check_numbered(&home, 3);
    scrub_is_clean(&home);
}

/// failmode=continue: once the devices refuse writes the pool is SUSPENDED before a txg
/// changes anything: new writes fail at once with the reason, files read back meanwhile,
/// and after `clear` the pool takes writes again and loses nothing.
#[test]
fn under_continue_writes_fail_and_reads_go_on() {
    continue_case("fail_writes=1");
}

/// The same with devices that fail part-way through a txg, after they took the probe
/// that starts it: the txg is undone, and reads still go on.
#[test]
fn under_continue_a_txg_that_fails_part_way_is_undone_and_reads_go_on() {
    continue_case("fail_data_writes=1");
}

fn continue_case(fault: &str) {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = faulty_pool(dir.path(), &home);
    ok(&cairn(&home, &["set", "failmode=continue", "tank"]));
    let served = serve(&home, "tank");
    set_faults(&d, fault);
    // This put may land in the txg that finds the devices gone; it is kept either way.
    let first = cairn(&home, &["put", "/etc/hostname", "tank/extra"]);
    status_when(&home, "suspension", |st| st.contains("SUSPENDED"));
    let e = fails(&cairn(&home, &["put", "/etc/hostname", "tank/refused"]));
    assert!(
        e.contains("failmode=continue") && e.contains("cairn clear tank"),
        "{e}"
    );
    check_numbered(&home, 2);
    set_faults(&d, "");
    ok(&cairn(&home, &["clear", "tank"]));
    status_when(&home, "resume", |st| !st.contains("SUSPENDED"));
    put_numbered(&home, dir.path(), 2);
    if first.status.success() {
        ok(&cairn(&home, &["cat", "tank/extra"]));
    }
    served.stop();
    check_numbered(&home, 3);
    scrub_is_clean(&home);
}

/// A service stopped while its pool is suspended gives up the waiting txg and ends with
/// the error; the pool opens again once the devices are back, with what was committed.
#[test]
fn stopping_a_suspended_service_gives_up_the_waiting_txg() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = faulty_pool(dir.path(), &home);
    let (mut service, log) = serve_logged(dir.path(), &home);
    set_faults(&d, "fail_writes=1");
    // The put waits with the pool, and fails when the service gives up.
    let put = cairn_cmd(&home)
        .args(["put", "/etc/hostname", "tank/extra"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    status_when(&home, "suspension", |st| st.contains("SUSPENDED"));
    // SAFETY: sending SIGTERM to our own child process.
    unsafe { libc::kill(service.id() as i32, libc::SIGTERM) };
    assert!(!ended_within(&mut service, 30).success());
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("txg sync failed"), "{said}");
    put.wait_with_output().unwrap();
    set_faults(&d, "");
    check_numbered(&home, 2);
}

/// `cairn serve tank` with its standard error in a file (returned).
fn serve_logged(
    dir: &std::path::Path,
    home: &std::path::Path,
) -> (std::process::Child, std::path::PathBuf) {
    let log = dir.join("serve.log");
    let service = cairn_cmd(home)
        .args([
            "serve",
            "--sync-interval",
            "0.5",
            "--duration",
            "300",
            "tank",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_for_socket(&home.join("run").join("tank.sock"));
    (service, log)
}

/// Waits for `child` to end by itself within `secs` seconds.
fn ended_within(child: &mut std::process::Child, secs: u64) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "the service did not end"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// failmode=panic: the service ends at once, saying why; the pool opens again once the
/// devices are back, with everything committed before, and scrubs clean.
#[test]
fn under_panic_the_service_ends_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = faulty_pool(dir.path(), &home);
    ok(&cairn(&home, &["set", "failmode=panic", "tank"]));
    let (mut service, log) = serve_logged(dir.path(), &home);
    set_faults(&d, "fail_writes=1");
    // The put may fail (the service ends under it) or not (it ended after); either way the
    // service must end by itself.
    let _ = cairn(&home, &["put", "/etc/hostname", "tank/extra"]);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = service.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the service did not end"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("failmode=panic"), "{said}");
    set_faults(&d, "");
    check_numbered(&home, 2);
    let st = ok(&cairn(&home, &["status", "tank"]));
    assert!(!st.contains("SUSPENDED"), "{st}");
    ok(&cairn(&home, &["clear", "tank"]));
    let _ = cairn(&home, &["resilver", "tank"]);
    scrub_is_clean(&home);
}
