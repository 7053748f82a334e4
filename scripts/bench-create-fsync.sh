#!/usr/bin/env bash
# Five workloads through a mount, N files each, for each target given, side by side,
# ROUNDS times alternating:
#   create   create, write 4 KiB, fsync, close, in one directory (a Samba client's "copy
#            with flush", a database creating segment files)
#   maildir  the same in tmp/, then rename into new/ and fsync new/ (how a mail server
#            delivers a message)
#   save     the same as a new file, renamed over one of 100 existing files, fsync the
#            directory (how editors, package managers and config tools save: the old
#            file loses its last name)
#   journal  a rollback journal's transaction (SQLite's default): create the journal,
#            write 4 KiB, fsync it, write 4 KiB into the database file, fsync it, remove
#            the journal, fsync the directory
#   samba    create, set the extended attribute user.DOSATTRIB (as Samba does for every
#            file it creates), write 4 KiB, fsync, close
# What logging creates, renames, removals and xattrs (CREATE, RENAME, REMOVE and XATTR
# records) saves against a txg sync per fsync.
#
# usage: scripts/bench-create-fsync.sh [-n N] [-o OUT.json] TARGET...
#   TARGET  LABEL=CAIRN_BINARY  a cairn build: a raidz1 of three 1 GiB files in /dev/shm,
#                               and the same pool on `fault:` leaves adding DELAY_MS to
#                               every I/O (a slow medium, where a txg sync costs more)
#           zfs-fuse            Debian's zfs-fuse, a raidz1 of three 1 GiB files in /dev/shm
#           tmpfs               a directory in /dev/shm (fsync does nothing: the ceiling)
# environment: ROUNDS (default 2), DELAY_MS (default 1; 0 skips the slow medium)
# Needs root, /dev/fuse, python3; zfs-fuse for that target.
set -euo pipefail
n=2000
out=""
while [[ "${1:-}" == -* ]]; do
    case "$1" in
        -n) n=$2; shift 2 ;;
        -o) out=$2; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $# -gt 0 ]] || { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
