/* Memory operations across hosts, verified (test_fabric.sh, test_fabric_netns.sh), and
 * their bandwidth and latency (bench mode). Run under a PMI launcher (nicemu-run --fabric
 * udp, mpiexec.hydra), one rank per emulated node; every pair of ranks then crosses the
 * UDP fabric.
 *
 *   fabric_rma ROUNDS [SLOT]  each round, towards every other rank: FMA PUT of a pattern, FMA
 *                         GET back and compare; RDMA PUT of SLOT bytes (default 1 MiB,
 *                         at least 4 KiB), RDMA GET back and
 *                         compare; a fetch-and-add on the peer's counter; a CQ write into
 *                         the peer's CQ. Then chained posts (GNI_CtPostFma,
 *                         GNI_CtPostCqWrite) with one member per peer (same-host peers too
 *                         where ranks share a node): an AMO ADD on every counter, a PUT
 *                         of CHUNK bytes into our chunk of every peer's first page, a GET
 *                         of them back, a CQ write into every CQ; one event each.
 *                         At the end every rank checks, in its own memory
 *                         and CQ, what the others did: its counter, its slots' and chunks'
 *                         bytes, two CQ-write entries per peer and round (each value once).
 *   fabric_rma errors     rank 0 -> rank 1: posts through a deregistered handle complete
 *                         with error events, the page is not written; a chain of CQ writes
 *                         with one such member: one event with its status, the other
 *                         members' entries delivered (errors_mode).
 *   fabric_rma rekey      rank 0 -> rank 1: PUTs through a handle whose registration the
 *                         target replaced (deregistered, the page registered again): the
 *                         old handle writes nothing into the new registration (unless its
 *                         bits are the same), the new one lands (rekey_mode).
 *   fabric_rma touch [N]  rank 0 -> rank 1: the 8-byte PUT round trip into N fresh handles,
 *                         first and second post each (a benchmark: touch_mode).
 *   fabric_rma amo        every rank -> the next: every Gemini and Aries AMO opcode, 8- and
 *                         4-byte forms, one target word each, the fetched values checked at
 *                         the initiator and the words at the target; then FMA PUT, RDMA PUT
 *                         and PUT_W_SYNCFLAG with remote events (and a sync flag without),
 *                         an FMA GET with one:
 *                         the target checks the bytes, the flags and each remote event CQE
 *                         (type, status, source, the initiator's event data). Prints a digest
 *                         of the fetched values and words (equal on every path).
 *   fabric_rma atomic [N] every rank but 0 -> rank 0: N AMOs (FADD, ADD) each on one counter, at
 *                         once, same-host ranks through shared memory and the others across
 *                         the fabric; rank 0 checks the exact sum (atomic_mode).
 *   fabric_rma order [N]  rank 0 -> rank 1: N pairs of posts to one word each (AMO then PUT,
 *                         PUT then AMO, GET then PUT, PUT then CQ write; PUT then GET in the
 *                         strict classes), in flight together, in the default and both strict
 *                         classes, then PUT then an SMSG message naming the word (not with
 *                         FABRIC_RMA_ORDER_SMSG=0); the end
 *                         values, what the GETs read and the words at each CQ write and
 *                         message must follow the ordering model (order_mode).
 *   fabric_rma bench      rank 0 -> rank 1: FMA PUT 8 B and AMO FADD latency; FMA PUT, RDMA PUT and
 *                         RDMA GET bandwidth, 8 B .. 4 MiB (up to 16 posts in flight;
 *                         FABRIC_RMA_BENCH_REPEAT=N moves N times the data and
 *                         FABRIC_RMA_BENCH_SIZE=N measures only that size, for profiling;
 *                         FABRIC_RMA_BENCH_KIND=put|get only RDMA PUT or GET, and
 *                         FABRIC_RMA_BENCH_LAT=0 no latency loops, for CPU per MiB: each
 *                         rank prints its CPU seconds over the bench, all threads).
 * Exit 0 = everything verified. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "gni_pub.h"
#include "pmi.h"
#include "fabric_job.h"

#define MAX_RANKS 16
#define MAX_ROUNDS 1024
#define SMALL 4096u              /* the FMA part of a slot */
#define BENCH_BYTES (4u << 20)
#define CHUNK 128u               /* chained PUT/GET: rank r's chunk at 128 * (r + 1) of page 0 */
#define CHAIN_CQW (1u << 16)     /* marks the CQ write of a chain */
#define CHAIN_ERR_TAG 0xC4A100000000ull /* the CQ writes of errors mode's chain (a CQE carries 48 bits) */

struct peer_info {
  uint32_t addr, inst;
  uint64_t win;
  gni_mem_handle_t win_h;
};

static int rank, nranks;
static uint64_t SLOT = 1u << 20; /* bytes of a rank's window per peer */
static gni_nic_handle_t nic;
static gni_cq_handle_t cq, rcq;

static int fail(const char *what, long v) {
  fprintf(stderr, "fabric_rma rank %d: %s (%ld)\n", rank, what, v);
  return 1;
}

static uint8_t pattern(uint32_t seed, uint64_t i) { return (uint8_t)((i * 2654435761u + seed * 40503u) >> 13); }

static void fill(uint8_t *p, uint64_t n, uint32_t seed) {
  for (uint64_t i = 0; i < n; ++i) p[i] = pattern(seed, i);
}

/* Waits for one completion; returns its CQE status (0 = ok) or -1 on timeout/error. */
static long complete_one(void) {
  gni_cq_entry_t e;
  gni_return_t rc = GNI_CqWaitEvent(cq, 20000, &e);
  if (rc != GNI_RC_SUCCESS) return -1;
  gni_post_descriptor_t *d = NULL;
  if (GNI_GetCompleted(cq, e, &d) != GNI_RC_SUCCESS || !d) return -1;
  return GNI_CQ_STATUS_OK(e) ? 0 : (long)GNI_CQ_GET_STATUS(e) + 1;
}

static long post_wait(gni_ep_handle_t ep, gni_post_descriptor_t *d, int rdma) {
  gni_return_t rc = rdma ? GNI_PostRdma(ep, d) : GNI_PostFma(ep, d);
  if (rc != GNI_RC_SUCCESS) return -100 - rc;
  return complete_one();
}

/* One chained FMA post of `type` with a member per peer (all ranks but ours): the first is
 * the post descriptor, on the first peer's EP, the others gni_ct_*_post_descriptor_t
 * elements on theirs; each member works on CHUNK bytes of `local` at the peer's index.
 * Waits for the chain's one event and checks no second one follows. */
static long chain_wait(gni_ep_handle_t *ep, const struct peer_info *all, gni_post_type_t type, uint8_t *local,
                       gni_mem_handle_t lh) {
  static gni_ct_amo_post_descriptor_t amo[MAX_RANKS];
  static gni_ct_put_post_descriptor_t put[MAX_RANKS];
  static gni_ct_get_post_descriptor_t get[MAX_RANKS];
  gni_post_descriptor_t d;
  void *prev = NULL;
  int first = -1;
  for (int p = 0; p < nranks; ++p) {
    if (p == rank) continue;
    const uint64_t chunk = all[p].win + CHUNK * (uint64_t)(rank + 1);
    uint8_t *mine = local + CHUNK * (uint64_t)p;
    if (first < 0) {
      first = p;
      fabric_desc(&d, type, mine, lh, type == GNI_POST_AMO ? all[p].win : chunk, all[p].win_h, type == GNI_POST_AMO ? 8 : CHUNK);
      if (type == GNI_POST_AMO) {
        d.amo_cmd = GNI_FMA_ATOMIC_ADD;
        d.first_operand = 1;
      }
      continue;
    }
    void *e;
    if (type == GNI_POST_AMO) {
      amo[p] = (gni_ct_amo_post_descriptor_t){.ep_hndl = ep[p], .length = 8, .remote_addr = all[p].win,
                                              .remote_mem_hndl = all[p].win_h, .local_addr = (uint64_t)mine,
                                              .local_mem_hndl = lh, .amo_cmd = GNI_FMA_ATOMIC_ADD, .first_operand = 1};
      e = &amo[p];
    } else if (type == GNI_POST_FMA_PUT) {
      put[p] = (gni_ct_put_post_descriptor_t){.ep_hndl = ep[p], .length = CHUNK, .remote_addr = chunk,
                                              .remote_mem_hndl = all[p].win_h, .local_addr = (uint64_t)mine};
      e = &put[p];
    } else {
      get[p] = (gni_ct_get_post_descriptor_t){.ep_hndl = ep[p], .length = CHUNK, .remote_addr = chunk,
                                              .remote_mem_hndl = all[p].win_h, .local_addr = (uint64_t)mine,
                                              .local_mem_hndl = lh};
      e = &get[p];
    }
    if (prev == NULL)
      d.next_descr = e;
    else
      *(void **)prev = e; /* next_descr is the first member of every gni_ct_* element */
    prev = e;
  }
  gni_return_t rc = GNI_CtPostFma(ep[first], &d);
  if (rc != GNI_RC_SUCCESS) return -100 - rc;
  long st = complete_one();
  if (st != 0) return st;
  /* Exactly one event for the whole chain. */
  gni_cq_entry_t e;
  return GNI_CqGetEvent(cq, &e) == GNI_RC_NOT_DONE ? 0 : -99;
}

