#!/usr/bin/env bash
# MSGQ over the ofi fabric across two network namespace hosts (docs/ofi-fabric.md, "MSGQ"),
# with a member killed: one daemon per host with --fabric-data ofi ($NICEMU_TEST_OFI_PROVIDER,
# default tcp;ofi_rxm), two fabric_msgq instances per node, streaming to the other node's
# instances both ways. Node 1's first member (inst 20, the one its daemon names for the
# node's MSGQ route) is SIGKILLed mid-traffic. Checked: the exchange before the kill is
# verified and rank to rank (the daemons relayed nothing); the survivors' sends to the dead
# instance end in PEER_GONE within 10 s, every error completion for it after the kill
# PEER_GONE (the waiting ones judged: the daemon says the member died); no
# GNI_MsgqProgress call takes more than 1 s; 200 more messages from each survivor to each
# live instance all complete without error, none refused (credits resynchronised with the
# new member), and arrive in order, still rank to rank; the dead
# member's daemon drops it from the segment (members 1) and reclaims the segments once all
# are gone. PAUSE=21: inst 21 stops reading a second before the kill until 8 s after it,
# so the ring is full of the victim's stored messages when the senders re-route (the new
# member's sync answer must count them: none refused). Needs root, ip, python3 and a
# libugni built with libfabric; otherwise 77.
# Usage: [PAUSE=21] test_fabric_ofi_msgq.sh BUILD_DIR ofi|no-ofi     Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"

use_build "${1:-}" tests/integration/fabric_msgq
[[ ${2:-} == ofi ]] || skip "libugni built without libfabric (meson -Dofi; Debian libfabric-dev)"
[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces)"
need_cmd ip python3
PROG=$BUILD/tests/integration/fabric_msgq
PROVIDER=${NICEMU_TEST_OFI_PROVIDER:-tcp;ofi_rxm}

netns_test_hosts test_fabric_ofi_msgq fq 215 2
T0=$SECONDS
for i in 0 1; do fabric_daemon "$i" --fabric-data ofi --ofi-provider "$PROVIDER"; done
fabric_cred 1
D=$TMP/msgq
mkdir -p "$D"

declare -A PID
run() {  # HOST INST LEADER "DESTS" ENDS [victim]: one fabric_msgq in the background
  local a=$1 inst=$2
  ip netns exec "${NS[$a]}" env NICEMU_RUNDIR="$TMP/host$a" NICEMU_NODE="$a" PMI_GNI_PTAG="$PMI_GNI_PTAG" \
    PMI_GNI_COOKIE="$PMI_GNI_COOKIE" FABRIC_MSGQ_DIR="$D" FABRIC_MSGQ_VICTIM=20 FABRIC_MSGQ_ENDS="$5" \
    FABRIC_MSGQ_PAUSE=${PAUSE:-0} \
    timeout -k 5 120 "$PROG" "$inst" "$a" "$3" $((1 - a)) "$4" ${6:-} >"$TMP/prog$inst.log" 2>&1 &
  BG_PIDS+=($!)
  PID[$inst]=$!
}
show_logs() { for i in 10 11 20 21; do [[ -f $TMP/prog$i.log ]] && sed "s/^/    [$i] /" "$TMP/prog$i.log" >&2; done; }
status() {  # A EXPR: a value of host A's status JSON (python expression over `s`)
  "$CTL" --rundir "$TMP/host$1" status --json | python3 -c "import json,sys; s=json.load(sys.stdin)['nodes'][0]; print($2)"
}
members_are() { [[ $(status "$1" 'len(s["msgq"]) and s["msgq"][0]["members"]') == "$2" ]]; }
segments_gone() { [[ $(status 0 'len(s["msgq"])') == 0 && $(status 1 'len(s["msgq"])') == 0 ]]; }
count_is() { [[ $(ls "$D"/$1.* 2>/dev/null | wc -l) -eq $2 ]]; }

# The victim joins node 1 first: its member is the one node 1's daemon names.
run 1 20 0 "10 11" 0 victim
wait_until 300 test -e "$D/init.20" || { fail "the victim did not start"; show_logs; finish fabric-ofi-msgq 0 1; }
run 1 21 1 "10 11" 2
run 0 10 1 "20 21" 1
run 0 11 0 "20 21" 1
wait_until 300 count_is init 4 && touch "$D/init.all" ||
  { fail "not every instance joined"; show_logs; }
wait_until 900 count_is streaming 4 ||
  { fail "the exchange did not reach its end"; show_logs; finish fabric-ofi-msgq 0 1; }
relay0=$(( $(status 0 's["msgq_relay"]["forwarded"]') + $(status 1 's["msgq_relay"]["forwarded"]') ))
members=$(status 1 'len(s["msgq"]) and s["msgq"][0]["members"]')
[[ $relay0 -eq 0 && $members -eq 2 ]] &&
  pass "exchange before the kill: 4 instances, both ways, verified, rank to rank (none relayed)" ||
  fail "before the kill: relayed $relay0, node 1 members $members"
[[ ${PAUSE:-0} != 0 ]] && touch "$D/pause" && sleep 1  # inst $PAUSE stops reading: the ring fills
sleep 0.3
# ip netns exec and env exec, timeout forks fabric_msgq: its child is the instance.
kill -KILL "$(pgrep -P "${PID[20]}")" 2>/dev/null || fail "no victim process to kill"
{ wait "${PID[20]}"; } 2>/dev/null
touch "$D/killed"
wait_until 100 members_are 1 1 &&
  pass "node 1's daemon dropped the dead member (members 1)" || fail "node 1 still counts the dead member"
wait_until 600 count_is done 3 || { fail "the survivors did not finish"; }
touch "$D/done.all"
ok=1
for i in 10 11 21; do wait "${PID[$i]}" || ok=0; done
BG_PIDS=()
n=$(cat "$TMP"/prog1[01].log "$TMP"/prog21.log | grep -c ': verified$')
if [[ $ok -eq 1 && $n -eq 3 ]]; then
  pass "survivors: messages to the dead member PEER_GONE in bounded time, progress never hung, 4 live streams of 200 verified, none refused"
  grep -h 'dead destination\|live destination\|longest' "$TMP"/prog1[01].log "$TMP"/prog21.log | sed 's/^/    /'
else
  fail "survivors: $n of 3 verified"; show_logs
fi
relay=$(( $(status 0 's["msgq_relay"]["forwarded"]') + $(status 1 's["msgq_relay"]["forwarded"]') ))
[[ $relay -eq 0 ]] && pass "after the kill still rank to rank (none relayed)" || fail "the daemons relayed $relay messages"
wait_until 100 segments_gone &&
  pass "both segments reclaimed" || fail "a segment outlived its members"
echo "took $((SECONDS - T0)) s"
finish fabric-ofi-msgq 0 1
