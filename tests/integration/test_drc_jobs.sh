#!/usr/bin/env bash
# Two jobs started separately by nicemu-run share one DRC credential (drc_pair.c): a service
# job as user `bin` on node 0 acquires it and grants it to the client job, started as
# `nobody` with one rank on node 0 and one on node 1; they exchange SMSG, FMA PUT/GET (plain
# and chained), fetch-and-adds and RDMA, verified, with no setting: the kernel refuses the two
# users cross-memory attach, so libugni sends those through the daemons (docs/decisions.md).
# While the grant stands, user `daemon` (granted nothing, knowing id, cookie and ptag) is
# refused on both nodes. The service then revokes (new attaches refused, attached CDMs keep
# sending) and releases (the credential is gone). Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"
use_build "${1:?usage: $0 BUILD_DIR}" tests/integration/drc_pair tools/nicemu-run/nicemu-run
[[ $(id -u) -eq 0 ]] || skip "switching users needs root"
need_cmd setpriv
for u in bin nobody daemon; do id -u "$u" >/dev/null 2>&1 || skip "no user $u"; done
test_init test_drc_jobs
RUNDIR=$TMP/run
MEET=$TMP/meet
PAIR=$BUILD/tests/integration/drc_pair
COUNT=64
start_daemon 0 "$RUNDIR"
start_daemon 1 "$RUNDIR"
mkdir -p "$MEET"
chmod 0755 "$TMP" "$RUNDIR"
chmod 1777 "$MEET"
# The three users must reach the launcher, the program and the directories (a build under a
# 0700 home would otherwise fail each job with only "Permission denied" in its output).
for u in bin nobody daemon; do
  python3 "$(dirname "$0")/../../tools/lib/user_access.py" --user "$u" --clear-groups --exec "$RUN" --exec "$PAIR" \
    --dir "$RUNDIR" --dir "$MEET" || die "user $u cannot reach the build or the test's directories (above)"
done

# as USER CMD...: CMD as USER with its own group only.
as() {
  local u=$1
  shift
  setpriv --reuid="$(id -u "$u")" --regid="$(id -g "$u")" --clear-groups -- "$@"
}
# A launcher killed by the EXIT trap would leave its ranks: SIGTERM first (nicemu-run kills
# its ranks), then whatever still names the meeting directory (only this test's ranks).
LAUNCHERS=()
# shellcheck disable=SC2317  # called by lib.sh's EXIT trap
test_cleanup() {
  local p
  for p in ${LAUNCHERS[@]+"${LAUNCHERS[@]}"}; do kill -TERM "$p" 2>/dev/null; done
  for p in ${LAUNCHERS[@]+"${LAUNCHERS[@]}"}; do
    for _ in $(seq 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  done
  pkill -KILL -f -- "$PAIR [a-z]+ $MEET" 2>/dev/null
}

as bin "$RUN" --rundir "$RUNDIR" --nodes 1 -n 1 --timeout 120 -- "$PAIR" serve "$MEET" 2 "$COUNT" \
  >"$TMP/serve.log" 2>&1 </dev/null &
SERVE=$!
as nobody "$RUN" --rundir "$RUNDIR" --nodes 2 -n 2 --timeout 120 -- "$PAIR" client "$MEET" "$COUNT" \
  >"$TMP/client.log" 2>&1 </dev/null &
CLIENT=$!
LAUNCHERS=("$SERVE" "$CLIENT")
BG_PIDS=("$SERVE" "$CLIENT")

# While the client job is granted: `daemon`, outside both jobs, on each node.
if wait_until 600 test -f "$MEET/granted" -a -f "$MEET/serve.0"; then
  for node in 0 1; do
    if as daemon env -i NICEMU_RUNDIR="$RUNDIR" NICEMU_NODE="$node" "$PAIR" probe "$MEET" \
        >"$TMP/probe$node.log" 2>&1 </dev/null && grep -q "refused" "$TMP/probe$node.log"; then
      pass "ungranted uid refused on node $node (drc_access, GNI_GetPtag, attach, grant, release)"
    else
      fail "ungranted uid on node $node"; show_log "$TMP/probe$node.log"
    fi
  done
else
  fail "the service did not grant the credential"
fi
# The service waits for this before it revokes. Written whole and renamed into place, as
# drc_pair writes its own: the service polls for the name and would read a half-written file.
printf '\1\0\0\0' >"$MEET/probed.tmp" && mv -f "$MEET/probed.tmp" "$MEET/probed"

ok=1
wait "$SERVE" || ok=0
wait "$CLIENT" || ok=0
BG_PIDS=()  # reaped: nothing for the EXIT trap to kill
LAUNCHERS=()
if [[ $ok -eq 1 ]] && grep -q "drc_pair serve: ok" "$TMP/serve.log" &&
    [[ $(grep -c "drc_pair client [01]: ok" "$TMP/client.log") -eq 2 ]]; then
  pass "$(grep -h "verified" "$TMP/serve.log" | sed 's/^\[[0-9]*\] //')"
  while read -r line; do pass "$line"; done < <(grep -h "verified" "$TMP/client.log" | sed 's/^\[[0-9]*\] //')
  pass "client job: granted by job id, revoked (attached CDM kept), released"
  grep -q "cross-memory attach to pid .* is refused" "$TMP/serve.log" "$TMP/client.log" &&
    pass "the fallback to the daemons was said" || fail "no fallback message: was cross-memory attach refused?"
  # Both nodes ran posts for the jobs (node 0 for its client rank, node 1 for the other).
  if "$CTL" --rundir "$RUNDIR" status --json >"$TMP/status.json" 2>&1 && python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
nodes = doc if isinstance(doc, list) else doc.get("nodes", [doc])
ops = [n["xmem_fallback"]["daemon_ops"] for n in nodes]
print("posts run by the daemons:", ops)
sys.exit(0 if len(ops) == 2 and min(ops) > 0 else 1)' "$TMP/status.json"; then
    pass "nicemuctl status: both daemons ran posts for the two users' processes"
  else
    fail "nicemuctl status xmem_fallback"; show_log "$TMP/status.json"
  fi
else
  fail "the two jobs"; show_log "$TMP/serve.log" "$TMP/client.log"
fi
# The released credential is on neither daemon.
expect_no_drc_credentials "$RUNDIR"
finish test_drc_jobs 0 1
