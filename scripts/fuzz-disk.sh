#!/usr/bin/env bash
# Fuzzes every on-disk decoder (fuzz/fuzz_targets) for SECONDS each, JOBS targets at a
# time, and prints one line per target: runs, corpus, exec/s, and whether it crashed.
#   scripts/fuzz-disk.sh [SECONDS] [JOBS]      (default 600 s, 2 at a time)
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${1:-600}"
jobs="${2:-2}"
targets=(label blockpointer dnode rootblock spacemap datasettable directory history intentlog
         objectlists receive)
cargo +nightly fuzz build >/dev/null 2>&1
mkdir -p logs

# Seeds for `receive`: real streams (full, incremental, -R with a child, a volume) made by
# the cairn binary (CAIRN, default target/release/cairn), once.
seed_streams() {
  local cairn="${CAIRN:-../target/release/cairn}" out="corpus/receive" tmp
  [ -x "$cairn" ] || { echo "no $cairn: receive starts from an empty corpus"; return 0; }
  tmp=$(mktemp -d)
  (
    export CAIRN_HOME="$tmp/home"
    truncate -s 256M "$tmp/d0"
    "$cairn" create seed "$tmp/d0" >/dev/null
    "$cairn" dataset create seed/fs && "$cairn" dataset create seed/fs/child
    head -c 200000 /dev/urandom > "$tmp/big"; echo hello > "$tmp/small"
    "$cairn" put "$tmp/big" seed/fs/ && "$cairn" put "$tmp/small" seed/fs/child/
    "$cairn" mkdir seed/fs/dir && "$cairn" put "$tmp/small" seed/fs/dir/
    "$cairn" snapshot -r seed/fs@a
    "$cairn" send seed/fs@a > "$out/full"
    "$cairn" rm seed/fs/dir/small && "$cairn" put -f "$tmp/small" seed/fs/big
    "$cairn" snapshot -r seed/fs@b
    "$cairn" send -i @a seed/fs@b > "$out/incremental"
    "$cairn" send -R -I @a seed/fs@b > "$out/replicated"
    "$cairn" volume create -V 1M seed/vol 2>/dev/null && "$cairn" snapshot seed/vol@v &&
      "$cairn" send seed/vol@v > "$out/volume"
  ) || echo "seeding stopped early: receive starts from the streams made so far"
  rm -rf "$tmp"
}
mkdir -p corpus/receive
[ -n "$(ls corpus/receive)" ] || seed_streams
run() {
  local t="$1"
  mkdir -p "corpus/$t"
  if cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 \
      -print_final_stats=1 >"logs/$t.log" 2>&1; then
    result=ok
  else
    result=CRASH
  fi
  local runs execs
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "logs/$t.log" | grep -o '[0-9]*$' || echo '?')
  execs=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "logs/$t.log" | grep -o '[0-9]*$' || echo '?')
  printf '%-13s %10s runs %8s exec/s %6s corpus files  %s\n' "$t" "$runs" "$execs" \
    "$(ls "corpus/$t" | wc -l)" "$result"
}
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
  run "$t" &
done
wait
