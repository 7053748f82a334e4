//! Pool lifecycle: export/move/import, exclusive ownership, damaged labels, and the
//! errors `create` gives for bad layouts and devices.

mod common;

use std::path::{Path, PathBuf};

use cairn_pool::{CreateOptions, Home, Pool, PoolError};
use common::*;
use rand::SeedableRng;

const MIB: u64 = 1 << 20;

fn create(home: &Home, name: &str, tokens: &[String]) -> Result<Pool, PoolError> {
    Pool::create(home, name, tokens, CreateOptions::default()).map(|o| o.pool.unwrap())
}

fn raidz2_tokens(files: &[PathBuf]) -> Vec<String> {
    std::iter::once("raidz2".to_string())
        .chain(files.iter().map(|f| f.display().to_string()))
        .collect()
}

#[test]
fn export_move_and_import_with_d_gives_the_same_pool_and_data() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    std::fs::create_dir(&a).unwrap();
    let files = make_files(&a, 6, 80 * MIB);
    let home = Home::at(dir.path().join("home"));
    let pool = create(&home, "tank", &raidz2_tokens(&files)).unwrap();
    let guid = pool.config.guid;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let written = write_random_blocks(&pool, &mut rng, 40);
    pool.export().unwrap();
    assert!(
        Pool::open(&home, "tank").is_err(),
        "exported pools are forgotten"
    );

    let b = dir.path().join("moved");
    std::fs::rename(&a, &b).unwrap();
    let found = Pool::scan(std::slice::from_ref(&b), false).unwrap();
    assert_eq!(found.len(), 1);
    assert!(found[0].importable());
    let pool = Pool::import(&home, std::slice::from_ref(&b), "tank", false, false).unwrap();
    assert_eq!(pool.config.guid, guid);
    assert_eq!(pool.health().to_string(), "ONLINE");
    assert!(pool.tops()[0]
        .children
        .iter()
        .all(|c| c.path.starts_with(b.to_str().unwrap())));
    assert_eq!(verify_all(&pool, &written), 0);
    drop(pool);
    // Later commands find it by name, at the new paths.
    let pool = Pool::open(&home, "tank").unwrap();
    assert_eq!(verify_all(&pool, &written), 0);
    // Import by GUID works too.
    pool.export().unwrap();
    let pool = Pool::import(&home, &[b], &guid.to_string(), false, false).unwrap();
    assert_eq!(pool.name(), "tank");
}

#[test]
fn a_second_importer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let files = make_files(dir.path(), 3, 64 * MIB);
    let home_a = Home::at(dir.path().join("home-a"));
    let home_b = Home::at(dir.path().join("home-b"));
    let tokens: Vec<String> = ["mirror".to_string()]
        .into_iter()
        .chain(files.iter().map(|f| f.display().to_string()))
        .collect();
    let held = create(&home_a, "tank", &tokens).unwrap();
    let dirs = [dir.path().to_path_buf()];
    // Held open by A: even -f cannot take the locked devices.
    let e = Pool::import(&home_b, &dirs, "tank", true, false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("in use by PID {}", std::process::id())),
        "{e}"
    );
    drop(held);
    // Not held, but imported by A and not exported: refused without -f.
    let e = Pool::import(&home_b, &dirs, "tank", false, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("in use") && e.contains("-f"), "{e}");
    // A itself can still open it; with -f, B takes it over.
    drop(Pool::open(&home_a, "tank").unwrap());
    let pool = Pool::import(&home_b, &dirs, "tank", true, false).unwrap();
    assert_eq!(pool.health().to_string(), "ONLINE");
}

fn zero_labels(path: &Path, which: &[usize]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let size = f.metadata().unwrap().len();
    for &i in which {
        let off = cairn_geometry::label_offset(size, i);
        f.write_all_at(&vec![0u8; cairn_geometry::LABEL_SIZE as usize], off)
            .unwrap();
    }
}

#[test]
fn damaged_labels_fall_back_to_the_other_copies() {
    let dir = tempfile::tempdir().unwrap();
    let files = make_files(dir.path(), 6, 64 * MIB);
    let home = Home::at(dir.path().join("home"));
    drop(create(&home, "tank", &raidz2_tokens(&files)).unwrap());
    zero_labels(&files[0], &[0, 1]);
    zero_labels(&files[1], &[2, 3]);
    let pool = Pool::open(&home, "tank").unwrap();
    assert_eq!(pool.health().to_string(), "ONLINE");
    drop(pool);
    zero_labels(&files[2], &[0, 1, 2, 3]);
    let pool = Pool::open(&home, "tank").unwrap();
    assert_eq!(pool.health().to_string(), "DEGRADED");
    let reason = pool.tops()[0].children[2]
        .unavailable_reason
        .clone()
        .unwrap();
    assert!(reason.contains("label"), "{reason}");
    // Garbage instead of labels: still no panic, still a clear state.
    drop(pool);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&files[3])
            .unwrap();
        let junk: Vec<u8> = (0..(1 << 20))
            .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        f.write_all_at(&junk, 0).unwrap();
    }
    let pool = Pool::open(&home, "tank").unwrap();
    assert_eq!(pool.health().to_string(), "DEGRADED");
}

