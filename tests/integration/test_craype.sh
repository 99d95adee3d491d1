#!/usr/bin/env bash
# The Cray programming environment (docs/cray-pe.md) used as on a Cray: `module load
# PrgEnv-gnu` (Environment Modules, or Lmod), then the cc/CC/ftn drivers build a uGNI
# program with nothing else, queries and compile-only runs get no link flags, arguments with
# spaces survive, aprun -n 4 -N 2 runs it on 2 emulated nodes through nicemu-run, librca
# agrees with PMI, aprun's CPU binding and refusals, nicemuctl status shows the mesh. With
# `ftn`, only ftn building a Fortran program instead (its own test: 77 without gfortran).
# Usage: test_craype.sh BUILD_DIR SOURCE_DIR modules|lmod [ftn]
# Exit 77 when the module system is not installed (tools/setup installs both).
# pass and fail (lib.sh) both return 0, so `check && pass || fail` is an if-then-else here.
# shellcheck disable=SC2015,SC2016
set -u
. "$(dirname "$0")/lib.sh"
build=${1:?build dir}
src=${2:?source dir}
mode=${3:?modules or lmod}
phase=${4:-}
[[ -z "$phase" || "$phase" == ftn ]] || die "unknown phase '$phase' (the only one is ftn)"
use_build "$build" tools/nicemu-run/nicemu-run tests/integration/alps_check  # DAEMON, CTL, RUN
need_cmd gcc g++
if [[ $phase == ftn ]]; then command -v gfortran >/dev/null || skip "gfortran not installed: ftn cannot be exercised"; fi

case $mode in
  modules)
    init=${MODULESHOME:-/usr/share/modules}/init/bash
    [ -r "$init" ] || { echo "Environment Modules not installed ($init missing; apt-get install environment-modules, or tools/setup)"; exit 77; }
    # shellcheck disable=SC1090
    . "$init"
    module use "$build/craype/modulepath" ;;
  lmod)
    lmod=
    for c in "${NICEMU_LMOD:-}" /usr/share/lmod/lmod/libexec/lmod \
             "${XDG_CACHE_HOME:-$HOME/.cache}/nicemu/lmod/usr/share/lmod/lmod/libexec/lmod"; do
      [ -n "$c" ] && [ -x "$c" ] && { lmod=$c; break; }
    done
    [ -n "$lmod" ] || { echo "Lmod not found (apt-get install lmod, or tools/setup, which unpacks it beside Environment Modules)"; exit 77; }
    module() { eval "$("$lmod" bash "$@")"; }
    export MODULEPATH=$build/craype/modulepath LMOD_SHORT_TIME=86400 ;;
  *) echo "mode must be modules or lmod"; exit 2 ;;
esac

test_init nicemu-craype
export NICEMU_RUN=$RUN NICEMU_DAEMON=$DAEMON NICEMU_RUNDIR=$TMP/run
unset NICEMU_TORUS SLURM_JOB_ID
cd "$TMP" || exit 1

module load PrgEnv-gnu 2>"$TMP/module.err" || { show_log "$TMP/module.err"; die "module load PrgEnv-gnu"; }
[ "$(command -v cc)" = "$src/craype/bin/cc" ] || die "cc on PATH is $(command -v cc), not the driver"
pass "$mode: module load PrgEnv-gnu puts the drivers on PATH (CRAYPE_NETWORK_TARGET=${CRAYPE_NETWORK_TARGET:-unset})"

# ftn (the `ftn` phase).
if [[ $phase == ftn ]]; then
  printf 'program hello\n  print *, "ftn ok"\nend program hello\n' > hello.f90
  if ftn -o hello hello.f90 2>"$TMP/ftn.err" && ./hello | grep -q "ftn ok"; then pass "ftn builds Fortran"
  else fail "ftn: $(cat "$TMP/ftn.err")"; fi
  finish "craype-$mode-ftn"
fi

# Queries reach the compiler untouched.
[ "$(CC --version | head -1)" = "$(g++ --version | head -1)" ] && pass "CC --version is g++'s" || fail "CC --version: $(CC --version 2>&1 | head -1)"
[ "$(cc -V 2>&1 | head -1)" = "$(gcc --version | head -1)" ] && pass "cc -V prints gcc's version" || fail "cc -V: $(cc -V 2>&1 | head -1)"
[ "$(cc -dumpversion)" = "$(gcc -dumpversion)" ] || fail "cc -dumpversion"

# Compile-only runs get the modules' include options and no link flags.
printf '#include <gni_pub.h>\n#include <pmi.h>\n#include <rca_lib.h>\nint f(void) { return GNI_RC_SUCCESS; }\n' > t.c
v=$(cc -craype-verbose -c t.c -o t.o) || fail "cc -c t.c: $v"
case $v in
  *"-I$src/ugni/include"*) ;;
  *) fail "cc -c lacks the uGNI include options: $v" ;;
