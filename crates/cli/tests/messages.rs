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
