//! The `cairn` binary end to end: create (-n), list (--json, -Hp), status, labels, export,
//! import (-d, refused for a second owner), destroy, and error exits.

mod support;

use cairn_geometry::{leaf_asize, pool_space, VdevShape, VdevSpaceInput, ZfsEra};
use support::{cairn, fails, files, ok, MIB};

#[test]
fn create_dry_run_list_and_geometry_agree_to_the_byte() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 6, 200 * MIB);
    let mut args = vec!["create", "-n", "tank", "raidz2"];
    args.extend(d.iter().map(String::as_str));
    let dry = ok(&cairn(&home, &args));
    assert!(dry.contains("would create 'tank'"), "{dry}");
    assert!(cairn(&home, &["list", "--json"]).status.success());
    assert!(
        !ok(&cairn(&home, &["list"])).contains("tank"),
        "dry run created nothing"
    );

    args.remove(1);
    let real = ok(&cairn(&home, &args));
    let line = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("ashift"))
            .unwrap()
            .to_string()
    };
    assert_eq!(
        line(&dry),
        line(&real),
        "create -n and create print the same capacity"
    );

    let list: serde_json::Value =
        serde_json::from_str(&ok(&cairn(&home, &["list", "--json"]))).unwrap();
    let entry = &list["pools"][0];
    let expect = pool_space(
        &[VdevSpaceInput {
            shape: VdevShape::Raidz {
                width: 6,
                parity: 2,
            },
            min_leaf_asize: leaf_asize(200 * MIB),
            ashift: 12,
        }],
        ZfsEra::Cairn,
    );
    assert_eq!(entry["name"], "tank");
    assert_eq!(entry["health"], "ONLINE");
    // Right after create the pool holds its first tree and its history (`cairn create …`),
    // as a new ZFS pool holds its MOS: a little is allocated. SIZE is exact, and AVAIL is
    // the geometry's less that allocation deflated (raidz2 of 6: about 4/6 of it).
    let alloc = entry["alloc"].as_u64().unwrap();
    assert!(alloc > 0 && alloc < 2 * MIB, "{alloc}");
    let shape = VdevShape::Raidz {
        width: 6,
        parity: 2,
    };
    let used = cairn_geometry::space::deflated_space(alloc, shape.deflate_ratio(12));
    assert_eq!(entry["avail"].as_u64().unwrap() + used, expect.avail);
    assert_eq!(entry["size"].as_u64().unwrap(), expect.size);
    assert_eq!(entry["free"].as_u64().unwrap(), expect.size - alloc);
    assert!(
        real.contains(&format!(
            "avail {} ({} B)",
            cairn_geometry::format_zfs_size(expect.avail),
            expect.avail
        )),
        "{real}"
    );

    let hp = ok(&cairn(&home, &["list", "-H", "-p"]));
    let cols: Vec<&str> = hp.trim().split('\t').collect();
    assert_eq!(
        cols,
        [
            "tank",
            &expect.size.to_string(),
            &alloc.to_string(),
            &(expect.size - alloc).to_string(),
            "0",
            "ONLINE",
            &(expect.avail - used).to_string()
        ]
    );
}

#[test]
fn status_labels_export_import_destroy() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let other_home = dir.path().join("other-home");
    let disks = dir.path().join("disks");
    std::fs::create_dir(&disks).unwrap();
    let d = files(&disks, 4, 64 * MIB);
    ok(&cairn(
        &home,
        &[
            "create", "tank", "mirror", &d[0], &d[1], "mirror", &d[2], &d[3],
        ],
    ));

    let status = ok(&cairn(&home, &["status", "tank"]));
    for want in [
        "  pool: tank",
        " state: ONLINE",
        "NAME",
        "READ WRITE CKSUM",
        "mirror-0",
        "mirror-1",
        &d[3],
        "errors: No known data errors",
    ] {
        assert!(status.contains(want), "missing '{want}' in:\n{status}");
    }
    let js: serde_json::Value =
        serde_json::from_str(&ok(&cairn(&home, &["status", "--json"]))).unwrap();
    assert_eq!(
        js["pools"][0]["vdevs"][1]["leaves"][0]["path"],
        d[2].as_str()
    );

    let labels = ok(&cairn(&home, &["labels", &d[0]]));
    assert_eq!(labels.matches("\"name\": \"tank\"").count(), 4, "{labels}");
    assert!(labels.contains("Uberblock"), "{labels}");

    // A second owner (another state directory, i.e. another process/host) is refused.
    let dirs = disks.to_str().unwrap();
    let e = fails(&cairn(&other_home, &["import", "-d", dirs, "tank"]));
    assert!(e.contains("in use") && e.contains("-f"), "{e}");

    ok(&cairn(&home, &["export", "tank"]));
    assert!(fails(&cairn(&home, &["status", "tank"])).contains("no such pool"));
    let listing = ok(&cairn(&other_home, &["import", "-d", dirs]));
    assert!(
        listing.contains("pool: tank") && listing.contains("state: ONLINE"),
        "{listing}"
    );
    // Move the devices: import still finds them.
    let moved = dir.path().join("moved");
    std::fs::rename(&disks, &moved).unwrap();
    ok(&cairn(
        &other_home,
        &["import", "-d", moved.to_str().unwrap(), "tank"],
    ));
    let status = ok(&cairn(&other_home, &["status", "tank"]));
    assert!(status.contains(moved.to_str().unwrap()), "{status}");
    ok(&cairn(&other_home, &["destroy", "tank"]));
    assert!(ok(&cairn(&other_home, &["list"])).contains("no pools"));
}

