#!/usr/bin/env bash
# File-system benchmark, side by side in one run on the same tmpfs-backed leaves:
#   cairn     a cairn mount (FUSE) of a raidz2 pool of six files in /dev/shm
#   zfs-fuse  Debian's zfs-fuse, the same raidz2 of six files, lz4 (the same engine design
#             over FUSE)
#   bindfs    bindfs (a libfuse passthrough, default options) over a tmpfs directory
#   tmpfs     a directory of /dev/shm itself
# and `cairn bench io` (the store without FUSE: what the medium allows this engine).
#
# Workloads (fio for I/O, bonnie++ -n for metadata, tar/find/rm for a tree):
#   seq write 1 MiB of BENCH_SIZE (fsync at the end); seq read after a remount / export +
#   import and dropping the page cache (else the read measures RAM); 4 KiB random read and
#   write psync qd1 and libaio qd32 for BENCH_RUNTIME s each; file create/stat/delete per s
#   (bonnie++ -n 16:0:0:16 -s 0); untar, `find`, `rm -r` of a tree of BENCH_FILES small
#   files; dd bs=4k and bs=128k (as the 28-disk study), 1 GiB each.
#
# Usage: scripts/bench-fs.sh [TARGET...]   (default: cairn zfs-fuse bindfs tmpfs)
# Env: CAIRN (binary, default target/release/cairn), BENCH_SIZE (default 4G), BENCH_RUNTIME
#      (default 10), BENCH_FILES (default 50000), BENCH_JSON (default bench-fs.json).
# Needs root, fio, bonnie++, zfs-fuse, bindfs, python3 (apt-get install fio bonnie++ zfs-fuse
# bindfs). Prints a table; writes every figure as JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
CAIRN=${CAIRN:-$repo/target/release/cairn}
SIZE=${BENCH_SIZE:-4G}
RUNTIME=${BENCH_RUNTIME:-10}
FILES=${BENCH_FILES:-50000}
JSON=${BENCH_JSON:-bench-fs.json}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(cairn zfs-fuse bindfs tmpfs)
for t in fio bonnie++ python3; do
  command -v $t >/dev/null || { echo "bench-fs: $t missing (apt-get install fio bonnie++ python3)" >&2; exit 1; }
done
[ -x "$CAIRN" ] || cargo build --release --locked -q -p cairn

work=$(mktemp -d /dev/shm/cairn-bench-fs.XXXXXX)
results=$work/results.jsonl
export CAIRN_HOME=$work/home
cleanup() {
  "$CAIRN" umount -f "$work/mnt-cairn" >/dev/null 2>&1 || true
  umount -l "$work/mnt-bindfs" 2>/dev/null || true
  if [ -f "$work/zfs-fuse.pid" ]; then
    zpool destroy -f benchfs >/dev/null 2>&1 || true
    kill "$(cat "$work/zfs-fuse.pid")" 2>/dev/null || true
  fi
  sleep 1
  rm -rf "$work"
}
trap cleanup EXIT

record() { # target metric value unit
  printf '{"target":"%s","metric":"%s","value":%f,"unit":"%s"}\n' "$1" "$2" "$3" "$4" >> "$results"
  printf '  %-10s %-28s %12.1f %s\n' "$1" "$2" "$3" "$4"
}

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# A small-file tree to untar: FILES files of 1-4 KiB in directories of 500.
tree_tar=$work/tree.tar
"$repo/scripts/make-small-tree.py" "$work/tree" "$FILES"
tar -C "$work" -cf "$tree_tar" tree && rm -rf "$work/tree"
head -c 1G /dev/urandom > "$work/src.bin"

