//! `cairn tunables`: the values in force and their sources, as every command reads them.

mod support;

use support::{cairn_cmd, fails, ok};

#[test]
fn tunables_come_from_flag_environment_file_and_default() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("tunables.conf"),
        "io_threads = 6\ncache_max = 0\n",
    )
    .unwrap();
    let out = cairn_cmd(&home)
        .env("CAIRN_DIRTY_MAX", "64M")
        .env("CAIRN_CACHE_MAX", "128M")
        .args(["--tunable", "background_writers=3", "tunables", "--json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(&ok(&out)).unwrap();
    let get = |name: &str| {
        json["tunables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(get("dirty_max")["number"], 64 << 20);
    assert_eq!(get("dirty_max")["source"]["where"], "CAIRN_DIRTY_MAX");
    assert_eq!(
        get("cache_max")["number"],
        128 << 20,
        "environment beats the file"
    );
    assert_eq!(get("io_threads")["number"], 6);
    assert_eq!(get("io_threads")["source"]["kind"], "file");
    assert_eq!(get("background_writers")["number"], 3);
    assert_eq!(get("background_writers")["source"]["kind"], "flag");
    assert_eq!(get("parity_kernel")["source"]["kind"], "default");

    // A bad value stops every command before it touches a pool, naming its source.
    let out = cairn_cmd(&home)
        .env("CAIRN_BACKGROUND_BATCH", "lots")
        .args(["list"])
        .output()
        .unwrap();
    let e = fails(&out);
    assert!(
        e.contains("background_batch") && e.contains("CAIRN_BACKGROUND_BATCH"),
        "{e}"
    );
}