esac
case $v in
  *" -l"*|*" -L"*|*as-needed*) fail "cc -c added link flags: $v" ;;
  *) [ -s t.o ] && pass "cc -c: include options, no link flags" ;;
esac
v=$(cc -craype-verbose -E t.c -o t.i) && [ -s t.i ] || fail "cc -E: $v"
case $v in *" -l"*|*as-needed*) fail "cc -E added link flags: $v" ;; esac
v=$(cc -craype-verbose -M t.c) || fail "cc -M: $v"
case $v in *" -l"*|*as-needed*) fail "cc -M added link flags: $v" ;; esac

# A uGNI program built with nothing but the driver.
if cc -o ring "$src/examples/gni_ring.c" 2>"$TMP/cc.err"; then
  needed=$(readelf -d ring | awk '/NEEDED/ {print $5}' | tr -d '[]' | tr '\n' ' ')
  case $needed in
    *libugni.so.0*libpmi.so.0*|*libpmi.so.0*libugni.so.0*) pass "cc links gni_ring against $needed" ;;
    *) fail "gni_ring's libraries: $needed" ;;
  esac
else
  fail "cc -o ring gni_ring.c: $(cat "$TMP/cc.err")"
fi
libs=$(cc --cray-print-opts=libs)
case $libs in *-lugni*-lrca*|*-lrca*-lugni*) pass "--cray-print-opts=libs: $libs" ;; *) fail "--cray-print-opts=libs: $libs" ;; esac

# Arguments with spaces and quotes reach the compiler as they were given.
mkdir -p "dir with space"
printf '#include <stdio.h>\nint main(void) { puts(MSG); return 0; }\n' > "dir with space/x y.c"
if cc -DMSG='"two  words '\''q'\''"' -o "dir with space/x y" "dir with space/x y.c" 2>"$TMP/cc.err" &&
   [ "$("./dir with space/x y")" = "two  words 'q'" ]; then
  pass "arguments with spaces and quotes"
else
  fail "quoting: $(cat "$TMP/cc.err")"
fi

# aprun -n 4 -N 2: two emulated nodes, two ranks each, through nicemu-run.
out=$(aprun -n 4 -N 2 ./ring 2>&1)
if echo "$out" | grep -q "demo passed" &&
   [ "$(echo "$out" | awk '$2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ {print $2 "@" $3}' | sort -u | tr '\n' ' ')" = "0@0 1@0 2@1 3@1 " ]; then
  pass "aprun -n 4 -N 2 ./ring: 2 ranks on each of 2 nodes"
else
  fail "aprun -n 4 -N 2 ./ring: $out"
fi

[ "$mode" = lmod ] && finish "craype-$mode"

# librca agrees with PMI on every rank; the torus default and NICEMU_TORUS.
if cc -o rca_check "$src/tests/integration/rca_check.c" 2>"$TMP/cc.err"; then
  out=$(aprun -n 4 -N 2 ./rca_check 2>&1)
  got=$(echo "$out" | grep -o 'rca rank [0-9] of 4 nid [0-9]* xyz [0-9 ]* max [0-9 ]* nodes [0-9]*' | sort | tr '\n' '|')
  want="rca rank 0 of 4 nid 0 xyz 0 0 0 max 1 0 0 nodes 2|rca rank 1 of 4 nid 0 xyz 0 0 0 max 1 0 0 nodes 2|"
  want+="rca rank 2 of 4 nid 1 xyz 1 0 0 max 1 0 0 nodes 2|rca rank 3 of 4 nid 1 xyz 1 0 0 max 1 0 0 nodes 2|"
  [ "$got" = "$want" ] && pass "rca = PMI on 2 nodes (2x1x1)" || fail "rca on 2 nodes: $out"
  out=$(NICEMU_TORUS=1x2x1 aprun -n 3 -N 2 ./rca_check 2>&1)
  echo "$out" | grep -q 'rca rank 2 of 3 nid 1 xyz 0 1 0 max 0 1 0 nodes 2 name c0-0c0s0n1' &&
    ! echo "$out" | grep -q FAIL && pass "NICEMU_TORUS=1x2x1; aprun -n 3 -N 2 puts rank 2 on node 1" ||
    fail "NICEMU_TORUS=1x2x1: $out"
  out=$(NICEMU_TORUS=2x2 aprun -n 1 ./rca_check 2>&1) && fail "a malformed NICEMU_TORUS passed: $out"
  echo "$out" | grep -q "NICEMU_TORUS=2x2 is not XxYxZ" && pass "a malformed NICEMU_TORUS is reported" ||
    fail "malformed NICEMU_TORUS: $out"
else
  fail "cc -o rca_check: $(cat "$TMP/cc.err")"
fi

