#!/usr/bin/env bash
# SMSG across hosts: daemons on loopback, each in its own run directory (as if each on its
# own host), relay SMSG over the UDP fabric (docs/fabric.md, "SMSG across hosts").
#   1. nicemu-run --fabric udp, 2 ranks on 2 nodes: 20000 messages each way, sizes 20 B to
#      1 KiB, every message exactly once, in order, intact, with its tag, its remote CQE
#      (remote event data) and its local completion; credits run out and come back;
#   2. 3 ranks on 3 nodes: every pair, both directions at once;
#   3. two daemons under the fault injector's packet rules (drop, duplicate, corrupt,
#      delay): still exactly once and in order; retransmissions seen, nothing counted as
#      malformed;
#   4. the receiver's daemon SIGSTOPped: the sender gets an error (error CQE or failed
#      send) in bounded time, no hang; the daemon resumed, a new job works again;
#   5. the receiving process exits: the sender's next sends fail at once.
# Usage: test_fabric_smsg.sh BUILD_DIR        Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"

use_build "${1:-}" tests/integration/fabric_smsg tools/nicemu-run/nicemu-run
PROG=$BUILD/tests/integration/fabric_smsg
need_cmd python3
test_init test_fabric_smsg
T0=$SECONDS

# ---- 1. and 2. the launcher: every node on a "host" of its own ----
launch() {  # NAME RANKS NODES COUNT
  local name=$1 n=$2 nodes=$3 count=$4 log=$TMP/run$2.log
  if timeout -k 5 60 "$RUN" --fabric udp --rundir "$TMP/launcher" -n "$n" --nodes "$nodes" --timeout 55 \
      "$PROG" pmi "$count" >"$log" 2>&1; then
    local ok stalls
    ok=$(grep -c "$count messages each way with $((n - 1)) peers verified" "$log")
    stalls=$(grep -o '[0-9]* credit stalls' "$log" | awk '{s += $1} END {print s + 0}')
    if [[ $ok -eq $n && $stalls -gt 0 ]]; then
      pass "$name ($stalls credit stalls, each resolved by releases)"
      grep -o 'verified in .*' "$log" | head -1 | sed 's/^/    /'
    else
      fail "$name: $ok of $n ranks verified, $stalls credit stalls"; show_log "$log"
    fi
  else
    fail "$name"; show_log "$log"
  fi
}
launch "2 ranks on 2 hosts: 20000 SMSG messages each way, exactly once, in order, CQEs both sides" 2 2 20000
launch "3 ranks on 3 hosts: every pair, 5000 messages each way" 3 3 5000
left=$(find "$TMP/launcher" -mindepth 1 -maxdepth 1 -name 'fabric-*' 2>/dev/null | wc -l)
[[ $left -eq 0 ]] && pass "nicemu-run removed its fabric directories" || fail "nicemu-run left $left fabric directories"

# ---- daemons started here (faults, SIGSTOP, a dying receiver) ----
BASE=$((20000 + ($$ % 1500) * 8 + 4))  # as test_fabric.sh, other ports
fabric_key
for n in 0 1; do printf '[[node]]\nnic = %d\nhost = "127.0.0.1"\nport = %d\n\n' "$n" $((BASE + n)); done >"$TMP/fabric.toml"
fabric_daemon 0
fabric_daemon 1
fabric_cred 1
run() {  # NODE INST COUNT PEER [ENV=VALUE...]: one fabric_smsg in the background
  local a=$1 inst=$2 count=$3 peer=$4; shift 4
  env "$@" NICEMU_RUNDIR="$TMP/host$a" NICEMU_NODE="$a" timeout -k 5 60 "$PROG" "$inst" "$count" "$peer" \
    >>"$TMP/prog$a.log" 2>&1 &
  BG_PIDS+=($!)
  LAST=$!
}
wait_pid() {  # PID: its exit status
  local p=$1 s i
  wait "$p"; s=$?
  for i in "${!BG_PIDS[@]}"; do [[ ${BG_PIDS[$i]} == "$p" ]] && unset "BG_PIDS[$i]"; done
  return $s
}
show_logs() { for a in 0 1; do sed "s/^/    [prog $a] /" "$TMP/prog$a.log" >&2; done; }

# ---- 3. packet faults ----
for a in 0 1; do
  "$CTL" --rundir "$TMP/host$a" fault reset seed=$((11 + a)) packet.drop=0.1 packet.dup=0.05 packet.corrupt=0.02 \
    packet.delay=0.1 >/dev/null || fail "nicemuctl fault reset on $a"
