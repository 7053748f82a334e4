//! Incremental, intermediate and replication streams: after every receive the target's
//! snapshot is the source's, byte for byte and attribute for attribute, whatever the
//! workload did between snapshots; an incremental carries only what changed; a stream that
//! does not fit the target is refused and the target is left as it was.

mod common;

use std::collections::BTreeMap;

use cairn_objset::dnode::ObjectKind;
use cairn_objset::posix::{RenameMode, SetAttr};
use cairn_objset::receive::ReceiveOptions;
use cairn_objset::send::SendOptions;
use cairn_objset::snapshot_read::SnapshotView;
use cairn_objset::stream::StreamStats;
use cairn_objset::{DatasetKind, Store};
use common::*;
use rand::{Rng, RngCore, SeedableRng};

const MIB: u64 = 1 << 20;

/// Every object of a snapshot by path: kind, mode, owner, links, size, mtime and contents.
fn tree(store: &Store, v: &SnapshotView) -> BTreeMap<String, String> {
    let data = read_snapshot(store, v);
    let mut out = BTreeMap::new();
    let mut dirs = vec![(v.root, String::new())];
    while let Some((dir, prefix)) = dirs.pop() {
        for (name, e) in store.snapshot_read_dir(v, dir).unwrap() {
            let d = store.snapshot_dnode(v, e.object).unwrap();
            let path = format!("{prefix}{name}");
            let key = if d.kind == ObjectKind::Directory {
                dirs.push((e.object, format!("{path}/")));
                format!("{path}/")
            } else {
                path.clone()
            };
            let hash = blake3::hash(data.get(&key).map_or(&[][..], |b| &b[..]));
            out.insert(
                key,
                format!(
                    "{:?} {:o} {}:{} n{} {}B m{} {}",
                    d.kind,
                    d.mode,
                    d.uid,
                    d.gid,
                    d.nlink,
                    d.size,
                    d.mtime_ns,
                    &hash.to_hex()[..16]
                ),
            );
        }
    }
    out
}

/// A source pool of `n` leaves in `layout` and a one-leaf destination pool, each of
/// `size`-byte leaves (their folders live as long as the first value).
fn two_pools(
    layout: &str,
    n: usize,
    size: u64,
) -> ((tempfile::TempDir, tempfile::TempDir), Store, Store) {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (h1, _) = new_pool(d1.path(), layout, n, size);
    let (h2, _) = new_pool(d2.path(), "", 1, size);
    let (src, dst) = (open_store(&h1), open_store(&h2));
    ((d1, d2), src, dst)
}

fn fs(store: &Store, name: &str) {
    store
        .dataset_create(
            name,
            DatasetKind::Filesystem,
            Default::default(),
            None,
            false,
        )
        .unwrap();
}

fn snap(store: &Store, name: &str) {
    store.snapshot_create(&[name.to_string()], false).unwrap();
}

fn send(store: &Store, snapshot: &str, from: Option<&str>, every: bool, all: bool) -> Vec<u8> {
    let opts = SendOptions {
        from: from.map(str::to_string),
        intermediates: every,
        replicate: all,
    };
    let mut out = Vec::new();
    store.send(snapshot, &opts, &mut out).unwrap();
    out
}

fn receive(store: &Store, target: &str, stream: &[u8], force: bool) -> Result<StreamStats, String> {
    store
        .receive(
            target,
            &ReceiveOptions {
                force,
                ..ReceiveOptions::default()
            },
            &mut &stream[..],
        )
        .map_err(|e| e.to_string())
}

fn same(a: &Store, a_snap: &str, b: &Store, b_snap: &str) {
    let (va, vb) = (
        a.snapshot_view(a_snap).unwrap(),
        b.snapshot_view(b_snap).unwrap(),
    );
    let (ta, tb) = (tree(a, &va), tree(b, &vb));
    assert_eq!(
        ta.keys().collect::<Vec<_>>(),
        tb.keys().collect::<Vec<_>>(),
        "{a_snap} vs {b_snap}: names"
    );
    for (k, v) in &ta {
        assert_eq!(v, &tb[k], "{a_snap} vs {b_snap}: {k}");
    }
    let guid = |s: &Store, n: &str| {
        let ds = n.split_once('@').unwrap().0;
        s.snapshots(Some(ds))
            .unwrap()
            .into_iter()
            .find(|i| i.name == n)
            .unwrap()
            .guid
    };
    assert_eq!(guid(a, a_snap), guid(b, b_snap));
}

/// The directory object and name of `rel` (a path below tank/fs).
fn path_of(store: &Store, rel: &str) -> (u64, String) {
    let (parent, name) = rel.rsplit_once('/').unwrap_or(("", rel));
    let dir = if parent.is_empty() {
        "tank/fs".to_string()
    } else {
        format!("tank/fs/{parent}")
    };
    (store.resolve(&dir).unwrap().object, name.to_string())
}

