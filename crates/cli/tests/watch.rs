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

#[test]
fn history_keeps_every_command_that_changed_the_pool_across_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 128 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    ok(&cairn(&home, &["dataset", "create", "tank/media"]));
    ok(&cairn(&home, &["set", "compression=zstd", "tank/media"]));
    let file = dir.path().join("f");
    std::fs::write(&file, b"data").unwrap();
    ok(&cairn(
        &home,
        &["put", &file.display().to_string(), "tank/media/"],
    ));
    ok(&cairn(&home, &["offline", "tank", &d[1]]));
    ok(&cairn(&home, &["online", "tank", &d[1]]));
    ok(&cairn(&home, &["export", "tank"]));
    ok(&cairn(
        &home,
        &["import", "-d", &dir.path().display().to_string(), "tank"],
    ));
    let h = ok(&cairn(&home, &["history", "tank"]));
    let lines: Vec<&str> = h.lines().collect();
    assert_eq!(lines[0], "History for 'tank':", "{h}");
    let commands: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l.split_once(' ').unwrap().1)
        .collect();
    let expect = [
        format!("cairn create tank mirror {} {}", d[0], d[1]),
        "cairn dataset create tank/media".to_string(),
        "cairn set compression=zstd tank/media".to_string(),
        format!("cairn offline tank {}", d[1]),
        format!("cairn online tank {}", d[1]),
        "cairn export tank".to_string(),
        format!("cairn import -d {} tank", dir.path().display()),
    ];
    assert_eq!(commands, expect, "{h}");
    // zpool's time stamps, and -l says who, where and in which txg.
    let stamp = lines[1].split(' ').next().unwrap();
    assert_eq!(stamp.len(), "2026-11-24.21:40:43".len(), "{stamp}");
    assert_eq!(&stamp[10..11], ".", "{stamp}");
    let long = ok(&cairn(&home, &["history", "-l", "tank"]));
    assert!(long.lines().nth(1).unwrap().contains("[user "), "{long}");
    assert!(long.contains(", txg "), "{long}");
    // A failed command is not recorded; a read-only one neither.
    assert!(!cairn(&home, &["dataset", "create", "nosuch/x"])
        .status
        .success());
    ok(&cairn(&home, &["list"]));
    let again = ok(&cairn(&home, &["history", "tank"]));
    assert_eq!(again.lines().count(), lines.len(), "{again}");
}

/// Total bytes (read, written) over every leaf, from `iostat --json`.
fn io_totals(home: &std::path::Path) -> (u64, u64) {
    let json: serde_json::Value =
        serde_json::from_str(&ok(&cairn(home, &["iostat", "--json", "tank"]))).unwrap();
    let leaves = json["pools"][0]["snapshot"]["tops"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["leaves"].as_array().unwrap().clone())
        .collect::<Vec<_>>();
    let sum = |k: &str| leaves.iter().map(|l| l["io"][k].as_u64().unwrap()).sum();
    (sum("read_bytes"), sum("write_bytes"))
}

