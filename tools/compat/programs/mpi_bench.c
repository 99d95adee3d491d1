/* tools/compat/programs/mpi_bench.c — MPI point-to-point and one-sided figures between 2 ranks, for
 * bench/run-mpi (MPI over uGNI next to the same MPI's shared memory).
 *
 * Tests (rank 0 drives; rank 1 answers or is the target):
 *   pingpong 8 B and 1 MiB: MPI_Send/MPI_Recv round trips; one-way latency = round trip / 2,
 *            bandwidth = bytes / one-way latency. Data checked on the first and last trips.
 *            Also timed in 20 equal batches: lat_med_us is the median batch's one-way latency
 *            (steadier than the mean when other processes take the ranks' CPUs now and then).
 *   put, get: one 8 B MPI_Put (MPI_Get) to rank 1 followed by MPI_Win_flush, repeated;
 *            µs per operation. Passive target: MPI_Win_allocate + MPI_Win_lock_all; rank 1
 *            waits in MPI_Barrier meanwhile (a progressing call, for osc components that need
 *            the target to progress). The last value put and every value got are checked.
 *   acc:     MPI_Accumulate of one double (MPI_SUM) to rank 1, MPI_Win_flush every
 *            FLUSH_EVERY operations; operations per second. The sum is checked.
 * No compare-and-swap (Open MPI 4.1.4's osc/rdma crashes there, docs/clients/openmpi.md).
 *
 * Output: one machine-readable line per result, key=value words:
 *   pin rank=R cpus=LIST node=N
 *   result test=pingpong bytes=8 iters=I lat_us=X bw_MBps=Y lat_med_us=Z
 *   result test=put bytes=8 iters=I lat_us=X
 *   result test=acc bytes=8 iters=I flush_every=F rate_Mops=X us_per_op=Y
 *   check errors=E status=OK|FAILED
 *
 * usage: mpi_bench [--quick] [--iters N] [--big-iters N] [--flush-every F] [--tests LIST]
 *   LIST: comma-separated of pp8,pp1m,put,get,acc (default all)
 * Exit status 0 when every check passed.
 */
#define _GNU_SOURCE
#include <mpi.h>

#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_pattern.h"

static int rank;
static long errors;

static void check_buf(const unsigned char *buf, size_t n, unsigned seed, unsigned char *scratch, const char *what) {
  fill(scratch, n, seed);
  if (memcmp(buf, scratch, n) != 0 && errors++ < 5) fprintf(stderr, "rank %d: %s: data mismatch\n", rank, what);
}

static int want(const char *list, const char *t) {
  size_t n = strlen(t);
  for (const char *p = list; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && !strncmp(p, t, n)) return 1;
    if (!e) break;
    p = e + 1;
  }
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define BATCHES 20

