/* Checks for the DMAPP test programs (dmapp_suite.c, dmapp_align.c), one run on every PE by
 * nicemu-run: CHECK and CHECK_RC count checks and failures (the first 40 failures are said
 * on stderr, with this PE), the job's start (dmapp_init_ext, then the job's shape) and end. */
#ifndef NICEMU_TESTS_DMAPP_CHECK_H
#define NICEMU_TESTS_DMAPP_CHECK_H

#include <stdio.h>

#include "dmapp.h"
#include "pmi.h"

static int me, npes, failures, checks, calls_failed;
static dmapp_jobinfo_t info;

/* After a call failed, a data check that fails says so instead of "check failed": the data
 * it compares may never have arrived (a peer cancelled mid-job), which is not wrong data. */
#define CHECK(cond)                                                                   \
  do {                                                                                \
    ++checks;                                                                         \
    if (!(cond)) {                                                                    \
      ++failures;                                                                     \
      if (failures < 40)                                                              \
        fprintf(stderr, "PE %d: %s:%d: %s: %s\n", me, __FILE__, __LINE__,             \
                calls_failed ? "not verified after a failed call" : "check failed", #cond); \
    }                                                                                 \
  } while (0)
#define CHECK_RC(call, want)                                                          \
  do {                                                                                \
    dmapp_return_t rc_ = (call);                                                      \
    ++checks;                                                                         \
    if (rc_ != (want)) {                                                              \
      ++failures;                                                                     \
      ++calls_failed;                                                                 \
      if (failures < 40)                                                              \
        fprintf(stderr, "PE %d: %s:%d: %s returned %d, expected %d\n", me, __FILE__, __LINE__, #call, rc_, want); \
    }                                                                                 \
  } while (0)
#define OK(call) CHECK_RC(call, DMAPP_RC_SUCCESS)

static inline void barrier(void) { PMI_Barrier(); }

/* dmapp_init_ext(req, act), then this PE's number and the job's size into me and npes (the
 * rest in info). 1 on failure, said on stderr with `what`; else 0. */
static inline int start_job(dmapp_rma_attrs_ext_t *req, dmapp_rma_attrs_ext_t *act, const char *what) {
  dmapp_return_t rc = dmapp_init_ext(req, act);
  if (rc != DMAPP_RC_SUCCESS) {
    const char *m;
    dmapp_explain_error(rc, &m);
    fprintf(stderr, "%s: %s\n", what, m);
    return 1;
  }
  dmapp_get_jobinfo(&info);
  me = info.pe;
  npes = info.npes;
  return 0;
}

/* After dmapp_finalize: DMAPP must say it is no longer initialized. 1 when a check failed
 * (the count said on stderr), else 0. */
static inline int end_job(void) {
  int flag = 1;
  dmapp_initialized(&flag);
  if (flag) ++failures;
  if (failures) {
    fprintf(stderr, "PE %d: %d of %d checks failed\n", me, failures, checks);
    return 1;
  }
  return 0;
}

#endif
