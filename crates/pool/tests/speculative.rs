//! Blocks the intent log names are read speculatively at import (`Pool::read_block_speculative`,
//! `Pool::read_bp_speculative`): a block whose write a crash cut part-way — one raidz data
//! column left as it was, the parity written — is rebuilt from the parity and charges no
//! device (the write hole is not a device fault); an ordinary read of the same block
//! charges that column's leaf.

mod common;

use std::os::unix::fs::FileExt;

use cairn_geometry::{raidz_map, LEAF_DATA_START};
use cairn_pool::status::status_json;
use cairn_pool::{CreateOptions, Home, Pool};
use common::make_files;

const BLOCK: usize = 8192;

/// Checksum errors per leaf.
fn checksum_errors(pool: &Pool) -> Vec<u64> {
    status_json(pool)
        .vdevs
        .iter()
        .flat_map(|v| v.leaves.iter().map(|l| l.checksum_errors))
        .collect()
}

#[test]
fn a_block_whose_write_was_cut_charges_no_device_when_read_speculatively() {
    let dir = tempfile::tempdir().unwrap();
    let files = make_files(dir.path(), 3, 64 << 20);
    let home = Home::at(dir.path().join("home"));
    let mut tokens = vec!["raidz1".to_string()];
    tokens.extend(files.iter().map(|f| f.display().to_string()));
    let pool = Pool::create(&home, "tank", &tokens, CreateOptions::default())
        .unwrap()
        .pool
        .unwrap();
    let offset = 1 << 20;
    let old = vec![1u8; BLOCK];
    let new: Vec<u8> = (0..BLOCK).map(|i| (i * 7 + 3) as u8).collect();
    let map = raidz_map(offset, BLOCK as u64, 3, 1, pool.tops()[0].ashift());
    let col = map.data_columns()[0];
    let leaf = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&files[col.child])
        .unwrap();
    let at = LEAF_DATA_START + col.offset;
    pool.write_block(0, offset, &old).unwrap();
    let mut kept = vec![0u8; col.size as usize];
    leaf.read_exact_at(&mut kept, at).unwrap();
    pool.write_block(0, offset, &new).unwrap();
    // The crash: this column's write never happened.
    let cut = || leaf.write_all_at(&kept, at).unwrap();
    let verify = |b: &[u8]| b == &new[..];

    cut();
    let mut out = vec![0u8; BLOCK];
    pool.read_block_speculative(0, offset, &mut out, &verify)
        .unwrap();
    assert!(out == new, "rebuilt from the parity");
    assert_eq!(checksum_errors(&pool), [0, 0, 0], "no device charged");

    cut();
    pool.read_block(0, offset, &mut out, Some(&verify)).unwrap();
    let mut charged = vec![0; 3];
    charged[col.child] = 1;
    assert_eq!(
        checksum_errors(&pool),
        charged,
        "an ordinary read charges the column"
    );
}
