#!/usr/bin/env bash
# The ofi fabric across two network namespace hosts (tools/lib/netns-hosts.sh), one daemon
# each with --fabric-data ofi over tcp;ofi_rxm: fabric_rma on 2 ranks, one per host, under
# MPICH's Hydra (as test_fabric_netns.sh hydra). FMA and RDMA PUT/GET then go rank to rank
# over libfabric, AMOs and CQ writes as messages the target's rank executes, chained FMA posts
# and chained CQ writes rank to rank too; fabric_rma verifies every byte at
# both ends. The daemons' status must show the ofi PUT/GET (ops and bytes, the
# CDMs' counters) and that the RMA bytes did not cross the UDP fabric (remote_ops.initiator
# bytes_out below what went over ofi), and each daemon handed out the address of its CDM.
# Datagrams (fabric_dgram, 4 ranks) between the same daemons: they stay on the daemons.
# Then posts through a deregistered handle: error events, the page untouched; AMOs into a
# deregistered and a read-only registration: PROTECTION and READ_ONLY, nothing written; a
# chain of CQ writes with such a member: its status, the others delivered, as through the
# daemons (run again with FI_PROVIDER naming no provider). Then
# every Gemini and Aries AMO opcode in both lengths, PUTs with remote events and sync flags and
# a GET with a remote event (fabric_rma amo: results, words, flags and event CQEs checked),
# over ofi and on the daemons' path (FI_PROVIDER naming no provider), the same digest of
# fetched values and words on both; over ofi all of them rank to rank (the CDMs' ofi ops),
# none through the daemons (their AMO counts). Then atomicity: 3 ranks add to one
# counter of rank 0 at once, one beside it (shared memory) and two on the other host (ofi
# messages): the exact sum. Then ordering: pairs of posts to one word in the default and
# strict classes (fabric_rma order), over ofi and through the daemons.
# Needs root, ip, mpiexec.hydra and a libugni built with libfabric; otherwise 77.
# Usage: test_fabric_ofi.sh BUILD_DIR ofi|no-ofi     Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"

use_build "${1:-}" tests/integration/fabric_rma tests/integration/fabric_dgram
[[ ${2:-} == ofi ]] || skip "libugni built without libfabric (meson -Dofi; Debian libfabric-dev)"
[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces)"
need_cmd ip python3
HYDRA=$(command -v mpiexec.hydra) || skip "mpiexec.hydra not installed (Debian mpich)"
PROVIDER=${NICEMU_TEST_OFI_PROVIDER:-tcp;ofi_rxm}

netns_test_hosts test_fabric_ofi fo 214 2

for i in 0 1; do fabric_daemon "$i" --fabric-data ofi --ofi-provider "$PROVIDER"; done
fabric_cred 1

RMA=$BUILD/tests/integration/fabric_rma
expect_verified "fabric_rma over ofi ($PROVIDER), 2 hosts" "FMA and RDMA PUT/GET, AMOs, CQ writes, chains verified" \
  "$TMP/rma.log" 2 'rounds with 1 peers verified' netns_hydra 120 2 1 "$TMP/rma.log" "$RMA" 4 262144

# Two ranks per host: every chain has a same-host member (run by the rank itself) beside the
# other host's (rank to rank), FMA and CQ-write chains alike.
expect_verified "fabric_rma over ofi, 4 ranks on 2 hosts" "chains of same-host and other-host members verified" \
  "$TMP/rma4.log" 4 'rounds with 3 peers verified' netns_hydra 120 4 2 "$TMP/rma4.log" "$RMA" 2 65536

# Datagrams stay on the daemons (the control plane) with --fabric-data ofi: 2 ranks per host,
# directed datagrams between every pair (fabric_dgram), the other host's matched by the
# daemons across the UDP fabric.
DGRAM=$BUILD/tests/integration/fabric_dgram
if netns_hydra 60 4 2 "$TMP/dgram.log" "$DGRAM" pmi 10; then
  n=$(grep -c 'rounds with 3 peers verified' "$TMP/dgram.log")
  [[ $n -eq 4 ]] && pass "datagrams with the daemons on ofi: 4 ranks on 2 hosts, every pair verified" ||
    { fail "datagrams with the daemons on ofi: $n of 4 ranks verified"; show_log "$TMP/dgram.log"; }
else
  fail "datagrams with the daemons on ofi"; show_log "$TMP/dgram.log"
fi

# Errors: posts through a handle the target deregistered complete with error events, and
# the page is not written (fabric_rma errors).
if netns_hydra 120 2 1 "$TMP/errors.log" "$RMA" errors &&
    rma_errors_seen "$TMP/errors.log" &&
    grep -q 'read-only page is untouched' "$TMP/errors.log"; then
  pass "stale handle over ofi: RDMA PUT, FMA PUT, FMA GET, PUT and GET with remote events, AMO complete with error events, no stray write"
  pass "AMOs over ofi messages: deregistered handle -> PROTECTION, read-only registration -> READ_ONLY, nothing written"
  grep -o 'status [0-9]*' "$TMP/errors.log" | sort | uniq -c | sed 's/^/    /'
