#!/usr/bin/env bash
# The collective engine (docs/collective-engine.md) with ce_conformance under nicemu-run:
# every command, both widths, TWO_OP, the four rounding modes, exception bits, index ties,
# back-to-back posts and the error cases over a binary and a flat tree of
#   1, 2 (one node and two), 7 (3 nodes) and 64 processes (16 nodes)       [local]
#   7 (3 hosts) and 64 processes (16 hosts, UDP fabric on loopback)          [fabric]
#   (the 64-process fabric run always with MALLOC_PERTURB_ set, see below)
# then a member that dies and a daemon that goes silent (SIGSTOP) (its peers get an error
# completion within a second: one host, and across hosts) and a Gemini daemon (every CE call GNI_RC_ILLEGAL_OP).
# Usage: test_ce.sh BUILD_DIR local|fabric       Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"

WHAT=${2:-local}
use_build "${1:-}" tests/integration/ce_conformance tools/nicemu-run/nicemu-run
PROG=$BUILD/tests/integration/ce_conformance
test_init test_ce

job() {  # NAME NP NODES [nicemu-run option...] -- [program argument...]
  local name=$1 np=$2 nodes=$3 log=$TMP/job.log
  shift 3
  local opts=() args=()
  while [[ $# -gt 0 && $1 != -- ]]; do opts+=("$1"); shift; done
  [[ ${1:-} == -- ]] && shift
  args=("$@")
  local t0=$SECONDS
  if timeout -k 5 150 "$RUN" "${opts[@]}" --rundir "$TMP/run$np.$nodes" -n "$np" --nodes "$nodes" --timeout 140 \
      "$PROG" "${args[@]}" >"$log" 2>&1; then
    pass "$name ($((SECONDS - t0)) s)"
    grep -h 'ce conformance\|error completion in' "$log" | head -3 | sed 's/^/    /'
  else
    fail "$name"
    sed 's/^/    /' "$log" | head -60 >&2
  fi
}

if [[ $WHAT == local ]]; then
  job "1 process" 1 1
  job "2 processes on one node" 2 1
  job "2 processes on two nodes" 2 2
  job "7 processes on 3 nodes" 7 3
  job "64 processes on 16 nodes" 64 16
  job "a member dies: error completion within a second (3 nodes)" 3 3 -- die
  job "a leaf on another node dies before it posts: error completion within a second" 3 3 -- die-early
  job "a daemon goes silent (SIGSTOP): error completion within a second" 3 3 -- stall
  # Leaves on their channel's node post through the job's post page and ring the daemon
  # once per channel and round (abi/ce_ops.h): the daemons' counters show it was used.
  start_daemon 0 "$TMP/pp" --log-level warn && start_daemon 1 "$TMP/pp" --log-level warn
  if timeout -k 5 150 "$RUN" --rundir "$TMP/pp" -n 7 --nodes 2 --timeout 140 "$PROG" >"$TMP/pp_job.log" 2>&1; then
    pages=0 rings=0 posts=0
    for a in 0 1; do
      st=$("$CTL" --rundir "$TMP/pp" --node $a status --json)
      pages=$((pages + $(jq '[.nodes[].collective_engine.page_posts] | add' <<<"$st")))
      rings=$((rings + $(jq '[.nodes[].collective_engine.rings] | add' <<<"$st")))
      posts=$((posts + $(jq '[.nodes[].collective_engine.posts] | add' <<<"$st")))
    done
    if (( pages > 0 && rings > 0 && rings < pages )); then
      pass "7 processes on 2 nodes: $pages of $posts posts through the post page, $rings rings"
    else
      fail "post page not used: $pages page posts, $rings rings, $posts posts"
    fi
  else
    fail "7 processes on 2 nodes (post page)"
    show_log "$TMP/pp_job.log"
  fi
  stop_daemons
  DAEMON_PID=()
  # A Gemini node: nicemu-run uses the daemon already running in its run directory.
  start_daemon 0 "$TMP/gemini" --device gemini --log-level warn
  if timeout -k 5 60 "$RUN" --rundir "$TMP/gemini" -n 2 "$PROG" >"$TMP/gemini_job.log" 2>&1 &&
      grep -q 'Gemini device, every CE call GNI_RC_ILLEGAL_OP' "$TMP/gemini_job.log"; then
    pass "Gemini device: every CE call GNI_RC_ILLEGAL_OP"
  else
    fail "Gemini device"
    show_log "$TMP/gemini_job.log"
  fi
else
  job "7 processes on 3 hosts" 7 3 --fabric udp
  # With a fixed MALLOC_PERTURB_ (not meson's random one, nor none by hand): glibc then fills
  # every new heap block, which once made each daemon's first messages to its 15 peers cost
  # 60 MB of page faults in its loop and the CE liveness probes time out (peer gone).
  MALLOC_PERTURB_=165 job "64 processes on 16 hosts (MALLOC_PERTURB_=165)" 64 16 --fabric udp
  job "a member on another host dies: error completion within a second" 3 3 --fabric udp -- die
  job "a leaf on another host dies before it posts: error completion within a second" 3 3 --fabric udp -- die-early
  job "a host goes silent (its daemon SIGSTOPped): error completion within a second" 3 3 --fabric udp -- stall
fi

finish "collective engine ($WHAT)"
