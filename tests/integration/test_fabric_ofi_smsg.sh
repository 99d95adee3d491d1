#!/usr/bin/env bash
# SMSG over the ofi fabric (docs/ofi-fabric.md, "SMSG"): two network namespace hosts
# (tools/lib/netns-hosts.sh), one daemon each with --fabric-data ofi over tcp;ofi_rxm, one
# fabric_smsg per host:
#   1. 10000 messages each way, sizes 20 B to 1 KiB, 16 credits: every message exactly once,
#      in order, intact, with its tag, its remote CQE (remote event data) and its local
#      completion; credits run out and come back. Rank to rank: the CDMs' ofi ops count the
#      messages, the daemons relayed none (smsg_relay_sent);
#   2. 3 hosts, every pair, both directions at once: several channels per CDM;
#   3. the receiving process exits: the sender's next sends fail (error CQE, failed send or
#      INVALID_STATE) in bounded time, no hang;
#   4. the receiver is SIGKILLed while the sender waits for credits: the same.
# Needs root, ip and a libugni built with libfabric; otherwise 77.
# Usage: test_fabric_ofi_smsg.sh BUILD_DIR ofi|no-ofi     Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"

use_build "${1:-}" tests/integration/fabric_smsg
[[ ${2:-} == ofi ]] || skip "libugni built without libfabric (meson -Dofi; Debian libfabric-dev)"
[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces)"
need_cmd ip python3
PROG=$BUILD/tests/integration/fabric_smsg
PROVIDER=${NICEMU_TEST_OFI_PROVIDER:-tcp;ofi_rxm}

netns_test_hosts test_fabric_ofi_smsg fs 215 3
T0=$SECONDS
for i in 0 1 2; do fabric_daemon "$i" --fabric-data ofi --ofi-provider "$PROVIDER"; done
fabric_cred 1 2

run() {  # NODE INST COUNT "PEER..." [ENV=VALUE...]: one fabric_smsg on host NODE, in the background
  local a=$1 inst=$2 count=$3 peer=$4; shift 4
  ip netns exec "${NS[$a]}" env "$@" NICEMU_RUNDIR="$TMP/host$a" NICEMU_NODE="$a" PMI_GNI_PTAG="$PMI_GNI_PTAG" \
    PMI_GNI_COOKIE="$PMI_GNI_COOKIE" timeout -k 5 50 "$PROG" "$inst" "$count" $peer >>"$TMP/prog$a.log" 2>&1 &
  BG_PIDS+=($!)
  LAST=$!
}
wait_pid() {  # PID: its exit status
  local p=$1 s i
  wait "$p"; s=$?
  for i in "${!BG_PIDS[@]}"; do [[ ${BG_PIDS[$i]} == "$p" ]] && unset "BG_PIDS[$i]"; done
  return $s
}
show_logs() { for a in 0 1 2; do [[ -f $TMP/prog$a.log ]] && sed "s/^/    [prog $a] /" "$TMP/prog$a.log" >&2; done; }
ofi_ops() {  # A: host A's ofi ops (the CDMs' counters, reaching the node's when they detach)
  "$CTL" --rundir "$TMP/host$1" --node "$1" status --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"][0]["ofi"]["ops"])'
}

# ---- 1. the verified exchange ----
COUNT=10000
ops0=("$(ofi_ops 0)" "$(ofi_ops 1)")
relay0=$(( $(node_counter 0 smsg_relay_sent) + $(node_counter 1 smsg_relay_sent) ))
run 0 10 $COUNT 1:11; p0=$LAST
run 1 11 $COUNT 0:10; p1=$LAST
ok=1; wait_pid "$p0" || ok=0; wait_pid "$p1" || ok=0
n=$(cat "$TMP/prog0.log" "$TMP/prog1.log" | grep -c "$COUNT messages each way with 1 peers verified")
stalls=$(cat "$TMP/prog0.log" "$TMP/prog1.log" | grep -o '[0-9]* credit stalls' | awk '{s += $1} END {print s + 0}')
if [[ $ok -eq 1 && $n -eq 2 && $stalls -gt 0 ]]; then
  pass "$COUNT SMSG messages each way over ofi ($PROVIDER): exactly once, in order, CQEs both sides ($stalls credit stalls)"
  grep -h -o 'verified in .*' "$TMP/prog0.log" | sed 's/^/    /'
