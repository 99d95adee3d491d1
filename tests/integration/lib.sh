# shellcheck shell=bash
# Sourced by every shell integration test: skipping, pass/fail counting, the test's scratch
# directory and an EXIT trap that stops everything the test started, and the start-up of
# daemons on fabric "hosts" (a run directory each) that several tests share.
#
# What the EXIT trap (test_init) cleans up, in this order:
#   FG_PIDS        the command capture/netns_hydra waits for (a meson timeout's SIGTERM
#                  arrives while it runs): SIGKILL to its process group (`timeout` makes
#                  one of its own, which the SIGTERM meson sends to the test's group misses)
#   test_cleanup   a function the test may define for its own resources (namespaces, users)
#   BG_PIDS        background processes of the test: SIGKILL (their group, where they lead
#                  one), then reaped
#   SERVE_PID      a `nicemu-run --daemons-only` (serve_daemons): SIGTERM, so that it stops
#                  its daemons, then reaped
#   DAEMON_PID     daemons, keyed by NIC address or name: SIGTERM, 2 s to exit, SIGKILL
#   KILL_RUNDIR    a private run directory: any process still started with --rundir DIR
#                  (daemons a launcher left behind) gets SIGKILL
#   TMP            the scratch directory: removed
declare -A DAEMON_PID=()
BG_PIDS=()
FG_PIDS=()
KILL_RUNDIR=""
SERVE_PID=""
TMP=""
FAILS=0
fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
pass() { echo "ok: $*"; }
die() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }
# show FILE...: the files indented, on stderr (a failure's evidence).
show_log() { sed 's/^/    /' "$@" >&2; }

# need_exec FILE...: skips the test unless every FILE is an executable (built).
need_exec() {
  local f
  for f in "$@"; do [[ -x "$f" ]] || skip "$f not built"; done
}
# need_cmd CMD...: skips the test unless every CMD is installed.
need_cmd() {
  local c
  for c in "$@"; do command -v "$c" >/dev/null || skip "$c needed"; done
}

# run_fg CMD...: runs CMD and returns its status, as in the foreground, but waited for with
# `wait`, which a trapped signal interrupts: bash runs a trap only after a foreground command
# ends, and meson follows its timeout's SIGTERM with a SIGKILL half a second later, so the
# cleanup would never run while a job hangs.
run_fg() {
  local p rc=0 saved=(${FG_PIDS[@]+"${FG_PIDS[@]}"})
  "$@" &
  p=$!
  FG_PIDS+=("$p")
  wait "$p" || rc=$?
  FG_PIDS=(${saved[@]+"${saved[@]}"})
  return "$rc"
}
# kill_tree PID: SIGKILL to PID's process group where PID leads one, else to PID.
kill_tree() { kill -KILL -- "-$1" 2>/dev/null || kill -KILL "$1" 2>/dev/null; }

# capture NAME LIMIT CMD...: runs CMD under `timeout LIMIT` with its output in
# $TMP/NAME.out and .err; its status in RC, its wall time in ELAPSED (seconds).
capture() {
  local name=$1 limit=$2 t0=$SECONDS
  shift 2
  run_fg timeout -k 5 "$limit" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" </dev/null
  RC=$?
  # shellcheck disable=SC2034  # for the caller
  ELAPSED=$((SECONDS - t0))
}
# show NAME: a captured command's output (show_log of its .out and .err).
show() { show_log "$TMP/$1.out" "$TMP/$1.err"; }
# expect_rc NAME WANT: fails NAME, showing its output, unless the captured RC is WANT.
expect_rc() {
  if [[ $RC -ne $2 ]]; then fail "$1: exit status $RC, expected $2"; show "$1"; return 1; fi
  return 0
}

# use_build DIR [PATH...]: the build directory's daemon, nicemuctl and nicemu-run in DAEMON,
# CTL and RUN; skips the test unless DIR is given and the daemon, nicemuctl and every
# DIR/PATH are built.
use_build() {
  BUILD=$1
  [[ -n "$BUILD" ]] || skip "usage: $0 BUILD_DIR"
  DAEMON=$BUILD/nicemu/daemon/nicemu
  CTL=$BUILD/tools/nicemuctl/nicemuctl
  RUN=$BUILD/tools/nicemu-run/nicemu-run
  local p
  need_exec "$DAEMON" "$CTL"
  for p in "${@:2}"; do need_exec "$BUILD/$p"; done
}