#[test]
fn bad_input_gets_a_clear_error_and_nonzero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 64 * MIB);
    let e = fails(&cairn(&home, &["create", "tank", "raidz2", &d[0], &d[1]]));
    assert!(e.contains("raidz2 needs at least 3 devices"), "{e}");
    let e = fails(&cairn(&home, &["create", "-o", "ashift=20", "tank", &d[0]]));
    assert!(e.contains("ashift=20 is out of range"), "{e}");
    let e = fails(&cairn(
        &home,
        &["create", "-o", "compression=on", "tank", &d[0]],
    ));
    assert!(e.contains("unknown pool property"), "{e}");
    let e = fails(&cairn(&home, &["status", "nope"]));
    assert!(e.contains("no such pool 'nope'"), "{e}");
    let e = fails(&cairn(&home, &["labels", &d[0]]));
    assert!(
        e.contains("no valid cairn label") && e.contains("not part of a cairn pool"),
        "{e}"
    );
    let e = fails(&cairn(
        &home,
        &["import", "-d", dir.path().to_str().unwrap(), "ghost"],
    ));
    assert!(e.contains("no such pool"), "{e}");
}

#[test]
fn data_path_put_get_datasets_properties_and_scrub() {
    use rand::{RngCore, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 3, 128 * MIB);
    ok(&cairn(
        &home,
        &["create", "tank", "raidz1", &d[0], &d[1], &d[2]],
    ));
    let src = dir.path().join("random.bin");
    let mut data = vec![0u8; 3 * MIB as usize + 777];
    rand::rngs::StdRng::seed_from_u64(3).fill_bytes(&mut data);
    std::fs::write(&src, &data).unwrap();
    let text = dir.path().join("text.txt");
    let lines: String = (0..100_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&text, &lines).unwrap();

    ok(&cairn(&home, &["put", src.to_str().unwrap(), "tank/"]));
    let e = fails(&cairn(
        &home,
        &["put", src.to_str().unwrap(), "tank/random.bin"],
    ));
    assert!(e.contains("use -f"), "{e}");
    ok(&cairn(
        &home,
        &["dataset", "create", "-o", "compression=zstd", "tank/docs"],
    ));
    ok(&cairn(
        &home,
        &["put", text.to_str().unwrap(), "tank/docs/sub/text.txt"],
    ));
    let ls = ok(&cairn(&home, &["ls", "tank"]));
    assert!(ls.contains("random.bin") && ls.contains("docs"), "{ls}");
    let ls: serde_json::Value =
        serde_json::from_str(&ok(&cairn(&home, &["ls", "--json", "tank/docs/sub"]))).unwrap();
    assert_eq!(ls["entries"][0]["name"], "text.txt");
    assert_eq!(
        ls["entries"][0]["size"].as_u64().unwrap(),
        lines.len() as u64
    );

    let out = dir.path().join("out.bin");
    ok(&cairn(
        &home,
        &["get", "tank/random.bin", out.to_str().unwrap()],
    ));
    assert!(std::fs::read(&out).unwrap() == data);
    assert_eq!(ok(&cairn(&home, &["cat", "tank/docs/sub/text.txt"])), lines);

    let props = ok(&cairn(
        &home,
        &["get", "compression,compressratio", "tank/docs"],
    ));
    assert!(props.contains("zstd") && props.contains("local"), "{props}");
    let ratio: serde_json::Value = serde_json::from_str(&ok(&cairn(
        &home,
        &["get", "--json", "compressratio", "tank/docs"],
    )))
    .unwrap();
    let r: f64 = ratio["properties"][0]["value"]
        .as_str()
        .unwrap()
        .trim_end_matches('x')
        .parse()
        .unwrap();
    assert!(r > 3.0, "text should compress: {r}");
    ok(&cairn(&home, &["set", "recordsize=16K", "tank/docs"]));
    let e = fails(&cairn(&home, &["set", "recordsize=3K", "tank/docs"]));
    assert!(e.contains("power of two"), "{e}");
    ok(&cairn(
        &home,
        &["volume", "create", "-V", "64M", "-b", "8K", "tank/vol"],
    ));
    let list: serde_json::Value =
        serde_json::from_str(&ok(&cairn(&home, &["dataset", "list", "--json", "tank"]))).unwrap();
    let names: Vec<&str> = list["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["tank", "tank/docs", "tank/vol"]);
    let root_used = list["datasets"][0]["used"].as_u64().unwrap();
    assert!(
        root_used >= data.len() as u64,
        "USED counts the file: {root_used}"
    );

    // zpool list: ALLOC is what the allocator holds; AVAIL = geometry's empty-pool AVAIL minus
    // the allocated space in zfs-list units.
    let pools: serde_json::Value =
        serde_json::from_str(&ok(&cairn(&home, &["list", "--json"]))).unwrap();
    let expect = pool_space(
        &[VdevSpaceInput {
            shape: VdevShape::Raidz {
                width: 3,
                parity: 1,
            },
            min_leaf_asize: leaf_asize(128 * MIB),
            ashift: 12,
        }],
        ZfsEra::Cairn,
    );
    let p = &pools["pools"][0];
    let alloc = p["alloc"].as_u64().unwrap();
    assert!(alloc > data.len() as u64);
    let deflated = (alloc >> 9)
        * VdevShape::Raidz {
            width: 3,
            parity: 1,
        }
        .deflate_ratio(12);
    assert_eq!(p["avail"].as_u64().unwrap(), expect.avail - deflated);

    // Damage two columns (one more than raidz1 rebuilds) of the first block of random.bin.
    let (bp, map) = {
        let pool = cairn_pool::Pool::open(&cairn_pool::Home::at(&home), "tank").unwrap();
        let store = cairn_objset::Store::open(pool).unwrap();
        let r = store.resolve("tank/random.bin").unwrap();
        let (_, bp) = store.object_blocks(r.object).unwrap()[0];
        let map = cairn_geometry::raidz_map(bp.dvas[0].offset, u64::from(bp.psize), 3, 1, 12);
        (bp, map)
    };
    assert!(bp.copies().count() == 1);
    for col in &map.columns[..2] {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&d[col.child])
            .unwrap();
        f.write_all_at(
            &vec![0x5Au8; col.size as usize],
            cairn_geometry::LEAF_DATA_START + col.offset,
        )
        .unwrap();
    }
    let e = fails(&cairn(
        &home,
        &["get", "tank/random.bin", out.to_str().unwrap()],
    ));
    assert!(e.contains("I/O error") && e.contains("status -v"), "{e}");
    let status = ok(&cairn(&home, &["status", "-v", "tank"]));
    assert!(
        status.contains("Permanent errors") && status.contains("tank/random.bin"),
        "{status}"
    );
    // The error log is in the pool: it survives export and import, and a clear (which
    // resets the device counters) leaves it alone, as in ZFS.
    ok(&cairn(&home, &["export", "tank"]));
    ok(&cairn(
        &home,
        &["import", "-d", dir.path().to_str().unwrap(), "tank"],
    ));
    ok(&cairn(&home, &["clear", "tank"]));
    let status = ok(&cairn(&home, &["status", "-v", "tank"]));
    assert!(status.contains("tank/random.bin"), "{status}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&cairn(&home, &["status", "--json", "tank"]))).unwrap();
    assert_eq!(
        json["pools"][0]["data_errors"]["files"],
        serde_json::json!(["tank/random.bin"])
    );
    assert_eq!(
        ok(&cairn(&home, &["cat", "tank/docs/sub/text.txt"])),
        lines,
        "other files still read"
    );
    let scrub = ok(&cairn(&home, &["scrub", "tank"]));
    assert!(
        scrub.contains("1 errors") || scrub.contains(" errors"),
        "{scrub}"
    );
    let status = ok(&cairn(&home, &["status", "tank"]));
    assert!(status.contains("scan: scrub repaired"), "{status}");
    ok(&cairn(&home, &["rm", "tank/random.bin"]));
    ok(&cairn(&home, &["clear", "tank"]));
    let status = ok(&cairn(&home, &["status", "-v", "tank"]));
    assert!(status.contains("No known data errors"), "{status}");
    let scrub = ok(&cairn(&home, &["scrub", "tank"]));
    assert!(scrub.contains(", 0 errors"), "{scrub}");
}

#[test]
fn readpolicy_is_a_pool_property_set_at_create_and_later() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 64 * MIB);
    let e = fails(&cairn(
        &home,
        &[
            "create",
            "-o",
            "readpolicy=fast",
            "tank",
            "mirror",
            &d[0],
            &d[1],
        ],
    ));
    assert!(
        e.contains("bad readpolicy 'fast'") && e.contains("round-robin, least-queue, load, md"),
        "{e}"
    );
    ok(&cairn(
        &home,
        &[
            "create",
            "-o",
            "readpolicy=md",
            "tank",
            "mirror",
            &d[0],
            &d[1],
        ],
    ));
    let got = ok(&cairn(&home, &["get", "-H", "readpolicy", "tank"]));
    assert_eq!(got.trim(), "tank\treadpolicy\tmd\tlocal", "{got}");
    ok(&cairn(&home, &["set", "readpolicy=nearest", "tank"]));
    let e = fails(&cairn(&home, &["set", "readpolicy=fastest", "tank"]));
    assert!(e.contains("valid values are auto, round-robin"), "{e}");
    // Dataset properties of the root dataset are still set through the pool name.
    ok(&cairn(&home, &["set", "compression=off", "tank"]));
    let got = ok(&cairn(&home, &["get", "-H", "comment", "tank"]));
    assert_eq!(got.trim(), "tank\tcomment\t-\tdefault", "{got}");
    ok(&cairn(&home, &["set", "comment=rack 3, shelf 2", "tank"]));
    let e = fails(&cairn(
        &home,
        &["set", &format!("comment={}", "x".repeat(33)), "tank"],
    ));
    assert!(e.contains("at most 32 printable ASCII"), "{e}");
    ok(&cairn(&home, &["export", "tank"]));
    ok(&cairn(
        &home,
        &["import", "-d", dir.path().to_str().unwrap(), "tank"],
    ));
    let got = ok(&cairn(
        &home,
        &["get", "-H", "readpolicy,compression", "tank"],
    ));
    assert!(got.contains("tank\treadpolicy\tnearest\tlocal"), "{got}");
    assert!(got.contains("tank\tcompression\toff"), "{got}");
    let got = ok(&cairn(&home, &["get", "-H", "comment", "tank"]));
    assert_eq!(got.trim(), "tank\tcomment\track 3, shelf 2\tlocal", "{got}");
}

