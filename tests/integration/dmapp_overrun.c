/* libdmapp when its CQ overruns (F4, docs/security.md): the calls that were waiting return
 * DMAPP_RC_TRANSACTION_ERROR, the process is not aborted, nothing hangs, nothing is posted
 * twice, and the library works on afterwards. libdmapp sizes its CQ so that this cannot
 * happen; the overrun is made here by interposing GNI_CqGetEvent and GNI_CqWaitEvent in
 * this executable (found before libugni's by libdmapp's calls): at the chosen event the CQ
 * "loses" that event and the next ones, as a full ring loses what is pushed into it, and
 * reports GNI_RC_ERROR_RESOURCE with the overrun bit, as GNI does.
 *
 * Run on 2 PEs; PE 0 sends AMOs to PE 1. Default: 10th event overruns, 5 lost, of 40 adds.
 * --lose-all: a pool of 8 requests whose 8 events are all lost; a later blocking AMO gets
 * DMAPP_RC_NO_SPACE instead of waiting for ever. Exit 0 when every check holds. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dlsym(RTLD_NEXT) */
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dmapp_check.h"

static long overrun_at = -1; /* the event (counted from 1) at which the CQ overruns */
static long lose;            /* events lost there, that one included */
static long seen, overruns;

typedef gni_return_t (*get_event_fn)(gni_cq_handle_t, gni_cq_entry_t *);
typedef gni_return_t (*wait_event_fn)(gni_cq_handle_t, uint64_t, gni_cq_entry_t *);

static gni_return_t maybe_overrun(gni_cq_handle_t cq, gni_return_t rc, gni_cq_entry_t *ev) {
  if (rc != GNI_RC_SUCCESS && rc != GNI_RC_TRANSACTION_ERROR) return rc;
  if (++seen != overrun_at) return rc;
  /* The rest of the lost ones may still be on their way: wait for them (5 s at most). */
  wait_event_fn real_wait = (wait_event_fn)dlsym(RTLD_NEXT, "GNI_CqWaitEvent");
  long gone = 1;
  for (int slices = 0; gone < lose && slices < 50; ++slices) {
    gni_cq_entry_t e;
    gni_return_t r = real_wait(cq, 100, &e);
    if (r == GNI_RC_SUCCESS || r == GNI_RC_TRANSACTION_ERROR) ++gone;
  }
  ++overruns;
  *ev = (gni_cq_entry_t)1 << 63; /* GNI_CQ_OVERRUN */
  return GNI_RC_ERROR_RESOURCE;
}

gni_return_t GNI_CqGetEvent(gni_cq_handle_t cq, gni_cq_entry_t *ev) {
  get_event_fn real = (get_event_fn)dlsym(RTLD_NEXT, "GNI_CqGetEvent");
  return maybe_overrun(cq, real(cq, ev), ev);
}

gni_return_t GNI_CqWaitEvent(gni_cq_handle_t cq, uint64_t timeout, gni_cq_entry_t *ev) {
  wait_event_fn real = (wait_event_fn)dlsym(RTLD_NEXT, "GNI_CqWaitEvent");
  return maybe_overrun(cq, real(cq, timeout, ev), ev);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  const int lose_all = argc > 1 && strcmp(argv[1], "--lose-all") == 0;
  dmapp_rma_attrs_ext_t req, act;
  if (dmapp_get_rma_attrs_ext(&req) != DMAPP_RC_SUCCESS) return 1;
  req.max_outstanding_nb = lose_all ? 8 : 64;
  if (start_job(&req, &act, "dmapp_overrun")) return 1;
  if (npes != 2) {
    fprintf(stderr, "dmapp_overrun: run it on 2 PEs\n");
    return 1;
  }
  int64_t *w = dmapp_sheap_malloc(sizeof *w);
  CHECK(w != NULL);
  *w = 0;
  barrier();
  const int first = lose_all ? 8 : 40;
  if (me == 0) {
    overrun_at = lose_all ? 1 : 10;
    lose = lose_all ? 8 : 5;
    for (int i = 0; i < first; ++i) OK(dmapp_aadd_qw_nbi(w, &info.sheap_seg, 1, 1));
    double t0 = now_s();
    CHECK_RC(dmapp_gsync_wait(), DMAPP_RC_TRANSACTION_ERROR);
    CHECK(overruns == 1);
    OK(dmapp_gsync_wait()); /* reported once; nothing left to wait for */
    if (lose_all) {
      /* Every request's event was lost: the pool is empty for good. */
      CHECK_RC(dmapp_aadd_qw(w, &info.sheap_seg, 1, 1), DMAPP_RC_NO_SPACE);
      CHECK_RC(dmapp_aadd_qw_nbi(w, &info.sheap_seg, 1, 1), DMAPP_RC_NO_SPACE);
      CHECK(now_s() - t0 < 10);
    } else {
      /* The library goes on: non-blocking, explicit and blocking AMOs complete. */
      for (int i = 0; i < 40; ++i) OK(dmapp_aadd_qw_nbi(w, &info.sheap_seg, 1, 1));
      OK(dmapp_gsync_wait());
      dmapp_syncid_handle_t id;
      OK(dmapp_aadd_qw_nb(w, &info.sheap_seg, 1, 1, &id));
      OK(dmapp_syncid_wait(&id));
      /* Every add took effect once: those whose events were lost were not posted again. */
      int64_t old = -1;
      OK(dmapp_afadd_qw(&old, w, &info.sheap_seg, 1, 0));
      CHECK(old == first + 40 + 1);
      if (old != first + 40 + 1) fprintf(stderr, "PE 0: the target holds %lld\n", (long long)old);
    }
  }
  barrier();
  dmapp_return_t rc = dmapp_finalize();
  CHECK(rc == DMAPP_RC_SUCCESS);
  if (end_job()) return 1;
  if (me == 0) printf("overrun%s reported as DMAPP_RC_TRANSACTION_ERROR, %d checks passed\n",
                      lose_all ? " losing every request" : "", checks);
  return 0;
}
