/* A uGNI client with a known traffic pattern for the counter tests (test_observability.sh):
 * attaches (PMI_GNI_PTAG / PMI_GNI_COOKIE, inst 7), registers one buffer, posts N FMA PUTs
 * of SIZE bytes to itself with a global event and takes each completion, posts one PUT
 * through a forged memory handle (one protection-error completion), then prints
 * "ready <pid>" and stays attached until its standard input closes.
 * Usage: counters_client N SIZE        Exit: 0 ok, 1 a uGNI call failed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gni_pub.h"

#define CHECK(call)                                                            \
  do {                                                                         \
    gni_return_t rc_ = (call);                                                 \
    if (rc_ != GNI_RC_SUCCESS) {                                               \
      fprintf(stderr, "counters_client: %s: %s\n", #call, gni_err_str[rc_]);   \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static gni_return_t wait_one(gni_cq_handle_t cq, gni_cq_entry_t *ev) {
  gni_return_t rc;
  do rc = GNI_CqGetEvent(cq, ev);
  while (rc == GNI_RC_NOT_DONE);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: counters_client N SIZE\n");
    return 2;
  }
  int n = atoi(argv[1]);
  size_t size = (size_t)strtoul(argv[2], NULL, 10);
  const char *ptag_s = getenv("PMI_GNI_PTAG"), *cookie_s = getenv("PMI_GNI_COOKIE");
  if (!ptag_s || !cookie_s || n <= 0 || size == 0 || size > (1u << 20)) {
    fprintf(stderr, "counters_client: needs PMI_GNI_PTAG, PMI_GNI_COOKIE, N > 0, 0 < SIZE <= 1 MiB\n");
    return 2;
  }
  gni_cdm_handle_t cdm;
  gni_nic_handle_t nic;
  uint32_t addr;
  gni_cq_handle_t cq;
  gni_ep_handle_t ep;
  gni_mem_handle_t mh;
  CHECK(GNI_CdmCreate(7, (uint8_t)strtoul(ptag_s, NULL, 10), (uint32_t)strtoul(cookie_s, NULL, 10),
                      GNI_CDM_MODE_ERR_NO_KILL, &cdm));
  CHECK(GNI_CdmAttach(cdm, 0, &addr, &nic));
  CHECK(GNI_CqCreate(nic, 64, 0, GNI_CQ_NOBLOCK, NULL, NULL, &cq));
  CHECK(GNI_EpCreate(nic, cq, &ep));
  CHECK(GNI_EpBind(ep, addr, 7));
  char *src = calloc(1, size), *dst = calloc(1, size);
  CHECK(GNI_MemRegister(nic, (uint64_t)(uintptr_t)dst, size, NULL, GNI_MEM_READWRITE, (uint32_t)-1, &mh));

  gni_post_descriptor_t d;
  gni_cq_entry_t ev;
  gni_post_descriptor_t *done;
  for (int i = 0; i < n; ++i) {
    memset(&d, 0, sizeof d);
    d.type = GNI_POST_FMA_PUT;
    d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
    d.local_addr = (uint64_t)(uintptr_t)src;
    d.remote_addr = (uint64_t)(uintptr_t)dst;
    d.remote_mem_hndl = mh;
    d.length = size;
    CHECK(GNI_PostFma(ep, &d));
    CHECK(wait_one(cq, &ev));
    CHECK(GNI_GetCompleted(cq, ev, &done));
  }
  /* A handle that was never issued: the target refuses it, the completion carries an error. */
  memset(&d, 0, sizeof d);
  d.type = GNI_POST_FMA_PUT;
  d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
  d.local_addr = (uint64_t)(uintptr_t)src;
  d.remote_addr = (uint64_t)(uintptr_t)dst;
  d.remote_mem_hndl.qword1 = 0x1234;
  d.remote_mem_hndl.qword2 = 0x5678;
  d.length = 8;
  CHECK(GNI_PostFma(ep, &d));
  if (wait_one(cq, &ev) != GNI_RC_TRANSACTION_ERROR) {
    fprintf(stderr, "counters_client: the forged handle did not give an error completion\n");
    return 1;
  }
  GNI_GetCompleted(cq, ev, &done);

  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  CHECK(GNI_MemDeregister(nic, &mh));
  CHECK(GNI_EpDestroy(ep));
  CHECK(GNI_CqDestroy(cq));
  CHECK(GNI_CdmDestroy(cdm));
  free(src);
  free(dst);
  return 0;
}