#[test]
fn bench_lab_draws_its_plots_and_refuses_other_formats_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let png = dir.path().join("layouts.png");
    ok(&cairn(
        &home,
        &[
            "bench",
            "lab",
            "layouts",
            "--size",
            "64M",
            "--plot",
            png.to_str().unwrap(),
        ],
    ));
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let svg = dir.path().join("raid1.svg");
    ok(&cairn(
        &home,
        &[
            "bench",
            "lab",
            "raid1",
            "--job",
            "21",
            "--runtime",
            "2",
            "--plot",
            svg.to_str().unwrap(),
        ],
    ));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.starts_with("<svg") && text.contains("job 21"),
        "{text}"
    );
    assert!(text.contains("published gflash") && text.contains("lab auto"));
    let e = fails(&cairn(
        &home,
        &["bench", "lab", "layouts", "--plot", "x.jpg"],
    ));
    assert!(e.contains("use a file name ending in .svg or .png"), "{e}");
}

/// `bench lab dd --real`: the lab's dd on real devices (files here) asks for --yes and
/// leaves them untouched without it; with it, makes a pool, writes, reads back (checked),
/// reports both speeds and destroys the pool, so the devices can be used again.
#[test]
fn bench_lab_dd_runs_on_real_devices_only_with_yes() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 4, 128 * MIB);
    let mut args = vec!["bench", "lab", "dd", "--layout", "raidz1", "--size", "32M"];
    args.push("--real");
    args.extend(d.iter().map(String::as_str));
    let e = fails(&cairn(&home, &args));
    assert!(e.contains("add --yes"), "{e}");
    let untouched = std::fs::read(&d[0]).unwrap();
    assert!(untouched.iter().all(|&b| b == 0), "changed without --yes");
    args.extend(["--yes", "--json"]);
    let out = ok(&cairn(&home, &args));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["write_mbs"].as_f64().unwrap() > 0.0, "{out}");
    assert!(v["read_mbs"].as_f64().unwrap() > 0.0, "{out}");
    assert_eq!(v["size"], 32 * MIB, "{out}");
    // The pool is gone: the devices make a new one without -f.
    ok(&cairn(
        &home,
        &["create", "again", "raidz1", &d[0], &d[1], &d[2]],
    ));
}

