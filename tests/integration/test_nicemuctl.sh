#!/usr/bin/env bash
# Integration test of nicemuctl against two real daemons (NIC addresses 10 and 11):
# status as text and JSON, cred issue/list/revoke across both nodes, shutdown of one
# daemon (clean exit within 2 s), and the error for a run dir without daemons.
# Usage: test_nicemuctl.sh BUILD_DIR     Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"

use_build "${1:-}"
need_cmd python3
test_init test_nicemuctl
RUNDIR=$TMP/run

ctl() { capture "$1" 30 "$CTL" --rundir "$RUNDIR" "${@:2}"; }  # NAME ARG...
json() {
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$TMP/$1.out" "$2"
}

# ---- start two daemons and wait until both answer ----
start_daemon 10 "$RUNDIR" --log-level warn
start_daemon 11 "$RUNDIR" --log-level warn

# ---- 1. status, text ----
ctl status status
if expect_rc status 0; then
  if grep -qx 'nic 10' "$TMP/status.out" && grep -qx 'nic 11' "$TMP/status.out" &&
     grep -q "pid *${DAEMON_PID[10]}\$" "$TMP/status.out" && grep -q "pid *${DAEMON_PID[11]}\$" "$TMP/status.out" &&
     grep -q 'socket .*/nic-10.sock$' "$TMP/status.out" && grep -q '^  counters$' "$TMP/status.out"; then
    pass "status lists both nodes with pid, socket and counters"
  else
    fail "status: text output lacks a node, pid, socket or counters"; show status
  fi
fi

# ---- 2. status --json: one document, both nodes, the daemons' pids ----
ctl status_json status --json
if expect_rc status_json 0; then
  got=$(json status_json 'sorted((n["nic_addr"], n["pid"]) for n in d["nodes"])' 2>"$TMP/py.err")
  want="[(10, ${DAEMON_PID[10]}), (11, ${DAEMON_PID[11]})]"
  if [[ "$got" == "$want" ]]; then pass "status --json lists both nodes"
  else fail "status --json: got '$got', expected '$want'"; show status_json; cat "$TMP/py.err" >&2; fi
  keys=$(json status_json 'all(isinstance(n["counters"], dict) and isinstance(n["credentials"], list) and isinstance(n["cdms"], list) for n in d["nodes"])' 2>/dev/null)
  [[ "$keys" == "True" ]] && pass "status --json objects carry counters, credentials, cdms" ||
    { fail "status --json: missing counters/credentials/cdms"; show status_json; }
fi

# ---- 3. cred issue: eval-able lines, credential present on both nodes ----
ctl issue cred issue
PMI_GNI_PTAG='' PMI_GNI_COOKIE=''
if expect_rc issue 0; then
  if [[ $(wc -l <"$TMP/issue.out") -eq 2 ]] && grep -qx 'PMI_GNI_PTAG=[0-9]\+' "$TMP/issue.out" &&
     grep -qx 'PMI_GNI_COOKIE=[0-9]\+' "$TMP/issue.out"; then
    eval "$(cat "$TMP/issue.out")"
    pass "cred issue prints PMI_GNI_PTAG=$PMI_GNI_PTAG PMI_GNI_COOKIE=$PMI_GNI_COOKIE"
  else
    fail "cred issue: output is not two PMI_GNI_* lines"; show issue
  fi
fi

# Rows of `cred list` (NIC PTAG COOKIE COOKIE(DEC) UID CDMS) holding the issued credential.
cred_rows() { awk -v p="$PMI_GNI_PTAG" -v c="$PMI_GNI_COOKIE" 'NR > 1 && $2 == p && $4 == c { print $1 }' "$TMP/$1.out" | sort | tr '\n' ' '; }

if [[ -n "$PMI_GNI_PTAG" ]]; then
  ctl list cred list
  if expect_rc list 0; then
    hex=$(printf '%#010x' "$PMI_GNI_COOKIE")
    if [[ "$(cred_rows list)" == "10 11 " ]] && grep -q "$hex" "$TMP/list.out"; then
      pass "cred list shows the credential on nodes 10 and 11"
    else
      fail "cred list: credential not on both nodes"; show list
    fi
  fi
  ctl creds_json status --json
  got=$(json creds_json "sorted(n['nic_addr'] for n in d['nodes'] for c in n['credentials'] if (c['ptag'], c['cookie']) == ($PMI_GNI_PTAG, $PMI_GNI_COOKIE))" 2>/dev/null)
  [[ "$got" == "[10, 11]" ]] && pass "status --json shows the credential on both nodes" ||
    { fail "status --json credentials: got '$got'"; show creds_json; }

  # ---- 4. cred revoke removes it everywhere; a second revoke finds nothing ----
  ctl revoke cred revoke --ptag "$PMI_GNI_PTAG" --cookie "$PMI_GNI_COOKIE"
  if expect_rc revoke 0; then
    ctl list2 cred list
    if expect_rc list2 0 && [[ -z "$(cred_rows list2)" ]]; then pass "cred revoke removes the credential"
    else fail "cred list after revoke still shows it"; show list2; fi
  fi
  ctl revoke2 cred revoke --ptag "$PMI_GNI_PTAG" --cookie "$PMI_GNI_COOKIE"
  expect_rc revoke2 1 && pass "revoking an absent credential fails"
fi

# ---- 5. shutdown of node 11: the daemon exits 0 within 2 s, its socket is gone ----
ctl shutdown --node 11 shutdown
if expect_rc shutdown 0; then
  p=${DAEMON_PID[11]}
  for _ in $(seq 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$p" 2>/dev/null; then
    fail "shutdown: daemon 11 (pid $p) still running after 2 s"
  else
    wait "$p"; st=$?
    unset 'DAEMON_PID[11]'
    if [[ $st -eq 0 ]]; then pass "shutdown: daemon 11 exited with status 0"
    else fail "shutdown: daemon 11 exited with status $st"; sed 's/^/    /' "$TMP/daemon11.log" >&2; fi
    [[ -e "$RUNDIR/nic-11.sock" ]] && fail "shutdown: socket of node 11 left behind"
  fi
  ctl after status --json
  got=$(json after '[n["nic_addr"] for n in d["nodes"]]' 2>/dev/null)
  expect_rc after 0 && [[ "$got" == "[10]" ]] && pass "status after shutdown lists node 10 only" ||
    { fail "status after shutdown: got '$got'"; show after; }
  ctl gone --node 11 status
  expect_rc gone 1 && grep -q 'nic 11' "$TMP/gone.err" && pass "--node of a stopped daemon: exit 1 naming it" ||
    { fail "--node 11 after shutdown"; show gone; }
fi

# ---- 6. no daemon reachable: exit 1 with a message ----
mkdir -p "$TMP/empty"
capture empty 30 "$CTL" --rundir "$TMP/empty" status
if expect_rc empty 1; then
  grep -q 'no nicemu daemon' "$TMP/empty.err" && [[ ! -s "$TMP/empty.out" ]] &&
    pass "empty run dir: exit 1, message on stderr" || { fail "empty run dir: no message"; show empty; }
fi
capture missing 30 "$CTL" --rundir "$TMP/does-not-exist" status --json
expect_rc missing 1 && grep -q 'does-not-exist' "$TMP/missing.err" && pass "missing run dir: exit 1 naming it" ||
  { fail "missing run dir"; show missing; }

finish nicemuctl
