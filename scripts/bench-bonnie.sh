#!/usr/bin/env bash
# bonnie++ file creation alone (-n 16: 16 Ki files, no size test, as scripts/bench-fs.sh and
# the 24-disk study run it) through a cairn mount, for several binaries alternating: a
# raidz2 of six 3 GiB files in /dev/shm, a fresh pool each run. A run takes seconds, so
# enough rounds fit to tell a change from this machine's noise.
#
# usage: scripts/bench-bonnie.sh LABEL=BINARY [LABEL=BINARY …]
# environment: ROUNDS (default 8), JSON (default bench-bonnie.json)
# Needs bonnie++ (Debian: bonnie++) and python3. Files per second; bonnie++ prints "+++++"
# for a phase done in under half a second (recorded as null).
set -euo pipefail
# shellcheck source=scripts/alternate-lib.sh
source "$(dirname "$0")/alternate-lib.sh"
ROUNDS="${ROUNDS:-8}"
JSON="${JSON:-bench-bonnie.json}"
command -v bonnie++ >/dev/null || { echo "bench-bonnie: needs bonnie++ (apt-get install bonnie++)" >&2; exit 1; }
[[ $# -ge 1 ]] || { echo "usage: $0 LABEL=BINARY [LABEL=BINARY …]" >&2; exit 2; }

one_run() { # label binary round
    local label="$1" bin="$2" round="$3" run csv
    run="$(mktemp -d /dev/shm/bench-bonnie.XXXXXX)"
    mount_fresh_pool "$bin" "$run"
    mkdir -p "$run/mnt/bonnie"
    csv=$(bonnie++ -q -u root -d "$run/mnt/bonnie" -s 0 -n 16 2>/dev/null | tail -1)
    "$bin" umount "$run/mnt"
    rm -rf "$run"
    # bonnie++ 1.98 CSV: fields 26..37 (0-based) are seq create, stat, delete, random
    # create, stat, delete, each followed by its %CPU.
    python3 - "$label" "$round" "$csv" <<'PY' | tee -a "$JSON"
import json, sys
label, rnd, f = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
names = ["seq_create", "seq_stat", "seq_delete", "rand_create", "rand_stat", "rand_delete"]
row = {"label": label, "round": rnd}
for i, n in enumerate(names):
    v = f[26 + 2 * i] if len(f) > 26 + 2 * i else ""
    row[n] = int(v) if v.isdigit() else None
print(json.dumps(row))
PY
}

alternate_rounds "$@"
print_medians seq_create seq_delete rand_create rand_delete