# libalpsutil reports aprun -N's placement: 4 ranks on the first node, 1 on the second.
alps_check=$build/tests/integration/alps_check
out=$(aprun -n 5 -N 4 -cc none "$alps_check" 2>&1)
got=$(echo "$out" | grep -o 'alps rank [0-9] .* first [0-9]* here [0-9]* pes 5' | awk '{print $3 ":" $(NF-4) ":" $(NF-2)}' | sort | tr '\n' ' ')
[ "$got" = "0:0:4 1:0:4 2:0:4 3:0:4 4:4:1 " ] && pass "libalpsutil placement of aprun -n 5 -N 4" ||
  fail "ALPS placement of aprun -n 5 -N 4 ($got): $out"

# CPU binding: -cc LIST pins each rank, -cc none leaves the launcher's set.
all=$(grep Cpus_allowed_list /proc/self/status | awk '{print $2}')
ncpu=$(nproc)
out=$(aprun -n 2 --no-such ./ring 2>&1) && fail "aprun ran with an unknown option: $out"
out=$(aprun -n 2 -N 2 -cc 0 grep Cpus_allowed_list /proc/self/status 2>&1)
[ "$(echo "$out" | grep -c 'Cpus_allowed_list:[[:space:]]*0$')" -eq 2 ] && pass "-cc 0 binds both ranks to CPU 0" ||
  fail "-cc 0: $out"
if [ "$ncpu" -ge 2 ]; then
  out=$(aprun -n 2 -N 2 -cc cpu grep Cpus_allowed_list /proc/self/status 2>&1)
  echo "$out" | grep -q '^\[0\] Cpus_allowed_list:[[:space:]]*0$' && echo "$out" | grep -q '^\[1\] Cpus_allowed_list:[[:space:]]*1$' &&
    pass "-cc cpu: rank i on CPU i" || fail "-cc cpu: $out"
  # One rank per emulated node, the common Cray job shape: the nodes share the host's
  # CPUs, so the two ranks must not be stacked on one CPU.
  out=$(aprun -n 2 -N 1 grep Cpus_allowed_list /proc/self/status 2>&1)
  m0=$(echo "$out" | sed -n 's/^\[0\] Cpus_allowed_list:[[:space:]]*//p')
  m1=$(echo "$out" | sed -n 's/^\[1\] Cpus_allowed_list:[[:space:]]*//p')
  [ -n "$m0" ] && [ -n "$m1" ] && [ "$m0" != "$m1" ] &&
    pass "aprun -n 2 -N 1 (default -cc cpu): the ranks of two nodes on CPUs $m0 and $m1" ||
    fail "aprun -n 2 -N 1: both ranks on one CPU or unbound: $out"
  # More PEs than CPUs: the ranks must share, and aprun says so.
  out=$(aprun -n $((ncpu + 1)) -N 1 true 2>&1)
  echo "$out" | grep -q "ranks share CPUs" && pass "aprun -n $((ncpu + 1)) -N 1: says the ranks share CPUs" ||
    fail "aprun -n $((ncpu + 1)) -N 1 gave no note of shared CPUs: $out"
fi
out=$(aprun -n 1 -cc none grep Cpus_allowed_list /proc/self/status 2>&1)
echo "$out" | grep -q "Cpus_allowed_list:[[:space:]]*$all\$" && pass "-cc none: unbound ($all)" || fail "-cc none: $out"

# Options aprun does not map are refused by name; bad values too.
out=$(aprun -n 2 -m 1G ./ring 2>&1) && fail "aprun -m ran"
echo "$out" | grep -q "option -m is not supported" && pass "aprun -m: refused by name" || fail "aprun -m: $out"
out=$(aprun -n 0 ./ring 2>&1) && fail "aprun -n 0 ran"
echo "$out" | grep -q -- "-n must be at least 1" || fail "aprun -n 0: $out"
out=$(aprun -n 2 ./ring : -n 2 ./ring 2>&1) && fail "MPMD ran"
echo "$out" | grep -q "MPMD" || fail "aprun MPMD: $out"
out=$(aprun -n 2 -e NICEMU_APRUN_TEST=a=b sh -c 'echo "v=$NICEMU_APRUN_TEST"' 2>&1)
[ "$(echo "$out" | grep -c 'v=a=b')" -eq 2 ] && pass "-e VAR=value reaches every rank" || fail "-e: $out"

# nicemuctl status: each node's coordinates on the torus.
serve_daemons "$TMP/env" "$TMP/served.log" --nodes 2
out=$(NICEMU_TORUS=1x1x2 "$CTL" --rundir "$TMP/run" status 2>&1)
echo "$out" | grep -q 'mesh *(0, 0, 1) on the 1x1x2 torus' && pass "nicemuctl status shows the mesh" ||
  fail "nicemuctl status mesh: $out"
out=$("$CTL" --rundir "$TMP/run" status --json 2>&1)
echo "$out" | grep -q '"torus": "2x1x1"' || fail "nicemuctl status --json mesh: $out"

finish "craype-$mode"
