/* What libalpslli and libalpsutil answer in this process, the way libfabric's gni provider
 * asks (lock, APID, GNI, placement, unlock), checked against the launcher's environment.
 * Prints one line: "alps rank R apid A ptag P cookie C dev D addr L first F here H pes N
 * nodes n0,n1,..." and exits 0; exits 1 on a wrong answer, 2 when ALPS answered "no data"
 * (STAT_UNAVAIL for GNI, or placement -1: expected without a job credential). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alps/alps.h"
#include "alps/alps_toolAssist.h"
#include "alps/libalpslli.h"
#include "alps/libalpsutil.h"

static int fail(const char *what) {
  fprintf(stderr, "alps_check: %s (errno %d: %s)\n", what, errno, strerror(errno));
  return 1;
}

int main(void) {
  int status = -1;
  size_t count = 0;
  uint64_t apid = 0;

  if (alps_app_lli_lock() != 0) return fail("lock");
  if (alps_app_lli_put_request(ALPS_APP_LLI_ALPS_REQ_APID, NULL, 0) != ALPS_APP_LLI_ALPS_STAT_OK)
    return fail("put APID");
  if (alps_app_lli_get_response(&status, &count) != 0) return fail("get_response APID");
  if (status == ALPS_APP_LLI_ALPS_STAT_UNAVAIL) {
    alps_app_lli_unlock();
    /* Placement must refuse as well. */
    alpsAppLayout_t layout;
    if (alps_get_placement_info(1, &layout, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL) != -1)
      return fail("placement answered without a credential");
    printf("alps unavailable\n");
    return 2;
  }
  if (status != ALPS_APP_LLI_ALPS_STAT_OK || count != sizeof apid) return fail("APID response header");
  if (alps_app_lli_get_response_bytes(&apid, sizeof apid) != ALPS_APP_LLI_ALPS_STAT_OK) return fail("APID bytes");
  /* A second read past the end is refused. */
  if (alps_app_lli_get_response_bytes(&apid, 1) != -1) return fail("read past the response");

  if (alps_app_lli_put_request(ALPS_APP_LLI_ALPS_REQ_GNI, NULL, 0) != 0) return fail("put GNI");
  if (alps_app_lli_get_response(&status, &count) != 0 || status != ALPS_APP_LLI_ALPS_STAT_OK)
    return fail("get_response GNI");
  alpsAppLLIGni_t *gni = malloc(count);
  if (!gni || alps_app_lli_get_response_bytes(gni, count) != 0) return fail("GNI bytes");
  if (gni->count < 1 || count != offsetof(alpsAppLLIGni_t, u) + (size_t)gni->count * sizeof(alpsAppGni_t))
    return fail("GNI response size");
  alpsAppGni_t dev;
  memcpy(&dev, gni->u.buf, sizeof dev);
  free(gni);

  /* An unknown request is answered STAT_REQ. */
  if (alps_app_lli_put_request(99, NULL, 0) != 0 || alps_app_lli_get_response(&status, &count) != 0 ||
      status != ALPS_APP_LLI_ALPS_STAT_REQ || count != 0)
    return fail("unknown request");
  alps_app_lli_unlock();
  if (alps_app_lli_put_simple_request(ALPS_APP_LLI_ALPS_REQ_EXITING, NULL, 0) != 0) return fail("EXITING");

  const char *ptag_s = getenv("PMI_GNI_PTAG"), *cookie_s = getenv("PMI_GNI_COOKIE");
  const char *addr_s = getenv("PMI_GNI_LOC_ADDR");
  if (!ptag_s || dev.ptag != strtoul(ptag_s, NULL, 0)) return fail("ptag differs from PMI_GNI_PTAG");
  if (!cookie_s || dev.cookie != strtoul(cookie_s, NULL, 0)) return fail("cookie differs from PMI_GNI_COOKIE");
  if (addr_s && dev.local_addr != (int32_t)strtol(addr_s, NULL, 0)) return fail("local_addr differs");

  alpsAppLayout_t layout;
  int *placement = NULL, *tnids = NULL, *tpes = NULL, *tlen = NULL, *start = NULL, *total = NULL,
      *per_node = NULL, *cpus = NULL;
  struct in_addr *tips = NULL;
  if (alps_get_placement_info(apid, &layout, &placement, &tnids, &tpes, &tlen, &tips, &start, &total,
                              &per_node, &cpus) != 1)
    return fail("alps_get_placement_info");
  if (alps_get_placement_info(apid + 1, &layout, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL) != -1 ||
      errno != ENOENT)
    return fail("placement of another apid");
  if (layout.apid != apid || layout.numCmds != 1 || total[0] != layout.numPes || layout.numPesHere < 1)
    return fail("layout fields");
  const char *pe_s = getenv("ALPS_APP_PE");
  if (!pe_s) pe_s = getenv("PMI_RANK");
  int rank = pe_s ? atoi(pe_s) : 0;
  if (rank < layout.firstPe || rank >= layout.firstPe + layout.numPesHere) return fail("rank not among this node's PEs");
  for (int pe = layout.firstPe; pe < layout.firstPe + layout.numPesHere; ++pe)
    if (placement[pe] != dev.local_addr) return fail("placement list disagrees with this node");

  printf("alps rank %d apid %llu ptag %u cookie %u dev %u addr %d first %d here %d pes %d nodes", rank,
         (unsigned long long)apid, dev.ptag, dev.cookie, dev.device_id, dev.local_addr, layout.firstPe,
         layout.numPesHere, layout.numPes);
  for (int pe = 0; pe < layout.numPes; ++pe) printf("%c%d", pe ? ',' : ' ', placement[pe]);
  printf("\n");
  free(placement), free(tnids), free(tpes), free(tlen), free(tips), free(start), free(total), free(per_node),
      free(cpus);
  return 0;
}
