/* The quickstart demo: N ranks over K emulated nodes, written as a Cray application would
 * be (PMI for bootstrap, uGNI for everything else). Each rank opens SMSG channels to its
 * ring neighbours and passes a token around the ring, then FMA-PUTs a pattern into its
 * right neighbour's buffer and FMA-GETs it back, verifying both. Rank 0 prints a table. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gni_pub.h"
#include "pmi.h"

#define MAX_MSG 64
#define CREDITS 16
#define BUF_BYTES 4096

struct peer_info {
  uint32_t addr, inst;
  uint64_t mbox_base, buf;
  gni_mem_handle_t mbox_h, buf_h;
  uint32_t mbox_size;
};

struct result {
  int rank;
  uint32_t addr;
  int smsg_ok, put_ok, get_ok;
  double hop_us, put_us, get_us;
};

static int rank, size;

#define CHECK_GNI(call)                                                                    \
  do {                                                                                     \
    gni_return_t rc_ = (call);                                                             \
    if (rc_ != GNI_RC_SUCCESS) {                                                           \
      fprintf(stderr, "rank %d: %s failed: %s\n", rank, #call, gni_err_str[rc_]);         \
      PMI_Abort(1, "uGNI call failed");                                                    \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Waits for one local completion and returns its status (0 = OK). */
static uint64_t complete(gni_cq_handle_t cq, gni_post_descriptor_t *want) {
  gni_cq_entry_t ev;
  gni_return_t rc;
  /* The local completion of an SMSG send to another host comes when the message is
   * delivered there, possibly after the sender moved on: skip it. */
  while ((rc = GNI_CqGetEvent(cq, &ev)) == GNI_RC_NOT_DONE ||
         (rc == GNI_RC_SUCCESS && GNI_CQ_GET_TYPE(ev) == GNI_CQ_EVENT_TYPE_SMSG)) {
  }
  gni_post_descriptor_t *d = NULL;
  GNI_GetCompleted(cq, ev, &d);
  if (d != want) {
    fprintf(stderr, "rank %d: completion for an unexpected descriptor\n", rank);
    exit(1);
  }
  return rc == GNI_RC_SUCCESS ? 0 : GNI_CQ_GET_STATUS(ev);
}

/* Receives one message from `ep`. Like real clients it drains the remote-event CQ and then
 * polls the mailbox; with nothing there it blocks on the CQ (the library spins briefly,
 * then sleeps on a futex), so more ranks than cores still make progress. */
static uint64_t recv_token(gni_cq_handle_t rcq, gni_ep_handle_t ep) {
  void *msg;
  uint8_t tag;
  for (;;) {
    gni_cq_entry_t ev;
    while (GNI_CqGetEvent(rcq, &ev) != GNI_RC_NOT_DONE) {
    }
    tag = GNI_SMSG_ANY_TAG;
    if (GNI_SmsgGetNextWTag(ep, &msg, &tag) == GNI_RC_SUCCESS) break;
    GNI_CqWaitEvent(rcq, 1000, &ev);
  }
  uint64_t v;
  memcpy(&v, msg, sizeof v);
  CHECK_GNI(GNI_SmsgRelease(ep));
  return v;
}

static void send_token(gni_cq_handle_t cq, gni_ep_handle_t ep, uint64_t v) {
  gni_return_t rc;
  while ((rc = GNI_SmsgSendWTag(ep, &v, sizeof v, NULL, 0, (uint32_t)v, 7)) == GNI_RC_NOT_DONE) {
    gni_cq_entry_t ev;
    GNI_CqGetEvent(cq, &ev);
  }
  CHECK_GNI(rc);
  gni_cq_entry_t ev;
  while (GNI_CqGetEvent(cq, &ev) == GNI_RC_SUCCESS) {
  }
}

