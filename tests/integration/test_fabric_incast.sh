#!/usr/bin/env bash
# The reduced incast of issue 46: bench/fabric-incast with 4 namespace senders streaming
# 256 KiB RDMA PUTs (8 in flight) into one receiver for 10 s through the receiver's bridge
# port shaped with tbf rate 200mbit burst 32kbit latency 5ms, no TCP. Passes when, with the
# receiver alive throughout: no channel was declared down, no completion was an error, no
# post was refused, and the goodput was at least 0.5 of the link.
# The floor: TCP gets 0.88-0.92 of this link and issue 46 targets 0.85 for the fabric; half
# the link leaves room for a loaded 2-core machine (five daemons and four senders share it)
# while still failing the collapse the issue measured (0.22 at 4 senders, retransmitting
# three records in four).
# Needs root, ip and tc; otherwise skipped (77). The harness removes what it made.
# Usage: test_fabric_incast.sh BUILD_DIR     Exit: 0 pass, 1 fail, 77 skip.
set -u
. "$(dirname "$0")/lib.sh"
use_build "${1:-}" bench/incast_put
[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces)"
need_cmd ip tc python3
exec "$(dirname "$0")/../../bench/fabric-incast" --build "$BUILD" --senders 4 --seconds 10 --no-tcp --no-mixed \
  --no-install --check-floor 0.5
