#!/usr/bin/env bash
# Fault injection on the ofi fabric as on the UDP fabric (docs/ofi-fabric.md, "Faults"):
# two network namespace hosts, fabric_faults under MPICH's Hydra (rank 0 posts an FMA PUT and
# an RDMA PUT per phase to rank 1), the same phases with the daemons on --fabric-data udp,
# then ofi over tcp;ofi_rxm, then ofi over udp;ofi_rxd. The faults are set on host 0's
# daemon (the initiator's) between phases:
#   1 none; 2 put.error=1 rdma_put.error=1 (a transaction rule); 3 a link_down window of
#   600 ms (shorter than the fabric's 1.8 s retry budget: delayed, completes); 4 one of 5 s
#   (longer: fails); 5 packet.drop=0.5 (retransmitted, completes); 6 none again; 7 a target
#   process on host 1 (a CDM of the job's credential that rank 1 forked) killed (SIGKILL)
#   while 16 posts (PUTs, RDMA PUTs, fetching AMOs) stream to it, then the phase's posts to
#   the dead process; 8 host 0's daemon shut down (NIC down).
# Every phase's post return codes, CQE statuses and recoverable flags over ofi must equal
# those over udp, and so must the stream's error statuses (PEER_GONE, not recoverable: the
# ofi port asks the daemons whether the target lives); the expected outcome of each is
# checked too, every streamed post completes within 5 s of the first error, and over ofi
# only phases 1 and 6 of 1..6 went rank to rank (the CDM's ofi_ops: 4).
# Then `fabric_rma errors` whole over udp;ofi_rxd, with a 1 s post timeout
# (NICEMU_OFI_POST_TIMEOUT_MS): the six posts through a key the target does not know each
# complete with an error event (the port's post timeout), nothing is written; later posts to
# that target go through a fresh endpoint, so the AMOs' PROTECTION and READ_ONLY, the
# chained CQ write's error and the PUT after the errors (its bytes checked) all come.
# Needs root, ip, python3, mpiexec.hydra and a libugni built with libfabric; otherwise 77.
# Usage: test_fabric_ofi_faults.sh BUILD_DIR ofi|no-ofi     Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"

use_build "${1:-}" tests/integration/fabric_faults
[[ ${2:-} == ofi ]] || skip "libugni built without libfabric (meson -Dofi; Debian libfabric-dev)"
[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces)"
need_cmd ip python3
HYDRA=$(command -v mpiexec.hydra) || skip "mpiexec.hydra not installed (Debian mpich)"
command -v fi_info >/dev/null && { fi_info -p 'tcp;ofi_rxm' >/dev/null 2>&1 || skip "libfabric has no tcp;ofi_rxm"; }

netns_test_hosts test_fabric_ofi_faults ff 215 2
PROG=$BUILD/tests/integration/fabric_faults
PHASES=8
KILL=7  # the phase that kills the target
# Runs with the kill (1) or with phase 7 as phase 6 (0). udp;ofi_rxd never fails a post to
# a dead peer itself: the port's post timeout (5 s) does, then the verdict (PEER_GONE).
WITH_KILL=1

# cdm_ofi_ops: the ofi_ops counter of host 0's CDM (the initiator's), as its daemon last
# copied it (every 20 ms here).
cdm_ofi_ops() {
  "$CTL" --rundir "$TMP/host0" --node 0 stats --json 2>/dev/null | python3 -c '
import json, sys
n = json.load(sys.stdin)["nodes"][0]
print(sum(c["counters"].get("ofi_ops", 0) for c in n["cdms"]))'
}

