# shellcheck shell=bash
# tools/compat/recipes/lib.sh — shared helpers of the compatibility builds (sourced, not run).
#
# Work directory: $NICEMU_COMPAT_DIR, default /tmp/nicemu-compat. Everything third-party
# (Debian source packages, their builds and installs) lives there, never in the repository.
#   $COMPAT_DIR/prefix       installed nicemu (tools/compat/recipes/install-nicemu)
#   $COMPAT_DIR/nicemu-build meson build directory of that install
#   $COMPAT_DIR/ucx          UCX source, build and install   (tools/compat/recipes/ucx)
#   $COMPAT_DIR/openmpi      Open MPI source, build, install (tools/compat/recipes/openmpi)
# Stages leave stamp files (.stamp-*) so that a second run skips finished work.
#
# A pipeline into grep tests with grep -c >/dev/null, not grep -q: under pipefail, grep -q
# quitting at the first match can kill the writer with SIGPIPE and fail the pipeline.
# For the same reason the first lines of a pipeline are taken with sed -n 1,Np (it reads
# all its input), not head -N.

COMPAT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
COMPAT_RECIPES="$COMPAT_ROOT/tools/compat/recipes"    # these scripts
COMPAT_PROGRAMS="$COMPAT_ROOT/tools/compat/programs"  # C programs built with the clients' compilers
COMPAT_EXPECTED="$COMPAT_ROOT/tools/compat/expected"  # the clients' known failures
TOOLS_LIB="$COMPAT_ROOT/tools/lib"                    # launcher shims: nicemu-rank, nicemu-rsh
COMPAT_DIR=${NICEMU_COMPAT_DIR:-/tmp/nicemu-compat}
NICEMU_PREFIX=${NICEMU_PREFIX:-$COMPAT_DIR/prefix}
COMPAT_JOBS=${COMPAT_JOBS:-$(nproc 2>/dev/null || echo 2)}
[ "$COMPAT_JOBS" -gt 2 ] 2>/dev/null || COMPAT_JOBS=2

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"

# ---- messages and the summary ------------------------------------------------------------
compat_name=${compat_name:-compat}
summary_lines=()
required_failed=0
note()  { echo "[$compat_name] $*" >&2; }
die()   { echo "[$compat_name] error: $*" >&2; exit 1; }
# record STATUS NAME [DETAIL]: STATUS is ok, FAIL (required step), fail (expected/optional),
# skip. A FAIL makes the script exit non-zero at the end.
record() {
  local st=$1 name=$2 detail=${3:-}
  summary_lines+=("$(printf '%-5s %-44s %s' "$st" "$name" "$detail")")
  [ "$st" = FAIL ] && required_failed=1
  return 0
}
print_summary() {
  echo
  echo "==== $compat_name summary ===="
  local l
  for l in "${summary_lines[@]}"; do echo "$l"; done
  if [ "$required_failed" = 1 ]; then
    echo "==== result: FAILED (a required step failed) ===="
  else
    echo "==== result: OK ===="
  fi
}

# Runs "$@" with output to log file $1 (appended), showing its tail on failure.
run_logged() {
  local log=$1 rc=0
  shift
  echo "+ $*" >>"$log"
  "$@" >>"$log" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then
    note "failed (rc $rc): $*  — last lines of $log:"
    tail -n 25 "$log" | sed 's/^/    /' >&2
  fi
  return $rc
}

