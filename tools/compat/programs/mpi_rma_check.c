/* tools/compat/programs/mpi_rma_check.c — MPI-3 one-sided communication between every pair of
 * neighbouring ranks, every value checked, for tools/compat/recipes/mpi-stacks.
 *
 * A window of N longs per rank (MPI_Win_allocate), under MPI_Win_lock_all:
 *   put:        MPI_Put of a rank- and round-dependent block into the right-hand neighbour,
 *               MPI_Win_flush, barrier, the neighbour checks its window;
 *   get:        MPI_Get of the left-hand neighbour's block, MPI_Win_flush, checked;
 *   rput/rget:  the same through MPI_Rput / MPI_Rget and MPI_Wait;
 *   accumulate: every other rank adds rank+1 into element 0 of rank 0 (MPI_Accumulate,
 *               MPI_SUM) and fetch-adds 1 into element 1 (MPI_Fetch_and_op), flushed;
 *   compare-and-swap: one winner among them on element 2 of rank 0.
 * (Rank 0 issues no atomics on its own window: Open MPI 4.1.4's osc/rdma over btl/vader
 * crashes on a compare-and-swap to self, a bug of that stack, not of the transport.)
 * A dynamic window (MPI_Win_create_dynamic + MPI_Win_attach) carries one more get round,
 * unless --no-dynamic (Open MPI 4.1.4's osc/rdma deadlocks there when ranks are on
 * different nodes: docs/clients/openmpi.md).
 *
 * usage: mpi_rma_check [ROUNDS] [--no-dynamic]    exit 0 when every check passed, 1 otherwise
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 64

static long pattern(int rank, int round, int i) { return (long)rank * 1000003L + round * 131L + i; }

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rounds = 10, dynamic = 1;
  for (int a = 1; a < argc; ++a) {
    if (strcmp(argv[a], "--no-dynamic") == 0)
      dynamic = 0;
    else
      rounds = atoi(argv[a]);
  }
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  long errors = 0;

  long *base;
  MPI_Win win;
  MPI_Win_allocate(2 * N * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  long src[N], got[N];
  MPI_Win_lock_all(0, win);
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < N; ++i) src[i] = pattern(rank, r, i);
    /* put into the neighbour's second half, read back from the first half of the left one */
    MPI_Put(src, N, MPI_LONG, right, N, N, MPI_LONG, win);
    MPI_Win_flush(right, win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_sync(win);
    for (int i = 0; i < N; ++i)
      if (base[N + i] != pattern(left, r, i) && errors++ < 5)
        fprintf(stderr, "rank %d round %d: put [%d] = %ld\n", rank, r, i, base[N + i]);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Get(got, N, MPI_LONG, left, N, N, MPI_LONG, win);
    MPI_Win_flush(left, win);
    for (int i = 0; i < N; ++i)
      if (got[i] != pattern(left == 0 ? size - 1 : left - 1, r, i) && errors++ < 5)
        fprintf(stderr, "rank %d round %d: get [%d] = %ld\n", rank, r, i, got[i]);
    MPI_Barrier(MPI_COMM_WORLD);
    /* request-based, into the first half */
    MPI_Request req;
    MPI_Rput(src, N, MPI_LONG, right, 0, N, MPI_LONG, win, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_Win_flush(right, win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Rget(got, N, MPI_LONG, right, 0, N, MPI_LONG, win, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    for (int i = 0; i < N; ++i)
      if (got[i] != pattern(rank, r, i) && errors++ < 5)
        fprintf(stderr, "rank %d round %d: rget [%d] = %ld\n", rank, r, i, got[i]);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Win_unlock_all(win);
  MPI_Barrier(MPI_COMM_WORLD);

  /* accumulates and atomics on rank 0 */
  MPI_Win_lock_all(0, win);
  if (rank == 0) {
    base[0] = base[1] = 0;
    base[2] = -1;
  }
  MPI_Win_sync(win);
  MPI_Barrier(MPI_COMM_WORLD);
  long one = 1, mine = rank + 1, old = 0;
  if (rank != 0)
    for (int r = 0; r < rounds; ++r) {
      MPI_Accumulate(&mine, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, win);
      MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, 1, MPI_SUM, win);
      MPI_Win_flush(0, win);
      if (old < 0 && errors++ < 5) fprintf(stderr, "rank %d: fetch_and_op returned %ld\n", rank, old);
    }
  long cas_wins = 0;
  long me = rank, minus = -1;
  if (rank != 0) {
    MPI_Compare_and_swap(&me, &minus, &old, MPI_LONG, 0, 2, win);
    MPI_Win_flush(0, win);
    cas_wins = old == -1;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Win_sync(win);
  long total_wins = 0;
  MPI_Reduce(&cas_wins, &total_wins, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0 && size > 1) {
    long want = (long)rounds * ((long)size * (size + 1) / 2 - 1);
    if (base[0] != want || base[1] != (long)rounds * (size - 1) || total_wins != 1 || base[2] < 1 || base[2] >= size) {
      fprintf(stderr, "atomics: sum %ld (want %ld), fetch-add %ld (want %ld), %ld CAS winners, value %ld\n", base[0],
              want, base[1], (long)rounds * (size - 1), total_wins, base[2]);
      ++errors;
    }
  }
  MPI_Win_unlock_all(win);
  MPI_Win_free(&win);

  /* a dynamic window */
  if (dynamic) {
    MPI_Win dyn;
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &dyn);
    long *mem = malloc(N * sizeof(long));
    for (int i = 0; i < N; ++i) mem[i] = pattern(rank, 99, i);
    MPI_Win_attach(dyn, mem, N * sizeof(long));
    MPI_Aint addr, raddr;
    MPI_Get_address(mem, &addr);
    MPI_Sendrecv(&addr, 1, MPI_AINT, left, 0, &raddr, 1, MPI_AINT, right, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Win_lock_all(0, dyn);
    MPI_Get(got, N, MPI_LONG, right, raddr, N, MPI_LONG, dyn);
    MPI_Win_flush(right, dyn);
    MPI_Win_unlock_all(dyn);
    for (int i = 0; i < N; ++i)
      if (got[i] != pattern(right, 99, i) && errors++ < 5)
        fprintf(stderr, "rank %d: dynamic get [%d] = %ld\n", rank, i, got[i]);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_detach(dyn, mem);
    MPI_Win_free(&dyn);
    free(mem);
  }

  long all = 0;
  MPI_Reduce(&errors, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("mpi_rma_check: %d ranks, %d rounds of put/get/rput/rget, accumulate, fetch_and_op, "
           "compare_and_swap, %s: %s (%ld errors)\n",
           size, rounds, dynamic ? "dynamic window" : "no dynamic window", all ? "FAILED" : "OK", all);
  MPI_Finalize();
  return rank == 0 ? (all != 0) : 0;
}
