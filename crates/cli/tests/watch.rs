//! Watching pools: `status -x` shows only what needs attention.

mod support;

use support::{cairn, files, ok, pseudo_random, MIB};

#[test]
fn status_x_shows_only_pools_that_need_attention() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let mk = |sub: &str| {
        let d = dir.path().join(sub);
        std::fs::create_dir_all(&d).unwrap();
        files(&d, 2, 128 * MIB)
    };
    let (da, db) = (mk("a"), mk("b"));
    assert_eq!(ok(&cairn(&home, &["status", "-x"])), "no pools available\n");
    ok(&cairn(
        &home,
        &["create", "alpha", "mirror", &da[0], &da[1]],
    ));
    ok(&cairn(&home, &["create", "beta", "mirror", &db[0], &db[1]]));
    assert_eq!(
        ok(&cairn(&home, &["status", "-x"])),
        "all pools are healthy\n"
    );

    // A leaf taken offline: beta is DEGRADED and is the only pool shown.
    ok(&cairn(&home, &["offline", "beta", &db[0]]));
    let x = ok(&cairn(&home, &["status", "-x"]));
    assert!(x.contains("pool: beta") && x.contains("DEGRADED"), "{x}");
    assert!(!x.contains("pool: alpha"), "{x}");
    ok(&cairn(&home, &["online", "beta", &db[0]]));
    assert_eq!(
        ok(&cairn(&home, &["status", "-x"])),
        "all pools are healthy\n"
    );

    // Bit rot repaired by a scrub: ONLINE, but its CKSUM count still needs attention.
    let data = dir.path().join("data");
    std::fs::write(&data, pseudo_random(4 * MIB as usize, 5)).unwrap();
    ok(&cairn(
        &home,
        &["put", &data.display().to_string(), "alpha/data"],
    ));
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&da[1])
            .unwrap();
        for off in (4 * MIB..100 * MIB).step_by(MIB as usize) {
            f.write_all_at(&pseudo_random(64 << 10, off), off).unwrap();
        }
    }
    ok(&cairn(&home, &["scrub", "alpha"]));
    let x = ok(&cairn(&home, &["status", "-x"]));
    assert!(
        x.contains("pool: alpha") && x.contains("state: ONLINE"),
        "{x}"
    );
    assert!(!x.contains("pool: beta"), "{x}");
    ok(&cairn(&home, &["clear", "alpha"]));
    assert_eq!(
        ok(&cairn(&home, &["status", "-x"])),
        "all pools are healthy\n"
    );
}
