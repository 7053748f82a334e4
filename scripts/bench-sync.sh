#!/usr/bin/env bash
# Synchronous writes over NBD, side by side in one run: 4 KiB random writes one at a time,
#   - each with FUA, and each followed by FLUSH (`cairn bench sync-writes`, our client:
#     fio's nbd engine has no FUA), and
#   - fio's nbd engine with --fsync=1 (a FLUSH after every write), at iodepth 1,
# against
#   (a) a cairn volume (raidz1 of 3 files on /dev/shm, volblocksize 16K) served by the
#       cairn binary under test (target/release/cairn),
#   (b) optionally the same served by an OLD cairn binary (a build from before the intent
#       log, where FLUSH and FUA wait for a txg sync): "today's figure",
#   (c) `nbdkit file` serving a raw file on /dev/shm: the reference.
#
# usage: scripts/bench-sync.sh [OLD_CAIRN_BINARY]
# environment: BENCH_SECONDS (per workload, default 10), BENCH_JSON (default
#   ./bench-sync.json). Needs fio, nbdkit, libnbd-bin (Debian packages).
set -euo pipefail
cd "$(dirname "$0")/.."
NEW=$(pwd)/target/release/cairn
OLD="${1:-}"
SECONDS_PER="${BENCH_SECONDS:-10}"
JSON_OUT="${BENCH_JSON:-bench-sync.json}"
[ -x "$NEW" ] || { echo "bench-sync: build first: cargo build --release -p cairn" >&2; exit 1; }
for t in fio nbdkit nbdinfo; do
    command -v $t >/dev/null || { echo "bench-sync: '$t' not found (apt-get install fio nbdkit libnbd-bin)" >&2; exit 1; }
done
work=$(mktemp -d /dev/shm/cairn-bench-sync.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

wait_socket() { for _ in $(seq 300); do [ -S "$1" ] && return 0; sleep 0.1; done; echo "no socket $1" >&2; exit 1; }

# fio --fsync=1 at iodepth 1: prints IOPS, mean write+flush latency (µs), p99 of the flush.
fio_fsync() {
    fio --name=fsync --ioengine=nbd --uri="$1" --rw=randwrite --bs=4k --iodepth=1 \
        --fsync=1 --size=1G --time_based --runtime="$SECONDS_PER" --output-format=json \
        | python3 -c 'import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index("{"):])["jobs"][0]; w=j["write"]; s=j["sync"]["lat_ns"]; print(round(w["iops"],1), round((w["clat_ns"]["mean"]+s["mean"])/1000,1), round(s["percentile"]["99.000000"]/1000,1))'
}

results=()
# serve_cairn LABEL BINARY: a fresh pool made by that binary, served; runs every workload.
serve_cairn() {
    local label=$1 bin=$2 dir=$work/$1
    mkdir -p "$dir"
    export CAIRN_HOME=$dir/home
    for i in 0 1 2; do truncate -s 2G "$dir/d$i"; done
    "$bin" create tank raidz1 "$dir"/d0 "$dir"/d1 "$dir"/d2 >/dev/null
    "$bin" volume create -V 1G -b 16K tank/vol >/dev/null
    "$bin" serve tank --nbd-socket "$dir/sock" >/dev/null 2>&1 &
    local pid=$!
    pids+=("$pid")
    wait_socket "$dir/sock"
    local uri="nbd+unix:///tank/vol?socket=$dir/sock"
    "$NEW" bench sync-writes --seconds "$SECONDS_PER" --json-out "$work/$label.json" "$label=$uri"
    results+=("$label $(fio_fsync "$uri")")
    kill "$pid"; wait "$pid" 2>/dev/null || true
}

serve_cairn cairn "$NEW"
[ -n "$OLD" ] && serve_cairn cairn-old "$OLD"

truncate -s 1G "$work/raw"
nbdkit --unix "$work/nbdkit.sock" --foreground --exit-with-parent file "$work/raw" &
pids+=("$!")
wait_socket "$work/nbdkit.sock"
kit="nbd+unix:///?socket=$work/nbdkit.sock"
"$NEW" bench sync-writes --seconds "$SECONDS_PER" --json-out "$work/nbdkit.json" "nbdkit=$kit"
results+=("nbdkit $(fio_fsync "$kit")")

python3 - "$JSON_OUT" "$work" "${results[@]}" <<'PY'
import json, sys, glob, os
out, work, rows = sys.argv[1], sys.argv[2], sys.argv[3:]
client = []
for f in sorted(glob.glob(os.path.join(work, "*.json"))):
    client += json.load(open(f))
fio = {}
for r in rows:
    label, iops, mean, p99 = r.split()
    fio[label] = {"iops": float(iops), "mean_us": float(mean), "flush_p99_us": float(p99)}
ref = {c["mode"]: c["iops"] for c in client if c["label"] == "nbdkit"}
print("(client rows: p50 and p99 of write+FUA or write+FLUSH; fio rows: mean write+flush, p99 of the flush)")
print(f"{'export':<12} {'workload':<22} {'IOPS':>9} {'µs':>8} {'p99 µs':>8} {'vs nbdkit':>10}")
for c in client:
    print(f"{c['label']:<12} {'4K '+c['mode']+' qd1 (client)':<22} {c['iops']:>9.0f} {c['p50_us']:>8.1f} {c['p99_us']:>8.1f} {c['iops']/ref[c['mode']]:>10.2f}")
for label, f in fio.items():
    print(f"{label:<12} {'4K fio --fsync=1 qd1':<22} {f['iops']:>9.0f} {f['mean_us']:>8.1f} {f['flush_p99_us']:>8.1f} {f['iops']/fio['nbdkit']['iops']:>10.2f}")
json.dump({"client": client, "fio_fsync1": fio}, open(out, "w"), indent=2)
print(f"JSON: {out}")
PY