static int bench(gni_ep_handle_t ep, const struct peer_info *t) {
  uint8_t *src = aligned_alloc(4096, BENCH_BYTES);
  gni_mem_handle_t sh;
  if (!src || GNI_MemRegister(nic, (uint64_t)src, BENCH_BYTES, NULL, GNI_MEM_READWRITE, -1, &sh) != GNI_RC_SUCCESS)
    return fail("register bench buffer", 0);
  fill(src, BENCH_BYTES, 7);
  static gni_post_descriptor_t ds[16];
  const char *rep_s = getenv("FABRIC_RMA_BENCH_REPEAT"); /* more data per size, for profiling */
  const uint64_t repeat = rep_s && atoi(rep_s) > 0 ? (uint64_t)atoi(rep_s) : 1;
  const char *only_s = getenv("FABRIC_RMA_BENCH_SIZE");
  const uint64_t only = only_s ? strtoull(only_s, NULL, 10) : 0;
  const char *kind_s = getenv("FABRIC_RMA_BENCH_KIND"); /* put | get: that RDMA kind alone */
  const int only_kind = !kind_s ? -1 : strcmp(kind_s, "put") == 0 ? 1 : strcmp(kind_s, "get") == 0 ? 2 : -1;
  const char *lat_s = getenv("FABRIC_RMA_BENCH_LAT");
  /* Latency: one 8-byte FMA PUT at a time, to its global completion. */
  const int lat_iters = lat_s ? atoi(lat_s) : 2000;
  double t0 = fabric_now_s();
  for (int i = 0; i < lat_iters; ++i) {
    fabric_desc(&ds[0], GNI_POST_FMA_PUT, src, sh, t->win, t->win_h, 8);
    if (post_wait(ep, &ds[0], 0) != 0) return fail("latency put", i);
  }
  if (lat_iters > 0)
    printf("fabric_rma bench: FMA PUT 8 B round trip %.1f us\n", (fabric_now_s() - t0) / lat_iters * 1e6);
  /* And one fetch-and-add at a time, to its completion (the old value back). */
  t0 = fabric_now_s();
  for (int i = 0; i < lat_iters; ++i) {
    fabric_desc(&ds[0], GNI_POST_AMO, src, sh, t->win, t->win_h, 8);
    ds[0].amo_cmd = GNI_FMA_ATOMIC_FADD;
    ds[0].first_operand = 1;
    if (post_wait(ep, &ds[0], 0) != 0) return fail("latency AMO", i);
  }
  if (lat_iters > 0)
    printf("fabric_rma bench: AMO FADD 8 B round trip %.1f us\n", (fabric_now_s() - t0) / lat_iters * 1e6);
  printf("fabric_rma bench: %-10s %10s %10s %10s\n", "bytes", "FMA PUT", "RDMA PUT", "RDMA GET");
  static const uint64_t sizes[] = {8, 64, 512, 4096, 32768, 262144, 1048576, BENCH_BYTES};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; ++si) {
    const uint64_t len = sizes[si];
    if (only && len != only) continue;
    double mbs[3] = {0, 0, 0};
    for (int kind = 0; kind < 3; ++kind) {
      if (only_kind >= 0 && kind != only_kind) continue;
      const int rdma = kind > 0;
      const gni_post_type_t type = kind == 0 ? GNI_POST_FMA_PUT : kind == 1 ? GNI_POST_RDMA_PUT : GNI_POST_RDMA_GET;
      uint64_t total = len >= (1u << 20) ? 32ull << 20 : len >= 4096 ? 16ull << 20 : len * 5000;
      total *= repeat;
      uint64_t iters = total / len, posted = 0, done = 0;
      if (iters < 16) iters = 16;
      t0 = fabric_now_s();
      while (done < iters) {
        while (posted < iters && posted - done < 16) {
          gni_post_descriptor_t *d = &ds[posted % 16];
          fabric_desc(d, type, src, sh, t->win, t->win_h, len);
          gni_return_t rc = rdma ? GNI_PostRdma(ep, d) : GNI_PostFma(ep, d);
          if (rc != GNI_RC_SUCCESS) return fail("bench post", rc);
          ++posted;
        }
        if (complete_one() != 0) return fail("bench completion", (long)len);
        ++done;
      }
      mbs[kind] = (double)(iters * len) / (fabric_now_s() - t0) / 1e6;
    }
    printf("fabric_rma bench: %-10llu %8.1f MB/s %8.1f MB/s %8.1f MB/s\n", (unsigned long long)len, mbs[0], mbs[1],
           mbs[2]);
  }
  GNI_MemDeregister(nic, &sh);
  free(src);
  return 0;
}

/* `fabric_rma errors` (2 ranks): rank 1 registers a scratch page, lets rank 0 learn its
 * handle, fills it with 0xA5 and deregisters it; rank 0 then posts an RDMA PUT, an FMA PUT,
 * an FMA GET, an FMA PUT asking for a remote event and an AMO FADD through the stale handle
 * (all rank to rank on the ofi fabric, the AMO as a message its target checks): each
 * must complete with an error event (status printed), never a crash or a hang, and rank 1's
 * page must hold 0xA5 still (no stray write). A PUT into the live window still works afterwards
 * and lands (rank 1 checks its bytes). */
static uint32_t last_recoverable; /* of wait_any's last error event */
static long wait_any(void) {
  gni_cq_entry_t e;
  gni_return_t rc = GNI_CqWaitEvent(cq, 20000, &e);
  if (rc != GNI_RC_SUCCESS && rc != GNI_RC_TRANSACTION_ERROR) return -1;
  last_recoverable = 0;
  if (!GNI_CQ_STATUS_OK(e)) GNI_CqErrorRecoverable(e, &last_recoverable);
  gni_post_descriptor_t *d = NULL;
  if (GNI_GetCompleted(cq, e, &d) != GNI_RC_SUCCESS && !d) return -1;
  return GNI_CQ_STATUS_OK(e) ? 0 : (long)GNI_CQ_GET_STATUS(e) + 1;
}

/* Posts one AMO FADD through `h` at `va` of rank 1, reposted while it completes with a
 * recoverable error (a connection the provider dropped after a bad key); its final status + 1. */
static long amo_until_final(gni_ep_handle_t ep, uint64_t *buf, gni_mem_handle_t bh, uint64_t va, gni_mem_handle_t h) {
  long st = -1;
  for (int tries = 0; tries < 30; ++tries) {
    if (tries) {
      struct timespec pause = {0, 100000000};
      nanosleep(&pause, NULL);
    }
    gni_post_descriptor_t d;
    fabric_desc(&d, GNI_POST_AMO, buf, bh, va, h, 8);
    d.amo_cmd = GNI_FMA_ATOMIC_FADD;
    d.first_operand = 1;
    gni_return_t rc = GNI_PostFma(ep, &d);
    st = rc == GNI_RC_SUCCESS ? wait_any() : -100 - rc;
    if (st <= 0 || !last_recoverable) break;
  }
  return st;
}

static int errors_mode(gni_ep_handle_t *ep, const struct peer_info *all, const uint8_t *win) {
  uint8_t *page = aligned_alloc(4096, 4096), *buf = aligned_alloc(4096, 4096), *ro = aligned_alloc(4096, 4096);
  gni_mem_handle_t ph = {0, 0}, bh = {0, 0}, rh = {0, 0};
  if (!page || !buf || !ro) return fail("alloc", 0);
  memset(page, 0xA5, 4096);
  memset(buf, 0x5A, 4096);
  memset(ro, 0xC3, 4096);
  if (GNI_MemRegister(nic, (uint64_t)buf, 4096, NULL, GNI_MEM_READWRITE, -1, &bh) != GNI_RC_SUCCESS)
    return fail("register", 0);
  if (rank == 1 && GNI_MemRegister(nic, (uint64_t)page, 4096, NULL, GNI_MEM_READWRITE, -1, &ph) != GNI_RC_SUCCESS)
    return fail("register page", 0);
  if (rank == 1 && GNI_MemRegister(nic, (uint64_t)ro, 4096, NULL, GNI_MEM_READ_ONLY, -1, &rh) != GNI_RC_SUCCESS)
    return fail("register read-only page", 0);
  struct { uint64_t va; gni_mem_handle_t h; uint64_t ro_va; gni_mem_handle_t ro_h; } mine = {(uint64_t)page, ph, (uint64_t)ro, rh},
                                                                                     got[MAX_RANKS];
  if (PMI_Allgather(&mine, got, sizeof mine) != PMI_SUCCESS) return fail("PMI_Allgather", 0);
  if (rank == 1 && GNI_MemDeregister(nic, &ph) != GNI_RC_SUCCESS) return fail("deregister", 0);
  PMI_Barrier();
  int bad = 0;
  if (rank == 0) {
    gni_post_descriptor_t d;
    const struct { gni_post_type_t t; int rdma; const char *name; } posts[] = {
        {GNI_POST_RDMA_PUT, 1, "RDMA PUT"}, {GNI_POST_FMA_PUT, 0, "FMA PUT"}, {GNI_POST_FMA_GET, 0, "FMA GET"},
        {GNI_POST_FMA_PUT, 0, "FMA PUT with a remote event"}, {GNI_POST_AMO, 0, "AMO FADD"},
        {GNI_POST_FMA_GET, 0, "FMA GET with a remote event"}};
    for (int i = 0; i < 6; ++i) {
      fabric_desc(&d, posts[i].t, buf, bh, got[1].va, got[1].h, posts[i].t == GNI_POST_AMO ? 8 : 256);
      if (i == 3 || i == 5) d.cq_mode |= GNI_CQMODE_REMOTE_EVENT;
      if (posts[i].t == GNI_POST_AMO) {
        d.amo_cmd = GNI_FMA_ATOMIC_FADD;
        d.first_operand = 1;
      }
      gni_return_t rc = posts[i].rdma ? GNI_PostRdma(ep[1], &d) : GNI_PostFma(ep[1], &d);
      long st = rc == GNI_RC_SUCCESS ? wait_any() : -100 - rc;
      if (st > 0) printf("fabric_rma errors: %s through a deregistered handle: error event, status %ld\n", posts[i].name, st - 1);
      else { bad = 1; fail(posts[i].name, st); }
    }
  }
  if (rank == 0) {
    gni_post_descriptor_t d;
    /* AMOs, executed by the target (the daemons' responder, or its own progress thread on the
     * ofi fabric), checked against its table: the exact error, once a dropped connection is
     * past. */
    long st = amo_until_final(ep[1], (uint64_t *)buf, bh, got[1].va, got[1].h);
    if (st == 1 + 1 /* protection */) printf("fabric_rma errors: AMO into a deregistered handle: PROTECTION\n");
    else { bad = 1; fail("AMO into a deregistered handle, want PROTECTION, status+1", st); }
    st = amo_until_final(ep[1], (uint64_t *)buf, bh, got[1].ro_va, got[1].ro_h);
    if (st == 1 + 3 /* read-only */) printf("fabric_rma errors: AMO into a read-only registration: READ_ONLY\n");
    else { bad = 1; fail("AMO into a read-only registration, want READ_ONLY, status+1", st); }
    /* The ofi fabric's tcp provider drops the connection on a key its target does not know:
     * a post racing that completes with a recoverable error, and is reposted as a client
     * would (GNI_CqErrorRecoverable), after a pause. */
    st = -1;
    for (int tries = 0; tries < 30; ++tries) {
      if (tries) {
        struct timespec pause = {0, 100000000}; /* the provider reconnects meanwhile */
        nanosleep(&pause, NULL);
      }
      fabric_desc(&d, GNI_POST_RDMA_PUT, buf, bh, all[1].win + 4096, all[1].win_h, 4096);
      gni_return_t rc = GNI_PostRdma(ep[1], &d);
      st = rc == GNI_RC_SUCCESS ? wait_any() : -100 - rc;
      if (st <= 0 || !last_recoverable) break;
    }
    if (st != 0) { bad = 1; fail("PUT into the live window after the errors", st); }
    /* A chain of three CQ writes whose middle member names the deregistered handle: one
     * event, with that member's status (the lowest-indexed failure), the others delivered.
     * Reposted while that status is recoverable (a connection the provider dropped). */
    for (int tries = 0; tries < 30; ++tries) {
      static gni_ct_cqw_post_descriptor_t cqw[2];
      const uint64_t tag = CHAIN_ERR_TAG | ((uint64_t)tries << 8);
      memset(&d, 0, sizeof d);
      d.type = GNI_POST_CQWRITE;
      d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
      d.remote_mem_hndl = all[1].win_h;
      d.cqwrite_value = tag | 0;
      d.next_descr = &cqw[0];
      cqw[0] = (gni_ct_cqw_post_descriptor_t){.next_descr = &cqw[1], .ep_hndl = ep[1], .remote_mem_hndl = got[1].h,
                                              .cqwrite_value = tag | 1};
      cqw[1] = (gni_ct_cqw_post_descriptor_t){.ep_hndl = ep[1], .remote_mem_hndl = all[1].win_h,
                                              .cqwrite_value = tag | 2};
      gni_return_t rc = GNI_CtPostCqWrite(ep[1], &d);
      st = rc == GNI_RC_SUCCESS ? wait_any() : -100 - rc;
      if (st > 0 && last_recoverable) continue;
      gni_cq_entry_t e;
      if (GNI_CqGetEvent(cq, &e) != GNI_RC_NOT_DONE) { bad = 1; fail("a second event for one chain", 0); }
      break;
    }
    if (st > 0)
      printf("fabric_rma errors: chained CQ write through a deregistered handle: one event, status %ld\n", st - 1);
    else { bad = 1; fail("chained CQ write with a stale member, want an error event", st); }
  }
  PMI_Barrier();
  if (rank == 1) {
    /* The chain's live members' entries (of its last try at least), never the stale one's. */
    int live[3] = {0, 0, 0};
    gni_cq_entry_t e;
    gni_return_t rc;
    while ((rc = GNI_CqGetEvent(rcq, &e)) == GNI_RC_SUCCESS) {
      const uint64_t v = GNI_CQ_GET_DATA(e);
      if ((v & ~0xFFFFull) != CHAIN_ERR_TAG || (v & 0xFF) > 2) {
        bad = 1;
        fail("an unexpected CQ write", (long)v);
        continue;
      }
      ++live[v & 0xFF];
    }
    if (rc != GNI_RC_NOT_DONE) { bad = 1; fail("remote CQ", rc); }
    if (live[0] && live[2] && !live[1])
      printf("fabric_rma errors: chained CQ write: the live members' entries delivered, the stale one's not\n");
    else { bad = 1; fail("chained CQ write entries (first, stale, last)", live[0] * 100 + live[1] * 10 + live[2]); }
    for (int i = 0; i < 4096; ++i)
      if (page[i] != 0xA5) { bad = 1; fail("stray write into the deregistered page", i); break; }
    for (int i = 0; i < 4096; ++i)
      if (ro[i] != 0xC3) { bad = 1; fail("stray write into the read-only page", i); break; }
    if (!bad) printf("fabric_rma errors: the deregistered page is untouched\n");
    if (!bad) printf("fabric_rma errors: the read-only page is untouched\n");
    /* The PUT after the errors (rank 0's buffer, 0x5A) is in our window. */
    int landed = 1;
    for (int i = 0; i < 4096; ++i)
      if (win[4096 + i] != 0x5A) { landed = 0; bad = 1; fail("the PUT after the errors: byte", i); break; }
    if (landed) printf("fabric_rma errors: the PUT after the errors landed\n");
    GNI_MemDeregister(nic, &rh);
  }
  free(ro);
  free(page);
  free(buf);
  return bad;
}