#[test]
fn iostat_counts_the_bytes_written_and_read() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 256 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    let data = dir.path().join("data");
    let len = 16 * MIB;
    std::fs::write(&data, pseudo_random(len as usize, 9)).unwrap();

    let (r0, w0) = io_totals(&home);
    ok(&cairn(
        &home,
        &["put", &data.display().to_string(), "tank/data"],
    ));
    let (r1, w1) = io_totals(&home);
    // Both sides of the mirror take every data block; metadata, labels and uberblocks add
    // a little.
    let written = w1 - w0;
    assert!(
        written >= 2 * len && written <= 2 * len + 8 * MIB,
        "{written}"
    );

    ok(&cairn(&home, &["cat", "tank/data"]));
    let (r2, _) = io_totals(&home);
    // Each block is read from one side; opening reads the labels' uberblock rings.
    let read = r2 - r1;
    assert!(
        read >= len && read <= len + 8 * MIB,
        "{read} (before: {r0})"
    );

    // The table: pool and (-v) each leaf, with -l latencies and -q.
    let table = ok(&cairn(&home, &["iostat", "-v", "-l", "-q", "tank"]));
    assert!(
        table.contains("capacity") && table.contains("operations"),
        "{table}"
    );
    assert!(
        table.contains("mirror-0") && table.contains(&d[0]),
        "{table}"
    );
    assert!(
        table.contains("total_wait") && table.contains("disk_wait") && table.contains("queue_wait"),
        "{table}"
    );
    // -l -p: total_wait = disk_wait + queue_wait (averages in ns, each rounded down), and
    // the mirror's writes went through the I/O threads, so they waited in the queue.
    let l = ok(&cairn(&home, &["iostat", "-l", "-H", "-p", "tank"]));
    let cells: Vec<u64> = l
        .trim()
        .split('\t')
        .skip(1)
        .map(|c| c.parse().unwrap())
        .collect();
    let (total_w, disk_w, queue_w) = (cells[7], cells[9], cells[11]);
    assert!(
        total_w >= disk_w + queue_w && total_w <= disk_w + queue_w + 1,
        "{l}"
    );
    assert!(queue_w > 0, "{l}");
    let hist = ok(&cairn(&home, &["iostat", "-w", "tank"]));
    assert!(hist.contains("latency"), "{hist}");
    // An interval report covers only its interval: nothing happened in it.
    let two = ok(&cairn(&home, &["iostat", "-H", "-p", "tank", "0.2", "2"]));
    let rows: Vec<Vec<&str>> = two.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 2, "{two}");
    assert_eq!(&rows[1][3..7], ["0", "0", "0", "0"], "{two}");
    // Counts survive an export and import? No: as zpool's, they start again at import.
    ok(&cairn(&home, &["export", "tank"]));
    ok(&cairn(
        &home,
        &["import", "-d", &dir.path().display().to_string(), "tank"],
    ));
    let (r3, w3) = io_totals(&home);
    assert!(r3 < r2 && w3 < w1, "counts restart at import: {r3} {w3}");
}

/// The classes `cairn events -H` lists, oldest first.
fn event_classes(home: &std::path::Path, pool: &str) -> Vec<String> {
    ok(&cairn(home, &["events", "-H", pool]))
        .lines()
        .map(|l| l.split('\t').nth(1).unwrap().to_string())
        .collect()
}

#[test]
fn events_report_scrubs_state_changes_and_errors() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let (home, d, _) = support::raidz1_with_data(dir.path(), 128 * MIB, 8 * MIB as usize, 3);
    ok(&cairn(&home, &["scrub", "tank"]));
    assert_eq!(
        event_classes(&home, "tank"),
        [
            "sysevent.fs.zfs.pool_create",
            "sysevent.fs.zfs.scrub_start",
            "sysevent.fs.zfs.scrub_finish"
        ]
    );

    // -f prints events as they come.
    let mut follow = support::cairn_cmd(&home)
        .args(["events", "-f", "-H", "tank"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    for _ in 0..3 {
        lines.next().unwrap().unwrap();
    }
    // Bit rot on one leaf: the scrub repairs it and the leaf's checksum errors are posted.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&d[1]).unwrap();
        for off in (4 * MIB..60 * MIB).step_by(MIB as usize) {
            f.write_all_at(&pseudo_random(64 << 10, off), off).unwrap();
        }
    }
    ok(&cairn(&home, &["scrub", "tank"]));
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.ends_with("scrub_finish")) {
        seen.push(lines.next().unwrap().unwrap());
    }
    follow.kill().unwrap();
    follow.wait().unwrap();
    assert!(seen[0].ends_with("sysevent.fs.zfs.scrub_start"), "{seen:?}");

    // A leaf gone between two commands: the next command posts its state change.
    std::fs::remove_file(&d[2]).unwrap();
    assert!(ok(&cairn(&home, &["status", "tank"])).contains("DEGRADED"));
    ok(&cairn(&home, &["status", "tank"]));
    let classes = event_classes(&home, "tank");
    let checksum = classes
        .iter()
        .filter(|c| *c == "ereport.fs.zfs.checksum")
        .count();
    assert_eq!(checksum, 1, "{classes:?}");
    let changes = classes
        .iter()
        .filter(|c| *c == "resource.fs.zfs.statechange")
        .count();
    assert_eq!(changes, 1, "reported once: {classes:?}");
    let verbose = ok(&cairn(&home, &["events", "-v", "tank"]));
    assert!(
        verbose.contains(&format!("vdev_path = \"{}\"", d[2])),
        "{verbose}"
    );
    assert!(verbose.contains("from = \"ONLINE\"") && verbose.contains("to = \"UNAVAIL\""));
    assert!(verbose.contains("count = \""), "{verbose}");

    assert!(ok(&cairn(&home, &["events", "-c"])).starts_with("cleared "));
    assert!(event_classes(&home, "tank").is_empty());
}

