#!/usr/bin/env bash
# The UDP fabric on loopback: daemons in separate run directories (as if each on its own
# host, so nothing is reachable by Unix socket) talk over UDP with a cluster key.
#   1. two daemons: processes on each exchange directed datagrams (matching across the
#      fabric), 20 rounds, payloads verified; FMA and RDMA with a handle the remote target
#      never registered complete with errors (validated there); SMSG: test_fabric_smsg.sh;
#   2. three daemons, three processes, every pair, 20 rounds;
#   2b. the fault injector's packet rules (nicemuctl fault set packet.drop=... on daemons 0
#      and 1): datagrams still verified, drops retransmitted, corrupted packets counted as
#      bad MACs, duplicates suppressed;
#   3. one daemon silent (SIGSTOP): after the retry budget its channel goes down and new
#      messages to it are refused at once; resumed (SIGCONT) it is heard again;
#      then restarted (new epoch): the others notice, datagrams work again;
#   4. a live daemon under a barrage of random bytes, truncated headers, bad MACs, other
#      versions, unknown sources, replays and garbage inside valid packets
#      (fabric_packets.py): it keeps running and its counters show every drop;
#   5. nicemu-run --fabric udp: a 4-rank PMI job over 3 nodes, each on its own "host";
#      then fabric_rma (FMA PUT/GET, RDMA PUT/GET of 1 MiB, AMOs, CQ writes between every
#      pair, verified at both ends) on 3 hosts, clean and with the daemons' seeded packet
#      loss, duplication and reordering.
# Usage: test_fabric.sh BUILD_DIR FABRIC_PACKETS_PY [DAEMON_ARG...]
#   DAEMON_ARGs go to every daemon the script starts (e.g. --fabric-io-uring off to test
#   the recvmmsg receive path, all to send through io_uring too).     Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"

use_build "${1:-}" tests/integration/fabric_dgram tools/nicemu-run/nicemu-run
PACKETS=${2:-}
shift 2 2>/dev/null
EXTRA=("$@")
PROG=$BUILD/tests/integration/fabric_dgram
need_cmd python3
test_init test_fabric

# Ports: a base derived from the pid, so concurrent runs of other suites do not collide.
BASE=$((20000 + ($$ % 1500) * 8))  # below the ephemeral range (32768+)
fabric_key
KEY=$FABRIC_KEY
[[ $(stat -c %a "$KEY") == 600 ]] && pass "keygen writes a 0600 key" || fail "key mode $(stat -c %a "$KEY")"
# Three "hosts" that are all 127.0.0.1: one node each, distinct ports.
{
  echo "# test fabric: three hosts on loopback"
  for n in 0 1 2; do printf '\n[[node]]\nnic = %d\nhost = "127.0.0.1"\nport = %d\n' "$n" $((BASE + n)); done
} >"$TMP/fabric.toml"
"$CTL" fabric gen --port "$BASE" --per-host 3 127.0.0.1 >"$TMP/gen.toml" &&
  [ "$(grep -c '^\[\[node\]\]' "$TMP/gen.toml")" = 3 ] && pass "fabric gen writes a map" || fail "fabric gen"

# run NODE INST ARGS...: one fabric_dgram on NODE's host, in the background.
run() {
  local a=$1 inst=$2; shift 2
  NICEMU_RUNDIR=$TMP/host$a NICEMU_NODE=$a timeout -k 5 40 "$PROG" "$inst" "$@" >>"$TMP/prog.log" 2>&1 &
  BG_PIDS+=($!)
}

# ---- 1. two daemons ----