/* `fabric_rma rekey` (2 ranks): a registration replaced under a handle its peer has used.
 * Rank 1 registers a page; rank 0 PUTs into it (with provider keys the key is asked, then
 * cached); rank 1 deregisters the page and registers it again (the same handle bits or
 * other ones); rank 0 PUTs through the old handle once: with other bits it must fail and
 * write nothing, with the same bits it may fail (a stale cached key: the target's provider
 * refuses it) or land; then through the new handle, reposted while the error is
 * recoverable: it lands. Rank 1 checks the bytes after each step. */
static long put_until_final(gni_ep_handle_t ep, void *buf, gni_mem_handle_t bh, uint64_t va, gni_mem_handle_t h,
                            int repost) {
  long st = -1;
  for (int tries = 0; tries < (repost ? 30 : 1); ++tries) {
    if (tries) {
      struct timespec pause = {0, 100000000};
      nanosleep(&pause, NULL);
    }
    gni_post_descriptor_t d;
    fabric_desc(&d, GNI_POST_FMA_PUT, buf, bh, va, h, 256);
    gni_return_t rc = GNI_PostFma(ep, &d);
    st = rc == GNI_RC_SUCCESS ? wait_any() : -100 - rc;
    if (st <= 0 || !last_recoverable) break;
  }
  return st;
}

static int rekey_mode(gni_ep_handle_t *ep) {
  uint8_t *page = aligned_alloc(4096, 4096), *buf = aligned_alloc(4096, 4096);
  gni_mem_handle_t ph = {0, 0}, bh = {0, 0};
  if (!page || !buf) return fail("alloc", 0);
  memset(page, 0, 4096);
  if (GNI_MemRegister(nic, (uint64_t)buf, 4096, NULL, GNI_MEM_READWRITE, -1, &bh) != GNI_RC_SUCCESS)
    return fail("register", 0);
  if (rank == 1 && GNI_MemRegister(nic, (uint64_t)page, 4096, NULL, GNI_MEM_READWRITE, -1, &ph) != GNI_RC_SUCCESS)
    return fail("register page", 0);
  struct { uint64_t va; gni_mem_handle_t h; } mine = {(uint64_t)page, ph}, got[MAX_RANKS], again[MAX_RANKS];
  if (PMI_Allgather(&mine, got, sizeof mine) != PMI_SUCCESS) return fail("PMI_Allgather", 0);
  int bad = 0;
  long st = 0;
  if (rank == 0) {
    memset(buf, 0x11, 4096);
    if ((st = put_until_final(ep[1], buf, bh, got[1].va, got[1].h, 1)) != 0) { bad = 1; fail("first PUT, status+1", st); }
  }
  PMI_Barrier();
  int same = 0;
  if (rank == 1) {
    for (int i = 0; i < 256; ++i)
      if (page[i] != 0x11) { bad = 1; fail("first PUT: byte", i); break; }
    memset(page, 0xA5, 4096);
    if (GNI_MemDeregister(nic, &ph) != GNI_RC_SUCCESS) return fail("deregister", 0);
    if (GNI_MemRegister(nic, (uint64_t)page, 4096, NULL, GNI_MEM_READWRITE, -1, &ph) != GNI_RC_SUCCESS)
      return fail("register again", 0);
    mine.h = ph;
  }
  if (PMI_Allgather(&mine, again, sizeof mine) != PMI_SUCCESS) return fail("PMI_Allgather", 0);
  same = again[1].h.qword1 == got[1].h.qword1 && again[1].h.qword2 == got[1].h.qword2;
  if (rank == 0) {
    memset(buf, 0x22, 4096);
    st = put_until_final(ep[1], buf, bh, got[1].va, got[1].h, 0);
    printf("fabric_rma rekey: re-registered with %s handle bits; PUT through the old handle: %s (status+1 %ld)\n",
           same ? "the same" : "other", st > 0 ? "error event" : st == 0 ? "landed" : "no event", st);
    if (st < 0 || (!same && st == 0)) { bad = 1; fail("PUT through the replaced handle, status+1", st); }
  }
  long sts[MAX_RANKS];
  if (PMI_Allgather(&st, sts, sizeof st) != PMI_SUCCESS) return fail("PMI_Allgather", 0);
  const long old_st = sts[0];
  PMI_Barrier();
  if (rank == 1) {
    /* Written only where the handle's bits are the same and the post succeeded. */
    const uint8_t want = same && old_st == 0 ? 0x22 : 0xA5;
    for (int i = 0; i < 256; ++i)
      if (page[i] != want) { bad = 1; fail("after the PUT through the old handle: byte", i); break; }
    if (!bad) printf("fabric_rma rekey: the new registration holds %s\n", want == 0xA5 ? "its own bytes (untouched)" : "the PUT");
  }
  PMI_Barrier();
  if (rank == 0) {
    memset(buf, 0x33, 4096);
    if ((st = put_until_final(ep[1], buf, bh, again[1].va, again[1].h, 1)) != 0) { bad = 1; fail("PUT through the new handle, status+1", st); }
  }
  PMI_Barrier();
  if (rank == 1) {
    for (int i = 0; i < 256; ++i)
      if (page[i] != 0x33) { bad = 1; fail("PUT through the new handle: byte", i); break; }
    GNI_MemDeregister(nic, &ph);
  }
  if (!bad) printf("fabric_rma rekey: rank %d verified\n", rank);
  GNI_MemDeregister(nic, &bh);
  free(page);
  free(buf);
  return bad;
}

/* `fabric_rma touch [N]` (2 ranks, a benchmark): the first post to a handle against the next
 * ones. N times: rank 1 registers a page of its own (another VA each time, so another handle),
 * rank 0 times an 8-byte FMA PUT round trip (post to its event) into it twice, rank 1
 * deregisters it. With provider keys the first asks the target for the key (one more round
 * trip), the second finds it cached. Prints the medians of both, in microseconds. */