#[test]
fn create_refuses_devices_of_another_pool_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let files = make_files(dir.path(), 4, 64 * MIB);
    let home = Home::at(dir.path().join("home"));
    let t = |fs: &[PathBuf]| -> Vec<String> {
        std::iter::once("mirror".to_string())
            .chain(fs.iter().map(|f| f.display().to_string()))
            .collect()
    };
    let pool = create(&home, "one", &t(&files[..2])).unwrap();
    pool.export().unwrap();
    let e = create(&home, "two", &t(&files[1..3]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("part of exported pool 'one'") && e.contains("-f"),
        "{e}"
    );
    let forced = Pool::create(
        &home,
        "two",
        &t(&files[1..3]),
        CreateOptions {
            force: true,
            ..CreateOptions::default()
        },
    );
    assert!(forced.is_ok());
    drop(forced);
    let e = create(&home, "two", &t(&files[2..4]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("already exists"), "{e}");
    Pool::open(&home, "two").unwrap().destroy().unwrap();
    // Devices of a destroyed pool are free for reuse.
    create(&home, "three", &t(&files[1..3])).unwrap();
}

#[test]
fn create_explains_bad_layouts_and_devices() {
    let dir = tempfile::tempdir().unwrap();
    let files = make_files(dir.path(), 4, 64 * MIB);
    let small = dir.path().join("small");
    std::fs::File::create(&small)
        .unwrap()
        .set_len(10 * MIB)
        .unwrap();
    let home = Home::at(dir.path().join("home"));
    let p = |i: usize| files[i].display().to_string();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (s(&["raidz2", &p(0), &p(1)]), "at least 3 devices"),
        (s(&["raidz3", &p(0), &p(1), &p(2)]), "at least 4 devices"),
        (s(&["mirror", &p(0)]), "at least 2 devices"),
        (s(&["mirror", &p(0), &p(0)]), "more than once"),
        (s(&["raidz5", &p(0), &p(1)]), "unknown vdev type"),
        (s(&["mirror", &p(0), "/nonexistent/disk"]), "no such file"),
        (
            s(&["mirror", &p(0), dir.path().to_str().unwrap()]),
            "is a directory",
        ),
        (s(&["mirror", &p(0), small.to_str().unwrap()]), "too small"),
        (
            s(&["mirror", &p(0), &p(1), "raidz1", &p(2), &p(3), &p(3)]),
            "more than once",
        ),
        (
            s(&[
                "mirror",
                &p(0),
                &p(1),
                &p(2),
                "mirror",
                &p(3),
                &small.display().to_string(),
            ]),
            "mismatched replication",
        ),
        (s(&["log", &p(0)]), "needs data devices"),
        (s(&["cache", &p(0)]), "not supported yet"),
        (s(&[&p(1), "spare"]), "spare"),
        (s(&[]), "no devices"),
    ];
    for (tokens, want) in cases {
        let e = create(&home, "tank", &tokens).unwrap_err().to_string();
        assert!(e.contains(want), "{tokens:?}: got '{e}', want '{want}'");
    }
    for bad in ["1tank", "mirror", "ta/nk", ""] {
        let e = create(&home, bad, &s(&[&p(0)])).unwrap_err().to_string();
        assert!(e.contains("invalid pool name"), "{bad}: {e}");
    }
    let e = Pool::create(
        &home,
        "tank",
        &s(&[&p(0)]),
        CreateOptions {
            ashift: Some(17),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("ashift=17"), "{e}");
    // Nothing was written by any refused create: all devices are still free.
    create(&home, "tank", &s(&["raidz1", &p(0), &p(1), &p(2), &p(3)])).unwrap();
}

#[test]
fn mismatched_replication_is_allowed_with_force_and_unequal_sizes_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = make_files(dir.path(), 5, 64 * MIB);
    let big = dir.path().join("big");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(96 * MIB)
        .unwrap();
    files.push(big);
    let home = Home::at(dir.path().join("home"));
    let p = |i: usize| files[i].display().to_string();
    let tokens: Vec<String> = vec![
        "mirror".into(),
        p(0),
        p(5),
        "raidz1".into(),
        p(1),
        p(2),
        p(3),
    ];
    let e = create(&home, "tank", &tokens).unwrap_err().to_string();
    assert!(
        e.contains("mismatched replication level: both mirror and raidz1"),
        "{e}"
    );
    let out = Pool::create(
        &home,
        "tank",
        &tokens,
        CreateOptions {
            force: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains("differ in size") && n.contains("mirror-0")),
        "{:?}",
        out.notes
    );
    assert_eq!(out.pool.unwrap().tops().len(), 2);
}

