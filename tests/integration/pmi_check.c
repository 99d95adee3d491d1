/*
 * Conformance check of libpmi under a PMI-1 server, run by every rank of a job:
 *   pmi_check [size nodes]   full check; size/nodes are what the launcher was asked for
 *                            (runs under nicemu-run and under MPICH's Hydra mpiexec)
 *   pmi_check abort          rank 1 calls PMI_Abort(5), the others wait in a barrier
 *   pmi_check skip-barrier   rank 0 exits at once, the others wait in a barrier
 * Uses only the public headers (pmi.h, pmi2.h). Prints "pmi_check: rank R: OK" on success,
 * "FAIL: ..." lines and exit status 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pmi.h"
#include "pmi2.h"

static int g_rank = -1;
static int g_failures = 0;

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      printf("FAIL: rank %d: %s:%d: %s\n", g_rank, __FILE__, __LINE__, #cond);      \
      g_failures++;                                                                 \
    }                                                                               \
  } while (0)

#define CHECK_RC(call) CHECK((call) == PMI_SUCCESS)

static void check_kvs(const char *kvs, int rank, int size) {
  char key[64], value[1024], expect[1024];
  int vmax = 0;
  CHECK_RC(PMI_KVS_Get_value_length_max(&vmax));
  CHECK(vmax >= 256);

  /* Spaces, tabs, '%' and '=' must survive the wire (libpmi escapes them). */
  snprintf(key, sizeof key, "check-%d", rank);
  snprintf(value, sizeof value, "rank %d says\thello = 100%% (%s)", rank, kvs);
  CHECK_RC(PMI_KVS_Put(kvs, key, value));
  CHECK_RC(PMI_KVS_Commit(kvs));
  CHECK_RC(PMI_Barrier());
  for (int r = 0; r < size; r++) {
    snprintf(key, sizeof key, "check-%d", r);
    snprintf(expect, sizeof expect, "rank %d says\thello = 100%% (%s)", r, kvs);
    memset(value, 0, sizeof value);
    CHECK_RC(PMI_KVS_Get(kvs, key, value, sizeof value));
    CHECK(strcmp(value, expect) == 0);
  }
  /* A value that does not fit the caller's buffer is an error, not an overflow. */
  snprintf(key, sizeof key, "check-%d", rank);
  CHECK(PMI_KVS_Get(kvs, key, value, 5) == PMI_ERR_INVALID_LENGTH);
  CHECK(strlen(value) == 4);
  /* Absent keys and bad arguments are error codes. */
  CHECK(PMI_KVS_Get(kvs, "no-such-key", value, sizeof value) == PMI_ERR_INVALID_KEY);
  CHECK(PMI_KVS_Put(kvs, "bad key", "v") == PMI_ERR_INVALID_KEY);
  CHECK(PMI_KVS_Put(kvs, NULL, "v") != PMI_SUCCESS);
}

