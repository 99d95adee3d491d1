#!/usr/bin/env bash
# The launcher end to end: nicemu-run starts two daemons for a 4-rank demo job,
# `nicemuctl status --json` lists the ranks while they run, SIGKILL of one rank tears the
# job down with that rank's status (reclaiming a killed rank while its peers live on is
# covered by test_gni), and the daemons nicemu-run
# started are gone afterwards. Usage: test_launcher.sh BUILD_DIR
set -u
. "$(dirname "$0")/lib.sh"
build=${1:?build dir}
RUN=$build/tools/nicemu-run/nicemu-run
ctl=$build/tools/nicemuctl/nicemuctl
demo=$build/examples/gni_ring
need_exec "$RUN" "$ctl" "$demo"
need_cmd python3
test_init test_launcher
rundir=$TMP
KILL_RUNDIR=$rundir
export NICEMU_RUNDIR=$rundir

# 1. The demo passes and nicemu-run stops the daemons it started.
out=$("$RUN" -n 4 --nodes 2 "$demo" 200 2>&1) || die "demo job failed: $out"
grep -q "demo passed" <<<"$out" || die "demo did not pass: $out"
[ "$(echo "$out" | grep -c '^\[0\] [0-3] ')" -eq 4 ] || die "result table lacks 4 ranks: $out"
sleep 0.2
pgrep -f -- "--rundir $rundir" >/dev/null && die "daemons left running after the job"

# 2. A long job: status lists 4 ranks over 2 nodes while it runs.
"$RUN" -n 4 --nodes 2 "$demo" 100000000 >"$rundir/job.log" 2>&1 &
job=$!
BG_PIDS+=("$job")
listed=0
for _ in $(seq 1 100); do
  n=$("$ctl" status --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(sum(len(n["cdms"]) for n in d["nodes"]), len(d["nodes"]))' 2>/dev/null) || n=""
  if [ "$n" = "4 2" ]; then listed=1; break; fi
  sleep 0.1
done
[ "$listed" -eq 1 ] || die "nicemuctl status did not list 4 ranks on 2 nodes (last: $n)"

# 3. SIGKILL one rank: the job ends with 128+9 and the launcher says why.
victim=$("$ctl" status --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d["nodes"][1]["cdms"][0]["pid"])')
kill -KILL "$victim"
rc=0
wait "$job" || rc=$?
BG_PIDS=()
[ "$rc" -eq 137 ] || die "job exit status $rc, expected 137; log: $(cat "$rundir/job.log")"
grep -qi "signal 9\|killed\|SIGKILL" "$rundir/job.log" || die "launcher did not say why the job failed: $(tail -5 "$rundir/job.log")"
sleep 0.2
pgrep -f -- "--rundir $rundir" >/dev/null && die "daemons left running after the failed job"
finish launcher