else
  fail "stale handle over ofi"; show_log "$TMP/errors.log"
fi

# node_status A FILE: host A's daemon status; prints ofi ops, bytes, errors, the bytes of
# posts over UDP, addresses published and answered, AMOs its responder executed and chains
# its requester carried.
node_status() {
  "$CTL" --rundir "$TMP/host$1" --node "$1" status --json >"$2" 2>"$TMP/err" || { show_log "$TMP/err"; return 1; }
  python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["nodes"][0]
o = s["ofi"]
print(o["ops"], o["bytes"], o["errors"], s["remote_ops"]["initiator"]["bytes_out"], o["directory"]["publications"],
      o["directory"]["answered"], s["remote_ops"]["target"]["amos"], s["remote_ops"]["initiator"]["chains"])' "$2"
}

# What went which way, from each daemon's status (the CDMs' counters reach the totals when
# they detach).
for i in 0 1; do
  read -r ops bytes errors udp published answered amos chains < <(node_status "$i" "$TMP/status$i.json") ||
    { fail "status of node $i"; continue; }
  # Per round towards the peer: an FMA PUT and GET of 4 KiB, an RDMA PUT and GET of the rest
  # of the 256 KiB slot: 4 rounds move 2 MiB over ofi.
  # Node 0 also posted the eight through the stale and read-only handles: their errors are
  # counted (and reposts of those that raced the dropped connection).
  ok_err=$([[ $i -eq 0 ]] && echo $((errors >= 8 && errors <= 100)) || echo $((errors == 0)))
  if [[ $ops -ge 16 && $bytes -ge $((4 * 2 * 262144)) && $ok_err -eq 1 ]]; then
    pass "node $i: $ops posts over ofi, $bytes bytes, $errors error completions"
  else
    fail "node $i: ofi ops $ops, bytes $bytes, errors $errors"; show_log "$TMP/status$i.json"
  fi
  [[ $udp -lt $bytes ]] && pass "node $i: the UDP fabric carried only $udp bytes of posts" ||
    fail "node $i: $udp bytes of posts crossed the UDP fabric, $bytes over ofi"
  # Per round a chained PUT, GET, AMO ADD and CQ write (fabric_rma checks their data and
  # one event each): all rank to rank, none through the daemons.
  [[ $chains -eq 0 ]] && pass "node $i: chained FMA posts and CQ writes rank to rank (none through the daemons)" ||
    fail "node $i: $chains chains through the daemons, want 0"
  [[ $published -ge 1 && $answered -ge 1 ]] && pass "node $i: its CDM's address published and handed to the peer's" ||
    fail "node $i: addresses published $published, answered $answered"
done

# The chain of CQ writes with a stale member (fabric_rma errors) on the daemons' path too
# (FI_PROVIDER naming no provider): the same event status, the same entries delivered.
if netns_hydra 120 2 1 "$TMP/errors-daemons.log" env FI_PROVIDER=nicemu-none "$RMA" errors; then
  ofi_chain=$(grep -h 'chained CQ write' "$TMP/errors.log" | sort)
  udp_chain=$(grep -h 'chained CQ write' "$TMP/errors-daemons.log" | sort)
  read -r _ _ _ _ _ _ _ chains < <(node_status 0 "$TMP/status0-daemons.json")
  if [[ -n $ofi_chain && $ofi_chain == "$udp_chain" && ${chains:-0} -ge 1 ]]; then
    pass "chained CQ write with a stale member: the same outcome rank to rank and through the daemons ($chains there)"
    sed 's/^/    /' <<<"$ofi_chain"
  else
    fail "chained CQ write with a stale member: ofi '$ofi_chain', daemons '$udp_chain' ($chains chains through them)"
    show_log "$TMP/errors-daemons.log"
  fi
else
  fail "fabric_rma errors through the daemons"; show_log "$TMP/errors-daemons.log"
fi

