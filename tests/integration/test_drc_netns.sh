#!/usr/bin/env bash
# DRC credentials across three namespace hosts (one daemon each, UDP fabric), with a daemon
# down during each call: an acquire, a grant, a revoke and a release made while one host's
# daemon is stopped succeed on the others, and the stopped daemon, started again, takes the
# current table before it admits anyone (an attach as the granted uid after the grant is
# admitted there, after the revoke refused; the released credential is gone there). A daemon
# frozen (SIGSTOP) during a grant delays the call by the answer wait only, and takes the
# change when it resumes. A grant that one daemon refuses (a job credential of another user
# holds the DRC credential's ptag and cookie there) fails with DRC_CRED_EXTERNAL_FAILURE and
# is undone on the daemons that took it.
# Needs root and ip with netns support; otherwise skipped (77). Namespaces and processes are
# removed on success and failure.
# Usage: test_drc_netns.sh BUILD_DIR     Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"
use_build "${1:-}" tests/integration/drc_call
CALL=$BUILD/tests/integration/drc_call
[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces, switching users)"
need_cmd ip python3
GRANTED=$(id -u nobody 2>/dev/null) || skip "no user nobody"
OTHER=$(id -u daemon 2>/dev/null) || skip "no user daemon"

TAG=dr49$$
SW=${TAG}s
NS=("${TAG}a" "${TAG}b" "${TAG}c")
NET=10.214.$(($$ % 200)).
test_cleanup() { netns_hosts_down "${NS[@]}" "$SW"; }
test_init test_drc_netns

netns_fabric "$SW" "$NET" "${NS[@]}"
python3 "$(dirname "$0")/../../tools/lib/user_access.py" --user nobody --clear-groups --exec "$CALL" ||
  skip "user nobody cannot reach the build (above)"

for i in 0 1 2; do fabric_daemon "$i"; chmod 0755 "$TMP/host$i"; done
chmod 0755 "$TMP"

# on HOST CMD...: CMD inside host HOST's namespace, as a client of its daemon.
on() {
  local h=$1
  shift
  ip netns exec "${NS[$h]}" env NICEMU_RUNDIR="$TMP/host$h" NICEMU_NODE="$h" "$@"
}
# call HOST ARGS...: drc_call on HOST; its output in $TMP/call.out; its exit status.
call() {
  local h=$1
  shift
  on "$h" timeout -k 2 20 "$CALL" "$@" >"$TMP/call.out" 2>&1
}
# grants HOST ID: "-" if host HOST's daemon does not hold DRC credential ID, else its grants
# ("uid:65534,..." or "" for none), from nicemuctl cred list (as root: every credential).
grants() {
  "$CTL" --rundir "$TMP/host$1" cred list --json | python3 -c '
import json, sys
want = int(sys.argv[1])
for c in json.load(sys.stdin)["credentials"]:
    if "drc" in c and c["drc"]["id"] == want:
        print(",".join(c["drc"]["grants"])); break
else:
    print("-")' "$2"
}
# expect_grants WHAT ID WANT HOST...: every HOST lists ID with grants WANT ("-": not at all).
expect_grants() {
  local what=$1 id=$2 want=$3 h got bad=""
  shift 3
  for h in "$@"; do
    got=$(grants "$h" "$id")
    [[ $got == "$want" ]] || bad+=" host $h has '$got'"
  done
  if [[ -z $bad ]]; then pass "$what"; else fail "$what: want '$want':$bad"; fi
}
# restart HOST: its daemon again, as before (same run directory, map and key).
restart() { fabric_daemon "$1"; }

# ---- acquire while host 2's daemon is down ----
stop_daemon 2
if call 0 acquire && ID=$(sed -n 's/^id //p' "$TMP/call.out") && [[ -n $ID ]]; then
  pass "acquire on host 0 with host 2 down"
else
  show_log "$TMP/call.out"; die "acquire with host 2 down"
fi
expect_grants "host 0 and 1 hold the credential" "$ID" "" 0 1
restart 2
# The attach waits until host 2's daemon has converged: root may use any credential, so
# only its presence is in question.
if call 2 attach "$ID"; then pass "host 2, back, admits to the credential acquired while it was down"
else fail "attach on host 2 after its return"; show_log "$TMP/call.out"; fi
expect_grants "host 2 took the acquire from the others" "$ID" "" 2

