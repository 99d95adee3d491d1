#!/usr/bin/env bash
# The DMAPP suite (dmapp_suite.c) under nicemu-run: 4 PEs on one emulated node, then 4 PEs
# over two nodes, then 3 PEs with the smallest symmetric heap the suite fits in. Every
# daemon started is gone afterwards. Usage: test_dmapp.sh BUILD_DIR
set -u
build=${1:?build dir}
run=$build/tools/nicemu-run/nicemu-run
suite=$build/tests/integration/dmapp_suite
for b in "$run" "$suite"; do [ -x "$b" ] || { echo "missing $b"; exit 77; }; done

rundir=$(mktemp -d /tmp/nicemu-dmapp-XXXXXX)
export NICEMU_RUNDIR=$rundir
cleanup() {
  # Only what this test started: the daemons of its private run directory.
  pkill -KILL -f -- "--rundir $rundir" 2>/dev/null
  rm -rf "$rundir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

for nodes in 1 2; do
  out=$("$run" -n 4 --nodes $nodes --timeout 50 --rundir "$rundir" "$suite" 2>&1) || fail "suite on $nodes node(s): $out"
  echo "$out" | grep -q "checks passed" || fail "suite on $nodes node(s) did not report: $out"
  echo "$nodes node(s): $(echo "$out" | grep 'checks passed')"
done
out=$(XT_SYMMETRIC_HEAP_SIZE=16M "$run" -n 3 --nodes 2 --timeout 50 --rundir "$rundir" "$suite" 2>&1) \
  || fail "suite with XT_SYMMETRIC_HEAP_SIZE=16M: $out"
echo "$out" | grep 'checks passed'
# A malformed heap size is refused at init with a message, not a crash.
out=$(XT_SYMMETRIC_HEAP_SIZE=lots "$run" -n 2 --timeout 20 --rundir "$rundir" "$suite" 2>&1) && fail "malformed XT_SYMMETRIC_HEAP_SIZE accepted: $out"
echo "$out" | grep -q "XT_SYMMETRIC_HEAP_SIZE is malformed" || fail "no message for a malformed heap size: $out"
sleep 0.2
pgrep -f -- "--rundir $rundir" >/dev/null && fail "daemons left running"
echo "dmapp: all checks passed"
exit 0
