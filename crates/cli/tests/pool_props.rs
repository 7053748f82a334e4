//! Pool properties (`cairn get … POOL`) and `list -o` (issue 14).

mod support;

use support::{cairn, fails, files, ok, pseudo_random, MIB};

#[test]
fn pool_properties_are_measured_and_read_only_ones_refuse_set() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 3, 128 * MIB);
    ok(&cairn(
        &home,
        &[
            "create",
            "-o",
            "ashift=13",
            "tank",
            "raidz1",
            &d[0],
            &d[1],
            &d[2],
        ],
    ));
    let src = dir.path().join("f");
    std::fs::write(&src, pseudo_random(8 * MIB as usize, 1)).unwrap();
    ok(&cairn(&home, &["put", src.to_str().unwrap(), "tank/f"]));
    let get = |props: &str| -> Vec<String> {
        ok(&cairn(&home, &["get", "-H", "-p", props, "tank"]))
            .lines()
            .map(|l| l.split('\t').nth(2).unwrap().to_string())
            .collect()
    };
    let list: Vec<u64> = ok(&cairn(
        &home,
        &["list", "-H", "-p", "-o", "size,alloc,free,cap"],
    ))
    .trim()
    .split('\t')
    .map(|v| v.parse().unwrap())
    .collect();
    let v = get("size,allocated,free,capacity,health,guid,ashift,fragmentation");
    assert_eq!(v[0], list[0].to_string());
    assert_eq!(v[1], list[1].to_string());
    assert_eq!(v[2], list[2].to_string());
    assert_eq!(v[3], list[3].to_string());
    assert!(
        list[1] >= 12 * MIB,
        "8 MiB of raidz1 data allocates 12 MiB: {list:?}"
    );
    assert_eq!(v[4], "ONLINE");
    let status: serde_json::Value =
        serde_json::from_str(&ok(&cairn(&home, &["status", "--json", "tank"]))).unwrap();
    assert_eq!(v[5], status["pools"][0]["guid"].to_string());
    assert_eq!(v[6], "13");
    let frag: u64 = v[7].parse().unwrap();
    assert!(frag <= 100);
    // Human forms without -p; `get all` of a pool lists them.
    let all = ok(&cairn(&home, &["get", "all", "tank"]));
    for prop in [
        "size",
        "capacity",
        "allocated",
        "free",
        "health",
        "guid",
        "ashift",
        "fragmentation",
        "readpolicy",
    ] {
        assert!(
            all.lines()
                .any(|l| l.split_whitespace().nth(1) == Some(prop)),
            "{prop}: {all}"
        );
    }
    assert!(all.contains("%"), "{all}");
    let e = fails(&cairn(&home, &["set", "size=1G", "tank"]));
    assert!(
        e.contains("'size' is read-only") && e.contains("readpolicy"),
        "{e}"
    );
    // Dataset names do not have them.
    fails(&cairn(&home, &["get", "size", "tank/f"]));
}

#[test]
fn list_o_picks_columns() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 128 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    let out = ok(&cairn(&home, &["list", "-o", "name,capacity,health"]));
    assert_eq!(out, "NAME  CAP  HEALTH\ntank   0%  ONLINE\n");
    let out = ok(&cairn(&home, &["list", "-H", "-o", "health,name"]));
    assert_eq!(out, "ONLINE\ttank\n");
    let e = fails(&cairn(&home, &["list", "-o", "name,bogus"]));
    assert!(
        e.contains("unknown column 'bogus'") && e.contains("capacity"),
        "{e}"
    );
}
