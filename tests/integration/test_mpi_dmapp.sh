#!/usr/bin/env bash
# MPI_Init and dmapp_init in one program under Debian's Open MPI mpirun (mpi_dmapp.c), with
# nicemu's daemons and job credential from `nicemu-run --daemons-only` (docs/launchers.md).
# Skips (77) when mpirun or the program is absent. Usage: test_mpi_dmapp.sh BUILD_DIR
set -u
build=${1:?build dir}
src=${2:?source dir}
place=$src/tools/compat/nicemu-rank
run=$build/tools/nicemu-run/nicemu-run
prog=$build/tests/integration/mpi_dmapp
command -v mpirun >/dev/null || { echo "mpirun not installed: skipped"; exit 77; }
for b in "$run" "$prog"; do [ -x "$b" ] || { echo "missing $b: skipped"; exit 77; }; done

rundir=$(mktemp -d /tmp/nicemu-mpi-XXXXXX)
daemons=
cleanup() {
  [ -n "$daemons" ] && kill -TERM "$daemons" 2>/dev/null && wait "$daemons" 2>/dev/null
  pkill -KILL -f -- "--rundir $rundir" 2>/dev/null
  rm -rf "$rundir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$run" --daemons-only --nodes 2 --rundir "$rundir" --env-file "$rundir/env" &
daemons=$!
for _ in $(seq 1 100); do [ -f "$rundir/env" ] && break; sleep 0.1; done
[ -f "$rundir/env" ] || fail "nicemu-run --daemons-only wrote no environment"
set -a; . "$rundir/env"; set +a
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under ASan, Open MPI, PMIx and hwloc leave allocations behind at exit that LeakSanitizer
# reports; libdmapp's own leaks are checked by the `dmapp` suite, which runs without MPI.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# vader's single-copy mode needs ptrace rights that containers often refuse.
mpi=(timeout 60 mpirun --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none
     -x NICEMU_RUNDIR -x PMI_GNI_PTAG -x PMI_GNI_COOKIE -x PMI_GNI_DEV_ID -x PMI_GNI_LOC_ADDR -x NICEMU_NODE
     -x NICEMU_NODES)
# 1. All ranks on the first emulated node.
out=$("${mpi[@]}" -n 3 "$prog" 2>&1) || fail "mpirun job failed: $out"
grep -q "mpi+dmapp: 3 ranks passed" <<<"$out" || fail "no success line: $out"
echo "one node: $(echo "$out" | grep passed)"
# 2. Four ranks placed over two emulated nodes by tools/compat/nicemu-rank.
out=$("${mpi[@]}" -n 4 "$place" "$prog" 2>&1) || fail "mpirun job over two nodes failed: $out"
grep -q "mpi+dmapp: 4 ranks passed" <<<"$out" || fail "no success line over two nodes: $out"
grep -q "nodes: 0,0,1,1" <<<"$out" || fail "ranks not placed over two nodes: $out"
echo "two nodes: $(echo "$out" | grep passed)"
exit 0
