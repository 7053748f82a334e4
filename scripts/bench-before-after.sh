#!/usr/bin/env bash
# Runs `cairn bench io` and scripts/bench-nbd.sh for several cairn binaries in one session,
# interleaved (every round runs each binary once, in order), so that a change's effect can
# be told from the machine's noise. Used for issue 13's before/after record
# (docs/bench/refactor-before-after.md).
#
# usage: scripts/bench-before-after.sh LABEL=BINARY [LABEL=BINARY …]
# environment:
#   ROUNDS         rounds (default 2)
#   IO_SIZE        bytes per layout for `bench io` (default 2G)
#   IO_LAYOUTS     layouts for `bench io` (default raidz2x6,mirror2x3; "none": NBD only)
#   BENCH_RUNTIME  seconds per bench-nbd.sh workload (default 5)
#   OUT            folder for the JSON (default ./before-after)
#   CAIRN_BIN      the binary whose `bench sync-writes` is bench-nbd.sh's FUA client
#                  (default: the last BINARY; older binaries lack it)
# The NBD export is a volume (1 GiB, volblocksize 16K, compression off) on a raidz1 of three
# files in /dev/shm, served over a Unix socket, as in docs/bench/small-io.md.
set -euo pipefail
(( $# >= 1 )) || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
ROUNDS="${ROUNDS:-2}"
IO_SIZE="${IO_SIZE:-2G}"
IO_LAYOUTS="${IO_LAYOUTS:-raidz2x6,mirror2x3}"
export BENCH_RUNTIME="${BENCH_RUNTIME:-5}"
OUT="${OUT:-before-after}"
HERE="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$OUT"
last="${*: -1}"
export CAIRN_BIN="${CAIRN_BIN:-${last#*=}}"

nbd_run() { # LABEL BINARY JSON
    local label="$1" bin="$2" json="$3" work
    work="$(mktemp -d /dev/shm/before-after.XXXXXX)"
    export CAIRN_HOME="$work/home"
    for i in 0 1 2; do truncate -s 2G "$work/d$i"; done
    "$bin" create bench raidz1 "$work/d0" "$work/d1" "$work/d2" >/dev/null
    "$bin" volume create -V 1G -b 16K -o compression=off bench/vol >/dev/null
    "$bin" serve bench --nbd-socket "$work/s.sock" >"$work/serve.log" 2>&1 &
    local pid=$!
    for _ in $(seq 100); do [[ -S "$work/s.sock" ]] && break; sleep 0.1; done
    BENCH_LABEL="$label" BENCH_JSON="$json" \
        "$HERE/bench-nbd.sh" "nbd+unix:///bench/vol?socket=$work/s.sock" || true
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -rf "$work"
}

for round in $(seq "$ROUNDS"); do
    for pair in "$@"; do
        label="${pair%%=*}" bin="${pair#*=}"
        echo "== round $round: $label ($bin)"
        if [[ "$IO_LAYOUTS" != none ]]; then
            "$bin" bench io --size "$IO_SIZE" --layouts "$IO_LAYOUTS" --no-zfs-fuse \
                --json-out "$OUT/io-$label-$round.json"
        fi
        nbd_run "$label" "$bin" "$OUT/nbd-$label-$round.json"
    done
done

# The NBD ratios (cairn / nbdkit of the same run) of every round, and their median.
python3 - "$OUT" "$ROUNDS" "$@" <<'PY'
import json, statistics, sys
out, rounds, pairs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
labels = [p.split("=", 1)[0] for p in pairs]
table = {}
for label in labels:
    for r in range(1, rounds + 1):
        try:
            doc = json.load(open(f"{out}/nbd-{label}-{r}.json"))
        except (OSError, ValueError):
            continue
        for row in doc["results"]:
            if row.get("ratio_iops") is not None:
                table.setdefault(row["workload"], {}).setdefault(label, []).append(row["ratio_iops"])
print(f"{'workload':<26}" + "".join(f"{l + ' (runs; median)':>40}" for l in labels))
for workload, by_label in table.items():
    cells = []
    for l in labels:
        v = by_label.get(l, [])
        runs = " ".join(f"{x:.2f}" for x in v)
        cells.append(f"{runs + ('; ' + format(statistics.median(v), '.2f') if v else ''):>40}")
    print(f"{workload:<26}" + "".join(cells))
PY
