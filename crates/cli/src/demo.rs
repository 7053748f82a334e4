//! `cairn demo`: the embedded default job. Builds a raidz2 pool over six sparse files in a
//! temporary folder, stores files in it, loses two disks, reads every byte back, then lets
//! bit rot hit a surviving disk and scrubs it away — showing `status` along the way.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cairn_objset::scrub::ScrubControl;
use cairn_objset::{DatasetKind, Store};
use cairn_pool::status::{render_list, render_status, ListRow};
use cairn_pool::{CreateOptions, Home, Pool};
use rand::{Rng, RngCore, SeedableRng};

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Folder for the leaf files (default: a new folder under the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Size of each leaf file in MiB.
    #[arg(long, default_value_t = 256)]
    leaf_mib: u64,
    /// MiB of data to store.
    #[arg(long, default_value_t = 200)]
    data_mib: u64,
    /// Keep the folder afterwards.
    #[arg(long)]
    keep: bool,
}

pub fn run(a: DemoArgs) -> Result<(), String> {
    let dir = a
        .dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("cairn-demo-{}", std::process::id())));
    let result = run_in(&dir, &a);
    if a.keep {
        println!("kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

fn e(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Deterministic test files: half random (incompressible), half text.
fn make_files(total: u64) -> Vec<(String, Vec<u8>)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut files = Vec::new();
    let mut left = total;
    let mut i = 0;
    while left > 0 {
        let size = rng.gen_range(1u64 << 16..=16 << 20).min(left);
        let data = if i % 2 == 0 {
            let mut d = vec![0u8; size as usize];
            rng.fill_bytes(&mut d);
            d
        } else {
            format!("line {i} of a log file that compresses well\n")
                .into_bytes()
                .into_iter()
                .cycle()
                .take(size as usize)
                .collect()
        };
        let path = if i % 3 == 0 {
            format!("demo/logs/file{i}")
        } else {
            format!("demo/data/file{i}")
        };
        files.push((path, data));
        left -= size;
        i += 1;
    }
    files
}

/// The demo's steps, in a folder that exists afterwards (`run` removes it unless asked to
/// keep it).
fn run_in(dir: &Path, a: &DemoArgs) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    let home = Home::at(dir.join("home"));
    let pool = create_pool(dir, &home, a.leaf_mib)?;
    let files = store_files(pool, a.data_mib)?;
    read_with_disks_pulled(dir, &home, &files)?;
    repair_bit_rot(dir, &home, &files)
}

/// The disks (leaf files `d1`, `d4`) pulled out of the pool and later put back.
const PULLED_DISKS: [usize; 2] = [1, 4];

/// Creates the six sparse leaf files `d0`..`d5` of `leaf_mib` MiB each and the raidz2 pool
/// `demo` over them, and shows its status.
fn create_pool(dir: &Path, home: &Home, leaf_mib: u64) -> Result<Pool, String> {
    let mut tokens = vec!["raidz2".to_string()];
    for i in 0..6 {
        let path = dir.join(format!("d{i}"));
        let f = std::fs::File::create(&path).map_err(|err| format!("{}: {err}", path.display()))?;
        f.set_len(leaf_mib << 20).map_err(e)?;
        tokens.push(path.display().to_string());
    }
    println!("$ cairn create demo {}", tokens.join(" "));
    let pool = Pool::create(home, "demo", &tokens, CreateOptions::default())
        .map_err(e)?
        .pool
        .ok_or("dry run")?;
    print!("{}", render_status(&pool, false));
    Ok(pool)
}

/// Stores `data_mib` MiB of test files in the pool (the logs in a zstd-compressed dataset),
/// shows the space they take, and closes the pool. Returns the files, to check them later.
fn store_files(pool: Pool, data_mib: u64) -> Result<Vec<(String, Vec<u8>)>, String> {
    let store = Store::open(pool).map_err(e)?;
    store
        .dataset_create(
            "demo/logs",
            DatasetKind::Filesystem,
            [("compression".into(), "zstd".into())].into(),
            None,
            false,
        )
        .map_err(e)?;
    let files = make_files(data_mib << 20);
    write_files(&store, &files)?;
    let usage = store.space();
    println!("\n$ cairn list");
    print!(
        "{}",
        render_list(
            &[ListRow::with_usage(store.pool(), usage.alloc, usage.used)],
            false,
            false
        )
    );
    let pool = store.close().map_err(e)?;
    drop(pool);
    Ok(files)
}

/// Writes `files` and syncs, then says how long it took.
fn write_files(store: &Store, files: &[(String, Vec<u8>)]) -> Result<(), String> {
    let start = Instant::now();
    for (path, data) in files {
        store.create_file(path, true).map_err(e)?;
        let r = store.resolve(path).map_err(e)?;
        store.write(&r, 0, data).map_err(e)?;
    }
    store.sync().map_err(e)?;
    let bytes: usize = files.iter().map(|f| f.1.len()).sum();
    println!(
        "\nstored {} files, {:.1} MiB in {:.2} s (checksummed, compressed, raidz2 parity)",
        files.len(),
        bytes as f64 / 1048576.0,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Pulls two disks (renames their leaf files away), opens the pool without them and reads
/// every file back.
fn read_with_disks_pulled(
    dir: &Path,
    home: &Home,
    files: &[(String, Vec<u8>)],
) -> Result<(), String> {
    for i in PULLED_DISKS {
        let path = dir.join(format!("d{i}"));
        std::fs::rename(&path, dir.join(format!("d{i}.pulled"))).map_err(e)?;
        println!(
            "$ mv {0} {0}.pulled   # two disks are pulled",
            path.display()
        );
    }
    let store = Store::open(Pool::open(home, "demo").map_err(e)?).map_err(e)?;
    println!();
    print!("{}", render_status(store.pool(), false));
    check(&store, files)?;
    println!(
        "\nread back all {} files identical with 2 of 6 disks gone",
        files.len()
    );
    drop(store);
    Ok(())
}

/// Puts the pulled disks back, lets bit rot hit two of them, reads every file back (the
/// reads repair what they find), scrubs the rest away and exports the pool.
fn repair_bit_rot(dir: &Path, home: &Home, files: &[(String, Vec<u8>)]) -> Result<(), String> {
    for i in PULLED_DISKS {
        std::fs::rename(dir.join(format!("d{i}.pulled")), dir.join(format!("d{i}"))).map_err(e)?;
    }
    println!(
        "$ # the disks are back; now 2000 random 4 KiB sectors of d2 and of d5 turn to garbage"
    );
    rot(&dir.join("d2"), 2000, 7)?;
    rot(&dir.join("d5"), 2000, 8)?;
    let store = Store::open(Pool::open(home, "demo").map_err(e)?).map_err(e)?;
    check(&store, files)?;
    println!(
        "read back all files identical: damaged columns were rebuilt from parity and rewritten"
    );
    scrub(&store)?;
    print!("{}", render_status(store.pool(), false));
    let pool = store.close().map_err(e)?;
    println!("\n$ cairn export demo");
    pool.export().map_err(e)?;
    Ok(())
}

/// Scrubs the pool and says what it repaired.
fn scrub(store: &Store) -> Result<(), String> {
    let (p, _) = store
        .scrub(None, Duration::from_secs(3600), &mut |_| {
            ScrubControl::Continue
        })
        .map_err(e)?;
    println!(
        "\n$ cairn scrub demo\nscrub repaired {:.1} MiB, {} errors, {} blocks in {:.2} s",
        p.repaired_bytes as f64 / 1048576.0,
        p.errors,
        p.blocks,
        p.elapsed_secs
    );
    Ok(())
}

/// Reads every file back and fails unless it holds what was written.
fn check(store: &Store, files: &[(String, Vec<u8>)]) -> Result<(), String> {
    for (path, data) in files {
        let r = store.resolve(path).map_err(e)?;
        let mut buf = vec![0u8; data.len()];
        store.read(&r, 0, &mut buf).map_err(e)?;
        if &buf != data {
            return Err(format!("{path} read back wrong: this is a bug"));
        }
    }
    Ok(())
}

/// Bit rot: overwrites `sectors` random 4 KiB sectors of the leaf file at `path` (inside its
/// data area) with random bytes.
fn rot(path: &Path, sectors: usize, seed: u64) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(e)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut junk = vec![0u8; 4096];
    let span = (f.metadata().map_err(e)?.len() - (5 << 20)) / 4096;
    for _ in 0..sectors {
        rng.fill_bytes(&mut junk);
        let at = (4 << 20) + rng.gen_range(0..span.min(64 << 8)) * 4096;
        f.write_all_at(&junk, at).map_err(e)?;
    }
    Ok(())
}