static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static int touch_mode(gni_ep_handle_t *ep, long n) {
  uint8_t *pages = aligned_alloc(4096, (size_t)n * 4096), *buf = aligned_alloc(4096, 4096);
  double *first = calloc((size_t)n, sizeof *first), *next = calloc((size_t)n, sizeof *next);
  gni_mem_handle_t bh = {0, 0};
  if (!pages || !buf || !first || !next) return fail("alloc", 0);
  memset(buf, 0x5A, 4096);
  if (GNI_MemRegister(nic, (uint64_t)buf, 4096, NULL, GNI_MEM_READWRITE, -1, &bh) != GNI_RC_SUCCESS)
    return fail("register", 0);
  int bad = 0;
  for (long i = 0; i < n && !bad; ++i) {
    struct { uint64_t va; gni_mem_handle_t h; } mine = {(uint64_t)(pages + i * 4096), {0, 0}}, got[MAX_RANKS];
    if (rank == 1 && GNI_MemRegister(nic, mine.va, 4096, NULL, GNI_MEM_READWRITE, -1, &mine.h) != GNI_RC_SUCCESS)
      return fail("register page", i);
    if (PMI_Allgather(&mine, got, sizeof mine) != PMI_SUCCESS) return fail("PMI_Allgather", 0);
    if (rank == 0) {
      for (int k = 0; k < 2 && !bad; ++k) {
        gni_post_descriptor_t d;
        fabric_desc(&d, GNI_POST_FMA_PUT, buf, bh, got[1].va, got[1].h, 8);
        const double t0 = fabric_now_s();
        long st = GNI_PostFma(ep[1], &d) == GNI_RC_SUCCESS ? wait_any() : -1;
        (k ? next : first)[i] = (fabric_now_s() - t0) * 1e6;
        if (st != 0) { bad = 1; fail("PUT, status+1", st); }
      }
    }
    PMI_Barrier();
    if (rank == 1) GNI_MemDeregister(nic, &mine.h);
  }
  if (rank == 0 && !bad) {
    qsort(first, (size_t)n, sizeof *first, cmp_double);
    qsort(next, (size_t)n, sizeof *next, cmp_double);
    printf("fabric_rma touch: %ld handles: first PUT 8 B round trip median %.1f us, second %.1f us\n", n, first[n / 2],
           next[n / 2]);
  }
  GNI_MemDeregister(nic, &bh);
  free(first);
  free(next);
  free(pages);
  free(buf);
  return bad;
}

/* `fabric_rma amo`: the AMO cases, generated from the opcode bits of the fact sheet
 * (gni_pub.h's gni_fma_cmd_type_t): gen-1 ops 0x8..0xD (+0x10 cached, +0x100 non-fetching;
 * CSWAP fetching only), gen-2 op << 1 | 0x40 (+1 for 64-bit, +0x200 for 32-bit, +0x20 cached,
 * +0x100 non-fetching). */
enum amo_op { A_ADD, A_AND, A_OR, A_XOR, A_AX, A_CSWAP, A_SWAP, A_IMIN, A_IMAX, A_FPMIN, A_FPMAX, A_FPADD };
struct amo_case {
  uint32_t cmd;
  enum amo_op op;
  int size, fetching;
  uint64_t init, a, b;
};
#define AMO_WORDS 1024u /* the cases' target words: at win + AMO_WORDS + 8 * i */
#define AMO_MAX 128

static uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t fbits(double v, int size) {
  if (size == 8) { uint64_t u; memcpy(&u, &v, 8); return u; }
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static int amo_cases(struct amo_case *c) {
  static const struct { uint32_t code; enum amo_op op; } g1[] = {
      {0x8, A_ADD}, {0x9, A_AND}, {0xA, A_OR}, {0xB, A_XOR}, {0xC, A_AX}, {0xD, A_CSWAP}};
  static const struct { uint32_t code; enum amo_op op; } g2[] = {
      {0, A_AND}, {1, A_OR}, {2, A_XOR}, {3, A_SWAP}, {4, A_AX}, {5, A_CSWAP},
      {8, A_IMIN}, {9, A_IMAX}, {10, A_ADD}, {12, A_FPMIN}, {13, A_FPMAX}, {14, A_FPADD}};
  int n = 0;
  for (int i = 0; i < 6; ++i)
    for (int nf = 0; nf < 2; ++nf)
      for (int cached = 0; cached < 2; ++cached) {
        if (nf && g1[i].op == A_CSWAP) continue;
        c[n++] = (struct amo_case){g1[i].code | (cached ? 0x10u : 0) | (nf ? 0x100u : 0), g1[i].op, 8, !nf, 0, 0, 0};
      }
  for (int i = 0; i < 12; ++i)
    for (int nf = 0; nf < 2; ++nf)
      for (int cached = 0; cached < 2; ++cached)
        for (int sz = 0; sz < 2; ++sz)
          c[n++] = (struct amo_case){0x40u | g2[i].code << 1 | (sz ? 0x200u : 1u) | (cached ? 0x20u : 0) |
                                         (nf ? 0x100u : 0),
                                     g2[i].op, sz ? 4 : 8, !nf, 0, 0, 0};
  /* Operands: AX with disjoint bits in even cases (a masked swap), overlapping in odd ones;
   * CSWAP matching in even cases; signed and floating values for the min/max/add. */
  for (int i = 0; i < n; ++i) {
    const uint64_t m = c[i].size == 8 ? ~0ull : 0xFFFFFFFFull;
    uint64_t x = mix64((uint64_t)i * 3 + 1) & m, a = mix64((uint64_t)i * 3 + 2) & m, b = mix64((uint64_t)i * 3 + 3) & m;
    switch (c[i].op) {
      case A_AX: if (i % 2 == 0) b &= ~a; else b |= a & (0 - a); break; /* odd: the lowest bit of a in b too */
      case A_CSWAP: if (i % 2 == 0) a = x; break;
      case A_FPMIN: case A_FPMAX: case A_FPADD:
        x = fbits(1.5 * (i + 1), c[i].size);
        a = fbits(i % 2 ? -2.25 * i : 0.75 * i + 0.5, c[i].size);
        break;
      default: break;
    }
    c[i].init = x, c[i].a = a, c[i].b = b;
  }
  return n;
}

/* What the target word becomes (amo_alu.h's decisions; the values here have no NaN or -0). */
static uint64_t amo_expect(const struct amo_case *c) {
  const uint64_t m = c->size == 8 ? ~0ull : 0xFFFFFFFFull, o = c->init & m, a = c->a & m, b = c->b & m;
  double x, y;
  if (c->size == 8) { memcpy(&x, &o, 8); memcpy(&y, &a, 8); }
  else { float fx, fy; uint32_t u = (uint32_t)o, v = (uint32_t)a; memcpy(&fx, &u, 4); memcpy(&fy, &v, 4); x = fx, y = fy; }
  const int64_t so = c->size == 8 ? (int64_t)o : (int32_t)(uint32_t)o, sa = c->size == 8 ? (int64_t)a : (int32_t)(uint32_t)a;
  switch (c->op) {
    case A_ADD: return (o + a) & m;
    case A_AND: return o & a;
    case A_OR: return o | a;
    case A_XOR: return o ^ a;
    case A_AX: return (o & a) ^ b;
    case A_CSWAP: return o == a ? b : o;
    case A_SWAP: return a;
    case A_IMIN: return sa < so ? a : o;
    case A_IMAX: return sa > so ? a : o;
    case A_FPMIN: return y < x ? a : o;
    case A_FPMAX: return y > x ? a : o;
    case A_FPADD: return fbits(c->size == 8 ? x + y : (double)((float)x + (float)y), c->size);
  }
  return o;
}

#define EV_FMA 0xE1000000u
#define EV_RDMA 0xE2000000u
#define EV_SYNC 0xE3000000u
#define EV_GET 0xE4000000u

static int amo_mode(gni_ep_handle_t *ep, const struct peer_info *all, uint8_t *win) {
  static struct amo_case c[AMO_MAX];
  const int n = amo_cases(c);
  const int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  gni_nic_device_t dev = GNI_DEVICE_ARIES;
  GNI_GetDeviceType(&dev);
  /* Our words, as the rank before us will find them (upper halves of 4-byte words: a marker). */
  for (int i = 0; i < n; ++i) {
    uint64_t w = c[i].size == 8 ? c[i].init : (0x5EED0000ull << 32) | c[i].init;
    memcpy(win + AMO_WORDS + 8 * (uint64_t)i, &w, 8);
  }
  uint64_t *res = aligned_alloc(4096, 4096);
  uint8_t *src = aligned_alloc(4096, 1 << 16);
  gni_mem_handle_t rh, sh;
  if (!res || !src || GNI_MemRegister(nic, (uint64_t)res, 4096, NULL, GNI_MEM_READWRITE, -1, &rh) != GNI_RC_SUCCESS ||
      GNI_MemRegister(nic, (uint64_t)src, 1 << 16, NULL, GNI_MEM_READWRITE, -1, &sh) != GNI_RC_SUCCESS)
    return fail("register", 0);
  PMI_Barrier();
  int posted = 0;
  uint64_t digest = 0; /* of every fetched value and target word: equal on every path */
  gni_post_descriptor_t d;
  for (int i = 0; i < n; ++i) {
    if (dev == GNI_DEVICE_GEMINI && (c[i].cmd & 0x40)) continue; /* Aries opcodes on an Aries NIC only */
    res[i] = 0xFEEDFACECAFEBEEFull;
    fabric_desc(&d, GNI_POST_AMO, &res[i], rh, all[to].win + AMO_WORDS + 8 * (uint64_t)i, all[to].win_h, (uint64_t)c[i].size);
    memcpy(&d.amo_cmd, &c[i].cmd, sizeof c[i].cmd);
    d.first_operand = c[i].a;
    d.second_operand = c[i].b;
    long st = post_wait(ep[to], &d, 0);
    if (st != 0) { fprintf(stderr, "fabric_rma rank %d: AMO 0x%03x: status %ld\n", rank, c[i].cmd, st); return 1; }
    const uint64_t want = c[i].fetching ? (c[i].size == 8 ? c[i].init : (0xFEEDFACEull << 32) | (c[i].init & 0xFFFFFFFFull))
                                        : 0xFEEDFACECAFEBEEFull;
    if (res[i] != want) {
      fprintf(stderr, "fabric_rma rank %d: AMO 0x%03x fetched %#llx, want %#llx\n", rank, c[i].cmd,
              (unsigned long long)res[i], (unsigned long long)want);
      return 1;
    }
    ++posted;
    digest = mix64(digest ^ res[i]);
  }
  /* PUTs with remote events (the EP's event data names which), a sync flag with one and
   * one without, a GET with a remote event (on the ofi fabric: the read, then a message).
   * The flags at win + 3072 + 8 * k of the target. */
  const uint64_t slot = all[to].win + 4096 + (uint64_t)rank * SLOT;
  const struct { gni_post_type_t t; int rdma, event; uint32_t ev; uint64_t len; } puts[] = {
      {GNI_POST_FMA_PUT, 0, 1, EV_FMA, 512}, {GNI_POST_RDMA_PUT, 1, 1, EV_RDMA, 1 << 16},
      {GNI_POST_FMA_PUT_W_SYNCFLAG, 0, 1, EV_SYNC, 2048}, {GNI_POST_FMA_PUT_W_SYNCFLAG, 0, 0, 0, 1024},
      {GNI_POST_FMA_GET, 0, 1, EV_GET, 256}};
  for (int k = 0; k < 5; ++k) {
    fill(src, puts[k].len, (uint32_t)(rank * 10 + k));
    if (GNI_EpSetEventData(ep[to], 7, puts[k].ev | (uint32_t)rank) != GNI_RC_SUCCESS) return fail("EpSetEventData", k);
    fabric_desc(&d, puts[k].t, src, sh, slot + (uint64_t)k * (1 << 16), all[to].win_h, puts[k].len);
    if (puts[k].event) d.cq_mode |= GNI_CQMODE_REMOTE_EVENT;
    d.sync_flag_addr = all[to].win + 3072 + 8 * (uint64_t)k;
    d.sync_flag_value = 0xF1A60000ull | (uint64_t)k << 8 | (uint64_t)rank;
    long st = post_wait(ep[to], &d, puts[k].rdma);
    if (st != 0) return fail("PUT with a remote event or sync flag", st);
  }
  PMI_Barrier();
  /* What the rank before us did here. */
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    if (dev == GNI_DEVICE_GEMINI && (c[i].cmd & 0x40)) continue;
    uint64_t w, want = amo_expect(&c[i]);
    memcpy(&w, win + AMO_WORDS + 8 * (uint64_t)i, 8);
    digest = mix64(digest ^ w);
    if (c[i].size == 4) want |= 0x5EED0000ull << 32;
    if (w != want) {
      fprintf(stderr, "fabric_rma rank %d: word of AMO 0x%03x is %#llx, want %#llx\n", rank, c[i].cmd,
              (unsigned long long)w, (unsigned long long)want);
      bad = 1;
    }
  }
  const uint64_t mine = 4096 + (uint64_t)from * SLOT;
  for (int k = 0; k < 4; ++k) {
    fill(src, puts[k].len, (uint32_t)(from * 10 + k));
    if (memcmp(win + mine + (uint64_t)k * (1 << 16), src, puts[k].len) != 0) bad = fail("PUT bytes", k);
    uint64_t flag;
    memcpy(&flag, win + 3072 + 8 * (uint64_t)k, 8);
    if (puts[k].t == GNI_POST_FMA_PUT_W_SYNCFLAG && flag != (0xF1A60000ull | (uint64_t)k << 8 | (uint64_t)from))
      bad = fail("sync flag", (long)flag);
  }
  /* The events may trail the initiators' completions (the target's progress pushes them):
   * waited for, then none more. */
  int events = 0;
  for (;;) {
    gni_cq_entry_t e;
    gni_return_t rc = events < 4 ? GNI_CqWaitEvent(rcq, 5000, &e) : GNI_CqGetEvent(rcq, &e);
    if (rc == GNI_RC_NOT_DONE || rc == GNI_RC_TIMEOUT) break;
    if (rc != GNI_RC_SUCCESS || !GNI_CQ_STATUS_OK(e) || GNI_CQ_GET_TYPE(e) != GNI_CQ_EVENT_TYPE_POST) {
      bad = fail("remote event: not a good POST event", (long)rc);
      continue;
    }
    const uint32_t ev = (uint32_t)GNI_CQ_GET_REM_INST_ID(e);
    const uint64_t want_src = (ev & 0xFF000000u) == EV_RDMA ? 6 : 5; /* remote DMA / remote request */
    if ((ev & 0xFFFFFFu) != (uint32_t)from || ((ev & 0xFF000000u) != EV_FMA && (ev & 0xFF000000u) != EV_RDMA &&
                                               (ev & 0xFF000000u) != EV_SYNC && (ev & 0xFF000000u) != EV_GET) || GNI_CQ_GET_SOURCE(e) != want_src) {
      fprintf(stderr, "fabric_rma rank %d: remote event %#x source %llu\n", rank, ev, (unsigned long long)GNI_CQ_GET_SOURCE(e));
      bad = 1;
    }
    ++events;
  }
  if (events != 4) bad = fail("remote events (want 4)", events);
  if (!bad)
    printf("fabric_rma amo: %d AMOs verified (fetched and target words); 4 remote events and 2 sync flags "
           "verified; digest %016llx\n", posted, (unsigned long long)digest);
  PMI_Barrier();
  GNI_MemDeregister(nic, &rh);
  GNI_MemDeregister(nic, &sh);
  free(res);
  free(src);
  return bad;
}

