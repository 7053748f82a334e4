#!/usr/bin/env bash
# The file-system checks with real suites, as CI runs them (scripts/test.sh calls this):
# a raidz2 pool of six files, a dataset mounted over FUSE, then
#   1. pjdfstest, the whole suite (scripts/pjdfstest.sh builds it from ../shared/tools),
#   2. fsx (the `fsx` crate, installed into /var/tmp/cairn-tools) for FSX_OPS operations,
#      then DIRECT_OPS random writes with O_DIRECT (fio, crc32c in every block),
#   3. fs-stress.py: random metadata operations from 4 processes, link counts checked,
#   4. unmount, scrub (clean), remount: the tree is identical, and fio reads every O_DIRECT
#      block back with O_DIRECT and checks it.
# Usage: scripts/fs-check.sh [CAIRN_BINARY]   (default: target/debug/cairn, built if missing)
# Env: FSX_OPS (default 100000), DIRECT_OPS (default 102400), STRESS_OPS (default 2000 per process), PJDFSTEST_ARGS
# (test dirs; default: all).
# Counts are printed by each suite itself; docs/bench/fs.md records full runs.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
cairn=${1:-$repo/target/debug/cairn}
[ -x "$cairn" ] || cargo build --locked -q -p cairn
work=$(mktemp -d /var/tmp/cairn-fs-check.XXXXXX)
export CAIRN_HOME=$work/home
mnt=$work/mnt
cleanup() {
  "$cairn" umount -f "$mnt" >/dev/null 2>&1 || true
  for _ in $(seq 100); do pgrep -f "serve --mount tank/fs" >/dev/null || break; sleep 0.1; done
  rm -rf "$work"
}
trap cleanup EXIT

for i in 0 1 2 3 4 5; do truncate -s 1G "$work/d$i"; done
"$cairn" create tank raidz2 "$work"/d{0,1,2,3,4,5} >/dev/null
"$cairn" dataset create tank/fs
"$cairn" mount tank/fs "$mnt"

echo "== pjdfstest in a cairn mount"
mkdir "$mnt/pjd"
# shellcheck disable=SC2086
scripts/pjdfstest.sh "$mnt/pjd" ${PJDFSTEST_ARGS:-}
rm -rf "$mnt/pjd"

echo "== fsx: ${FSX_OPS:=100000} operations"
fsx_bin=/var/tmp/cairn-tools/bin/fsx
if [ ! -x "$fsx_bin" ]; then
  echo "installing fsx 0.3.2 into /var/tmp/cairn-tools"
  cargo install --quiet fsx --version 0.3.2 --root /var/tmp/cairn-tools
fi
"$fsx_bin" -f scripts/fsx.toml -N "$FSX_OPS" -S 1 -P "$work" "$mnt/fsx.data"
rm -f "$mnt/fsx.data"

# fsx-rs has no O_DIRECT mode (and xfstests' fsx is not packaged): fio writes DIRECT_OPS
# distinct 4 KiB blocks at random offsets with O_DIRECT, each carrying a crc32c header;
# after the unmount, scrub and remount below, a second fio reads every block back with
# O_DIRECT and checks it (--verify_only; any mismatch fails: verify_fatal).
fio_direct() {
  fio --name=odirect --filename="$mnt/fio.odirect" --size=$((DIRECT_OPS * 4))k --bs=4k \
    --rw=randwrite --direct=1 --ioengine=psync --verify=crc32c --verify_fatal=1 \
    --verify_state_save=0 "$@" \
    --output-format=normal | grep -E "IOPS|err="
}
echo "== fio O_DIRECT: ${DIRECT_OPS:=102400} random 4 KiB writes (verified after the remount)"
fio_direct --do_verify=0

echo "== fs-stress: ${STRESS_OPS:=2000} random metadata operations in each of 4 processes"
python3 scripts/fs-stress.py "$mnt" --procs 4 --ops "$STRESS_OPS" --snapshot "$work/stress.json"

echo "== unmount, scrub, remount: the tree is as it was"
"$cairn" umount "$mnt"
"$cairn" scrub tank
"$cairn" mount tank/fs "$mnt" >/dev/null
python3 scripts/fs-stress.py "$mnt" --compare "$work/stress.json"
echo "== fio O_DIRECT: every block written before the remount reads back as written"
fio_direct --verify_only
rm -f "$mnt/fio.odirect"
"$cairn" umount "$mnt"
# Every leaf's error counters are still 0 after all of it.
health=$("$cairn" status -x)
echo "$health"
[ "$health" = "all pools are healthy" ] || { echo "fs-check: the pool is not healthy" >&2; exit 1; }
