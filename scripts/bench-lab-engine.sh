#!/usr/bin/env bash
# The lab's dd through cairn's own pool on simulated disks (`bench lab dd --engine`):
# for each layout of the 28-disk and MacZFS studies, the analytic model's figures beside
# the engine's (the real pool over `sim:` leaves), timed two ways: `busy` (virtual: a
# phase lasts what its busiest disk was busy) and `real` (every request takes its model
# time in real time; wall clock). Writes a JSON array (one object per layout and timing:
# the model's fields plus `engine`, whose `time` says which).
#
# usage: scripts/bench-lab-engine.sh [OUT.json]   (default docs/bench/lab-engine-dd.json)
# environment:
#   CAIRN        the cairn binary (default: target/release/cairn)
#   BENCH_SIZE   file size per layout (default 1G; the engine writes it and its parity
#                for real into sparse files under BENCH_DIR)
#   BENCH_DIR    where the backing files go (default: /dev/shm when it exists, else /tmp)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CAIRN="${CAIRN:-$ROOT/target/release/cairn}"
SIZE="${BENCH_SIZE:-1G}"
OUT="${1:-$ROOT/docs/bench/lab-engine-dd.json}"
DIR="${BENCH_DIR:-}"
if [[ -z "$DIR" ]]; then
    if [[ -d /dev/shm ]]; then DIR=/dev/shm; else DIR=/tmp; fi
fi
DIR="$DIR/cairn-lab-engine-$$"
trap 'rm -rf "$DIR"' EXIT

runs=(
    "5x2TB,512e raidz2 9"
    "5x2TB,512e raidz2 12"
    "5x2TB,512e raidz1 12"
    "28x1TB raidz2 12"
    "28x1TB 2xraidz2-14 12"
    "28x1TB 3xraidz2-9 12"
    "28x1TB 14xmirror-2 12"
    "28x1TB stripe 12"
    "6x256GB,ssd raidz1 12"
)
printf '%-12s %-12s %6s %6s %11s %11s %11s %11s\n' disks layout ashift time "model W" "engine W" "model R" "engine R"
echo "[" > "$OUT.tmp"
first=1
for r in "${runs[@]}"; do
  for timing in busy real; do
    read -r disks layout ashift <<< "$r"
    json=$("$CAIRN" bench lab dd --disks "$disks" --layout "$layout" --ashift "$ashift" \
        --size "$SIZE" --engine --engine-time "$timing" --dir "$DIR" --json)
    [[ $first == 1 ]] || echo "," >> "$OUT.tmp"
    first=0
    echo "$json" | python3 -c "
import json, sys
v = json.load(sys.stdin)
v['disk_spec'] = sys.argv[1]
json.dump(v, sys.stdout, indent=1)
e = v['engine']
print('%-12s %-12s %6s %6s %11.1f %11.1f %11.1f %11.1f' % (sys.argv[1], sys.argv[2], sys.argv[3],
      e['time'], v['write_mbs'], e['write_mbs'], v['read_mbs'], e['read_mbs']), file=sys.stderr)
" "$disks" "$layout" "$ashift" >> "$OUT.tmp"
  done
done
echo "]" >> "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "(MB/s; W: write, R: read; JSON: $OUT)"
