#!/usr/bin/env bash
# The ofi fabric with provider keys and local descriptors (docs/ofi-fabric.md, "Provider
# keys"), emulated on tcp;ofi_rxm (NICEMU_OFI_MR_MODE=prov_key,local: keys a peer cannot
# compute, asked of the target; every provider operation's local buffer covered by a
# registration, checked). Two network namespace hosts, one daemon each with --fabric-data ofi:
#   1. fabric_rma ROUNDS on 2 ranks (FMA and RDMA PUT/GET, AMOs, CQ writes, chains) and on 4
#      ranks (chains with same-host members), every byte verified;
#   2. fabric_rma errors: posts through a deregistered handle (the key question answered
#      PROTECTION) fail with error events and write nothing, as with requested keys;
#   3. fabric_rma rekey: a registration replaced after its key was cached: nothing written
#      through the old handle into the new registration, the new handle's PUT lands;
#   4. fabric_rma amo and order: every AMO form, remote events, sync flags; the ordering model
#      with posts held for their key;
#   5. fabric_smsg: 2000 SMSG messages each way, rank to rank;
#   6. the CDMs' counters: keys asked, answered and cached, no operation without a local
#      registration, and the data went rank to rank (no chain or AMO through the daemons,
#      the UDP fabric carried less than ofi, no SMSG relayed);
#   7. an unknown mode word: said on stderr, and the posts go through the daemons (verified).
# Needs root, ip, mpiexec.hydra and a libugni built with libfabric; otherwise 77.
# Usage: test_fabric_ofi_provkey.sh BUILD_DIR ofi|no-ofi     Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"

use_build "${1:-}" tests/integration/fabric_rma tests/integration/fabric_smsg
[[ ${2:-} == ofi ]] || skip "libugni built without libfabric (meson -Dofi; Debian libfabric-dev)"
[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces)"
need_cmd ip python3
HYDRA=$(command -v mpiexec.hydra) || skip "mpiexec.hydra not installed (Debian mpich)"
PROVIDER=${NICEMU_TEST_OFI_PROVIDER:-tcp;ofi_rxm}
MODE=prov_key,local

netns_test_hosts test_fabric_ofi_provkey fk 216 2
for i in 0 1; do fabric_daemon "$i" --fabric-data ofi --ofi-provider "$PROVIDER"; done
fabric_cred 1

RMA=$BUILD/tests/integration/fabric_rma
SMSG=$BUILD/tests/integration/fabric_smsg

# ofi A: host A's ofi counters and what went through its daemon: ops keys_asked
# keys_answered keys_cached local_missing errors udp_bytes_out chains amos smsg_relayed.
ofi() {
  "$CTL" --rundir "$TMP/host$1" --node "$1" status --json >"$TMP/status$1.json" 2>"$TMP/err" || { show_log "$TMP/err"; return 1; }
  "$CTL" --rundir "$TMP/host$1" stats --json >"$TMP/stats$1.json" 2>"$TMP/err" || { show_log "$TMP/err"; return 1; }
  python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["nodes"][0]
c = json.load(open(sys.argv[2]))["nodes"][0]["counters"]
o, r = s["ofi"], s["remote_ops"]
print(o["ops"], o["keys_asked"], o["keys_answered"], o["keys_cached"], o["local_missing"], o["errors"],
      r["initiator"]["bytes_out"], r["initiator"]["chains"], r["target"]["amos"], c["smsg_relay_sent"])' \
    "$TMP/status$1.json" "$TMP/stats$1.json"
}
for i in 0 1; do read -r -a before$i < <(ofi "$i") || die "status of node $i"; done

# ---- 1. data, verified ----
expect_verified "fabric_rma over ofi with $MODE, 2 hosts" "FMA and RDMA PUT/GET, AMOs, CQ writes, chains verified" \
  "$TMP/rma.log" 2 'rounds with 1 peers verified' \
  netns_hydra 60 2 1 "$TMP/rma.log" env NICEMU_OFI_MR_MODE=$MODE "$RMA" 4 262144
expect_verified "fabric_rma over ofi with $MODE, 4 ranks on 2 hosts" "chains of same-host and other-host members verified" \
  "$TMP/rma4.log" 4 'rounds with 3 peers verified' \
  netns_hydra 60 4 2 "$TMP/rma4.log" env NICEMU_OFI_MR_MODE=$MODE "$RMA" 2 65536

# ---- 2. stale handles: the question answered PROTECTION ----
if netns_hydra 60 2 1 "$TMP/errors.log" env NICEMU_OFI_MR_MODE=$MODE "$RMA" errors &&
    rma_errors_seen "$TMP/errors.log" &&
    grep -q 'the PUT after the errors landed' "$TMP/errors.log"; then
  pass "stale handle with provider keys: 6 posts complete with error events, nothing written, the PUT after them lands"
  grep -o 'through a deregistered handle: error event, status [0-9]*' "$TMP/errors.log" | sort | uniq -c | sed 's/^/    /'
else
  fail "stale handle with provider keys"; show_log "$TMP/errors.log"
fi

