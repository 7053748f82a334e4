//! `cairn receive` of arbitrary bytes (a stream comes from a file, a pipe or the network)
//! into one pool kept for the whole run: a stream that fails must leave nothing behind
//! and no panic; one that is received is destroyed again. Seeds: real full, incremental
//! and `-R` streams (`scripts/fuzz-disk.sh` makes them with the cairn binary).
#![no_main]
use std::sync::{Mutex, OnceLock};

use cairn_objset::receive::ReceiveOptions;
use cairn_objset::Store;
use cairn_pool::{CreateOptions, Home, Pool};
use libfuzzer_sys::fuzz_target;

fn store() -> &'static Mutex<Store> {
    static STORE: OnceLock<Mutex<Store>> = OnceLock::new();
    STORE.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" };
        let dir = std::path::PathBuf::from(format!("{base}/cairn-fuzz-receive-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("fuzz pool folder");
        let leaf = dir.join("d0");
        std::fs::File::create(&leaf).and_then(|f| f.set_len(512 << 20)).expect("leaf file");
        let home = Home::at(dir.join("home"));
        let leaf = leaf.display().to_string();
        Pool::create(&home, "fz", &[leaf], CreateOptions::default()).expect("fuzz pool");
        let store = Store::open(Pool::open(&home, "fz").expect("open")).expect("store");
        Mutex::new(store)
    })
}

fuzz_target!(|data: &[u8]| {
    let store = store().lock().unwrap_or_else(|p| p.into_inner());
    let opts = ReceiveOptions { force: true, resumable: false, origin: None };
    let mut input = data;
    if store.receive("fz/r", &opts, &mut input).is_ok() {
        store.dataset_destroy("fz/r", true).expect("a received dataset can be destroyed");
    } else {
        assert!(store.resolve("fz/r").is_err(), "a failed receive left fz/r behind");
    }
});
