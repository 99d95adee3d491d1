/* tools/compat/programs/shmem_check.c — a small OpenSHMEM program for tools/compat/recipes/mpi-stacks: puts,
 * gets, atomics and barriers between every pair of PEs, every value checked.
 *
 *   put:     each PE writes a block (64 longs, PE- and round-dependent) into its right-hand
 *            neighbour's symmetric array, barrier, the neighbour checks it;
 *   get:     each PE reads its left-hand neighbour's array and checks it;
 *   p/g:     single-element shmem_long_p / shmem_long_g to every PE;
 *   atomics: every PE adds its rank+1 to a counter on PE 0 (fetch-add, returned values
 *            distinct), then a compare-and-swap race on PE 0 (exactly one winner per round);
 *   barrier: shmem_barrier_all between phases, repeated ROUNDS times.
 *
 * usage: shmem_check [ROUNDS]       exit 0 when every check passed, 1 otherwise
 */
#include <shmem.h>

#include <stdio.h>
#include <stdlib.h>

#define N 64

static long dst[N];
static long src[N];
static long counter;
static long cas_target;
static long winners;
static long seen[N];

static long pattern(int pe, int round, int i) { return (long)pe * 1000003L + round * 131L + i; }

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 20;
  shmem_init();
  const int me = shmem_my_pe(), npes = shmem_n_pes();
  const int right = (me + 1) % npes, left = (me + npes - 1) % npes;
  int errors = 0;

  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < N; ++i) src[i] = pattern(me, r, i);
    shmem_barrier_all();
    shmem_long_put(dst, src, N, right);
    shmem_barrier_all();
    for (int i = 0; i < N; ++i)
      if (dst[i] != pattern(left, r, i)) {
        if (errors++ < 5) fprintf(stderr, "PE %d round %d: put dst[%d] = %ld\n", me, r, i, dst[i]);
      }
    long got[N];
    shmem_long_get(got, src, N, left);
    for (int i = 0; i < N; ++i)
      if (got[i] != pattern(left, r, i)) {
        if (errors++ < 5) fprintf(stderr, "PE %d round %d: get [%d] = %ld\n", me, r, i, got[i]);
      }
    /* one element to and from every PE */
    shmem_barrier_all();
    if (npes <= N)
      for (int pe = 0; pe < npes; ++pe) shmem_long_p(&seen[me], pattern(me, r, pe), pe);
    shmem_barrier_all();
    if (npes <= N)
      for (int pe = 0; pe < npes; ++pe) {
        if (seen[pe] != pattern(pe, r, me) && errors++ < 5)
          fprintf(stderr, "PE %d round %d: p from %d = %ld\n", me, r, pe, seen[pe]);
        long g = shmem_long_g(&src[0], pe);
        if (g != pattern(pe, r, 0) && errors++ < 5) fprintf(stderr, "PE %d round %d: g from %d = %ld\n", me, r, pe, g);
      }
    shmem_barrier_all();
  }

  /* atomics on PE 0 */
  if (me == 0) counter = 0;
  shmem_barrier_all();
  for (int r = 0; r < rounds; ++r) {
    long before = shmem_long_atomic_fetch_add(&counter, me + 1, 0);
    if (before < 0 && errors++ < 5) fprintf(stderr, "PE %d: fetch-add returned %ld\n", me, before);
  }
  shmem_barrier_all();
  if (me == 0) {
    long want = (long)rounds * npes * (npes + 1) / 2;
    if (counter != want) {
      fprintf(stderr, "fetch-add: counter %ld, want %ld\n", counter, want);
      ++errors;
    }
  }
  for (int r = 0; r < rounds; ++r) {
    if (me == 0) {
      cas_target = -1;
      winners = 0;
    }
    shmem_barrier_all();
    if (shmem_long_atomic_compare_swap(&cas_target, -1, me, 0) == -1) shmem_long_atomic_add(&winners, 1, 0);
    shmem_barrier_all();
    if (me == 0 && (winners != 1 || cas_target < 0 || cas_target >= npes)) {
      fprintf(stderr, "compare-swap round %d: %ld winners, target %ld\n", r, winners, cas_target);
      ++errors;
    }
  }
  shmem_barrier_all();

  /* errors of every PE, summed on PE 0 */
  static long all_errors;
  shmem_long_atomic_add(&all_errors, errors, 0);
  shmem_barrier_all();
  if (me == 0)
    printf("shmem_check: %d PEs, %d rounds of put/get/p/g, fetch-add and compare-swap: %s (%ld errors)\n", npes,
           rounds, all_errors ? "FAILED" : "OK", all_errors);
  int rc = me == 0 ? (all_errors != 0) : (errors != 0);
  shmem_finalize();
  return rc;
}
