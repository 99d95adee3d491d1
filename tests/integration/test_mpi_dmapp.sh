#!/usr/bin/env bash
# MPI_Init and dmapp_init in one program under Debian's Open MPI mpirun (mpi_dmapp.c), with
# nicemu's daemons and job credential from `nicemu-run --daemons-only` (docs/launchers.md).
# Skips (77) when mpirun or the program is absent. Usage: test_mpi_dmapp.sh BUILD_DIR
set -u
. "$(dirname "$0")/lib.sh"
build=${1:?build dir}
src=${2:?source dir}
place=$src/tools/lib/nicemu-rank
RUN=$build/tools/nicemu-run/nicemu-run
export NICEMU_RUN=$RUN  # the nicemu-run nicemu-rank asks where each rank goes
prog=$build/tests/integration/mpi_dmapp
need_cmd mpirun
need_exec "$RUN" "$prog"
test_init test_mpi_dmapp
rundir=$TMP
KILL_RUNDIR=$rundir

serve_daemons "$rundir/env" "$rundir/serve.log" --nodes 2 --rundir "$rundir"
export_env "$rundir/env"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under ASan, Open MPI, PMIx and hwloc leave allocations behind at exit that LeakSanitizer
# reports; libdmapp's own leaks are checked by the `dmapp` suite, which runs without MPI.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# vader's single-copy mode needs ptrace rights that containers often refuse.
mpi=(timeout 60 mpirun --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none
     -x NICEMU_RUNDIR -x PMI_GNI_PTAG -x PMI_GNI_COOKIE -x PMI_GNI_DEV_ID -x PMI_GNI_LOC_ADDR -x NICEMU_NODE
     -x NICEMU_NODES -x NICEMU_RUN)
# 1. All ranks on the first emulated node.
out=$("${mpi[@]}" -n 3 "$prog" 2>&1) || die "mpirun job failed: $out"
grep -q "mpi+dmapp: 3 ranks passed" <<<"$out" || die "no success line: $out"
echo "one node: $(echo "$out" | grep passed)"
# 2. Four ranks placed over two emulated nodes by tools/lib/nicemu-rank.
out=$("${mpi[@]}" -n 4 "$place" "$prog" 2>&1) || die "mpirun job over two nodes failed: $out"
grep -q "mpi+dmapp: 4 ranks passed" <<<"$out" || die "no success line over two nodes: $out"
grep -q "nodes: 0,0,1,1" <<<"$out" || die "ranks not placed over two nodes: $out"
echo "two nodes: $(echo "$out" | grep passed)"
exit 0
