//! The NBD client leaf against the in-process server: sizes, sector size, I/O, errors,
//! and ENXIO when the server stays away.

mod common;

use std::os::unix::net::UnixListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_nbd::{open_nbd_leaf, BlockExport, MemoryExport, NbdLeaf, NbdLeafOptions, NbdServer};
use cairn_vdev::VdevError;
use common::*;

const SIZE: u64 = 64 << 20;

#[test]
fn leaf_reads_writes_and_reports_geometry() {
    let export = Arc::new(MemoryExport::new(SIZE).with_block_size(8192));
    let served = serve_unix(vec![("d", export.clone())]);
    let leaf = open_nbd_leaf(&served.uri("d")).unwrap();
    assert_eq!(leaf.size(), SIZE);
    assert_eq!(leaf.physical_sector_size(), 8192);
    assert_eq!(leaf.path(), served.uri("d"));
    let data: Vec<u8> = (0..(40 << 20)).map(|i: u32| (i * 7 + 3) as u8).collect();
    leaf.write_at(&data, 4096).unwrap(); // larger than one request: split
    leaf.flush().unwrap();
    let mut back = vec![0u8; data.len()];
    leaf.read_at(&mut back, 4096).unwrap();
    assert!(back == data);
    let mut direct = vec![0u8; 4096];
    export.read_at(&mut direct, 4096).unwrap();
    assert_eq!(direct[..], data[..4096]);
    // Server-side errors come back as errno values, and the connection stays usable.
    let err = leaf.read_at(&mut [0u8; 512], SIZE).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    leaf.read_at(&mut direct, 0).unwrap();
}

#[test]
fn leaf_is_thread_safe() {
    let served = serve_unix(vec![(
        "d",
        Arc::new(MemoryExport::new(SIZE)) as Arc<dyn BlockExport>,
    )]);
    let leaf = open_nbd_leaf(&served.uri("d")).unwrap();
    std::thread::scope(|s| {
        for t in 0..8u8 {
            let leaf = &leaf;
            s.spawn(move || {
                for i in 0..50u64 {
                    let off = (u64::from(t) * 50 + i) * 65536;
                    leaf.write_at(&[t ^ i as u8; 65536], off).unwrap();
                    let mut back = [0u8; 65536];
                    leaf.read_at(&mut back, off).unwrap();
                    assert!(back.iter().all(|&b| b == t ^ i as u8));
                }
            });
        }
    });
}

#[test]
fn open_errors() {
    let served = serve_unix(vec![
        (
            "small",
            Arc::new(MemoryExport::new(32 << 20)) as Arc<dyn BlockExport>,
        ),
        (
            "odd",
            Arc::new(MemoryExport::new(SIZE).with_block_size(3000)),
        ),
    ]);
    match open_nbd_leaf(&served.uri("small")) {
        Err(VdevError::TooSmall { size, .. }) => assert_eq!(size, 32 << 20),
        other => panic!("expected TooSmall, got {other:?}"),
    }
    // A preferred block size that is not a power of two is not a sector size.
    let leaf = open_nbd_leaf(&served.uri("odd")).unwrap();
    assert_eq!(leaf.physical_sector_size(), 4096);
    let err = open_nbd_leaf(&served.uri("missing")).unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
    assert!(open_nbd_leaf("nbd+unix:///x").is_err());
    assert!(open_nbd_leaf("nbd+unix:///x?socket=/nonexistent/sock").is_err());
}

#[test]
fn leaf_reconnects_and_reports_enxio_when_the_server_stays_away() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s");
    let export: Arc<dyn BlockExport> = Arc::new(MemoryExport::new(SIZE));
    let source = table(vec![("d", export)]);
    let server = NbdServer::new(source.clone()).spawn_unix(UnixListener::bind(&socket).unwrap());
    let url = format!("nbd+unix:///d?socket={}", socket.display());
    let options = NbdLeafOptions {
        reconnect_window: Duration::from_millis(1500),
        ..NbdLeafOptions::default()
    };
    let leaf = NbdLeaf::open(&url, options).unwrap();
    use cairn_vdev::Leaf;
    leaf.write_at(&[1; 4096], 0).unwrap();

    // Server restarts within the window: I/O reconnects and succeeds.
    server.stop().unwrap();
    std::fs::remove_file(&socket).unwrap();
    let restarted = std::thread::spawn({
        let (socket, source) = (socket.clone(), source.clone());
        move || {
            std::thread::sleep(Duration::from_millis(300));
            NbdServer::new(source).spawn_unix(UnixListener::bind(&socket).unwrap())
        }
    });
    let mut back = [0u8; 4096];
    leaf.read_at(&mut back, 0).unwrap();
    assert_eq!(back, [1; 4096]);
    let server = restarted.join().unwrap();

    // Server gone for good: ENXIO after the bounded window.
    server.stop().unwrap();
    let started = Instant::now();
    let err = leaf.read_at(&mut back, 0).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENXIO));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[test]
fn leaf_over_tcp() {
    let export: Arc<dyn BlockExport> = Arc::new(MemoryExport::new(SIZE));
    let (_server, port) = serve_tcp(vec![("tcp disk", export)]);
    let leaf = open_nbd_leaf(&format!("nbd://127.0.0.1:{port}/tcp%20disk")).unwrap();
    assert_eq!(leaf.size(), SIZE);
    leaf.write_at(&[4; 8192], 1 << 20).unwrap();
    let mut back = [0u8; 8192];
    leaf.read_at(&mut back, 1 << 20).unwrap();
    assert_eq!(back, [4; 8192]);
}

#[test]
fn leaf_refuses_a_different_disk_after_reconnect() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s");
    let first = table(vec![(
        "d",
        Arc::new(MemoryExport::new(SIZE)) as Arc<dyn BlockExport>,
    )]);
    let server = NbdServer::new(first).spawn_unix(UnixListener::bind(&socket).unwrap());
    let url = format!("nbd+unix:///d?socket={}", socket.display());
    let options = NbdLeafOptions {
        reconnect_window: Duration::from_millis(500),
        ..NbdLeafOptions::default()
    };
    let leaf = NbdLeaf::open(&url, options).unwrap();
    server.stop().unwrap();
    std::fs::remove_file(&socket).unwrap();
    let other = table(vec![(
        "d",
        Arc::new(MemoryExport::new(2 * SIZE)) as Arc<dyn BlockExport>,
    )]);
    let _server = NbdServer::new(other).spawn_unix(UnixListener::bind(&socket).unwrap());
    use cairn_vdev::Leaf;
    let err = leaf.write_at(&[1; 4096], 0).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENXIO));
}
