#!/usr/bin/env bash
# Yama ptrace_scope 2 ("admin-only attach"): processes without CAP_SYS_PTRACE may not attach
# to one another even as the same user, so cross-memory attach between ranks is refused.
# With the scope raised to 2, fabric_rma (FMA PUT/GET, RDMA, fetch-and-add, CQ writes, chained
# posts between every pair, verified at both ends) and fabric_smsg run as an unprivileged user
# on two emulated nodes with no setting: libugni sends what it cannot copy through the daemons
# (root, outside Yama's restriction). The previous scope is restored whatever happens.
# Needs root and a kernel with Yama whose sysctl can be written here (not in most containers).
# Usage: test_yama_xmem.sh BUILD_DIR      Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"
use_build "${1:-}" tools/nicemu-run/nicemu-run tests/integration/fabric_rma tests/integration/fabric_smsg
SCOPE=/proc/sys/kernel/yama/ptrace_scope
[[ $(id -u) -eq 0 ]] || skip "setting ptrace_scope and switching users need root"
[[ -e $SCOPE ]] || skip "no Yama in this kernel ($SCOPE)"
OLD=$(cat "$SCOPE") || skip "cannot read $SCOPE"
# 3 cannot be lowered again before a reboot; 2 is as far as this test goes.
[[ $OLD == 3 ]] && skip "ptrace_scope is 3 (attach disabled until reboot): nothing to raise"
need_cmd setpriv
id -u nobody >/dev/null 2>&1 || skip "no user nobody"
test_init test_yama_xmem
# Written back before anything else is cleaned up, on every exit path (lib.sh's EXIT trap).
# shellcheck disable=SC2317  # called by lib.sh's EXIT trap
test_cleanup() {
  [[ $(cat "$SCOPE" 2>/dev/null) == "$OLD" ]] || echo "$OLD" >"$SCOPE" ||
    echo "FAIL: could not restore $SCOPE to $OLD" >&2
}
echo 2 >"$SCOPE" 2>"$TMP/scope.err" || skip "cannot write $SCOPE: $(cat "$TMP/scope.err")"
[[ $(cat "$SCOPE") == 2 ]] || { echo "$OLD" >"$SCOPE"; skip "$SCOPE did not take 2"; }

RUNDIR=$TMP/run
KILL_RUNDIR=$RUNDIR
start_daemon 0 "$RUNDIR"
start_daemon 1 "$RUNDIR"
chmod 0755 "$TMP" "$RUNDIR"
python3 "$(dirname "$0")/../../tools/lib/user_access.py" --user nobody --clear-groups --exec "$RUN" \
  --exec "$BUILD/tests/integration/fabric_rma" --exec "$BUILD/tests/integration/fabric_smsg" --dir "$RUNDIR" ||
  die "user nobody cannot reach the build or the run directory (above)"
as_nobody() { setpriv --reuid="$(id -u nobody)" --regid="$(id -g nobody)" --clear-groups -- "$@"; }
MSG="cross-memory attach to pid .* is refused"

expect_verified "fabric_rma at ptrace_scope 2" "FMA, RDMA, AMOs, CQ writes and chains verified by 4 ranks" \
  "$TMP/rma.log" 4 'rounds with 3 peers verified' \
  as_nobody timeout -k 5 120 "$RUN" --rundir "$RUNDIR" --nodes 2 -n 4 --timeout 110 \
  "$BUILD/tests/integration/fabric_rma" 3
grep -q -- "$MSG" "$TMP/rma.log" && pass "the ranks said they fell back" ||
  { fail "no fallback message: was cross-memory attach refused at all?"; show_log "$TMP/rma.log"; }
expect_verified "fabric_smsg at ptrace_scope 2" "SMSG between every pair of 3 ranks verified" "$TMP/smsg.log" 3 \
  'messages each way with 2 peers verified' \
  as_nobody timeout -k 5 120 "$RUN" --rundir "$RUNDIR" --nodes 2 -n 3 --timeout 110 \
  "$BUILD/tests/integration/fabric_smsg" pmi 200
echo "$OLD" >"$SCOPE" && [[ $(cat "$SCOPE") == "$OLD" ]] && pass "ptrace_scope restored to $OLD" ||
  fail "ptrace_scope not restored to $OLD"
finish test_yama_xmem 0 1
