# Shared by scripts/bench-nbd-slow-leaves.sh, bench-fuse-slow-leaves.sh and
# bench-sync-slow-leaves.sh (sourced): the pool on leaves with latency, a volume served
# from it, one fio result as a JSON row, and the summary table.
# The sourcing script sets DELAY_MS and RESULTS.

# slow_mirror BINARY DIR: pool `tank`, a mirror of two `fault:` leaves over 1 GiB files in
# DIR, each adding DELAY_MS to every I/O and serving I/Os side by side.
slow_mirror() {
    truncate -s 1G "$2/d0" "$2/d1"
    "$1" create tank mirror "fault:$2/d0?delay_ms=$DELAY_MS" \
        "fault:$2/d1?delay_ms=$DELAY_MS" >/dev/null
}

# The server and work directory of `serve_slow_volume` (none yet).
pid=""
work=""
uri=""

# serve_slow_volume BINARY DIR [SERVE-OPTION...]: a 256 MiB volume tank/vol (16 KiB
# blocks, no compression) on `slow_mirror`, served over DIR/s.sock by `cairn serve` and
# filled with 1 MiB writes; sets `pid` (the server) and `uri`.
serve_slow_volume() {
    local bin="$1" dir="$2"
    shift 2
    slow_mirror "$bin" "$dir"
    "$bin" volume create -V 256M -b 16K -o compression=off tank/vol >/dev/null
    "$bin" serve "$@" tank --nbd-socket "$dir/s.sock" >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 100); do [[ -S "$dir/s.sock" ]] && break; sleep 0.1; done
    uri="nbd+unix:///tank/vol?socket=$dir/s.sock"
    fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --size=256M \
        --iodepth=8 >/dev/null
}

# stop_slow_volume: stops the server `serve_slow_volume` started and removes `work`
# (each if there is one; also the scripts' exit trap).
stop_slow_volume() {
    if [[ -n "$pid" ]]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    pid=""
    [[ -n "$work" ]] && rm -rf "$work"
    work=""
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
