#!/usr/bin/env bash
# Benchmarks an NBD export against a reference in the same run: fio's nbd engine, 4 KiB
# random read/write at iodepth 1 and 32, 1 MiB sequential read/write, 4 KiB random writes
# each followed by a FLUSH (fio --fsync=1) and each with FUA, and a database-like mix (8 KiB,
# 67 % reads, iodepth 32), against
#   (a) the export under test (a cairn volume), given by URI, and
#   (b) `nbdkit file` serving a raw file on tmpfs (/dev/shm): the reference.
# Prints IOPS and MB/s per workload and the ratio (a)/(b); writes everything as JSON.
#
# usage: scripts/bench-nbd.sh [URI]
#   URI              nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH
#                    (or set CAIRN_NBD_URI)
# environment:
#   BENCH_SIZE       bytes of the export to use (default 1 GiB; capped at the export's size)
#   BENCH_RUNTIME    seconds per random workload (default 10)
#   BENCH_JSON       where to write the JSON (default ./bench-nbd.json)
#   BENCH_LABEL      what the export under test is (default "cairn")
#   CAIRN_BIN        the cairn binary whose `bench sync-writes` runs the FUA workload
#                    (default target/release/cairn)
#
# FUA: fio's nbd engine never sets NBD_CMD_FLAG_FUA (it passes no flags to nbd_aio_pwrite;
# --sync=1 means O_SYNC on a file, which a diskless engine ignores, and --fdatasync=1 is
# refused: it has no DATASYNC command). So the FUA workload is run by `cairn bench
# sync-writes --mode fua` (crates/bench/src/sync_writes.rs: one connection, queue depth 1,
# the same seeded offsets for both targets). `--fsync=1` is fio's: a FLUSH after every
# write (fio's write latency excludes the FLUSH; IOPS count writes).
#
# Needs fio (Debian: fio), nbdkit (nbdkit), nbdinfo (libnbd-bin), python3, a release cairn.
set -euo pipefail

URI="${1:-${CAIRN_NBD_URI:-}}"
if [[ -z "$URI" ]]; then
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
SIZE="${BENCH_SIZE:-$((1 << 30))}"
RUNTIME="${BENCH_RUNTIME:-10}"
JSON_OUT="${BENCH_JSON:-bench-nbd.json}"
LABEL="${BENCH_LABEL:-cairn}"

need() {
    command -v "$1" >/dev/null || { echo "bench-nbd: '$1' not found; install the Debian package '$2'" >&2; exit 1; }
}
need fio fio
need nbdkit nbdkit
need nbdinfo libnbd-bin
need python3 python3

EXPORT_SIZE="$(nbdinfo --size "$URI")" || { echo "bench-nbd: cannot reach $URI" >&2; exit 1; }
if (( EXPORT_SIZE < SIZE )); then SIZE="$EXPORT_SIZE"; fi
SIZE=$(( SIZE / (1 << 20) * (1 << 20) ))