ROUNDS="${ROUNDS:-2}"
DELAY_MS="${DELAY_MS:-1}"
work=$(mktemp -d /dev/shm/cairn-create-fsync.XXXXXX)
rows="$work/rows.jsonl"
cleanup() {
    [[ -f "$work/zfs-fuse.pid" ]] && { zpool destroy -f cfs >/dev/null 2>&1 || true
        kill "$(cat "$work/zfs-fuse.pid")" 2>/dev/null || true; }
    for m in "$work"/run/m; do fusermount3 -u "$m" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# workload DIR -> "create-files/s maildir-files/s save-files/s journal-transactions/s
#                  samba-files/s"
workload() {
    python3 - "$1" "$n" <<'PY'
import errno, os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
buf = os.urandom(4096)
def create(path):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
    os.write(fd, buf)
    os.fsync(fd)
    os.close(fd)
os.makedirs(f"{d}/c")
t0 = time.time()
for i in range(n):
    create(f"{d}/c/f{i}")
rate_create = n / (time.time() - t0)
for sub in ("tmp", "new"):
    os.makedirs(f"{d}/{sub}")
new = os.open(f"{d}/new", os.O_RDONLY)
t0 = time.time()
for i in range(n):
    create(f"{d}/tmp/m{i}")
    os.rename(f"{d}/tmp/m{i}", f"{d}/new/m{i}")
    os.fsync(new)
rate_maildir = n / (time.time() - t0)
os.close(new)
os.makedirs(f"{d}/s")
for i in range(100):
    create(f"{d}/s/f{i}")
sd = os.open(f"{d}/s", os.O_RDONLY)
t0 = time.time()
for i in range(n):
    create(f"{d}/s/f.tmp")
    os.rename(f"{d}/s/f.tmp", f"{d}/s/f{i % 100}")
    os.fsync(sd)
rate_save = n / (time.time() - t0)
os.close(sd)
os.makedirs(f"{d}/j")
jd = os.open(f"{d}/j", os.O_RDONLY)
db = os.open(f"{d}/j/db", os.O_CREAT | os.O_RDWR, 0o644)
t0 = time.time()
for i in range(n):
    create(f"{d}/j/db-journal")
    os.pwrite(db, buf, (i % 256) * 4096)
    os.fsync(db)
    os.unlink(f"{d}/j/db-journal")
    os.fsync(jd)
rate_journal = n / (time.time() - t0)
os.close(db)
os.close(jd)
os.makedirs(f"{d}/smb")
t0 = time.time()
rate_samba = "null"  # a file system without user xattrs (zfs-fuse refuses them)
try:
    for i in range(n):
        fd = os.open(f"{d}/smb/f{i}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
        try:
            os.setxattr(fd, "user.DOSATTRIB", b"0x20")
            os.write(fd, buf)
            os.fsync(fd)
        finally:
            os.close(fd)
    rate_samba = f"{n / (time.time() - t0):.0f}"
except OSError as e:
    if e.errno != errno.EOPNOTSUPP:
        raise
print(f"{rate_create:.0f} {rate_maildir:.0f} {rate_save:.0f} {rate_journal:.0f} {rate_samba}")
PY
}

run_cairn() { # BINARY MEDIUM -> files/s
    local bin=$1 medium=$2 run="$work/run"
    rm -rf "$run"; mkdir -p "$run/m" "$run/home"
    export CAIRN_HOME="$run/home"
    truncate -s 1G "$run/d0" "$run/d1" "$run/d2"
    local leaves=("$run/d0" "$run/d1" "$run/d2")
    if [[ $medium == slow ]]; then
        leaves=("fault:$run/d0?delay_ms=$DELAY_MS" "fault:$run/d1?delay_ms=$DELAY_MS"
                "fault:$run/d2?delay_ms=$DELAY_MS")
    fi
    "$bin" create cfs raidz1 "${leaves[@]}" >/dev/null
    "$bin" mount cfs "$run/m" >/dev/null
    workload "$run/m/dir"
    "$bin" umount "$run/m" >/dev/null
    "$bin" export cfs >/dev/null 2>&1 || true
    rm -rf "$run"
}

run_zfs_fuse() {
    command -v zfs-fuse >/dev/null && command -v zpool >/dev/null || {
        echo "bench-create-fsync: zfs-fuse not found (apt-get install zfs-fuse)" >&2; return 1; }
    local z="$work/zfs"
    mkdir -p "$z/m"
    truncate -s 1G "$z/d0" "$z/d1" "$z/d2"
    zfs-fuse --no-daemon --no-kstat-mount >/dev/null 2>&1 &
    echo $! > "$work/zfs-fuse.pid"
    for _ in $(seq 100); do zpool list >/dev/null 2>&1 && break; sleep 0.1; done
    zpool create -f -m "$z/m" cfs raidz1 "$z/d0" "$z/d1" "$z/d2"
    workload "$z/m/dir"
    for _ in 1 2 3 4 5; do zpool destroy -f cfs 2>/dev/null && break; sleep 2; done
    kill "$(cat "$work/zfs-fuse.pid")" 2>/dev/null || true
    for _ in $(seq 50); do pgrep -x zfs-fuse >/dev/null || break; sleep 0.1; done
    rm -rf "$z" "$work/zfs-fuse.pid"
}

record() { # LABEL MEDIUM ROUND "CREATE_RATE MAILDIR_RATE SAVE_RATE JOURNAL_RATE SAMBA_RATE"
    local c m s j x
    read -r c m s j x <<< "$4"
    echo "{\"target\": \"$1\", \"medium\": \"$2\", \"round\": $3, \"create_files_per_s\": $c, \"maildir_files_per_s\": $m, \"save_files_per_s\": $s, \"journal_per_s\": $j, \"samba_files_per_s\": $x}" >> "$rows"
    printf '%-24s %-6s round %s: create %7s, maildir %7s, save %7s files/s; journal %7s/s; samba %7s files/s\n' "$1" "$2" "$3" "$c" "$m" "$s" "$j" "$x"
}

for round in $(seq "$ROUNDS"); do
    for t in "$@"; do
        case "$t" in
            zfs-fuse) rate=$(run_zfs_fuse) || exit 1; record zfs-fuse tmpfs "$round" "$rate" ;;
            tmpfs) rm -rf "$work/plain"; record tmpfs tmpfs "$round" "$(workload "$work/plain")" ;;
            *=*)
                label="${t%%=*}" bin="${t#*=}"
                record "$label" tmpfs "$round" "$(run_cairn "$bin" tmpfs)"
                if [[ $DELAY_MS != 0 ]]; then
                    record "$label" "slow" "$round" "$(run_cairn "$bin" slow)"
                fi ;;
            *) echo "bench-create-fsync: unknown target '$t' (LABEL=BINARY, zfs-fuse or tmpfs)" >&2; exit 2 ;;
        esac
    done
done
if [[ -n "$out" ]]; then
    python3 - "$rows" "$out" "$n" "$DELAY_MS" <<'PY'
import json, sys, datetime, platform
rows, out, n, delay = sys.argv[1:]
json.dump({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "host": platform.node(), "files": int(n), "slow_delay_ms": float(delay),
           "workloads": {"create": "create, write 4 KiB, fsync, close; one directory",
                         "maildir": "the same in tmp/, rename into new/, fsync new/",
                         "save": "the same as f.tmp, rename over one of 100 files, fsync the directory",
                         "journal": "create journal, write 4 KiB, fsync; write 4 KiB into db, fsync; "
                                    "unlink journal, fsync the directory",
                         "samba": "create, setxattr user.DOSATTRIB, write 4 KiB, fsync, close"},
           "runs": [json.loads(l) for l in open(rows)]}, open(out, "w"), indent=2)
print(f"JSON: {out}")
PY
fi