done
rtx0=$(( $(node_counter 0 fabric_retransmits) + $(node_counter 1 fabric_retransmits) ))
mal0=$(( $(node_counter 0 malformed_messages) + $(node_counter 1 malformed_messages) ))
run 0 10 3000 1:11; p0=$LAST
run 1 11 3000 0:10; p1=$LAST
ok=1; wait_pid "$p0" || ok=0; wait_pid "$p1" || ok=0
rtx=$(( $(node_counter 0 fabric_retransmits) + $(node_counter 1 fabric_retransmits) - rtx0 ))
mal=$(( $(node_counter 0 malformed_messages) + $(node_counter 1 malformed_messages) - mal0 ))
relayed=$(node_counter 0 smsg_relay_sent)
if [[ $ok -eq 1 && $rtx -gt 0 && $mal -eq 0 ]]; then
  pass "packet faults (drop 10%, dup 5%, corrupt 2%, delay 10%): 3000 messages each way exactly once, in order ($rtx retransmissions, $relayed relayed by daemon 0)"
else
  fail "packet faults: programs ok=$ok, retransmissions $rtx, malformed $mal"; show_logs
fi
for a in 0 1; do "$CTL" --rundir "$TMP/host$a" fault off >/dev/null; done
: >"$TMP/prog0.log"; : >"$TMP/prog1.log"

# ---- 4. the receiver's daemon goes silent ----
GO=$TMP/go
run 0 20 200 1:21 FABRIC_SMSG_MODE=fail FABRIC_SMSG_GO="$GO"; p0=$LAST
run 1 21 200 0:20 FABRIC_SMSG_MODE=idle FABRIC_SMSG_GO="$GO"; p1=$LAST
for _ in $(seq 300); do
  [[ $(grep -c verified "$TMP/prog0.log" "$TMP/prog1.log" | awk -F: '{s += $2} END {print s}') -eq 2 ]] && break
  sleep 0.1
done
fail0=$(node_counter 0 smsg_relay_failures)
kill -STOP "${DAEMON_PID[1]}"
start=$SECONDS
touch "$GO"
if wait_pid "$p0"; then
  took=$((SECONDS - start))
  msg=$(grep -o 'unreachable: .*' "$TMP/prog0.log")
  [[ $took -le 10 && $(node_counter 0 smsg_relay_failures) -gt $fail0 ]] &&
    pass "receiver's daemon stopped: the sender sees an error in ${took} s ($msg)" ||
    { fail "silent peer: error after $took s, relay failures $(node_counter 0 smsg_relay_failures)"; show_logs; }
else
  fail "silent peer: the sender saw no error"; show_logs
fi
kill -CONT "${DAEMON_PID[1]}"
wait_pid "$p1" || { fail "idle receiver"; show_logs; }
rm -f "$GO"; : >"$TMP/prog0.log"; : >"$TMP/prog1.log"
# The channel comes back once daemon 1 answers again: a new job works.
for _ in $(seq 50); do
  st=$("$CTL" --rundir "$TMP/host0" status --json | python3 -c '
import json, sys
for n in json.load(sys.stdin)["nodes"]:
    for p in (n.get("fabric") or {}).get("peers", []):
        if p["nic_addr"] == 1: print(p["state"])')
  [[ $st == up ]] && break
  sleep 0.2
done
run 0 30 500 1:31; p0=$LAST
run 1 31 500 0:30; p1=$LAST
ok=1; wait_pid "$p0" || ok=0; wait_pid "$p1" || ok=0
[[ $ok -eq 1 ]] && pass "after SIGCONT: a new channel carries 500 messages each way" || { fail "after SIGCONT"; show_logs; }
: >"$TMP/prog0.log"; : >"$TMP/prog1.log"

# ---- 5. the receiving process exits ----
run 0 40 200 1:41 FABRIC_SMSG_MODE=fail FABRIC_SMSG_GO="$GO"; p0=$LAST
run 1 41 200 0:40 FABRIC_SMSG_MODE=die; p1=$LAST
wait_pid "$p1" || fail "receiver (mode die) exited with an error"
sleep 0.3  # its daemon reclaims the CDM and tells daemon 0
touch "$GO"
start=$SECONDS
if wait_pid "$p0"; then
  msg=$(grep -o 'unreachable: .*' "$TMP/prog0.log")
  pass "receiver exited: the sender's sends fail in $((SECONDS - start)) s ($msg)"
else
  fail "dead receiver: the sender saw no error"; show_logs
fi
rm -f "$GO"

mal=$(( $(node_counter 0 malformed_messages) + $(node_counter 1 malformed_messages) ))
[[ $mal -eq 0 ]] && pass "no message counted as malformed" || fail "$mal messages counted as malformed"
echo "took $((SECONDS - T0)) s"
finish fabric-smsg 0 1
