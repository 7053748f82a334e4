#!/usr/bin/env bash
# The whole test suite, as CI runs it. Installs what the tests need on a fresh Debian
# machine (Rust components, Debian packages), then: rustfmt, module cycles, long functions
# (none over 80 lines), clippy (warnings are errors), every unit/property/integration test,
# and smoke runs of the demo and the parity bench.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
# qemu-utils, libnbd-bin, fio: real NBD clients for the serve tests; openssl: their TLS
# certificates; nbdkit: remote leaves;
# fuse3: nbdfuse and fusermount3; libisal2: the parity bench peer; autoconf, automake,
# gcc, make: to build pjdfstest (scripts/pjdfstest.sh); python3: scripts/fs-stress.py.
for pkg in libisal2 qemu-utils libnbd-bin fio nbdkit fuse3 openssl autoconf automake gcc make python3; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_pkgs+=("$pkg")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${need_pkgs[*]}"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null; then
  echo "cargo not found: install Rust from rustup.rs first" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== module dependency cycles (none allowed)"
python3 scripts/module-cycles.py
echo "== long functions (none over 80 lines)"
python3 scripts/long-functions.py
echo "== cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== file systems: pjdfstest and fsx in a cairn mount (scripts/fs-check.sh)"
cargo build --locked -q -p cairn
FSX_OPS=${FSX_OPS:-20000} scripts/fs-check.sh target/debug/cairn
echo "== smoke: cairn demo"
cargo run --locked -q -p cairn -- demo --leaf-mib 96 --data-mib 64 >/dev/null
echo "== smoke: cairn bench parity --quick"
cargo run --locked -q -p cairn -- bench parity --quick >/dev/null
echo "== all tests passed"
