#!/usr/bin/env bash
# Sequential read through a cairn mount on simulated hard disks paced in real time: a
# raidz2 of five `sim:` 2 TB 512e disks (backing files in /dev/shm), a 512 MiB file of
# random bytes written with dd bs=1M and fsync, then the mount remounted, the page cache
# dropped, and the file read back with dd bs=1M (and compared). One line per binary:
#   scripts/bench-fuse-hdd-read.sh CAIRN...
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 CAIRN..." >&2; exit 2; }
for C in "$@"; do
  W=$(mktemp -d /dev/shm/cairn-fhdd.XXXXXX)
  export CAIRN_HOME=$W/home
  mkdir -p "$W/mnt"
  devs=()
  for i in 0 1 2 3 4; do devs+=("sim:$W/d$i?disk=2TB,512e&pace=real"); done
  "$C" create fh raidz2 "${devs[@]}" >/dev/null
  "$C" set compression=off fh >/dev/null
  "$C" mount fh "$W/mnt" >/dev/null
  dd if=/dev/urandom of="$W/src" bs=1M count=512 status=none
  dd if="$W/src" of="$W/mnt/f" bs=1M conv=fsync status=none
  "$C" umount "$W/mnt"
  "$C" mount fh "$W/mnt" >/dev/null
  sync; echo 3 > /proc/sys/vm/drop_caches
  r=$(dd if="$W/mnt/f" of=/dev/null bs=1M 2>&1 | tail -1)
  cmp "$W/src" "$W/mnt/f"
  echo "$C: read ${r##*copied, }"
  "$C" umount "$W/mnt"
  "$C" export fh >/dev/null 2>&1 || true
  rm -rf "$W"
done
