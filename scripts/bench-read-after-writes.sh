#!/usr/bin/env bash
# Cold 4 KiB random reads right after random writes, as bench-nbd.sh runs them, with the
# server's CPU time and minor page faults per read: a raidz1 of three 4 GiB files in
# /dev/shm, a 1 GiB volume (16 KiB blocks, compression off) served over a Unix socket;
# fio fills it (1 MiB writes), writes 4 KiB at random at queue depth 1 and 32 (10 s each),
# then reads 4 KiB at random at queue depth 1 (10 s, measured) and 32. A fresh pool per
# run; the binaries alternate, ROUNDS times. Prints one line per run and writes JSON lines.
#
# usage: scripts/bench-read-after-writes.sh LABEL=BINARY [LABEL=BINARY …]
# environment: ROUNDS (default 3), JSON (default bench-read-after-writes.json)
# Needs fio (Debian: fio) and python3.
set -euo pipefail
# shellcheck source=scripts/alternate-lib.sh
source "$(dirname "$0")/alternate-lib.sh"
ROUNDS="${ROUNDS:-3}"
JSON="${JSON:-bench-read-after-writes.json}"
command -v fio >/dev/null || { echo "bench-read-after-writes: needs fio (apt-get install fio)" >&2; exit 1; }
[[ $# -ge 1 ]] || { echo "usage: $0 LABEL=BINARY [LABEL=BINARY …]" >&2; exit 2; }

fio_iops() { # json-file: IOPS of the phase that did I/O
    python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))['jobs'][0]
r = j['read'] if j['read']['iops'] > 0 else j['write']
print(round(r['iops']), r['total_ios'])" "$1"
}

server_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
server_faults() { awk '{print $10}' "/proc/$1/stat"; }

one_run() { # label binary round
    local label="$1" bin="$2" round="$3" work pid uri
    work="$(mktemp -d /dev/shm/read-after-writes.XXXXXX)"
    export CAIRN_HOME="$work/home"
    mkdir -p "$CAIRN_HOME"
    truncate -s 4G "$work/d0" "$work/d1" "$work/d2"
    "$bin" create bench raidz1 "$work/d0" "$work/d1" "$work/d2" >/dev/null
    "$bin" volume create -V 1G -b 16K -o compression=off bench/vol >/dev/null
    "$bin" serve bench --nbd-socket "$work/s.sock" >"$work/serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do [[ -S "$work/s.sock" ]] && break; sleep 0.05; done
    uri="nbd+unix:///bench/vol?socket=$work/s.sock"
    phase() { # name fio-args…: the JSON of the phase in $work/NAME.json
        fio --name="$1" --ioengine=nbd --uri="$uri" --size=1G --numjobs=1 \
            --output-format=json "${@:2}" | sed -n '/^{/,$p' >"$work/$1.json"
    }
    phase fill --rw=write --bs=1m --iodepth=8
    phase randwrite1 --rw=randwrite --bs=4k --iodepth=1 --time_based --runtime=10
    phase randwrite32 --rw=randwrite --bs=4k --iodepth=32 --time_based --runtime=10
    local t0 f0 t1 f1 tick
    t0=$(server_ticks "$pid"); f0=$(server_faults "$pid")
    phase randread1 --rw=randread --bs=4k --iodepth=1 --time_based --runtime=10
    t1=$(server_ticks "$pid"); f1=$(server_faults "$pid")
    phase randread32 --rw=randread --bs=4k --iodepth=32 --time_based --runtime=10
    kill "$pid"; wait "$pid" 2>/dev/null || true
    tick=$(getconf CLK_TCK)
    python3 - "$work" "$label" "$round" "$((t1 - t0))" "$((f1 - f0))" "$tick" >>"$JSON" <<'PY'
import json, sys
work, label, rnd, ticks, faults, tick = sys.argv[1:]
def phase(name):
    j = json.load(open(f"{work}/{name}.json"))["jobs"][0]
    return j["read"] if j["read"]["iops"] > 0 else j["write"]
r1 = phase("randread1")
row = {"label": label, "round": int(rnd),
       "randwrite_qd1_iops": round(phase("randwrite1")["iops"]),
       "randwrite_qd32_iops": round(phase("randwrite32")["iops"]),
       "randread_qd1_iops": round(r1["iops"]),
       "randread_qd1_lat_mean_us": round(r1["lat_ns"]["mean"] / 1000, 1),
       "randread_qd1_server_cpu_us_per_read": round(int(ticks) * 1e6 / int(tick) / r1["total_ios"], 1),
       "randread_qd1_minor_faults_per_read": round(int(faults) / r1["total_ios"], 2),
       "randread_qd32_iops": round(phase("randread32")["iops"])}
print(json.dumps(row))
PY
    tail -1 "$JSON"
    rm -rf "$work"
}

alternate_rounds "$@"
print_medians randread_qd1_iops randread_qd1_minor_faults_per_read
