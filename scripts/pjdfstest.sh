#!/usr/bin/env bash
# Runs the pjdfstest POSIX file-system conformance suite inside a directory (the mount
# point of the file system under test, e.g. a cairn FUSE mount) and summarises the result.
#
# Why: pjdfstest (~8800 subtests in ~240 files: chmod, chown, link, mkdir, open, rename,
# symlink, truncate, unlink, utimensat, ...) is the standard check that a file system gives
# POSIX answers (errno values, permission checks, times, link counts). Its source is shared
# third-party code (BSD licence, see its ORIGIN.txt and COPYING) and is NOT copied into this
# repository: this script builds it out of tree into a cache directory and runs it from there.
#
# Usage:   scripts/pjdfstest.sh DIR [TEST...]
#   DIR    directory on the file system under test; the tests create and delete files in it.
#   TEST   test directories or files relative to pjdfstest's tests/, e.g. `chmod rename`
#          or `chmod/00.t`; with none, the whole tests/ tree runs (takes minutes).
# Must run as root (most tests switch users and create device nodes).
#
# Environment:
#   PJDFSTEST_SRC        pjdfstest source (default: ../shared/tools/pjdfstest beside the
#                        repository, else /work/shared/tools/pjdfstest)
#   PJDFSTEST_BUILD      build cache (default /var/tmp/cairn-pjdfstest-build); built only if
#                        its pjdfstest binary is missing, or if PJDFSTEST_REBUILD=1
#   PJDFSTEST_JSON       also write the summary as JSON to this file
#   PJDFSTEST_EXPECTED_FAILURES  file of tolerated failures, one per line: `chmod/12.t`
#                        (any failure of that file) or `chmod/12.t:3,4,7-9` (only those
#                        subtests); blank lines and `#` comments are ignored
#   PJDFSTEST_TEST_TIMEOUT  seconds one test file may run before it is killed (default 600)
#   PJDFSTEST_JOBS       prove -j value (default 1: tests run one at a time)
#
# Exit status: 0 if every subtest passed or every failure is tolerated; 1 if anything else
# failed (or prove did not finish); 2 on a usage or setup error (bad DIR, build failed).
set -euo pipefail

die() { echo "pjdfstest.sh: $*" >&2; exit 2; }

if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 2
fi

repo_root=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${PJDFSTEST_SRC:-}" ]; then
  src=$PJDFSTEST_SRC
elif [ -f "$repo_root/../shared/tools/pjdfstest/pjdfstest.c" ]; then
  src=$(cd "$repo_root/../shared/tools/pjdfstest" && pwd)
else
  src=/work/shared/tools/pjdfstest
fi
build=${PJDFSTEST_BUILD:-/var/tmp/cairn-pjdfstest-build}
test_timeout=${PJDFSTEST_TEST_TIMEOUT:-600}
jobs=${PJDFSTEST_JOBS:-1}
expected=${PJDFSTEST_EXPECTED_FAILURES:-}
json_out=${PJDFSTEST_JSON:-}

