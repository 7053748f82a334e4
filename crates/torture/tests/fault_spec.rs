//! `fault:` device specs end to end: a pool created over fault-wrapped leaves keeps them
//! wrapped when reopened, and a control file next to a leaf flips its faults while the
//! pool is open.

use std::time::Duration;

use cairn_objset::Store;
use cairn_pool::{CreateOptions, Home, Pool};
use cairn_vdev::fault::CONTROL_POLL;

#[test]
fn control_file_makes_a_leaf_vanish_and_the_pool_reads_around_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut specs = vec!["raidz1".to_string()];
    for i in 0..3 {
        let path = dir.path().join(format!("d{i}"));
        std::fs::File::create(&path)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        specs.push(format!("fault:{}?delay_us=10", path.display()));
    }
    let home = Home::at(dir.path().join("home"));
    Pool::create(&home, "tank", &specs, CreateOptions::default()).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    {
        let store = Store::open(Pool::open(&home, "tank").unwrap()).unwrap();
        store.create_file("tank/f", false).unwrap();
        let r = store.resolve("tank/f").unwrap();
        store.write(&r, 0, &data).unwrap();
        store.close().unwrap();
    }
    let pool = Pool::open(&home, "tank").unwrap();
    assert!(
        pool.tops()[0].children[1].path.starts_with("fault:"),
        "the reopened leaf is wrapped again: {}",
        pool.tops()[0].children[1].path
    );
    let store = Store::open(pool).unwrap();
    std::fs::write(dir.path().join("d1.fault"), "vanish=1\n").unwrap();
    std::thread::sleep(CONTROL_POLL + Duration::from_millis(50));
    let r = store.resolve("tank/f").unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(store.read(&r, 0, &mut back).unwrap(), data.len());
    assert!(back == data);
    store.write(&r, 0, &data[..4096]).unwrap();
    store.sync().unwrap();
    let removed = &store.pool().tops()[0].children[1];
    assert!(!removed.is_usable(), "the vanished leaf is no longer used");
}
