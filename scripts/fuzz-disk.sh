#!/usr/bin/env bash
# Fuzzes every on-disk decoder (fuzz/fuzz_targets) for SECONDS each, JOBS targets at a
# time, and prints one line per target: runs, corpus, exec/s, and whether it crashed.
#   scripts/fuzz-disk.sh [SECONDS] [JOBS]      (default 600 s, 2 at a time)
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${1:-600}"
jobs="${2:-2}"
targets=(label blockpointer dnode rootblock spacemap datasettable directory history)
cargo +nightly fuzz build >/dev/null 2>&1
mkdir -p logs
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
