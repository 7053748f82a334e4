#!/usr/bin/env bash
# Random 4 KiB reads through NBD at queue depths 1, 4 and 32 from a volume on leaves with
# latency: a mirror of two `fault:` leaves over files in /dev/shm, each adding DELAY_MS to
# every I/O and serving I/Os side by side (a device with latency that takes many requests
# at once: an SSD, a remote `nbd://` leaf, a disk reordering its queue). The block cache is
# off (`cache_max=0`), so every read reaches a leaf. What the server lets through to the
# devices sets the figure at queue depth 32. Binaries alternate, ROUNDS times.
#
# usage: scripts/bench-nbd-slow-leaves.sh LABEL=BINARY [LABEL=BINARY ...]
# environment: DELAY_MS (default 2), ROUNDS (default 2), RUNTIME (s per run, default 5),
#   JSON (default bench-nbd-slow-leaves.json). Needs fio (with the nbd engine), python3.
set -euo pipefail
(( $# >= 1 )) || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
DELAY_MS="${DELAY_MS:-2}" ROUNDS="${ROUNDS:-2}" RUNTIME="${RUNTIME:-5}"
JSON="${JSON:-bench-nbd-slow-leaves.json}"
command -v fio >/dev/null || { echo "bench-nbd-slow-leaves: fio not found (Debian: fio)" >&2; exit 1; }
RESULTS="$(mktemp)"
work=""
pid=""
cleanup() {
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
    [[ -n "$work" ]] && rm -rf "$work"
    rm -f "$RESULTS"
}
trap cleanup EXIT

one_run() { # LABEL BINARY ROUND
    local label="$1" bin="$2" round="$3" uri qd
    work="$(mktemp -d /dev/shm/nbd-slow.XXXXXX)"
    export CAIRN_HOME="$work/home"
    truncate -s 1G "$work/d0" "$work/d1"
    "$bin" create tank mirror "fault:$work/d0?delay_ms=$DELAY_MS" \
        "fault:$work/d1?delay_ms=$DELAY_MS" >/dev/null
    "$bin" volume create -V 256M -b 16K -o compression=off tank/vol >/dev/null
    "$bin" serve --tunable cache_max=0 tank --nbd-socket "$work/s.sock" >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 100); do [[ -S "$work/s.sock" ]] && break; sleep 0.1; done
    uri="nbd+unix:///tank/vol?socket=$work/s.sock"
    fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --size=256M \
        --iodepth=8 >/dev/null
    for qd in 1 4 32; do
        fio --name=rr --ioengine=nbd --uri="$uri" --rw=randread --bs=4k --size=256M \
            --iodepth="$qd" --time_based --runtime="$RUNTIME" --output-format=json \
            --output="$work/rr.json" >/dev/null
        python3 - "$work/rr.json" "$label" "$round" "$qd" >>"$RESULTS" <<'PY'
import json, sys
path, label, rnd, qd = sys.argv[1:]
text = open(path).read()
r = json.loads(text[text.index("{"):])["jobs"][0]["read"]
print(json.dumps({"label": label, "round": int(rnd), "iodepth": int(qd),
                  "iops": round(r["iops"]), "mean_us": round(r["clat_ns"]["mean"] / 1e3)}))
PY
        tail -1 "$RESULTS"
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=""
    rm -rf "$work"
    work=""
}

for round in $(seq "$ROUNDS"); do
    for pair in "$@"; do one_run "${pair%%=*}" "${pair#*=}" "$round"; done
done
python3 - "$RESULTS" "$JSON" "$DELAY_MS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
json.dump({"delay_ms": float(sys.argv[3]), "runs": rows}, open(sys.argv[2], "w"), indent=2)
print(f"{'binary':<12}{'qd':>4}  IOPS, each round")
for label in dict.fromkeys(r["label"] for r in rows):
    for qd in (1, 4, 32):
        rs = [r for r in rows if r["label"] == label and r["iodepth"] == qd]
        print(f"{label:<12}{qd:>4}  " + " · ".join(str(r["iops"]) for r in rs))
print(f"JSON: {sys.argv[2]}")
PY
