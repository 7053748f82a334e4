#!/usr/bin/env bash
# Sequential write and read of one 4 GiB file through a cairn mount (fio, 1 MiB requests),
# for several binaries alternating: a raidz2 of six 3 GiB files in /dev/shm, a fresh pool
# each run; the write ends with an fsync, the read comes after an unmount, a new mount and
# dropping the page cache (as scripts/bench-fs.sh reads). Only the two sequential figures
# of bench-fs.sh, so that enough rounds fit to tell a change from this machine's noise.
#
# usage: scripts/bench-fs-seq.sh LABEL=BINARY [LABEL=BINARY …]
# environment: ROUNDS (default 3), JSON (default bench-fs-seq.json)
# Needs root (drop_caches), fio and python3.
set -euo pipefail
# shellcheck source=scripts/alternate-lib.sh
source "$(dirname "$0")/alternate-lib.sh"
ROUNDS="${ROUNDS:-3}"
JSON="${JSON:-bench-fs-seq.json}"
command -v fio >/dev/null || { echo "bench-fs-seq: needs fio (apt-get install fio)" >&2; exit 1; }
[[ $# -ge 1 ]] || { echo "usage: $0 LABEL=BINARY [LABEL=BINARY …]" >&2; exit 2; }

mb_per_s() { # rw: MB/s from fio's JSON on stdin
    python3 -c "import json, sys; print(round(json.load(sys.stdin)['jobs'][0]['$1']['bw_bytes'] / 1e6))"
}

one_run() { # label binary round
    local label="$1" bin="$2" round="$3" run w r
    run="$(mktemp -d /dev/shm/bench-fs-seq.XXXXXX)"
    mount_fresh_pool "$bin" "$run"
    w=$(fio --name=w --filename="$run/mnt/f" --rw=write --bs=1m --size=4G --end_fsync=1 \
        --output-format=json | mb_per_s write)
    "$bin" umount "$run/mnt"
    "$bin" mount benchfs/fs "$run/mnt" >/dev/null
    echo 3 >/proc/sys/vm/drop_caches
    r=$(fio --name=r --filename="$run/mnt/f" --rw=read --bs=1m --size=4G \
        --output-format=json | mb_per_s read)
    "$bin" umount "$run/mnt"
    rm -rf "$run"
    printf '{"label":"%s","round":%d,"seq_write_mbs":%d,"seq_read_mbs":%d}\n' \
        "$label" "$round" "$w" "$r" | tee -a "$JSON"
}

alternate_rounds "$@"
print_medians seq_write_mbs seq_read_mbs