/* `fabric_rma atomic N`: every rank but 0 adds 1 to rank 0's counter N times (FADD and ADD
 * alternating), ranks of rank 0's host through shared memory, the others across the fabric,
 * all at once; rank 0 then finds exactly (nranks - 1) * N, and each FADD fetched a value
 * below that. */
static int atomic_mode(gni_ep_handle_t *ep, const struct peer_info *all, uint8_t *win, long iters) {
  uint64_t *res = aligned_alloc(4096, 4096);
  gni_mem_handle_t rh;
  if (!res || GNI_MemRegister(nic, (uint64_t)res, 4096, NULL, GNI_MEM_READWRITE, -1, &rh) != GNI_RC_SUCCESS)
    return fail("register", 0);
  const uint64_t total = (uint64_t)(nranks - 1) * (uint64_t)iters;
  PMI_Barrier();
  int bad = 0;
  double t0 = fabric_now_s();
  if (rank != 0) {
    for (long i = 0; i < iters && !bad; ++i) {
      gni_post_descriptor_t d;
      *res = ~0ull;
      fabric_desc(&d, GNI_POST_AMO, res, rh, all[0].win + 2048, all[0].win_h, 8);
      d.amo_cmd = i % 2 ? GNI_FMA_ATOMIC_ADD : GNI_FMA_ATOMIC_FADD;
      d.first_operand = 1;
      long st = post_wait(ep[0], &d, 0);
      if (st != 0) bad = fail("AMO on the shared counter", st);
      else if (!(i % 2) && *res >= total) bad = fail("FADD fetched an impossible value", (long)*res);
    }
  }
  const double secs = fabric_now_s() - t0;
  PMI_Barrier();
  if (rank == 0) {
    const uint64_t got = *(volatile uint64_t *)(win + 2048);
    if (got != total) bad = fail("shared counter after every rank's AMOs", (long)got);
    else printf("fabric_rma atomic: counter %llu = %d ranks x %ld AMOs, exact\n", (unsigned long long)got, nranks - 1, iters);
  } else if (!bad) {
    printf("fabric_rma atomic: rank %d: %ld AMOs, %.1f us each\n", rank, iters, secs / (double)iters * 1e6);
  }
  PMI_Barrier();
  GNI_MemDeregister(nic, &rh);
  free(res);
  return bad;
}

/* `fabric_rma order N`: rank 0 -> rank 1, N pairs of posts to one word each, two posts of
 * a pair back to back (up to ORDER_BURST posts in flight), in three classes: default (the
 * window), strict by the post (GNI_DLVMODE_IN_ORDER) and strict by the target registration
 * (GNI_MEM_STRICT_PI_ORDERING). Pairs: AMO FADD 1 then PUT 100 + i (the PUT must not pass the
 * AMO: 100 + i); PUT 100 + i then AMO FADD 1 (101 + i); GET then PUT 100 + i (the GET reads
 * the old value); PUT 100 + i then a CQ write naming i (rank 1 finds the word written when it
 * takes the CQ write's event); strict classes also PUT then GET (the new value). Then
 * order_smsg. Rank 1 checks its words at the end, rank 0 what its GETs read (docs/ordering.md). */
#define ORDER_PATTERNS 5
#define ORDER_BURST 64
enum { ORD_AMO_PUT, ORD_PUT_AMO, ORD_GET_PUT, ORD_PUT_CQW, ORD_PUT_GET };
static uint64_t order_old(int cls, int pat, long i) { return 7 + 1000 * (uint64_t)(cls * ORDER_PATTERNS + pat) + (uint64_t)i; }
/* Context switches of this process so far (every thread): the timing lines say how many a
 * pair cost, where the wake-ups of a held stream are (bench/run-ofi-held). */
static long order_csw(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_nvcsw + ru.ru_nivcsw;
}

/* PUT then an SMSG message naming the word (posted after posted: in order in the default and
 * strict classes), `n` each with the NIC's SMSG delivery mode and the PUTs' dlvr_mode default,
 * then GNI_DLVMODE_IN_ORDER; words `base` .. `base + 2n - 1` of the order window. Rank 1
 * finds each word written when its message arrives. */
static int order_smsg(gni_ep_handle_t ep, uint64_t *tw, uint64_t base, uint64_t raddr, gni_mem_handle_t rh,
                      uint64_t *src, gni_mem_handle_t sh, gni_post_descriptor_t *descs, long n) {
  int bad = 0;
  long early = 0, msgs = 0;
  if (rank == 0) {
    long in_flight = 0;
    const double t0 = fabric_now_s();
    for (int cls = 0; cls < 2 && !bad; ++cls) {
      GNI_SmsgSetDeliveryMode(nic, cls ? GNI_DLVMODE_IN_ORDER : GNI_DLVMODE_PERFORMANCE);
      for (long i = 0; i < n && !bad; ++i) {
        uint64_t w = base + (uint64_t)cls * (uint64_t)n + (uint64_t)i;
        src[w] = 100 + (uint64_t)i;
        gni_post_descriptor_t *d = &descs[2 * w];
        fabric_desc(d, GNI_POST_FMA_PUT, &src[w], sh, raddr + 8 * w, rh, 8);
        d->dlvr_mode = cls ? GNI_DLVMODE_IN_ORDER : GNI_DLVMODE_PERFORMANCE;
        gni_return_t rc = GNI_PostFma(ep, d);
        if (rc != GNI_RC_SUCCESS) bad = fail("order: SMSG phase PUT", rc);
        ++in_flight;
        int sent = 0;
        const double until = fabric_now_s() + 30;
        while (!bad && (!sent || in_flight >= ORDER_BURST || (i == n - 1 && in_flight > 0))) {
          if (!sent) {
            rc = GNI_SmsgSend(ep, &w, sizeof w, NULL, 0, (uint32_t)w);
            if (rc == GNI_RC_SUCCESS) sent = 1, ++in_flight;
            else if (rc != GNI_RC_NOT_DONE) bad = fail("order: GNI_SmsgSend", rc);
            else if (fabric_now_s() > until) bad = fail("order: no SMSG credits for 30 s", (long)i);
            if (sent || bad) continue;
          }
          gni_cq_entry_t e;
          rc = in_flight ? GNI_CqWaitEvent(cq, 100, &e) : GNI_RC_NOT_DONE;
          if (rc == GNI_RC_TIMEOUT || rc == GNI_RC_NOT_DONE) continue;
          if (rc != GNI_RC_SUCCESS || !GNI_CQ_STATUS_OK(e)) { bad = fail("order: SMSG phase completion", rc); break; }
          if (GNI_CQ_GET_TYPE(e) != GNI_CQ_EVENT_TYPE_SMSG) {
            gni_post_descriptor_t *cd = NULL;
            if (GNI_GetCompleted(cq, e, &cd) != GNI_RC_SUCCESS || !cd) { bad = fail("order: SMSG phase PUT completion", 0); break; }
          }
          --in_flight;
        }
      }
    }
    GNI_SmsgSetDeliveryMode(nic, GNI_DLVMODE_PERFORMANCE);
    if (!bad)
      printf("fabric_rma order: rank 0: SMSG, PUT then SMSG message: %.2f us per pair\n",
             (fabric_now_s() - t0) / (double)(2 * n) * 1e6);
  } else if (rank == 1) {
    const double until = fabric_now_s() + 60;
    while (msgs < 2 * n && fabric_now_s() < until) {
      gni_cq_entry_t e;
      while (GNI_CqGetEvent(rcq, &e) == GNI_RC_SUCCESS) {} /* the messages' remote events */
      void *m = NULL;
      gni_return_t rc = GNI_SmsgGetNext(ep, &m);
      if (rc == GNI_RC_NOT_DONE) continue;
      if (rc != GNI_RC_SUCCESS) { bad = fail("order: GNI_SmsgGetNext", rc); break; }
      uint64_t w;
      memcpy(&w, m, sizeof w);
      if (w < base || w >= base + 2 * (uint64_t)n) { bad = fail("order: unexpected SMSG message", (long)w); break; }
      if (*(volatile uint64_t *)&tw[w] != 100 + (w - base) % (uint64_t)n && early++ == 0)
        fprintf(stderr, "fabric_rma order: %s, PUT then SMSG message: the message came before the PUT's data (pair %ld)\n",
                w - base < (uint64_t)n ? "default" : "strict (SMSG and PUT GNI_DLVMODE_IN_ORDER)", (long)((w - base) % (uint64_t)n));
      GNI_SmsgRelease(ep);
      ++msgs;
    }
    if (msgs != 2 * n) bad = fail("order: SMSG messages received", msgs);
    if (early) bad = 1;
  }
  return bad;
}

