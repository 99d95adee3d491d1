#!/usr/bin/env bash
# libalpslli / libalpsutil (issue 22) answer apid, GNI credential and placement the way
# libfabric's gni provider asks, under each launcher: nicemu-run (4 ranks, 2 nodes), the
# --daemons-only recipe (ranks placed by tools/lib/nicemu-rank, and all on one node
# without it); no credential -> "unavailable"; launcher variables that contradict each
# other -> an error, not a wrong answer. With `hydra`, only Hydra's mpiexec with ranks placed
# by nicemu-rank instead (its own test: 77 where Hydra is not installed).
# Usage: test_alps.sh BUILD_DIR SOURCE_DIR [hydra]
set -u
. "$(dirname "$0")/lib.sh"
build=${1:?build dir}
src=${2:?source dir}
phase=${3:-}
[[ -z "$phase" || "$phase" == hydra ]] || die "unknown phase '$phase' (the only one is hydra)"
RUN=$build/tools/nicemu-run/nicemu-run
check=$build/tests/integration/alps_check
rank_wrap=$src/tools/lib/nicemu-rank
export NICEMU_RUN=$RUN  # the nicemu-run nicemu-rank asks where each rank goes
need_exec "$RUN" "$check" "$rank_wrap"
test_init test_alps
# field LINE NAME: the value after NAME in an alps_check line
field() { echo "$1" | awk -v k="$2" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}'; }
line_of() { echo "$1" | grep "^alps rank $2 "; }

# Hydra (MPICH's mpiexec) with the --daemons-only environment, ranks placed by nicemu-rank.
if [[ $phase == hydra ]]; then
  command -v mpiexec.hydra >/dev/null || skip "mpiexec.hydra not installed (Debian mpich)"
  serve_daemons "$TMP/env" "$TMP/daemons.log" --nodes 2
  export_env "$TMP/env"
  out=$(timeout 60 mpiexec.hydra -launcher fork -n 2 "$rank_wrap" "$check" 2>&1) || die "Hydra job: $out"
  l=$(line_of "$out" 1) || die "Hydra: no answer of rank 1: $out"
  [ "$(field "$l" first)" = 1 ] && [ "$(field "$l" here)" = 1 ] && [ "$(field "$l" pes)" = 2 ] || die "Hydra: $out"
  finish alps-hydra
fi

# 1. nicemu-run: ranks 0,1 on the first node, 2,3 on the second; one apid and credential.
out=$(NICEMU_RUNDIR=$TMP/run1 "$RUN" --no-tag-output -n 4 --nodes 2 "$check" 2>&1) || die "nicemu-run job: $out"
[ "$(echo "$out" | grep -c '^alps rank')" -eq 4 ] || die "expected 4 answers: $out"
for r in 0 1 2 3; do
  l=$(line_of "$out" $r) || die "no answer of rank $r: $out"
  want_first=$(( r < 2 ? 0 : 2 ))
  [ "$(field "$l" first)" = $want_first ] && [ "$(field "$l" here)" = 2 ] && [ "$(field "$l" pes)" = 4 ] ||
    die "rank $r placement: $l"
done
[ "$(echo "$out" | grep '^alps rank' | awk '{print $5, $7, $9}' | sort -u | wc -l)" -eq 1 ] ||
  die "ranks disagree on apid/ptag/cookie: $out"
a0=$(field "$(line_of "$out" 0)" addr); a2=$(field "$(line_of "$out" 2)" addr)
[ "$a0" != "$a2" ] || die "ranks 0 and 2 share node $a0"
[ "$(field "$(line_of "$out" 3)" nodes)" = "$a0,$a0,$a2,$a2" ] || die "placement list: $(line_of "$out" 3)"

# nicemu-run --place names the node of a rank by the placement it uses itself (what
# nicemu-rank asks below); a rank beyond -n is refused.
[ "$("$RUN" --place 2 -n 4 --nodes 2)" = 1 ] && [ "$("$RUN" --place 4 -n 5 --nodes 3 --ranks-per-node 2)" = 2 ] ||
  die "nicemu-run --place: $("$RUN" --place 2 -n 4 --nodes 2 2>&1)"
"$RUN" --place 4 -n 4 >/dev/null 2>&1 && die "nicemu-run --place accepted rank 4 of 4"

# 2. --daemons-only: the environment file, ranks started by hand as a launcher would.
serve_daemons "$TMP/env" "$TMP/daemons.log" --nodes 2
export_env "$TMP/env"
out=""
for r in 0 1 2; do
  out+=$(env -u ALPS_APP_PE PMI_RANK=$r PMI_SIZE=3 "$rank_wrap" "$check" 2>&1)$'\n' || die "rank $r: $out"
done
l=$(line_of "$out" 1); [ "$(field "$l" first)" = 0 ] && [ "$(field "$l" here)" = 2 ] || die "nicemu-rank rank 1: $out"
l=$(line_of "$out" 2); [ "$(field "$l" first)" = 2 ] && [ "$(field "$l" here)" = 1 ] || die "nicemu-rank rank 2: $out"
# Without nicemu-rank every rank attaches to the first node: all of them are "here".
l=$(env -u ALPS_APP_PE PMI_RANK=2 PMI_SIZE=3 "$check" 2>&1) || die "without nicemu-rank: $l"
[ "$(field "$l" first)" = 0 ] && [ "$(field "$l" here)" = 3 ] || die "one-node placement: $l"

# 3. Contradicting variables: rank 1 of 2 placed on node 1 of NICEMU_JOB_NODES but
#    attached to the first node.
l=$(env -u ALPS_APP_PE PMI_RANK=1 PMI_SIZE=2 NICEMU_JOB_NODES="$NICEMU_NODES" "$check" 2>&1) &&
  die "contradicting placement accepted: $l"
grep -q "NICEMU_JOB_NODES" <<<"$l" || die "no explanation of the contradiction: $l"

# 4. No credential: ALPS has nothing to say (the provider then stays off).
rc=0
l=$(env -u PMI_GNI_PTAG -u PMI_GNI_COOKIE "$check" 2>&1) || rc=$?
[ "$rc" -eq 2 ] || die "without a credential: rc $rc: $l"
finish alps
