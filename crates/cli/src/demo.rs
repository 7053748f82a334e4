//! `cairn demo`: the embedded default job. Builds a raidz2 pool over six sparse files in a
//! temporary folder, writes blocks of many sizes, loses two disks, reads every byte back,
//! and shows `status` and `list` along the way.

use std::path::PathBuf;

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
    /// Number of blocks to write.
    #[arg(long, default_value_t = 400)]
    blocks: usize,
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
    if !a.keep {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("kept {}", dir.display());
    }
    result
}

fn run_in(dir: &std::path::Path, a: &DemoArgs) -> Result<(), String> {
    let e = |e: cairn_pool::PoolError| e.to_string();
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let home = Home::at(dir.join("home"));
    let mut tokens = vec!["raidz2".to_string()];
    for i in 0..6 {
        let path = dir.join(format!("d{i}"));
        let f = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        f.set_len(a.leaf_mib << 20).map_err(|e| e.to_string())?;
        tokens.push(path.display().to_string());
    }
    println!("$ cairn create demo {}", tokens.join(" "));
    let outcome = Pool::create(&home, "demo", &tokens, CreateOptions::default()).map_err(e)?;
    let pool = outcome.pool.expect("not a dry run");
    print!("{}", render_status(&pool, false));
    println!("\n$ cairn list");
    print!("{}", render_list(&[ListRow::of(&pool)], false, false));

    // Write blocks of 4 KiB .. 1 MiB at consecutive offsets (the object store's allocator
    // will place them later; here a bump pointer does).
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let top = &pool.tops[0];
    let mut offset = 0u64;
    let mut written: Vec<(u64, Vec<u8>)> = Vec::new();
    let start = std::time::Instant::now();
    for _ in 0..a.blocks {
        let sectors = rng.gen_range(1..=256u64);
        let mut data = vec![0u8; (sectors * top.sector()) as usize];
        rng.fill_bytes(&mut data);
        if offset + top.block_asize(data.len() as u64) > top.config.asize {
            break;
        }
        pool.write_block(0, offset, &data).map_err(e)?;
        written.push((offset, data));
        offset += top.block_asize(sectors * top.sector());
    }
    pool.flush().map_err(e)?;
    let bytes: usize = written.iter().map(|(_, d)| d.len()).sum();
    println!(
        "\nwrote {} blocks, {:.1} MiB in {:.2} s",
        written.len(),
        bytes as f64 / 1048576.0,
        start.elapsed().as_secs_f64()
    );
    drop(pool);

    for i in [1, 4] {
        let path = dir.join(format!("d{i}"));
        std::fs::remove_file(&path).map_err(|e| e.to_string())?;
        println!("$ rm {}   # a disk dies", path.display());
    }
    let pool = Pool::open(&home, "demo").map_err(e)?;
    println!();
    print!("{}", render_status(&pool, false));
    let start = std::time::Instant::now();
    let mut reconstructed = 0;
    for (offset, data) in &written {
        let mut out = vec![0u8; data.len()];
        let report = pool.read_block(0, *offset, &mut out, None).map_err(e)?;
        if &out != data {
            return Err(format!("block at {offset} read back wrong: this is a bug"));
        }
        reconstructed += usize::from(report.reconstructed);
    }
    println!(
        "\nread back all {} blocks identical with 2 of 6 disks gone ({} rebuilt from parity) in {:.2} s",
        written.len(),
        reconstructed,
        start.elapsed().as_secs_f64()
    );
    println!("\n$ cairn export demo");
    pool.export().map_err(e)?;
    Ok(())
}
