#!/usr/bin/env bash
# tests/integration/test_slurm.sh — a real Slurm cluster on this machine, with nicemu's SPANK plugin.
#
# Installs Debian's Slurm and munge, starts munged (unless one runs), then builds three
# emulated hosts out of network namespaces (tools/lib/netns-hosts.sh), each with its own
# address and host name (a UTS namespace): node0 and node1 each run a slurmd and a nicemu
# daemon, the daemons talking over the UDP fabric; node2 runs a slurmd and no daemon.
# slurmctld, srun and sbatch run in a fourth namespace ("ctl"). Jobs run as two throw-away
# users. Then checks:
#   - srun --mpi=pmi2 -N2 -n4: the quickstart demo (examples/gni_ring), Cray PMI's checks
#     (pmi_check: KVS, PMI_Allgather, PMI_Get_nid, clique and SMP queries), fabric_dgram
#     (every rank binds EPs to every other rank's remote id across the namespaces),
#     fabric_rma; an sbatch script running the DMAPP example (examples/dmapp_histogram)
#     and gni_ring in two steps that share the job's credential;
#   - a different credential per job, and live credentials in `nicemuctl cred list`;
#   - srun --nicemu=off: no PMI_GNI_* from the plugin;
#   - Open MPI's btl/ugni build (tools/compat/recipes/openmpi, when built with Slurm and PMIx) under
#     srun --mpi=pmix -N2 -n4: hello_c, ring_c, connectivity_c, mpi_pingpong over pml ob1
#     and btl ugni,self, with the plugin's credential;
#   - a second user's job cannot attach with the first job's credential (its memory is
#     reachable only through a CDM of that credential);
#   - DRC between jobs (tests/integration/drc_pair.c): a service job of one user grants a
#     credential to a client job of another user by its job id; they exchange SMSG and RDMA
#     across node0 and node1; a third user's job is refused; nothing is left after both;
#   - after a job ends and after scancel in the middle of a run, no CDM, registration,
#     mailbox or credential of that job remains on any daemon (nicemuctl status --json);
#   - a step on the node without a daemon fails at once, saying so; so does one on a node
#     whose daemon was killed (its socket left behind).
# Everything it starts (daemons, slurm processes, namespaces, users) is removed on exit.
#
# Usage: tests/integration/test_slurm.sh [--build DIR] [--short] [--keep-going]
#   --build DIR   meson build directory with the daemon, nicemuctl, the examples, the test
#                 programs and slurm/spank_nicemu.so (default: ./build of the repository)
#   --short       the quick form for the test suite (gni_ring, a cancelled job, the node
#                 without a daemon)
#   --hold        after the checks keep the cluster up until SIGINT/SIGTERM, and print how
#                 to run commands on it (for measurements: docs/performance.md, *Slurm*); the
#                 exit status is then 1
# Exit: 0 every check passed, 1 a check failed, 77 Slurm or namespaces unavailable.
set -u
# The integration tests' frame: pass/fail/skip, the scratch directory and the EXIT trap,
# start_daemon in a namespace, finish.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../../tools/lib/netns-hosts.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# Where tools/compat/recipes/openmpi builds Open MPI (tools/compat/recipes/lib.sh).
COMPAT_DIR=${NICEMU_COMPAT_DIR:-/tmp/nicemu-compat}

BUILD=$ROOT/build
SHORT=0
HOLD=0
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$(cd "$2" && pwd) || exit 1; shift 2 ;;
    --short) SHORT=1; shift ;;
    --hold) HOLD=1; shift ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

[ "$(id -u)" -eq 0 ] || skip "needs root (namespaces, slurmd, users)"
use_build "$BUILD"  # DAEMON, CTL
PLUGIN=$BUILD/slurm/spank_nicemu.so
RING=$BUILD/examples/gni_ring
HIST=$BUILD/examples/dmapp_histogram
DGRAM=$BUILD/tests/integration/fabric_dgram
RMA=$BUILD/tests/integration/fabric_rma
PMICHECK=$BUILD/tests/pmi_check
PAIR=$BUILD/tests/integration/drc_pair
need_exec "$RING" "$HIST" "$DGRAM" "$RMA"
[ "$SHORT" = 0 ] && need_exec "$PMICHECK" "$PAIR"
[ -f "$PLUGIN" ] || skip "$PLUGIN not built (needs libslurm-dev at meson setup)"

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null 2>&1 ||
    skip "cannot install slurm-wlm and munge"
fi
need_cmd slurmctld slurmd srun sbatch scancel squeue munged ip unshare runuser useradd python3

TAG=sl$$
SW=${TAG}w
CTLNS=${TAG}c
NS=("${TAG}0" "${TAG}1" "${TAG}2")
NET=10.214.$(($$ % 200)).
USERS=()
STARTED_MUNGED=""
SLURM_PIDS=()

