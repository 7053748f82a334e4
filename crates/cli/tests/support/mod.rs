//! What every CLI test needs: run the `cairn` binary with a state directory of its own,
//! check its exit, make leaf files and reproducible data. Each test file says `mod support;`
//! (a file may use only part of it).
#![allow(dead_code)]

pub mod served;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const MIB: u64 = 1 << 20;

/// A `cairn` command with `$CAIRN_HOME` = `home`.
pub fn cairn_cmd(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cairn"));
    c.env("CAIRN_HOME", home);
    c
}

/// Runs `cairn ARGS` with `$CAIRN_HOME` = `home`.
pub fn cairn(home: &Path, args: &[&str]) -> Output {
    cairn_cmd(home).args(args).output().expect("run cairn")
}

/// Asserts success; standard output as text.
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "cairn failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts success; standard output as bytes.
pub fn ok_bytes(out: &Output) -> Vec<u8> {
    ok(out);
    out.stdout.clone()
}

/// Asserts failure; standard error as text.
pub fn fails(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "expected failure, got: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `n` sparse leaf files `d0…` of `size` bytes in `dir`; their absolute paths.
pub fn files(dir: &Path, n: usize, size: u64) -> Vec<String> {
    (0..n)
        .map(|i| {
            let p: PathBuf = dir.join(format!("d{i}"));
            std::fs::File::create(&p).unwrap().set_len(size).unwrap();
            p.display().to_string()
        })
        .collect()
}

/// `len` reproducible, incompressible bytes (xorshift64 from `seed`).
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A pool `tank` (raidz1 over three `leaf_size` files in `dir`, state in `dir/home`)
/// holding `tank/data`: `data_len` reproducible bytes from `seed`. Returns the state
/// directory, the leaves and the data.
pub fn raidz1_with_data(
    dir: &Path,
    leaf_size: u64,
    data_len: usize,
    seed: u64,
) -> (PathBuf, Vec<String>, Vec<u8>) {
    let home = dir.join("home");
    let d = files(dir, 3, leaf_size);
    ok(&cairn(
        &home,
        &["create", "tank", "raidz1", &d[0], &d[1], &d[2]],
    ));
    let data = pseudo_random(data_len, seed);
    let src = dir.join("data");
    std::fs::write(&src, &data).unwrap();
    ok(&cairn(
        &home,
        &["put", &src.display().to_string(), "tank/data"],
    ));
    (home, d, data)
}

/// Waits for the `cairn scrub` client `scrub`, paused from elsewhere, to say so; checks
/// `status` shows the pause, cancels the paused scrub with `scrub -s` and checks `status`
/// shows that.
pub fn paused_then_canceled(home: &Path, scrub: std::process::Child) {
    let out = scrub.wait_with_output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("scrub of 'tank' paused"),
        "{out:?}"
    );
    let status = ok(&cairn(home, &["status", "tank"]));
    assert!(status.contains("scan: scrub paused:"), "{status}");
    ok(&cairn(home, &["scrub", "-s", "tank"]));
    let status = ok(&cairn(home, &["status", "tank"]));
    assert!(status.contains("scan: scrub canceled"), "{status}");
}

/// `tank`'s SIZE in bytes (`list -H -p -o size`).
pub fn pool_size(home: &Path) -> u64 {
    ok(&cairn(home, &["list", "-H", "-p", "-o", "size", "tank"]))
        .trim()
        .parse()
        .unwrap()
}

/// Makes each file `len` bytes long (a device that grew).
pub fn grow_files(paths: &[String], len: u64) {
    for p in paths {
        let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        f.set_len(len).unwrap();
    }
}

/// The state column of `name`'s row in `status` ("" if no row names it).
pub fn state_of(status: &str, name: &str) -> String {
    row_state(status.lines(), name)
}

/// The state of `name` in the `spares` list of `status` ("" if it is not listed).
pub fn spare_state(status: &str, name: &str) -> String {
    row_state(status.lines().skip_while(|l| l.trim() != "spares"), name)
}

fn row_state<'a>(mut lines: impl Iterator<Item = &'a str>, name: &str) -> String {
    lines
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("")
        .to_string()
}
