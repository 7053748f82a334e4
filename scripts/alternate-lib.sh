# Sourced by the A/B bench scripts (bench-bonnie.sh, bench-fs-seq.sh,
# bench-read-after-writes.sh): the rounds in which the binaries alternate, and the medians
# of what their runs wrote. The script defines `one_run LABEL BINARY ROUND`, which appends
# one JSON line to $JSON.

# Every LABEL=BINARY pair once per round, in order, ROUNDS times, after emptying $JSON.
alternate_rounds() {
    : >"$JSON"
    for round in $(seq "$ROUNDS"); do
        for pair in "$@"; do
            one_run "${pair%%=*}" "${pair#*=}" "$round"
        done
    done
}

# Per label, each KEY's values over the rounds and their median (nulls skipped).
print_medians() {
    python3 - "$JSON" "$@" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for label in dict.fromkeys(r["label"] for r in rows):
    rs = [r for r in rows if r["label"] == label]
    for key in sys.argv[2:]:
        v = [r[key] for r in rs if r.get(key) is not None]
        shown = f"{' '.join(map(str, v))} (median {statistics.median(v):g})" if v else "-"
        print(f"{label:<10} {key}: {shown}")
PY
    echo "JSON lines: $JSON"
}

# A fresh raidz2 of six 3 GiB files under RUN (a new folder) with benchfs/fs mounted at
# RUN/mnt, made by BINARY; CAIRN_HOME is RUN/home.
mount_fresh_pool() { # binary run
    local bin="$1" run="$2"
    mkdir -p "$run/mnt"
    export CAIRN_HOME="$run/home"
    truncate -s 3G "$run"/d{0,1,2,3,4,5}
    "$bin" create benchfs raidz2 "$run"/d{0,1,2,3,4,5} >/dev/null
    "$bin" dataset create benchfs/fs
    "$bin" mount benchfs/fs "$run/mnt" >/dev/null
}
