/* tools/compat/programs/client_check.c — the smallest uGNI + Cray PMI client, built by
 * tools/compat/recipes/install-nicemu with nothing but `pkg-config --cflags --libs cray-ugni cray-pmi`
 * against an installed nicemu, as the compatibility builds' configure scripts will. */
#include <stdio.h>
#include <stdint.h>

#include <gni_pub.h>
#include <pmi.h>

/* configure-time probes of Open MPI and UCX test these with #if defined / #ifdef */
#if !defined(GNI_CDM_MODE_FORK_FULLCOPY) || !defined(GNI_CDM_MODE_DUAL_EVENTS) || \
    !defined(GNI_MEM_READWRITE) || !defined(GNI_CQ_EVENT_TYPE_SMSG)
#error "gni_pub.h lacks flags clients test with #if defined"
#endif

int main(void) {
  uint32_t version = 0;
  gni_return_t grc = GNI_GetVersion(&version);
  if (grc != GNI_RC_SUCCESS) {
    fprintf(stderr, "GNI_GetVersion: %s\n", gni_err_str[grc]);
    return 1;
  }
  int spawned = 0, rank = -1, size = 0;
  if (PMI_Init(&spawned) != PMI_SUCCESS || PMI_Get_rank(&rank) != PMI_SUCCESS ||
      PMI_Get_size(&size) != PMI_SUCCESS) {
    fprintf(stderr, "PMI_Init failed\n");
    return 1;
  }
  printf("uGNI version 0x%08x (header 0x%08x), PMI rank %d of %d\n", version,
         (unsigned)GNI_VERSION, rank, size);
  PMI_Finalize();
  return version == GNI_VERSION ? 0 : 1;
}
