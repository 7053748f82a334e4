//! The server against real NBD clients: qemu-img, nbdcopy, nbdinfo and fio's nbd engine.

mod common;

use std::sync::Arc;

use cairn_nbd::{BlockExport, FileExport, MemoryExport};
use common::*;

const SIZE: u64 = 64 << 20;

#[test]
fn qemu_img_convert_round_trip() {
    let served = serve_unix(vec![("disk", Arc::new(MemoryExport::new(SIZE)))]);
    let src = served.path("src.raw");
    random_file(&src, SIZE as usize);
    let uri = served.uri("disk");
    let back = served.path("back.raw");
    let (src_s, back_s) = (src.to_str().unwrap(), back.to_str().unwrap());
    run_ok(
        "qemu-img",
        &["convert", "-n", "-f", "raw", "-O", "raw", src_s, &uri],
    );
    run_ok(
        "qemu-img",
        &["convert", "-f", "raw", "-O", "raw", &uri, back_s],
    );
    let out = run_ok(
        "qemu-img",
        &["compare", "-f", "raw", "-F", "raw", src_s, back_s],
    );
    assert!(out.contains("identical"), "{out}");
    let out = run_ok(
        "qemu-img",
        &["compare", "-f", "raw", "-F", "raw", src_s, &uri],
    );
    assert!(out.contains("identical"), "{out}");
}

#[test]
fn nbdcopy_with_four_connections_both_ways() {
    let served = serve_unix(vec![("disk", Arc::new(MemoryExport::new(SIZE)))]);
    let src = served.path("src.raw");
    let data = random_file(&src, SIZE as usize);
    let uri = served.uri("disk");
    let back = served.path("back.raw");
    run_ok("nbdcopy", &["--connections=4", src.to_str().unwrap(), &uri]);
    run_ok(
        "nbdcopy",
        &["--connections=4", &uri, back.to_str().unwrap()],
    );
    assert!(
        std::fs::read(&back).unwrap() == data,
        "nbdcopy round trip differs"
    );
}

fn nbdinfo_json(uri: &str) -> serde_json::Value {
    let out = run_ok("nbdinfo", &["--json", uri]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["exports"][0].clone()
}

#[test]
fn nbdinfo_shows_size_block_sizes_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let rw = FileExport::create(&dir.path().join("rw"), SIZE)
        .unwrap()
        .with_block_size(16384);
    let ro = MemoryExport::new(SIZE / 2).read_only(true);
    let served = serve_unix(vec![("rw", Arc::new(rw)), ("ro", Arc::new(ro))]);

    let e = nbdinfo_json(&served.uri("rw"));
    assert_eq!(e["export-size"], SIZE);
    assert_eq!(e["block_size_minimum"], 512);
    assert_eq!(e["block_size_preferred"], 16384);
    assert_eq!(e["block_size_maximum"], 32 << 20);
    for flag in [
        "can_multi_conn",
        "can_trim",
        "can_fua",
        "can_flush",
        "can_zero",
        "can_fast_zero",
    ] {
        assert_eq!(e[flag], true, "{flag} in {e}");
    }
    assert_eq!(e["is_read_only"], false);
    assert_eq!(e["contexts"][0], "base:allocation");

    let e = nbdinfo_json(&served.uri("ro"));
    assert_eq!(e["export-size"], SIZE / 2);
    assert_eq!(e["is_read_only"], true);
    assert_eq!(e["can_multi_conn"], true);

    let list = run_ok("nbdinfo", &["--list", "--json", &served.uri("")]);
    assert!(list.contains("\"rw\"") && list.contains("\"ro\""), "{list}");
}

#[test]
fn nbdinfo_map_shows_holes() {
    let export = Arc::new(MemoryExport::new(SIZE));
    export.write_at(&[0xab; 1 << 20], 8 << 20).unwrap();
    export.write_at(&[0xcd; 4096], 32 << 20).unwrap();
    let served = serve_unix(vec![("sparse", export.clone())]);
    let out = run_ok("nbdinfo", &["--map", "--json", &served.uri("sparse")]);
    let map: serde_json::Value = serde_json::from_str(&out).unwrap();
    let extents: Vec<(u64, u64, u64)> = map
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let f = |k: &str| e[k].as_u64().unwrap();
            (f("offset"), f("length"), f("type"))
        })
        .collect();
    let chunk = cairn_nbd::export::MEMORY_CHUNK;
    let expected = vec![
        (0, 8 << 20, 3),
        (8 << 20, 1 << 20, 0),
        (9 << 20, (32 << 20) - (9 << 20), 3),
        (32 << 20, chunk, 0),
        ((32 << 20) + chunk, SIZE - (32 << 20) - chunk, 3),
    ];
    assert_eq!(extents, expected, "{out}");
    let text = run_ok("nbdinfo", &["--map", &served.uri("sparse")]);
    assert!(
        text.contains("hole,zero") && text.contains("data"),
        "{text}"
    );
}

fn fio(uri: &str, extra: &[&str]) -> serde_json::Value {
    let uri_arg = format!("--uri={uri}");
    let mut args = vec![
        "--ioengine=nbd",
        uri_arg.as_str(),
        "--output-format=json",
        "--runtime=30",
        "--numjobs=2",
        "--size=16m",
        "--offset_increment=16m",
        "--iodepth=16",
        "--group_reporting=1",
        "--verify_state_save=0",
    ];
    args.extend_from_slice(extra);
    let out = run_ok("fio", &args);
    let start = out.find('{').unwrap_or(0);
    let v: serde_json::Value = serde_json::from_str(&out[start..]).unwrap();
    assert_eq!(v["jobs"][0]["error"], 0, "{out}");
    v
}

#[test]
fn fio_randwrite_verify_trim_and_flush() {
    let served = serve_unix(vec![("vol", Arc::new(MemoryExport::new(SIZE)))]);
    let uri = served.uri("vol");
    let v = fio(
        &uri,
        &[
            "--name=verify",
            "--rw=randwrite",
            "--bs=4k",
            "--verify=crc32c",
            "--fsync=8",
        ],
    );
    let job = &v["jobs"][0];
    assert!(
        job["write"]["io_bytes"].as_u64().unwrap() >= 32 << 20,
        "{job}"
    );
    assert!(
        job["sync"]["total_ios"].as_u64().unwrap() > 0,
        "no FLUSH issued: {job}"
    );
    let v = fio(&uri, &["--name=trim", "--rw=randtrim", "--bs=64k"]);
    assert!(v["jobs"][0]["trim"]["io_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn tcp_loopback_serves_qemu_img_and_nbdinfo() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.raw");
    random_file(&src, SIZE as usize);
    let file = FileExport::create(&dir.path().join("disk.img"), SIZE).unwrap();
    let (_server, port) = serve_tcp(vec![("disk", Arc::new(file))]);
    let uri = format!("nbd://127.0.0.1:{port}/disk");
    let src_s = src.to_str().unwrap();
    run_ok(
        "qemu-img",
        &["convert", "-n", "-f", "raw", "-O", "raw", src_s, &uri],
    );
    let out = run_ok(
        "qemu-img",
        &["compare", "-f", "raw", "-F", "raw", src_s, &uri],
    );
    assert!(out.contains("identical"), "{out}");
    let e = nbdinfo_json(&uri);
    assert_eq!(e["export-size"], SIZE);
}
