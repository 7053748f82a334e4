# Shared by scripts/bench-nbd-slow-leaves.sh and scripts/bench-fuse-slow-leaves.sh (sourced):
# the pool on leaves with latency, one fio result as a JSON row, and the summary table.
# The sourcing script sets DELAY_MS and RESULTS.

# slow_mirror BINARY DIR: pool `tank`, a mirror of two `fault:` leaves over 1 GiB files in
# DIR, each adding DELAY_MS to every I/O and serving I/Os side by side.
slow_mirror() {
    truncate -s 1G "$2/d0" "$2/d1"
    "$1" create tank mirror "fault:$2/d0?delay_ms=$DELAY_MS" \
        "fault:$2/d1?delay_ms=$DELAY_MS" >/dev/null
}

# record_read FIO_JSON LABEL ROUND QD: appends the run's read IOPS and mean latency to
# RESULTS and prints the row (fio's nbd engine may print text before its JSON).
record_read() {
    python3 - "$@" >>"$RESULTS" <<'PY'
import json, sys
path, label, rnd, qd = sys.argv[1:]
text = open(path).read()
r = json.loads(text[text.index("{"):])["jobs"][0]["read"]
print(json.dumps({"label": label, "round": int(rnd), "iodepth": int(qd),
                  "iops": round(r["iops"]), "mean_us": round(r["clat_ns"]["mean"] / 1e3)}))
PY
    tail -1 "$RESULTS"
}

# summarize JSON QD...: writes every row as JSON and prints IOPS per binary and depth.
summarize() {
    python3 - "$RESULTS" "$DELAY_MS" "$@" <<'PY'
import json, sys
results, delay, out, *qds = sys.argv[1:]
rows = [json.loads(l) for l in open(results)]
json.dump({"delay_ms": float(delay), "runs": rows}, open(out, "w"), indent=2)
print(f"{'binary':<16}{'qd':>4}  IOPS, each round")
for label in dict.fromkeys(r["label"] for r in rows):
    for qd in map(int, qds):
        rs = [r for r in rows if r["label"] == label and r["iodepth"] == qd]
        print(f"{label:<16}{qd:>4}  " + " · ".join(str(r["iops"]) for r in rs))
print(f"JSON: {out}")
PY
}
