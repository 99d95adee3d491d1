#!/usr/bin/env bash
# libfabric's own gni provider on two namespace hosts whose daemons say fabric_data = ofi
# (docs/clients/libfabric.md, "Beside the ofi fabric"): fi_rdm_pingpong over gni, server on
# host A's node 0, client on host B's node 1. The provider's process has libfabric 1.13.1
# loaded; libugni's ofi port then opens its own provider (tcp;ofi_rxm) in that process.
# Checks: the server maps one libfabric (the 1.13.1 copy), the provider's posts to the other
# host go rank to rank (the daemons' ofi counts); then with FI_PROVIDER=gni the port refuses
# gni and everything goes through the daemons.
# Needs the libfabric 1.13.1 build of tools/compat/recipes/libfabric (NICEMU_LIBFABRIC_GNI,
# default /tmp/nicemu-compat/libfabric/install), root and ip; otherwise 77.
# NICEMU_TEST_NETNS_PREFIX (namespace names), NICEMU_TEST_GNI_ITERS (ping-pong iterations, 20),
# NICEMU_TEST_GNI_FABRIC_DATA (udp: the daemons' path, for comparison; the ofi checks then fail).
# Usage: test_fabric_ofi_gni.sh BUILD_DIR ofi|no-ofi     Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"

use_build "${1:-}" nicemu/daemon/nicemu
[[ ${2:-} == ofi ]] || skip "libugni built without libfabric (meson -Dofi; Debian libfabric-dev)"
[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces)"
need_cmd ip
LF=${NICEMU_LIBFABRIC_GNI:-/tmp/nicemu-compat/libfabric/install}
[[ -x $LF/bin/fi_rdm_pingpong && -e $LF/lib/libfabric.so.1 ]] ||
  skip "no libfabric with the gni provider and fabtests at $LF (tools/compat/recipes/libfabric builds it)"

TAG=${NICEMU_TEST_NETNS_PREFIX:-fg}$$
NS=("${TAG}a" "${TAG}b")
test_cleanup() {
  local n
  for n in "${NS[@]}"; do ip netns del "$n" 2>/dev/null; rm -rf "/etc/netns/$n"; done
}
test_init test_fabric_ofi_gni

# Two hosts joined by a veth pair named ipogif0, with the MACs and host names through which
# the gni provider finds a node's NIC address (tools/compat/recipes/lib.sh, ipogif_netns):
# node 0 is 10.128.0.1, node 1 10.128.0.2. The daemons' UDP fabric and tcp;ofi_rxm use the
# same link.
ip netns add "${NS[0]}" && ip netns add "${NS[1]}" || skip "cannot create network namespaces"
ip link add ipogif0 address 00:01:01:00:00:00 netns "${NS[0]}" type veth \
  peer name ipogif0 address 00:01:01:00:00:01 netns "${NS[1]}" || skip "cannot create the veth pair"
host=$(hostname)
for i in 0 1; do
  n=${NS[$i]}
  ip -n "$n" addr add "10.128.0.$((i + 1))/24" dev ipogif0
  ip -n "$n" link set lo up
  ip -n "$n" link set ipogif0 up
  ip -n "$n" neigh add "10.128.0.$((2 - i))" lladdr "00:01:01:00:00:0$((1 - i))" dev ipogif0 nud permanent
  mkdir -p "/etc/netns/$n"
  printf '127.0.0.1 localhost\n10.128.0.%d %s nid0000%d\n10.128.0.%d nid0000%d\n' \
    $((i + 1)) "$host" "$i" $((2 - i)) $((1 - i)) >"/etc/netns/$n/hosts"
done
fabric_key
"$CTL" fabric gen --port 7700 10.128.0.1 10.128.0.2 >"$TMP/fabric.toml" || die "nicemuctl fabric gen"
DAEMON_NS=("${NS[@]}")
for i in 0 1; do fabric_daemon "$i" --fabric-data "${NICEMU_TEST_GNI_FABRIC_DATA:-ofi}" --ofi-provider 'tcp;ofi_rxm'; done
fabric_cred 1

# A process of node N as a launcher starts one (a singleton job for ALPS): the 1.13.1
# libfabric first in the library path, then this build's libraries.
LIBS="$LF/lib:$BUILD/ugni:$BUILD/udreg:$BUILD/alps:$BUILD/pmi"
on_node() {  # N command...
  local n=$1
  shift
  ip netns exec "${NS[$n]}" env NICEMU_RUNDIR="$TMP/host$n" NICEMU_NODE="$n" PMI_GNI_LOC_ADDR="$n" \
    PMI_GNI_PTAG="$PMI_GNI_PTAG" PMI_GNI_COOKIE="$PMI_GNI_COOKIE" PMI_GNI_DEV_ID=0 \
    TMPDIR="$TMP" LD_LIBRARY_PATH="$LIBS" "$@"
}
# ofi_ops A: the ofi posts host A's daemon counted (its CDMs' counters, added when they detach).
ofi_ops() {
  "$CTL" --rundir "$TMP/host$1" --node "$1" status --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"][0]["ofi"]["ops"])'
}
# relay_sent A: SMSG messages host A's daemon relayed to another host.
relay_sent() {
  "$CTL" --rundir "$TMP/host$1" --node "$1" status --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"][0].get("smsg_relay", {}).get("sent", 0))'
}
# pingpong LOG [ENV=VALUE...]: fi_rdm_pingpong over gni, server on node 0, client on node 1;
# the libfabric files the server maps once its CDM is attached in LOG.maps. 64 KiB: the
# provider's rendezvous (an RDMA GET of the sender's buffer, which goes rank to rank); its
# smaller messages are SMSG (16 KiB mailboxes, which a frame holds), rank to rank as well.
ITERS=${NICEMU_TEST_GNI_ITERS:-20}
pingpong() {
  local log=$1 rc=0 src=0
  shift
  on_node 0 env "$@" timeout -k 5 60 "$LF/bin/fi_rdm_pingpong" -p gni -I "$ITERS" -S 65536 -s 10.128.0.1 >"$log.server" 2>&1 &
  local srv=$! pp c
  sleep 1
  pp=$srv  # ip netns exec, env and timeout may each be a parent of the program
  while c=$(pgrep -P "$pp" | head -n 1) && [[ -n $c ]]; do pp=$c; done
  grep -o '/[^ ]*libfabric\.so[^ ]*' "/proc/$pp/maps" 2>/dev/null | sort -u >"$log.maps"
  on_node 1 env "$@" timeout -k 5 60 "$LF/bin/fi_rdm_pingpong" -p gni -I "$ITERS" -S 65536 -s 10.128.0.2 10.128.0.1 >"$log" 2>&1 || rc=$?
  wait "$srv" || src=$?
  echo "client rc $rc, server rc $src" >>"$log"
  [[ $rc -eq 0 && $src -eq 0 ]]
}