# ---- grant while host 1's daemon is down ----
stop_daemon 1
if call 0 grant "$ID" "$GRANTED"; then pass "grant on host 0 with host 1 down"
else fail "grant with host 1 down"; show_log "$TMP/call.out"; fi
restart 1
if call 1 attach "$ID" "$GRANTED"; then pass "host 1, back, admits uid $GRANTED granted while it was down"
else fail "attach as uid $GRANTED on host 1 after its return"; show_log "$TMP/call.out"; fi
expect_grants "every host has the grant" "$ID" "uid:$GRANTED" 0 1 2

# ---- revoke (from host 1) while host 2's daemon is down ----
stop_daemon 2
if call 1 revoke "$ID" "$GRANTED"; then pass "revoke on host 1 with host 2 down"
else fail "revoke with host 2 down"; show_log "$TMP/call.out"; fi
restart 2
# Host 2's own file still has the grant: only the others' table can tell it of the revoke.
if call 2 attach "$ID" "$GRANTED"; then fail "host 2, back, still admits uid $GRANTED after the revoke"
elif grep -q 'DRC_EPERM' "$TMP/call.out"; then pass "host 2, back, refuses uid $GRANTED revoked while it was down"
else fail "attach as uid $GRANTED on host 2: not the refusal expected"; show_log "$TMP/call.out"; fi
expect_grants "no host has the grant" "$ID" "" 0 1 2

# ---- a daemon frozen during a grant ----
kill -STOP "${DAEMON_PID[1]}"
t0=$(date +%s%N)
call 0 grant "$ID" "$GRANTED"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
kill -CONT "${DAEMON_PID[1]}"
if [[ $rc -eq 0 ]]; then pass "grant with host 1 frozen: answered in $ms ms"
else fail "grant with host 1 frozen"; show_log "$TMP/call.out"; fi
wait_until 50 test "$(grants 1 "$ID")" == "uid:$GRANTED" && pass "host 1, resumed, took the grant" ||
  fail "host 1, resumed, lists '$(grants 1 "$ID")'"

# ---- release (from host 2) while host 0's daemon is down ----
stop_daemon 0
if call 2 release "$ID"; then pass "release on host 2 with host 0 down"
else fail "release with host 0 down"; show_log "$TMP/call.out"; fi
restart 0
if call 0 attach "$ID"; then fail "host 0, back, still admits to the released credential"
elif grep -q 'DRC_CRED_NOT_FOUND' "$TMP/call.out"; then pass "host 0, back, knows the credential was released"
else fail "attach on host 0 after the release: not the refusal expected"; show_log "$TMP/call.out"; fi
expect_grants "no host holds the released credential" "$ID" "-" 0 1 2

# ---- a grant one daemon refuses is undone everywhere ----
call 0 acquire && ID2=$(sed -n 's/^id //p' "$TMP/call.out") || die "second acquire"
read -r PTAG COOKIE < <("$CTL" --rundir "$TMP/host0" cred list --json | python3 -c '
import json, sys
for c in json.load(sys.stdin)["credentials"]:
    if "drc" in c and c["drc"]["id"] == int(sys.argv[1]): print(c["ptag"], c["cookie"])' "$ID2")
# On host 2 only, an administrator gives those values to a job of another user.
"$CTL" --rundir "$TMP/host2" cred revoke --ptag "$PTAG" --cookie "$COOKIE" >/dev/null &&
  "$CTL" --rundir "$TMP/host2" cred grant --ptag "$PTAG" --cookie "$COOKIE" --uid "$OTHER" >/dev/null ||
  die "job credential on host 2"
if call 0 grant "$ID2" "$GRANTED"; then fail "a grant host 2 refuses succeeded"
elif grep -q 'DRC_CRED_EXTERNAL_FAILURE' "$TMP/call.out"; then pass "a grant host 2 refuses fails: DRC_CRED_EXTERNAL_FAILURE"
else fail "the refused grant: not the error expected"; show_log "$TMP/call.out"; fi
expect_grants "the refused grant is undone on hosts 0 and 1" "$ID2" "" 0 1
if call 1 attach "$ID2" "$GRANTED"; then fail "host 1 admits uid $GRANTED after the undone grant"
else pass "host 1 refuses uid $GRANTED after the undone grant"; fi

finish drc-netns 0 1 2