static void check_collectives(int rank, int size) {
  int *ranks = calloc((size_t)size, sizeof(int));
  CHECK_RC(PMI_Allgather(&rank, ranks, sizeof(int)));
  for (int r = 0; r < size; r++) CHECK(ranks[r] == r); /* rank order */

  /* Larger than one KVS value: exercises chunking. */
  enum { BIG = 5000 };
  unsigned char *mine = malloc(BIG), *all = malloc((size_t)size * BIG);
  for (int i = 0; i < BIG; i++) mine[i] = (unsigned char)(rank * 31 + i);
  CHECK_RC(PMI_Allgather(mine, all, BIG));
  for (int r = 0; r < size; r++)
    for (int i = 0; i < BIG; i++)
      if (all[(size_t)r * BIG + i] != (unsigned char)(r * 31 + i)) {
        CHECK(!"allgather data");
        r = size;
        break;
      }

  /* Allgatherv: rank r contributes r+1 bytes of value r. */
  int *lens = calloc((size_t)size, sizeof(int));
  int total = 0;
  for (int r = 0; r < size; r++) total += lens[r] = r + 1;
  unsigned char *vin = malloc((size_t)rank + 1), *vout = malloc((size_t)total);
  memset(vin, rank, (size_t)rank + 1);
  CHECK_RC(PMI_Allgatherv(vin, rank + 1, vout, lens));
  for (int r = 0, off = 0; r < size; off += lens[r], r++)
    for (int i = 0; i < lens[r]; i++) CHECK(vout[off + i] == (unsigned char)r);

  /* Bcast from rank 0, binary and larger than a value. */
  unsigned char *buf = malloc(3000);
  for (int i = 0; i < 3000; i++) buf[i] = rank == 0 ? (unsigned char)(i * 7) : 0xEE;
  CHECK_RC(PMI_Bcast(buf, 3000));
  for (int i = 0; i < 3000; i++)
    if (buf[i] != (unsigned char)(i * 7)) {
      CHECK(!"bcast data");
      break;
    }
  /* Zero-length collectives are legal. */
  CHECK_RC(PMI_Allgather(NULL, NULL, 0));
  CHECK_RC(PMI_Bcast(NULL, 0));
  free(ranks);
  free(mine);
  free(all);
  free(lens);
  free(vin);
  free(vout);
  free(buf);
}

static void check_topology(int rank, int size, int nodes) {
  int nid = -1;
  CHECK_RC(PMI_Get_nid(rank, &nid));
  if (nodes > 0) CHECK(nid == (int)((long)rank * nodes / size));
  CHECK(PMI_Get_nid(size, &nid) == PMI_ERR_INVALID_ARG);

  int *nidlist = NULL;
  CHECK_RC(PMI_Get_nidlist_ptr((void **)&nidlist));
  CHECK(nidlist != NULL);
  int local = 0;
  for (int r = 0; r < size && nidlist; r++) {
    int n = -1;
    CHECK_RC(PMI_Get_nid(r, &n));
    CHECK(nidlist[r] == n);
    if (nidlist[r] == nidlist[rank]) local++;
  }

  int clique = 0, numpes = 0, in_app = 0;
  CHECK_RC(PMI_Get_clique_size(&clique));
  CHECK_RC(PMI_Get_numpes_on_smp(&numpes));
  CHECK_RC(PMI_Get_numpes_in_app_on_smp(&in_app));
  CHECK(clique == local);
  CHECK(numpes == local);
  CHECK(in_app == local);
  int *cranks = calloc((size_t)size, sizeof(int)), *pes = calloc((size_t)size, sizeof(int));
  CHECK_RC(PMI_Get_clique_ranks(cranks, size));
  CHECK_RC(PMI_Get_pes_on_smp(pes, size));
  int found_self = 0;
  for (int i = 0; i < clique; i++) {
    int n = -1;
    CHECK_RC(PMI_Get_nid(cranks[i], &n));
    CHECK(n == nid);
    CHECK(pes[i] == cranks[i]);
    if (i > 0) CHECK(cranks[i] > cranks[i - 1]);
    if (cranks[i] == rank) found_self = 1;
  }
  CHECK(found_self);
  if (clique > 1) CHECK(PMI_Get_clique_ranks(cranks, clique - 1) == PMI_ERR_INVALID_LENGTH);

  /* Allgather among the ranks of this node: their ranks, in rank order. */
  int *smp = calloc((size_t)size, sizeof(int));
  CHECK_RC(PMI_Allgather_on_smp(&rank, smp, sizeof(int)));
  for (int i = 0; i < clique; i++) CHECK(smp[i] == cranks[i]);

  /* Mesh: the node's NIC address on the emulated torus, x fastest (nicemu/common/torus.h). */
  pmi_mesh_coord_t xyz = {9, 9, 9}, max = {9, 9, 9};
  CHECK_RC(PMI_Get_meshcoord((pmi_nid_t)nid, &xyz));
  CHECK_RC(PMI_Get_max_dimension(&max));
  CHECK(xyz.mesh_x <= max.mesh_x && xyz.mesh_y <= max.mesh_y && xyz.mesh_z <= max.mesh_z);
  const char *loc_addr = getenv("PMI_GNI_LOC_ADDR");
  long addr = loc_addr ? atol(loc_addr) : nid;
  CHECK(xyz.mesh_x + (max.mesh_x + 1L) * (xyz.mesh_y + (max.mesh_y + 1L) * xyz.mesh_z) == addr);
  /* Without NICEMU_TORUS the sides multiply to the node count when every node holds a
   * rank (empty trailing nodes are invisible to PMI-only jobs). */
  if (!getenv("NICEMU_TORUS") && nodes > 0 && nodes <= size)
    CHECK((max.mesh_x + 1L) * (max.mesh_y + 1L) * (max.mesh_z + 1L) == nodes);

  /* NIC address: what the launcher exported for this node, else the nid itself. */
  pmi_nic_addr_t nic = -1;
  CHECK_RC(PMI_nid_to_nicaddrs(nid, 1, &nic));
  const char *loc = getenv("PMI_GNI_LOC_ADDR");
  CHECK(nic == (loc ? atoi(loc) : nid));
  CHECK(PMI_nid_to_nicaddrs(nid, 0, &nic) == PMI_ERR_INVALID_ARG);

  int v = -1;
  CHECK_RC(PMI_Get_rank_in_app(&v));
  CHECK(v == rank);
  CHECK_RC(PMI_CRAY_Get_app_size(&v));
  CHECK(v == size);
  CHECK_RC(PMI_CRAY_Get_num_apps(&v));
  CHECK(v == 1);
  CHECK_RC(PMI_CRAY_Get_rank_in_app(&v));
  CHECK(v == rank);
  CHECK_RC(PMI_CRAY_Get_base_rank_in_app(&v));
  CHECK(v == 0);
  char host[32];
  snprintf(host, sizeof host, "nid%05d", nid);
  CHECK_RC(PMI_CRAY_gethostbyname(host, &v));
  CHECK(v == nid);
  int major = 0, minor = -1, revision = -1;
  CHECK_RC(PMI_Get_version_info(&major, &minor, &revision));
  CHECK(major >= 1 && minor >= 0 && revision >= 0);
  free(cranks);
  free(pes);
  free(smp);
}