int main(int argc, char **argv) {
  int laps = argc > 1 ? atoi(argv[1]) : 1000;
  int spawned;
  if (PMI_Init(&spawned) != PMI_SUCCESS || PMI_Get_rank(&rank) != PMI_SUCCESS || PMI_Get_size(&size) != PMI_SUCCESS) {
    fprintf(stderr, "gni_ring: PMI_Init failed (run it with nicemu-run)\n");
    return 1;
  }
  const char *ptag_s = getenv("PMI_GNI_PTAG"), *cookie_s = getenv("PMI_GNI_COOKIE");
  if (!ptag_s || !cookie_s) {
    fprintf(stderr, "gni_ring: PMI_GNI_PTAG/PMI_GNI_COOKIE not set (run it with nicemu-run)\n");
    return 1;
  }
  uint8_t ptag = (uint8_t)strtoul(ptag_s, NULL, 10);
  uint32_t cookie = (uint32_t)strtoul(cookie_s, NULL, 10);

  gni_cdm_handle_t cdm;
  gni_nic_handle_t nic;
  uint32_t my_addr;
  gni_cq_handle_t cq, rcq;
  CHECK_GNI(GNI_CdmCreate((uint32_t)rank, ptag, cookie, GNI_CDM_MODE_ERR_NO_KILL, &cdm));
  CHECK_GNI(GNI_CdmAttach(cdm, 0, &my_addr, &nic));
  CHECK_GNI(GNI_CqCreate(nic, 1024, 0, GNI_CQ_NOBLOCK, NULL, NULL, &cq));
  CHECK_GNI(GNI_CqCreate(nic, 1024, 0, GNI_CQ_BLOCKING, NULL, NULL, &rcq));

  /* One mailbox per peer in one registration, as MPI transports do. */
  gni_smsg_attr_t attr;
  memset(&attr, 0, sizeof attr);
  attr.msg_type = GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT;
  attr.mbox_maxcredit = CREDITS;
  attr.msg_maxsize = MAX_MSG;
  unsigned mbox_size;
  CHECK_GNI(GNI_SmsgBufferSizeNeeded(&attr, &mbox_size));
  char *mboxes = calloc((size_t)size, mbox_size);
  char *buf = aligned_alloc(64, BUF_BYTES), *back = aligned_alloc(64, BUF_BYTES);
  struct peer_info me = {0}, *all = calloc((size_t)size, sizeof *all);
  me.addr = my_addr;
  me.inst = (uint32_t)rank;
  me.mbox_base = (uint64_t)(uintptr_t)mboxes;
  me.mbox_size = mbox_size;
  me.buf = (uint64_t)(uintptr_t)buf;
  CHECK_GNI(GNI_MemRegister(nic, me.mbox_base, (uint64_t)size * mbox_size, rcq, GNI_MEM_READWRITE, (uint32_t)-1, &me.mbox_h));
  CHECK_GNI(GNI_MemRegister(nic, me.buf, BUF_BYTES, NULL, GNI_MEM_READWRITE, (uint32_t)-1, &me.buf_h));
  gni_mem_handle_t back_h;
  CHECK_GNI(GNI_MemRegister(nic, (uint64_t)(uintptr_t)back, BUF_BYTES, NULL, GNI_MEM_READWRITE, (uint32_t)-1, &back_h));
  memset(buf, 0, BUF_BYTES);
  PMI_Allgather(&me, all, sizeof me);
  /* PMI_Allgather's order is a fixed permutation: index peers by their inst (= rank). */
  struct peer_info *by_rank = calloc((size_t)size, sizeof *by_rank);
  for (int i = 0; i < size; ++i) by_rank[all[i].inst] = all[i];

  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  gni_ep_handle_t ep_right, ep_left;
  int peers[2] = {right, left};
  gni_ep_handle_t *eps[2] = {&ep_right, &ep_left};
  for (int k = 0; k < 2; ++k) {
    int p = peers[k];
    CHECK_GNI(GNI_EpCreate(nic, cq, eps[k]));
    CHECK_GNI(GNI_EpBind(*eps[k], by_rank[p].addr, by_rank[p].inst));
    gni_smsg_attr_t local = attr, remote = attr;
    local.msg_buffer = mboxes;
    local.buff_size = (uint32_t)size * mbox_size;
    local.mem_hndl = me.mbox_h;
    local.mbox_offset = (uint32_t)p * mbox_size;         /* my mailbox for messages from p */
    remote.msg_buffer = (void *)(uintptr_t)by_rank[p].mbox_base;
    remote.buff_size = (uint32_t)size * mbox_size;
    remote.mem_hndl = by_rank[p].mbox_h;
    remote.mbox_offset = (uint32_t)rank * mbox_size;     /* p's mailbox for messages from me */
    CHECK_GNI(GNI_SmsgInit(*eps[k], &local, &remote));
    if (right == left) {
      ep_left = ep_right;
      break;
    }
  }
  PMI_Barrier();

  /* SMSG ring: the token goes around `laps` times, incremented at every hop. */
  struct result res = {0};
  res.rank = rank;
  res.addr = my_addr;
  double t0 = now_us();
  uint64_t token = 0;
  for (int lap = 0; lap < laps; ++lap) {
    if (rank == 0) {
      send_token(cq, ep_right, token + 1);
      token = recv_token(rcq, ep_left);
    } else {
      token = recv_token(rcq, ep_left);
      send_token(cq, ep_right, token + 1);
    }
  }
  double t1 = now_us();
  res.smsg_ok = rank != 0 || token == (uint64_t)laps * (uint64_t)size;
  res.hop_us = (t1 - t0) / ((double)laps * size);
  PMI_Barrier();

  /* FMA PUT of a rank-specific pattern into the right neighbour's buffer. */
  char *src = malloc(BUF_BYTES);
  for (int i = 0; i < BUF_BYTES; ++i) src[i] = (char)(rank * 31 + i);
  gni_post_descriptor_t d;
  memset(&d, 0, sizeof d);
  d.type = GNI_POST_FMA_PUT;
  d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
  d.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
  d.local_addr = (uint64_t)(uintptr_t)src;
  d.remote_addr = by_rank[right].buf;
  d.remote_mem_hndl = by_rank[right].buf_h;
  d.length = BUF_BYTES;
  const int reps = 200;
  int ok = 1;
  t0 = now_us();
  for (int r = 0; r < reps; ++r) {
    CHECK_GNI(GNI_PostFma(ep_right, &d));
    ok &= complete(cq, &d) == 0;
  }
  res.put_us = (now_us() - t0) / reps;
  PMI_Barrier();
  for (int i = 0; i < BUF_BYTES; ++i) ok &= buf[i] == (char)(left * 31 + i);
  res.put_ok = ok;

  /* FMA GET it back from the right neighbour and compare with what we put. */
  d.type = GNI_POST_FMA_GET;
  d.local_addr = (uint64_t)(uintptr_t)back;
  d.local_mem_hndl = back_h;
  ok = 1;
  t0 = now_us();
  for (int r = 0; r < reps; ++r) {
    memset(back, 0, BUF_BYTES);
    CHECK_GNI(GNI_PostFma(ep_right, &d));
    ok &= complete(cq, &d) == 0 && memcmp(back, src, BUF_BYTES) == 0;
  }
  res.get_us = (now_us() - t0) / reps;
  res.get_ok = ok;

  struct result *results = calloc((size_t)size, sizeof *results);
  PMI_Allgather(&res, results, sizeof res);
  int failed = 0;
  if (rank == 0) {
    struct result *sorted = calloc((size_t)size, sizeof *sorted);
    for (int i = 0; i < size; ++i) sorted[results[i].rank] = results[i];
    printf("nicemu demo: %d ranks, SMSG ring of %d laps, FMA PUT/GET of %d bytes x %d\n", size, laps, BUF_BYTES, reps);
    printf("%-5s %-8s %-10s %-12s %-8s %-12s %-8s %-12s\n", "rank", "nic", "smsg ring", "hop (us)", "put",
           "put (us)", "get", "get (us)");
    for (int i = 0; i < size; ++i) {
      struct result *r = &sorted[i];
      printf("%-5d %-8" PRIu32 " %-10s %-12.2f %-8s %-12.2f %-8s %-12.2f\n", r->rank, r->addr,
             r->smsg_ok ? "ok" : "FAIL", r->hop_us, r->put_ok ? "ok" : "FAIL", r->put_us, r->get_ok ? "ok" : "FAIL",
             r->get_us);
      failed |= !r->smsg_ok || !r->put_ok || !r->get_ok;
    }
    printf("%s\n", failed ? "demo FAILED" : "demo passed: every token arrived in order, every byte verified");
    free(sorted);
  }
  PMI_Barrier();
  GNI_EpDestroy(ep_right);
  if (ep_left != ep_right) GNI_EpDestroy(ep_left);
  GNI_MemDeregister(nic, &me.mbox_h);
  GNI_MemDeregister(nic, &me.buf_h);
  GNI_MemDeregister(nic, &back_h);
  GNI_CqDestroy(cq);
  GNI_CqDestroy(rcq);
  GNI_CdmDestroy(cdm);
  PMI_Finalize();
  free(results);
  free(src);
  free(by_rank);
  free(all);
  free(back);
  free(buf);
  free(mboxes);
  return failed;
}
