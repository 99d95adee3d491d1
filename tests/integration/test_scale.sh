#!/usr/bin/env bash
# Scale (issue 24): RANKS ranks over NODES emulated nodes on this host wire an all-to-all
# on demand (directed datagrams caught by the peers' wildcard posts) and exchange one FMA
# PUT and one SMSG message over every channel; every rank verifies every byte it received.
# The job runs under nicemu-run's --timeout. Usage: test_scale.sh BUILD_DIR RANKS NODES [TIMEOUT_S]
set -u
. "$(dirname "$0")/lib.sh"
build=${1:?build dir}
ranks=${2:?ranks}
nodes=${3:?nodes}
limit=${4:-120}
RUN=$build/tools/nicemu-run/nicemu-run
bench=$build/bench/connect_bench
need_exec "$RUN" "$bench"
test_init test_scale
rundir=$TMP/run
KILL_RUNDIR=$rundir
out=$TMP/out
fail() {
  echo "FAIL: $*"
  grep -v '^rank ' "$out" | tail -20
  exit 1
}

start=$(date +%s.%N)
"$RUN" -n "$ranks" --nodes "$nodes" --rundir "$rundir" --no-tag-output --timeout "$limit" \
  "$bench" --on-demand --all --timeout "$limit" >"$out" 2>&1
rc=$?
took=$(echo "$(date +%s.%N) - $start" | bc)
[ "$rc" -eq 0 ] || fail "job exited with status $rc after ${took}s"

want=$((ranks - 1))
python3 - "$out" "$ranks" "$want" <<'PY' || fail "per-rank results do not add up"
import sys
lines = [l.split() for l in open(sys.argv[1]) if l.startswith('rank ')]
ranks, want = int(sys.argv[2]), int(sys.argv[3])
seen = {}
for f in lines:
    kv = dict(zip(f[0::2], f[1::2]))
    seen[int(kv['rank'])] = (int(kv['peers']), int(kv['channels_opened']), f[-1], float(kv['wire_us']))
bad = [r for r in range(ranks) if r not in seen or seen[r][0] != want or seen[r][1] != want or seen[r][2] != 'ok']
if bad:
    print(f"ranks missing or wrong: {bad[:10]}", file=sys.stderr)
    sys.exit(1)
print(f"{ranks} ranks: {ranks * want // 2} channels, every PUT and message verified; "
      f"slowest wire-up {max(v[3] for v in seen.values()) / 1e3:.0f} ms")
PY
echo "scale test passed: $ranks ranks over $nodes nodes in ${took}s"