# Who read the provider's completions: the ranks polling their CQs (ofi_poll) must have
# read some themselves, not only the progress threads (docs/ofi-fabric.md, Progress).
read -r inline thread kicks < <(python3 -c '
import json, sys
t = [0, 0, 0]
for f in sys.argv[1:]:
    o = json.load(open(f))["nodes"][0]["ofi"]
    t = [t[0] + o["reads_inline"], t[1] + o["reads_thread"], t[2] + o["kicks"]]
print(*t)' "$TMP/status0.json" "$TMP/status1.json" 2>/dev/null) || inline=
if [[ -n $inline && $inline -gt 0 ]]; then
  pass "provider completions read by polling ranks $inline, by progress threads $thread; progress threads woken by a poller $kicks"
else
  fail "no provider completion read by a polling rank (inline ${inline:-?}, progress threads ${thread:-?})"
fi

# AMOs, remote events and sync flags rank to rank (AMOs as messages the target executes),
# and through the daemons (FI_PROVIDER names no provider: the CDMs stay on the daemons' path).
# Both ways must give the same fetched values and words (the digest).
digests=()
for way in ofi daemons; do
  case $way in
    ofi) envs=(env) ;;
    daemons) envs=(env FI_PROVIDER=nicemu-none) ;;
  esac
  for i in 0 1; do read -r ops0[i] _ _ _ _ _ amos0[i] _ < <(node_status "$i" "$TMP/before$i.json"); done
  if netns_hydra 120 2 1 "$TMP/amo-$way.log" "${envs[@]}" "$RMA" amo &&
      [[ $(grep -c '^fabric_rma amo: .* AMOs verified' "$TMP/amo-$way.log") -eq 2 ]]; then
    pass "$way: $(grep -m1 '^fabric_rma amo:' "$TMP/amo-$way.log" | sed 's/^fabric_rma amo: //')"
    digests+=("$(grep '^fabric_rma amo:' "$TMP/amo-$way.log" | sed 's/.*digest //' | sort | tr '\n' ' ')")
    read -r posted < <(sed -n 's/^fabric_rma amo: \([0-9]*\) AMOs verified.*/\1/p' "$TMP/amo-$way.log" | head -1)
    for i in 0 1; do
      read -r ops _ _ _ _ _ amos _ < <(node_status "$i" "$TMP/after$i.json")
      d_ops=$((ops - ops0[i])) d_amos=$((amos - amos0[i]))
      # Over ofi each node's CDM posted every AMO, 4 PUTs and a GET with a remote event rank
      # to rank, none through the daemons; on the daemons' path the reverse.
      if [[ $way == daemons ]]; then want_ops=0 want_amos=$posted; else want_ops=$((posted + 5)) want_amos=0; fi
      if [[ $d_ops -eq $want_ops && $d_amos -eq $want_amos ]]; then
        pass "  node $i: $d_ops posts over ofi, $d_amos AMOs through its daemon"
      else
        fail "  node $i: $d_ops posts over ofi (want $want_ops), $d_amos AMOs through its daemon (want $want_amos)"
      fi
    done
  else
    fail "AMOs, remote events and sync flags, $way"; show_log "$TMP/amo-$way.log"
  fi
done
if [[ ${#digests[@]} -eq 2 && ${digests[0]} == "${digests[1]}" ]]; then
  pass "every AMO form gives the same fetched values and words over ofi messages and through the daemons"
else
  fail "AMO digests differ: ofi ${digests[0]:-?} daemons ${digests[1]:-?}"
fi

# Ordering (docs/ordering.md): rank 0 streams pairs of posts to one word each (AMO then PUT,
# PUT then AMO, GET then PUT, PUT then CQ write, PUT then GET; PUT then an SMSG message) in the
# default and strict classes, over ofi (RMA and messages: two paths, ofi_order.h keeps them in
# order) and on the daemons' path; the end words, what the GETs read and each CQ write's and
# SMSG message's word must follow the model (on the daemons' path the relay keeps a message
# behind the CDM's earlier posts, docs/notes/2026-12-07-smsg-relay-order.md).
for way in ofi daemons; do
  case $way in
    ofi) envs=(env) ;;
    daemons) envs=(env FI_PROVIDER=nicemu-none) ;;
  esac
  if netns_hydra 120 2 1 "$TMP/order-$way.log" "${envs[@]}" "$RMA" order 300 &&
      [[ $(grep -c '^fabric_rma order: rank [01]: .* verified' "$TMP/order-$way.log") -eq 2 ]]; then
    pass "ordering $way: $(grep -m1 '^fabric_rma order: rank 1' "$TMP/order-$way.log" | sed 's/^fabric_rma order: rank 1: //')"
  else
    fail "ordering $way"; show_log "$TMP/order-$way.log"
  fi
done

# Atomicity with the AMO lock: rank 0 (host A) owns the counter, rank 1 beside it adds through
# shared memory, ranks 2 and 3 (host B) through ofi messages, all at once.
read -r served0 < <("$CTL" --rundir "$TMP/host0" --node 0 status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"][0]["ofi"]["served"])')
if netns_hydra 180 4 2 "$TMP/atomic.log" "$RMA" atomic 2000 &&
    grep -q '^fabric_rma atomic: counter 6000 = 3 ranks x 2000 AMOs, exact' "$TMP/atomic.log"; then
  pass "atomicity: $(grep '^fabric_rma atomic: counter' "$TMP/atomic.log" | sed 's/^fabric_rma atomic: //') (1 rank by shared memory, 2 over ofi)"
  grep '^fabric_rma atomic: rank' "$TMP/atomic.log" | sed 's/^fabric_rma atomic: /    /'
  read -r served < <("$CTL" --rundir "$TMP/host0" --node 0 status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"][0]["ofi"]["served"])')
  [[ $((served - served0)) -ge 4000 ]] && pass "  node 0's CDMs served $((served - served0)) requests over ofi" ||
    fail "  node 0's CDMs served $((served - served0)) requests over ofi (want >= 4000)"
else
  fail "atomicity of AMOs over ofi with shared-memory AMOs"; show_log "$TMP/atomic.log"
fi
finish fabric-ofi 0 1