/// Per I/O class (ops, bytes) over the pool since import, from `iostat --json`.
fn class_totals(home: &std::path::Path) -> std::collections::BTreeMap<String, (u64, u64)> {
    let json: serde_json::Value =
        serde_json::from_str(&ok(&cairn(home, &["iostat", "-q", "--json", "tank"]))).unwrap();
    let classes = json["pools"][0]["classes"].as_object().unwrap();
    classes
        .iter()
        .map(|(k, v)| {
            let n = |f: &str| v[f].as_u64().unwrap();
            (k.clone(), (n("ops"), n("bytes")))
        })
        .collect()
}

/// Bytes of `class` between two `class_totals`.
fn class_bytes(
    after: &std::collections::BTreeMap<String, (u64, u64)>,
    before: &std::collections::BTreeMap<String, (u64, u64)>,
    class: &str,
) -> u64 {
    after[class].1 - before[class].1
}

#[test]
fn iostat_counts_scrub_reads_and_async_writes_in_their_classes() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 2, 256 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    let data = dir.path().join("data");
    let len = 16 * MIB;
    std::fs::write(&data, pseudo_random(len as usize, 11)).unwrap();

    let c0 = class_totals(&home);
    ok(&cairn(
        &home,
        &["put", &data.display().to_string(), "tank/data"],
    ));
    let c1 = class_totals(&home);
    // The put's blocks go to both sides of the mirror in txg syncs: async writes, plus a
    // little metadata; nothing is scrubbed.
    let written = class_bytes(&c1, &c0, "async_write");
    assert!(
        written >= 2 * len && written <= 2 * len + 8 * MIB,
        "{written}"
    );
    assert_eq!(class_bytes(&c1, &c0, "scrub"), 0, "{c1:?}");

    ok(&cairn(&home, &["scrub", "tank"]));
    let c2 = class_totals(&home);
    // The scrub reads every block from both sides: scrub-class reads; its sync before
    // starting writes little, and nothing needed repair.
    let scrubbed = class_bytes(&c2, &c1, "scrub");
    assert!(
        scrubbed >= 2 * len && scrubbed <= 2 * len + 8 * MIB,
        "{scrubbed} {c2:?}"
    );
    assert!(class_bytes(&c2, &c1, "async_write") < 4 * MIB, "{c2:?}");
    assert_eq!(class_bytes(&c2, &c0, "sync_write"), 0, "{c2:?}");
    assert_eq!(class_bytes(&c2, &c0, "trim"), 0, "{c2:?}");

    // -w -H -p: a row per bucket, label then total_wait r/w, disk_wait r/w, syncq_wait
    // r/w, asyncq_wait r/w, scrub, trim; each class column counts each of its requests.
    let w = ok(&cairn(&home, &["iostat", "-w", "-H", "-p", "tank"]));
    let rows: Vec<Vec<u64>> = w
        .lines()
        .map(|l| l.split('\t').map(|c| c.parse().unwrap()).collect())
        .collect();
    let column = |i: usize| rows.iter().map(|r| r[i]).sum::<u64>();
    assert_eq!(rows[0][0], 1, "first bucket is labelled 1 ns: {w}");
    assert_eq!(column(9), c2["scrub"].0, "{w}");
    assert_eq!(column(8), c2["async_write"].0, "{w}");
    assert_eq!(
        column(1),
        column(3),
        "total_wait and disk_wait count the same reads"
    );
    let table = ok(&cairn(&home, &["iostat", "-w", "tank"]));
    assert!(
        table.contains("syncq_wait") && table.contains("asyncq_wait") && table.contains("scrub"),
        "{table}"
    );
    // -w -v: a block for the pool, then the mirror, then each side; the sides' requests
    // add up to the mirror's, which are the pool's.
    let wv = ok(&cairn(&home, &["iostat", "-w", "-v", "-H", "-p", "tank"]));
    let blocks: Vec<Vec<Vec<u64>>> = wv
        .split("\n\n")
        .map(|b| {
            b.lines()
                .map(|l| l.split('\t').map(|c| c.parse().unwrap()).collect())
                .collect()
        })
        .collect();
    assert_eq!(blocks.len(), 4, "pool, mirror, two sides: {wv}");
    let total = |b: &Vec<Vec<u64>>, i: usize| b.iter().map(|r| r[i]).sum::<u64>();
    for i in [1, 2, 8, 9] {
        assert_eq!(total(&blocks[0], i), column(i), "pool block, column {i}");
        assert_eq!(total(&blocks[1], i), column(i), "mirror block, column {i}");
        assert_eq!(
            total(&blocks[2], i) + total(&blocks[3], i),
            column(i),
            "sides, column {i}"
        );
    }
    assert!(
        total(&blocks[2], 9) > 0 && total(&blocks[3], 9) > 0,
        "both sides scrubbed"
    );
    let table = ok(&cairn(&home, &["iostat", "-w", "-v", "tank"]));
    assert!(table.contains("mirror-0"), "{table}");

    // -q -H -p: the pool row has pend and activ for each of the six classes.
    let q = ok(&cairn(&home, &["iostat", "-q", "-H", "-p", "tank"]));
    let cells: Vec<&str> = q.trim().split('\t').collect();
    assert_eq!(cells.len(), 7 + 12, "{q}");
    // -v: every vdev and leaf row has them too, as numbers (pend: its leaves' jobs).
    let qv = ok(&cairn(&home, &["iostat", "-q", "-v", "-H", "-p", "tank"]));
    for line in qv.lines() {
        let cells: Vec<&str> = line.trim().split('\t').collect();
        assert_eq!(cells.len(), 7 + 12, "{qv}");
        assert!(cells[7..].iter().all(|c| c.parse::<u64>().is_ok()), "{qv}");
    }
    assert!(qv.lines().count() > 3, "{qv}");
    let q = ok(&cairn(&home, &["iostat", "-q", "tank"]));
    assert!(
        q.contains("syncq_read") && q.contains("scrubq_read") && q.contains("pend"),
        "{q}"
    );
}