WORK="$(mktemp -d /dev/shm/bench-nbd.XXXXXX 2>/dev/null || mktemp -d)"
NBDKIT_PID=""
cleanup() {
    [[ -n "$NBDKIT_PID" ]] && kill "$NBDKIT_PID" 2>/dev/null && wait "$NBDKIT_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

truncate -s "$SIZE" "$WORK/ref.img"
nbdkit --exit-with-parent --foreground --unix "$WORK/ref.sock" file "$WORK/ref.img" &
NBDKIT_PID=$!
for _ in $(seq 100); do [[ -S "$WORK/ref.sock" ]] && break; sleep 0.05; done
REF_URI="nbd+unix:///?socket=$WORK/ref.sock"

# name  fio-arguments (the sequential write goes first so later reads find data)
WORKLOADS=(
    "seq-write-1m|--rw=write --bs=1m --iodepth=8"
    "rand-write-4k-qd1|--rw=randwrite --bs=4k --iodepth=1 --time_based --runtime=$RUNTIME"
    "rand-write-4k-qd32|--rw=randwrite --bs=4k --iodepth=32 --time_based --runtime=$RUNTIME"
    "rand-read-4k-qd1|--rw=randread --bs=4k --iodepth=1 --time_based --runtime=$RUNTIME"
    "rand-read-4k-qd32|--rw=randread --bs=4k --iodepth=32 --time_based --runtime=$RUNTIME"
    "seq-read-1m|--rw=read --bs=1m --iodepth=8"
    "rand-write-4k-qd1-fsync|--rw=randwrite --bs=4k --iodepth=1 --fsync=1 --time_based --runtime=$RUNTIME"
    "rand-write-4k-qd1-fua|FUA"
    "mix-8k-qd32|--rw=randrw --rwmixread=67 --bs=8k --iodepth=32 --time_based --runtime=$RUNTIME"
)

CAIRN="${CAIRN_BIN:-$(dirname "$0")/../target/release/cairn}"
if [[ ! -x "$CAIRN" ]]; then
    echo "bench-nbd: no cairn binary at $CAIRN for the FUA workload: cargo build --release -p cairn (or set CAIRN_BIN)" >&2
    exit 1
fi

run_fio() { # target-name uri workload-name args...
    local target="$1" uri="$2" name="$3"; shift 3
    if [[ "$*" == FUA ]]; then
        "$CAIRN" bench sync-writes --json --mode fua --seconds "$RUNTIME" --span "$SIZE" \
            "$target=$uri" > "$WORK/$target-$name.json"
        return
    fi
    # shellcheck disable=SC2068
    fio --name="$name" --ioengine=nbd --uri="$uri" --size="$SIZE" --numjobs=1 \
        --output-format=json $@ > "$WORK/$target-$name.json"
}

for w in "${WORKLOADS[@]}"; do
    [[ -z "$w" ]] && continue
    name="${w%%|*}"; args="${w#*|}"
    for target in test ref; do
        uri="$URI"; [[ $target == ref ]] && uri="$REF_URI"
        echo "bench-nbd: $name on $target" >&2
        # shellcheck disable=SC2086
        run_fio "$target" "$uri" "$name" $args
    done
done

python3 - "$WORK" "$JSON_OUT" "$URI" "$LABEL" "$SIZE" "$RUNTIME" "${WORKLOADS[@]}" <<'EOF'
import json, sys, datetime, platform, os
work, out, uri, label, size, runtime = sys.argv[1:7]
names = [w.split("|")[0] for w in sys.argv[7:] if w]

def result(target, name):
    raw = open(os.path.join(work, f"{target}-{name}.json")).read()
    if name.endswith("-fua"):
        # `cairn bench sync-writes --json`: one result, 4 KiB writes with FUA at qd 1.
        r = json.loads(raw)[0]
        return {"iops": r["iops"], "mb_per_s": r["iops"] * 4096 / 1e6,
                "lat_mean_us": r["mean_us"], "error": 0}
    job = json.loads(raw[raw.index("{"):])["jobs"][0]
    if name.startswith("mix"):
        # Reads and writes together: total IOPS and bytes, latency weighted by count.
        r, w = job["read"], job["write"]
        iops = r["iops"] + w["iops"]
        lat = (r["lat_ns"]["mean"] * r["iops"] + w["lat_ns"]["mean"] * w["iops"]) / iops if iops else 0
        return {"iops": iops, "mb_per_s": (r["bw_bytes"] + w["bw_bytes"]) / 1e6,
                "lat_mean_us": lat / 1e3, "read_iops": r["iops"], "write_iops": w["iops"],
                "error": job["error"]}
    side = job["write"] if "write" in name else job["read"]
    return {"iops": side["iops"], "mb_per_s": side["bw_bytes"] / 1e6,
            "lat_mean_us": side["lat_ns"]["mean"] / 1e3, "error": job["error"]}

rows = []
for n in names:
    t, r = result("test", n), result("ref", n)
    rows.append({"workload": n, label: t, "nbdkit-file-tmpfs": r,
                 "ratio_iops": t["iops"] / r["iops"] if r["iops"] else None})
report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
          "host": platform.node(), "uri": uri, "label": label, "size_bytes": int(size),
          "runtime_s": int(runtime), "reference": "nbdkit file on tmpfs", "results": rows}
json.dump(report, open(out, "w"), indent=2)

w = max(len(n) for n in names)
print(f"{'workload':<{w}}  {label + ' IOPS':>12} {label + ' MB/s':>12}  {'nbdkit IOPS':>12} {'nbdkit MB/s':>12}  {'ratio':>6}")
for row in rows:
    t, r = row[label], row["nbdkit-file-tmpfs"]
    print(f"{row['workload']:<{w}}  {t['iops']:>12.0f} {t['mb_per_s']:>12.1f}  {r['iops']:>12.0f} {r['mb_per_s']:>12.1f}  {row['ratio_iops']:>6.2f}")
print(f"(ratio = {label} / nbdkit; JSON: {out})")
EOF