else
  fail "exchange over ofi: programs ok=$ok, $n of 2 verified, $stalls credit stalls"; show_logs
fi
relay=$(( $(node_counter 0 smsg_relay_sent) + $(node_counter 1 smsg_relay_sent) - relay0 ))
for i in 0 1; do
  d=$(( $(ofi_ops "$i") - ops0[i] ))
  [[ $d -ge $COUNT ]] && pass "host $i: $d frames over ofi (SMSG messages, rank to rank)" ||
    fail "host $i: $d ofi ops for $COUNT messages"
done
[[ $relay -eq 0 ]] && pass "the daemons relayed no SMSG message" || fail "the daemons relayed $relay SMSG messages"
: >"$TMP/prog0.log"; : >"$TMP/prog1.log"

# ---- 2. three hosts, every pair ----
run 0 20 3000 "1:21 2:22"; p0=$LAST
run 1 21 3000 "0:20 2:22"; p1=$LAST
run 2 22 3000 "0:20 1:21"; p2=$LAST
ok=1; for p in $p0 $p1 $p2; do wait_pid "$p" || ok=0; done
n=$(cat "$TMP"/prog[012].log | grep -c "3000 messages each way with 2 peers verified")
[[ $ok -eq 1 && $n -eq 3 ]] && pass "3 hosts, every pair at once: 3000 messages each way over ofi, verified" ||
  { fail "3 hosts over ofi: $n of 3 verified"; show_logs; }
relay=$(( $(node_counter 0 smsg_relay_sent) + $(node_counter 1 smsg_relay_sent) + $(node_counter 2 smsg_relay_sent) - relay0 ))
[[ $relay -eq 0 ]] && pass "  none relayed by the daemons" || fail "  the daemons relayed $relay SMSG messages"
: >"$TMP/prog0.log"; : >"$TMP/prog1.log"; : >"$TMP/prog2.log"

# ---- 3. the receiving process exits ----
GO=$TMP/go
run 0 40 200 1:41 FABRIC_SMSG_MODE=fail FABRIC_SMSG_GO="$GO"; p0=$LAST
run 1 41 200 0:40 FABRIC_SMSG_MODE=die; p1=$LAST
wait_pid "$p1" || fail "receiver (mode die) exited with an error"
touch "$GO"
start=$SECONDS
if wait_pid "$p0" && msg=$(grep -o 'unreachable: .*' "$TMP/prog0.log"); then
  pass "receiver exited: the sender sees an error in $((SECONDS - start)) s ($msg)"
else
  fail "dead receiver: the sender saw no error"; show_logs
fi
rm -f "$GO"; : >"$TMP/prog0.log"; : >"$TMP/prog1.log"

# ---- 4. the receiver killed while the sender waits for credits (fail mode: sends until an error) ----
run 0 50 200 1:51 FABRIC_SMSG_MODE=fail FABRIC_SMSG_GO="$GO"; p0=$LAST
run 1 51 200 0:50 FABRIC_SMSG_MODE=idle FABRIC_SMSG_GO="$TMP/never"; p1=$LAST
for _ in $(seq 300); do
  [[ $(cat "$TMP/prog0.log" "$TMP/prog1.log" | grep -c verified) -eq 2 ]] && break
  sleep 0.1
done
touch "$GO"
sleep 0.3
# ip netns exec and env exec; timeout forks the fabric_smsg: its child.
kill -KILL $(pgrep -P "$p1") 2>/dev/null || fail "no receiver process to kill"
{ wait_pid "$p1"; } 2>/dev/null  # "Killed"
start=$SECONDS
if wait_pid "$p0" && msg=$(grep -o 'unreachable: .*' "$TMP/prog0.log"); then
  pass "receiver SIGKILLed mid-stream: the sender sees an error in $((SECONDS - start)) s ($msg)"
else
  fail "killed receiver: the sender saw no error"; show_logs
fi
rm -f "$GO"
echo "took $((SECONDS - T0)) s"
finish fabric-ofi-smsg 0 1 2
