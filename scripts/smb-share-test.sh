#!/usr/bin/env bash
# Shares a directory with a private Samba server on loopback and checks it with smbclient:
# a random file goes up and comes back byte-identical (cmp + sha256, MB/s each way), and
# Windows attributes set over SMB (hidden + read-only) are stored by the directory's file
# system as the user.DOSATTRIB extended attribute and survive an optional remount.
#
# Why: a file system meant to sit behind a Windows share (e.g. a cairn FUSE mount) must take
# large sequential writes and reads through smbd and must keep user.* xattrs, where Samba
# keeps DOS attributes (`store dos attributes = yes`). This checks both end to end, without
# touching the system's own Samba set-up: smbd runs with its own smb.conf, state and logs in
# a temporary directory, listens on 127.0.0.1 on a high port only, and is stopped on exit.
#
# Usage:   scripts/smb-share-test.sh DIR [SIZE_MIB]
#   DIR       directory to share (as [cairn]); the test file is created in it and removed
#             at the end
#   SIZE_MIB  size of the random test file in MiB (default 1024)
# Must run as root (smbd, and the share is accessed as the Samba user root).
#
# Environment:
#   SMB_REMOUNT_CMD  if set, run with `bash -c` after the attributes are set, with smbd
#                    stopped; meant to unmount and remount DIR. Afterwards smbd is started
#                    again and the content, the attributes (allinfo) and the xattr are checked
#                    once more.
#   SMB_SNAPSHOT_CMD if set, the share gets Samba's shadow_copy2 module over DIR/.zfs/snapshot
#                    (snapshots named GMT-YYYY.MM.DD-hh.mm.ss) and Windows "Previous Versions"
#                    are checked: a small file is written over SMB, SMB_SNAPSHOT_CMD runs with
#                    SNAP_NAME set to such a name (it must snapshot DIR's dataset under that
#                    name), the file is changed, then smbclient's allinfo must list
#                    @GMT-... for it and fetching it through that token must give the old
#                    contents.
#   SMB_PORT         TCP port for smbd (default: the first free one from 4450 to 4499)
#   SMB_WORKDIR      parent of the temporary directory holding smb.conf, logs and the local
#                    copies of the test file (default ${TMPDIR:-/tmp}); needs 2 x SIZE_MIB free
#   SMB_KEEP=1       keep the temporary directory and the test file in DIR
#
# Exit status: 0 if the content came back identical and the attributes were kept (also after
# the remount, if any); 1 if a check failed; 2 on a usage or setup error.
set -euo pipefail

die() { echo "smb-share-test.sh: $*" >&2; exit 2; }
say() { echo "== $*"; }

if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 2
fi
share_dir=$1
size_mib=${2:-1024}
[ -d "$share_dir" ] || die "not a directory: $share_dir"
share_dir=$(cd "$share_dir" && pwd)
case "$size_mib" in ""|*[!0-9]*) die "SIZE_MIB must be a whole number: $size_mib" ;; esac
[ "$size_mib" -ge 1 ] || die "SIZE_MIB must be at least 1"
[ "$(id -u)" = 0 ] || die "must run as root"

# ---- tools ----
need_pkgs=()
command -v smbd >/dev/null || need_pkgs+=(samba)
command -v smbclient >/dev/null || need_pkgs+=(smbclient)
command -v getfattr >/dev/null || need_pkgs+=(attr)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  say "installing Debian packages: ${need_pkgs[*]}"
  echo "   apt-get update -qq && apt-get install -y ${need_pkgs[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
  # Debian's samba package may start the system's own smbd/nmbd (unless policy-rc.d forbids
  # it). Those use port 445/139 and /etc/samba; this test doesn't use or stop them.
fi

