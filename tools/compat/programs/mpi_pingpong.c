/* tools/compat/programs/mpi_pingpong.c — MPI ping-pong latency and windowed bandwidth, with data
 * checks, for tools/compat/recipes/openmpi (Open MPI's btl/ugni over nicemu).
 *
 * Ranks are paired across the two halves of MPI_COMM_WORLD (rank r with r + size/2), so with
 * block placement over two emulated nodes every pair crosses nodes. For each message size
 * (1 B .. max, x4 steps) the pairs run in turn:
 *   latency:   ITERS round trips of MPI_Send/MPI_Recv, reported as half the round trip;
 *   bandwidth: WINDOW MPI_Isend per round from the lower rank, a 1-byte ack per round.
 * Every received buffer is checked against the pattern the sender wrote (size, iteration and
 * rank dependent), so a transport that drops, duplicates or misplaces bytes fails the run.
 *
 * usage: mpi_pingpong [-m MAX_BYTES | -s BYTES] [-i ITERS] [-w WINDOW] [-q]
 *   -s BYTES runs that one message size only (e.g. the 8 B of a latency comparison).
 * Exit status 0 when every check passed, 1 otherwise (MPI_Abort on a data error).
 */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi_pattern.h"

static int check(const unsigned char *buf, size_t n, unsigned seed, unsigned char *scratch) {
  fill(scratch, n, seed);
  return memcmp(buf, scratch, n) == 0;
}

static unsigned seed_of(int rank, size_t size, int iter) {
  return (unsigned)rank * 1000003u + (unsigned)size * 31u + (unsigned)iter;
}

int main(int argc, char **argv) {
  size_t max_bytes = (size_t)4 << 20, only = 0;
  int iters = 1000, window = 64, quiet = 0;
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-m") && i + 1 < argc) max_bytes = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "-s") && i + 1 < argc) only = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "-i") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-w") && i + 1 < argc) window = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-q")) quiet = 1;
    else {
      if (rank == 0) fprintf(stderr, "usage: %s [-m MAX_BYTES | -s BYTES] [-i ITERS] [-w WINDOW] [-q]\n", argv[0]);
      MPI_Finalize();
      return 2;
    }
  }
  if (size < 2 || size % 2) {
    if (rank == 0) fprintf(stderr, "mpi_pingpong: needs an even number of ranks >= 2\n");
    MPI_Finalize();
    return 2;
  }
  if (iters < 1) iters = 1;
  if (window < 1) window = 1;
  const int half = size / 2;
  const int lower = rank < half;
  const int peer = lower ? rank + half : rank - half;
  char host[64] = "";
  gethostname(host, sizeof host);
  const char *node = getenv("NICEMU_NODE");
  if (!quiet) {
    printf("rank %d of %d: peer %d, emulated node %s (%s)\n", rank, size, peer, node ? node : "?", host);
    fflush(stdout);
  }

  unsigned char *sbuf = malloc(max_bytes ? max_bytes : 1);
  unsigned char *rbuf = malloc((size_t)window * (max_bytes ? max_bytes : 1));
  unsigned char *scratch = malloc(max_bytes ? max_bytes : 1);
  MPI_Request *reqs = malloc(sizeof(MPI_Request) * (size_t)window);
  if (!sbuf || !rbuf || !scratch || !reqs) {
    fprintf(stderr, "rank %d: out of memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int errors = 0;
  if (rank == 0)
    printf("%10s %8s %14s %14s   (pairs: %d, half round trip; window %d)\n", "bytes", "pair",
           "latency_us", "bw_MB/s", half, window);

  for (size_t n = only ? only : 1; only ? n == only : n <= max_bytes; n = only ? n + 1 : (n < 4 ? n * 2 : n * 4)) {
    int it = n >= ((size_t)1 << 20) ? (iters / 20 > 10 ? iters / 20 : 10) : iters;
    int bw_rounds = n >= ((size_t)1 << 20) ? 4 : (n >= 65536 ? 20 : 100);
    for (int p = 0; p < half; p++) {
      const int active = (rank == p || rank == p + half);
      double lat = 0, bw = 0;
      MPI_Barrier(MPI_COMM_WORLD);
      if (active) {
        /* latency, with a data check on the first and last iterations */
        double t0 = 0;
        for (int i = -1; i < it; i++) {  /* i == -1: warm-up */
          if (i == 0) t0 = MPI_Wtime();
          const int chk = (i == -1 || i == it - 1);
          if (lower) {
            if (chk) fill(sbuf, n, seed_of(rank, n, i));
            MPI_Send(sbuf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (chk && !check(rbuf, n, seed_of(peer, n, i), scratch)) errors++;
          } else {
            MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (chk && !check(rbuf, n, seed_of(peer, n, i), scratch)) errors++;
            if (chk) fill(sbuf, n, seed_of(rank, n, i));
            MPI_Send(sbuf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
          }
        }
        lat = (MPI_Wtime() - t0) / it / 2 * 1e6;
        /* bandwidth: window of sends from the lower rank; every message checked */
        fill(sbuf, n, seed_of(rank, n, 7));
        char ack = 0;
        t0 = MPI_Wtime();
        for (int r = 0; r < bw_rounds; r++) {
          for (int w = 0; w < window; w++) {
            if (lower)
              MPI_Isend(sbuf, (int)n, MPI_BYTE, peer, 3, MPI_COMM_WORLD, &reqs[w]);
            else
              MPI_Irecv(rbuf + (size_t)w * n, (int)n, MPI_BYTE, peer, 3, MPI_COMM_WORLD, &reqs[w]);
          }
          MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
          if (lower) {
            MPI_Recv(&ack, 1, MPI_BYTE, peer, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          } else {
            if (r == 0 || r == bw_rounds - 1)
              for (int w = 0; w < window; w++)
                if (!check(rbuf + (size_t)w * n, n, seed_of(peer, n, 7), scratch)) errors++;
            MPI_Send(&ack, 1, MPI_BYTE, peer, 4, MPI_COMM_WORLD);
          }
        }
        double t = MPI_Wtime() - t0;
        bw = (double)n * window * bw_rounds / t / 1e6;
      }
      if (rank == p && rank != 0) {
        double v[2] = {lat, bw};
        MPI_Send(v, 2, MPI_DOUBLE, 0, 5, MPI_COMM_WORLD);
      }
      if (rank == 0) {
        double v[2] = {lat, bw};
        if (p != 0) MPI_Recv(v, 2, MPI_DOUBLE, p, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("%10zu %4d-%-3d %14.2f %14.1f\n", n, p, p + half, v[0], v[1]);
        fflush(stdout);
      }
    }
  }

  /* an all-to-all exchange through every pair of ranks, checked */
  int *out = malloc(sizeof(int) * (size_t)size), *in = malloc(sizeof(int) * (size_t)size);
  for (int i = 0; i < size; i++) out[i] = rank * 1000 + i;
  MPI_Alltoall(out, 1, MPI_INT, in, 1, MPI_INT, MPI_COMM_WORLD);
  for (int i = 0; i < size; i++)
    if (in[i] != i * 1000 + rank) errors++;

  int total = 0;
  MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_pingpong: %s (%d data errors)\n", total ? "FAILED" : "OK", total);
  free(out);
  free(in);
  free(sbuf);
  free(rbuf);
  free(scratch);
  free(reqs);
  MPI_Finalize();
  return total ? 1 : 0;
}