# run_phases NAME FABRIC_DATA [PROVIDER]: daemons on both hosts, the job, the phases; the
# job's output in $TMP/NAME.log, the ofi ops before the NIC-down phase in $TMP/NAME.ops.
run_phases() {
  local name=$1 prov=${3:-} dir=$TMP/$1 peer k t0 args=(--fabric-data "$2" --stats-interval-ms 20) job
  [[ -n $prov ]] && args+=(--ofi-provider "$prov")
  mkdir -p "$dir"
  for i in 0 1; do fabric_daemon "$i" "${args[@]}"; done
  fabric_cred 1
  netns_hydra 120 2 1 "$TMP/$name.log" env FAULTS_DIR="$dir" FAULTS_KILL=$((WITH_KILL ? KILL : 0)) "$PROG" pmi $PHASES &
  job=$!
  BG_PIDS+=("$job")
  wait_until 300 test -s "$dir/ready" || { fail "$name: the job did not start"; show_log "$TMP/$name.log"; return 1; }
  peer=$(awk '{print $2}' "$dir/ready")
  fault() { "$CTL" --rundir "$TMP/host0" --node 0 fault "$@" >/dev/null 2>>"$TMP/$name.fault.err"; }
  for ((k = 1; k <= PHASES; k++)); do
    case $k in
      2) fault reset seed=1 put.error=1 rdma_put.error=1 ;;
      3) fault reset seed=1 "link_down=$peer@0..600ms" ;;
      4) fault reset seed=1 "link_down=$peer@0..5000ms"; t0=$(date +%s.%N) ;;
      5) # the window over and the channel back (probed every 500 ms)
         sleep "$(python3 -c "import sys; print(max(0.0, 6.0 - ($(date +%s.%N) - $t0)))")"
         fault reset seed=1 packet.drop=0.5 ;;
      6) fault off ;;
      7) # the victim killed once the stream runs
         [[ $WITH_KILL -eq 1 ]] && (wait_until 300 test -e "$dir/streaming.$k" && sleep 0.3 && kill -KILL "$(awk '{print $1}' "$dir/victim")") &
         BG_PIDS+=($!) ;;
      8) stop_daemon 0 ;;
    esac
    touch "$dir/go.$k"
    wait_until 600 test -e "$dir/done.$k" || { fail "$name: phase $k did not end"; break; }
    # The posts each phase moved rank to rank (the daemon is gone in the last).
    [[ $k -lt $PHASES ]] && sleep 0.1 && cdm_ofi_ops >>"$TMP/$name.ops"
  done
  wait "$job" || { fail "$name: the job exited non-zero"; show_log "$TMP/$name.log"; }
  wait "${BG_PIDS[@]:1}" 2>/dev/null
  BG_PIDS=()
  stop_daemons
  DAEMON_PID=()
  unset -f fault
  return 0
}

# outcome NAME: the phases' results without the times ("K kind rc R status S recoverable F"),
# and the stream's error statuses and recoverable flags.
outcome() {
  grep '^phase ' "$TMP/$1.log" | awk '{print $2, $3, "rc", $5, "status", $7, "recoverable", $9}'
  grep '^kill ' "$TMP/$1.log" | awk '{print "stream", $2, "statuses", $4, "recoverable", $6, "hung", $8}'
}
# field NAME K KIND COLUMN: one value of one post.
field() { awk -v k="$2" -v t="$3" -v c="$4" '$1 == "phase" && $2 == k && $3 == t {print $c}' "$TMP/$1.log"; }

# check NAME: the expected outcome of each phase on one fabric.
check() {
  local n=$1 bad=0 k t s
  [[ $(grep -c '^phase ' "$TMP/$n.log") -eq $((2 * PHASES)) ]] || { fail "$n: not every post reported"; show_log "$TMP/$n.log"; return; }
  local oks="1 3 5 6" errs="2 4 $KILL $PHASES"
  [[ $WITH_KILL -eq 1 ]] || oks+=" $KILL" errs="2 4 $PHASES"
  for k in $oks; do for t in fma rdma; do
    [[ $(field "$n" $k $t 7) == 0 ]] || { fail "$n: phase $k $t status $(field "$n" $k $t 7), want 0"; bad=1; }
  done; done
  for k in $errs; do
    s=$(field "$n" $k fma 7)
    [[ $s -gt 0 ]] || { fail "$n: phase $k fma status $s, want an error"; bad=1; }
  done
  # The victim dead: PEER_GONE (4), as the daemons report a CDM whose process died.
  local kl="(no kill)"
  [[ $WITH_KILL -eq 1 ]] && for t in fma rdma; do
    [[ $(field "$n" $KILL $t 7) == 4 && $(field "$n" $KILL $t 9) == 0 ]] ||
      { fail "$n: phase $KILL $t status $(field "$n" $KILL $t 7) recoverable $(field "$n" $KILL $t 9), want 4, 0"; bad=1; }
  done
  [[ $WITH_KILL -eq 1 ]] && kl=$(grep "^kill $KILL " "$TMP/$n.log")
  if [[ $WITH_KILL -eq 0 ]]; then
    :
  elif [[ -z $kl ]]; then
    fail "$n: no line from the stream"; bad=1
  else
    awk '{exit !($4 ~ /(^|,)4(,|$)/ && $8 == 0 && $10 >= 0 && $10 < 5000)}' <<<"$kl" ||
      { fail "$n: the stream: $kl (want PEER_GONE among the statuses, none hung, drained within 5 s)"; bad=1; }
  fi
  for t in fma rdma; do
    [[ $(field "$n" 2 $t 9) == 1 ]] || { fail "$n: phase 2 $t not recoverable"; bad=1; }
  done
  # The short window delays the first post until the link is up; the long one outlasts the
  # retry budget (1.8 s) before the post fails.
  [[ $(field "$n" 3 fma 11) -ge 300 ]] || { fail "$n: phase 3 took $(field "$n" 3 fma 11) ms, the window was 600 ms"; bad=1; }
  [[ $(field "$n" 4 fma 11) -ge 1500 ]] || { fail "$n: phase 4 failed after $(field "$n" 4 fma 11) ms"; bad=1; }
  local last=$((WITH_KILL ? 6 : KILL))  # the last phase whose PUTs reached rank 1
  grep -q "^target fma $last rdma $last\$" "$TMP/$n.log" || { fail "$n: the target's words are not phase $last's"; bad=1; }
  [[ $bad -eq 0 ]] && pass "$n: $(outcome "$n" | awk '$1 != "stream" {printf "%s%s %s:%s", (NR > 1 ? ", " : ""), $1, $2, $6}'); $kl"
  [[ $bad -eq 0 ]] || show_log "$TMP/$n.log"
}

