#!/usr/bin/env bash
# DMAPP transfers of any size and alignment and the attribute query before init
# (dmapp_align.c) under nicemu-run: 2 PEs on one emulated node, 2 PEs over two nodes, the
# plain dmapp_get_rma_attrs/dmapp_init variant, and 2 PEs over two Gemini nodes (whose GETs
# also need an aligned local address). Every daemon started is gone afterwards.
# Usage: dmapp_align.sh BUILD_DIR
set -u
build=${1:?build dir}
run=$build/tools/nicemu-run/nicemu-run
prog=$build/tests/integration/dmapp_align
daemon=$build/nicemu/daemon/nicemu
for b in "$run" "$prog" "$daemon"; do [ -x "$b" ] || { echo "missing $b"; exit 77; }; done

rundir=$(mktemp -d /tmp/nicemu-dmapp-align-XXXXXX)
export NICEMU_RUNDIR=$rundir
gemini=()
cleanup() {
  # Only what this test started: the Gemini daemons by pid, then anything else of its
  # private run directory.
  for p in "${gemini[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${gemini[@]}"; do wait "$p" 2>/dev/null; done
  pkill -KILL -f -- "--rundir $rundir" 2>/dev/null
  rm -rf "$rundir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

job() {  # NAME NODES DEVICE ARGS... : one 2-PE job, which must report its checks on DEVICE
  local name=$1 nodes=$2 device=$3 out
  shift 3
  # Failures return rather than exit: the caller exits, outside any function.
  out=$("$run" -n 2 --nodes "$nodes" --timeout 120 --rundir "$rundir" "$prog" "$@" 2>&1) ||
    { echo "FAIL: $name: $out"; return 1; }
  grep -q "on $device, .* checks passed" <<<"$out" || { echo "FAIL: $name did not report on $device: $out"; return 1; }
  echo "$name:"
  echo "$out" | sed 's/^/  /'
}

job "one node" 1 Aries || exit 1
job "two nodes" 2 Aries || exit 1
job "plain dmapp_get_rma_attrs + dmapp_init" 2 Aries --plain || exit 1
sleep 0.2
pgrep -f -- "--rundir $rundir" >/dev/null && fail "daemons left running"

# Gemini: two daemons started here with --device gemini; nicemu-run uses them as found.
for node in 0 1; do
  "$daemon" --node $node --rundir "$rundir" --device gemini --log-level warn &
  gemini+=($!)
done
for _ in $(seq 1 200); do
  [ "$(ls "$rundir" 2>/dev/null | grep -c '\.sock$')" -ge 2 ] && break
  sleep 0.05
done
job "two Gemini nodes" 2 Gemini || exit 1
echo "dmapp-align: all checks passed"
exit 0
