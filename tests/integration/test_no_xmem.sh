#!/usr/bin/env bash
# Ranks under a seccomp filter that refuses process_vm_readv/writev (no_xmem.c), as in a
# container whose profile denies them, with no setting: libugni finds its same-host peers
# unreachable and sends FMA and AMOs through the daemon, RDMA through its BTE engine
# (docs/decisions.md, "Where the kernel refuses cross-memory attach"). On two emulated
# nodes of this host (daemons outside the filter, started here):
#   1. fabric_rma, 4 ranks: FMA PUT/GET, RDMA PUT/GET of 1 MiB, fetch-and-add, CQ writes and
#      chained posts between every pair (same node and across), verified at both ends;
#   2. the same with the filter answering ENOSYS (a profile's default) and EACCES;
#   3. fabric_smsg, 3 ranks: SMSG every pair, every message checked;
#   4. the DMAPP suite (libdmapp over libugni), 4 PEs;
# the fallback said once on each rank's stderr and counted in nicemuctl status.
# Usage: test_no_xmem.sh BUILD_DIR      Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"
use_build "${1:-}" tools/nicemu-run/nicemu-run tests/integration/no_xmem tests/integration/fabric_rma \
  tests/integration/fabric_smsg tests/integration/dmapp_suite
NO_XMEM=$BUILD/tests/integration/no_xmem
need_cmd python3
test_init test_no_xmem
"$NO_XMEM" true 2>"$TMP/probe.err" || skip "no seccomp filter here: $(cat "$TMP/probe.err")"
RUNDIR=$TMP/run
KILL_RUNDIR=$RUNDIR
start_daemon 0 "$RUNDIR"
start_daemon 1 "$RUNDIR"
MSG="cross-memory attach to pid .* is refused"

# job NAME DETAIL LOG WANT PATTERN PROGRAM ARG...: PROGRAM under the filter on both nodes.
job() {
  local name=$1 detail=$2 log=$3 want=$4 pattern=$5
  shift 5
  expect_verified "$name" "$detail" "$log" "$want" "$pattern" \
    timeout -k 5 120 "$RUN" --rundir "$RUNDIR" --nodes 2 -n "$want" --timeout 110 "$NO_XMEM" "$@"
  n=$(grep -c -- "$MSG" "$log")
  [[ $n -ge 1 && $n -le $want ]] && pass "$name: the fallback said once per rank ($n ranks)" ||
    { fail "$name: the fallback said $n times for $want ranks"; show_log "$log"; }
}

job "fabric_rma under seccomp (EPERM)" "FMA, RDMA, AMOs, CQ writes and chains verified by 4 ranks on 2 nodes" \
  "$TMP/rma.log" 4 'rounds with 3 peers verified' "$BUILD/tests/integration/fabric_rma" 3
for e in ENOSYS EACCES; do
  job "fabric_rma under seccomp ($e)" "verified by 4 ranks" "$TMP/rma-$e.log" 4 'rounds with 3 peers verified' \
    -e "$e" "$BUILD/tests/integration/fabric_rma" 2
done
job "fabric_smsg under seccomp" "SMSG between every pair of 3 ranks verified" "$TMP/smsg.log" 3 \
  'messages each way with 2 peers verified' "$BUILD/tests/integration/fabric_smsg" pmi 200

# DMAPP: its suite prints one line for the job.
if timeout -k 5 120 "$RUN" --rundir "$RUNDIR" --nodes 2 -n 4 --timeout 110 "$NO_XMEM" \
    "$BUILD/tests/integration/dmapp_suite" >"$TMP/dmapp.log" 2>&1 && grep -q "checks passed" "$TMP/dmapp.log"; then
  pass "DMAPP suite under seccomp: $(grep -m1 'checks passed' "$TMP/dmapp.log")"
else
  fail "DMAPP suite under seccomp"; show_log "$TMP/dmapp.log"
fi

# Counted: the peers and posts (CDM counters, totals of the counter pages) and the posts the
# daemons ran for them, in nicemuctl status.
"$CTL" --rundir "$RUNDIR" status --json >"$TMP/status.json" 2>"$TMP/status.err" || fail "nicemuctl status"
if python3 - "$TMP/status.json" <<'EOF'; then
import json, sys
doc = json.load(open(sys.argv[1]))
nodes = doc if isinstance(doc, list) else doc.get("nodes", [doc])
x = [n["xmem_fallback"] for n in nodes]
tot = {k: sum(v[k] for v in x) for k in ("peers", "posts", "daemon_ops", "daemon_refused")}
print("xmem_fallback totals:", tot)
sys.exit(0 if tot["peers"] > 0 and tot["posts"] > 0 and tot["daemon_ops"] > 0 and tot["daemon_refused"] == 0 else 1)
EOF
  pass "nicemuctl status counts the fallback (peers, posts, posts run by the daemons; none refused to them)"
else
  fail "nicemuctl status xmem_fallback"; show_log "$TMP/status.json"
fi
"$CTL" --rundir "$RUNDIR" status >"$TMP/status.txt" 2>&1
grep -q "xmem refused" "$TMP/status.txt" && pass "nicemuctl status (text) shows it" ||
  { fail "nicemuctl status text has no xmem line"; show_log "$TMP/status.txt"; }
finish test_no_xmem 0 1
