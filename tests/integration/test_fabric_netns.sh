#!/usr/bin/env bash
# Three "hosts" made of network namespaces (veth pairs into a bridge that lives in a fourth
# namespace, so the host's own network is untouched), one daemon each, talking over the UDP
# fabric. Three processes exchange directed datagrams with every peer for 30 rounds, first
# on a clean link, then under `tc netem` loss, duplication, reordering and delay: every
# round's payload must arrive exactly once and in order (a duplicated or reordered daemon
# message would match the wrong round and fail the check), and the daemons' counters must
# show the retransmissions and suppressed duplicates that made it so. Where the kernel has
# no netem (containers, minimal kernels), the daemons impair their own outgoing packets
# instead (NICEMU_FABRIC_IMPAIR, seeded: loss, duplication, reordering; no delay) and the
# test says so.
# Then SMSG between every pair on the same impaired links (fabric_smsg: exactly once, in
# order, CQEs).
# With `hydra`, instead of the exchanges (its own test: 77 where MPICH's Hydra is not
# installed): on the impaired links, a 6-rank PMI job over the three namespace hosts launched
# by mpiexec.hydra (its rsh launcher replaced by `ip netns exec`), each rank verifying
# datagrams with every other rank, then fabric_rma (FMA PUT/GET, RDMA PUT/GET, FADD, CQ
# writes between every pair, verified at both ends) the same way.
# Needs root and ip with netns support; otherwise skipped (77).
# Namespaces and processes are removed on success and failure.
# Usage: test_fabric_netns.sh BUILD_DIR [hydra]     Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"

phase=${2:-}
[[ -z "$phase" || "$phase" == hydra ]] || die "unknown phase '$phase' (the only one is hydra)"
use_build "${1:-}" tests/integration/fabric_dgram tests/integration/fabric_smsg tests/integration/fabric_rma
PROG=$BUILD/tests/integration/fabric_dgram
[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces)"
need_cmd ip tc python3
if [[ $phase == hydra ]]; then
  HYDRA=$(command -v mpiexec.hydra) || skip "mpiexec.hydra not installed (Debian mpich)"
fi

TAG=nf$$
SW=${TAG}sw
NS=("${TAG}a" "${TAG}b" "${TAG}c")
NET=10.213.$(($$ % 200)).
# Deleting a namespace deletes its end of the veth pair, and with it the other end.
test_cleanup() { netns_hosts_down "${NS[@]}" "$SW"; }
test_init test_fabric_netns

netns_fabric "$SW" "$NET" "${NS[@]}"


# start_all [IMPAIR-SPEC]: one daemon per namespace, and the job credential on all three.
start_all() {
  for i in 0 1 2; do NICEMU_FABRIC_IMPAIR="${1:-}" fabric_daemon "$i"; done
  fabric_cred 1 2
}
stop_all() {
  for i in "${!DAEMON_PID[@]}"; do stop_daemon "$i"; done
}
start_all

# exchange BASE_INST ROUNDS NAME: three processes, one per host, every pair.
exchange() {
  local b=$1 rounds=$2 name=$3 i
  for i in 0 1 2; do
    local peers=()
    for j in 0 1 2; do [[ $j -ne $i ]] && peers+=("$j:$((b + j))"); done
    ip netns exec "${NS[$i]}" env NICEMU_RUNDIR="$TMP/host$i" NICEMU_NODE=$i \
      timeout -k 5 50 "$PROG" $((b + i)) "$rounds" "${peers[@]}" >>"$TMP/prog.log" 2>&1 &
    BG_PIDS+=($!)
  done
  wait_all "$name"
}

[[ $phase == hydra ]] || exchange 0 30 "clean link: 3 hosts, every pair, 30 rounds"

how="netem loss 10%, duplicate 5%, reorder 25%, delay 2±1 ms"
for i in 0 1 2; do
  if ! ip netns exec "${NS[$i]}" tc qdisc add dev "$(netns_host_if "$SW" "$i")" root netem delay 2ms 1ms loss 10% duplicate 5% \
      reorder 25% 50% 2>"$TMP/err"; then
    echo "note: tc netem unavailable ($(head -c 80 "$TMP/err")); the daemons impair their own packets instead" >&2
    how="daemon-side impairment (no netem here): loss 10%, duplicate 5%, reorder 25%, seed 7"
    stop_all
    start_all "loss=0.1,dup=0.05,reorder=0.25,seed=7"
    break
  fi