fabric_daemon 0 "${EXTRA[@]}"
fabric_daemon 1 "${EXTRA[@]}"
echo "receive path: $(grep -ho 'nodes in the map; .*' "$TMP/daemon0.log" | head -1)"
fabric_cred 1
FABRIC_DGRAM_REMOTE_FMA=1 run 0 0 20 1:1
run 1 1 20 0:0
wait_all "two daemons: 20 rounds of directed datagrams across the fabric, bad remote FMA/RDMA are error completions"
rx=$(node_counter 0 fabric_rx_packets)
[[ $rx -gt 0 ]] && pass "daemon 0 received $rx fabric packets" || fail "no fabric packets counted"
plane=$("$CTL" --rundir "$TMP/host0" status --json | python3 -c '
import json, sys
print(json.load(sys.stdin)["nodes"][0]["fabric"]["data_plane"])')
case " ${EXTRA[*]} " in
  *" all "*) want="io_uring sendmsg" ;;
  *" off "*) want="recvmmsg/sendmmsg" ;;
  *) want="sendmmsg" ;;
esac
[[ $plane == *"$want"* ]] && pass "data plane as asked: $plane" || fail "data plane '$plane', wanted '$want'"

# ---- 2. three daemons, every pair ----
# Daemon 2 pins ChaCha20-Poly1305 (as on a host without AES-NI); the others use the best
# their CPU has: every daemon verifies what the others seal.
fabric_daemon 2 "${EXTRA[@]}" --fabric-mac chacha20poly1305
macs=$(for a in 0 2; do "$CTL" --rundir "$TMP/host$a" status --json | python3 -c '
import json, sys
print(json.load(sys.stdin)["nodes"][0]["fabric"]["mac"])'; done | tr '\n' ' ')
[[ $macs == "aes256gcm chacha20poly1305 " || $macs == "chacha20poly1305 chacha20poly1305 " ]] &&
  pass "status names the packet AEAD: $macs" || fail "status fabric.mac: '$macs'"
fabric_cred 1 2
run 0 10 20 1:11 2:12
run 1 11 20 0:10 2:12
run 2 12 20 0:10 1:11
wait_all "three daemons (one pinned to chacha20poly1305): every pair, 20 rounds each"

# ---- 2b. packet faults from the fault injector ----
for a in 0 1; do
  "$CTL" --rundir "$TMP/host$a" fault reset seed=$((5 + a)) packet.drop=0.15 packet.dup=0.1 packet.corrupt=0.05 \
    packet.delay=0.1 >/dev/null || fail "nicemuctl fault reset on $a"
done
rtx0=$(node_counter 0 fabric_retransmits)
mac0=$(( $(node_counter 0 fabric_drop_mac) + $(node_counter 1 fabric_drop_mac) ))
dup0=$(( $(node_counter 0 fabric_duplicates) + $(node_counter 1 fabric_duplicates) ))
injected0=0
for k in fabric_fault_drops fabric_fault_dups fabric_fault_corrupts fabric_fault_delays; do
  injected0=$(( injected0 + $(node_counter 0 $k) + $(node_counter 1 $k) ))
done
run 0 50 20 1:51
run 1 51 20 0:50
wait_all "packet faults (drop 15%, dup 10%, corrupt 5%, delay 10%): 20 rounds verified"
rtx=$(( $(node_counter 0 fabric_retransmits) + $(node_counter 1 fabric_retransmits) - rtx0 ))
mac=$(( $(node_counter 0 fabric_drop_mac) + $(node_counter 1 fabric_drop_mac) - mac0 ))
dup=$(( $(node_counter 0 fabric_duplicates) + $(node_counter 1 fabric_duplicates) - dup0 ))
[[ $rtx -gt 0 && $mac -gt 0 && $dup -gt 0 ]] &&
  pass "injected packet faults: $rtx retransmissions, $mac corrupted packets dropped, $dup duplicates suppressed" ||
  fail "injected packet faults not seen: retransmits $rtx bad MACs $mac duplicates $dup"
# The senders count what they did on purpose, each rule in its own counter.
declare -A injected
for k in fabric_fault_drops fabric_fault_dups fabric_fault_corrupts fabric_fault_delays; do
  injected[$k]=$(( $(node_counter 0 $k) + $(node_counter 1 $k) ))
done
[[ ${injected[fabric_fault_drops]} -gt 0 && ${injected[fabric_fault_dups]} -gt 0 &&
   ${injected[fabric_fault_corrupts]} -gt 0 && ${injected[fabric_fault_delays]} -gt 0 &&
   $injected0 -eq 0 ]] &&
  pass "the senders counted the injected packet faults: drops ${injected[fabric_fault_drops]}, dups ${injected[fabric_fault_dups]}, corrupted ${injected[fabric_fault_corrupts]}, delayed ${injected[fabric_fault_delays]}" ||
  fail "injected packet fault counters: before $injected0, after drops ${injected[fabric_fault_drops]} dups ${injected[fabric_fault_dups]} corrupted ${injected[fabric_fault_corrupts]} delayed ${injected[fabric_fault_delays]}"
# A corrupted packet is one the receiver drops for its MAC: never fewer bad MACs than that.
[[ $mac -ge ${injected[fabric_fault_corrupts]} ]] &&
  pass "every corrupted packet failed its MAC at the receiver ($mac >= ${injected[fabric_fault_corrupts]})" ||
  fail "corrupted $((injected[fabric_fault_corrupts])) packets but only $mac bad MACs counted"
for a in 0 1; do "$CTL" --rundir "$TMP/host$a" fault off >/dev/null; done

# ---- 3a. a silent peer: channel down after the retry budget, fail fast, back when heard ----
kill -STOP "${DAEMON_PID[1]}"
# A process on node 0 posts a datagram to node 1: the daemon's message to node 1 is never
# acknowledged; about 1.7 s of backoff later the channel is down.
# The post itself fails then (GNI_POST_ERROR, state 2) instead of waiting for ever: what was
# in flight between the two matchers may be lost (docs/fabric.md, Datagrams).
t0=$(date +%s%N)
NICEMU_RUNDIR=$TMP/host0 NICEMU_NODE=0 timeout -k 2 6 "$PROG" 40 1 1:41 >/dev/null 2>"$TMP/silent40.err"
rc40=$? ms40=$(( ($(date +%s%N) - t0) / 1000000 ))
grep -q "rc 0 state 2" "$TMP/silent40.err" && [[ $rc40 -eq 1 ]] &&
  pass "silent peer: the pending datagram towards it failed with GNI_POST_ERROR after $ms40 ms" ||
  { fail "silent peer: datagram towards it not failed (exit $rc40 after $ms40 ms)"; show_log "$TMP/silent40.err"; }
downs=$(node_counter 0 fabric_peer_downs)
abandoned=$(node_counter 0 fabric_messages_abandoned)
[[ $downs -ge 1 && $abandoned -ge 1 ]] && pass "silent peer: channel down after the retry budget ($abandoned message(s) abandoned)" ||
  fail "silent peer: downs $downs abandoned $abandoned"
refused0=$(node_counter 0 fabric_send_refused)
NICEMU_RUNDIR=$TMP/host0 NICEMU_NODE=0 timeout -k 2 2 "$PROG" 42 1 1:43 >/dev/null 2>"$TMP/silent42.err"
rc42=$?
refused=$(node_counter 0 fabric_send_refused)
[[ $refused -gt $refused0 ]] && pass "silent peer: new messages refused at once" || fail "no fail-fast while down"
grep -q "rc 0 state 2" "$TMP/silent42.err" && [[ $rc42 -eq 1 ]] &&
  pass "silent peer: a datagram posted while it is down fails at once (GNI_POST_ERROR)" ||
  { fail "silent peer: datagram posted while down not failed (exit $rc42)"; show_log "$TMP/silent42.err"; }
lost=$("$CTL" --rundir "$TMP/host0" status --json | python3 -c '
import json, sys
print(json.load(sys.stdin)["nodes"][0]["counters"]["datagrams_lost"])' 2>/dev/null)
[[ ${lost:-0} -ge 2 ]] && pass "status counts the failed datagrams (datagrams_lost $lost)" ||
  fail "status datagrams_lost '${lost:-}', want >= 2"
kill -CONT "${DAEMON_PID[1]}"
back=0
for _ in $(seq 30); do
  st=$("$CTL" --rundir "$TMP/host0" status --json | python3 -c '
import json, sys
for n in json.load(sys.stdin)["nodes"]:
    for p in (n.get("fabric") or {}).get("peers", []):
        if p["nic_addr"] == 1: print(p["state"])')
  [[ $st == up ]] && { back=1; break; }
  sleep 0.2
done
[[ $back -eq 1 ]] && pass "resumed peer is heard again (probe answered), channel up" || fail "channel to node 1 stayed $st"

# ---- 3b. a restarted peer is detected; traffic resumes ----
stop_daemon 1
fabric_daemon 1 "${EXTRA[@]}"
fabric_cred 1 2
run 0 20 5 1:21
run 1 21 5 0:20
wait_all "after daemon 1 restarted: datagrams flow again"
restarts=$(node_counter 0 fabric_peer_restarts)
[[ $restarts -ge 1 ]] && pass "daemon 0 saw the new epoch ($restarts restart)" || fail "restart not detected"

# ---- 4. malformed packets against a live daemon ----
# Daemon 2 is stopped; the script takes its address (so it is a source in the map) and
# sends at daemon 0 everything a broken or hostile peer could.
stop_daemon 2
before=$(node_counter 0 malformed_messages)
if python3 "$PACKETS" --key "$KEY" --target-port "$BASE" --target-nic 0 --as-nic 2 --as-port $((BASE + 2)) \
    --expect-json "$TMP/expect.json" --sealer "$BUILD/tests/integration/fabric_seal" >"$TMP/packets.log" 2>&1; then
  sleep 0.5  # the daemon drains its socket
  if ! kill -0 "${DAEMON_PID[0]}" 2>/dev/null; then
    fail "daemon 0 died under the malformed-packet barrage"; show_log "$TMP/daemon0.log"
  else
    pass "daemon 0 survived the barrage"
    # Each class of bad packet shows in its counter, at least as often as sent.
    "$CTL" --rundir "$TMP/host0" stats --json >"$TMP/stats.json"
    if python3 - "$TMP/stats.json" "$TMP/expect.json" "$before" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))["nodes"][0]["counters"]
want = json.load(open(sys.argv[2]))
ok = True
for name, n in want.items():
    got = c[name] - (int(sys.argv[3]) if name == "malformed_messages" else 0)
    flag = "ok" if got >= n else "LOW"
    ok &= got >= n
    print(f"    {name}: {got} (sent {n}) {flag}")
sys.exit(0 if ok else 1)
EOF
    then pass "every class of bad packet counted"; else fail "drop counters below what was sent"; fi
  fi
  # The daemon still works: datagrams between 0 and 1 after the barrage.
  run 0 30 3 1:31
  run 1 31 3 0:30
  wait_all "datagrams still flow after the barrage"
else
  fail "fabric_packets.py"; show_log "$TMP/packets.log"
fi

# ---- 5. the launcher places nodes on separate "hosts" ----
for a in "${!DAEMON_PID[@]}"; do stop_daemon "$a"; done
expect_verified "nicemu-run --fabric udp" "4 ranks on 3 hosts, every pair verified" "$TMP/run.log" 4 \
  'rounds with 3 peers verified' \
  timeout -k 5 60 "$RUN" --fabric udp --rundir "$TMP/launcher" -n 4 --nodes 3 --timeout 50 "$PROG" pmi 10
RMA=$BUILD/tests/integration/fabric_rma
for impair in "" "loss=0.05,dup=0.03,reorder=0.05,seed=11"; do
  NICEMU_FABRIC_IMPAIR="$impair" expect_verified "fabric_rma on 3 hosts${impair:+ with impairment $impair}" \
    "FMA, RDMA, AMO, CQ writes and chains verified by all 3 ranks" "$TMP/rma.log" 3 'rounds with 2 peers verified' \
    timeout -k 5 90 "$RUN" --fabric udp --rundir "$TMP/launcher" -n 3 --nodes 3 --timeout 80 "$RMA" 5
done
left=$(find "$TMP/launcher" -mindepth 1 -maxdepth 1 -name 'fabric-*' 2>/dev/null | wc -l)
[[ $left -eq 0 ]] && pass "nicemu-run removed its fabric directory" || fail "nicemu-run left $left fabric directories"

finish fabric 0 1 2
