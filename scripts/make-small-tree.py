#!/usr/bin/env python3
"""A tree of small files to untar (scripts/bench-fs.sh, scripts/bench-untar.sh): N files of
1-4 KiB of random bytes, 500 to a directory, the same tree for the same N (seed 1).

usage: scripts/make-small-tree.py ROOT N"""
import os
import random
import sys

root, n = sys.argv[1], int(sys.argv[2])
random.seed(1)
for i in range(n):
    d = os.path.join(root, f"d{i // 500:04d}")
    if i % 500 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}"), "wb") as f:
        f.write(random.randbytes(random.randint(1024, 4096)))