# ---- private smbd set-up ----
port_in_use() {   # something listens on it (ss if present), or 127.0.0.1:port answers
  { command -v ss >/dev/null && ss -Htln "sport = :$1" | grep -q .; } \
    || (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
if [ -n "${SMB_PORT:-}" ]; then
  port=$SMB_PORT
  port_in_use "$port" && die "SMB_PORT $port is already in use"
else
  port=""
  for p in $(seq 4450 4499); do
    if ! port_in_use "$p"; then port=$p; break; fi
  done
  [ -n "$port" ] || die "no free port between 4450 and 4499 (set SMB_PORT)"
fi

work=$(mktemp -d "${SMB_WORKDIR:-${TMPDIR:-/tmp}}/cairn-smb-test.XXXXXX")
smbd_pid=""
remote_name="cairn-smb-test-$$.bin"
remote_created=0
# smbd -F makes itself a session and process-group leader (so its helpers, smbd-notifyd and
# smbd-cleanupd, are in process group $smbd_pid) and on SIGTERM signals its whole process
# group. That's why it must NOT get --no-process-group here: it would then signal this
# script's group, i.e. the caller too.
stop_smbd() {
  if [ -n "$smbd_pid" ] && kill -0 "$smbd_pid" 2>/dev/null; then
    kill -TERM "$smbd_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$smbd_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$smbd_pid" 2>/dev/null || true
    wait "$smbd_pid" 2>/dev/null || true
    # Any helper left in smbd's own process group (never this script's: checked above).
    if [ "$(ps -o pgid= -p $$ | tr -d ' ')" != "$smbd_pid" ]; then
      kill -TERM -- "-$smbd_pid" 2>/dev/null || true
    fi
  fi
  smbd_pid=""
}
cleanup() {
  local rc=$?
  trap '' INT TERM   # finish cleaning up even if signalled again
  stop_smbd
  if [ "${SMB_KEEP:-0}" = 1 ]; then
    echo "   kept: $work and $share_dir/$remote_name"
  else
    [ "$remote_created" = 1 ] && rm -f "$share_dir/$remote_name"
    rm -rf "$work"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'echo "smb-share-test.sh: interrupted" >&2; exit 130' INT TERM

mkdir -p "$work"/{private,lock,state,cache,pid,ncalrpc,log}
chmod 700 "$work/private"
conf=$work/smb.conf
cat >"$conf" <<EOF
# Private smbd for scripts/smb-share-test.sh: loopback only, all state under $work.
[global]
  server role = standalone server
  workgroup = WORKGROUP
  netbios name = CAIRNTEST
  security = user
  map to guest = never
  passdb backend = tdbsam:$work/private/passdb.tdb
  interfaces = 127.0.0.1
  bind interfaces only = yes
  smb ports = $port
  disable netbios = yes
  server min protocol = SMB2_10
  private dir = $work/private
  lock directory = $work/lock
  state directory = $work/state
  cache directory = $work/cache
  pid directory = $work/pid
  ncalrpc dir = $work/ncalrpc
  log file = $work/log/smbd.log
  log level = 1
  max log size = 0
  load printers = no
  printing = bsd
  printcap name = /dev/null
  disable spoolss = yes

[cairn]
  path = $share_dir
  read only = no
  ea support = yes
  store dos attributes = yes
EOF
if [ -n "${SMB_SNAPSHOT_CMD:-}" ]; then
  # Previous Versions from the file system's snapshot directory (vfs_shadow_copy2(8)).
  cat >>"$conf" <<'EOF'
  vfs objects = shadow_copy2
  shadow:snapdir = .zfs/snapshot
  shadow:format = GMT-%Y.%m.%d-%H.%M.%S
  shadow:sort = desc
  shadow:localtime = no
EOF
fi

password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
printf '%s\n%s\n' "$password" "$password" | smbpasswd -c "$conf" -a -s root >"$work/smbpasswd.out" 2>&1 \
  || { cat "$work/smbpasswd.out" >&2; die "smbpasswd could not add the Samba user root"; }
authfile=$work/auth
printf 'username = root\npassword = %s\ndomain = WORKGROUP\n' "$password" >"$authfile"
chmod 600 "$authfile"

start_smbd() {
  smbd --foreground --debug-stdout -s "$conf" >>"$work/log/smbd.stdout" 2>&1 &
  smbd_pid=$!
  local i
  for i in $(seq 1 100); do   # up to ~10 s
    if ! kill -0 "$smbd_pid" 2>/dev/null; then
      tail -n 20 "$work/log/smbd.stdout" "$work/log/smbd.log" 2>/dev/null >&2
      smbd_pid=""
      die "smbd exited at start-up (logs above)"
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "   smbd pid $smbd_pid listening on 127.0.0.1:$port (after ~$((i / 10)).$((i % 10)) s)"
      return 0
    fi
    sleep 0.1
  done
  die "smbd did not answer on 127.0.0.1:$port within 10 s (logs in $work/log)"
}

# One smbclient session; its output goes to stdout. -t: per-operation timeout (s), and the
# whole call is bounded by `timeout` too. The MB/s figures below time a whole session
# (connect, authenticate, transfer), so use a large SIZE_MIB for a meaningful rate.
smb() {
  timeout -k 10 1800 smbclient -s "$conf" -A "$authfile" -p "$port" -m SMB3 -t 600 \
    //127.0.0.1/cairn -c "$1"
}

fstype=$(df -PT "$share_dir" | awk 'NR==2 {print $2}')
say "sharing $share_dir (file system type: ${fstype:-unknown}) as //127.0.0.1/cairn on port $port"
start_smbd

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
now() { date +%s.%N; }
rate() { awk -v s="$1" -v e="$2" -v mib="$size_mib" 'BEGIN { t = e - s; if (t <= 0) t = 1e-9;
  printf "%.2f s, %.1f MB/s (%.1f MiB/s)", t, mib * 1048576 / 1e6 / t, mib / t }'; }

# ---- content: put, get, compare ----
local_src=$work/src.bin
local_back=$work/back.bin
say "making a random ${size_mib} MiB file"
head -c "$((size_mib * 1048576))" /dev/urandom >"$local_src"
src_sha=$(sha256sum "$local_src" | awk '{print $1}')
echo "   sha256 $src_sha"

say "put (client -> share)"
remote_created=1
t0=$(now)
smb "put \"$local_src\" \"$remote_name\"" >"$work/put.out" 2>&1 || { cat "$work/put.out"; fail "smbclient put failed"; }
t1=$(now)
echo "   put: $(rate "$t0" "$t1"); smbclient's own figure: $(grep -o 'average [^)]*' "$work/put.out" || echo none)"

say "get (share -> client)"
t0=$(now)
smb "get \"$remote_name\" \"$local_back\"" >"$work/get.out" 2>&1 || { cat "$work/get.out"; fail "smbclient get failed"; }
t1=$(now)
echo "   get: $(rate "$t0" "$t1"); smbclient's own figure: $(grep -o 'average [^)]*' "$work/get.out" || echo none)"

check_content() {   # $1: label
  local on_disk
  if [ ! -f "$share_dir/$remote_name" ]; then fail "$1: $share_dir/$remote_name does not exist"; return; fi
  on_disk=$(sha256sum "$share_dir/$remote_name" | awk '{print $1}')
  if [ "$on_disk" = "$src_sha" ]; then echo "   $1: file in DIR has the same sha256"
  else fail "$1: file in DIR has sha256 $on_disk, expected $src_sha"; fi
}
if [ -f "$local_back" ] && cmp "$local_src" "$local_back"; then
  back_sha=$(sha256sum "$local_back" | awk '{print $1}')
  if [ "$back_sha" = "$src_sha" ]; then echo "   cmp: identical, sha256 matches"
  else fail "sha256 of the copy that came back is $back_sha"; fi
else
  fail "the copy that came back differs from the original (or is missing)"
fi
rm -f "$local_back"
check_content "after put/get"

# ---- Windows attributes ----
# smbclient's setmode: `setmode FILE <[+|-]rsha>`; +hr = hidden and read-only.
say "setting DOS attributes hidden + read-only over SMB"
smb "setmode \"$remote_name\" +hr" >"$work/setmode.out" 2>&1 || { cat "$work/setmode.out"; fail "setmode failed"; }

# user.DOSATTRIB is Samba's NDR blob (librpc/idl/xattr.idl): a NUL-terminated string (old
# "0x23" form, now empty), uint16 version, uint16 union level, then for version 1 the uint32
# attributes, for versions 2..5 a uint32 of flags followed by the uint32 attributes (padded to
# 4 bytes). Prints "VERSION ATTRIB_HEX" or nothing if it can't be read.
decode_dosattrib() {
  perl -e 'my $h = shift; $h =~ s/^0x//; my $b = pack("H*", $h);
    my $i = index($b, "\0"); exit 0 if $i < 0; my $o = $i + 1; $o++ if $o % 2;
    exit 0 if length($b) < $o + 4; my ($v) = unpack("v", substr($b, $o, 2)); $o = ($o + 4 + 3) & ~3;
    $o += 4 if $v >= 2; exit 0 if $v < 1 || $v > 5 || length($b) < $o + 4;
    printf "%d 0x%x\n", $v, unpack("V", substr($b, $o, 4));' "$1"
}

xattr_value=""
check_attrs() {   # $1: label; prints allinfo's attributes and the xattr, checks H and R
  local info attrs x dv da
  [ -f "$share_dir/$remote_name" ] || return 0   # already reported by check_content
  info=$(smb "allinfo \"$remote_name\"" 2>&1) || { echo "$info"; fail "$1: allinfo failed"; return; }
  attrs=$(printf '%s\n' "$info" | awk -F': ' '/^attributes:/ {print $2}')
  echo "   allinfo attributes: ${attrs:-?}"
  case "${attrs%% *}" in
    *H*R*|*R*H*) echo "   $1: hidden and read-only are set" ;;
    *) printf '%s\n' "$info"; fail "$1: allinfo does not show H and R (got '${attrs:-nothing}')" ;;
  esac
  if x=$(getfattr --absolute-names -n user.DOSATTRIB -e hex "$share_dir/$remote_name" 2>&1); then
    x=$(printf '%s\n' "$x" | sed -n 's/^user.DOSATTRIB=//p')
    echo "   xattr on DIR's file system: user.DOSATTRIB=$x"
    read -r dv da <<<"$(decode_dosattrib "$x")" || true
    if [ -n "${da:-}" ]; then
      echo "   decoded: DOSATTRIB version $dv, attributes $da$( (( da & 1 )) && echo ' READONLY')$( (( da & 2 )) && echo ' HIDDEN')$( (( da & 0x20 )) && echo ' ARCHIVE')"
      (( (da & 3) == 3 )) || fail "$1: user.DOSATTRIB attributes $da lack READONLY (0x1) or HIDDEN (0x2)"
    else
      echo "   (could not decode this DOSATTRIB format; comparing the raw value only)"
    fi
    getfattr --absolute-names -d -m - "$share_dir/$remote_name" 2>/dev/null | sed -e "/^$/d" -e "s/^/     /"
    if [ -z "$xattr_value" ]; then xattr_value=$x
    elif [ "$x" = "$xattr_value" ]; then echo "   $1: user.DOSATTRIB unchanged"
    else fail "$1: user.DOSATTRIB changed from $xattr_value to $x"; fi
  else
    echo "   $x"
    fail "$1: no user.DOSATTRIB xattr on $share_dir/$remote_name (does ${fstype:-this file system} keep user.* xattrs?)"
  fi
}
check_attrs "after setmode"

# ---- optional remount ----
if [ -n "${SMB_REMOUNT_CMD:-}" ]; then
  say "stopping smbd and running SMB_REMOUNT_CMD: $SMB_REMOUNT_CMD"
  stop_smbd
  if timeout -k 10 600 bash -c "$SMB_REMOUNT_CMD"; then
    echo "   remount command finished"
    start_smbd
    check_content "after remount"
    check_attrs "after remount"
  else
    fail "SMB_REMOUNT_CMD failed or timed out (exit $?)"
  fi
fi

# ---- optional previous versions ----
if [ -n "${SMB_SNAPSHOT_CMD:-}" ]; then
  say "previous versions: a file, a snapshot (SMB_SNAPSHOT_CMD), a change"
  pv_name="cairn-smb-pv-$$.txt"
  printf 'version one\n' >"$work/pv1"; printf 'version two, longer\n' >"$work/pv2"
  smb "put \"$work/pv1\" \"$pv_name\"" >"$work/pv.out" 2>&1 || { cat "$work/pv.out"; fail "put of $pv_name failed"; }
  SNAP_NAME=$(date -u +GMT-%Y.%m.%d-%H.%M.%S)
  export SNAP_NAME
  if timeout -k 10 120 bash -c "$SMB_SNAPSHOT_CMD"; then
    echo "   snapshot $SNAP_NAME taken"
  else
    fail "SMB_SNAPSHOT_CMD failed (exit $?)"
  fi
  smb "put \"$work/pv2\" \"$pv_name\"" >>"$work/pv.out" 2>&1 || { cat "$work/pv.out"; fail "second put of $pv_name failed"; }
  token="@${SNAP_NAME}"
  info=$(smb "allinfo \"$pv_name\"" 2>&1) || { echo "$info"; fail "allinfo $pv_name failed"; }
  if printf '%s\n' "$info" | grep -q -- "$token"; then
    echo "   allinfo lists the previous version: $(printf '%s\n' "$info" | grep -- "$token" | head -1)"
  else
    printf '%s\n' "$info"; fail "allinfo does not list $token"
  fi
  smb "get \"$token/$pv_name\" \"$work/pv-back\"" >>"$work/pv.out" 2>&1 || { cat "$work/pv.out"; fail "get of $token/$pv_name failed"; }
  if cmp -s "$work/pv1" "$work/pv-back"; then echo "   $token/$pv_name holds the old contents"
  else fail "$token/$pv_name does not hold the old contents"; fi
  smb "get \"$pv_name\" \"$work/pv-now\"" >>"$work/pv.out" 2>&1 || fail "get of $pv_name failed"
  cmp -s "$work/pv2" "$work/pv-now" || fail "the current $pv_name is not the new contents"
  rm -f "$share_dir/$pv_name"
fi

if [ "$failures" -eq 0 ]; then
  say "PASS: content identical, attributes kept${SMB_REMOUNT_CMD:+ (also after remount)}${SMB_SNAPSHOT_CMD:+, previous versions served}"
  exit 0
fi
for f in "$work/log/smbd.log" "$work/log/smbd.stdout"; do
  if [ -s "$f" ]; then
    echo "   last lines of $(basename "$f"):"
    tail -n 20 "$f" | sed 's/^/     /'
  fi
done
say "FAIL: $failures check(s) failed"
exit 1
