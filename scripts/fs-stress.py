#!/usr/bin/env python3
"""A random metadata workload with several processes (in the spirit of xfstests' fsstress),
for a mounted file system; then a consistency walk.

usage: fs-stress.py DIR [--procs N] [--ops N] [--seed S] [--snapshot FILE] [--compare FILE]

Each process does --ops random operations on a small shared set of names (so the processes
collide): create, write, append, truncate, rename (plain, over files, across directories),
link, symlink, unlink, mkdir, rmdir, chmod, setxattr, removexattr, readdir, stat, fsync.
Errors a concurrent workload must expect (ENOENT, EEXIST, ENOTEMPTY, ENOTDIR, EISDIR, ...)
are counted, not failures; any other error, or a crash, fails the run.

Afterwards the tree is walked: every object's link count must equal the number of names
that lead to it (directories: 2 + subdirectories), every file must read to its size. The
walk (names, kinds, sizes, modes, link counts, content hashes, xattrs) can be saved with
--snapshot and compared with --compare after an unmount, scrub and remount.
"""
import argparse
import errno
import hashlib
import json
import multiprocessing
import os
import random
import sys

EXPECTED = {errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR,
            errno.EINVAL, errno.ENODATA, errno.EXDEV, errno.EMLINK, errno.ELOOP,
            errno.EPERM}  # EPERM: link() of a directory
NAMES = [f"n{i}" for i in range(10)]
DIRS = ["", "a", "b", "a/c", "b/d"]


def rand_path(r, root):
    return os.path.join(root, r.choice(DIRS), r.choice(NAMES))


def one_op(r, root):
    p, q = rand_path(r, root), rand_path(r, root)
    if r.random() < 0.2:  # directories renamed away come back, so most operations can work
        os.makedirs(os.path.dirname(p), exist_ok=True)
    op = r.randrange(17)
    if op == 0:
        with open(p, "wb") as f:
            f.write(r.randbytes(r.randrange(0, 200_000)))
    elif op == 1:
        with open(p, "ab") as f:
            f.write(r.randbytes(r.randrange(1, 50_000)))
    elif op == 2:
        os.truncate(p, r.randrange(0, 300_000))
    elif op == 3:
        os.rename(p, q)
    elif op == 4:
        os.link(p, q)
    elif op == 5:
        os.symlink(r.choice(NAMES), p)
    elif op == 6:
        os.unlink(p)
    elif op == 7:
        os.mkdir(p)
    elif op == 8:
        os.rmdir(p)
    elif op == 9:
        os.chmod(p, r.choice([0o644, 0o600, 0o755, 0o4755, 0o2750]))
    elif op == 10:
        os.setxattr(p, f"user.k{r.randrange(4)}", r.randbytes(r.randrange(0, 300)))
    elif op == 11:
        os.removexattr(p, f"user.k{r.randrange(4)}")
    elif op == 12:
        os.listdir(os.path.dirname(p))
    elif op == 13:
        os.lstat(p)
    elif op == 14:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    elif op == 15:
        os.rename(os.path.join(root, r.choice(DIRS[1:])), os.path.join(root, r.choice(DIRS[1:]) + "x"))
    else:
        with open(p, "rb") as f:
            f.read()


def worker(args):
    root, ops, seed = args
    r = random.Random(seed)
    counts = {"ok": 0, "expected_errors": 0}
    for _ in range(ops):
        try:
            one_op(r, root)
            counts["ok"] += 1
        except OSError as e:
            if e.errno not in EXPECTED:
                raise
            counts["expected_errors"] += 1
    return counts


def walk(root):
    """{relative path: description}; checks link counts on the way."""
    seen, names_of = {}, {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            names_of.setdefault(st.st_ino, []).append(p)
            d = {"mode": st.st_mode, "nlink": st.st_nlink, "ino": st.st_ino}
            if os.path.islink(p):
                d["target"] = os.readlink(p)
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    data = f.read()
                assert len(data) == st.st_size, f"{p}: read {len(data)} of {st.st_size}"
                d["size"] = st.st_size
                d["sha"] = hashlib.sha256(data).hexdigest()
            elif os.path.isdir(p):
                subdirs = sum(1 for e in os.scandir(p) if e.is_dir(follow_symlinks=False))
                assert st.st_nlink == 2 + subdirs, f"{p}: nlink {st.st_nlink}, {subdirs} subdirs"
            d["xattrs"] = sorted(os.listxattr(p, follow_symlinks=False))
            seen[os.path.relpath(p, root)] = d
    for ino, paths in names_of.items():
        st = os.lstat(paths[0])
        if not os.path.isdir(paths[0]):
            assert st.st_nlink == len(paths), f"{paths}: nlink {st.st_nlink}, {len(paths)} names"
    # Inode numbers may differ across remounts only in their identity, not their sharing.
    groups = sorted(sorted(os.path.relpath(p, root) for p in ps) for ps in names_of.values())
    for d in seen.values():
        del d["ino"]
    return {"entries": seen, "link_groups": groups}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--snapshot")
    ap.add_argument("--compare")
    a = ap.parse_args()
    root = os.path.join(a.dir, "stress")
    if a.compare:
        want = json.load(open(a.compare))
        got = walk(root)
        if got != want:
            print("fs-stress: the tree differs from the snapshot", file=sys.stderr)
            sys.exit(1)
        print(f"fs-stress: {len(got['entries'])} entries identical after remount")
        return
    os.makedirs(root, exist_ok=True)
    for d in DIRS[1:]:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    with multiprocessing.Pool(a.procs) as pool:
        results = pool.map(worker, [(root, a.ops, a.seed * 1000 + i) for i in range(a.procs)])
    ok = sum(r["ok"] for r in results)
    expected = sum(r["expected_errors"] for r in results)
    tree = walk(root)
    print(f"fs-stress: {a.procs} processes x {a.ops} ops (seed {a.seed}): {ok} done, "
          f"{expected} expected errors, {len(tree['entries'])} entries, link counts consistent")
    if a.snapshot:
        json.dump(tree, open(a.snapshot, "w"))


if __name__ == "__main__":
    main()