fio_mbs() { # dir name rw bs [extra...] -> MB/s
  local dir=$1 name=$2 rw=$3 bs=$4; shift 4
  fio --name="$name" --directory="$dir" --filename=bench.dat --rw="$rw" --bs="$bs" "$@" \
      --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print((j["read"]["bw_bytes"]+j["write"]["bw_bytes"])/1e6)'
}
fio_iops() {
  local dir=$1 name=$2 rw=$3; shift 3
  fio --name="$name" --directory="$dir" --filename=bench.dat --rw="$rw" --bs=4k --size=1G \
      --time_based --runtime="$RUNTIME" "$@" --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(j["read"]["iops"]+j["write"]["iops"])'
}
secs() { local t0; t0=$(date +%s.%N); "$@" >/dev/null; echo "$(date +%s.%N) - $t0" | bc; }

# remount TARGET DIR: make the next read come from the leaves, not a cache.
remount() {
  case $1 in
    cairn) "$CAIRN" umount "$2" && "$CAIRN" mount benchfs/fs "$2" >/dev/null ;;
    zfs-fuse) zpool export benchfs && zpool import -d "$work/zfs" benchfs ;;
  esac
  drop_caches
}

setup() { # target -> prints the directory to test in
  local t=$1
  case $t in
    cairn)
      mkdir -p "$work/cairn"
      for i in 0 1 2 3 4 5; do truncate -s 3G "$work/cairn/d$i"; done
      "$CAIRN" create benchfs raidz2 "$work"/cairn/d{0,1,2,3,4,5} >/dev/null
      "$CAIRN" dataset create benchfs/fs
      "$CAIRN" mount benchfs/fs "$work/mnt-cairn" >/dev/null
      echo "$work/mnt-cairn" ;;
    zfs-fuse)
      mkdir -p "$work/zfs"
      for i in 0 1 2 3 4 5; do truncate -s 3G "$work/zfs/d$i"; done
      zfs-fuse --no-daemon --no-kstat-mount >/dev/null 2>&1 &
      echo $! > "$work/zfs-fuse.pid"   # (setup runs in a subshell: pass the pid by file)
      for _ in $(seq 100); do zpool list >/dev/null 2>&1 && break; sleep 0.1; done
      zpool create -f -m "$work/mnt-zfs" benchfs raidz2 "$work"/zfs/d{0,1,2,3,4,5}
      zfs set compression=lz4 benchfs 2>/dev/null || zfs set compression=on benchfs
      echo "$work/mnt-zfs" ;;
    bindfs)
      mkdir -p "$work/bindfs-src" "$work/mnt-bindfs"
      bindfs "$work/bindfs-src" "$work/mnt-bindfs"
      echo "$work/mnt-bindfs" ;;
    tmpfs)
      mkdir -p "$work/tmpfs"
      echo "$work/tmpfs" ;;
  esac
}

teardown() {
  case $1 in
    cairn) "$CAIRN" umount "$2"; rm -rf "$work/cairn" ;;
    zfs-fuse)
      # (zfs-fuse may still be busy with the rm just before: retry, then give up quietly)
      for _ in 1 2 3 4 5; do zpool destroy -f benchfs 2>/dev/null && break; sleep 2; done
      # (it may have exited already: zpool destroy can end it)
      kill "$(cat "$work/zfs-fuse.pid")" 2>/dev/null || true
      for _ in $(seq 50); do pgrep -x zfs-fuse >/dev/null || break; sleep 0.1; done
      rm -rf "$work/zfs" "$work/zfs-fuse.pid" ;;
    bindfs) umount "$2"; rm -rf "$work/bindfs-src" ;;
    tmpfs) rm -rf "$2" ;;
  esac
}

