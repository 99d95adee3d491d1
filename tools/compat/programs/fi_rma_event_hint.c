/* tools/compat/programs/fi_rma_event_hint.c — an LD_PRELOAD wrapper of fi_getinfo that adds
 * FI_RMA_EVENT to hints that ask for FI_RMA, built and used by tools/compat/recipes/libfabric.
 *
 * Why: libfabric 1.13.1's gni provider sends the message carrying an RMA write's remote CQ
 * data only when the initiating endpoint has FI_RMA_EVENT (GNIX_ALLOW_FI_REMOTE_CQ_DATA in
 * prov/gni/include/gnix_util.h), and fabtests' `fi_rma_bw -o writedata` asks for
 * FI_WRITE | FI_REMOTE_WRITE only, so over gni its target waits for data that never comes,
 * on a Cray as here. With the capability in the hints the same unmodified program shows
 * whether the NIC underneath delivers write-with-data. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <rdma/fabric.h>

typedef int (*getinfo_fn)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
                          struct fi_info **);

int fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
               const struct fi_info *hints, struct fi_info **info) {
  static getinfo_fn next;
  if (!next) {
    next = (getinfo_fn)dlsym(RTLD_NEXT, "fi_getinfo");
    if (!next) {
      fprintf(stderr, "fi_rma_event_hint: no fi_getinfo after this library: %s\n", dlerror());
      abort();
    }
  }
  if (!hints || !(hints->caps & FI_RMA) || (hints->caps & FI_RMA_EVENT))
    return next(version, node, service, flags, hints, info);
  struct fi_info h = *hints; /* shallow: fi_getinfo only reads its hints */
  h.caps |= FI_RMA_EVENT;
  return next(version, node, service, flags, &h, info);
}
