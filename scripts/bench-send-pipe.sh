#!/usr/bin/env bash
# `cairn send` through real pipes, as users run it: two raidz1 pools of 3 × 3 GiB files on
# tmpfs, 2 GiB of random data in one file, then send | receive (two processes, two pools)
# and send | cat / dd into /dev/null. Times include each process's start and pool import.
# Usage: scripts/bench-send-pipe.sh [path/to/cairn]   (release build recommended)
set -euo pipefail
B=${1:-target/release/cairn}
B=$(realpath "$B")
D=/dev/shm/cairn-pipe
rm -rf "$D"; mkdir -p "$D"; export CAIRN_HOME=$D/home
trap 'rm -rf "$D"' EXIT
for i in 0 1 2 3 4 5; do truncate -s 3G "$D/l$i"; done
"$B" create src raidz1 "$D/l0" "$D/l1" "$D/l2" >/dev/null
"$B" create dst raidz1 "$D/l3" "$D/l4" "$D/l5" >/dev/null
"$B" dataset create src/fs
head -c 2147483648 /dev/urandom > "$D/big"
"$B" put "$D/big" src/fs/big
rm "$D/big"
"$B" snapshot src/fs@a
t() { local s; s=$(date +%s.%N); sh -c "$1"; echo "$(echo "$(date +%s.%N) - $s" | bc) s  $2"; }
t "$B send src/fs@a | $B receive dst/fs0" "send | receive (2 GiB)"
t "$B send src/fs@a | cat > /dev/null" "send | cat > /dev/null"
t "$B send src/fs@a | dd bs=1M of=/dev/null status=none" "send | dd bs=1M > /dev/null"
t "$B send src/fs@a | $B receive dst/fs1" "send | receive again"
"$B" list -t snapshot dst