done
# The default phase: the exchanges on the impaired links, then SMSG; it ends here.
if [[ $phase != hydra ]]; then
  rtx0=0 dup0=0
  if [[ $how == netem* ]]; then
    rtx0=$(( $(node_counter 0 fabric_retransmits) + $(node_counter 1 fabric_retransmits) + $(node_counter 2 fabric_retransmits) ))
    dup0=$(( $(node_counter 0 fabric_duplicates) + $(node_counter 1 fabric_duplicates) + $(node_counter 2 fabric_duplicates) ))
  fi
  exchange 100 30 "$how: every round exactly once, in order"
  rtx=$(( $(node_counter 0 fabric_retransmits) + $(node_counter 1 fabric_retransmits) + $(node_counter 2 fabric_retransmits) - rtx0 ))
  dup=$(( $(node_counter 0 fabric_duplicates) + $(node_counter 1 fabric_duplicates) + $(node_counter 2 fabric_duplicates) - dup0 ))
  [[ $rtx -gt 0 ]] && pass "lost packets were retransmitted ($rtx records)" || fail "no retransmissions under 10% loss"
  [[ $dup -gt 0 ]] && pass "duplicates were suppressed ($dup records)" || fail "no duplicates counted under netem duplicate"

  # SMSG across the namespace hosts on the same impaired links: three processes, every pair,
  # 1000 messages each way, each exactly once and in order with its CQEs (fabric_smsg.c).
  SMSG=$BUILD/tests/integration/fabric_smsg
  ok=1
  for i in 0 1 2; do
    peers=()
    for j in 0 1 2; do [[ $j -ne $i ]] && peers+=("$j:$((200 + j))"); done
    ip netns exec "${NS[$i]}" env NICEMU_RUNDIR="$TMP/host$i" NICEMU_NODE=$i \
      timeout -k 5 60 "$SMSG" $((200 + i)) 1000 "${peers[@]}" >>"$TMP/prog.log" 2>&1 &
    BG_PIDS+=($!)
  done
  for p in "${BG_PIDS[@]}"; do wait "$p" || ok=0; done
  BG_PIDS=()
  if [[ $ok -eq 1 && $(grep -c '1000 messages each way with 2 peers verified' "$TMP/prog.log") -eq 3 ]]; then
    pass "SMSG on the impaired links: every pair, 1000 messages each way, exactly once, in order"
    grep -o 'verified in .*' "$TMP/prog.log" | head -1 | sed 's/^/    /'
  else
    fail "SMSG on the impaired links"; show_log "$TMP/prog.log"
  fi
  finish fabric-netns 0 1 2
fi

# ---- the `hydra` phase: Hydra across the namespaces ----
# netns_hydra (lib.sh): mpiexec on host 0, each proxy inside its host's namespace with that
# host's run directory (as it would find /run/nicemu on a real host).
if netns_hydra 60 6 2 "$TMP/hydra.log" "$PROG" pmi 10; then
  n=$(grep -c 'rounds with 5 peers verified' "$TMP/hydra.log")
  hosts=$(grep -o 'fabric_dgram [0-9]*/[0-9]*: 10 rounds' "$TMP/hydra.log" | cut -d' ' -f2 | cut -d/ -f1 | sort -u | wc -l)
  [[ $n -eq 6 && $hosts -eq 3 ]] && pass "Hydra: 6 ranks on 3 namespace hosts, datagrams between every pair verified" ||
    { fail "Hydra: $n of 6 ranks verified, on $hosts nodes"; show_log "$TMP/hydra.log"; }
else
  fail "Hydra job"; show_log "$TMP/hydra.log"
fi
# Memory operations between every pair (two ranks per host: same-host pairs too).
RMA=$BUILD/tests/integration/fabric_rma
expect_verified "Hydra: fabric_rma on 6 ranks, 3 hosts, $how" \
  "FMA, RDMA, AMO, CQ writes, chains (mixed same-host and other-host members) verified" \
  "$TMP/hydra-rma.log" 6 'rounds with 5 peers verified' netns_hydra 120 6 2 "$TMP/hydra-rma.log" "$RMA" 2 65536
finish fabric-netns-hydra 0 1 2
