#!/usr/bin/env bash
# Foreground read latency while a scrub runs: fio 4 KiB random reads (nbd engine) on a
# volume served by `cairn serve`, over a raidz1 of three file leaves that each take a few
# ms per I/O, one I/O at a time (`fault:FILE?delay_ms=N&serial=1`: busy disks, so the
# disks are the bottleneck), measured
#   (1) with no scrub, (2) with an unlimited scrub running, (3) with `scrub --rate RATE`,
#   (4) with `scrub --latency-budget BUDGET`.
# Prints the p50/p99 completion latency and IOPS of each run, and the scrub's own speed.
#
# usage: scripts/bench-scrub-p99.sh
# environment:
#   CAIRN            the cairn binary (default: target/release/cairn, else target/debug/cairn)
#   BENCH_RUNTIME    seconds per fio run (default 15)
#   BENCH_DELAY_MS   latency each leaf adds to every I/O (default 2)
#   BENCH_RATE       the rate of run (3) (default 8M)
#   BENCH_BUDGET     the latency budget of run (4) (default 5ms)
#   BENCH_DATA_MB    MiB of file data the scrub reads (default 192)
#
# Needs fio (Debian: fio) with its nbd engine, and python3.
set -euo pipefail

RUNTIME="${BENCH_RUNTIME:-15}"
DELAY="${BENCH_DELAY_MS:-2}"
RATE="${BENCH_RATE:-8M}"
BUDGET="${BENCH_BUDGET:-5ms}"
DATA_MB="${BENCH_DATA_MB:-192}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CAIRN="${CAIRN:-}"
if [[ -z "$CAIRN" ]]; then
    for c in "$ROOT/target/release/cairn" "$ROOT/target/debug/cairn"; do
        [[ -x "$c" ]] && CAIRN="$c" && break
    done
fi
[[ -x "$CAIRN" ]] || { echo "bench-scrub-p99: build cairn first or set CAIRN" >&2; exit 1; }
command -v fio >/dev/null || { echo "bench-scrub-p99: install fio (Debian: fio)" >&2; exit 1; }

WORK="$(mktemp -d)"
export CAIRN_HOME="$WORK/home"
SERVE_PID=""
SCRUBBER_PID=""
cleanup() {
    [[ -n "$SCRUBBER_PID" ]] && kill "$SCRUBBER_PID" 2>/dev/null || true
    [[ -n "$SERVE_PID" ]] && kill "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

for i in 0 1 2; do truncate -s 1G "$WORK/d$i"; done
F="delay_ms=$DELAY&serial=1"
"$CAIRN" create tank raidz1 "fault:$WORK/d0?$F" "fault:$WORK/d1?$F" "fault:$WORK/d2?$F" >/dev/null
"$CAIRN" volume create -V 256M -b 16K tank/vol
head -c "$((DATA_MB << 20))" /dev/urandom > "$WORK/data"
"$CAIRN" put "$WORK/data" tank/data
rm "$WORK/data"

# No block cache: every read goes to the (slow) leaves.
"$CAIRN" --tunable cache_max=0 serve tank --nbd-socket "$WORK/nbd.sock" 2>"$WORK/serve.log" &
SERVE_PID=$!
for _ in $(seq 200); do [[ -S "$WORK/nbd.sock" && -S "$CAIRN_HOME/run/tank.sock" ]] && break; sleep 0.05; done
URI="nbd+unix:///tank/vol?socket=$WORK/nbd.sock"
fio --name=fill --ioengine=nbd --uri="$URI" --rw=write --bs=1m --size=256M --iodepth=4 \
    --output=/dev/null
# The fill's txg is synced (a served change syncs before it answers), so the first run does
# not measure it.
"$CAIRN" mkdir tank/synced

run_fio() {
    fio --name=randread --ioengine=nbd --uri="$URI" --rw=randread --bs=4k --size=256M \
        --iodepth=1 --time_based --runtime="$RUNTIME" --output-format=json --output="$WORK/$1.json"
}

# Keeps a scrub running (again when one finishes) until killed; $1: extra scrub options.
scrub_loop() {
    while true; do "$CAIRN" scrub $1 tank >/dev/null 2>&1 || sleep 0.2; done
}

stop_scrub() {
    # The scrub's speed as `status` reports it, before it is stopped.
    "$CAIRN" status tank | sed -n 's/.* at \([^ ]*\/s\).*/\1/p' | head -1 > "$WORK/$1.speed"
    kill "$SCRUBBER_PID" 2>/dev/null || true
    wait "$SCRUBBER_PID" 2>/dev/null || true
    SCRUBBER_PID=""
    "$CAIRN" scrub -s tank >/dev/null 2>&1 || true
    sleep 1
}

run_fio idle
scrub_loop "" & SCRUBBER_PID=$!
sleep 1
run_fio scrub
stop_scrub scrub
scrub_loop "--rate $RATE" & SCRUBBER_PID=$!
sleep 1
run_fio rated
stop_scrub rated
scrub_loop "--latency-budget $BUDGET" & SCRUBBER_PID=$!
sleep 1
run_fio budget
stop_scrub budget

python3 - "$WORK" "$RATE" "$DELAY" "$BUDGET" <<'EOF'
import json, os, sys
work, rate, delay, budget = sys.argv[1:5]
print(f"fio 4k random read, iodepth 1, raidz1 of 3 leaves taking {delay} ms per I/O, one at a time")
print(f"{'run':<28} {'IOPS':>8} {'p50 ms':>8} {'p99 ms':>8} {'scrub speed':>12}")
rows = {}
for name, label in [("idle", "no scrub"), ("scrub", "scrub (unlimited)"),
                    ("rated", f"scrub --rate {rate}"), ("budget", f"scrub --latency-budget {budget}")]:
    job = json.load(open(f"{work}/{name}.json"))["jobs"][0]["read"]
    pct = job["clat_ns"]["percentile"]
    speed_file = f"{work}/{name}.speed"
    speed = open(speed_file).read().strip() if os.path.exists(speed_file) else ""
    speed = speed or "-"
    rows[name] = {"iops": job["iops"], "p50_ms": pct["50.000000"] / 1e6,
                  "p99_ms": pct["99.000000"] / 1e6, "scrub_speed": speed}
    r = rows[name]
    print(f"{label:<28} {r['iops']:>8.0f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {speed:>12}")
print(json.dumps({"delay_ms": float(delay), "rate": rate, "budget": budget, "runs": rows}))
EOF
