#!/usr/bin/env bash
# A volume's synchronous writes while a file system of the same pool creates files, side by
# side for two binaries: is the intent log per dataset?
#
# For each binary: a raidz1 of 3 files on /dev/shm, a volume tank/vol (16K blocks) and a
# file system tank/fs, both served by one `cairn serve` (NBD on a Unix socket, tank/fs
# mounted over FUSE). `cairn bench sync-writes` (4 KiB random writes one at a time, each
# with FUA, then each followed by FLUSH) runs on the volume twice: quiet, then while a shell
# loop creates empty files in the mount for the whole measurement. A create is a change the
# log cannot record: where the log is pool-wide, every FLUSH or FUA in a txg with a create
# is a txg sync; where it is per dataset, only the file system's own fsyncs are.
#
# usage: scripts/bench-log-per-dataset.sh LABEL=BINARY [LABEL=BINARY...]
# environment: BENCH_SECONDS (per workload, default 10), ROUNDS (the binaries alternate,
#   default 2), BENCH_JSON (default ./bench-log-per-dataset.json). Needs root (FUSE), fuse3.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER="${BENCH_SECONDS:-10}"
ROUNDS="${ROUNDS:-2}"
JSON_OUT="${BENCH_JSON:-bench-log-per-dataset.json}"
[ $# -gt 0 ] || { echo "usage: $0 LABEL=BINARY [LABEL=BINARY...]" >&2; exit 2; }
work=$(mktemp -d /dev/shm/cairn-bench-logds.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    for m in "$work"/*/mnt; do umount -l "$m" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

wait_for() { for _ in $(seq 300); do eval "$1" && return 0; sleep 0.1; done; echo "timed out: $1" >&2; exit 1; }

# creates DIR SECONDS: empty files in DIR until SECONDS have passed (bounded).
creates() {
    local end=$(($(date +%s) + $2)) n=0
    while [ "$(date +%s)" -lt "$end" ]; do
        for i in $(seq 50); do : > "$1/f$n.$i"; done
        n=$((n + 1))
    done
}

run() { # LABEL BINARY ROUND
    local label=$1 bin=$2 round=$3 dir=$work/$1.$3
    mkdir -p "$dir/mnt"
    export CAIRN_HOME=$dir/home
    for i in 0 1 2; do truncate -s 2G "$dir/d$i"; done
    "$bin" create tank raidz1 "$dir"/d0 "$dir"/d1 "$dir"/d2 >/dev/null
    "$bin" volume create -V 1G -b 16K tank/vol >/dev/null
    "$bin" dataset create tank/fs >/dev/null
    "$bin" serve tank --nbd-socket "$dir/sock" --mount "tank/fs=$dir/mnt" >/dev/null 2>&1 &
    local pid=$!
    pids+=("$pid")
    wait_for "[ -S '$dir/sock' ] && mountpoint -q '$dir/mnt'"
    local uri="nbd+unix:///tank/vol?socket=$dir/sock"
    "$bin" bench sync-writes --seconds "$SECONDS_PER" --json-out "$work/r$round-$label-quiet.json" \
        "$label quiet=$uri" >/dev/null
    # Two workloads (FUA, FLUSH) of SECONDS_PER each, and a margin.
    creates "$dir/mnt" $((2 * SECONDS_PER + 5)) &
    local creator=$!
    "$bin" bench sync-writes --seconds "$SECONDS_PER" --json-out "$work/r$round-$label-creates.json" \
        "$label creates=$uri" >/dev/null
    wait "$creator"
    echo "round $round, $label: $(find "$dir/mnt" -type f | wc -l) files created" >&2
    kill "$pid"; wait "$pid" 2>/dev/null || true
    umount -l "$dir/mnt" 2>/dev/null || true
}

for round in $(seq "$ROUNDS"); do
    for arg in "$@"; do run "${arg%%=*}" "${arg#*=}" "$round"; done
done

python3 - "$JSON_OUT" "$work" <<'PY'
import json, sys, glob, os
out, work = sys.argv[1], sys.argv[2]
rows = []
for f in sorted(glob.glob(os.path.join(work, "r*.json"))):
    for c in json.load(open(f)):
        c["round"] = int(os.path.basename(f)[1:].split("-")[0])
        rows.append(c)
print(f"{'round':<6} {'binary, beside the volume':<28} {'workload':<18} {'IOPS':>9} {'p50 µs':>8} {'p99 µs':>8}")
for c in rows:
    print(f"{c['round']:<6} {c['label']:<28} {'4K '+c['mode']+' qd1':<18} {c['iops']:>9.0f} {c['p50_us']:>8.1f} {c['p99_us']:>8.1f}")
json.dump(rows, open(out, "w"), indent=2)
print(f"JSON: {out}")
PY