# ---- Debian source packages -------------------------------------------------------------
# Makes sure APT knows source packages of this machine's Debian suite: if no deb-src entry
# is configured, writes /etc/apt/sources.list.d/nicemu-compat-src.sources with a
# "Types: deb-src" copy of every enabled deb entry of the distribution's own suites
# (same URIs, suites, components and keyring), then runs apt-get update.
ensure_deb_src() {
  local pkg=$1
  if apt-cache showsrc "$pkg" 2>/dev/null | grep -c '^Package:' >/dev/null; then return 0; fi
  local codename
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ -n "$codename" ] || die "cannot tell the Debian suite (/etc/os-release has no VERSION_CODENAME)"
  local out=/etc/apt/sources.list.d/nicemu-compat-src.sources
  if [ ! -f "$out" ]; then
    note "adding deb-src entries for $codename ($out)"
    local text
    text=$(python3 - "$codename" <<'PY'
import glob, re, sys
code = sys.argv[1]
def ours(suite):  # the distribution's own suites: bookworm, bookworm-updates, ...
    return suite == code or suite.startswith(code + "-") or suite.startswith(code + "/")
stanzas = []
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    if path.endswith("nicemu-compat-src.sources"):
        continue
    for block in re.split(r"\n\s*\n", open(path).read()):
        fields, key = {}, None
        for line in block.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0] in " \t" and key:
                fields[key] += "\n" + line
                continue
            key, _, val = line.partition(":")
            key = key.strip()
            fields[key] = val.strip()
        if "deb" not in fields.get("Types", "").split():
            continue
        if fields.get("Enabled", "yes").lower() == "no":
            continue
        suites = [s for s in fields.get("Suites", "").split() if ours(s)]
        if not suites:
            continue
        out = {"Types": "deb-src", "URIs": fields["URIs"], "Suites": " ".join(suites),
               "Components": fields.get("Components", "main")}
        if "Signed-By" in fields:
            out["Signed-By"] = fields["Signed-By"]
        stanzas.append("\n".join(f"{k}: {v}" for k, v in out.items()))
lists = ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list"))
for path in lists:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        m = re.match(r"\s*deb\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s+(.*)", line)
        if not m or not ours(m.group(3)):
            continue
        opts = m.group(1) or ""
        so = {}
        for kv in opts.strip()[1:-1].split():
            k, _, v = kv.partition("=")
            so[k] = v
        out = {"Types": "deb-src", "URIs": m.group(2), "Suites": m.group(3),
               "Components": m.group(4).split("#")[0].strip()}
        if "signed-by" in so:
            out["Signed-By"] = so["signed-by"]
        stanzas.append("\n".join(f"{k}: {v}" for k, v in out.items()))
print("\n\n".join(stanzas))
PY
) || die "could not read the APT sources"
    [ -n "$text" ] || die "no enabled deb entry for suite $codename in /etc/apt/sources.list*: add a deb-src line by hand"
    printf '# Added by nicemu tools/compat: source packages of the same suite (apt-get source).\n%s\n' \
      "$text" | $SUDO tee "$out" >/dev/null
  fi
  note "apt-get update"
  $SUDO apt-get update -qq >/dev/null 2>&1 || $SUDO apt-get update || die "apt-get update failed"
  apt-cache showsrc "$pkg" 2>/dev/null | grep -c '^Package:' >/dev/null ||
    die "APT still knows no source package $pkg (check $out)"
}

# apt_install PKG...: installs the packages that are not installed yet.
apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -c 'install ok installed' >/dev/null || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  note "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# build_dep PKG: apt-get build-dep once (stamp in $COMPAT_DIR).
build_dep() {
  local pkg=$1 stamp="$COMPAT_DIR/.stamp-build-dep-$1"
  [ -f "$stamp" ] && return 0
  ensure_deb_src "$pkg"
  note "apt-get build-dep $pkg"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get build-dep -y -qq "$pkg" >"$COMPAT_DIR/build-dep-$pkg.log" 2>&1 || {
    tail -n 20 "$COMPAT_DIR/build-dep-$pkg.log" >&2; return 1; }
  touch "$stamp"
}

# fetch_source PKG VERSION DEST: apt-get source into DEST (the unpacked tree is
# DEST/PKG-UPSTREAMVERSION); sets $src_tree. Skipped when already unpacked.
fetch_source() {
  local pkg=$1 ver=$2 dest=$3
  mkdir -p "$dest"
  src_tree=$(find "$dest" -maxdepth 1 -mindepth 1 -type d -name "$pkg-$ver*" | sed -n 1p)
  if [ -n "$src_tree" ] && [ -f "$dest/.stamp-source" ]; then return 0; fi
  ensure_deb_src "$pkg"
  local avail
  avail=$(apt-cache showsrc "$pkg" | sed -n 's/^Version: //p' | sed -n 1p)
  case "$avail" in
    "$ver"*) ;;
    *) note "warning: APT offers $pkg $avail, this script was written for $ver" ;;
  esac
  apt_install dpkg-dev
  note "apt-get source $pkg ($avail) into $dest"
  (cd "$dest" && apt-get source -qq "$pkg" >"$dest/source.log" 2>&1) || {
    tail -n 20 "$dest/source.log" >&2; return 1; }
  src_tree=$(find "$dest" -maxdepth 1 -mindepth 1 -type d -name "$pkg-*" | sed -n 1p)
  [ -n "$src_tree" ] || return 1
  touch "$dest/.stamp-source"
}