/// A `bench lab … --real` run: refused without --yes, the first device `device0` left
/// untouched; then run with --yes --json, its JSON marked as measured on real devices.
fn real_run_json(
    home: &std::path::Path,
    args: &mut Vec<&str>,
    device0: &str,
) -> (serde_json::Value, String) {
    let e = fails(&cairn(home, args));
    assert!(e.contains("add --yes"), "{e}");
    assert!(std::fs::read(device0).unwrap().iter().all(|&b| b == 0));
    args.extend(["--yes", "--json"]);
    let out = ok(&cairn(home, args));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["real_devices"], true, "{out}");
    (v, out)
}

/// `bench lab layouts --real`: the 24-disk study's layouts that fit on the devices given
/// (files here: four, so the layouts of 1–4 disks), each a pool made, dd'd and destroyed;
/// without --yes nothing is touched. The rows left out are the ones needing more disks.
#[test]
fn bench_lab_layouts_runs_the_layouts_that_fit_on_real_devices() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 4, 128 * MIB);
    let mut args = vec!["bench", "lab", "layouts", "--size", "8M", "--real"];
    args.extend(d.iter().map(String::as_str));
    let (v, out) = real_run_json(&home, &mut args, &d[0]);
    let rows = v["rows"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["lab_layout"].as_str().unwrap())
        .collect();
    // the study's rows of 1 to 4 disks, in its order
    let fit = [
        "stripe",
        "mirror-2",
        "stripe",
        "mirror-3",
        "stripe",
        "raidz1",
        "2xmirror-2",
    ];
    assert_eq!(names, [&fit[..], &["raidz2"]].concat(), "{out}");
    for r in rows {
        assert!(r["disks"].as_u64().unwrap() <= 4, "{r}");
        assert!(r["write_mbs"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["read_mbs"].as_f64().unwrap() > 0.0, "{r}");
    }
    // every pool is gone: the devices make a new one without -f
    ok(&cairn(
        &home,
        &["create", "again", "raidz2", &d[0], &d[1], &d[2], &d[3]],
    ));
}

