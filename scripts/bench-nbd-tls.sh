#!/usr/bin/env bash
# What TLS costs an NBD export: one `cairn serve --tls=on` (plain and TLS clients both
# allowed) of a volume on a raidz1 of three files in /dev/shm, and fio's nbd engine
# (libnbd) connecting plain (nbd://) and with TLS (nbds://, certificates made here with
# openssl), plain, TLS, TLS, plain for each workload (means of two runs each): 1 MiB
# sequential write and read, 4 KiB random read at queue depth 1 and 32, 4 KiB random
# write at 32. Prints a table with the TLS / plain ratio; JSON with BENCH_JSON.
#
# usage: scripts/bench-nbd-tls.sh
# environment:
#   CAIRN          the cairn binary (default target/release/cairn)
#   BENCH_RUNTIME  seconds per workload (default 8)
#   BENCH_JSON     where to write the JSON (default: none)
#   BENCH_PORT     TCP port on 127.0.0.1 (default 10899)
# (fio's nbd engine prints "fio: connected to NBD server" before its JSON: skipped.)
# Needs fio with its nbd engine, libnbd with TLS (Debian: fio, libnbd-bin), openssl, python3.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CAIRN="${CAIRN:-$ROOT/target/release/cairn}"
RUNTIME="${BENCH_RUNTIME:-8}"
PORT="${BENCH_PORT:-10899}"
W=/dev/shm/cairn-bench-tls-$$
export CAIRN_HOME=$W/home
server=""
cleanup() {
    [[ -s "$W/fio.err" ]] && tail -5 "$W/fio.err" >&2
    [[ -n "$server" ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    "$CAIRN" export tlsb >/dev/null 2>&1 || true
    rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/certs" "$CAIRN_HOME"

( cd "$W/certs"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca-cert.pem -days 2 \
      -subj "/CN=cairn bench CA" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr \
      -subj "/CN=127.0.0.1" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > ext.cnf
  openssl x509 -req -in server.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial \
      -out server-cert.pem -days 2 -extfile ext.cnf 2>/dev/null )

truncate -s 2G "$W/d0" "$W/d1" "$W/d2"
"$CAIRN" create tlsb raidz1 "$W/d0" "$W/d1" "$W/d2" >/dev/null
"$CAIRN" volume create -V 1G -b 16K -o compression=off tlsb/vol >/dev/null
"$CAIRN" serve tlsb --nbd "127.0.0.1:$PORT" --tls=on \
    --tls-cert "$W/certs/server-cert.pem" --tls-key "$W/certs/server-key.pem" \
    >"$W/serve.log" 2>&1 &
server=$!
for _ in $(seq 100); do
    nbdinfo --size "nbd://127.0.0.1:$PORT/tlsb/vol" >/dev/null 2>&1 && break
    sleep 0.1
done

plain="nbd://127.0.0.1:$PORT/tlsb/vol"
tls="nbds://127.0.0.1:$PORT/tlsb/vol"
# fio's libnbd may not read files named in a URI; it finds the CA in its default place,
# $HOME/.pki/libnbd/ca-cert.pem, so fio runs with HOME=$W.
mkdir -p "$W/.pki/libnbd" && cp "$W/certs/ca-cert.pem" "$W/.pki/libnbd/"
HOME="$W" nbdinfo --size "$tls" >/dev/null   # fails here, loudly, if TLS does not work

fio_run() { # uri rw bs iodepth -> "iops mbs"
    HOME="$W" fio --name=t --ioengine=nbd --uri="$1" --rw="$2" --bs="$3" --iodepth="$4" \
        --size=1G --time_based --runtime="$RUNTIME" --output-format=json 2>"$W/fio.err" |
        python3 -c 'import json,sys
t=sys.stdin.read(); j=json.loads(t[t.index("{"):])["jobs"][0]; r,w=j["read"],j["write"]
print(round(r["iops"]+w["iops"]), round((r["bw_bytes"]+w["bw_bytes"])/1e6,1))'
}

workloads=("seq-write-1m write 1M 4" "seq-read-1m read 1M 4" "rand-read-4k-qd1 randread 4k 1"
           "rand-read-4k-qd32 randread 4k 32" "rand-write-4k-qd32 randwrite 4k 32")
fio_run "$plain" write 1M 4 >/dev/null   # fill the volume once so reads read data
printf '%-20s %12s %12s %12s %12s %8s\n' workload "plain IOPS" "plain MB/s" "TLS IOPS" "TLS MB/s" "TLS/plain"
json=()
for w in "${workloads[@]}"; do
    read -r name rw bs qd <<< "$w"
    # plain, TLS, TLS, plain: each side once first and once after the other (the block
    # cache warms whichever runs second); the mean of the two runs of each.
    read -r pi1 pm1 <<< "$(fio_run "$plain" "$rw" "$bs" "$qd")"
    read -r ti1 tm1 <<< "$(fio_run "$tls" "$rw" "$bs" "$qd")"
    read -r ti2 tm2 <<< "$(fio_run "$tls" "$rw" "$bs" "$qd")"
    read -r pi2 pm2 <<< "$(fio_run "$plain" "$rw" "$bs" "$qd")"
    read -r pi pm ti tm <<< "$(python3 -c "print(round(($pi1+$pi2)/2), round(($pm1+$pm2)/2,1), round(($ti1+$ti2)/2), round(($tm1+$tm2)/2,1))")"
    if [[ "$ti" == 0 || "$pi" == 0 ]]; then
        echo "$name: a run did no I/O (fio: $(tail -1 "$W/fio.err"))" >&2
        exit 1
    fi
    ratio=$(python3 -c "print(round($ti/max($pi,1),2))")
    printf '%-20s %12s %12s %12s %12s %8s\n' "$name" "$pi" "$pm" "$ti" "$tm" "$ratio"
    json+=("{\"workload\":\"$name\",\"plain_iops\":$pi,\"plain_mbs\":$pm,\"tls_iops\":$ti,\"tls_mbs\":$tm,\"ratio\":$ratio,\"plain_runs_iops\":[$pi1,$pi2],\"tls_runs_iops\":[$ti1,$ti2]}")
done
if [[ -n "${BENCH_JSON:-}" ]]; then
    (IFS=,; echo "[${json[*]}]") | python3 -m json.tool > "$BENCH_JSON"
    echo "JSON: $BENCH_JSON"
fi
