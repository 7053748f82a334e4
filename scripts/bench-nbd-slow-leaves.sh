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
. "$(dirname "$0")/slow-leaves-lib.sh"
(( $# >= 1 )) || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
DELAY_MS="${DELAY_MS:-2}" ROUNDS="${ROUNDS:-2}" RUNTIME="${RUNTIME:-5}"
JSON="${JSON:-bench-nbd-slow-leaves.json}"
command -v fio >/dev/null || { echo "bench-nbd-slow-leaves: fio not found (Debian: fio)" >&2; exit 1; }
RESULTS="$(mktemp)"
trap 'stop_slow_volume; rm -f "$RESULTS"' EXIT

one_run() { # LABEL BINARY ROUND
    local label="$1" bin="$2" round="$3" qd
    work="$(mktemp -d /dev/shm/nbd-slow.XXXXXX)"
    export CAIRN_HOME="$work/home"
    serve_slow_volume "$bin" "$work" --tunable cache_max=0
    for qd in 1 4 32; do
        fio --name=rr --ioengine=nbd --uri="$uri" --rw=randread --bs=4k --size=256M \
            --iodepth="$qd" --time_based --runtime="$RUNTIME" --output-format=json \
            --output="$work/rr.json" >/dev/null
        record_read "$work/rr.json" "$label" "$round" "$qd"
    done
    stop_slow_volume
}

for round in $(seq "$ROUNDS"); do
    for pair in "$@"; do one_run "${pair%%=*}" "${pair#*=}" "$round"; done
done
summarize "$JSON" 1 4 32
