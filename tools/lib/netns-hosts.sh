# tools/lib/netns-hosts.sh — emulated hosts made of network namespaces (sourced, not run).
# Used by tests/integration/test_fabric_netns.sh, test_fabric_ofi.sh, test_drc_netns.sh,
# test_slurm.sh and tools/soak.
#
# netns_hosts_up SW NET NS...: a bridge br0 in namespace SW (so the host's own network is
# untouched) and one namespace per further name, joined to it by a veth pair; the k-th
# (from 0) gets address NET(k+1)/24 (NET like "10.213.7."), or, for more than 253 hosts,
# with NET of two octets ("10.213."), NET(k/250).(k%250+1)/16 (netns_host_addr). The veth
# names are derived from SW. Returns non-zero with the failing command's message on stderr.
# netns_hosts_down SW NS...: SIGKILLs what still runs in them and deletes them (a namespace's end of a veth pair takes the other
# end with it). Safe to call on a partial set-up.
netns_hosts_up() {
  local sw=$1 net=$2 k=0 ns
  shift 2
  ip netns add "$sw" || return 1
  ip -n "$sw" link add br0 type bridge || return 1
  ip -n "$sw" link set br0 up || return 1
  ip -n "$sw" link set lo up || return 1
  for ns in "$@"; do
    ip netns add "$ns" || return 1
    ip -n "$ns" link set lo up || return 1
    ip link add "${sw}h$k" netns "$ns" type veth peer name "${sw}s$k" netns "$sw" || return 1
    ip -n "$sw" link set "${sw}s$k" master br0 up || return 1
    ip -n "$ns" addr add "$(netns_host_addr "$net" "$k")" dev "${sw}h$k" || return 1
    ip -n "$ns" link set "${sw}h$k" up || return 1
    k=$((k + 1))
  done
  # The bridge may need a moment before it forwards.
  local to
  to=$(netns_host_addr "$net" $((k > 1 ? 1 : 0)))
  ip netns exec "${1}" ping -c 1 -W 2 "${to%/*}" >/dev/null 2>&1 || sleep 1
  return 0
}
# netns_host_addr NET K: host K's address with its prefix length (see netns_hosts_up).
netns_host_addr() {
  local dots=${1//[^.]/}
  if [[ ${#dots} -eq 2 ]]; then echo "${1}$(($2 / 250)).$(($2 % 250 + 1))/16"; else echo "${1}$(($2 + 1))/24"; fi
}
netns_hosts_down() {
  local ns p
  # A host that goes away takes its processes: whatever a failed or timed-out job left in a
  # namespace (ranks a launcher did not reap) would otherwise outlive it, holding the
  # namespace and the CPU.
  for ns in "$@"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  return 0
}
# netns_host_if SW K: the interface name of host K inside its namespace.
netns_host_if() { echo "${1}h$2"; }
# netns_hosts_rsh FILE NET RUNDIR NS...: writes FILE, an rsh stand-in for Hydra's launcher
# (-launcher rsh -launcher-exec FILE) that runs the command inside the namespace of host
# NET(k+1), with NICEMU_RUNDIR=RUNDIR/host<k> and NICEMU_NODE=<k>: the run directory of that
# host's daemon, as a process would find /run/nicemu on a real host. Up to 253 hosts.
netns_hosts_rsh() {
  local file=$1 net=$2 rundir=$3
  shift 3
  {
    echo '#!/bin/bash'
    echo 'host=$1; shift'
    echo "net='$net' rundir='$rundir' ns=($*)"
    echo 'k=$(( ${host##*.} - 1 ))'
    echo 'if [[ ${host%.*}. != "$net" || $k -lt 0 || $k -ge ${#ns[@]} ]]; then echo "netns-rsh: unknown host $host" >&2; exit 1; fi'
    echo 'exec ip netns exec "${ns[$k]}" env NICEMU_RUNDIR="$rundir/host$k" NICEMU_NODE=$k sh -c "$*"'
  } >"$file" && chmod +x "$file"
}