# ---- 3. a cached key whose registration was replaced ----
if netns_hydra 60 2 1 "$TMP/rekey.log" env NICEMU_OFI_MR_MODE=$MODE "$RMA" rekey &&
    [[ $(grep -c '^fabric_rma rekey: rank [01] verified' "$TMP/rekey.log") -eq 2 ]]; then
  pass "replaced registration: $(grep -h '^fabric_rma rekey: re-registered' "$TMP/rekey.log" | sed 's/^fabric_rma rekey: //')"
  pass "  $(grep -h '^fabric_rma rekey: the new registration' "$TMP/rekey.log" | sed 's/^fabric_rma rekey: //'); the new handle's PUT landed"
else
  fail "replaced registration with provider keys"; show_log "$TMP/rekey.log"
fi

# ---- 4. AMOs, remote events, sync flags; ordering ----
if netns_hydra 60 2 1 "$TMP/amo.log" env NICEMU_OFI_MR_MODE=$MODE "$RMA" amo &&
    [[ $(grep -c '^fabric_rma amo: .* AMOs verified' "$TMP/amo.log") -eq 2 ]]; then
  pass "$(grep -m1 '^fabric_rma amo:' "$TMP/amo.log" | sed 's/^fabric_rma amo: //')"
else
  fail "AMOs, remote events and sync flags with $MODE"; show_log "$TMP/amo.log"
fi
if netns_hydra 60 2 1 "$TMP/order.log" env NICEMU_OFI_MR_MODE=$MODE "$RMA" order 100 &&
    [[ $(grep -c '^fabric_rma order: rank [01]: .* verified' "$TMP/order.log") -eq 2 ]]; then
  pass "ordering with $MODE: $(grep -m1 '^fabric_rma order: rank 1' "$TMP/order.log" | sed 's/^fabric_rma order: rank 1: //')"
else
  fail "ordering with $MODE"; show_log "$TMP/order.log"
fi

# ---- 5. SMSG ----
smsg() {  # NODE INST PEER: one fabric_smsg on host NODE, in the background
  ip netns exec "${NS[$1]}" env NICEMU_OFI_MR_MODE=$MODE NICEMU_RUNDIR="$TMP/host$1" NICEMU_NODE="$1" \
    PMI_GNI_PTAG="$PMI_GNI_PTAG" PMI_GNI_COOKIE="$PMI_GNI_COOKIE" timeout -k 5 40 "$SMSG" "$2" 2000 "$3" \
    >"$TMP/smsg$1.log" 2>&1 &
  BG_PIDS+=($!)
}
smsg 0 10 1:11
smsg 1 11 0:10
ok=1; for p in "${BG_PIDS[@]}"; do wait "$p" || ok=0; done; BG_PIDS=()
n=$(cat "$TMP/smsg0.log" "$TMP/smsg1.log" | grep -c '2000 messages each way with 1 peers verified')
[[ $ok -eq 1 && $n -eq 2 ]] && pass "2000 SMSG messages each way over ofi with $MODE: exactly once, in order, verified" ||
  { fail "SMSG with $MODE: programs ok=$ok, $n of 2 verified"; show_log "$TMP/smsg0.log" "$TMP/smsg1.log"; }

# ---- 6. what the counters say ----
for i in 0 1; do
  read -r -a after < <(ofi "$i") || { fail "status of node $i"; continue; }
  eval "b=(\"\${before$i[@]}\")"
  d=(); for k in "${!after[@]}"; do d[k]=$((after[k] - b[k])); done
  # ops asked answered cached missing errors udp chains amos relayed
  if [[ ${d[1]} -ge 1 && ${d[2]} -ge 1 && ${d[3]} -ge 1 ]]; then
    pass "node $i: provider keys asked ${d[1]}, answered ${d[2]}, found cached ${d[3]}"
  else
    fail "node $i: provider keys asked ${d[1]}, answered ${d[2]}, cached ${d[3]} (want each >= 1)"
  fi
  [[ ${d[4]} -eq 0 ]] && pass "node $i: every provider operation carried a local registration's descriptor" ||
    fail "node $i: ${d[4]} provider operations without a local registration"
  if [[ ${d[0]} -ge 2000 && ${d[6]} -lt $((4 * 2 * 262144)) && ${d[7]} -eq 0 && ${d[8]} -eq 0 && ${d[9]} -eq 0 ]]; then
    pass "node $i: ${d[0]} posts over ofi; through the daemons: ${d[6]} bytes, no chain, no AMO, no SMSG message"
  else
    fail "node $i: ofi ops ${d[0]}; through the daemons: bytes ${d[6]}, chains ${d[7]}, AMOs ${d[8]}, SMSG ${d[9]}"
  fi
done

# ---- 7. an unknown mode word ----
read -r -a b0 < <(ofi 0)
if netns_hydra 60 2 1 "$TMP/bad.log" env NICEMU_OFI_MR_MODE=prov_key,bogus "$RMA" 1 65536 &&
    [[ $(grep -c 'rounds with 1 peers verified' "$TMP/bad.log") -eq 2 ]] &&
    grep -q 'NICEMU_OFI_MR_MODE=prov_key,bogus: unknown mode "bogus"' "$TMP/bad.log"; then
  read -r -a a0 < <(ofi 0)
  [[ $((a0[0] - b0[0])) -eq 0 ]] && pass "an unknown mode word: said on stderr, posts through the daemons, verified" ||
    fail "an unknown mode word: $((a0[0] - b0[0])) posts still went over ofi"
else
  fail "an unknown mode word"; show_log "$TMP/bad.log"
fi
finish fabric-ofi-provkey 0 1