#[test]
fn ashift_below_the_physical_sector_warns() {
    let dir = tempfile::tempdir().unwrap();
    let files = make_files(dir.path(), 2, 64 * MIB);
    let home = Home::at(dir.path().join("home"));
    let tokens: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let out = Pool::create(
        &home,
        "tank",
        &tokens,
        CreateOptions {
            ashift: Some(9),
            dry_run: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains("4096-byte physical sectors") && n.contains("ashift=9")),
        "{:?}",
        out.notes
    );
    let out = Pool::create(
        &home,
        "tank",
        &tokens,
        CreateOptions {
            dry_run: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        out.config.vdevs[0].ashift, 12,
        "files are probed as 4 KiB sectors"
    );
    assert!(out.notes.is_empty());
    assert!(out.pool.is_none());
    // The dry run wrote nothing.
    create(&home, "tank", &tokens).unwrap();
}

/// Rewrites, in every label of `path`, the ring slot of the newest uberblock as a newer
/// cairn would write it: version 2, checksum made anew (so it verifies).
fn write_newer_uberblock(path: &Path) {
    use cairn_vdev::label::{UBERBLOCK_RING_OFFSET, UBERBLOCK_SIZE};
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let size = f.metadata().unwrap().len();
    for i in 0..4 {
        let ring = cairn_geometry::label_offset(size, i) + UBERBLOCK_RING_OFFSET as u64;
        // Slots are whole KiB; take the first slot that holds an uberblock.
        let mut slot = [0u8; UBERBLOCK_SIZE];
        let at = (0..128u64)
            .map(|s| ring + s * 1024)
            .find(|&at| {
                f.read_exact_at(&mut slot, at).unwrap();
                slot.iter().any(|&b| b != 0)
            })
            .expect("an uberblock in the ring");
        slot[8..12].copy_from_slice(&2u32.to_le_bytes());
        cairn_vdev::label::seal_uberblock(&mut slot);
        f.write_all_at(&slot, at).unwrap();
    }
}

/// A pool a newer cairn has written to is never opened at an older txg, imported, or
/// overwritten by `create` unasked: each says "upgrade cairn" (issue 13), and nothing on
/// the devices changes.
#[test]
fn a_newer_cairns_pool_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    std::fs::create_dir(&a).unwrap();
    let files = make_files(&a, 2, 64 * MIB);
    let dirs = vec![a];
    let home = Home::at(dir.path().join("home"));
    let tokens: Vec<String> = std::iter::once("mirror".to_string())
        .chain(files.iter().map(|f| f.display().to_string()))
        .collect();
    create(&home, "tank", &tokens).unwrap().export().unwrap();
    let pool = Pool::import(&home, &dirs, "tank", false, false).unwrap();
    drop(pool);
    write_newer_uberblock(&files[1]);
    let before: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    let e = Pool::open(&home, "tank").unwrap_err().to_string();
    assert!(
        e.contains("newer cairn") && e.contains("upgrade cairn"),
        "{e}"
    );
    let other = Home::at(dir.path().join("other"));
    let e = Pool::import(&other, &dirs, "tank", true, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("upgrade cairn"), "{e}");
    let e = create(&other, "new", &tokens).unwrap_err().to_string();
    assert!(e.contains("-f"), "{e}");
    let e = create(&other, "new", &[files[1].display().to_string()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("newer cairn") && e.contains("-f"), "{e}");
    let after: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    assert!(before == after, "a refused command changed a device");
    // Labels only a newer cairn reads: import names the device.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&files[0])
            .unwrap();
        let size = f.metadata().unwrap().len();
        for i in 0..4 {
            let config =
                cairn_geometry::label_offset(size, i) + cairn_vdev::label::CONFIG_OFFSET as u64;
            let newer = cairn_vdev::label::CONFIG_VERSION + 1;
            f.write_all_at(&newer.to_le_bytes(), config + 8).unwrap();
        }
    }
    std::fs::remove_file(&files[1]).unwrap();
    let e = Pool::import(&other, &dirs, "tank", true, false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no such pool") && e.contains("newer cairn") && e.contains("d0"),
        "{e}"
    );
    // -f overwrites it, as asked.
    let one = vec![files[0].display().to_string()];
    let forced = Pool::create(
        &other,
        "new",
        &one,
        CreateOptions {
            force: true,
            ..CreateOptions::default()
        },
    );
    assert!(forced.is_ok(), "{:?}", forced.err());
}
