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
  grep -q "checks passed" <<<"$out" || fail "suite on $nodes node(s) did not report: $out"
  echo "$nodes node(s): $(echo "$out" | grep 'checks passed')"
done
out=$(XT_SYMMETRIC_HEAP_SIZE=16M "$run" -n 3 --nodes 2 --timeout 50 --rundir "$rundir" "$suite" 2>&1) \
  || fail "suite with XT_SYMMETRIC_HEAP_SIZE=16M: $out"
echo "$out" | grep 'checks passed'
# A malformed heap size is refused at init with a message, not a crash.
out=$(XT_SYMMETRIC_HEAP_SIZE=lots "$run" -n 2 --timeout 20 --rundir "$rundir" "$suite" 2>&1) && fail "malformed XT_SYMMETRIC_HEAP_SIZE accepted: $out"
grep -q "XT_SYMMETRIC_HEAP_SIZE is malformed" <<<"$out" || fail "no message for a malformed heap size: $out"
sleep 0.2
pgrep -f -- "--rundir $rundir" >/dev/null && fail "daemons left running"

# FMA or BTE by the offload threshold, seen in the daemon's counter totals: one PUT and one
# GET per PE (2 PEs) of BYTES with THRESHOLD. Daemons kept across jobs by --daemons-only.
ctl=$build/tools/nicemuctl/nicemuctl
if [ -x "$ctl" ] && command -v python3 >/dev/null; then
  "$run" --daemons-only --rundir "$rundir" --env-file "$rundir/env" >/dev/null &
  keeper=$!
  trap 'kill -TERM $keeper 2>/dev/null; wait $keeper 2>/dev/null; cleanup' EXIT
  for _ in $(seq 1 100); do [ -f "$rundir/env" ] && break; sleep 0.1; done
  totals() {
    sleep 0.6  # the daemon folds client counters into its totals every 250 ms
    NICEMU_RUNDIR=$rundir "$ctl" stats --json | python3 -c '
import json, sys
t = json.load(sys.stdin)["nodes"][0]["totals"]
print(t["fma_put_posts"] + t["fma_get_posts"], t["rdma_posts"])'
  }
  probe() {  # BYTES THRESHOLD -> "fma_delta rdma_delta"
    local before after
    before=$(totals)
    "$run" -n 2 --rundir "$rundir" --timeout 30 "$suite" --probe "$1" "$2" >/dev/null 2>&1 || fail "probe $1 $2 failed"
    after=$(totals)
    python3 -c "b='$before'.split(); a='$after'.split(); print(int(a[0])-int(b[0]), int(a[1])-int(b[1]))"
  }
  [ "$(probe 4096 4096)" = "4 0" ] || fail "4096 B at the default threshold did not all go to FMA: $(probe 4096 4096)"
  [ "$(probe 4100 4096)" = "0 4" ] || fail "4100 B above the threshold did not all go to the BTE"
  [ "$(probe 64 0)" = "0 4" ] || fail "threshold 0 did not send 64 B to the BTE"
  [ "$(probe 1048576 4294967295)" = "4 0" ] || fail "the largest threshold did not keep 1 MiB on FMA"
  echo "offload threshold: FMA up to it, BTE above it (daemon counters)"
fi
echo "dmapp: all checks passed"
exit 0