target=$1
shift
[ -d "$target" ] || die "not a directory: $target"
target=$(cd "$target" && pwd)
[ "$(id -u)" = 0 ] || die "must run as root (pjdfstest changes users and creates device nodes)"
[ -z "$expected" ] || [ -r "$expected" ] || die "PJDFSTEST_EXPECTED_FAILURES not readable: $expected"
case "$test_timeout$jobs" in *[!0-9]*) die "PJDFSTEST_TEST_TIMEOUT and PJDFSTEST_JOBS must be numbers" ;; esac
# Make paths given relative to the caller's directory survive the cd into DIR later.
case "$expected" in ""|/*) ;; *) expected="$PWD/$expected" ;; esac
case "$json_out" in ""|/*) ;; *) json_out="$PWD/$json_out" ;; esac

# ---- tools: autoconf, automake, gcc, make for the build; prove (perl) for the run ----
need_pkgs=()
command -v autoreconf >/dev/null || need_pkgs+=(autoconf)
command -v aclocal >/dev/null || need_pkgs+=(automake)
command -v gcc >/dev/null || need_pkgs+=(gcc)
command -v make >/dev/null || need_pkgs+=(make)
command -v prove >/dev/null || need_pkgs+=(perl)
command -v timeout >/dev/null || need_pkgs+=(coreutils)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${need_pkgs[*]}"
  echo "   apt-get update -qq && apt-get install -y ${need_pkgs[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# ---- build (out of tree, cached) ----
if [ "${PJDFSTEST_REBUILD:-0}" = 1 ] || [ ! -x "$build/pjdfstest" ]; then
  [ -f "$src/pjdfstest.c" ] && [ -d "$src/tests" ] || die "pjdfstest source not found at $src (set PJDFSTEST_SRC)"
  if [ -d "$build" ] && [ -n "$(ls -A "$build")" ]; then
    # Only ever wipe a directory this script made (it carries a marker file).
    [ -f "$build/.cairn-pjdfstest-build" ] || die "$build is not empty and not a build cache made by this script; refusing to wipe it"
    rm -rf "$build"
  fi
  echo "== building pjdfstest from $src into $build"
  mkdir -p "$build"
  touch "$build/.cairn-pjdfstest-build"
  cp -a "$src/." "$build/"
  if ! (cd "$build" && autoreconf -ifs && ./configure && make pjdfstest) >"$build/build.log" 2>&1; then
    tail -n 30 "$build/build.log" >&2
    die "build failed, full log in $build/build.log"
  fi
  [ -x "$build/pjdfstest" ] || die "build finished but $build/pjdfstest is missing"
  echo "   built $build/pjdfstest (log: $build/build.log)"
fi

# ---- choose tests ----
tests=()
if [ $# -eq 0 ]; then
  tests=("$build/tests")
else
  for t in "$@"; do
    t=${t#tests/}
    t=${t%/}
    [ -e "$build/tests/$t" ] || die "no such test directory or file: tests/$t (have: $(cd "$build/tests" && ls -d */ | tr -d / | tr '\n' ' '))"
    tests+=("$build/tests/$t")
  done
fi

# ---- run ----
# The tests find the pjdfstest binary by walking up from their own directory (tests/misc.sh),
# and read the file-system type from `df .`, so they run from the build copy with the
# working directory inside DIR. misc.sh also honours a variable named `dir`: clear it.
unset dir
log=$(mktemp /tmp/pjdfstest-prove.XXXXXX.log)
trap 'rm -f "$log"' EXIT
fstype=$(df -PT "$target" | awk 'NR==2 {print $2}')
echo "== pjdfstest in $target (file system type: ${fstype:-unknown}), tests: ${*:-all}"
echo "   prove -r -j$jobs, each test file limited to ${test_timeout}s"
start=$(date +%s)
set +e
(cd "$target" && prove -r --nocolor -j"$jobs" \
   --exec "timeout -k 10 $test_timeout /bin/sh" "${tests[@]}") 2>&1 | tee "$log"
prove_rc=${PIPESTATUS[0]}
set -e
wall=$(( $(date +%s) - start ))

