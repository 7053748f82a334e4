#!/usr/bin/env bash
# Random 4 KiB O_DIRECT reads (libaio) through a cairn mount at queue depths 1 and 32, from
# a file on a mirror of two `fault:` leaves over files in /dev/shm that add DELAY_MS to every
# I/O and serve I/Os side by side (as scripts/bench-nbd-slow-leaves.sh does for volumes).
# The block cache is off (CAIRN_CACHE_MAX=0), so every read reaches a leaf; how many
# requests the mount lets through to the store sets the figure at queue depth 32.
#
# usage: scripts/bench-fuse-slow-leaves.sh LABEL=BINARY[,fuse_threads=N] [...]
#   (N is passed as CAIRN_FUSE_THREADS; binaries alternate, ROUNDS times)
# environment: DELAY_MS (default 2), ROUNDS (default 2), RUNTIME (s per run, default 4),
#   JSON (default bench-fuse-slow-leaves.json). Needs root (FUSE), fio, python3.
set -euo pipefail
. "$(dirname "$0")/slow-leaves-lib.sh"
(( $# >= 1 )) || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
DELAY_MS="${DELAY_MS:-2}" ROUNDS="${ROUNDS:-2}" RUNTIME="${RUNTIME:-4}"
JSON="${JSON:-bench-fuse-slow-leaves.json}"
command -v fio >/dev/null || { echo "bench-fuse-slow-leaves: fio not found (Debian: fio)" >&2; exit 1; }
RESULTS="$(mktemp)"
work=""
bin=""
cleanup() {
    [[ -n "$work" ]] && { "$bin" umount -f "$work/mnt" >/dev/null 2>&1 || true; rm -rf "$work"; }
    rm -f "$RESULTS"
}
trap cleanup EXIT

one_run() { # LABEL BINARY THREADS ROUND
    local label="$1" threads="$3" round="$4" qd
    bin="$2"
    work="$(mktemp -d /dev/shm/fuse-slow.XXXXXX)"
    export CAIRN_HOME="$work/home" CAIRN_CACHE_MAX=0
    if [[ -n "$threads" ]]; then export CAIRN_FUSE_THREADS="$threads"; else unset CAIRN_FUSE_THREADS; fi
    mkdir -p "$work/mnt"
    slow_mirror "$bin" "$work"
    "$bin" dataset create tank/fs >/dev/null
    "$bin" mount tank/fs "$work/mnt" >/dev/null
    fio --name=fill --directory="$work/mnt" --filename=f --rw=write --bs=1M --size=128M \
        --end_fsync=1 >/dev/null
    "$bin" umount "$work/mnt"
    "$bin" mount tank/fs "$work/mnt" >/dev/null
    for qd in 1 32; do
        fio --name=rr --directory="$work/mnt" --filename=f --rw=randread --bs=4k --size=128M \
            --ioengine=libaio --direct=1 --iodepth="$qd" --time_based --runtime="$RUNTIME" \
            --output-format=json --output="$work/rr.json" >/dev/null
        record_read "$work/rr.json" "$label" "$round" "$qd"
    done
    "$bin" umount "$work/mnt"
    rm -rf "$work"
    work=""
}

for round in $(seq "$ROUNDS"); do
    for arg in "$@"; do
        label="${arg%%=*}" rest="${arg#*=}"
        binary="${rest%%,*}" threads=""
        [[ "$rest" == *,fuse_threads=* ]] && threads="${rest##*,fuse_threads=}"
        one_run "$label" "$binary" "$threads" "$round"
    done
done
summarize "$JSON" 1 32
