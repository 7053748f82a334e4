//! Helpers for object-store tests: pools over sparse files.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use cairn_objset::{Store, StoreConfig};
use cairn_pool::{CreateOptions, Home, Pool};

pub fn make_files(dir: &Path, n: usize, size: u64) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("d{i}"));
            std::fs::File::create(&p).unwrap().set_len(size).unwrap();
            p
        })
        .collect()
}

/// A pool named `tank` with the layout `kind` (e.g. "raidz2", "mirror", "") over `n` files.
pub fn new_pool(dir: &Path, kind: &str, n: usize, size: u64) -> (Home, Vec<PathBuf>) {
    let files = make_files(dir, n, size);
    let home = Home::at(dir.join("home"));
    let mut tokens: Vec<String> = Vec::new();
    if !kind.is_empty() {
        tokens.push(kind.to_string());
    }
    tokens.extend(files.iter().map(|f| f.display().to_string()));
    Pool::create(&home, "tank", &tokens, CreateOptions::default()).unwrap();
    (home, files)
}

pub fn open_store(home: &Home) -> Store {
    Store::open(Pool::open(home, "tank").unwrap()).unwrap()
}

pub fn open_store_with(home: &Home, config: StoreConfig) -> Store {
    Store::open_with(Pool::open(home, "tank").unwrap(), config).unwrap()
}