# ---- summarise ----
# Parses prove's "Test Summary Report": for each problem file a header
#   /path/tests/chmod/12.t (Wstat: 0 Tests: 14 Failed: 2)
# followed by "  Failed tests:  3-4, 9" (continued on lines indented 16 spaces),
# "  Non-zero exit status: N", "  Parse errors: ...", and at the end
#   Files=238, Tests=8798, 300 wallclock secs (...)   and   Result: PASS|FAIL|NOTESTS
summarise=$(cat <<'PERL'
use strict; use warnings; use JSON::PP;
my ($log, $testsdir, $expected, $json_out, $wall, $prove_rc, $target, $fstype, @args) = @ARGV;
sub expand { my @n; for my $p (split /\s*,\s*/, $_[0]) { next if $p eq '';
    if ($p =~ /^(\d+)-(\d+)$/) { push @n, $1..$2 } elsif ($p =~ /^\d+$/) { push @n, $p } } @n }
sub rel { my $f = shift; $f =~ s/^\Q$testsdir\E\/?//; $f }
open my $fh, '<', $log or die "$log: $!";
my (%f, @order, $cur, $section, $files, $subtests, $result);
my $in_summary = 0;
while (my $l = <$fh>) {
    chomp $l;
    if ($l =~ /^Test Summary Report/) { $in_summary = 1; next }
    if ($l =~ /^Files=(\d+), Tests=(\d+)/) { ($files, $subtests) = ($1, $2); $in_summary = 0; next }
    if ($l =~ /^Result: (\S+)/) { $result = $1; next }
    next unless $in_summary;
    if ($l =~ /^(\S.*?)\s+\(Wstat: (.*?) Tests: (\d+) Failed: (\d+)\)$/) {
        $cur = rel($1); $section = '';
        push @order, $cur unless $f{$cur};
        $f{$cur} = { file => $cur, wstat => $2, tests => $3 + 0, failed_count => $4 + 0,
                     failed => [], todo_passed => [], exit => undef, parse_errors => [] };
        next;
    }
    next unless defined $cur;
    if ($l =~ /^  Failed tests?:\s+(.*)$/) { $section = 'failed'; push @{$f{$cur}{failed}}, expand($1); next }
    if ($l =~ /^  TODO passed:\s+(.*)$/) { $section = 'todo_passed'; push @{$f{$cur}{todo_passed}}, expand($1); next }
    if ($l =~ /^  Non-zero (?:exit|wait) status: (\d+)/) { $section = ''; $f{$cur}{exit} = $1 + 0; next }
    if ($l =~ /^  Parse errors: (.*)$/) { $section = 'parse_errors'; push @{$f{$cur}{parse_errors}}, $1; next }
    if ($l =~ /^ {16}(\S.*)$/) {
        if ($section eq 'parse_errors') { push @{$f{$cur}{parse_errors}}, $1 }
        elsif ($section) { push @{$f{$cur}{$section}}, expand($1) }
        next;
    }
}
close $fh;

# Tolerated failures: "file" (anything) or "file:3,4,7-9" (only those subtests).
my %tol;
if ($expected ne '') {
    open my $e, '<', $expected or die "$expected: $!";
    while (my $l = <$e>) {
        $l =~ s/#.*//; $l =~ s/^\s+|\s+$//g; next if $l eq '';
        my ($file, $nums) = split /:/, $l, 2;
        $file =~ s/^(?:\.\/)?tests\///;
        $tol{$file} = defined $nums && $nums =~ /\d/ ? { map { $_ => 1 } expand($nums) } : 'all';
    }
}

my (@failed, @tolerated, $subtests_failed, $not_run);
$subtests_failed = 0; $not_run = 0;
for my $name (@order) {
    my $r = $f{$name};
    my $broken = $r->{failed_count} > 0 || @{$r->{parse_errors}} || ($r->{exit} // 0) != 0;
    next unless $broken;                      # e.g. only "TODO passed": not a failure
    $subtests_failed += $r->{failed_count};
    for (@{$r->{parse_errors}}) { $not_run += $1 - $2 if /planned (\d+) tests? but ran (\d+)/ && $1 > $2 }
    $r->{timed_out} = JSON::PP::true if ($r->{exit} // 0) == 124;
    my $t = $tol{$name};
    my $ok = defined $t && ($t eq 'all'
        || (!@{$r->{parse_errors}} && @{$r->{failed}} && !grep { !$t->{$_} } @{$r->{failed}}));
    $r->{tolerated} = $ok ? JSON::PP::true : JSON::PP::false;
    push @{$ok ? \@tolerated : \@failed}, $r;
}
my $finished = defined $files && defined $result;
my $status = !$finished ? 'INCOMPLETE' : ($result eq 'NOTESTS' || ($subtests // 0) == 0) ? 'NOTESTS'
           : @failed ? 'FAIL' : 'PASS';
# prove exits non-zero for failures; if it did so with nothing parsed as failed, don't call it a pass.
$status = 'FAIL' if $status eq 'PASS' && $prove_rc != 0 && !@tolerated;
my %bad = map { $_->{file} => 1 } @failed, @tolerated;
my @stale = grep { !$bad{$_} } sort keys %tol;

sub ranges { my @n = @_; my @out;               # 1,2,3,5 -> "1-3,5"
    while (@n) { my $a = shift @n; my $b = $a; $b = shift @n while @n && $n[0] == $b + 1;
        push @out, $a == $b ? $a : "$a-$b" } join ',', @out }
# Same "file:subtests" form as the expected-failures file, so lines can be copied into it.
sub line { my $r = shift; my $s = "    $r->{file}";
    $s .= ":" . ranges(@{$r->{failed}}) if @{$r->{failed}};
    $s .= " ($r->{failed_count} of $r->{tests} subtests failed)";
    $s .= " exit $r->{exit}" if defined $r->{exit};
    $s .= " TIMED OUT" if $r->{timed_out};
    $s .= " parse errors: " . join('; ', @{$r->{parse_errors}}) if @{$r->{parse_errors}};
    $s }
print "\n== pjdfstest summary for $target ($fstype)\n";
print "   prove did not finish (no summary line): results are partial\n" unless $finished;
printf "   files run:        %s\n", $files // '?';
printf "   files failed:     %d (%d tolerated)\n", @failed + @tolerated, scalar @tolerated;
printf "   subtests run:     %s\n", $subtests // '?';
printf "   subtests failed:  %d\n", $subtests_failed;
printf "   subtests passed:  %s of %s run\n", defined $subtests ? $subtests - $subtests_failed : '?', $subtests // '?';
printf "   subtests not run: %d (planned but skipped by a test file that died or timed out)\n", $not_run if $not_run;
printf "   wall time:        %d s\n", $wall;
if (@failed) { print "   failed:\n"; print line($_), "\n" for @failed }
if (@tolerated) { print "   tolerated (listed in $expected):\n"; print line($_), "\n" for @tolerated }
if (@stale) { print "   listed as expected failures but did not fail (or were not run):\n"; print "    $_\n" for @stale }
print "   result: $status", (@tolerated && $status eq 'PASS' ? " (all failures tolerated)" : ""), "\n";

if ($json_out ne '') {
    my $clean = sub { my $r = shift; +{ map { $_ => $r->{$_} } grep { defined $r->{$_} }
        qw(file tests failed_count failed exit parse_errors wstat timed_out tolerated) } };
    my $doc = { dir => $target, fs_type => $fstype, tests => [@args ? @args : ('all')],
        files_run => defined $files ? $files + 0 : undef, files_failed => @failed + @tolerated, subtests_run => defined $subtests ? $subtests + 0 : undef,
        subtests_failed => $subtests_failed, subtests_not_run => $not_run, failed => [map { $clean->($_) } @failed],
        tolerated => [map { $clean->($_) } @tolerated], expected_but_not_failed => \@stale,
        wall_seconds => $wall + 0, prove_exit => $prove_rc + 0, result => $status };
    open my $j, '>', $json_out or die "$json_out: $!";
    print $j JSON::PP->new->canonical->pretty->encode($doc);
    close $j;
    print "   JSON written to $json_out\n";
}
exit($status eq 'PASS' ? 0 : 1);
PERL
)
set +e
perl -e "$summarise" -- "$log" "$build/tests" "$expected" "$json_out" "$wall" "$prove_rc" \
  "$target" "${fstype:-unknown}" "$@"
rc=$?
set -e
[ $rc -le 1 ] || { echo "pjdfstest.sh: summary failed (perl exit $rc)" >&2; rc=1; }
exit $rc
