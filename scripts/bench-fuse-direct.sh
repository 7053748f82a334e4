#!/usr/bin/env bash
# O_DIRECT random 4 KiB reads and writes (libaio, queue depth 32, RUNTIME s each) through a
# cairn mount of a raidz1 of three files in /dev/shm, after a 512 MiB fill. Binaries
# alternate, ROUNDS times; prints IOPS and writes JSON.
#
# usage: scripts/bench-fuse-direct.sh LABEL=BINARY [LABEL=BINARY ...]
# environment: ROUNDS (default 2), RUNTIME (default 5), JSON (default bench-fuse-direct.json).
# Needs root (FUSE), fio, python3.
set -euo pipefail
(( $# >= 1 )) || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
ROUNDS="${ROUNDS:-2}" RUNTIME="${RUNTIME:-5}" JSON="${JSON:-bench-fuse-direct.json}"
RESULTS="$(mktemp)"
work="" bin=""
cleanup() {
    [[ -n "$work" ]] && { "$bin" umount -f "$work/mnt" >/dev/null 2>&1 || true; rm -rf "$work"; }
    rm -f "$RESULTS"
}
trap cleanup EXIT
for round in $(seq "$ROUNDS"); do
    for pair in "$@"; do
        label="${pair%%=*}" bin="${pair#*=}"
        work="$(mktemp -d /dev/shm/fuse-direct.XXXXXX)"
        export CAIRN_HOME="$work/home"
        mkdir -p "$work/mnt"
        truncate -s 2G "$work/d0" "$work/d1" "$work/d2"
        "$bin" create tank raidz1 "$work/d0" "$work/d1" "$work/d2" >/dev/null
        "$bin" dataset create tank/fs >/dev/null
        "$bin" mount tank/fs "$work/mnt" >/dev/null
        fio --name=fill --directory="$work/mnt" --filename=f --rw=write --bs=1M --size=512M \
            --end_fsync=1 >/dev/null
        for rw in randread randwrite; do
            fio --name=x --directory="$work/mnt" --filename=f --rw="$rw" --bs=4k --size=512M \
                --ioengine=libaio --direct=1 --iodepth=32 --time_based --runtime="$RUNTIME" \
                --output-format=json --output="$work/x.json" >/dev/null
            python3 - "$work/x.json" "$label" "$round" "$rw" >>"$RESULTS" <<'PY'
import json, sys
path, label, rnd, rw = sys.argv[1:]
j = json.load(open(path))["jobs"][0]
print(json.dumps({"label": label, "round": int(rnd), "workload": rw + " 4k qd32 O_DIRECT",
                  "iops": round(j["read"]["iops"] + j["write"]["iops"])}))
PY
            tail -1 "$RESULTS"
        done
        "$bin" umount "$work/mnt"
        rm -rf "$work"
        work=""
    done
done
python3 - "$RESULTS" "$JSON" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
json.dump({"runs": rows}, open(sys.argv[2], "w"), indent=2)
for label in dict.fromkeys(r["label"] for r in rows):
    for w in dict.fromkeys(r["workload"] for r in rows):
        rs = [r for r in rows if r["label"] == label and r["workload"] == w]
        print(f"{label:<10} {w:<28} " + " · ".join(str(r["iops"]) for r in rs))
print(f"JSON: {sys.argv[2]}")
PY