# ---- installed nicemu -------------------------------------------------------------------
# Sets NICEMU_PKG_CONFIG_PATH and the tool paths of the installed tree at $NICEMU_PREFIX,
# installing it first when it is missing (or --reinstall was given to the caller).
nicemu_env() {
  local d
  NICEMU_PKG_CONFIG_PATH=""
  for d in "$NICEMU_PREFIX"/lib/*/pkgconfig "$NICEMU_PREFIX"/lib/pkgconfig "$NICEMU_PREFIX"/lib64/pkgconfig; do
    [ -f "$d/cray-ugni.pc" ] && NICEMU_PKG_CONFIG_PATH="$d"
  done
  NICEMU_BIN="$NICEMU_PREFIX/bin"
  NICEMU_SBIN="$NICEMU_PREFIX/sbin"  # the daemon
  # The nicemu-run that tools/lib/nicemu-rank asks where each rank goes (the ranks inherit it).
  export NICEMU_RUN=${NICEMU_RUN:-$NICEMU_BIN/nicemu-run}
  NICEMU_LIBDIR=""
  [ -n "$NICEMU_PKG_CONFIG_PATH" ] && NICEMU_LIBDIR=$(dirname "$NICEMU_PKG_CONFIG_PATH")
}
ensure_nicemu_installed() {
  nicemu_env
  if [ "${1:-}" = force ] || [ -z "$NICEMU_PKG_CONFIG_PATH" ] || [ ! -x "$NICEMU_SBIN/nicemu" ]; then
    "$COMPAT_RECIPES/install-nicemu" "$NICEMU_PREFIX" || return 1
    nicemu_env
  fi
  [ -n "$NICEMU_PKG_CONFIG_PATH" ]
}

# ---- a build script's frame: exit, summary, step 1 -----------------------------------------
# tmp (a scratch directory of the run) and bg_pids (background processes) are the script's
# to fill; compat_cleanup removes and kills them, with the namespaces and the daemons.
tmp=""
bg_pids=()
compat_cleanup() {
  local rc=$? p
  set +e
  trap - INT TERM HUP
  for p in ${bg_pids[@]+"${bg_pids[@]}"}; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  ipogif_netns_del
  stop_nodes
  [ -n "$tmp" ] && rm -rf "$tmp"
  exit "$rc"
}
# compat_traps: compat_cleanup at exit; INT, TERM and HUP exit with 128 + the signal, so the
# EXIT trap runs for them too.
compat_traps() {
  trap compat_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
}
# finish: the summary, then exit 0 unless a required step failed.
finish() {
  print_summary
  [ "$required_failed" = 0 ]
  exit $?
}

# compat_install_step DO_INSTALL WORK: step 1 of a build script. With DO_INSTALL=1, installs
# this tree at $NICEMU_PREFIX (log WORK/install-nicemu.out), falling back to the previous
# install when this tree does not build (a FAIL all the same); otherwise uses the existing
# install. Ends the script (finish) when there is no install to use.
compat_install_step() {
  local do_install=$1 out="$2/install-nicemu.out"
  if [ "$do_install" = 1 ]; then
    if ensure_nicemu_installed force >"$out" 2>&1; then
      record ok "install nicemu ($NICEMU_PREFIX)"
    elif nicemu_env && [ -n "$NICEMU_PKG_CONFIG_PATH" ]; then
      record FAIL "install nicemu" "this tree did not build (see $out); the runs below use the previous install, not this tree"
    else
      cat "$out" >&2
      record FAIL "install nicemu" "see $out"; finish
    fi
  else
    ensure_nicemu_installed || { record FAIL "installed nicemu" "none at $NICEMU_PREFIX"; finish; }
    record ok "installed nicemu ($NICEMU_PREFIX)" "not reinstalled (--no-install)"
  fi
}

# nic_ops: the daemons' totals (live and finished CDMs, every node of $NICEMU_RUNDIR) of SMSG
# sends and FMA/RDMA/AMO posts, as "key=value ..." sorted by key; "none" when the daemons do
# not answer. Always succeeds (callers run it under set -e).
nic_ops() {
  local j
  j=$("$NICEMU_BIN/nicemuctl" --rundir "$NICEMU_RUNDIR" stats --json 2>/dev/null) || j=""
  python3 -c '
import json, sys
try:
    d = json.loads(sys.argv[1])
except ValueError:
    print("none"); sys.exit()
keys = ("smsg_sends", "fma_put_posts", "fma_get_posts", "amo_posts", "rdma_posts")
tot = {k: sum(n.get("totals", {}).get(k, 0) for n in d.get("nodes", [])) for k in keys}
print(" ".join(f"{k}={int(v)}" for k, v in sorted(tot.items())))' "$j" 2>/dev/null || echo none
}

# ---- emulated nodes ---------------------------------------------------------------------
# start_nodes RUNDIR N...: one nicemu daemon per node address in a private run directory,
# then a job credential for this user; exports NICEMU_RUNDIR, PMI_GNI_PTAG, PMI_GNI_COOKIE,
# PMI_GNI_DEV_ID. Daemons are stopped by stop_nodes (called from the caller's EXIT trap).
daemon_pids=()
start_nodes() {
  local rundir=$1 n
  shift
  mkdir -p "$rundir"
  for n in "$@"; do
    "$NICEMU_SBIN/nicemu" --node "$n" --rundir "$rundir" --log-level "${NICEMU_LOG_LEVEL:-warn}" \
      >"$rundir/nicemu-$n.log" 2>&1 &
    daemon_pids+=($!)
  done
  for n in "$@"; do
    local i
    for i in $(seq 200); do
      [ -S "$rundir/nic-$n.sock" ] && break
      sleep 0.025
    done
    [ -S "$rundir/nic-$n.sock" ] || { cat "$rundir/nicemu-$n.log" >&2; return 1; }
  done
  export NICEMU_RUNDIR=$rundir
  local cred
  cred=$("$NICEMU_BIN/nicemuctl" --rundir "$rundir" cred issue) || return 1
  # shellcheck disable=SC2046
  export $(echo "$cred" | grep -E '^PMI_GNI_(PTAG|COOKIE)=[0-9]+$')
  export PMI_GNI_DEV_ID=0
  [ -n "${PMI_GNI_PTAG:-}" ] && [ -n "${PMI_GNI_COOKIE:-}" ]
}
stop_nodes() {
  local p
  for p in "${daemon_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${daemon_pids[@]}"; do
    for _ in $(seq 60); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  daemon_pids=()
  return 0
}

# run_watch_ucx LIMIT LOG CMD...: CMD in a session of its own under `timeout LIMIT`, output
# to LOG (emptied first). UCX 1.13.1 cannot wire UCP up over its ugni transports (docs/clients/ucx.md,
# *Why UCP cannot use the ugni transports*), and its ranks then hang until the limit: the run is stopped as soon as LOG
# shows that message. Returns CMD's status, or 200 for that UCX failure. run_pgid names the
# session while it runs; stop_watched_run (for an EXIT trap) ends it.
ucx_nowire='no (auxiliary|active messages) transport to'
run_pgid=""
run_watch_ucx() {
  local limit=$1 log=$2 pid rc=0
  shift 2
  : >"$log"  # exists before the job opens it: the watch greps it from the start
  setsid timeout -k 5 "$limit" "$@" >>"$log" 2>&1 </dev/null &
  pid=$!
  run_pgid=$pid
  while kill -0 "$pid" 2>/dev/null; do
    if grep -qsE "$ucx_nowire" "$log"; then
      sleep 0.5  # the other ranks' lines
      stop_watched_run
      wait "$pid" 2>/dev/null
      return 200
    fi
    sleep 0.1
  done
  wait "$pid" || rc=$?
  run_pgid=""
  return $rc
}
stop_watched_run() {
  [ -n "$run_pgid" ] || return 0
  kill -TERM -- "-$run_pgid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$run_pgid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$run_pgid" 2>/dev/null
  run_pgid=""
}

# ipogif_netns PREFIX: two network namespaces PREFIX0-$$ and PREFIX1-$$ joined by a veth pair
# named ipogif0 (10.128.0.1 with MAC 00:01:01:00:00:00, 10.128.0.2 with 00:01:01:00:00:01, and
# permanent ARP entries), which is how libfabric's gni provider finds a node's NIC address on
# a Cray. As there, a node's host name resolves to its ipogif0 address: `ip netns exec` puts
# /etc/netns/NAME/hosts over /etc/hosts, naming this host (whose name both namespaces share)
# and nid00000 / nid00001 (the provider resolves FI_SOURCE names with getaddrinfo and compares
# them with ipogif0's address). Appends the namespaces to netns_names; the caller removes them
# with ipogif_netns_del (the veth pair goes with them). Needs root and iproute2.
netns_names=()
ipogif_netns() {
  [ "$(id -u)" = 0 ] && command -v ip >/dev/null || return 1
  local a="${1}0-$$" b="${1}1-$$" n
  ip netns add "$a" && netns_names+=("$a") || return 1
  ip netns add "$b" && netns_names+=("$b") || return 1
  ip link add ipogif0 address 00:01:01:00:00:00 netns "$a" type veth \
    peer name ipogif0 address 00:01:01:00:00:01 netns "$b" || return 1
  ip -n "$a" addr add 10.128.0.1/24 dev ipogif0 && ip -n "$b" addr add 10.128.0.2/24 dev ipogif0 || return 1
  for n in "$a" "$b"; do ip -n "$n" link set lo up && ip -n "$n" link set ipogif0 up || return 1; done
  ip -n "$a" neigh add 10.128.0.2 lladdr 00:01:01:00:00:01 dev ipogif0 nud permanent &&
    ip -n "$b" neigh add 10.128.0.1 lladdr 00:01:01:00:00:00 dev ipogif0 nud permanent || return 1
  local self i=0 host
  host=$(hostname)
  for n in "$a" "$b"; do
    self="10.128.0.$((i + 1))"
    mkdir -p "/etc/netns/$n" || return 1
    { echo "127.0.0.1 localhost"
      echo "$self $host nid0000$i"
      echo "10.128.0.$((2 - i)) nid0000$((1 - i))"; } >"/etc/netns/$n/hosts" || return 1
    i=$((i + 1))
  done
}
ipogif_netns_del() {
  local n
  for n in ${netns_names[@]+"${netns_names[@]}"}; do
    ip netns del "$n" 2>/dev/null
    rm -rf "/etc/netns/$n"
  done
  netns_names=()
}

# ompi_node_hosts NP: the --host list for Open MPI's mpirun with one orted per emulated node
# (tools/lib/nicemu-rsh): slots as tools/lib/nicemu-rank places NP ranks over nodes 0
# and 1 (blocks, the first node taking the odd one), so Open MPI's hosts match the NICs.
ompi_node_hosts() {
  local np=$1 hosts
  hosts="nodeA:$(( (np + 1) / 2 ))"
  [ "$np" -gt 1 ] && hosts+=",nodeB:$(( np / 2 ))"
  echo "$hosts"
}

# ucx_pair_script: a script for `bash -c` running one ucx_perftest pair, the server on
# emulated node 0 and the client on node 1 (tools/compat/recipes/ucx-rounds, ucx-profile). Arguments:
# LOG PORT PERFTEST ENVS SERVER_WRAP CLIENT_WRAP CLIENT_ARGS...; ENVS (both processes) and the
# wrappers (e.g. "taskset -c 0", a valgrind command) are word lists, possibly empty. The
# server writes LOG.server, the client standard output. NETNS=1 in the environment: bring up
# lo first (the script runs in a fresh private network namespace).
# shellcheck disable=SC2016  # expanded by the inner shell
ucx_pair_script='
  log=$1 port=$2 perftest=$3 envs=$4 swrap=$5 cwrap=$6
  shift 6
  [ "$NETNS" = 1 ] && ip link set lo up
  env $envs NICEMU_NODE=0 PMI_GNI_LOC_ADDR=0 $swrap "$perftest" -p "$port" >"$log.server" 2>&1 &
  srv=$!
  hex=$(printf ":%04X 00000000:0000 0A" "$port")
  for i in $(seq 500); do grep -q "$hex" /proc/net/tcp 2>/dev/null && break; sleep 0.02; done
  env $envs NICEMU_NODE=1 PMI_GNI_LOC_ADDR=1 $cwrap "$perftest" 127.0.0.1 -p "$port" "$@" && rc=0 || rc=$?
  [ $rc -ne 0 ] && kill $srv 2>/dev/null
  wait $srv
  exit $rc
'

# private_netns: sets netns=(unshare -n) when a private network namespace is available
# (both clients open TCP listeners on all interfaces for their setup connections).
netns=()
private_netns() {
  command -v unshare >/dev/null && command -v ip >/dev/null || return 1
  if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then netns=(unshare -n); return 0; fi
  if unshare -rn true 2>/dev/null; then netns=(unshare -rn); return 0; fi
  return 1
}
