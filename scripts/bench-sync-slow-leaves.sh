#!/usr/bin/env bash
# Sync writes through NBD on leaves with latency: 4 KiB random writes at queue depth 1,
# each followed by a FLUSH (fio --fsync=1) and each with FUA (`cairn bench sync-writes
# --mode fua`), to a volume on a mirror of two `fault:` leaves over files in /dev/shm, each
# adding DELAY_MS to every I/O (a medium where a txg sync costs several device round
# trips and a log commit one). Binaries alternate, ROUNDS times; the same FUA client
# (CLIENT) for every binary.
#
# usage: scripts/bench-sync-slow-leaves.sh LABEL=BINARY [LABEL=BINARY ...]
# environment: DELAY_MS (default 1), ROUNDS (default 3), RUNTIME (s per run, default 5),
#   CLIENT (the cairn whose `bench sync-writes` runs the FUA workload; default
#   target/release/cairn), JSON (default bench-sync-slow-leaves.json).
#   Needs fio (with the nbd engine), python3.
set -euo pipefail
. "$(dirname "$0")/slow-leaves-lib.sh"
(( $# >= 1 )) || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
DELAY_MS="${DELAY_MS:-1}" ROUNDS="${ROUNDS:-3}" RUNTIME="${RUNTIME:-5}"
JSON="${JSON:-bench-sync-slow-leaves.json}"
CLIENT="${CLIENT:-$(dirname "$0")/../target/release/cairn}"
command -v fio >/dev/null || { echo "bench-sync-slow-leaves: fio not found (Debian: fio)" >&2; exit 1; }
[[ -x "$CLIENT" ]] || { echo "bench-sync-slow-leaves: no cairn at $CLIENT for the FUA client (set CLIENT)" >&2; exit 1; }
RESULTS="$(mktemp)"
trap 'stop_slow_volume; rm -f "$RESULTS"' EXIT

# record LABEL ROUND WORKLOAD IOPS: appends a row to RESULTS and prints it.
record() {
    echo "{\"label\": \"$1\", \"round\": $2, \"workload\": \"$3\", \"iops\": $4}" | tee -a "$RESULTS"
}

one_run() { # LABEL BINARY ROUND
    local label="$1" bin="$2" round="$3" iops
    work="$(mktemp -d /dev/shm/sync-slow.XXXXXX)"
    export CAIRN_HOME="$work/home"
    serve_slow_volume "$bin" "$work"
    fio --name=fsync --ioengine=nbd --uri="$uri" --rw=randwrite --bs=4k --size=256M \
        --iodepth=1 --fsync=1 --time_based --runtime="$RUNTIME" --output-format=json \
        --output="$work/fsync.json" >/dev/null
    iops=$(python3 -c 'import json,sys; t=open(sys.argv[1]).read(); print(round(json.loads(t[t.index("{"):])["jobs"][0]["write"]["iops"]))' "$work/fsync.json")
    record "$label" "$round" fsync "$iops"
    "$CLIENT" bench sync-writes --json --mode fua --seconds "$RUNTIME" --span $((256 << 20)) \
        "$label=$uri" > "$work/fua.json"
    iops=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))[0]["iops"]))' "$work/fua.json")
    record "$label" "$round" fua "$iops"
    stop_slow_volume
}

for round in $(seq "$ROUNDS"); do
    for pair in "$@"; do one_run "${pair%%=*}" "${pair#*=}" "$round"; done
done
python3 - "$RESULTS" "$DELAY_MS" "$JSON" <<'PY'
import json, statistics, sys
results, delay, out = sys.argv[1:]
rows = [json.loads(l) for l in open(results)]
json.dump({"delay_ms": float(delay), "runs": rows}, open(out, "w"), indent=2)
labels = list(dict.fromkeys(r["label"] for r in rows))
for w in ("fsync", "fua"):
    for label in labels:
        iops = [r["iops"] for r in rows if r["label"] == label and r["workload"] == w]
        print(f"{w:<6}{label:<16}" + " · ".join(map(str, iops)) + f"; median {statistics.median(iops)}")
print(f"JSON: {out}")
PY
