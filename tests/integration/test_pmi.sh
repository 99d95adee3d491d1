#!/usr/bin/env bash
# Integration test of libpmi and nicemu-run's PMI server and job control, PMI only
# (--no-nic, no daemons): the pmi_check conformance program on 4 ranks / 2 nodes and
# other shapes, exit-status propagation and teardown of the other ranks, PMI_Abort,
# barrier deadlock detection, timeout, signals to the launcher, output tagging. With `hydra`,
# only pmi_check under MPICH's Hydra instead (its own test: 77 where Hydra is not installed).
# Usage: test_pmi.sh NICEMU_RUN PMI_CHECK [hydra]     Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"

RUN=${1:-}
CHECK=${2:-}
PHASE=${3:-}
[[ -z "$PHASE" || "$PHASE" == hydra ]] || die "unknown phase '$PHASE' (the only one is hydra)"
if [[ -z "$RUN" || -z "$CHECK" || ! -x "$RUN" || ! -x "$CHECK" ]]; then
  echo "SKIP: usage: $0 path/to/nicemu-run path/to/pmi_check" >&2
  exit 77
fi

# Beyond BG_PIDS (background launchers): any rank still alive.
test_cleanup() {
  local f p
  for f in "$TMP"/pid.*; do
    [[ -e "$f" ]] || continue
    p=$(cat "$f" 2>/dev/null) && [[ -n "$p" ]] && kill -KILL "$p" 2>/dev/null
  done
}
test_init test_pmi

# Interoperability: pmi_check under MPICH's Hydra, a PMI-1 server we did not write.
if [[ $PHASE == hydra ]]; then
  command -v mpiexec.hydra >/dev/null 2>&1 || skip "mpiexec.hydra not installed (Debian mpich)"
  capture hydra 90 mpiexec.hydra -n 3 "$CHECK" 3 1
  if expect_rc hydra 0 && [[ $(grep -c 'pmi_check: rank [0-2]: OK' "$TMP/hydra.out") -eq 3 ]]; then
    pass "pmi_check under Hydra (mpiexec.hydra)"
  else
    fail "hydra"; show hydra
  fi
  # Without auto-cleanup, Hydra tells the survivors of a rank that left without PMI_Finalize
  # with SIGUSR1, whose default action would end them too: libpmi takes the notice.
  capture hydra-peer-dies 90 mpiexec.hydra -disable-auto-cleanup -n 3 "$CHECK" peer-dies
  if [[ $(grep -c 'pmi_check: rank [02] outlived its peer' "$TMP/hydra-peer-dies.out") -eq 2 ]]; then
    pass "under Hydra -disable-auto-cleanup, the ranks outlive a peer that died"
  else
    fail "hydra-peer-dies"; show hydra-peer-dies
  fi
  finish pmi-hydra
fi

# job NAME ARGS...: runs nicemu-run with ARGS under an outer time limit, output in
# $TMP/NAME.out / .err, status in RC, wall time in ELAPSED (seconds).
job() { capture "$1" 90 "$RUN" "${@:2}"; }
# No process whose pid a rank recorded may still be alive.
no_survivors() {
  local f p
  for f in "$TMP"/pid.*; do
    [[ -e "$f" ]] || continue
    p=$(cat "$f")
    if kill -0 "$p" 2>/dev/null; then fail "$1: rank process $p survived the job"; return 1; fi
  done
  rm -f "$TMP"/pid.*
  return 0
}

# 1. Conformance on 4 ranks over 2 nodes.
job full --no-nic -n 4 --nodes 2 --timeout 60 "$CHECK" 4 2
if expect_rc full 0; then
  ok=$(grep -c '^\[[0-3]\] pmi_check: rank [0-3]: OK$' "$TMP/full.out")
  if [[ $ok -ne 4 ]] || grep -q FAIL "$TMP/full.out"; then fail "full: $ok/4 ranks OK"; show full
  else pass "pmi_check, 4 ranks on 2 nodes"; fi
  if grep -qv '^\[[0-3]\] ' "$TMP/full.out"; then fail "full: untagged output line"; show full
  else pass "every output line is prefixed [rank]"; fi
fi

# 2. Uneven blocks (3 + 2) and more nodes than ranks.
job uneven --no-nic -n 5 --nodes 2 --timeout 60 "$CHECK" 5 2
expect_rc uneven 0 && pass "pmi_check, 5 ranks on 2 nodes"
job sparse --no-nic -n 2 --nodes 4 --timeout 60 "$CHECK" 2 4
expect_rc sparse 0 && pass "pmi_check, 2 ranks on 4 nodes"

# 3. Ranks reaching the server over TCP (PMI_PORT + PMI_ID).
job port --no-nic --pmi-port -n 3 --nodes 3 --timeout 60 "$CHECK" 3 3
expect_rc port 0 && pass "pmi_check over PMI_PORT"

# 4. Singleton: no process manager at all.
capture single 30 env -u PMI_FD -u PMI_PORT -u PMI_RANK -u PMI_SIZE -u PMI_ID -u PMI_GNI_LOC_ADDR "$CHECK" 1 1
expect_rc single 0 && pass "pmi_check as a singleton"

# 5. A rank exiting 3: the launcher exits 3, the sleeping ranks are killed.
job exit3 --no-nic -n 4 sh -c \
  'echo $$ > '"$TMP"'/pid.$PMI_RANK; if [ "$PMI_RANK" = 1 ]; then sleep 0.3; exit 3; fi; exec sleep 1000'
