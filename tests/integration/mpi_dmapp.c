/* MPI and DMAPP in one program under Open MPI's mpirun: libpmi takes the PMIx back end,
 * shares the PMIx client with the MPI library (reference-counted init), and DMAPP's view
 * of the job (PE, size) matches MPI's. A put around the ring and a fetch-and-add counter
 * are checked with MPI collectives. Exit 0 on success. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmapp.h"
#include "pmi.h"

static int64_t slot;    /* symmetric: data segment */
static int64_t counter; /* on PE 0 */

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size, fail = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  dmapp_return_t rc = dmapp_init(NULL, NULL);
  if (rc != DMAPP_RC_SUCCESS) {
    fprintf(stderr, "rank %d: dmapp_init failed: %d\n", rank, rc);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  dmapp_jobinfo_t info;
  dmapp_get_jobinfo(&info);
  if (info.pe != rank || info.npes != size) {
    fprintf(stderr, "rank %d/%d: DMAPP says PE %d of %d\n", rank, size, info.pe, info.npes);
    fail = 1;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  int64_t v = 1000 + rank, old = -1;
  if (dmapp_put(&slot, &info.data_seg, (rank + 1) % size, &v, 1, DMAPP_QW) != DMAPP_RC_SUCCESS) fail = 1;
  if (dmapp_afadd_qw(&old, &counter, &info.data_seg, 0, 1) != DMAPP_RC_SUCCESS) fail = 1;
  MPI_Barrier(MPI_COMM_WORLD);
  if (slot != 1000 + (rank + size - 1) % size) {
    fprintf(stderr, "rank %d: slot %lld\n", rank, (long long)slot);
    fail = 1;
  }
  int64_t sum_old = 0;
  MPI_Reduce(&old, &sum_old, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0 && (counter != size || sum_old != (int64_t)size * (size - 1) / 2)) {
    fprintf(stderr, "counter %lld, fetched sum %lld\n", (long long)counter, (long long)sum_old);
    fail = 1;
  }
  if (dmapp_finalize() != DMAPP_RC_SUCCESS) fail = 1;
  /* PMI is still usable by others after DMAPP is done (MPI holds its own PMIx init). */
  int any = 0;
  MPI_Allreduce(&fail, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  /* Which emulated node each rank attached to (the environment libugni read). */
  const char *node_s = getenv("NICEMU_NODE");
  int node = node_s ? atoi(node_s) : -1, nodes[64] = {0};
  if (size <= 64) MPI_Gather(&node, 1, MPI_INT, nodes, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0 && size <= 64) {
    printf("nodes:");
    for (int i = 0; i < size; ++i) printf("%s%d", i ? "," : " ", nodes[i]);
    printf("\n");
  }
  if (rank == 0 && !any) printf("mpi+dmapp: %d ranks passed\n", size);
  MPI_Finalize();
  return any;
}
