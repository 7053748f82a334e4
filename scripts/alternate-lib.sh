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
