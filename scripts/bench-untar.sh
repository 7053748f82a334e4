#!/usr/bin/env bash
# Untar and `rm -r` of FILES small files (1–4 KiB, 500 to a directory, as
# scripts/bench-fs.sh makes them) through a cairn mount: a raidz2 of six 3 GiB files in
# /dev/shm, a fresh pool each run; binaries alternate, ROUNDS times. Prints the seconds
# and writes JSON.
#
# usage: scripts/bench-untar.sh LABEL=BINARY [LABEL=BINARY …]
# environment: ROUNDS (default 3), FILES (default 50000), JSON (default bench-untar.json)
set -euo pipefail
(( $# >= 1 )) || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
ROUNDS="${ROUNDS:-3}" FILES="${FILES:-50000}" JSON="${JSON:-bench-untar.json}"
WORK="$(mktemp -d /dev/shm/bench-untar.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
"$(dirname "$0")/make-small-tree.py" "$WORK/tree" "$FILES"
tar -C "$WORK" -cf "$WORK/tree.tar" tree && rm -rf "$WORK/tree"
now() { date +%s.%N; }
for round in $(seq "$ROUNDS"); do
    for pair in "$@"; do
        label="${pair%%=*}" bin="${pair#*=}" run="$WORK/run"
        mkdir -p "$run/mnt"
        export CAIRN_HOME="$run/home"
        for i in 0 1 2 3 4 5; do truncate -s 3G "$run/d$i"; done
        "$bin" create benchfs raidz2 "$run"/d{0,1,2,3,4,5} >/dev/null
        "$bin" dataset create benchfs/fs
        "$bin" mount benchfs/fs "$run/mnt" >/dev/null
        t0=$(now); tar -C "$run/mnt" -xf "$WORK/tree.tar"; t1=$(now)
        rm -r "$run/mnt/tree"; t2=$(now)
        "$bin" umount "$run/mnt"
        rm -rf "$run"
        printf '{"label":"%s","round":%d,"untar_s":%.2f,"rm_s":%.2f}\n' "$label" "$round" \
            "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" | tee -a "$WORK/results"
    done
done
python3 - "$WORK/results" "$JSON" "$FILES" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
json.dump({"files": int(sys.argv[3]), "runs": rows}, open(sys.argv[2], "w"), indent=2)
for label in dict.fromkeys(r["label"] for r in rows):
    rs = [r for r in rows if r["label"] == label]
    print(f"{label:<10} untar s: {' '.join(str(r['untar_s']) for r in rs)} (median "
          f"{statistics.median(r['untar_s'] for r in rs)}); rm -r s: "
          f"{' '.join(str(r['rm_s']) for r in rs)} (median {statistics.median(r['rm_s'] for r in rs)})")
print(f"JSON: {sys.argv[2]}")
PY
