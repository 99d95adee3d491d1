#!/usr/bin/env bash
# The ofi fabric across two network namespace hosts (tools/lib/netns-hosts.sh), one daemon
# each with --fabric-data ofi over tcp;ofi_rxm: fabric_rma on 2 ranks, one per host, under
# MPICH's Hydra (as test_fabric_netns.sh hydra). FMA and RDMA PUT/GET then go rank to rank
# over libfabric, AMOs, CQ writes and chains through the daemons; fabric_rma verifies every
# byte at both ends. The daemons' status must show the ofi PUT/GET (ops and bytes, the
# CDMs' counters) and that the RMA bytes did not cross the UDP fabric (remote_ops.initiator
# bytes_out below what went over ofi), and each daemon handed out the address of its CDM.
# Then posts through a deregistered handle: error events, the page untouched. Then every
# Gemini and Aries AMO opcode in both lengths and PUTs with remote events and sync flags
# (fabric_rma amo: results, words, flags and event CQEs checked): the PUTs must have gone
# over ofi (the CDMs' ofi ops), and with NICEMU_OFI_AMO=1 the AMOs libfabric has too, the
# rest (FPMIN/FPMAX, AX with overlapping operands) through the daemons (their AMO counts).
# Needs root, ip, mpiexec.hydra and a libugni built with libfabric; otherwise 77.
# Usage: test_fabric_ofi.sh BUILD_DIR ofi|no-ofi     Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"

use_build "${1:-}" tests/integration/fabric_rma
[[ ${2:-} == ofi ]] || skip "libugni built without libfabric (meson -Dofi; Debian libfabric-dev)"
[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces)"
need_cmd ip python3
HYDRA=$(command -v mpiexec.hydra) || skip "mpiexec.hydra not installed (Debian mpich)"
PROVIDER=${NICEMU_TEST_OFI_PROVIDER:-tcp;ofi_rxm}

TAG=fo$$
SW=${TAG}sw
NS=("${TAG}a" "${TAG}b")
NET=10.214.$(($$ % 200)).
test_cleanup() { netns_hosts_down "${NS[@]}" "$SW"; }
test_init test_fabric_ofi

netns_fabric "$SW" "$NET" "${NS[@]}"

for i in 0 1; do fabric_daemon "$i" --fabric-data ofi --ofi-provider "$PROVIDER"; done
fabric_cred 1

RMA=$BUILD/tests/integration/fabric_rma
if netns_hydra 120 2 1 "$TMP/rma.log" "$RMA" 4 262144; then
  n=$(grep -c 'rounds with 1 peers verified' "$TMP/rma.log")
  [[ $n -eq 2 ]] && pass "fabric_rma over ofi ($PROVIDER), 2 hosts: FMA and RDMA PUT/GET, AMOs, CQ writes, chains verified" ||
    { fail "fabric_rma over ofi: $n of 2 ranks verified"; show_log "$TMP/rma.log"; }
else
  fail "fabric_rma over ofi"; show_log "$TMP/rma.log"
fi

# Errors: posts through a handle the target deregistered complete with error events, and
# the page is not written (fabric_rma errors).
if netns_hydra 120 2 1 "$TMP/errors.log" env NICEMU_OFI_AMO=1 "$RMA" errors &&
    [[ $(grep -c 'through a deregistered handle: error event' "$TMP/errors.log") -eq 5 ]] &&
    grep -q 'deregistered page is untouched' "$TMP/errors.log"; then
  pass "stale handle over ofi: RDMA PUT, FMA PUT, FMA GET, PUT with a remote event, AMO complete with error events, no stray write"
  grep -o 'status [0-9]*' "$TMP/errors.log" | sort | uniq -c | sed 's/^/    /'
else
  fail "stale handle over ofi"; show_log "$TMP/errors.log"
fi

# node_status A FILE: host A's daemon status; prints ofi ops, bytes, errors, the bytes of
# posts over UDP, addresses published and answered, and AMOs its responder executed.
node_status() {
  "$CTL" --rundir "$TMP/host$1" --node "$1" status --json >"$2" 2>"$TMP/err" || { show_log "$TMP/err"; return 1; }
  python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["nodes"][0]
o = s["ofi"]
print(o["ops"], o["bytes"], o["errors"], s["remote_ops"]["initiator"]["bytes_out"], o["directory"]["publications"],
      o["directory"]["answered"], s["remote_ops"]["target"]["amos"])' "$2"
}