static void check_pmi2(const char *kvs, int rank, int size) {
  int spawned = -1, size2 = -1, rank2 = -1, appnum = -1;
  CHECK(PMI2_Init(&spawned, &size2, &rank2, &appnum) == PMI2_SUCCESS);
  CHECK(spawned == 0 && size2 == size && rank2 == rank && appnum == 0);
  CHECK(PMI2_Initialized());
  CHECK(PMI2_Job_GetRank(&rank2) == PMI2_SUCCESS && rank2 == rank);
  CHECK(PMI2_Info_GetSize(&size2) == PMI2_SUCCESS && size2 == size);

  char jobid[PMI2_MAX_VALLEN];
  unsigned num = 0;
  CHECK(PMI2_Job_GetId(jobid, sizeof jobid) == PMI2_SUCCESS);
  CHECK(sscanf(jobid, "kvs_%u", &num) == 1); /* how older Open MPI parses it */

  char key[PMI2_MAX_KEYLEN], value[PMI2_MAX_VALLEN], expect[PMI2_MAX_VALLEN];
  snprintf(key, sizeof key, "pmi2-%d", rank);
  snprintf(value, sizeof value, "pmi2 value of %d;/=", rank);
  CHECK(PMI2_KVS_Put(key, value) == PMI2_SUCCESS);
  CHECK(PMI2_KVS_Fence() == PMI2_SUCCESS);
  for (int r = 0; r < size; r++) {
    int vallen = -1;
    snprintf(key, sizeof key, "pmi2-%d", r);
    snprintf(expect, sizeof expect, "pmi2 value of %d;/=", r);
    CHECK(PMI2_KVS_Get(r % 2 ? jobid : NULL, r, key, value, sizeof value, &vallen) ==
          PMI2_SUCCESS);
    CHECK(strcmp(value, expect) == 0);
    CHECK(vallen == (int)strlen(expect));
  }

  int found = -1;
  char mapping[PMI2_MAX_ATTRVALUE], mapping1[PMI2_MAX_ATTRVALUE];
  CHECK(PMI2_Info_GetJobAttr("PMI_process_mapping", mapping, sizeof mapping, &found) ==
        PMI2_SUCCESS);
  CHECK(found == 1);
  CHECK_RC(PMI_KVS_Get(kvs, "PMI_process_mapping", mapping1, sizeof mapping1));
  CHECK(strcmp(mapping, mapping1) == 0);
  CHECK(strncmp(mapping, "(vector,", 8) == 0);
  CHECK(PMI2_Info_GetJobAttr("universeSize", value, sizeof value, &found) == PMI2_SUCCESS);
  CHECK(found == 1 && atoi(value) == size);
  int arr[4] = {0}, outlen = -1;
  CHECK(PMI2_Info_GetJobAttrIntArray("universeSize", arr, 4, &outlen, &found) == PMI2_SUCCESS);
  CHECK(found == 1 && outlen == 1 && arr[0] == size);
  CHECK(PMI2_Info_GetJobAttr("no-such-attr", value, sizeof value, &found) == PMI2_SUCCESS);
  CHECK(found == 0);

  /* Node attributes: the lowest rank of each node publishes, the others wait for it.
   * Over the PMI-1 wire a put may stay invisible until a fence (Hydra), so fence first. */
  int cranks[256] = {0}, clique = 0;
  CHECK_RC(PMI_Get_clique_size(&clique));
  CHECK_RC(PMI_Get_clique_ranks(cranks, 256));
  char node_value[64];
  int nid = -1;
  CHECK_RC(PMI_Get_nid(rank, &nid));
  snprintf(node_value, sizeof node_value, "node %d leader %d", nid, cranks[0]);
  if (rank == cranks[0]) CHECK(PMI2_Info_PutNodeAttr("leader", node_value) == PMI2_SUCCESS);
  CHECK(PMI2_KVS_Fence() == PMI2_SUCCESS);
  CHECK(PMI2_Info_GetNodeAttr("leader", value, sizeof value, &found, 1) == PMI2_SUCCESS);
  CHECK(found == 1 && strcmp(value, node_value) == 0);
  CHECK(PMI2_Info_GetNodeAttr("absent", value, sizeof value, &found, 0) == PMI2_SUCCESS);
  CHECK(found == 0);

  CHECK(PMI2_Nameserv_publish("svc", NULL, "port") != PMI2_SUCCESS);
  CHECK(PMI2_KVS_Fence() == PMI2_SUCCESS);
  CHECK(PMI2_Finalize() == PMI2_SUCCESS);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  int spawned = -1, rank = -1, size = -1;
  PMI_BOOL initialized = PMI_TRUE;

  CHECK_RC(PMI_Initialized(&initialized));
  CHECK(initialized == PMI_FALSE);
  CHECK(PMI_Get_rank(&rank) == PMI_ERR_INIT);
  if (PMI_Init(&spawned) != PMI_SUCCESS) {
    printf("FAIL: PMI_Init\n");
    return 1;
  }
  CHECK_RC(PMI_Get_rank(&rank));
  g_rank = rank;
  CHECK_RC(PMI_Get_size(&size));

  if (strcmp(mode, "abort") == 0) {
    if (rank == 1) {
      usleep(100 * 1000);
      PMI_Abort(5, "pmi_check: deliberate abort");
    }
    PMI_Barrier(); /* never completes: the launcher tears the job down */
    printf("FAIL: rank %d left the barrier\n", rank);
    return 1;
  }
  if (strcmp(mode, "peer-dies") == 0) {
    /* Under Hydra without auto-cleanup: rank 1 exits without PMI_Finalize after the barrier;
     * the others get Hydra's notice (SIGUSR1) and must live on to say so. (A rank killed by a
     * signal makes Hydra's proxy SIGKILL the other ranks it started, whatever the option.) */
    PMI_Barrier();
    if (rank == 1) _exit(3);
    for (unsigned left = 2; left > 0;) left = sleep(left); /* the notice comes within ms */
    printf("pmi_check: rank %d outlived its peer\n", rank);
    fflush(stdout);
    return 0;
  }
  if (strcmp(mode, "skip-barrier") == 0) {
    if (rank == 0) return 0; /* exits 0 without ever entering the barrier */
    PMI_Barrier();
    printf("FAIL: rank %d left the barrier\n", rank);
    return 1;
  }
  int want_size = argc > 2 ? atoi(argv[1]) : -1, want_nodes = argc > 2 ? atoi(argv[2]) : -1;

  /* Several libraries may init PMI in one process (pmi-api.md §6). */
  CHECK(spawned == 0);
  CHECK_RC(PMI_Init(&spawned));
  CHECK_RC(PMI_Initialized(&initialized));
  CHECK(initialized == PMI_TRUE);
  if (want_size > 0) CHECK(size == want_size);
  CHECK(rank >= 0 && rank < size);
  const char *env_rank = getenv("PMI_RANK"), *pe = getenv("ALPS_APP_PE");
  if (env_rank) CHECK(atoi(env_rank) == rank);
  if (pe) CHECK(atoi(pe) == rank);

  int usize = 0, appnum = -1, len = 0;
  CHECK_RC(PMI_Get_universe_size(&usize));
  CHECK(usize == size);
  CHECK_RC(PMI_Get_appnum(&appnum));
  CHECK(appnum == 0);
  CHECK_RC(PMI_KVS_Get_name_length_max(&len));
  CHECK(len > 0);
  char *kvs = calloc((size_t)len + 1, 1);
  CHECK_RC(PMI_KVS_Get_my_name(kvs, len + 1));
  CHECK(strlen(kvs) > 0);
  char small[2];
  CHECK(PMI_KVS_Get_my_name(small, sizeof small) == PMI_ERR_INVALID_LENGTH);
  CHECK_RC(PMI_KVS_Get_key_length_max(&len));
  CHECK(len >= 32);

  check_kvs(kvs, rank, size);
  check_collectives(rank, size);
  check_topology(rank, size, want_nodes);
  check_pmi2(kvs, rank, size);

  CHECK(PMI_Publish_name("svc", "port") != PMI_SUCCESS);
  CHECK_RC(PMI_Barrier());

  /* Two inits (plus PMI2_Init, already finalized): two finalizes end PMI; more are harmless. */
  CHECK_RC(PMI_Finalize());
  CHECK_RC(PMI_Initialized(&initialized));
  CHECK(initialized == PMI_TRUE);
  CHECK_RC(PMI_Finalize());
  CHECK_RC(PMI_Initialized(&initialized));
  CHECK(initialized == PMI_FALSE);
  CHECK_RC(PMI_Finalize());
  CHECK(PMI_Barrier() == PMI_ERR_INIT);

  /* A library initializing PMI after another finalized it still works under nicemu-run
   * (recognised by ALPS_APP_PE); Hydra closes the connection at finalize. */
  if (pe) {
    CHECK_RC(PMI_Init(&spawned));
    CHECK_RC(PMI_Barrier());
    CHECK_RC(PMI_Finalize());
  }

  free(kvs);
  if (g_failures) {
    printf("pmi_check: rank %d: %d failure(s)\n", rank, g_failures);
    return 1;
  }
  printf("pmi_check: rank %d: OK\n", rank);
  return 0;
}