static int order_mode(gni_ep_handle_t *ep, long n) {
  static const char *cls_name[3] = {"default", "strict (GNI_DLVMODE_IN_ORDER)", "strict (GNI_MEM_STRICT_PI_ORDERING)"};
  static const char *pat_name[ORDER_PATTERNS] = {"AMO then PUT", "PUT then AMO", "GET then PUT", "PUT then CQ write",
                                                 "PUT then GET"};
  /* The pairs' words, then the SMSG phase's (order_smsg). */
  const uint64_t words = 3 * ORDER_PATTERNS * (uint64_t)n, all_words = words + 2 * (uint64_t)n;
  const uint64_t bytes = (all_words * 8 + 4095) & ~4095ull;
  /* Targets (rank 1): two registrations, the second strict; sources and GET results (rank 0). */
  uint64_t *tw[2] = {aligned_alloc(4096, bytes), aligned_alloc(4096, bytes)};
  uint64_t *src = aligned_alloc(4096, bytes), *got = aligned_alloc(4096, bytes), *fetched = aligned_alloc(4096, bytes);
  if (!tw[0] || !tw[1] || !src || !got || !fetched) return fail("alloc", 0);
  struct { uint64_t va[2]; gni_mem_handle_t h[2]; } mine, all[MAX_RANKS];
  gni_mem_handle_t sh, gh, fh;
  for (int r = 0; r < 2; ++r) {
    for (uint64_t w = 0; w < all_words; ++w) {
      const int cls = (int)(w / (ORDER_PATTERNS * (uint64_t)n)), pat = (int)(w / (uint64_t)n % ORDER_PATTERNS);
      tw[r][w] = order_old(cls, pat, (long)(w % (uint64_t)n));
    }
    mine.va[r] = (uint64_t)tw[r];
    if (GNI_MemRegister(nic, (uint64_t)tw[r], bytes, rcq, GNI_MEM_READWRITE | (r ? GNI_MEM_STRICT_PI_ORDERING : 0), -1,
                        &mine.h[r]) != GNI_RC_SUCCESS)
      return fail("register the order window", r);
  }
  if (GNI_MemRegister(nic, (uint64_t)src, bytes, NULL, GNI_MEM_READWRITE, -1, &sh) != GNI_RC_SUCCESS ||
      GNI_MemRegister(nic, (uint64_t)got, bytes, NULL, GNI_MEM_READWRITE, -1, &gh) != GNI_RC_SUCCESS ||
      GNI_MemRegister(nic, (uint64_t)fetched, bytes, NULL, GNI_MEM_READWRITE, -1, &fh) != GNI_RC_SUCCESS)
    return fail("register", 0);
  if (PMI_Allgather(&mine, all, sizeof mine) != PMI_SUCCESS) return fail("PMI_Allgather", 0);
  /* An SMSG channel between ranks 0 and 1 (order_smsg), on the EP of the pairs. */
  gni_smsg_attr_t sa, sall[MAX_RANKS];
  memset(&sa, 0, sizeof sa);
  sa.msg_type = GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT;
  sa.mbox_maxcredit = 64;
  sa.msg_maxsize = 64;
  unsigned mb_need = 0;
  if (GNI_SmsgBufferSizeNeeded(&sa, &mb_need) != GNI_RC_SUCCESS) return fail("GNI_SmsgBufferSizeNeeded", 0);
  void *mbox = aligned_alloc(4096, (mb_need + 4095) & ~4095u);
  gni_mem_handle_t mbh;
  if (!mbox) return fail("alloc", 0);
  memset(mbox, 0, mb_need);
  if (GNI_MemRegister(nic, (uint64_t)mbox, mb_need, rcq, GNI_MEM_READWRITE, -1, &mbh) != GNI_RC_SUCCESS)
    return fail("register the mailbox", 0);
  sa.msg_buffer = mbox;
  sa.buff_size = mb_need;
  sa.mem_hndl = mbh;
  if (PMI_Allgather(&sa, sall, sizeof sa) != PMI_SUCCESS) return fail("PMI_Allgather", 1);
  const int peer = rank == 0 ? 1 : 0;
  /* FABRIC_RMA_ORDER_SMSG=0: without the SMSG pairs. */
  const char *smsg_s = getenv("FABRIC_RMA_ORDER_SMSG");
  const int with_smsg = !smsg_s || strcmp(smsg_s, "0") != 0;
  if (with_smsg && rank < 2 && GNI_SmsgInit(ep[peer], &sa, &sall[peer]) != GNI_RC_SUCCESS) return fail("GNI_SmsgInit", peer);
  PMI_Barrier();
  int bad = 0;
  long cqws = 0, cqw_early = 0;
  gni_post_descriptor_t *descs = calloc(2 * all_words, sizeof *descs);
  if (!descs) return fail("alloc", 0);
  if (rank == 0) {
    long in_flight = 0;
    /* FABRIC_RMA_ORDER_STREAM=1 (bench/run-ofi-held): first the cost of pairs nothing holds,
     * PUT then PUT to one word in the default class (one path, which the provider orders or
     * which waits only for writes), timed as the pairs below. Both PUTs write the word's
     * initial value, so the checks below are unchanged. */
    const char *stream_s = getenv("FABRIC_RMA_ORDER_STREAM");
    if (stream_s && strcmp(stream_s, "1") == 0) {
      const double t0 = fabric_now_s();
      const long c0 = order_csw();
      for (long i = 0; i < n && !bad; ++i) {
        src[i] = order_old(0, ORD_AMO_PUT, i);
        for (int k = 0; k < 2; ++k) {
          fabric_desc(&descs[2 * i + k], GNI_POST_FMA_PUT, &src[i], sh, all[1].va[0] + 8 * (uint64_t)i, all[1].h[0], 8);
          gni_return_t rc = GNI_PostFma(ep[1], &descs[2 * i + k]);
          if (rc != GNI_RC_SUCCESS) bad = fail("order: stream PUT", rc);
        }
        in_flight += 2;
        while (!bad && (in_flight >= ORDER_BURST || (i == n - 1 && in_flight > 0))) {
          gni_cq_entry_t e;
          gni_post_descriptor_t *cd = NULL;
          if (GNI_CqWaitEvent(cq, 20000, &e) != GNI_RC_SUCCESS || GNI_GetCompleted(cq, e, &cd) != GNI_RC_SUCCESS || !cd)
            bad = fail("order: a stream completion", 0);
          else if (!GNI_CQ_STATUS_OK(e))
            bad = fail("order: stream error completion", (long)GNI_CQ_GET_STATUS(e));
          --in_flight;
        }
      }
      if (!bad)
        printf("fabric_rma order: rank 0: default, PUT then PUT (nothing held): %.2f us per pair (%d posts in flight at most, "
               "%.2f context switches)\n", (fabric_now_s() - t0) / (double)n * 1e6, ORDER_BURST, (double)(order_csw() - c0) / (double)n);
    }
    for (int cls = 0; cls < 3 && !bad; ++cls) {
      const int reg = cls == 2;
      const uint16_t dlvr = cls == 1 ? GNI_DLVMODE_IN_ORDER : GNI_DLVMODE_PERFORMANCE;
      for (int pat = 0; pat < ORDER_PATTERNS && !bad; ++pat) {
        if (pat == ORD_PUT_GET && cls == 0) continue; /* default: a GET may pass a PUT */
        const double t0 = fabric_now_s();
        const long c0 = order_csw();
        for (long i = 0; i < n && !bad; ++i) {
          const uint64_t w = (uint64_t)(cls * ORDER_PATTERNS + pat) * (uint64_t)n + (uint64_t)i;
          const uint64_t raddr = all[1].va[reg] + 8 * w;
          src[w] = 100 + (uint64_t)i;
          gni_post_descriptor_t *d = &descs[2 * w]; /* until its completion */
          gni_post_descriptor_t *put = &d[pat == ORD_AMO_PUT || pat == ORD_GET_PUT ? 1 : 0], *other = &d[put == d ? 1 : 0];
          fabric_desc(put, GNI_POST_FMA_PUT, &src[w], sh, raddr, all[1].h[reg], 8);
          if (pat == ORD_AMO_PUT || pat == ORD_PUT_AMO) {
            fabric_desc(other, GNI_POST_AMO, &fetched[w], fh, raddr, all[1].h[reg], 8);
            other->amo_cmd = GNI_FMA_ATOMIC_FADD;
            other->first_operand = 1;
          } else if (pat == ORD_PUT_CQW) {
            memset(other, 0, sizeof *other);
            other->type = GNI_POST_CQWRITE;
            other->cq_mode = GNI_CQMODE_GLOBAL_EVENT;
            other->remote_mem_hndl = all[1].h[reg];
            other->cqwrite_value = w;
          } else {
            got[w] = ~0ull;
            fabric_desc(other, GNI_POST_FMA_GET, &got[w], gh, raddr, all[1].h[reg], 8);
          }
          for (int k = 0; k < 2; ++k) {
            d[k].dlvr_mode = dlvr;
            gni_return_t rc = d[k].type == GNI_POST_CQWRITE ? GNI_PostCqWrite(ep[1], &d[k]) : GNI_PostFma(ep[1], &d[k]);
            if (rc != GNI_RC_SUCCESS) bad = fail("post", rc);
          }
          in_flight += 2;
          while (!bad && (in_flight >= ORDER_BURST || (i == n - 1 && in_flight > 0))) {
            gni_cq_entry_t e;
            gni_post_descriptor_t *cd = NULL;
            if (GNI_CqWaitEvent(cq, 20000, &e) != GNI_RC_SUCCESS || GNI_GetCompleted(cq, e, &cd) != GNI_RC_SUCCESS || !cd)
              bad = fail("order: a completion", 0);
            else if (!GNI_CQ_STATUS_OK(e))
              bad = fail("order: error completion", (long)GNI_CQ_GET_STATUS(e));
            --in_flight;
          }
        }
        /* What the order costs where it makes posts wait (a pair's two posts on two paths). */
        if (!bad)
          printf("fabric_rma order: rank 0: %s, %s: %.2f us per pair (%d posts in flight at most, %.2f context switches)\n",
                 cls_name[cls], pat_name[pat], (fabric_now_s() - t0) / (double)n * 1e6, ORDER_BURST,
                 (double)(order_csw() - c0) / (double)n);
      }
    }
    /* Every completion is in: what the GETs read. */
    for (int cls = 0; cls < 3 && !bad; ++cls)
      for (int pat = ORD_GET_PUT; pat <= ORD_PUT_GET; pat += ORD_PUT_GET - ORD_GET_PUT) {
        if (pat == ORD_PUT_GET && cls == 0) continue;
        long wrong = 0, first = -1;
        for (long i = 0; i < n; ++i) {
          const uint64_t w = (uint64_t)(cls * ORDER_PATTERNS + pat) * (uint64_t)n + (uint64_t)i;
          const uint64_t want = pat == ORD_GET_PUT ? order_old(cls, pat, i) : 100 + (uint64_t)i;
          if (got[w] != want && wrong++ == 0) first = i;
        }
        if (wrong) {
          fprintf(stderr, "fabric_rma order: %s, %s: %ld of %ld GETs read the wrong value (first pair %ld)\n",
                  cls_name[cls], pat_name[pat], wrong, n, first);
          bad = 1;
        }
      }
  } else if (rank == 1) {
    /* The CQ writes: each names its word, which must hold the PUT's value already. */
    const long want = 3 * n;
    const double until = fabric_now_s() + 60;
    while (cqws < want && fabric_now_s() < until) {
      gni_cq_entry_t e;
      gni_return_t rc = GNI_CqGetEvent(rcq, &e);
      if (rc == GNI_RC_NOT_DONE) continue;
      if (rc != GNI_RC_SUCCESS) { bad = fail("remote CQ", rc); break; }
      const uint64_t w = GNI_CQ_GET_DATA(e);
      const uint64_t per = ORDER_PATTERNS * (uint64_t)n;
      if (w >= 3 * per || w / (uint64_t)n % ORDER_PATTERNS != ORD_PUT_CQW) { bad = fail("unexpected CQ write", (long)w); break; }
      const int reg = w / per == 2;
      if (*(volatile uint64_t *)&tw[reg][w] != 100 + w % (uint64_t)n) {
        if (cqw_early++ == 0)
          fprintf(stderr, "fabric_rma order: %s, PUT then CQ write: the CQ write came before the PUT's data (pair %ld)\n",
                  cls_name[w / per], (long)(w % (uint64_t)n));
      }
      ++cqws;
    }
    if (cqws != want) bad = fail("order: CQ writes received", cqws);
    if (cqw_early) bad = 1;
  }
  PMI_Barrier();
  if (rank == 1) {
    for (int cls = 0; cls < 3; ++cls)
      for (int pat = 0; pat < ORDER_PATTERNS; ++pat) {
        if (pat == ORD_PUT_GET && cls == 0) continue;
        long wrong = 0, first = -1;
        uint64_t first_v = 0;
        for (long i = 0; i < n; ++i) {
          const uint64_t w = (uint64_t)(cls * ORDER_PATTERNS + pat) * (uint64_t)n + (uint64_t)i;
          const uint64_t v = *(volatile uint64_t *)&tw[cls == 2][w];
          if (v != (pat == ORD_PUT_AMO ? 101 : 100) + (uint64_t)i && wrong++ == 0) first = i, first_v = v;
        }
        if (wrong) {
          fprintf(stderr, "fabric_rma order: %s, %s: %ld of %ld words wrong (pair %ld: %llu, want %llu)\n", cls_name[cls],
                  pat_name[pat], wrong, n, first, (unsigned long long)first_v,
                  (unsigned long long)((pat == ORD_PUT_AMO ? 101 : 100) + first));
          bad = 1;
        }
      }
  }
  /* Both ranks run it whatever the pairs gave (the other waits for it). */
  if (with_smsg && rank < 2 && order_smsg(ep[peer], tw[0], words, all[1].va[0], all[1].h[0], src, sh, descs, n)) bad = 1;
  if (!bad && rank < 2)
    printf("fabric_rma order: rank %d: %ld pairs of each kind in 3 classes%s verified%s\n", rank, n,
           with_smsg ? " and PUT then SMSG in 2" : "",
           rank == 1 ? (with_smsg ? " (words, CQ writes and SMSG messages after their PUTs)" : " (words, CQ writes after their PUTs)")
                     : " (GETs)");
  PMI_Barrier();
  for (int r = 0; r < 2; ++r) GNI_MemDeregister(nic, &mine.h[r]);
  GNI_MemDeregister(nic, &sh);
  GNI_MemDeregister(nic, &gh);
  GNI_MemDeregister(nic, &fh);
  GNI_MemDeregister(nic, &mbh);
  free(mbox);
  free(descs);
  free(tw[0]);
  free(tw[1]);
  free(src);
  free(got);
  free(fetched);
  return bad;
}

