#!/usr/bin/env bash
# libalpslli / libalpsutil (issue 22) answer apid, GNI credential and placement the way
# libfabric's gni provider asks, under each launcher: nicemu-run (4 ranks, 2 nodes), the
# --daemons-only recipe (ranks placed by tools/compat/nicemu-rank, and all on one node
# without it), Hydra's mpiexec when installed; no credential -> "unavailable"; launcher
# variables that contradict each other -> an error, not a wrong answer.
# Usage: test_alps.sh BUILD_DIR SOURCE_DIR
set -u
build=${1:?build dir}
src=${2:?source dir}
run=$build/tools/nicemu-run/nicemu-run
check=$build/tests/integration/alps_check
rank_wrap=$src/tools/compat/nicemu-rank
for b in "$run" "$check" "$rank_wrap"; do [ -x "$b" ] || { echo "missing $b"; exit 77; }; done

tmp=$(mktemp -d /tmp/nicemu-alps-XXXXXX)
served=
cleanup() {
  [ -n "$served" ] && kill -TERM "$served" 2>/dev/null && wait "$served" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
# field LINE NAME: the value after NAME in an alps_check line
field() { echo "$1" | awk -v k="$2" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}'; }
line_of() { echo "$1" | grep "^alps rank $2 "; }

# 1. nicemu-run: ranks 0,1 on the first node, 2,3 on the second; one apid and credential.
out=$(NICEMU_RUNDIR=$tmp/run1 "$run" --no-tag-output -n 4 --nodes 2 "$check" 2>&1) || fail "nicemu-run job: $out"
[ "$(echo "$out" | grep -c '^alps rank')" -eq 4 ] || fail "expected 4 answers: $out"
for r in 0 1 2 3; do
  l=$(line_of "$out" $r) || fail "no answer of rank $r: $out"
  want_first=$(( r < 2 ? 0 : 2 ))
  [ "$(field "$l" first)" = $want_first ] && [ "$(field "$l" here)" = 2 ] && [ "$(field "$l" pes)" = 4 ] ||
    fail "rank $r placement: $l"
done
[ "$(echo "$out" | grep '^alps rank' | awk '{print $5, $7, $9}' | sort -u | wc -l)" -eq 1 ] ||
  fail "ranks disagree on apid/ptag/cookie: $out"
a0=$(field "$(line_of "$out" 0)" addr); a2=$(field "$(line_of "$out" 2)" addr)
[ "$a0" != "$a2" ] || fail "ranks 0 and 2 share node $a0"
[ "$(field "$(line_of "$out" 3)" nodes)" = "$a0,$a0,$a2,$a2" ] || fail "placement list: $(line_of "$out" 3)"

# 2. --daemons-only: the environment file, ranks started by hand as a launcher would.
"$run" --daemons-only --nodes 2 --env-file "$tmp/env" >"$tmp/daemons.log" 2>&1 &
served=$!
for _ in $(seq 200); do [ -f "$tmp/env" ] && break; sleep 0.05; done
[ -f "$tmp/env" ] || fail "no environment file: $(cat "$tmp/daemons.log")"
set -a; . "$tmp/env"; set +a
out=""
for r in 0 1 2; do
  out+=$(env -u ALPS_APP_PE PMI_RANK=$r PMI_SIZE=3 "$rank_wrap" "$check" 2>&1)$'\n' || fail "rank $r: $out"
done
l=$(line_of "$out" 1); [ "$(field "$l" first)" = 0 ] && [ "$(field "$l" here)" = 2 ] || fail "nicemu-rank rank 1: $out"
l=$(line_of "$out" 2); [ "$(field "$l" first)" = 2 ] && [ "$(field "$l" here)" = 1 ] || fail "nicemu-rank rank 2: $out"
# Without nicemu-rank every rank attaches to the first node: all of them are "here".
l=$(env -u ALPS_APP_PE PMI_RANK=2 PMI_SIZE=3 "$check" 2>&1) || fail "without nicemu-rank: $l"
[ "$(field "$l" first)" = 0 ] && [ "$(field "$l" here)" = 3 ] || fail "one-node placement: $l"

# 3. Hydra (MPICH's mpiexec) with the same environment, ranks placed by nicemu-rank.
if command -v mpiexec.hydra >/dev/null; then
  out=$(timeout 60 mpiexec.hydra -launcher fork -n 2 "$rank_wrap" "$check" 2>&1) || fail "Hydra job: $out"
  l=$(line_of "$out" 1) || fail "Hydra: no answer of rank 1: $out"
  [ "$(field "$l" first)" = 1 ] && [ "$(field "$l" here)" = 1 ] && [ "$(field "$l" pes)" = 2 ] || fail "Hydra: $out"
else
  echo "mpiexec.hydra not installed: Hydra case skipped"
fi

# 4. Contradicting variables: rank 1 of 2 placed on node 1 of NICEMU_JOB_NODES but
#    attached to the first node.
l=$(env -u ALPS_APP_PE PMI_RANK=1 PMI_SIZE=2 NICEMU_JOB_NODES="$NICEMU_NODES" "$check" 2>&1) &&
  fail "contradicting placement accepted: $l"
grep -q "NICEMU_JOB_NODES" <<<"$l" || fail "no explanation of the contradiction: $l"

# 5. No credential: ALPS has nothing to say (the provider then stays off).
rc=0
l=$(env -u PMI_GNI_PTAG -u PMI_GNI_COOKIE "$check" 2>&1) || rc=$?
[ "$rc" -eq 2 ] || fail "without a credential: rc $rc: $l"
echo "alps: all checks passed"
