//! Helpers shared by the pool integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use cairn_pool::Pool;
use rand::Rng;

/// Creates `n` sparse files `d0..d{n-1}` of `size` bytes in `dir`.
pub fn make_files(dir: &Path, n: usize, size: u64) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("d{i}"));
            let f = std::fs::File::create(&p).unwrap();
            f.set_len(size).unwrap();
            p
        })
        .collect()
}

/// Expands the seeds' layout notation ("raidz1 d0..d4 raidz1 d5..d9", "mirror x6 (pairs)",
/// "d0..d23") into zpool tokens over `files`.
pub fn layout_tokens(layout: &str, files: &[PathBuf]) -> Vec<String> {
    let path = |i: usize| files[i].display().to_string();
    if let Some(rest) = layout.strip_prefix("mirror x") {
        let n: usize = rest.split_whitespace().next().unwrap().parse().unwrap();
        return (0..n)
            .flat_map(|m| vec!["mirror".to_string(), path(2 * m), path(2 * m + 1)])
            .collect();
    }
    let mut out = Vec::new();
    for tok in layout.split_whitespace() {
        if let Some((a, b)) = tok.split_once("..") {
            let a: usize = a.trim_start_matches('d').parse().unwrap();
            let b: usize = b.trim_start_matches('d').parse().unwrap();
            out.extend((a..=b).map(path));
        } else if let Some(i) = tok.strip_prefix('d').and_then(|n| n.parse::<usize>().ok()) {
            out.push(path(i));
        } else {
            out.push(tok.to_string());
        }
    }
    out
}

/// A block written in a test: where, and what.
pub struct Written {
    pub vdev: usize,
    pub offset: u64,
    pub data: Vec<u8>,
}

/// Writes `count` blocks of random sizes (one sector .. 1 MiB, log-uniform) spread over
/// the pool's top-level vdevs with a bump allocator per vdev.
pub fn write_random_blocks(pool: &Pool, rng: &mut impl Rng, count: usize) -> Vec<Written> {
    let mut next = vec![0u64; pool.tops().len()];
    let mut out = Vec::new();
    for i in 0..count {
        let vdev = i % pool.tops().len();
        let top = &pool.tops()[vdev];
        let shift = rng.gen_range(top.ashift()..=20);
        let bytes = rng
            .gen_range((1u64 << shift) / 2..=(1u64 << shift))
            .max(top.sector());
        let psize = bytes.div_ceil(top.sector()) * top.sector();
        let asize = top.block_asize(psize);
        if next[vdev] + asize > top.config.asize {
            continue;
        }
        let mut data = vec![0u8; psize as usize];
        rng.fill_bytes(&mut data);
        pool.write_block(vdev, next[vdev], &data).unwrap();
        out.push(Written {
            vdev,
            offset: next[vdev],
            data,
        });
        next[vdev] += asize;
    }
    out
}

/// Reads every block back and asserts it is identical; returns how many were rebuilt.
pub fn verify_all(pool: &Pool, written: &[Written]) -> usize {
    let mut rebuilt = 0;
    for w in written {
        let mut buf = vec![0u8; w.data.len()];
        let report = pool
            .read_block(w.vdev, w.offset, &mut buf, None)
            .unwrap_or_else(|e| panic!("block at vdev {} offset {}: {e}", w.vdev, w.offset));
        assert!(
            buf == w.data,
            "block at vdev {} offset {} differs",
            w.vdev,
            w.offset
        );
        rebuilt += usize::from(report.reconstructed);
    }
    rebuilt
}