/// `bench lab raid1 --real`: the RAID1 study's jobs on a real mirror (two files here), a
/// pool per policy; without --yes nothing is touched; the resync jobs run on a real
/// resilver held at their progress; the devices are free again after.
#[test]
fn bench_lab_raid1_runs_on_a_real_mirror_only_with_yes() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 256 * MIB);
    let mut args = vec![
        "bench", "lab", "raid1", "--real", &d[0], &d[1], "--size", "64M",
    ];
    args.extend([
        "--runtime",
        "0.3",
        "--policy",
        "auto",
        "md",
        "--job",
        "6",
        "16",
        "17",
        "21",
        "24",
        "29",
    ]);
    let (v, out) = real_run_json(&home, &mut args, &d[0]);
    let rows = v["results"].as_array().unwrap();
    let mut seen: Vec<(u64, String, String)> = rows
        .iter()
        .map(|r| {
            assert!(r["iops"].as_f64().unwrap() > 0.0, "{r}");
            let part = r["part"].as_str().unwrap_or("").to_string();
            (
                r["job"].as_u64().unwrap(),
                part,
                r["policy"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    seen.sort();
    let jobs = [
        (6, ""),
        (16, "r"),
        (16, "w"),
        (17, ""),
        (21, ""),
        (24, ""),
        (29, ""),
    ];
    let want: Vec<(u64, String, String)> = jobs
        .iter()
        .flat_map(|&(j, part)| ["auto", "md"].map(|p| (j, part.to_string(), p.to_string())))
        .collect();
    assert_eq!(seen, want, "{out}");
    ok(&cairn(&home, &["create", "again", "mirror", &d[0], &d[1]]));
}

/// `bench lab dd --engine`: the same dd through cairn's own pool over `sim:` leaves. Timed
/// by the disks' busy time, the MacZFS study's finding (ashift 9 on 512e disks writes at a
/// fraction of ashift 12) must come out of the engine too, and the engine's writes stay
/// near the analytic model's; paced in real time (the default) it reports its figures as
/// such. The backing files are removed after.
#[test]
fn bench_lab_dd_engine_runs_the_pool_on_simulated_disks() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let sim = dir.path().join("sim");
    let run = |ashift: &str, size: &str, time: &str| -> serde_json::Value {
        let args = [
            "bench",
            "lab",
            "dd",
            "--disks",
            "5x2TB,512e",
            "--layout",
            "raidz2",
            "--ashift",
            ashift,
            "--size",
            size,
            "--engine",
            "--engine-time",
            time,
            "--json",
            "--dir",
        ];
        let mut args = args.to_vec();
        args.push(sim.to_str().unwrap());
        serde_json::from_str(&ok(&cairn(&home, &args))).unwrap()
    };
    let (a12, a9) = (run("12", "256M", "busy"), run("9", "256M", "busy"));
    let engine = |v: &serde_json::Value, k: &str| v["engine"][k].as_f64().unwrap();
    for v in [&a12, &a9] {
        let (model, through) = (v["write_mbs"].as_f64().unwrap(), engine(v, "write_mbs"));
        assert!(
            (0.7..1.3).contains(&(through / model)),
            "engine write {through} MB/s against the model's {model}: {v}"
        );
        assert!(engine(v, "read_mbs") > 0.0, "{v}");
    }
    assert!(
        engine(&a9, "write_mbs") < 0.3 * engine(&a12, "write_mbs"),
        "ashift 9 on 512e should cost most of the write speed: {a9} {a12}"
    );
    let paced = run("12", "32M", "real");
    assert_eq!(paced["engine"]["time"], "real", "{paced}");
    let w = engine(&paced, "write_mbs");
    assert!(
        w > 0.0 && w < 2.0 * a12["write_mbs"].as_f64().unwrap(),
        "{paced}"
    );
    let left: Vec<_> = std::fs::read_dir(&sim).unwrap().collect();
    assert!(left.is_empty(), "backing files left: {left:?}");
}

/// A pool over `sim:` leaves is a pool like any other: 512e disks give ashift 12, the data
/// lives in sparse backing files, and it survives export and import with a clean scrub.
#[test]
fn a_pool_over_simulated_disks_stores_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let leaves: Vec<String> = (0..3)
        .map(|k| format!("sim:{}/d{k}?disk=4TB,512e", dir.path().display()))
        .collect();
    let mut args = vec!["create", "simp", "raidz1"];
    args.extend(leaves.iter().map(String::as_str));
    let made = ok(&cairn(&home, &args));
    assert!(
        made.contains("ashift 12") || made.contains("ashift: 12"),
        "{made}"
    );
    let src = dir.path().join("src");
    let data: Vec<u8> = (0..3 * MIB as u32).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    ok(&cairn(&home, &["put", src.to_str().unwrap(), "simp/f"]));
    ok(&cairn(&home, &["export", "simp"]));
    let scan = dir.path().to_str().unwrap();
    ok(&cairn(&home, &["import", "-d", scan, "simp"]));
    let status = ok(&cairn(&home, &["status", "simp"]));
    assert!(
        status.contains("sim:") && status.contains("ONLINE"),
        "{status}"
    );
    let got = dir.path().join("got");
    ok(&cairn(&home, &["get", "simp/f", got.to_str().unwrap()]));
    assert_eq!(std::fs::read(&got).unwrap(), data);
    let scrub = ok(&cairn(&home, &["scrub", "simp"]));
    assert!(scrub.contains(", 0 errors"), "{scrub}");
    use std::os::unix::fs::MetadataExt;
    let used = std::fs::metadata(dir.path().join("d0")).unwrap().blocks() * 512;
    assert!(
        used < 64 * MIB,
        "a 4 TB sim disk holding ~2 MiB uses {used} bytes"
    );
}
