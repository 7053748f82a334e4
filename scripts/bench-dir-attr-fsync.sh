#!/usr/bin/env bash
# chmod + utimes of a directory, then fsync of it, N times, through a cairn mount (raidz1 of
# three 512 MiB files in /dev/shm), for each cairn binary given: what logging directory
# attributes (ATTR records) saves against a txg sync per fsync.
#   scripts/bench-dir-attr-fsync.sh [-n N] CAIRN...      (default N 2000)
set -euo pipefail
n=2000
if [ "${1:-}" = "-n" ]; then n=$2; shift 2; fi
[ $# -gt 0 ] || { echo "usage: $0 [-n N] CAIRN..." >&2; exit 2; }
work=$(mktemp -d /dev/shm/cairn-dirattr.XXXXXX)
trap 'rm -rf "$work"' EXIT
for cairn in "$@"; do
  export CAIRN_HOME="$work/home"
  rm -rf "${work:?}"/*; mkdir -p "$work/mnt"
  truncate -s 512M "$work/d0" "$work/d1" "$work/d2"
  "$cairn" create dirattr raidz1 "$work/d0" "$work/d1" "$work/d2" >/dev/null
  "$cairn" mount dirattr "$work/mnt" >/dev/null
  rate=$(python3 - "$work/mnt" "$n" <<'PY'
import os, sys, time
d = os.path.join(sys.argv[1], "dir")
os.makedirs(d, exist_ok=True)
fd = os.open(d, os.O_RDONLY)
os.fsync(fd)
n = int(sys.argv[2])
t0 = time.time()
for i in range(n):
    os.chmod(d, 0o700 if i % 2 else 0o750)
    os.utime(d, (1_600_000_000 + i, 1_600_000_000 + i))
    os.fsync(fd)
print(f"{n / (time.time() - t0):.0f}")
PY
)
  "$cairn" umount "$work/mnt"
  "$cairn" export dirattr >/dev/null 2>&1 || true
  echo "$cairn: $rate chmod+utimes+fsync of a directory per second"
done