# compare NAME: NAME's outcome equals udp's, and only phases 1 and 6 went over ofi.
compare() {
  local n=$1 ops
  # Without the kill: udp's outcome without phase 7 and the stream.
  local drop='^$'
  [[ $WITH_KILL -eq 1 ]] || drop="^($KILL |stream )"
  if diff <(outcome udp | grep -Ev "$drop") <(outcome "$n" | grep -Ev "$drop") >"$TMP/$n.diff"; then
    pass "$n: every post completes as over udp (return codes, statuses, recoverable flags)"
  else
    fail "$n: completions differ from udp's (< udp, > $n)"; show_log "$TMP/$n.diff"
  fi
  # Per phase 1..6: how many of its two posts went rank to rank.
  ops=$(head -6 "$TMP/$n.ops" | awk '{printf "%s%d", (NR > 1 ? " " : ""), $1 - prev; prev = $1}')
  [[ $ops == "2 0 0 0 0 2" ]] &&
    pass "$n: phases 1 and 6 rank to rank, the faulted ones through the daemons or failed in libugni (ofi posts by phase: $ops)" ||
    fail "$n: ofi posts by phase 1..6: $ops, want 2 0 0 0 0 2"
  printf '    %-14s fma ms by phase:' "$n"; awk '$1 == "phase" && $3 == "fma" {printf " %s", $11}' "$TMP/$n.log"; echo
}

run_phases udp udp && check udp
printf '    %-14s fma ms by phase:' udp; awk '$1 == "phase" && $3 == "fma" {printf " %s", $11}' "$TMP/udp.log"; echo
run_phases ofi-tcp ofi 'tcp;ofi_rxm' && { check ofi-tcp; compare ofi-tcp; }
if fi_info -p 'udp;ofi_rxd' >/dev/null 2>&1; then
  run_phases ofi-rxd ofi 'udp;ofi_rxd' && { check ofi-rxd; compare ofi-rxd; }
  # A key the target does not know: udp;ofi_rxd drops the access and never fails it; the
  # port's post timeout (1 s here) gives each post its error event, none hangs, nothing is
  # written, and the rest of fabric_rma errors runs through the port's fresh endpoint.
  for i in 0 1; do fabric_daemon "$i" --fabric-data ofi --ofi-provider 'udp;ofi_rxd'; done
  fabric_cred 1
  t0=$SECONDS
  if netns_hydra 180 2 1 "$TMP/rxd-errors.log" env NICEMU_OFI_POST_TIMEOUT_MS=1000 "$BUILD/tests/integration/fabric_rma" errors &&
      rma_errors_seen "$TMP/rxd-errors.log" &&
      grep -q 'PUT after the errors landed' "$TMP/rxd-errors.log"; then
    pass "ofi-rxd: fabric_rma errors whole: six posts through an unknown key error events, AMO PROTECTION / READ_ONLY, the PUT after them landed, in $((SECONDS - t0)) s"
    grep -o 'status [0-9]*' "$TMP/rxd-errors.log" | sort | uniq -c | sed 's/^/    /'
  else
    fail "ofi-rxd: posts through an unknown key"; show_log "$TMP/rxd-errors.log"
  fi
  stop_daemons
  DAEMON_PID=()
else
  echo "    udp;ofi_rxd: not in this libfabric, phase skipped"
fi
finish fabric-ofi-faults 0 1
