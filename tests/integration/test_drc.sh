#!/usr/bin/env bash
# libdrc (rdmacred.h) against two running daemons, under nicemu-run: drc_check as root
# grants to `nobody`, refuses `daemon`, revokes and releases. Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"
use_build "${1:?usage: $0 BUILD_DIR}" tests/integration/drc_check
[[ $(id -u) -eq 0 ]] || skip "switching users needs root"
GRANTED=$(id -u nobody 2>/dev/null) || skip "no user nobody"
OTHER=$(id -u daemon 2>/dev/null) || skip "no user daemon"
test_init test_drc
RUNDIR=$TMP/run
start_daemon 0 "$RUNDIR"
start_daemon 1 "$RUNDIR"
chmod 0755 "$TMP" "$RUNDIR"

if "$RUN" --rundir "$RUNDIR" --nodes 2 -n 1 --timeout 60 "$BUILD/tests/integration/drc_check" "$GRANTED" "$OTHER" \
    >"$TMP/drc.log" 2>&1 && grep -q "drc_check: ok" "$TMP/drc.log"; then
  pass "acquire, grant, refuse, revoke, release"
else
  fail "drc_check"; show_log "$TMP/drc.log"
fi
# The credential is gone from both daemons after drc_release: both answer, neither lists it.
expect_no_drc_credentials "$RUNDIR"
finish test_drc 0 1
