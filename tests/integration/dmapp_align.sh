#!/usr/bin/env bash
# DMAPP transfers of any size and alignment and the attribute query before init
# (dmapp_align.c) under nicemu-run: 2 PEs on one emulated node, 2 PEs over two nodes, the
# plain dmapp_get_rma_attrs/dmapp_init variant, and 2 PEs over two Gemini nodes (whose GETs
# also need an aligned local address). Every daemon started is gone afterwards.
# Usage: dmapp_align.sh BUILD_DIR
set -u
. "$(dirname "$0")/lib.sh"
build=${1:?build dir}
RUN=$build/tools/nicemu-run/nicemu-run
prog=$build/tests/integration/dmapp_align
DAEMON=$build/nicemu/daemon/nicemu
CTL=$build/tools/nicemuctl/nicemuctl
need_exec "$RUN" "$prog" "$DAEMON" "$CTL"
test_init dmapp_align
# Only what this test started: the Gemini daemons (DAEMON_PID), then anything else of its
# private run directory.
rundir=$TMP
KILL_RUNDIR=$rundir
export NICEMU_RUNDIR=$rundir

job() {  # NAME NODES DEVICE ARGS... : one 2-PE job, which must report its checks on DEVICE
  local name=$1 nodes=$2 device=$3 out
  shift 3
  # Failures return rather than exit: the caller exits, outside any function.
  out=$("$RUN" -n 2 --nodes "$nodes" --timeout 120 --rundir "$rundir" "$prog" "$@" 2>&1) ||
    { echo "FAIL: $name: $out"; return 1; }
  grep -q "on $device, .* checks passed" <<<"$out" || { echo "FAIL: $name did not report on $device: $out"; return 1; }
  echo "$name:"
  echo "$out" | sed 's/^/  /'
}

job "one node" 1 Aries || exit 1
job "two nodes" 2 Aries || exit 1
job "plain dmapp_get_rma_attrs + dmapp_init" 2 Aries --plain || exit 1
sleep 0.2
pgrep -f -- "--rundir $rundir" >/dev/null && die "daemons left running"

# Gemini: two daemons started here with --device gemini; nicemu-run uses them as found.
for node in 0 1; do start_daemon $node "$rundir" --device gemini --log-level warn; done
job "two Gemini nodes" 2 Gemini || exit 1
finish dmapp-align
