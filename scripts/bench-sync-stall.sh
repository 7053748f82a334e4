#!/usr/bin/env bash
# How long txg syncs stall small writes: fio 4 KiB random writes (queue depth 1 and 32,
# RUNTIME s each, so the service's 5 s syncs fall inside) into a filled cairn volume
# (1 GiB, volblocksize 16K, compression off) on a raidz1 of three files (LEAF_SIZE) in
# /dev/shm, through `cairn serve`'s NBD socket. Prints IOPS, mean, p99.9 and the longest
# write latency per binary; binaries alternate, ROUNDS times, a fresh pool each run.
#
# usage: scripts/bench-sync-stall.sh LABEL=BINARY [LABEL=BINARY …]
# environment: ROUNDS (default 3), RUNTIME (default 15), JSON (default bench-sync-stall.json),
#   SERVE_TUNABLES (tunables for `cairn serve`, e.g. "dirty_max=128M": syncs the dirty cap
#   asks for, beside the 5 s ones), LEAF_SIZE (each of the three files, default 2G: a pool
#   that a volume rewritten every txg nearly fills, so the space check also forces syncs;
#   4G leaves room)
# Needs fio (with the nbd engine) and python3.
set -euo pipefail
(( $# >= 1 )) || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
ROUNDS="${ROUNDS:-3}" RUNTIME="${RUNTIME:-15}" JSON="${JSON:-bench-sync-stall.json}"
LEAF_SIZE="${LEAF_SIZE:-2G}"
tunables=()
for t in ${SERVE_TUNABLES:-}; do tunables+=(--tunable "$t"); done
command -v fio >/dev/null || { echo "bench-sync-stall: fio not found (Debian: fio)" >&2; exit 1; }
RESULTS="$(mktemp)"
trap 'rm -f "$RESULTS"' EXIT

one_run() { # LABEL BINARY ROUND
    local label="$1" bin="$2" round="$3" work pid uri
    work="$(mktemp -d /dev/shm/sync-stall.XXXXXX)"
    export CAIRN_HOME="$work/home"
    for i in 0 1 2; do truncate -s "$LEAF_SIZE" "$work/d$i"; done
    "$bin" create bench raidz1 "$work/d0" "$work/d1" "$work/d2" >/dev/null
    "$bin" volume create -V 1G -b 16K -o compression=off bench/vol >/dev/null
    "$bin" serve "${tunables[@]}" bench --nbd-socket "$work/s.sock" >"$work/serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do [[ -S "$work/s.sock" ]] && break; sleep 0.1; done
    uri="nbd+unix:///bench/vol?socket=$work/s.sock"
    fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --size=1G --iodepth=8 \
        --end_fsync=1 >/dev/null
    for qd in 1 32; do
        fio --name=rw --ioengine=nbd --uri="$uri" --rw=randwrite --bs=4k --size=1G \
            --iodepth="$qd" --time_based --runtime="$RUNTIME" --output-format=json \
            --output="$work/rw.json" >/dev/null
        python3 - "$work/rw.json" "$label" "$round" "$qd" >>"$RESULTS" <<'PY'
import json, sys
path, label, rnd, qd = sys.argv[1:]
w = json.load(open(path))["jobs"][0]["write"]
c = w["clat_ns"]
print(json.dumps({"label": label, "round": int(rnd), "iodepth": int(qd),
                  "iops": round(w["iops"]), "mean_us": round(c["mean"] / 1e3, 1),
                  "p99_9_ms": round(c["percentile"]["99.900000"] / 1e6, 2),
                  "max_ms": round(c["max"] / 1e6, 1)}))
PY
        tail -1 "$RESULTS"
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -rf "$work"
}

for round in $(seq "$ROUNDS"); do
    for pair in "$@"; do one_run "${pair%%=*}" "${pair#*=}" "$round"; done
done
python3 - "$RESULTS" "$JSON" "$RUNTIME" "${SERVE_TUNABLES:-}" "$LEAF_SIZE" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
json.dump({"runtime_s": int(sys.argv[3]), "serve_tunables": sys.argv[4],
           "leaf_size": sys.argv[5], "runs": rows},
          open(sys.argv[2], "w"), indent=2)
print(f"{'binary':<10}{'qd':>4}{'IOPS (median)':>15}{'mean µs':>10}{'p99.9 ms':>10}{'max ms (each run)':>28}")
for label in dict.fromkeys(r["label"] for r in rows):
    for qd in (1, 32):
        rs = [r for r in rows if r["label"] == label and r["iodepth"] == qd]
        med = lambda k: statistics.median(r[k] for r in rs)
        print(f"{label:<10}{qd:>4}{med('iops'):>15.0f}{med('mean_us'):>10.1f}{med('p99_9_ms'):>10.2f}"
              f"{' '.join(str(r['max_ms']) for r in rs):>28}")
print(f"JSON: {sys.argv[2]}")
PY