# What went which way, from each daemon's status (the CDMs' counters reach the totals when
# they detach).
for i in 0 1; do
  read -r ops bytes errors udp published answered amos < <(node_status "$i" "$TMP/status$i.json") ||
    { fail "status of node $i"; continue; }
  # Per round towards the peer: an FMA PUT and GET of 4 KiB, an RDMA PUT and GET of the rest
  # of the 256 KiB slot: 4 rounds move 2 MiB over ofi.
  # Node 0 also posted the five through the stale handle: their errors are counted (and a
  # repost of the PUT that followed, if it raced the dropped connection).
  ok_err=$([[ $i -eq 0 ]] && echo $((errors >= 5 && errors <= 35)) || echo $((errors == 0)))
  if [[ $ops -ge 16 && $bytes -ge $((4 * 2 * 262144)) && $ok_err -eq 1 ]]; then
    pass "node $i: $ops PUT/GET over ofi, $bytes bytes, $errors error completions"
  else
    fail "node $i: ofi ops $ops, bytes $bytes, errors $errors"; show_log "$TMP/status$i.json"
  fi
  [[ $udp -lt $bytes ]] && pass "node $i: the UDP fabric carried only $udp bytes of posts (AMOs, CQ writes, chains)" ||
    fail "node $i: $udp bytes of posts crossed the UDP fabric, $bytes over ofi"
  [[ $published -ge 1 && $answered -ge 1 ]] && pass "node $i: its CDM's address published and handed to the peer's" ||
    fail "node $i: addresses published $published, answered $answered"
done

# AMOs, remote events and sync flags rank to rank: without NICEMU_OFI_AMO (AMOs through the
# daemons; the provider orders writes, the flag follows its data in order) and with it
# (tcp;ofi_rxm with atomics has no ordered writes: the flag waits for its data's completion).
for amo_env in 0 1; do
  for i in 0 1; do read -r ops0[i] _ _ _ _ _ amos0[i] < <(node_status "$i" "$TMP/before$i.json"); done
  if netns_hydra 120 2 1 "$TMP/amo$amo_env.log" env NICEMU_OFI_AMO=$amo_env "$RMA" amo &&
      [[ $(grep -c '^fabric_rma amo: .* AMOs verified' "$TMP/amo$amo_env.log") -eq 2 ]]; then
    pass "NICEMU_OFI_AMO=$amo_env: $(grep -m1 '^fabric_rma amo:' "$TMP/amo$amo_env.log" | sed 's/^fabric_rma amo: //')"
    read -r posted mappable < <(sed -n 's/^fabric_rma amo: \([0-9]*\) AMOs verified.*, \([0-9]*\) the ofi fabric can take.*/\1 \2/p' "$TMP/amo$amo_env.log" | head -1)
    [[ $amo_env -eq 1 ]] || mappable=0
    for i in 0 1; do
      read -r ops _ _ _ _ _ amos < <(node_status "$i" "$TMP/after$i.json")
      d_ops=$((ops - ops0[i])) d_amos=$((amos - amos0[i]))
      # Each node's CDM posted every AMO and 4 PUTs (the GET with a remote event goes
      # through the daemons); its peer's other AMOs reached this node's daemon.
      if [[ $d_ops -eq $((mappable + 4)) && $d_amos -eq $((posted - mappable)) ]]; then
        pass "  node $i: $d_ops posts over ofi ($mappable AMOs, 4 PUTs with remote events or sync flags), $d_amos AMOs through its daemon"
      else
        fail "  node $i: $d_ops posts over ofi (want $((mappable + 4))), $d_amos AMOs through its daemon (want $((posted - mappable)))"
      fi
    done
  else
    fail "AMOs, remote events and sync flags over ofi, NICEMU_OFI_AMO=$amo_env"; show_log "$TMP/amo$amo_env.log"
  fi
done
finish fabric-ofi 0 1
