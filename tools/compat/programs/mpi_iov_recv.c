/* tools/compat/programs/mpi_iov_recv.c — receives of a two-block struct datatype that are longer than
 * their message, each followed by an exact one, checked field by field.
 *
 * MPI allows a receive to be longer than the message (MPI_Get_count tells the length), and
 * MPICH's collectives post such receives. With a struct of an int and a long, MPICH ch4:ofi
 * hands the provider an iov of two entries per element instead of packing. Written for
 * tools/compat/recipes/mpich-ofi, where libfabric 1.13.1's gni provider keeps the position of its
 * iov unpacking in static variables that such a receive leaves set (docs/clients/mpich.md,
 * coll/allgather_struct): every later iov receive then lands at a stale offset.
 *
 * Rank 0 sends, rank 1 receives, other ranks only join the barriers.
 * usage: mpi_iov_recv [ROUNDS] (default 8; even rounds receive 2 elements for 1 sent)
 * Prints "mpi_iov_recv: OK" and exits 0 when every field arrived where it belongs.
 */
#include <mpi.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  int first;
  long second;
} int_long;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rounds = argc > 1 ? atoi(argv[1]) : 8;
  if (size < 2 || rounds < 1) {
    if (rank == 0) fprintf(stderr, "mpi_iov_recv: needs 2 ranks and ROUNDS >= 1\n");
    MPI_Finalize();
    return 2;
  }

  int lengths[2] = {1, 1};
  MPI_Aint displs[2] = {offsetof(int_long, first), offsetof(int_long, second)};
  MPI_Datatype types[2] = {MPI_INT, MPI_LONG}, pair;
  MPI_Type_create_struct(2, lengths, displs, types, &pair);
  MPI_Type_commit(&pair);

  int errors = 0;
  for (int round = 0; round < rounds; ++round) {
    int_long sent = {1000 + round, 100000L * (round + 1)};
    int_long got[2] = {{-1, -1}, {-1, -1}};
    int longer = round % 2 == 0;
    if (rank == 0) {
      MPI_Send(&sent, 1, pair, 1, round, MPI_COMM_WORLD);
    } else if (rank == 1) {
      MPI_Status status;
      int count = -1;
      MPI_Recv(got, longer ? 2 : 1, pair, 0, round, MPI_COMM_WORLD, &status);
      MPI_Get_count(&status, pair, &count);
      if (count != 1 || got[0].first != sent.first || got[0].second != sent.second ||
          got[1].first != -1 || got[1].second != -1) {
        ++errors;
        printf("mpi_iov_recv: round %d (receive of %d for 1 sent): count %d, got {%d, %ld} "
               "{%d, %ld}, expected {%d, %ld} {-1, -1}\n",
               round, longer ? 2 : 1, count, got[0].first, got[0].second, got[1].first,
               got[1].second, sent.first, sent.second);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Type_free(&pair);

  int total = 0;
  MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    if (total == 0)
      printf("mpi_iov_recv: OK (%d rounds)\n", rounds);
    else
      printf("mpi_iov_recv: %d of %d rounds wrong\n", total, rounds);
  }
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