# SIGTERM to every daemon in DAEMON_PID (and SIGCONT, for one a test stopped), two seconds
# to exit, then SIGKILL.
stop_daemons() {
  local a p
  for a in "${!DAEMON_PID[@]}"; do kill -TERM "${DAEMON_PID[$a]}" 2>/dev/null; kill -CONT "${DAEMON_PID[$a]}" 2>/dev/null; done
  for a in "${!DAEMON_PID[@]}"; do
    p=${DAEMON_PID[$a]}
    for _ in $(seq 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
}
# stop_daemon KEY: SIGTERM one daemon of DAEMON_PID and wait for it (a clean shutdown).
stop_daemon() {
  local p=${DAEMON_PID[$1]}
  kill -TERM "$p" 2>/dev/null
  wait "$p" 2>/dev/null
  unset "DAEMON_PID[$1]"
}

lib_cleanup() {
  local rc=$? p
  set +e
  for p in ${FG_PIDS[@]+"${FG_PIDS[@]}"}; do [[ -n "$p" ]] && kill_tree "$p"; done
  declare -F test_cleanup >/dev/null && test_cleanup
  for p in ${BG_PIDS[@]+"${BG_PIDS[@]}"}; do kill_tree "$p"; wait "$p" 2>/dev/null; done
  [[ -n "$SERVE_PID" ]] && kill -TERM "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID" 2>/dev/null
  stop_daemons
  [[ -n "$KILL_RUNDIR" ]] && pkill -KILL -f -- "--rundir $KILL_RUNDIR" 2>/dev/null
  [[ -n "$TMP" ]] && rm -rf "$TMP"
  exit "$rc"
}
# test_init NAME: a fresh scratch directory in TMP, and the traps (cleanup at exit; INT and
# TERM exit 1).
test_init() {
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || exit 1
  trap lib_cleanup EXIT
  trap 'exit 1' INT TERM
}

# wait_until TRIES CMD...: runs CMD every 0.1 s until it succeeds, at most TRIES times.
wait_until() {
  local n=$1 i
  shift
  for ((i = 0; i < n; i++)); do "$@" && return 0; sleep 0.1; done
  return 1
}

# wait_all NAME [LOG]: waits for every process in BG_PIDS; passes NAME when all exited 0,
# else fails it and shows LOG ($TMP/prog.log); then empties LOG for the next round.
wait_all() {
  local ok=1 p log=${2:-$TMP/prog.log}
  for p in ${BG_PIDS[@]+"${BG_PIDS[@]}"}; do wait "$p" || ok=0; done
  BG_PIDS=()
  if [[ $ok -eq 1 ]]; then pass "$1"; else fail "$1"; show_log "$log"; fi
  : >"$log"
}

# expect_verified NAME DETAIL LOG WANT PATTERN CMD...: runs a job CMD with its output in
# LOG; passes "NAME: DETAIL" when it exits 0 and PATTERN stands on WANT lines of LOG (one
# per rank that verified its data), else fails NAME and shows LOG.
expect_verified() {
  local name=$1 detail=$2 log=$3 want=$4 pattern=$5 n
  shift 5
  if "$@" >"$log" 2>&1; then
    n=$(grep -c -- "$pattern" "$log")
    if [[ $n -eq $want ]]; then pass "$name: $detail"; else fail "$name: $n of $want ranks verified"; show_log "$log"; fi
  else
    fail "$name"; show_log "$log"
  fi
}

# Every daemon of run directory $1 answers `nicemuctl cred list` and lists no DRC credential
# (after drc_release): one pass or fail.
expect_no_drc_credentials() {
  if ! "$CTL" --rundir "$1" cred list --json >"$TMP/list.json" 2>"$TMP/list.err" || [[ -s $TMP/list.err ]] ||
      ! grep -q '"credentials"' "$TMP/list.json"; then
    fail "nicemuctl cred list of every daemon"; show_log "$TMP/list.json" "$TMP/list.err"
  elif grep -q '"drc"' "$TMP/list.json"; then
    fail "a released DRC credential is still listed"; show_log "$TMP/list.json"
  else
    pass "released everywhere"
  fi
}

# finish NAME [A...]: exits 1 when a check failed (after the test's `on_failure`, if it
# defines one, and the last lines of $TMP/daemonA.log of each host A), else prints
# PASS: NAME and exits 0.
finish() {
  local name=$1 a
  shift
  if [[ $FAILS -ne 0 ]]; then
    declare -F on_failure >/dev/null && on_failure
    [[ $# -gt 0 ]] && echo "--- daemon logs ---" >&2
    for a in "$@"; do tail -n 20 "$TMP/daemon$a.log" 2>/dev/null | sed "s/^/    [$a] /" >&2; done
    exit 1
  fi
  echo "PASS: $name"
  exit 0
}

# ---- daemons ----
# start_daemon A RUNDIR [DAEMON_ARG...]: starts $DAEMON for NIC address A in RUNDIR (inside
# network namespace DAEMON_NS[A] where that is set), log $TMP/daemonA.log, pid in
# DAEMON_PID[A]; waits until it answers nicemuctl status, else exits the test with its log.
DAEMON_NS=()
start_daemon() {
  local a=$1 dir=$2 wrap=()
  [[ -n "${DAEMON_NS[$a]:-}" ]] && wrap=(ip netns exec "${DAEMON_NS[$a]}")
  mkdir -p "$dir"
  ${wrap[@]+"${wrap[@]}"} "$DAEMON" --node "$a" --rundir "$dir" "${@:3}" >>"$TMP/daemon$a.log" 2>&1 </dev/null &
  DAEMON_PID[$a]=$!
  wait_until 100 "$CTL" --rundir "$dir" --node "$a" --timeout 1 status >/dev/null 2>&1 && return 0
  echo "FAIL: daemon for NIC address $a did not come up" >&2
  show_log "$TMP/daemon$a.log"
  exit 1
}

# serve_daemons ENV_FILE LOG NICEMU_RUN_ARG...: `$RUN --daemons-only` in the background
# (output in LOG), as a site launcher's node daemons; waits for its environment file.
serve_daemons() {
  local env=$1 log=$2
  shift 2
  "$RUN" --daemons-only --env-file "$env" "$@" >"$log" 2>&1 &
  SERVE_PID=$!
  wait_until 100 test -f "$env" || { show_log "$log"; die "nicemu-run --daemons-only wrote no environment"; }
}
# export_env FILE: exports the variables FILE sets (nicemu-run's environment file:
# NICEMU_RUNDIR, the credential, the nodes).
export_env() {
  set -a
  # shellcheck disable=SC1090
  . "$1"
  set +a
}

# Fabric "hosts": host A is run directory $TMP/hostA, with the map $TMP/fabric.toml.
# fabric_key: a fresh cluster key in FABRIC_KEY ($TMP/fabric.key).
fabric_key() {
  FABRIC_KEY=$TMP/fabric.key
  "$CTL" keygen "$FABRIC_KEY" >/dev/null || die "nicemuctl keygen"
}
# rma_errors_seen LOG: fabric_rma errors' log shows what every fabric must give: the six
# posts through a deregistered handle completed with error events, that page untouched, an
# AMO into it PROTECTION and one into a read-only registration READ_ONLY.
rma_errors_seen() {
  [[ $(grep -c 'through a deregistered handle: error event' "$1") -eq 6 ]] &&
    grep -q 'deregistered page is untouched' "$1" &&
    grep -q 'AMO into a deregistered handle: PROTECTION' "$1" &&
    grep -q 'AMO into a read-only registration: READ_ONLY' "$1"
}
# netns_test_hosts NAME PREFIX NET_BYTE N: the usual start of a namespace fabric test: N
# hosts named PREFIX<pid>a, b, ... (NS) on the bridge PREFIX<pid>sw (SW) at NET =
# 10.NET_BYTE.<pid % 200>., removed at exit (test_cleanup), then test_init NAME and
# netns_fabric. Sets TAG, SW, NS, NET for the test.
netns_test_hosts() {
  local letters=(a b c d e f g h) i
  TAG=$2$$
  SW=${TAG}sw
  NS=()
  for ((i = 0; i < $4; i++)); do NS+=("${TAG}${letters[i]}"); done
  NET=10.$3.$(($$ % 200)).
  test_cleanup() { netns_hosts_down "${NS[@]}" "$SW"; }
  test_init "$1"
  netns_fabric "$SW" "$NET" "${NS[@]}"
}
# netns_fabric SW NET NS...: namespace hosts on one bridge (tools/lib/netns-hosts.sh), host k
# at NET(k+1); a fresh cluster key (fabric_key) and the fabric map $TMP/fabric.toml of them;
# DAEMON_NS set so fabric_daemon k runs in host k's namespace. Skips (77) when the namespace
# network cannot be built. Call after test_init, with a test_cleanup that runs
# netns_hosts_down NS... SW.
netns_fabric() {
  local sw=$1 net=$2 k addrs=()
  shift 2
  # shellcheck source=../../tools/lib/netns-hosts.sh
  . "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/netns-hosts.sh"
  netns_hosts_up "$sw" "$net" "$@" 2>"$TMP/err" || skip "cannot build the namespace network: $(cat "$TMP/err")"
  fabric_key
  for ((k = 1; k <= $#; k++)); do addrs+=("$net$k"); done
  "$CTL" fabric gen --port 7700 "${addrs[@]}" >"$TMP/fabric.toml" || die "nicemuctl fabric gen"
  DAEMON_NS=("$@")
  NETNS_HOSTS=$(IFS=,; echo "${addrs[*]}")
  netns_hosts_rsh "$TMP/netns-rsh" "$net" "$TMP" "$@" || die "netns_hosts_rsh"
}
# netns_hydra TIMEOUT N PPN LOG PROG [ARG...]: an MPICH Hydra job (HYDRA) of N ranks, PPN per
# host, over the hosts of netns_fabric, started from host 0 with the job credential's
# PMI_GNI_PTAG/COOKIE; its output in LOG. Returns Hydra's status.
netns_hydra() {
  local to=$1 n=$2 ppn=$3 log=$4
  shift 4
  run_fg ip netns exec "${DAEMON_NS[0]}" env NICEMU_RUNDIR="$TMP/host0" NICEMU_NODE=0 timeout -k 5 "$to" "$HYDRA" \
    -launcher rsh -launcher-exec "$TMP/netns-rsh" -hosts "$NETNS_HOSTS" -n "$n" -ppn "$ppn" -genvnone \
    -genv PMI_GNI_PTAG "$PMI_GNI_PTAG" -genv PMI_GNI_COOKIE "$PMI_GNI_COOKIE" "$@" >"$log" 2>&1
}
# fabric_daemon A [DAEMON_ARG...]: start_daemon on host A with the map and FABRIC_KEY.
fabric_daemon() {
  start_daemon "$1" "$TMP/host$1" --fabric "$TMP/fabric.toml" --fabric-key "$FABRIC_KEY" --log-level info "${@:2}"
}
# node_counter A NAME: a node counter from the counter page of host A's daemon.
node_counter() {
  "$CTL" --rundir "$TMP/host$1" stats --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"][0]["counters"][sys.argv[1]])' "$2"
}
# fabric_cred A...: one job credential in PMI_GNI_PTAG/PMI_GNI_COOKIE, issued on host 0 and
# granted on hosts A....
fabric_cred() {
  local a
  eval "$("$CTL" --rundir "$TMP/host0" cred issue --export)" || die "cred issue"
  for a in "$@"; do
    "$CTL" --rundir "$TMP/host$a" cred grant --ptag "$PMI_GNI_PTAG" --cookie "$PMI_GNI_COOKIE" >/dev/null ||
      die "cred grant on $a"
  done
}