bench_target() {
  local t=$1 dir
  dir=$(setup "$t")
  echo "== $t ($dir)"
  record "$t" seq_write_1m "$(fio_mbs "$dir" seqw write 1M --size="$SIZE" --end_fsync=1)" MB/s
  remount "$t" "$dir"
  record "$t" seq_read_1m "$(fio_mbs "$dir" seqr read 1M --size="$SIZE")" MB/s
  rm -f "$dir/bench.dat"
  fio --name=prep --directory="$dir" --filename=bench.dat --rw=write --bs=1M --size=1G --end_fsync=1 >/dev/null 2>&1
  record "$t" randread_4k_qd1 "$(fio_iops "$dir" rr1 randread --ioengine=psync)" IOPS
  record "$t" randwrite_4k_qd1 "$(fio_iops "$dir" rw1 randwrite --ioengine=psync)" IOPS
  record "$t" randread_4k_qd32 "$(fio_iops "$dir" rr32 randread --ioengine=libaio --iodepth=32)" IOPS
  record "$t" randwrite_4k_qd32 "$(fio_iops "$dir" rw32 randwrite --ioengine=libaio --iodepth=32)" IOPS
  rm -f "$dir/bench.dat"
  # dd as the 28-disk study ran it, from a random source in RAM, fdatasync at the end.
  for bs in 4k 128k; do
    local s; s=$(secs dd if="$work/src.bin" of="$dir/dd.dat" bs=$bs conv=fdatasync status=none)
    record "$t" "dd_write_$bs" "$(echo "1073.741824 / $s" | bc -l)" MB/s
    rm -f "$dir/dd.dat"
  done
  # bonnie++ file creation, as the 24-disk study: -n 16 (16 Ki files), no size test.
  local csv
  mkdir -p "$dir/bonnie"
  csv=$(bonnie++ -q -u root -d "$dir/bonnie" -s 0 -n 16 2>/dev/null | tail -1)
  python3 - "$t" "$csv" >> "$results" <<'EOF'
import json, sys
t, f = sys.argv[1], sys.argv[2].split(",")
# bonnie++ 1.98 CSV: field 21 is the file count (in 1024s), 22-25 sizes and directories,
# 26..37 seq create, stat, delete, random create, stat, delete (per second, then %CPU);
# "+++++" means done in under half a second (too fast to time): not recorded.
names = ["seq_create", "seq_stat", "seq_delete", "rand_create", "rand_stat", "rand_delete"]
for i, n in enumerate(names):
    v = f[26 + 2 * i] if len(f) > 26 + 2 * i else ""
    if v and v.replace(".", "").isdigit():
        print(json.dumps({"target": t, "metric": "bonnie_" + n, "value": float(v), "unit": "files/s"}))
EOF
  python3 - "$t" "$results" <<'EOF'
import json, sys
for l in open(sys.argv[2]):
    j = json.loads(l)
    if j["target"] == sys.argv[1] and j["metric"].startswith("bonnie_"):
        print("  %-10s %-28s %12.1f %s" % (j["target"], j["metric"], j["value"], j["unit"]))
EOF
  rm -rf "$dir/bonnie"
  record "$t" untar_s "$(secs tar -C "$dir" -xf "$tree_tar")" s
  record "$t" find_s "$(secs find "$dir/tree")" s
  record "$t" rm_r_s "$(secs rm -rf "$dir/tree")" s
  teardown "$t" "$dir"
}

for t in "${targets[@]}"; do
  case $t in
    zfs-fuse) command -v zfs-fuse >/dev/null || { echo "== zfs-fuse: not installed, skipped"; continue; } ;;
    bindfs) command -v bindfs >/dev/null || { echo "== bindfs: not installed, skipped"; continue; } ;;
  esac
  bench_target "$t"
done

echo "== cairn bench io (the store without FUSE, raidz2x6)"
"$CAIRN" bench io --size "$SIZE" --layouts raidz2x6 --no-zfs-fuse --json-out "$work/io.json" || true

python3 - "$results" "$work/io.json" "$JSON" <<'EOF'
import json, sys, platform, os
rows = [json.loads(l) for l in open(sys.argv[1])]
io = None
try:
    io = json.load(open(sys.argv[2]))
except Exception:
    pass
out = {"machine": platform.node(), "cpus": os.cpu_count(), "results": rows, "cairn_bench_io": io}
json.dump(out, open(sys.argv[3], "w"), indent=1)
print(f"JSON written to {sys.argv[3]}")
EOF