fn rel_path(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// One random change to tank/fs: writes (small and whole-block), truncates, holes, removes,
/// renames across directories, hard links, chmods and extended attributes.
fn change(store: &Store, rng: &mut rand::rngs::StdRng) -> String {
    let dirs = ["", "a", "a/b", "c"];
    let dir = dirs[rng.gen_range(0..dirs.len())];
    let file = rel_path(dir, &format!("f{}", rng.gen_range(0..5)));
    let full = format!("tank/fs/{file}");
    let exists = store.resolve(&full).is_ok();
    match rng.gen_range(0..10) {
        0..=3 => {
            if !exists {
                store.create_file(&full, false).unwrap();
            }
            let r = store.resolve(&full).unwrap();
            let off = rng.gen_range(0..3 * MIB);
            let mut data = vec![0u8; rng.gen_range(1..300_000)];
            rng.fill_bytes(&mut data);
            store.write(&r, off, &data).unwrap();
            format!("write {full} {off}+{}", data.len())
        }
        4 if exists => {
            let r = store.resolve(&full).unwrap();
            let size = store.object_dnode(&r).unwrap().size;
            let to = rng.gen_range(0..=size + MIB);
            store.truncate(&r, to).unwrap();
            format!("truncate {full} {to}")
        }
        5 if exists => {
            let r = store.resolve(&full).unwrap();
            let (off, len) = (rng.gen_range(0..2 * MIB), rng.gen_range(1..MIB));
            store.punch(&r, off, len).unwrap();
            format!("punch {full} {off}+{len}")
        }
        6 if exists => {
            store.remove(&full, false).unwrap();
            format!("rm {full}")
        }
        7 if exists => {
            let to = rel_path(
                dirs[rng.gen_range(0..dirs.len())],
                &format!("g{}", rng.gen_range(0..3)),
            );
            let (fd, fname) = path_of(store, &file);
            let (td, tname) = path_of(store, &to);
            if rng.gen_bool(0.5) {
                store
                    .rename(fd, &fname, td, &tname, RenameMode::Replace)
                    .unwrap();
                format!("mv {full} {to}")
            } else if store.lookup(td, &tname).is_err() {
                let obj = store.resolve(&full).unwrap().object;
                store.link(obj, td, &tname).unwrap();
                format!("ln {full} {to}")
            } else {
                "nothing".into()
            }
        }
        8 if exists => {
            let obj = store.resolve(&full).unwrap().object;
            let set = SetAttr {
                mode: Some(0o100000 | rng.gen_range(0o400..0o777)),
                uid: Some(rng.gen_range(0..3)),
                ..SetAttr::default()
            };
            store.set_attr(obj, set).unwrap();
            format!("chmod {full}")
        }
        9 if exists => {
            use cairn_objset::xattr::SetMode;
            let obj = store.resolve(&full).unwrap().object;
            let value = vec![rng.gen::<u8>(); rng.gen_range(1..100)];
            store
                .set_xattr(obj, "user.x", Some(&value), SetMode::Any)
                .unwrap();
            format!("xattr {full}")
        }
        _ => "nothing".into(),
    }
}

/// Rounds of random changes, a snapshot after each, sent incrementally (sometimes across a
/// snapshot destroyed on the source, received with -F) into another pool: each received
/// snapshot equals the source's.
#[test]
fn incremental_streams_follow_a_random_workload() {
    let (_dirs, src, dst) = two_pools("mirror", 2, 512 * MIB);
    fs(&src, "tank/fs");
    src.set_property("tank/fs", "recordsize", "64K").unwrap();
    for d in ["tank/fs/a/b", "tank/fs/c"] {
        src.mkdir(d).unwrap();
    }
    snap(&src, "tank/fs@s0");
    receive(
        &dst,
        "tank/copy",
        &send(&src, "tank/fs@s0", None, false, false),
        false,
    )
    .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(16);
    let mut log = Vec::new();
    for k in 1..=30 {
        for _ in 0..8 {
            log.push(change(&src, &mut rng));
        }
        if k % 4 == 0 {
            src.sync().unwrap(); // (changes spread over several txgs)
        }
        snap(&src, &format!("tank/fs@s{k}"));
        let skip = k % 5 == 0 && k >= 2;
        let from = if skip {
            // Destroy the previous snapshot on the source: its override list merges into
            // the one before, which the incremental must still find. The target has it,
            // so it is not the newest any more: -F rolls back past it.
            src.snapshot_destroy(&format!("tank/fs@s{}", k - 1))
                .unwrap();
            format!("s{}", k - 2)
        } else {
            format!("s{}", k - 1)
        };
        let stream = send(&src, &format!("tank/fs@s{k}"), Some(&from), false, false);
        if skip {
            let e = receive(&dst, "tank/copy", &stream, false).unwrap_err();
            assert!(e.contains("-F"), "{e}");
        }
        receive(&dst, "tank/copy", &stream, skip)
            .unwrap_or_else(|e| panic!("round {k}: {e}\n{}", log.join("\n")));
        eprintln!("=== round {k}\n{}", log.join("\n"));
        log.clear();
        same(
            &src,
            &format!("tank/fs@s{k}"),
            &dst,
            &format!("tank/copy@s{k}"),
        );
    }
    // The received dataset's live files are its newest snapshot's, xattrs included.
    dst.sync().unwrap();
    let (a, b) = (
        src.snapshot_view("tank/fs@s30").unwrap(),
        dst.snapshot_view("tank/copy@s30").unwrap(),
    );
    for (path, _) in read_snapshot(&src, &a)
        .into_iter()
        .filter(|(p, _)| !p.ends_with('/'))
    {
        let (s_obj, d_obj) = (
            src.resolve(&format!("tank/fs/{path}")).unwrap().object,
            dst.resolve(&format!("tank/copy/{path}")).unwrap().object,
        );
        let names = src.list_xattrs(s_obj).unwrap();
        assert_eq!(names, dst.list_xattrs(d_obj).unwrap(), "{path}");
        for n in names {
            assert_eq!(
                src.get_xattr(s_obj, &n).unwrap(),
                dst.get_xattr(d_obj, &n).unwrap(),
                "{path} {n}"
            );
        }
    }
    assert_eq!(read_snapshot(&src, &a), read_snapshot(&dst, &b));
}

/// A 32 MiB file and 500 small ones; one block of the big file and one small file change:
/// the incremental carries about those bytes, not the dataset.
#[test]
fn an_incremental_carries_only_the_change() {
    let (_dirs, src, dst) = two_pools("", 1, 512 * MIB);
    fs(&src, "tank/fs");
    src.create_file("tank/fs/big", false).unwrap();
    let big = src.resolve("tank/fs/big").unwrap();
    let mut data = vec![0u8; 32 * MIB as usize];
    rand::rngs::StdRng::seed_from_u64(1).fill_bytes(&mut data);
    src.write(&big, 0, &data).unwrap();
    src.mkdir("tank/fs/small").unwrap();
    for i in 0..500 {
        let p = format!("tank/fs/small/f{i}");
        src.create_file(&p, false).unwrap();
        src.write(&src.resolve(&p).unwrap(), 0, format!("file {i}").as_bytes())
            .unwrap();
    }
    snap(&src, "tank/fs@a");
    let full = send(&src, "tank/fs@a", None, false, false);
    receive(&dst, "tank/copy", &full, false).unwrap();
    src.write(&big, 5 * MIB + 3, b"changed").unwrap();
    let p = src.resolve("tank/fs/small/f7").unwrap();
    src.write(&p, 0, b"new contents").unwrap();
    snap(&src, "tank/fs@b");
    let mut stream = Vec::new();
    let opts = SendOptions {
        from: Some("@a".into()),
        ..SendOptions::default()
    };
    let sent = src.send("tank/fs@b", &opts, &mut stream).unwrap();
    assert!(full.len() > 32 * MIB as usize);
    // One 128K record of the big file, one small file, and their dnodes and directories.
    assert!(sent.data_bytes <= 128 * 1024 + 64, "{sent:?}");
    assert!(sent.objects <= 4, "{sent:?}");
    assert!(stream.len() < 200 * 1024, "{} bytes", stream.len());
    let got = receive(&dst, "tank/copy", &stream, false).unwrap();
    assert_eq!(got.data_bytes, sent.data_bytes);
    same(&src, "tank/fs@b", &dst, "tank/copy@b");
    assert_eq!(read_live(&dst, "tank/copy/small/f7"), b"new contents");
}

/// -I sends every snapshot in between; -R sends descendants and their snapshots; an origin
/// the target lacks, a changed target and a damaged stream are refused and change nothing;
/// a read-only target still receives.
#[test]
fn intermediates_replication_and_refusals() {
    let (_dirs, src, dst) = two_pools("", 1, 256 * MIB);
    fs(&src, "tank/fs");
    fs(&src, "tank/fs/kid");
    for k in 1..=4 {
        for ds in ["tank/fs", "tank/fs/kid"] {
            let p = format!("{ds}/file{k}");
            src.create_file(&p, false).unwrap();
            src.write(&src.resolve(&p).unwrap(), 0, p.as_bytes())
                .unwrap();
        }
        src.snapshot_create(&[format!("tank/fs@s{k}")], true)
            .unwrap();
    }
    // -R: both datasets, all four snapshots each.
    let rep = send(&src, "tank/fs@s4", None, false, true);
    let got = receive(&dst, "tank/rep", &rep, false).unwrap();
    assert_eq!(got.streams, 8);
    for k in 1..=4 {
        same(
            &src,
            &format!("tank/fs@s{k}"),
            &dst,
            &format!("tank/rep@s{k}"),
        );
        same(
            &src,
            &format!("tank/fs/kid@s{k}"),
            &dst,
            &format!("tank/rep/kid@s{k}"),
        );
    }
    // -I from s1: s2, s3, s4 arrive on a target that has only s1.
    receive(
        &dst,
        "tank/one",
        &send(&src, "tank/fs@s1", None, false, false),
        false,
    )
    .unwrap();
    let inc = send(&src, "tank/fs@s4", Some("s1"), true, false);
    assert_eq!(receive(&dst, "tank/one", &inc, false).unwrap().streams, 3);
    let names: Vec<String> = dst
        .snapshots(Some("tank/one"))
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(
        names,
        ["tank/one@s1", "tank/one@s2", "tank/one@s3", "tank/one@s4"]
    );

    // An origin the target lacks.
    let s2_s3 = send(&src, "tank/fs@s3", Some("s2"), false, false);
    receive(
        &dst,
        "tank/two",
        &send(&src, "tank/fs@s1", None, false, false),
        false,
    )
    .unwrap();
    let before = tree(&dst, &dst.snapshot_view("tank/two@s1").unwrap());
    let e = receive(&dst, "tank/two", &s2_s3, false).unwrap_err();
    assert!(e.contains("no snapshot the incremental starts from"), "{e}");
    // A target changed since its origin: refused without -F, rolled back with it.
    let s1_s2 = send(&src, "tank/fs@s2", Some("s1"), false, false);
    dst.create_file("tank/two/local", false).unwrap();
    dst.write(&dst.resolve("tank/two/local").unwrap(), 0, b"mine")
        .unwrap();
    dst.sync().unwrap();
    let e = receive(&dst, "tank/two", &s1_s2, false).unwrap_err();
    assert!(e.contains("has changed") && e.contains("-F"), "{e}");
    assert_eq!(read_live(&dst, "tank/two/local"), b"mine");
    // A damaged incremental: refused, and the target is back at its origin.
    let mut flipped = s1_s2.clone();
    let at = flipped.len() - 40;
    flipped[at] ^= 1;
    let e = receive(&dst, "tank/two", &flipped, true).unwrap_err();
    assert!(e.contains("check"), "{e}");
    assert_eq!(dst.snapshots(Some("tank/two")).unwrap().len(), 1);
    assert!(dst.resolve("tank/two/file2").is_err());
    assert_eq!(
        tree(&dst, &dst.snapshot_view("tank/two@s1").unwrap()),
        before
    );
    // Read-only targets receive (as zfs does), and -F clears the local change.
    dst.set_property("tank/two", "readonly", "on").unwrap();
    receive(&dst, "tank/two", &s1_s2, true).unwrap();
    same(&src, "tank/fs@s2", &dst, "tank/two@s2");
    assert!(dst.resolve("tank/two/local").is_err());
    // The same stream twice, and a full stream onto an existing dataset.
    let e = receive(&dst, "tank/two", &s1_s2, false).unwrap_err();
    assert!(e.contains("already here"), "{e}");
    let e = receive(
        &dst,
        "tank/two",
        &send(&src, "tank/fs@s1", None, false, false),
        false,
    )
    .unwrap_err();
    assert!(e.contains("full stream makes a new dataset"), "{e}");
    // Destroying a received dataset frees its receive map too: nothing is left.
    let used = dst.datasets().by_name("tank").unwrap().used;
    dst.dataset_destroy("tank/two", true).unwrap();
    dst.sync().unwrap();
    assert!(dst.datasets().by_name("tank").unwrap().used <= used);
}

fn receive_resumable(store: &Store, target: &str, stream: &[u8]) -> Result<StreamStats, String> {
    let opts = ReceiveOptions {
        resumable: true,
        ..ReceiveOptions::default()
    };
    store
        .receive(target, &opts, &mut &stream[..])
        .map_err(|e| e.to_string())
}

/// Receives `stream` cut at each of `cuts` (fractions of it) in turn with -s, resuming from
/// the token each time, then the rest: the result is the whole stream's.
fn receive_in_pieces(src: &Store, dst: &Store, target: &str, stream: &[u8], cuts: &[f64]) {
    let mut piece = stream.to_vec();
    for &cut in cuts {
        let at = ((piece.len() as f64) * cut) as usize;
        let e = receive_resumable(dst, target, &piece[..at]).unwrap_err();
        assert!(e.contains("is kept") && e.contains("send -t"), "{e}");
        let (token, _) = dst.get_property(target, "receive_resume_token").unwrap();
        assert!(token.starts_with("1-"), "{token}");
        // Any other stream is refused meanwhile.
        let e = receive_resumable(dst, target, stream).unwrap_err();
        assert!(e.contains("partial receive"), "{e}");
        piece.clear();
        src.send_resume(&token, &mut piece).unwrap();
        assert!(
            piece.len() < stream.len(),
            "a resumed stream sends only the rest"
        );
    }
    receive_resumable(dst, target, &piece).unwrap();
    assert_eq!(
        dst.get_property(target, "receive_resume_token").unwrap().0,
        "-"
    );
}

/// Full and incremental streams cut short (several times, at random places) resume where
/// they stopped and end as if whole; `receive -A` discards a partial receive.
#[test]
fn streams_cut_short_resume_where_they_stopped() {
    let (_dirs, src, dst) = two_pools("", 1, 512 * MIB);
    fs(&src, "tank/fs");
    src.set_property("tank/fs", "recordsize", "64K").unwrap();
    for d in ["tank/fs/a/b", "tank/fs/c"] {
        src.mkdir(d).unwrap();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..40 {
        change(&src, &mut rng);
    }
    snap(&src, "tank/fs@a");
    for _ in 0..40 {
        change(&src, &mut rng);
    }
    snap(&src, "tank/fs@b");
    let full = send(&src, "tank/fs@a", None, false, false);
    let inc = send(&src, "tank/fs@b", Some("a"), false, false);
    for round in 0..4 {
        let target = format!("tank/copy{round}");
        let cuts: Vec<f64> = (0..round + 1).map(|_| rng.gen_range(0.05..0.95)).collect();
        receive_in_pieces(&src, &dst, &target, &full, &cuts);
        same(&src, "tank/fs@a", &dst, &format!("{target}@a"));
        receive_in_pieces(&src, &dst, &target, &inc, &cuts);
        same(&src, "tank/fs@b", &dst, &format!("{target}@b"));
    }
    // -A: a partial full receive goes away; a partial incremental goes back to its origin.
    let e = receive_resumable(&dst, "tank/gone", &full[..full.len() / 2]).unwrap_err();
    assert!(e.contains("is kept"), "{e}");
    dst.receive_abort("tank/gone").unwrap();
    assert!(dst.datasets().by_name("tank/gone").is_none());
    receive_resumable(&dst, "tank/back", &full).unwrap();
    let before = tree(&dst, &dst.snapshot_view("tank/back@a").unwrap());
    receive_resumable(&dst, "tank/back", &inc[..inc.len() / 2]).unwrap_err();
    dst.receive_abort("tank/back").unwrap();
    assert_eq!(
        dst.get_property("tank/back", "receive_resume_token")
            .unwrap()
            .0,
        "-"
    );
    assert_eq!(
        dst.snapshot_space(dst.datasets().by_name("tank/back").unwrap().id)
            .1,
        0
    );
    assert_eq!(
        tree(&dst, &dst.snapshot_view("tank/back@a").unwrap()),
        before
    );
    receive(&dst, "tank/back", &inc, false).unwrap();
    same(&src, "tank/fs@b", &dst, "tank/back@b");
    // A token of another pool's stream, or a garbled one, is refused by the sender.
    let e = src
        .send_resume("1-00", &mut Vec::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("resume token"), "{e}");
}

/// A volume (data, holes, a TRIMmed range) goes over full and incremental streams; the
/// copy reads the same bytes at each snapshot.
#[test]
fn volumes_go_over_full_and_incremental_streams() {
    let (_dirs, src, dst) = two_pools("", 1, 256 * MIB);
    src.dataset_create(
        "tank/vol",
        DatasetKind::Volume,
        Default::default(),
        Some(64 * MIB),
        false,
    )
    .unwrap();
    let vol = src.resolve("tank/vol").unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let mut chunk = vec![0u8; 300_000];
    for off in [0, 5 * MIB, 40 * MIB] {
        rng.fill_bytes(&mut chunk);
        src.write(&vol, off, &chunk).unwrap();
    }
    snap(&src, "tank/vol@a");
    rng.fill_bytes(&mut chunk);
    src.write(&vol, 20 * MIB, &chunk).unwrap();
    src.punch(&vol, 5 * MIB, 200_000).unwrap();
    snap(&src, "tank/vol@b");
    let read = |s: &Store, name: &str| {
        let v = s.snapshot_view(name).unwrap();
        let mut buf = vec![0u8; 64 * MIB as usize];
        assert_eq!(s.snapshot_read(&v, v.root, 0, &mut buf).unwrap(), buf.len());
        buf
    };
    receive(
        &dst,
        "tank/copy",
        &send(&src, "tank/vol@a", None, false, false),
        false,
    )
    .unwrap();
    assert!(read(&src, "tank/vol@a") == read(&dst, "tank/copy@a"));
    let inc = send(&src, "tank/vol@b", Some("a"), false, false);
    assert!(inc.len() < 2 * MIB as usize, "{} bytes", inc.len());
    receive(&dst, "tank/copy", &inc, false).unwrap();
    assert!(read(&src, "tank/vol@b") == read(&dst, "tank/copy@b"));
    assert_eq!(
        dst.get_property("tank/copy", "volsize").unwrap().0,
        (64 * MIB).to_string()
    );
}

/// `-R -i @a` sends one incremental per dataset (as zfs); `-R -I @a` every snapshot after.
#[test]
fn replication_with_an_origin_sends_one_or_every_incremental() {
    let (_dirs, src, dst) = two_pools("", 1, 256 * MIB);
    fs(&src, "tank/fs");
    fs(&src, "tank/fs/kid");
    for k in 1..=3 {
        src.snapshot_create(&[format!("tank/fs@s{k}")], true)
            .unwrap();
    }
    receive(
        &dst,
        "tank/rep",
        &send(&src, "tank/fs@s1", None, false, true),
        false,
    )
    .unwrap();
    let one = send(&src, "tank/fs@s3", Some("s1"), false, true);
    assert_eq!(receive(&dst, "tank/rep", &one, false).unwrap().streams, 2);
    let names: Vec<String> = dst
        .snapshots(Some("tank/rep/kid"))
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["tank/rep/kid@s1", "tank/rep/kid@s3"]);
    let every = send(&src, "tank/fs@s3", Some("s1"), true, true);
    receive(
        &dst,
        "tank/rep2",
        &send(&src, "tank/fs@s1", None, false, true),
        false,
    )
    .unwrap();
    assert_eq!(
        receive(&dst, "tank/rep2", &every, false).unwrap().streams,
        4
    );
}

/// Every dataset and snapshot name of a pool (a refused receive leaves them as they were).
fn names(store: &Store) -> Vec<String> {
    let mut out: Vec<String> = store
        .datasets()
        .datasets
        .iter()
        .map(|d| d.name.clone())
        .collect();
    out.extend(store.snapshots(None).unwrap().into_iter().map(|s| s.name));
    out.sort();
    out
}

/// A clone with its origin: 200 files of 64 KiB and a 4 MiB one, then about 1 % changed in
/// the clone — writes, a truncate, removes, new files, an xattr, a rename, a chmod.
fn clone_with_changes(src: &Store) {
    fs(src, "tank/fs");
    src.mkdir("tank/fs/d").unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(16);
    for i in 0..200 {
        let p = format!("tank/fs/d/f{i}");
        src.create_file(&p, false).unwrap();
        let mut data = vec![0u8; 64 << 10];
        rng.fill_bytes(&mut data);
        src.write(&src.resolve(&p).unwrap(), 0, &data).unwrap();
    }
    src.create_file("tank/fs/big", false).unwrap();
    let mut data = vec![0u8; 4 * MIB as usize];
    rng.fill_bytes(&mut data);
    src.write(&src.resolve("tank/fs/big").unwrap(), 0, &data)
        .unwrap();
    snap(src, "tank/fs@o");
    src.clone_create("tank/fs@o", "tank/cl").unwrap();
    let r = |p: &str| src.resolve(p).unwrap();
    src.write(&r("tank/cl/big"), MIB + 5, b"changed in the clone")
        .unwrap();
    src.write(&r("tank/cl/d/f3"), 100, b"three").unwrap();
    src.truncate(&r("tank/cl/d/f4"), 1000).unwrap();
    src.remove("tank/cl/d/f5", false).unwrap();
    src.remove("tank/cl/d/f6", false).unwrap();
    src.create_file("tank/cl/new", false).unwrap();
    src.write(&r("tank/cl/new"), 0, b"a file the clone made")
        .unwrap();
    src.mkdir("tank/cl/e").unwrap();
    src.set_xattr(
        r("tank/cl/d/f7").object,
        "user.k",
        Some(b"v"),
        cairn_objset::xattr::SetMode::Any,
    )
    .unwrap();
    let d = r("tank/cl/d").object;
    let e = r("tank/cl/e").object;
    src.rename(d, "f8", e, "moved", RenameMode::Replace)
        .unwrap();
    let set = SetAttr {
        mode: Some(0o100600),
        ..SetAttr::default()
    };
    src.set_attr(r("tank/cl/d/f9").object, set).unwrap();
    src.set_property("tank/cl", "compression", "zstd").unwrap();
    snap(src, "tank/cl@c");
}

/// `send -i DS@O CLONE@C` carries only what the clone changed, and `receive -o origin=`
/// (or by the origin's guid) makes a clone of the receiver's copy of the origin that reads
/// as the sender's; a stream from another origin is refused and changes nothing.
#[test]
fn a_clone_goes_as_an_incremental_from_its_origin() {
    let (_dirs, src, dst) = two_pools("", 1, 512 * MIB);
    clone_with_changes(&src);
    receive(
        &dst,
        "tank/fs",
        &send(&src, "tank/fs@o", None, false, false),
        false,
    )
    .unwrap();
    let full = send(&src, "tank/cl@c", None, false, false);
    let mut stream = Vec::new();
    let opts = SendOptions {
        from: Some("tank/fs@o".into()),
        ..SendOptions::default()
    };
    let sent = src.send("tank/cl@c", &opts, &mut stream).unwrap();
    assert!(
        stream.len() * 10 < full.len(),
        "incremental {} bytes, full {} bytes ({sent:?})",
        stream.len(),
        full.len()
    );
    assert!(sent.data_bytes < 300 << 10, "{sent:?}");
    assert_eq!(sent.freed_objects, 2, "{sent:?}");
    let opts = ReceiveOptions {
        origin: Some("tank/fs@o".into()),
        ..ReceiveOptions::default()
    };
    dst.receive("tank/cl2", &opts, &mut &stream[..]).unwrap();
    same(&src, "tank/cl@c", &dst, "tank/cl2@c");
    let xattr = |s: &Store, p: &str| s.get_xattr(s.resolve(p).unwrap().object, "user.k");
    assert_eq!(xattr(&dst, "tank/cl2/d/f7").unwrap(), b"v");
    assert!(xattr(&dst, "tank/fs/d/f7").is_err());
    assert_eq!(read_live(&dst, "tank/cl2/new"), b"a file the clone made");
    assert_eq!(
        dst.get_property("tank/cl2", "compression").unwrap().0,
        "zstd"
    );
    assert_eq!(
        read_live(&dst, "tank/fs/d/f3"),
        read_live(&src, "tank/fs/d/f3")
    );
    // Found by the origin's guid too, and the received clone takes the next incremental.
    receive(&dst, "tank/cl3", &stream, false).unwrap();
    same(&src, "tank/cl@c", &dst, "tank/cl3@c");
    src.write(&src.resolve("tank/cl/new").unwrap(), 0, b"A")
        .unwrap();
    snap(&src, "tank/cl@d");
    let next = send(&src, "tank/cl@d", Some("@c"), false, false);
    receive(&dst, "tank/cl3", &next, false).unwrap();
    same(&src, "tank/cl@d", &dst, "tank/cl3@d");
}

/// `send -I ORIGIN CLONE@S`: the clone stream, then one incremental per later snapshot of
/// the clone, received in one go; `-R` from an origin is refused with what to do.
#[test]
fn send_capital_i_from_a_clones_origin_carries_every_snapshot() {
    let (_dirs, src, dst) = two_pools("", 1, 512 * MIB);
    clone_with_changes(&src);
    src.write(&src.resolve("tank/cl/new").unwrap(), 0, b"B")
        .unwrap();
    snap(&src, "tank/cl@d");
    src.remove("tank/cl/new", false).unwrap();
    snap(&src, "tank/cl@e");
    receive(
        &dst,
        "tank/fs",
        &send(&src, "tank/fs@o", None, false, false),
        false,
    )
    .unwrap();
    let stream = send(&src, "tank/cl@e", Some("tank/fs@o"), true, false);
    let got = receive(&dst, "tank/cl", &stream, false).unwrap();
    assert_eq!(got.streams, 3, "{got:?}");
    for s in ["c", "d", "e"] {
        same(&src, &format!("tank/cl@{s}"), &dst, &format!("tank/cl@{s}"));
    }
    assert_eq!(
        dst.get_property("tank/cl", "origin").unwrap().0,
        "tank/fs@o"
    );
    // Only as far as asked.
    let partial = send(&src, "tank/cl@d", Some("tank/fs@o"), true, false);
    receive(&dst, "tank/cl4", &partial, false).unwrap();
    assert_eq!(dst.snapshots(Some("tank/cl4")).unwrap().len(), 2);
    let opts = SendOptions {
        from: Some("tank/fs@o".into()),
        intermediates: true,
        replicate: true,
    };
    let e = src.send("tank/cl@e", &opts, &mut Vec::new()).unwrap_err();
    assert!(e.to_string().contains("-I tank/fs@o"), "{e}");
}

/// Writes `data` at the start of `path`, making the file if needed.
fn put_at(s: &Store, path: &str, data: &[u8]) {
    if s.resolve(path).is_err() {
        s.create_file(path, false).unwrap();
    }
    s.write(&s.resolve(path).unwrap(), 0, data).unwrap();
}

/// On `src`: tank/fs with 40 files of 4 to 20 KiB in tank/fs/d (uncompressed); returns
/// the generator that made them, for more.
fn fs_with_files(src: &Store, seed: u64) -> rand::rngs::StdRng {
    fs(src, "tank/fs");
    src.set_property("tank/fs", "compression", "off").unwrap();
    src.mkdir("tank/fs/d").unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for i in 0..40 {
        let mut data = vec![0u8; 4096 * (1 + i % 5)];
        rng.fill_bytes(&mut data);
        put_at(src, &format!("tank/fs/d/f{i}"), &data);
    }
    rng
}

/// On `src`: tank/fs@b cloned as tank/new, changed (d/f2 written, d/f3 removed, `added`
/// made), promoted (it takes tank/fs's snapshots) and snapshotted as tank/new@t.
fn clone_change_promote(src: &Store) {
    src.clone_create("tank/fs@b", "tank/new").unwrap();
    put_at(src, "tank/new/d/f2", b"the clone's change");
    src.remove("tank/new/d/f3", false).unwrap();
    put_at(src, "tank/new/added", b"a new file");
    src.promote("tank/new").unwrap();
    snap(src, "tank/new@t");
}

/// The next incremental after one across a promote is an ordinary one.
fn then_an_ordinary_incremental(src: &Store, dst: &Store) {
    put_at(src, "tank/new/added2", b"B");
    snap(src, "tank/new@u");
    let stream = send(src, "tank/new@u", Some("@t"), false, false);
    receive(dst, "tank/fs", &stream, false).unwrap();
    same(src, "tank/new@u", dst, "tank/fs@u");
}

/// A backup follows a promote, as with zfs: the backup received tank/fs's @a and @b; on the
/// source tank/fs@b is cloned, the clone promoted (it takes @a and @b) and snapshotted;
/// `send -i @b CLONE@t` then updates the same backup dataset, and later incrementals
/// follow.
#[test]
fn a_backup_follows_a_promote_with_incrementals() {
    let (_dirs, src, dst) = two_pools("", 1, 512 * MIB);
    fs_with_files(&src, 21);
    snap(&src, "tank/fs@a");
    put_at(&src, "tank/fs/d/f1", b"changed before b");
    snap(&src, "tank/fs@b");
    for (snapshot, from) in [("tank/fs@a", None), ("tank/fs@b", Some("@a"))] {
        let stream = send(&src, snapshot, from, false, false);
        receive(&dst, "tank/fs", &stream, false).unwrap();
    }
    clone_change_promote(&src);
    let stream = send(&src, "tank/new@t", Some("@b"), false, false);
    assert!(
        stream.len() < 64 << 10,
        "{} bytes: only the change",
        stream.len()
    );
    receive(&dst, "tank/fs", &stream, false).unwrap();
    same(&src, "tank/new@t", &dst, "tank/fs@t");
    same(&src, "tank/new@b", &dst, "tank/fs@b");
    then_an_ordinary_incremental(&src, &dst);
}

/// An incremental across a promote from an older moved snapshot: the backup received only
/// tank/fs@a; on the source a 2 MiB file goes before @b (so the clone map, from @b, does not
/// name it), the clone of @b is promoted and snapshotted; `send -i @a CLONE@t` updates the
/// backup in place (that file's object freed there too) and `diff @a` lists the changes;
/// the next incremental is an ordinary one.
#[test]
fn a_backup_follows_a_promote_from_an_older_moved_snapshot() {
    let (_dirs, src, dst) = two_pools("", 1, 512 * MIB);
    let mut rng = fs_with_files(&src, 22);
    let mut big = vec![0u8; 2 * MIB as usize];
    rng.fill_bytes(&mut big);
    put_at(&src, "tank/fs/gone", &big);
    snap(&src, "tank/fs@a");
    receive(
        &dst,
        "tank/fs",
        &send(&src, "tank/fs@a", None, false, false),
        false,
    )
    .unwrap();
    src.remove("tank/fs/gone", false).unwrap();
    put_at(&src, "tank/fs/d/f1", b"changed before b");
    put_at(&src, "tank/fs/between", b"made between a and b");
    snap(&src, "tank/fs@b");
    clone_change_promote(&src);
    assert_diff(
        &src,
        "tank/new@a",
        "tank/new@t",
        &[
            ('-', "/gone"),
            ('+', "/between"),
            ('+', "/added"),
            ('M', "/d/f1"),
            ('M', "/d/f2"),
            ('-', "/d/f3"),
        ],
        8,
    );
    let stream = send(&src, "tank/new@t", Some("@a"), false, false);
    assert!(
        stream.len() < 256 << 10,
        "{} bytes: only the change",
        stream.len()
    );
    receive(&dst, "tank/fs", &stream, false).unwrap();
    same(&src, "tank/new@t", &dst, "tank/fs@t");
    let refer = |s: &Store, ds: &str| -> u64 {
        s.get_property(ds, "referenced").unwrap().0.parse().unwrap()
    };
    dst.sync().unwrap();
    let (theirs, ours) = (refer(&src, "tank/new"), refer(&dst, "tank/fs"));
    assert!(
        ours.abs_diff(theirs) < 256 << 10,
        "REFER {ours} on the backup, {theirs} on the source: nothing left over"
    );
    then_an_ordinary_incremental(&src, &dst);
}

/// The short form `-i @o` is the clone's own snapshot (named in full, the origin is
/// taken); a stream received with another snapshot as origin is refused, nothing made.
#[test]
fn a_clone_incremental_from_the_wrong_origin_is_refused() {
    let (_dirs, src, dst) = two_pools("", 1, 512 * MIB);
    clone_with_changes(&src);
    let opts = SendOptions {
        from: Some("@o".into()),
        ..SendOptions::default()
    };
    let e = src.send("tank/cl@c", &opts, &mut Vec::new()).unwrap_err();
    assert!(e.to_string().contains("name the origin in full"), "{e}");
    receive(
        &dst,
        "tank/fs",
        &send(&src, "tank/fs@o", None, false, false),
        false,
    )
    .unwrap();
    fs(&dst, "tank/other");
    snap(&dst, "tank/other@o");
    let stream = send(&src, "tank/cl@c", Some("tank/fs@o"), false, false);
    let before = names(&dst);
    let opts = ReceiveOptions {
        origin: Some("tank/other@o".into()),
        ..ReceiveOptions::default()
    };
    let e = dst
        .receive("tank/cl2", &opts, &mut &stream[..])
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("not the snapshot this stream starts from"),
        "{e}"
    );
    assert_eq!(names(&dst), before);
    // A receiver without the origin at all is told to receive it first.
    let (_d3, _, third) = two_pools("", 1, 256 * MIB);
    let e = receive(&third, "tank/cl2", &stream, false).unwrap_err();
    assert!(e.contains("receive the clone's origin first"), "{e}");
    assert!(third.resolve("tank/cl2").is_err());
    // A stream cut short leaves no clone behind.
    let cut = &stream[..stream.len() - 40];
    assert!(receive(&dst, "tank/cl2", cut, false).is_err());
    assert_eq!(names(&dst), before);
}

/// A clone's incremental cut short resumes with `send -t` and ends as if whole;
/// `receive -A` of a cut one destroys the clone it was making.
#[test]
fn a_clone_incremental_cut_short_resumes_or_is_discarded() {
    let (_dirs, src, dst) = two_pools("", 1, 512 * MIB);
    clone_with_changes(&src);
    receive(
        &dst,
        "tank/fs",
        &send(&src, "tank/fs@o", None, false, false),
        false,
    )
    .unwrap();
    let stream = send(&src, "tank/cl@c", Some("tank/fs@o"), false, false);
    receive_in_pieces(&src, &dst, "tank/cl2", &stream, &[0.5, 0.4]);
    same(&src, "tank/cl@c", &dst, "tank/cl2@c");
    let e = receive_resumable(&dst, "tank/cl3", &stream[..stream.len() / 2]).unwrap_err();
    assert!(e.contains("send -t"), "{e}");
    dst.receive_abort("tank/cl3").unwrap();
    assert!(dst.resolve("tank/cl3").is_err());
}