# Before lib.sh's own clean-up (which then stops the daemons and removes TMP).
test_cleanup() {
  local p n u
  # Every process in our namespaces is ours: slurmctld, the slurmds, their slurmstepds and
  # tasks, the nicemu daemons.
  for n in "$CTLNS" "${NS[@]}"; do
    for p in $(ip netns pids "$n" 2>/dev/null); do kill -TERM "$p" 2>/dev/null; done
  done
  for _ in $(seq 30); do
    local left=0
    for n in "$CTLNS" "${NS[@]}"; do [ -n "$(ip netns pids "$n" 2>/dev/null)" ] && left=1; done
    [ $left -eq 0 ] && break
    sleep 0.1
  done
  for n in "$CTLNS" "${NS[@]}"; do
    for p in $(ip netns pids "$n" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  done
  for p in "${SLURM_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  netns_hosts_down "${NS[@]}" "$CTLNS" "$SW"
  for n in "${NS[@]}" "$CTLNS"; do rm -rf "/etc/netns/$n"; done
  [ -n "$STARTED_MUNGED" ] && kill -TERM "$STARTED_MUNGED" 2>/dev/null
  for u in "${USERS[@]}"; do
    userdel "$u" 2>/dev/null
    getent group "$u" >/dev/null && groupdel "$u" 2>/dev/null
  done
  if [ "${KEEP_TMP:-0}" = 1 ]; then echo "logs kept in $TMP" >&2; TMP=""; fi
}
TMPDIR=/tmp test_init nicemu-slurm  # in /tmp whatever TMPDIR is: the job users must reach it
chmod 755 "$TMP"

# ---- munge ----
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  [ -s /etc/munge/munge.key ] || { mungekey -c 2>/dev/null || create-munge-key -f >/dev/null 2>&1; }
  mkdir -p /run/munge && chown munge:munge /run/munge
  runuser -u munge -- munged 2>"$TMP/munged.err" || skip "munged does not start: $(cat "$TMP/munged.err")"
  STARTED_MUNGED=$(cat /run/munge/munged.pid 2>/dev/null)
  munge -n | unmunge >/dev/null || skip "munge does not work"
fi

# ---- namespaces: node0..2 and ctl, on one bridge ----
netns_hosts_up "$SW" "$NET" "${NS[@]}" "$CTLNS" 2>"$TMP/err" || skip "cannot build the namespace network: $(cat "$TMP/err")"
CTLADDR=${NET}4
HOSTS="127.0.0.1 localhost
${NET}1 node0
${NET}2 node1
${NET}3 node2
${CTLADDR} ctl"

# in_host NS HOSTNAME CMD...: CMD in namespace NS under its own host name.
in_host() {
  local ns=$1 h=$2
  shift 2
  ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$h" "$@"
}

# ---- users ----
for u in nicemu-sa-$$ nicemu-sb-$$ nicemu-sc-$$; do
  useradd --system --no-create-home --user-group --shell /bin/sh "$u" || skip "useradd $u failed"
  USERS+=("$u")
done
UA=${USERS[0]} UB=${USERS[1]} UC=${USERS[2]}
mkdir -p "$TMP/out" && chmod 1777 "$TMP/out"
# The job users must reach the build's programs and the output directory (a build under a 0700
# home would otherwise fail each job with only "Permission denied" in its log).
REACH=(--exec "$RING" --exec "$HIST" --exec "$DGRAM" --exec "$RMA" --dir "$TMP/out")
[ "$SHORT" = 0 ] && REACH+=(--exec "$PMICHECK" --exec "$PAIR")
for u in "${USERS[@]}"; do
  python3 "$ROOT/tools/lib/user_access.py" --user "$u" "${REACH[@]}" ||
    die "user $u cannot reach the build or the output directory (above)"
done

# ---- nicemu daemons on node0 and node1, over the UDP fabric ----
fabric_key
SLURMKEY=$TMP/slurm.key
"$CTL" keygen "$SLURMKEY" >/dev/null || exit 1
"$CTL" fabric gen --port 7700 "${NET}1" "${NET}2" >"$TMP/fabric.toml" || exit 1
for i in 0 1; do
  DAEMON_NS[i]=${NS[$i]}
  start_daemon "$i" "$TMP/node$i" --fabric "$TMP/fabric.toml" --fabric-key "$FABRIC_KEY" --log-level info
done
mkdir -p "$TMP/node2"  # node2's run directory: no daemon
chmod 755 "$TMP"/node*

# ---- Slurm configuration ----
CONF=$TMP/etc
mkdir -p "$CONF" "$TMP/state" "$TMP/spool"
cat >"$CONF/plugstack.conf" <<EOF
required $PLUGIN rundir=$TMP/%h key=$SLURMKEY
EOF
CPUS=$(nproc)
[ "$CPUS" -ge 2 ] || CPUS=2
cat >"$CONF/slurm.conf" <<EOF
ClusterName=nicemu
SlurmctldHost=ctl($CTLADDR)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool/%n
TmpFS=$TMP/tmpfs/%n
SlurmctldPidFile=$TMP/slurmctld.pid
SlurmdPidFile=$TMP/slurmd-%n.pid
SlurmctldLogFile=$TMP/slurmctld.log
SlurmdLogFile=$TMP/slurmd-%n.log
SlurmdDebug=info
SlurmctldPort=$((6817 + 0))
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
PlugStackConfig=$CONF/plugstack.conf
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
InactiveLimit=0
MinJobAge=300
MessageTimeout=10
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=node0 NodeAddr=${NET}1 CPUs=$((CPUS * 2)) State=UNKNOWN
NodeName=node1 NodeAddr=${NET}2 CPUs=$((CPUS * 2)) State=UNKNOWN
NodeName=node2 NodeAddr=${NET}3 CPUs=$((CPUS * 2)) State=UNKNOWN
PartitionName=nicemu Nodes=node0,node1 Default=YES MaxTime=10 State=UP
PartitionName=nodaemon Nodes=node2 MaxTime=10 State=UP
EOF
# slurmd loads a cgroup plugin even with proctrack/linuxproc: name the hierarchy this
# machine has (containers often have v1 or a hybrid, where autodetection fails).
if [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; then
  echo "CgroupPlugin=cgroup/v2" >"$CONF/cgroup.conf"
else
  echo "CgroupPlugin=cgroup/v1" >"$CONF/cgroup.conf"
fi
echo "IgnoreSystemd=yes" >>"$CONF/cgroup.conf"
mkdir -p "$TMP/spool/node0" "$TMP/spool/node1" "$TMP/spool/node2"
# Each node's /tmp of its own: the PMIx plugin makes spmix_appdir_<uid>_<job>.<step> in
# TmpFS on every node of a step, and the emulated hosts share this machine's /tmp.
for n in node0 node1 node2; do mkdir -p "$TMP/tmpfs/$n" && chmod 1777 "$TMP/tmpfs/$n"; done
export SLURM_CONF=$CONF/slurm.conf
# Host names resolve the same in every namespace (ip netns exec binds /etc/netns/NS/hosts).
for n in "${NS[@]}" "$CTLNS"; do mkdir -p "/etc/netns/$n" && echo "$HOSTS" >"/etc/netns/$n/hosts"; done

in_host "$CTLNS" ctl slurmctld -D -i -f "$SLURM_CONF" >"$TMP/slurmctld.out" 2>&1 </dev/null &
SLURM_PIDS+=($!)
for i in 0 1 2; do
  in_host "${NS[$i]}" "node$i" slurmd -D -N "node$i" -f "$SLURM_CONF" >"$TMP/slurmd$i.out" 2>&1 </dev/null &
  SLURM_PIDS+=($!)
done

# ctl_run CMD...: a client command in the ctl namespace (as root).
ctl_run() { in_host "$CTLNS" ctl env SLURM_CONF="$SLURM_CONF" "$@"; }
# as_user USER CMD...: a client command in the ctl namespace as USER, from $TMP/out.
as_user() {
  local u=$1
  shift
  in_host "$CTLNS" ctl runuser -u "$u" -- env SLURM_CONF="$SLURM_CONF" sh -c 'cd "$0" && exec "$@"' "$TMP/out" "$@"
}
up=0
for _ in $(seq 150); do
  if [ "$(ctl_run sinfo -h -o '%T' -N 2>/dev/null | grep -c idle)" -eq 3 ]; then up=1; break; fi
  sleep 0.2
done
if [ $up -ne 1 ]; then
  ctl_run sinfo -N >&2
  tail -n 20 "$TMP/slurmctld.log" "$TMP"/slurmd-*.log >&2
  die "the cluster did not come up (3 idle nodes)"
fi
pass "slurmctld and 3 slurmds up in their namespaces ($(slurmctld -V))"

# ---- helpers on the daemons' state ----
# job_leftovers PTAG COOKIE: what either daemon still holds of that credential (CDMs,
# registrations, mailboxes, the credential); empty when nothing.
job_leftovers() {
  local i
  for i in 0 1; do
    "$CTL" --rundir "$TMP/node$i" status --json | python3 -c '
import json, sys
ptag, cookie, node = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
doc = json.load(sys.stdin)
nodes = doc.get("nodes", [doc])
for n in nodes:
    for c in n.get("credentials", []):
        if c.get("ptag") == ptag and c.get("cookie") == cookie:
            print(f"node{node}: credential ptag {ptag}")
    for c in n.get("cdms", []):
        if c.get("ptag") == ptag and c.get("cookie") == cookie:
            print("node%s: CDM inst %s of pid %s (%s registrations, %s mailboxes)" % (
                node, c.get("inst_id"), c.get("pid"), c.get("registrations"), c.get("mailboxes")))
    for m in n.get("msgq", []):
        if m.get("ptag") == ptag:
            print(f"node{node}: MSGQ segment of ptag {ptag}")
' "$1" "$2" "$i"
  done
}
# cred_of_job OUTFILE: "PTAG COOKIE" as the job's tasks saw them (lines PMI_GNI_PTAG=..).
cred_of_job() {
  local p c
  p=$(grep -o 'PMI_GNI_PTAG=[0-9]*' "$1" | cut -d= -f2 | sort -u)
  c=$(grep -o 'PMI_GNI_COOKIE=[0-9]*' "$1" | cut -d= -f2 | sort -u)
  echo "$p $c"
}
wait_job_gone() {  # JOBID: until squeue no longer lists it (and the epilogs ran)
  for _ in $(seq 100); do
    ctl_run squeue -h -j "$1" 2>/dev/null | grep -q . || return 0
    sleep 0.2
  done
  return 1
}
# no_leftovers NAME PTAG COOKIE: the daemons hold nothing of it (the epilog may trail the
# job's end by a moment).
no_leftovers() {
  local left
  for _ in $(seq 50); do
    left=$(job_leftovers "$2" "$3")
    [ -z "$left" ] && { pass "$1: nothing of ptag $2 left on either daemon"; return 0; }
    sleep 0.2
  done
  fail "$1: left on the daemons: $left"
}
envdump='echo "$(hostname) $SLURM_PROCID PMI_GNI_PTAG=$PMI_GNI_PTAG PMI_GNI_COOKIE=$PMI_GNI_COOKIE LOC=$PMI_GNI_LOC_ADDR RUNDIR=$NICEMU_RUNDIR"'

# ---- 1. srun -N2 -n4: the quickstart demo ----
if as_user "$UA" timeout -k 5 60 srun --mpi=pmi2 -N2 -n4 "$RING" >"$TMP/ring.log" 2>&1 &&
    grep -q 'demo passed' "$TMP/ring.log"; then
  pass "srun --mpi=pmi2 -N2 -n4 gni_ring (quickstart demo) across node0 and node1"
  sed 's/^/    /' "$TMP/ring.log" | head -12
else
  fail "srun -N2 -n4 gni_ring"; sed 's/^/    /' "$TMP/ring.log" >&2
fi

# ---- 2. credentials: one per job, shared by its steps; live in nicemuctl cred list ----
as_user "$UA" timeout 30 srun -N2 -n4 sh -c "$envdump" >"$TMP/env1.log" 2>&1
as_user "$UA" timeout 30 srun -N2 -n4 sh -c "$envdump" >"$TMP/env2.log" 2>&1
read -r p1 c1 <<<"$(cred_of_job "$TMP/env1.log")"
read -r p2 c2 <<<"$(cred_of_job "$TMP/env2.log")"
if [[ $p1 =~ ^[0-9]+$ && $c1 =~ ^[0-9]+$ && $p2 =~ ^[0-9]+$ && $c2 =~ ^[0-9]+$ ]] &&
    [ "$(grep -c "PMI_GNI_PTAG=$p1 " "$TMP/env1.log")" -eq 4 ] && [ "$p1:$c1" != "$p2:$c2" ]; then
  pass "every task of a job has the same credential; two jobs: ptag $p1 cookie $c1 vs ptag $p2 cookie $c2"
  grep -q "node0 .*LOC=0 RUNDIR=$TMP/node0" "$TMP/env1.log" && grep -q "node1 .*LOC=1 RUNDIR=$TMP/node1" "$TMP/env1.log" &&
    pass "each task has its own node's NIC address and run directory" ||
    { fail "PMI_GNI_LOC_ADDR/NICEMU_RUNDIR"; cat "$TMP/env1.log" >&2; }
else
  fail "credentials per job"; cat "$TMP/env1.log" "$TMP/env2.log" >&2
fi
no_leftovers "after two finished jobs" "${p1:-0}" "${c1:-0}"

# A batch job: two steps share the credential; while it runs the credential is listed.
cat >"$TMP/out/job.sh" <<EOF
#!/bin/sh
#SBATCH -N2 -n4 -o $TMP/out/batch-%j.out
srun sh -c '$envdump'
srun --mpi=pmi2 $HIST
srun --mpi=pmi2 $RING
srun sh -c '$envdump'
sleep ${BATCH_SLEEP:-3}
EOF
chmod 755 "$TMP/out/job.sh"
jid=$(as_user "$UA" sbatch --parsable "$TMP/out/job.sh") || fail "sbatch"
listed=""
for _ in $(seq 100); do
  listed=$("$CTL" --rundir "$TMP/node1" cred list 2>/dev/null | grep -c "uid $(id -u "$UA")\|$(id -u "$UA")")
  [ "${listed:-0}" -gt 0 ] && break
  sleep 0.2
done
wait_job_gone "$jid" || fail "batch job $jid did not finish"
out=$TMP/out/batch-$jid.out
read -r pb cb <<<"$(cred_of_job "$out")"
if [ "$(grep -c "PMI_GNI_PTAG=$pb " "$out")" -eq 8 ] && [[ $pb =~ ^[0-9]+$ ]]; then
  pass "sbatch: both steps of job $jid saw one credential (ptag $pb)"
else
  fail "sbatch steps' credentials"; cat "$out" >&2
fi
[ "${listed:-0}" -gt 0 ] && pass "the running job's credential is listed by nicemuctl cred list" ||
  fail "nicemuctl cred list did not show the running job's credential"
if grep -q 'matches the serial recount' "$out"; then
  pass "sbatch: DMAPP example (dmapp_histogram) on 4 PEs over 2 nodes"
else
  fail "dmapp_histogram under sbatch"; cat "$out" >&2
fi
grep -q 'demo passed' "$out" && pass "sbatch: gni_ring in a second step of the same job" || fail "gni_ring in the batch job"
no_leftovers "after the batch job" "${pb:-0}" "${cb:-0}"

# ---- 3. PMI from Slurm, remote ids ----
if [ "$SHORT" = 0 ]; then
  if as_user "$UA" timeout -k 5 60 srun --mpi=pmi2 -N2 -n4 --ntasks-per-node=2 "$PMICHECK" 4 2 >"$TMP/pmi.log" 2>&1 &&
      [ "$(grep -c ': OK' "$TMP/pmi.log")" -eq 4 ]; then
    pass "Cray PMI under srun --mpi=pmi2: pmi_check on 4 ranks, 2 nodes (KVS, Allgather, Get_nid, clique, SMP; placement in blocks as pmi_check expects)"
  else
    fail "pmi_check under srun --mpi=pmi2"; sed 's/^/    /' "$TMP/pmi.log" >&2
  fi
  if as_user "$UA" timeout -k 5 60 srun --mpi=pmi2 -N2 -n4 "$DGRAM" pmi 10 >"$TMP/dgram.log" 2>&1 &&
      [ "$(grep -c 'rounds with 3 peers verified' "$TMP/dgram.log")" -eq 4 ]; then
    pass "fabric_dgram: every rank bound to every other rank's remote id across the namespaces"
  else
    fail "fabric_dgram under srun"; sed 's/^/    /' "$TMP/dgram.log" >&2
  fi
  if as_user "$UA" timeout -k 5 90 srun --mpi=pmi2 -N2 -n4 "$RMA" 2 65536 >"$TMP/rma.log" 2>&1 &&
      [ "$(grep -c 'rounds with 3 peers verified' "$TMP/rma.log")" -eq 4 ]; then
    pass "fabric_rma: FMA, RDMA, AMO, CQ writes between every pair (same node and across)"
  else
    fail "fabric_rma under srun"; sed 's/^/    /' "$TMP/rma.log" >&2
  fi

  # --nicemu=off
  as_user "$UA" timeout 30 srun --nicemu=off -N2 -n2 sh -c "$envdump" >"$TMP/off.log" 2>&1
  if [ "$(grep -c 'PMI_GNI_PTAG= ' "$TMP/off.log")" -eq 2 ]; then
    pass "srun --nicemu=off: no credential in the tasks' environment"
  else
    fail "--nicemu=off"; cat "$TMP/off.log" >&2
  fi

  # A second user cannot use the first job's credential (its CDMs, and so its memory).
  cat >"$TMP/out/hold.sh" <<EOF
#!/bin/sh
#SBATCH -N2 -n2 -o $TMP/out/hold-%j.out
srun sh -c '$envdump'
srun --mpi=pmi2 $DGRAM pmi 100000000
EOF
  chmod 755 "$TMP/out/hold.sh"
  jh=$(as_user "$UA" sbatch --parsable "$TMP/out/hold.sh")
  # Until user A's ranks are attached, with registered memory.
  for _ in $(seq 150); do
    read -r ph ch <<<"$(cred_of_job "$TMP/out/hold-$jh.out" 2>/dev/null)"
    [[ ${ph:-} =~ ^[0-9]+$ && ${ch:-} =~ ^[0-9]+$ ]] && [ "$(job_leftovers "$ph" "$ch" | grep -c CDM)" -ge 2 ] && break
    sleep 0.2
  done
  # Without the plugin the tasks name their node's daemon themselves.
  as_user "$UB" timeout -k 5 30 srun --nicemu=off -N2 -n2 sh -c "h=\$(hostname); export NICEMU_RUNDIR=$TMP/\$h \
    NICEMU_NODE=\${h#node} PMI_GNI_PTAG=$ph PMI_GNI_COOKIE=$ch PMI_GNI_DEV_ID=0; exec $RING" >"$TMP/steal.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] && grep -qi 'permission' "$TMP/steal.log"; then
    pass "user B's job with user A's running job's credential (ptag $ph) is refused: $(grep -i -m1 permission "$TMP/steal.log")"
  else
    fail "user B attached with user A's credential (rc $rc)"; cat "$TMP/steal.log" >&2
  fi
  ctl_run scancel "$jh"
  wait_job_gone "$jh"
  no_leftovers "after user A's held job was cancelled" "${ph:-0}" "${ch:-0}"

  # DRC between two jobs (drc_pair.c, as tests/integration/test_drc_jobs.sh): user A's
  # service job on node0 acquires a credential and grants it to user B's client job (one
  # rank on node0, one on node1) by its Slurm job id; the grant reaches node1's daemon over
  # the fabric. Both are plain sruns, started separately; they meet through files in $MEET.
  MEET=$TMP/out/drc
  mkdir -p "$MEET" && chmod 1777 "$MEET"
  # FMA, AMOs and RDMA between two users' processes on one host go through the daemons
  # by themselves (docs/decisions.md, where the kernel refuses cross-memory attach).
  as_user "$UA" timeout -k 5 120 srun -w node0 -N1 -n1 "$PAIR" serve "$MEET" 2 64 \
    >"$TMP/drc-serve.log" 2>&1 </dev/null &
  SERVE=$!
  as_user "$UB" timeout -k 5 120 srun -N2 -n2 --ntasks-per-node=1 "$PAIR" client "$MEET" 64 \
    >"$TMP/drc-client.log" 2>&1 </dev/null &
  CLIENT=$!
  BG_PIDS+=("$SERVE" "$CLIENT")
  if wait_until 600 test -f "$MEET/granted" -a -f "$MEET/serve.0"; then
    cred=$(od -An -tu4 -N4 "$MEET/cred" | tr -d ' ')
    for i in 0 1; do
      "$CTL" --rundir "$TMP/node$i" cred list --json >"$TMP/drc-list$i.json" 2>&1
    done
    if python3 -c '
import json, sys
cred, uid = int(sys.argv[1]), int(sys.argv[2])
for path in sys.argv[3:]:
    creds = json.load(open(path)).get("credentials", [])
    if not any(c.get("drc", {}).get("id") == cred and c.get("uid") == uid and c["drc"]["grants"] for c in creds):
        sys.exit(path + ": no granted DRC credential %d of uid %d" % (cred, uid))
' "$cred" "$(id -u "$UA")" "$TMP/drc-list0.json" "$TMP/drc-list1.json"; then
      pass "DRC credential $cred of user A, granted, is on node0's and node1's daemons (node1: $(python3 -c '
import json, sys
for c in json.load(open(sys.argv[1])).get("credentials", []):
    if c.get("drc", {}).get("id") == int(sys.argv[2]): print("grants", " ".join(c["drc"]["grants"]))
' "$TMP/drc-list1.json" "$cred"))"
    else
      fail "the DRC credential on both daemons"; cat "$TMP/drc-list0.json" "$TMP/drc-list1.json" >&2
    fi
    # User C, in a job of its own on each node, knowing the id, cookie and ptag.
    if as_user "$UC" timeout -k 5 60 srun -N2 -n2 --ntasks-per-node=1 "$PAIR" probe "$MEET" >"$TMP/drc-probe.log" 2>&1 &&
        [ "$(grep -c 'refused' "$TMP/drc-probe.log")" -eq 2 ]; then
      pass "user C's job (ungranted) refused on node0 and node1: drc_access, GNI_GetPtag, attach, grant, release"
    else
      fail "the ungranted user's job"; cat "$TMP/drc-probe.log" >&2
    fi
  else
    fail "the service job did not grant the credential"
  fi
  # the service revokes and releases after this; renamed into place so it never reads it half-written
  printf '\1\0\0\0' >"$MEET/probed.tmp" && mv -f "$MEET/probed.tmp" "$MEET/probed"
  ok=1
  wait "$SERVE" || ok=0
  wait "$CLIENT" || ok=0
  BG_PIDS=()
  if [ $ok -eq 1 ] && grep -q "drc_pair serve: ok" "$TMP/drc-serve.log" &&
      [ "$(grep -c "drc_pair client [01]: ok" "$TMP/drc-client.log")" -eq 2 ]; then
    pass "$(grep -h "verified" "$TMP/drc-serve.log")"
    grep -h "verified" "$TMP/drc-client.log" | while read -r line; do pass "$line"; done
    pass "client job: granted by Slurm job id, revoked (attached CDMs kept), released, across node0 and node1"
  else
    fail "the DRC service and client jobs"; cat "$TMP/drc-serve.log" "$TMP/drc-client.log" >&2
  fi
  for i in 0 1; do
    if "$CTL" --rundir "$TMP/node$i" cred list --json 2>&1 | grep -q '"drc"'; then
      fail "a DRC credential is left on node$i's daemon"; "$CTL" --rundir "$TMP/node$i" cred list >&2
    else
      pass "after both jobs: no DRC credential on node$i's daemon"
    fi
  done
fi

# ---- 3c. Open MPI's btl/ugni under srun --mpi=pmix ----
# Direct launch: Slurm's PMIx plugin (mpi_pmix_v4, in slurm-wlm-basic-plugins) serves Open
# MPI's PMIx client, the SPANK plugin each task's credential and NIC address (PMI_GNI_*),
# which btl/ugni reads itself. The Open MPI build and the programs are tools/compat/recipes/openmpi's
# (configured with schizo/slurm and Debian's PMIx; see its header); without such a build
# this part is skipped, saying why.
OMPI=$COMPAT_DIR/openmpi/install
OMPI_BIN=$COMPAT_DIR/openmpi/bin
OMPI_INFO=$COMPAT_DIR/openmpi/ompi_info.txt
OMPI_PROGS=(hello_c ring_c connectivity_c mpi_pingpong)
ompi_why=""
for p in "${OMPI_PROGS[@]}"; do
  [ -x "$OMPI_BIN/$p" ] || ompi_why="no $OMPI_BIN/$p"
done
if [ ! -f "$OMPI/lib/openmpi/mca_btl_ugni.so" ]; then
  ompi_why="no btl/ugni build in $COMPAT_DIR/openmpi; tools/compat/recipes/openmpi --build-only makes it"
elif [ -z "$ompi_why" ] && ! grep -q 'MCA schizo: slurm' "$OMPI_INFO" 2>/dev/null; then
  # Open MPI 4.1 accepts a direct launch by srun only through its schizo/slurm component;
  # without it MPI_Init aborts ("OMPI was not built with SLURM support").
  ompi_why="the build in $COMPAT_DIR/openmpi has no Slurm support (no 'MCA schizo: slurm' in $OMPI_INFO); tools/compat/recipes/openmpi --rebuild --build-only makes one"
elif [ -z "$ompi_why" ] && ! grep -Eq 'MCA pmix: (ext[0-9]x|pmix[0-9]x)' "$OMPI_INFO" 2>/dev/null; then
  ompi_why="the build in $COMPAT_DIR/openmpi has no PMIx client component (MCA pmix: ext3x or pmix3x in $OMPI_INFO)"
fi
# smsg_sends NODE: SMSG sends of every CDM node NODE's daemon has served.
smsg_sends() {
  "$CTL" --rundir "$TMP/node$1" stats --json |
    python3 -c 'import json,sys; print(sum(n.get("totals", {}).get("smsg_sends", 0) for n in json.load(sys.stdin).get("nodes", [])))'
}
if [ "$SHORT" = 1 ]; then
  :
elif [ -n "$ompi_why" ]; then
  echo "    (Open MPI under srun --mpi=pmix not run: $ompi_why)"
else
  ctl_run srun --mpi=list >"$TMP/mpi-list.log" 2>&1
  if grep -q 'pmix' "$TMP/mpi-list.log"; then
    pass "srun --mpi=list: $(grep -o 'pmix[a-z0-9_]*' "$TMP/mpi-list.log" | sort -u | tr '\n' ' ')"
    # The build's nicemu libraries, not the compat prefix's: the same as the daemons'
    # (libugni for btl/ugni, libudreg for rcache/udreg when it was built).
    libs=$OMPI/lib
    for l in ugni/libugni.so.0 udreg/libudreg.so.0; do
      [ -e "$BUILD/$l" ] && libs=$libs:$BUILD/${l%/*}
    done
    # The whole job's MCA choice in the environment (srun passes it on): pml ob1 over btl
    # ugni and self only, so every message between two ranks goes through nicemu (ranks on
    # one node too); one virtual device per rank as in tools/compat/recipes/openmpi.
    ompi_env=(LD_LIBRARY_PATH="$libs" OPAL_PREFIX="$OMPI" OMPI_MCA_pml=ob1 OMPI_MCA_btl=ugni,self
              OMPI_MCA_btl_ugni_virtual_device_count=1)
    s0=$(smsg_sends 0) s1=$(smsg_sends 1)
    for p in "${OMPI_PROGS[@]}"; do
      args=()
      [ "$p" = mpi_pingpong ] && args=(-i 200 -m 1048576)
      log=$TMP/ompi-$p.log
      t0=$(date +%s.%N)
      rc=0
      as_user "$UA" env "${ompi_env[@]}" timeout -k 5 120 srun --mpi=pmix -N2 -n4 --ntasks-per-node=2 \
        sh -c "echo \"\$(hostname) \$SLURM_PROCID PMI_GNI_PTAG=\$PMI_GNI_PTAG PMI_GNI_COOKIE=\$PMI_GNI_COOKIE LOC=\$PMI_GNI_LOC_ADDR\"; exec \"\$0\" \"\$@\"" \
        "$OMPI_BIN/$p" "${args[@]}" >"$log" 2>&1 || rc=$?
      dt=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
      ok=0
      if [ $rc -eq 0 ]; then
        case $p in
          hello_c) [ "$(grep -c '^Hello, world, I am [0-3] of 4' "$log")" -eq 4 ] && ok=1 ;;
          ring_c) grep -q '^Process 0 exiting' "$log" && [ "$(grep -c 'exiting$' "$log")" -eq 4 ] && ok=1 ;;
          connectivity_c) grep -q '^Connectivity test on 4 processes PASSED' "$log" && ok=1 ;;
          mpi_pingpong) grep -q 'mpi_pingpong: OK' "$log" && ok=1 ;;
        esac
      fi
      # The credential came from the plugin: one per job, the same in every task, each
      # task with its own node's NIC address.
      read -r pj cj <<<"$(cred_of_job "$log")"
      if [ $ok = 1 ] && [[ $pj =~ ^[0-9]+$ && $cj =~ ^[0-9]+$ ]] &&
          [ "$(grep -c "^node0 .*PMI_GNI_PTAG=$pj .*LOC=0$" "$log")" -eq 2 ] &&
          [ "$(grep -c "^node1 .*PMI_GNI_PTAG=$pj .*LOC=1$" "$log")" -eq 2 ]; then
        pass "Open MPI $p under srun --mpi=pmix -N2 -n4 (pml ob1, btl ugni,self; 2 ranks on node0, 2 on node1; the plugin's ptag $pj) in $dt s"
        no_leftovers "after Open MPI's $p" "$pj" "$cj"
      else
        fail "Open MPI $p under srun --mpi=pmix -N2 -n4 (rc $rc after $dt s)"; sed 's/^/    /' "$log" >&2
      fi
    done
    [ -f "$TMP/ompi-mpi_pingpong.log" ] && grep -E '^ +[0-9]+ +[0-9]+-' "$TMP/ompi-mpi_pingpong.log" | sed 's/^/    /'
    d0=$(($(smsg_sends 0) - s0)) d1=$(($(smsg_sends 1) - s1))
    if [ "$d0" -gt 0 ] && [ "$d1" -gt 0 ]; then
      pass "the Open MPI jobs' SMSG went through both nodes' daemons (node0 +$d0 sends, node1 +$d1)"
    else
      fail "no SMSG on the daemons from the Open MPI jobs (node0 +$d0, node1 +$d1)"
    fi
  else
    fail "srun --mpi=list has no pmix"; cat "$TMP/mpi-list.log" >&2
  fi
fi

# ---- 4. scancel in the middle of a run ----
cat >"$TMP/out/long.sh" <<EOF
#!/bin/sh
#SBATCH -N2 -n4 -o $TMP/out/long-%j.out
srun sh -c '$envdump'
srun --mpi=pmi2 $DGRAM pmi 1000000
EOF
chmod 755 "$TMP/out/long.sh"
jl=$(as_user "$UA" sbatch --parsable "$TMP/out/long.sh")
seen=""
for _ in $(seq 150); do
  read -r pl cl <<<"$(cred_of_job "$TMP/out/long-$jl.out" 2>/dev/null)"
  if [[ ${pl:-} =~ ^[0-9]+$ && ${cl:-} =~ ^[0-9]+$ ]]; then
    seen=$(job_leftovers "$pl" "$cl" | grep -c CDM)
    [ "${seen:-0}" -ge 4 ] && break
  fi
  sleep 0.2
done
if [ "${seen:-0}" -ge 4 ]; then
  pass "job $jl running: its 4 CDMs are attached (ptag $pl)"
else
  fail "job $jl never attached its CDMs"; cat "$TMP/out/long-$jl.out" >&2
fi
t0=$(date +%s.%N)
ctl_run scancel "$jl"
wait_job_gone "$jl" || fail "job $jl still listed after scancel"
no_leftovers "after scancel of job $jl mid-run" "${pl:-0}" "${cl:-0}"
echo "    (cancelled and cleaned in $(python3 -c "import time; print(f'{time.time() - $t0:.1f}')") s)"

# ---- 5. a node without a daemon fails the step at once ----
t0=$(date +%s.%N)
as_user "$UA" timeout 60 srun -p nodaemon -N1 -n1 "$RING" >"$TMP/nodaemon.log" 2>&1
rc=$?
dt=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
grep -h 'nicemu' "$TMP/slurmd-node2.log" | tail -n 2 >"$TMP/nodaemon.why"
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q 'no nicemu daemon' "$TMP/nodaemon.log"; then
  pass "a step on node2 (no daemon) failed after $dt s, srun shows: $(grep -h -m1 'no nicemu daemon' "$TMP/nodaemon.log")"
  sed 's/^/    srun: /' "$TMP/nodaemon.log" | head -4
else
  fail "step on the node without a daemon (rc $rc after $dt s)"; cat "$TMP/nodaemon.log" "$TMP/nodaemon.why" >&2
fi

# ---- 6. a daemon that died (its socket left behind) fails the step at once too ----
if [ "$SHORT" = 0 ] && [ "$HOLD" = 0 ]; then
  kill -KILL "${DAEMON_PID[1]}" && wait "${DAEMON_PID[1]}" 2>/dev/null
  t0=$(date +%s.%N)
  as_user "$UA" timeout 60 srun -w node1 -N1 -n1 "$RING" >"$TMP/dead.log" 2>&1
  rc=$?
  dt=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q 'is not running' "$TMP/dead.log"; then
    pass "a step on node1 after its daemon was killed failed after $dt s: $(grep -m1 -o 'the nicemu daemon.*' "$TMP/dead.log")"
  else
    fail "step on node1 with a dead daemon (rc $rc after $dt s)"; cat "$TMP/dead.log" >&2
  fi
fi

if [ "$HOLD" = 1 ]; then
  echo "cluster held (SIGINT or SIGTERM to pid $$ ends it). A command on it, as user $UA:"
  echo "  ip netns exec $CTLNS unshare --uts sh -c 'hostname ctl && exec runuser -u $UA -- env SLURM_CONF=$SLURM_CONF srun -N2 -n4 $RING'"
  echo "daemons: nicemuctl --rundir $TMP/node0 (and node1), from any namespace"
  sleep infinity &
  BG_PIDS+=($!)
  wait $!
fi

on_failure() {
  tail -n 20 "$TMP/slurmd-node0.log" "$TMP/slurmctld.log" >&2
  echo "slurm: $FAILS check(s) failed" >&2
}
finish slurm 0