/// `iostat` counts a vdev's space as `list` does (its metaslabs, which is what can be
/// allocated): the pool row's alloc and free are `list`'s, and the vdevs add up to them.
#[test]
fn iostat_space_agrees_with_list() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let d = files(dir.path(), 3, 64 * MIB);
    ok(&cairn(&home, &["create", "tank", "mirror", &d[0], &d[1]]));
    ok(&cairn(&home, &["add", "-f", "tank", &d[2]]));
    let src = dir.path().join("f");
    std::fs::write(&src, pseudo_random(6 * MIB as usize, 3)).unwrap();
    ok(&cairn(&home, &["put", src.to_str().unwrap(), "tank/f"]));
    let list = ok(&cairn(
        &home,
        &["list", "-o", "size,alloc,free", "-H", "-p", "tank"],
    ));
    let list: Vec<u64> = list
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    let iostat = ok(&cairn(&home, &["iostat", "-v", "-H", "-p", "tank"]));
    let field = |line: &str, i: usize| -> u64 { line.split('\t').nth(i).unwrap().parse().unwrap() };
    let pool = iostat.lines().next().unwrap();
    assert_eq!(
        [field(pool, 1), field(pool, 2)],
        [list[1], list[2]],
        "{iostat}"
    );
    let tops: Vec<&str> = iostat
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
        .collect();
    assert_eq!(tops.len(), 2, "{iostat}");
    let size: u64 = tops.iter().map(|l| field(l, 1) + field(l, 2)).sum();
    assert_eq!(size, list[0], "{iostat}");
}