if expect_rc exit3 3; then
  if [[ $ELAPSED -gt 10 ]]; then fail "exit3: took ${ELAPSED}s"; fi
  grep -q 'rank 1 exited with status 3' "$TMP/exit3.err" || { fail "exit3: no reason printed"; show exit3; }
  no_survivors exit3 && pass "rank exit status 3 propagates, other ranks killed"
fi

# 6. Ranks ignoring SIGTERM are killed with SIGKILL after the grace period.
job stubborn --no-nic -n 3 sh -c \
  'trap "" TERM; echo $$ > '"$TMP"'/pid.$PMI_RANK; if [ "$PMI_RANK" = 2 ]; then sleep 0.3; exit 3; fi; exec sleep 1000'
if expect_rc stubborn 3; then
  if [[ $ELAPSED -gt 15 ]]; then fail "stubborn: took ${ELAPSED}s"; fi
  no_survivors stubborn && pass "SIGTERM-immune ranks are SIGKILLed"
fi

# 7. A rank killed by a signal: 128 + signal.
job segv --no-nic -n 2 sh -c 'if [ "$PMI_RANK" = 0 ]; then kill -SEGV $$; fi; exec sleep 1000'
if expect_rc segv 139; then
  grep -q 'rank 0 was killed by signal 11 (SIGSEGV)' "$TMP/segv.err" || { fail "segv: no reason"; show segv; }
  pass "death by signal gives 128+N"
fi

# 8. PMI_Abort(5) from rank 1 while the others wait in a barrier.
job abort --no-nic -n 3 --timeout 60 "$CHECK" abort
if expect_rc abort 5; then
  grep -q 'rank 1 called PMI_Abort with exit code 5' "$TMP/abort.err" || { fail "abort: no reason"; show abort; }
  pass "PMI_Abort ends the job with its exit code"
fi

# 9. A rank exiting without entering a barrier the others wait in: detected, not a hang.
job stuck --no-nic -n 3 --timeout 60 "$CHECK" skip-barrier
if expect_rc stuck 1; then
  grep -q 'can never complete' "$TMP/stuck.err" || { fail "stuck: no reason"; show stuck; }
  [[ $ELAPSED -lt 30 ]] && pass "barrier deadlock detected"
fi

# 10. --timeout.
job timeout --no-nic -n 2 --timeout 1 sh -c 'echo $$ > '"$TMP"'/pid.$PMI_RANK; exec sleep 1000'
if expect_rc timeout 124; then
  [[ $ELAPSED -lt 10 ]] || fail "timeout: took ${ELAPSED}s"
  no_survivors timeout && pass "--timeout kills the job (status 124)"
fi

# 11. SIGTERM to the launcher tears the job down (status 128+15).
"$RUN" --no-nic -n 3 sh -c 'echo $$ > '"$TMP"'/pid.$PMI_RANK; exec sleep 1000' \
  >"$TMP/term.out" 2>"$TMP/term.err" </dev/null &
launcher=$!
BG_PIDS+=("$launcher")
for _ in $(seq 100); do [[ $(ls "$TMP"/pid.* 2>/dev/null | wc -l) -eq 3 ]] && break; sleep 0.1; done
kill -TERM "$launcher"
for _ in $(seq 100); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$launcher" 2>/dev/null; then
  fail "term: launcher still running 10 s after SIGTERM"
else
  wait "$launcher"; RC=$?
  expect_rc term 143 && no_survivors term && pass "SIGTERM to the launcher ends the job"
fi

# 12. Output: tagged per stream, partial last lines flushed; untagged with --no-tag-output.
job tags --no-nic -n 2 sh -c 'echo out-$PMI_RANK; echo err-$PMI_RANK >&2; printf tail-$PMI_RANK'
if expect_rc tags 0; then
  for r in 0 1; do
    grep -qx "\[$r\] out-$r" "$TMP/tags.out" && grep -qx "\[$r\] tail-$r" "$TMP/tags.out" &&
      grep -qx "\[$r\] err-$r" "$TMP/tags.err" || { fail "tags: rank $r lines"; show tags; }
  done
  pass "stdout/stderr tagged separately"
fi
job notag --no-nic --no-tag-output -n 2 sh -c 'echo plain-$PMI_RANK'
expect_rc notag 0 && [[ $(grep -cx 'plain-[01]' "$TMP/notag.out") -eq 2 ]] &&
  pass "--no-tag-output" || { fail "notag"; show notag; }

# 13. Environment of a PMI-only rank.
job env --no-nic -n 2 --nodes 2 sh -c 'echo "$PMI_RANK $PMI_SIZE $ALPS_APP_PE ${PMI_GNI_PTAG-none} ${PMI_FD:+fd}"'
expect_rc env 0 && grep -qx '\[1\] 1 2 1 none fd' "$TMP/env.out" && pass "rank environment" ||
  { fail "env"; show env; }

# 14. Programs that cannot run, and bad usage.
job missing --no-nic -n 2 "$TMP/no-such-program"
expect_rc missing 127 && pass "missing program: 127"
job usage --no-nic "$CHECK"
[[ $RC -ne 0 ]] && pass "missing -n is an error" || fail "usage: accepted a job without -n"

finish pmi
