#!/usr/bin/env bash
# fsync'd 4 KiB random writes through a cairn FUSE mount: fio --fsync=1 and --fdatasync=1
# on a file in a dataset of a raidz1 of three files in /dev/shm, for each binary given
# (e.g. a build before and after a change), side by side, twice each, alternating.
#
# usage: scripts/bench-fsync-fuse.sh [OUT.json] CAIRN_BINARY...
#        (default binary: target/release/cairn; OUT.json: none)
# environment: BENCH_RUNTIME  seconds per fio run (default 8)
# Needs fio and /dev/fuse.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT=""
if [[ "${1:-}" == *.json ]]; then OUT=$1; shift; fi
BINS=("$@")
[[ ${#BINS[@]} -gt 0 ]] || BINS=("$ROOT/target/release/cairn")
RT="${BENCH_RUNTIME:-8}"
W=/dev/shm/cairn-fsync-fuse-$$
trap 'for b in "${BINS[@]}"; do CAIRN_HOME=$W/home "$b" umount "$W/m" 2>/dev/null || true; done; rm -rf "$W"' EXIT

run_one() { # binary -> "fsync_iops fdatasync_iops"
    local cairn=$1
    rm -rf "$W"; mkdir -p "$W/m" "$W/home"
    export CAIRN_HOME=$W/home
    truncate -s 2G "$W/d0" "$W/d1" "$W/d2"
    "$cairn" create fsy raidz1 "$W/d0" "$W/d1" "$W/d2" >/dev/null
    "$cairn" dataset create fsy/fs >/dev/null
    "$cairn" mount fsy/fs "$W/m" >/dev/null
    local out=()
    for sync in fsync fdatasync; do
        out+=("$(fio --name=f --directory="$W/m" --filename=b.dat --rw=randwrite --bs=4k \
            --size=256M --time_based --runtime="$RT" --"$sync"=1 --output-format=json 2>/dev/null |
            python3 -c 'import json,sys; print(round(json.load(sys.stdin)["jobs"][0]["write"]["iops"]))')")
    done
    "$cairn" umount "$W/m"
    "$cairn" export fsy >/dev/null 2>&1 || true
    echo "${out[*]}"
}

results=()
printf '%-50s %12s %14s\n' binary "fsync IOPS" "fdatasync IOPS"
for round in 1 2; do
    for b in "${BINS[@]}"; do
        read -r fs fds <<< "$(run_one "$b")"
        printf '%-50s %12s %14s\n' "$b" "$fs" "$fds"
        results+=("{\"binary\": \"$b\", \"round\": $round, \"fsync_iops\": $fs, \"fdatasync_iops\": $fds}")
    done
done
if [[ -n "$OUT" ]]; then
    (IFS=,; echo "[${results[*]}]") | python3 -m json.tool > "$OUT"
    echo "JSON: $OUT"
fi
