#!/usr/bin/env bash
# The DMAPP suite (dmapp_suite.c) under nicemu-run: 4 PEs on one emulated node, then 4 PEs
# over two nodes, then 3 PEs with the smallest symmetric heap the suite fits in. Every
# daemon started is gone afterwards. Usage: test_dmapp.sh BUILD_DIR
set -u
. "$(dirname "$0")/lib.sh"
use_build "${1:-}" tools/nicemu-run/nicemu-run tests/integration/dmapp_suite examples/dmapp_histogram  # CTL, RUN
suite=$BUILD/tests/integration/dmapp_suite
hist=$BUILD/examples/dmapp_histogram
need_cmd python3
test_init test_dmapp
# Only what this test started: the daemons of its private run directory.
rundir=$TMP
KILL_RUNDIR=$rundir
export NICEMU_RUNDIR=$rundir

for nodes in 1 2; do
  out=$("$RUN" -n 4 --nodes $nodes --timeout 50 --rundir "$rundir" "$suite" 2>&1) || die "suite on $nodes node(s): $out"
  grep -q "checks passed" <<<"$out" || die "suite on $nodes node(s) did not report: $out"
  echo "$nodes node(s): $(echo "$out" | grep 'checks passed')"
done
out=$(XT_SYMMETRIC_HEAP_SIZE=16M "$RUN" -n 3 --nodes 2 --timeout 50 --rundir "$rundir" "$suite" 2>&1) \
  || die "suite with XT_SYMMETRIC_HEAP_SIZE=16M: $out"
echo "$out" | grep 'checks passed'
# A malformed heap size is refused at init with a message, not a crash.
out=$(XT_SYMMETRIC_HEAP_SIZE=lots "$RUN" -n 2 --timeout 20 --rundir "$rundir" "$suite" 2>&1) && die "malformed XT_SYMMETRIC_HEAP_SIZE accepted: $out"
grep -q "XT_SYMMETRIC_HEAP_SIZE is malformed" <<<"$out" || die "no message for a malformed heap size: $out"
# A CQ overrun (made by the program, dmapp_overrun.c) is an error return, not an abort
# or a hang, and the library goes on; with every request's event lost, NO_SPACE.
overrun=$BUILD/tests/integration/dmapp_overrun
need_exec "$overrun"
for mode in "" --lose-all; do
  out=$("$RUN" -n 2 --nodes 2 --timeout 40 --rundir "$rundir" "$overrun" $mode 2>&1) ||
    die "dmapp_overrun $mode: $out"
  grep -q "completion queue overrun: .* requests in flight failed" <<<"$out" || die "dmapp_overrun $mode said nothing: $out"
  echo "$out" | grep 'checks passed'
done
sleep 0.2
pgrep -f -- "--rundir $rundir" >/dev/null && die "daemons left running"

# FMA or BTE by the offload threshold, seen in the daemon's counter totals: one PUT and one
# GET per PE (2 PEs) of BYTES with THRESHOLD. Daemons kept across jobs by --daemons-only.
serve_daemons "$rundir/env" "$rundir/serve.log" --rundir "$rundir"
totals() {
  sleep 0.6  # the daemon folds client counters into its totals every 250 ms
  NICEMU_RUNDIR=$rundir "$CTL" stats --json | python3 -c '
import json, sys
t = json.load(sys.stdin)["nodes"][0]["totals"]
print(t["fma_put_posts"] + t["fma_get_posts"], t["rdma_posts"])'
}
probe() {  # BYTES THRESHOLD -> "fma_delta rdma_delta"
  local before after
  before=$(totals)
  "$RUN" -n 2 --rundir "$rundir" --timeout 30 "$suite" --probe "$1" "$2" >/dev/null 2>&1 || die "probe $1 $2 failed"
  after=$(totals)
  python3 -c "b='$before'.split(); a='$after'.split(); print(int(a[0])-int(b[0]), int(a[1])-int(b[1]))"
}
[ "$(probe 4096 4096)" = "4 0" ] || die "4096 B at the default threshold did not all go to FMA: $(probe 4096 4096)"
[ "$(probe 4100 4096)" = "0 4" ] || die "4100 B above the threshold did not all go to the BTE"
[ "$(probe 64 0)" = "0 4" ] || die "threshold 0 did not send 64 B to the BTE"
[ "$(probe 1048576 4294967295)" = "4 0" ] || die "the largest threshold did not keep 1 MiB on FMA"
echo "offload threshold: FMA up to it, BTE above it (daemon counters)"
# A failed AMO may have taken effect before its response was lost (error_done=1: always):
# DMAPP must report it, not repost it and add twice (tools/fault-campaign found the
# histogram's total too high). The job fails; no bin may be over-counted.
NICEMU_RUNDIR=$rundir "$CTL" fault reset seed=1 amo.error=0.05 error_done=1 >/dev/null 2>&1 ||
  die "nicemuctl fault reset refused"
out=$("$RUN" -n 2 --nodes 1 --rundir "$rundir" --timeout 30 "$hist" 20000 2>&1) &&
  die "dmapp_histogram passed although AMOs failed: $out"
grep -q MISMATCH <<<"$out" && die "a failed AMO was reposted (histogram over-counted): $out"
NICEMU_RUNDIR=$rundir "$CTL" fault off >/dev/null 2>&1 || die "nicemuctl fault off refused"
out=$("$RUN" -n 2 --nodes 1 --rundir "$rundir" --timeout 30 "$hist" 20000 2>&1) ||
  die "dmapp_histogram without faults: $out"
grep -q "matches the serial recount" <<<"$out" || die "dmapp_histogram without faults: $out"
echo "failed AMOs reported, not reposted (amo.error=0.05 error_done=1)"
finish dmapp