static void teardown(gni_cdm_handle_t cdm, gni_ep_handle_t *ep) {
  for (int p = 0; p < nranks; ++p)
    if (ep[p]) GNI_EpDestroy(ep[p]);
  GNI_CqDestroy(cq);
  GNI_CqDestroy(rcq);
  GNI_CdmDestroy(cdm);
}

int main(int argc, char **argv) {
  if (argc != 2 && argc != 3) {
    fprintf(stderr, "usage: fabric_rma ROUNDS [SLOT_BYTES] | fabric_rma bench | fabric_rma errors | fabric_rma amo | "
                    "fabric_rma atomic [N] | fabric_rma order [N] | fabric_rma rekey | fabric_rma touch [N]\n");
    return 2;
  }
  if (argc == 3 && strcmp(argv[1], "atomic") != 0 && strcmp(argv[1], "order") != 0 && strcmp(argv[1], "touch") != 0) SLOT = strtoull(argv[2], NULL, 0) & ~4095ull;
  if (SLOT < SMALL) return 2;
  const int bench_mode = strcmp(argv[1], "bench") == 0;
  const int errors = strcmp(argv[1], "errors") == 0;
  const int amo = strcmp(argv[1], "amo") == 0;
  const int atomic = strcmp(argv[1], "atomic") == 0;
  const int order = strcmp(argv[1], "order") == 0;
  const int rekey = strcmp(argv[1], "rekey") == 0;
  const int touch = strcmp(argv[1], "touch") == 0;
  const long touch_n = touch && argc == 3 ? atol(argv[2]) : 50;
  if (touch && (touch_n < 1 || touch_n > 10000)) return 2;
  if (touch) argc = 2;
  const long order_pairs = order && argc == 3 ? atol(argv[2]) : 200;
  if (order && (order_pairs < 1 || order_pairs > 1000)) return 2;
  if (order) argc = 2;
  const long atomic_iters = atomic && argc == 3 ? atol(argv[2]) : 1000;
  if (atomic) argc = 2; /* its argument is a count, not SLOT */
  const int rounds = bench_mode || errors || amo || atomic || order || rekey || touch ? 0 : atoi(argv[1]);
  if (!bench_mode && (rounds < 0 || rounds > MAX_ROUNDS)) {
    /* The CQ-write check tracks each round by number. */
    fprintf(stderr, "fabric_rma: ROUNDS must be 0..%d, got %s\n", MAX_ROUNDS, argv[1]);
    return 2;
  }
  int spawned;
  if (PMI_Init(&spawned) != PMI_SUCCESS || PMI_Get_rank(&rank) != PMI_SUCCESS || PMI_Get_size(&nranks) != PMI_SUCCESS)
    return fail("PMI_Init", -1);
  if (nranks < 2 || nranks > MAX_RANKS) return fail("need 2..16 ranks", nranks);
  const char *ptag_s = getenv("PMI_GNI_PTAG"), *cookie_s = getenv("PMI_GNI_COOKIE");
  if (!ptag_s || !cookie_s) return fail("no credential in the environment", 0);
  gni_cdm_handle_t cdm;
  uint32_t my_addr = 0;
  gni_return_t rc = GNI_CdmCreate((uint32_t)rank, (uint8_t)strtoul(ptag_s, NULL, 0),
                                  (uint32_t)strtoul(cookie_s, NULL, 0), 0, &cdm);
  if (rc == GNI_RC_SUCCESS) rc = GNI_CdmAttach(cdm, 0, &my_addr, &nic);
  if (rc == GNI_RC_SUCCESS) rc = GNI_CqCreate(nic, 256, 0, GNI_CQ_BLOCKING, NULL, NULL, &cq);
  if (rc == GNI_RC_SUCCESS) rc = GNI_CqCreate(nic, 4096, 0, GNI_CQ_BLOCKING, NULL, NULL, &rcq);
  if (rc != GNI_RC_SUCCESS) return fail("attach", rc);

  /* The window: a counter word, then one slot per rank. Remote events go to rcq. */
  const uint64_t win_bytes = 4096 + (uint64_t)nranks * SLOT + BENCH_BYTES;
  uint8_t *win = aligned_alloc(4096, win_bytes);
  if (!win) return fail("alloc", 0);
  memset(win, 0, win_bytes);
  struct peer_info me = {my_addr, (uint32_t)rank, (uint64_t)win, {0, 0}}, all[MAX_RANKS];
  if ((rc = GNI_MemRegister(nic, (uint64_t)win, win_bytes, rcq, GNI_MEM_READWRITE, -1, &me.win_h)) != GNI_RC_SUCCESS)
    return fail("register window", rc);
  if (PMI_Allgather(&me, all, sizeof me) != PMI_SUCCESS) return fail("PMI_Allgather", 0);
  gni_ep_handle_t ep[MAX_RANKS] = {0};
  for (int p = 0; p < nranks; ++p) {
    if (p == rank) continue;
    if ((rc = GNI_EpCreate(nic, cq, &ep[p])) != GNI_RC_SUCCESS || (rc = GNI_EpBind(ep[p], all[p].addr, all[p].inst)))
      return fail("EP", rc);
  }

  if (touch) {
    int r = touch_mode(ep, touch_n);
    PMI_Barrier();
    PMI_Finalize();
    teardown(cdm, ep);
    free(win);
    return r;
  }
  if (rekey) {
    int r = rekey_mode(ep);
    PMI_Barrier();
    PMI_Finalize();
    teardown(cdm, ep);
    free(win);
    return r;
  }
  if (errors) {
    int r = errors_mode(ep, all, win);
    PMI_Barrier();
    PMI_Finalize();
    teardown(cdm, ep);
    free(win);
    return r;
  }
  if (atomic) {
    int r = atomic_mode(ep, all, win, atomic_iters);
    PMI_Barrier();
    PMI_Finalize();
    teardown(cdm, ep);
    free(win);
    return r;
  }
  if (order) {
    int r = order_mode(ep, order_pairs);
    PMI_Barrier();
    PMI_Finalize();
    teardown(cdm, ep);
    free(win);
    return r;
  }
  if (amo) {
    int r = amo_mode(ep, all, win);
    PMI_Barrier();
    PMI_Finalize();
    teardown(cdm, ep);
    free(win);
    return r;
  }
  if (bench_mode) {
    /* Each rank's CPU time over the bench alone (the target's is its progress thread). */
    struct rusage ru;
    PMI_Barrier();
    getrusage(RUSAGE_SELF, &ru);
    const double c0 = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
    int r = rank == 0 ? bench(ep[1], &all[1]) : 0;
    PMI_Barrier();
    getrusage(RUSAGE_SELF, &ru);
    printf("fabric_rma bench: rank %d CPU %.3f s\n", rank,
           (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6 - c0);
    fflush(stdout);
    PMI_Finalize();
    teardown(cdm, ep);
    free(win);
    return r;
  }

  uint8_t *src = aligned_alloc(4096, SLOT), *back = aligned_alloc(4096, SLOT);
  uint64_t *fetched = aligned_alloc(64, 64);
  gni_mem_handle_t src_h, back_h, f_h;
  if (!src || !back || !fetched) return fail("alloc", 0);
  if (GNI_MemRegister(nic, (uint64_t)src, SLOT, NULL, GNI_MEM_READWRITE, -1, &src_h) != GNI_RC_SUCCESS ||
      GNI_MemRegister(nic, (uint64_t)back, SLOT, NULL, GNI_MEM_READWRITE, -1, &back_h) != GNI_RC_SUCCESS ||
      GNI_MemRegister(nic, (uint64_t)fetched, 64, NULL, GNI_MEM_READWRITE, -1, &f_h) != GNI_RC_SUCCESS)
    return fail("register", 0);
  gni_post_descriptor_t d;
  double t0 = fabric_now_s();
  uint64_t bytes = 0;
  for (int r = 0; r < rounds; ++r) {
    for (int p = 0; p < nranks; ++p) {
      if (p == rank) continue;
      const uint64_t slot = all[p].win + 4096 + (uint64_t)rank * SLOT;
      const uint32_t seed = (uint32_t)(r * 1000 + rank * 31 + p);
      long st;
      /* FMA PUT of the small part, GET back; RDMA PUT of the whole slot (over the FMA
       * part), GET back. */
      for (int rdma = 0; rdma < 2; ++rdma) {
        const uint64_t len = rdma ? SLOT : SMALL;
        fill(src, len, seed + (uint32_t)rdma);
        fabric_desc(&d, rdma ? GNI_POST_RDMA_PUT : GNI_POST_FMA_PUT, src, src_h, slot, all[p].win_h, len);
        if ((st = post_wait(ep[p], &d, rdma)) != 0) return fail(rdma ? "RDMA PUT" : "FMA PUT", st);
        memset(back, 0, len);
        fabric_desc(&d, rdma ? GNI_POST_RDMA_GET : GNI_POST_FMA_GET, back, back_h, slot, all[p].win_h, len);
        if ((st = post_wait(ep[p], &d, rdma)) != 0) return fail(rdma ? "RDMA GET" : "FMA GET", st);
        if (memcmp(back, src, len) != 0)
          return fail(rdma ? "RDMA GET returned other bytes than PUT wrote" : "FMA GET returned other bytes than PUT wrote", p);
      }
      bytes += 2 * SLOT + 2 * SMALL;
      /* Fetch-and-add 1 on the peer's counter. */
      fabric_desc(&d, GNI_POST_AMO, fetched, f_h, all[p].win, all[p].win_h, 8);
      d.amo_cmd = GNI_FMA_ATOMIC_FADD;
      d.first_operand = 1;
      *fetched = ~0ull;
      if ((st = post_wait(ep[p], &d, 0)) != 0) return fail("AMO FADD", st);
      if (*fetched >= 2 * (uint64_t)rounds * (uint64_t)(nranks - 1))
        return fail("AMO fetched an impossible value", (long)*fetched);
      /* A CQ write naming this rank and round. */
      memset(&d, 0, sizeof d);
      d.type = GNI_POST_CQWRITE;
      d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
      d.remote_mem_hndl = all[p].win_h;
      d.cqwrite_value = ((uint64_t)rank << 32) | (uint32_t)r;
      if ((rc = GNI_PostCqWrite(ep[p], &d)) != GNI_RC_SUCCESS) return fail("GNI_PostCqWrite", rc);
      if ((st = complete_one()) != 0) return fail("CQ write completion", st);
    }
    /* Chained posts, one member per peer. */
    long st;
    for (int p = 0; p < nranks; ++p) fill(src + CHUNK * (uint64_t)p, CHUNK, (uint32_t)(r * 7919 + rank * 101 + p));
    if ((st = chain_wait(ep, all, GNI_POST_FMA_PUT, src, src_h)) != 0) return fail("chained FMA PUT", st);
    memset(back, 0, CHUNK * (uint64_t)nranks);
    if ((st = chain_wait(ep, all, GNI_POST_FMA_GET, back, back_h)) != 0) return fail("chained FMA GET", st);
    for (int p = 0; p < nranks; ++p)
      if (p != rank && memcmp(back + CHUNK * (uint64_t)p, src + CHUNK * (uint64_t)p, CHUNK) != 0)
        return fail("chained GET returned other bytes than the chained PUT wrote, peer", p);
    if ((st = chain_wait(ep, all, GNI_POST_AMO, back, back_h)) != 0) return fail("chained AMO ADD", st);
    static gni_ct_cqw_post_descriptor_t cqw[MAX_RANKS];
    void *prev = NULL;
    int first = -1;
    for (int p = 0; p < nranks; ++p) {
      if (p == rank) continue;
      const uint64_t v = ((uint64_t)rank << 32) | CHAIN_CQW | (uint32_t)r;
      if (first < 0) {
        first = p;
        memset(&d, 0, sizeof d);
        d.type = GNI_POST_CQWRITE;
        d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
        d.remote_mem_hndl = all[p].win_h;
        d.cqwrite_value = v;
        continue;
      }
      cqw[p] = (gni_ct_cqw_post_descriptor_t){.ep_hndl = ep[p], .remote_mem_hndl = all[p].win_h, .cqwrite_value = v};
      if (prev == NULL)
        d.next_descr = &cqw[p];
      else
        ((gni_ct_cqw_post_descriptor_t *)prev)->next_descr = &cqw[p];
      prev = &cqw[p];
    }
    if ((rc = GNI_CtPostCqWrite(ep[first], &d)) != GNI_RC_SUCCESS) return fail("GNI_CtPostCqWrite", rc);
    if ((st = complete_one()) != 0) return fail("chained CQ write completion", st);
  }
  const double secs = fabric_now_s() - t0;
  if (PMI_Barrier() != PMI_SUCCESS) return fail("PMI_Barrier", 0);

  /* What the others did here. */
  const uint64_t want = (uint64_t)rounds * (uint64_t)(nranks - 1);
  if (*(volatile uint64_t *)win != 2 * want)
    return fail("counter after every FADD and chained ADD", (long)*(volatile uint64_t *)win);
  {
    gni_cq_entry_t e;
    if (GNI_CqGetEvent(cq, &e) != GNI_RC_NOT_DONE) return fail("an event more than the posts made", 0);
  }
  for (int q = 0; q < nranks && rounds > 0; ++q) {
    if (q == rank) continue;
    fill(src, SLOT, (uint32_t)((rounds - 1) * 1000 + q * 31 + rank) + 1);
    if (memcmp(win + 4096 + (uint64_t)q * SLOT, src, SLOT) != 0) return fail("slot bytes of rank", q);
    fill(src, CHUNK, (uint32_t)((rounds - 1) * 7919 + q * 101 + rank));
    if (memcmp(win + CHUNK * (uint64_t)(q + 1), src, CHUNK) != 0) return fail("chained PUT bytes of rank", q);
  }
  static uint8_t seen[2][MAX_RANKS][MAX_ROUNDS];
  uint64_t writes = 0;
  for (;;) {
    gni_cq_entry_t e;
    rc = GNI_CqGetEvent(rcq, &e);
    if (rc == GNI_RC_NOT_DONE) break;
    if (rc != GNI_RC_SUCCESS) return fail("remote CQ", rc);
    uint64_t v = GNI_CQ_GET_DATA(e);
    uint32_t from = (uint32_t)(v >> 32), rr = (uint32_t)(v & 0xFFFF), chained = (v & CHAIN_CQW) != 0;
    if (from >= (uint32_t)nranks || from == (uint32_t)rank || rr >= (uint32_t)rounds || rr >= MAX_ROUNDS ||
        (v & 0xFFFF0000u & ~CHAIN_CQW) || seen[chained][from][rr])
      return fail("unexpected or duplicated CQ write", (long)v);
    seen[chained][from][rr] = 1;
    ++writes;
  }
  if (writes != 2 * want) return fail("CQ writes received", (long)writes);
  printf("fabric_rma rank %d (NIC %u): %d rounds with %d peers verified, %.1f MB/s moved\n", rank, my_addr, rounds,
         nranks - 1, (double)bytes / secs / 1e6);
  PMI_Barrier();
  PMI_Finalize();
  teardown(cdm, ep);
  free(src);
  free(back);
  free(fetched);
  free(win);
  return 0;
}