# 1. The provider's processes: libugni's port finds the libfabric they loaded (1.13.1) and
# opens tcp;ofi_rxm in it; the provider's posts to the other host go rank to rank.
read -r before0 < <(ofi_ops 0)
read -r before1 < <(ofi_ops 1)
ran=0
if pingpong "$TMP/pp.log"; then
  ran=1
  pass "fi_rdm_pingpong over gni, 2 hosts with fabric_data = ofi: $(grep -a '^[0-9]' "$TMP/pp.log" | tail -n 1 | tr -s ' ')"
else
  fail "fi_rdm_pingpong over gni with fabric_data = ofi"; show_log "$TMP/pp.log" "$TMP/pp.log.server"
fi
if [[ $(wc -l <"$TMP/pp.log.maps") -ge 1 ]] && ! grep -qv "^$LF/lib/" "$TMP/pp.log.maps"; then
  pass "one libfabric in the provider's process: $(tr '\n' ' ' <"$TMP/pp.log.maps")"
else
  fail "libfabric files mapped by the server: $(tr '\n' ' ' <"$TMP/pp.log.maps")"
fi
grep -a 'libugni(nicemu): ofi fabric' "$TMP/pp.log" "$TMP/pp.log.server" && fail "libugni's port did not open"
# The CDMs' counters reach the daemons' totals when they detach: a moment after the exit.
for _ in $(seq 50); do
  d0=$(($(ofi_ops 0) - before0)) d1=$(($(ofi_ops 1) - before1))
  [[ $d0 -gt 0 && $d1 -gt 0 ]] && break
  sleep 0.1
done
[[ $d0 -gt 0 && $d1 -gt 0 ]] && pass "the provider's posts to the other host rank to rank: $d0 and $d1 ofi posts" ||
  fail "ofi posts $d0 and $d1 (want some on both hosts)"
r0=$(relay_sent 0) r1=$(relay_sent 1)
[[ $ran -eq 1 && $r0 -eq 0 && $r1 -eq 0 ]] && pass "the provider's SMSG rank to rank: the daemons relayed no message" ||
  fail "the daemons relayed $r0 and $r1 SMSG messages (want none: the provider's mailboxes fit a frame; ping-pong ran: $ran)"

# 2. FI_PROVIDER=gni: libfabric then hides every other provider, also from libugni's port, and
# the port refuses gni itself (it runs on libugni): the CDMs take the daemons' path.
before0=$(ofi_ops 0) before1=$(ofi_ops 1)
ran=0
if pingpong "$TMP/pp-env.log" FI_PROVIDER=gni; then
  ran=1
  pass "fi_rdm_pingpong over gni with FI_PROVIDER=gni: $(grep -a '^[0-9]' "$TMP/pp-env.log" | tail -n 1 | tr -s ' ')"
else
  fail "fi_rdm_pingpong over gni with FI_PROVIDER=gni"; show_log "$TMP/pp-env.log" "$TMP/pp-env.log.server"
fi
grep -q 'provider "gni" runs on libugni itself' "$TMP/pp-env.log" &&
  pass "FI_PROVIDER=gni: libugni's port refuses gni ($(grep -m1 -a 'libugni(nicemu)' "$TMP/pp-env.log"))" ||
  { fail "FI_PROVIDER=gni: no refusal said"; show_log "$TMP/pp-env.log"; }
d0=$(($(ofi_ops 0) - before0)) d1=$(($(ofi_ops 1) - before1))
[[ $ran -eq 1 && $d0 -eq 0 && $d1 -eq 0 ]] && pass "FI_PROVIDER=gni: no ofi post, all through the daemons" ||
  fail "FI_PROVIDER=gni: ofi posts $d0 and $d1 (want 0)"
r=$(($(relay_sent 0) + $(relay_sent 1)))
[[ $r -gt 0 ]] && pass "FI_PROVIDER=gni: the daemons relayed the provider's SMSG ($r messages)" ||
  fail "FI_PROVIDER=gni: the daemons relayed no SMSG message (the relay count is not read right)"
finish fabric-ofi-gni 0 1