static void pingpong(size_t n, int iters) {
  unsigned char *sbuf = malloc(n), *rbuf = malloc(n), *scratch = malloc(n);
  if (!sbuf || !rbuf || !scratch) MPI_Abort(MPI_COMM_WORLD, 1);
  const int peer = 1 - rank, warm = iters / 10 > 2 ? iters / 10 : 2;
  const int per_batch = iters / BATCHES > 0 ? iters / BATCHES : 1;
  double t0 = 0, tb = 0, batch[BATCHES];
  int nb = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = -warm; i < iters; i++) {
    if (i == 0) t0 = tb = MPI_Wtime();
    if (i > 0 && i % per_batch == 0 && nb < BATCHES) {
      const double now = MPI_Wtime();
      batch[nb++] = (now - tb) / per_batch / 2 * 1e6;
      tb = now;
    }
    const int chk = (i == -warm || i == iters - 1);
    if (rank == 0) {
      if (chk) fill(sbuf, n, (unsigned)(n + i));
      MPI_Send(sbuf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
      MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (chk) check_buf(rbuf, n, (unsigned)(n + i) * 3u, scratch, "pingpong reply");
    } else {
      MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (chk) {
        check_buf(rbuf, n, (unsigned)(n + i), scratch, "pingpong request");
        fill(sbuf, n, (unsigned)(n + i) * 3u);
      }
      MPI_Send(sbuf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
    }
  }
  const double end = MPI_Wtime();
  if (nb < BATCHES && iters % per_batch == 0) batch[nb++] = (end - tb) / per_batch / 2 * 1e6;
  const double lat = (end - t0) / iters / 2 * 1e6;
  qsort(batch, (size_t)nb, sizeof batch[0], cmp_double);
  const double med = nb ? (nb % 2 ? batch[nb / 2] : (batch[nb / 2 - 1] + batch[nb / 2]) / 2) : lat;
  if (rank == 0)
    printf("result test=pingpong bytes=%zu iters=%d lat_us=%.3f bw_MBps=%.1f lat_med_us=%.3f\n", n, iters, lat,
           (double)n / lat, med);
  free(sbuf);
  free(rbuf);
  free(scratch);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int iters = 20000, big_iters = 200, flush_every = 64, acc_ops = 100000;
  const char *tests = "pp8,pp1m,put,get,acc";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      iters = 1000;
      big_iters = 20;
      acc_ops = 5000;
    } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = atoi(argv[++i]);
      acc_ops = 5 * iters;
    } else if (!strcmp(argv[i], "--big-iters") && i + 1 < argc) {
      big_iters = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--flush-every") && i + 1 < argc) {
      flush_every = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--tests") && i + 1 < argc) {
      tests = argv[++i];
    } else {
      if (rank == 0)
        fprintf(stderr, "usage: %s [--quick] [--iters N] [--big-iters N] [--flush-every F] [--tests LIST]\n", argv[0]);
      MPI_Finalize();
      return 2;
    }
  }
  if (size != 2) {
    if (rank == 0) fprintf(stderr, "mpi_bench: needs exactly 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  if (iters < 1) iters = 1;
  if (big_iters < 1) big_iters = 1;
  if (flush_every < 1) flush_every = 1;

  /* where each rank runs: the CPUs it may use, and its emulated node */
  {
    cpu_set_t set;
    char cpus[256] = "?";
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
      size_t len = 0;
      cpus[0] = 0;
      for (int c = 0; c < CPU_SETSIZE && len + 8 < sizeof cpus; c++)
        if (CPU_ISSET(c, &set)) len += (size_t)snprintf(cpus + len, sizeof cpus - len, "%s%d", len ? "," : "", c);
    }
    const char *node = getenv("NICEMU_NODE");
    char line[384];
    snprintf(line, sizeof line, "pin rank=%d cpus=%s node=%s", rank, cpus, node ? node : "-");
    char other[384] = "";
    if (rank == 1) MPI_Send(line, (int)sizeof line, MPI_CHAR, 0, 9, MPI_COMM_WORLD);
    else {
      MPI_Recv(other, (int)sizeof other, MPI_CHAR, 1, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      printf("%s\n%s\n", line, other);
      fflush(stdout);
    }
  }

  if (want(tests, "pp8")) pingpong(8, iters);
  if (want(tests, "pp1m")) pingpong((size_t)1 << 20, big_iters);
  fflush(stdout);

  if (want(tests, "put") || want(tests, "get") || want(tests, "acc")) {
    double *base;
    MPI_Win win;
    MPI_Win_allocate(4 * sizeof(double), sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    base[0] = base[1] = base[2] = base[3] = 0;
    if (rank == 1) base[1] = 42.5;  /* what rank 0 gets */
    MPI_Win_lock_all(0, win);
    MPI_Win_sync(win);
    MPI_Barrier(MPI_COMM_WORLD);
    const int warm = iters / 10 > 2 ? iters / 10 : 2;

    if (want(tests, "put")) {
      double v = 0, t0 = 0;
      if (rank == 0) {
        for (int i = -warm; i < iters; i++) {
          if (i == 0) t0 = MPI_Wtime();
          v = (double)i;
          MPI_Put(&v, 1, MPI_DOUBLE, 1, 0, 1, MPI_DOUBLE, win);
          MPI_Win_flush(1, win);
        }
        printf("result test=put bytes=8 iters=%d lat_us=%.3f\n", iters, (MPI_Wtime() - t0) / iters * 1e6);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      MPI_Win_sync(win);
      if (rank == 1 && base[0] != (double)(iters - 1) && errors++ < 5)
        fprintf(stderr, "rank 1: put: window holds %g, want %d\n", base[0], iters - 1);
      MPI_Barrier(MPI_COMM_WORLD);
    }

    if (want(tests, "get")) {
      double v = 0, t0 = 0;
      if (rank == 0) {
        long bad = 0;
        for (int i = -warm; i < iters; i++) {
          if (i == 0) t0 = MPI_Wtime();
          v = 0;
          MPI_Get(&v, 1, MPI_DOUBLE, 1, 1, 1, MPI_DOUBLE, win);
          MPI_Win_flush(1, win);
          bad += v != 42.5;
        }
        printf("result test=get bytes=8 iters=%d lat_us=%.3f\n", iters, (MPI_Wtime() - t0) / iters * 1e6);
        if (bad && errors++ < 5) fprintf(stderr, "rank 0: get: %ld wrong values\n", bad);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }

    if (want(tests, "acc")) {
      const double one = 1.0;
      double t0 = 0;
      if (rank == 0) {
        for (int i = -warm; i < acc_ops; i++) {
          if (i == 0) {
            MPI_Win_flush(1, win);
            t0 = MPI_Wtime();
          }
          MPI_Accumulate(&one, 1, MPI_DOUBLE, 1, 2, 1, MPI_DOUBLE, MPI_SUM, win);
          if ((i + 1) % flush_every == 0) MPI_Win_flush(1, win);
        }
        MPI_Win_flush(1, win);
        const double t = MPI_Wtime() - t0;
        printf("result test=acc bytes=8 iters=%d flush_every=%d rate_Mops=%.4f us_per_op=%.3f\n", acc_ops, flush_every,
               acc_ops / t / 1e6, t / acc_ops * 1e6);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      MPI_Win_sync(win);
      if (rank == 1 && base[2] != (double)(acc_ops + warm) && errors++ < 5)
        fprintf(stderr, "rank 1: accumulate: sum %g, want %d\n", base[2], acc_ops + warm);
      MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
  }

  long all = 0;
  MPI_Reduce(&errors, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("check errors=%ld status=%s\n", all, all ? "FAILED" : "OK");
  fflush(stdout);
  MPI_Finalize();
  return rank == 0 ? (all != 0) : 0;
}
