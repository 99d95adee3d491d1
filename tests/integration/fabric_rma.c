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
 *                         with error events, the page is not written (errors_mode).
 *   fabric_rma bench      rank 0 -> rank 1: FMA PUT 8 B latency; FMA PUT, RDMA PUT and
 *                         RDMA GET bandwidth, 8 B .. 4 MiB (up to 16 posts in flight;
 *                         FABRIC_RMA_BENCH_REPEAT=N moves N times the data and
 *                         FABRIC_RMA_BENCH_SIZE=N measures only that size, for profiling).
 * Exit 0 = everything verified. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  /* Latency: one 8-byte FMA PUT at a time, to its global completion. */
  const int lat_iters = 2000;
  double t0 = fabric_now_s();
  for (int i = 0; i < lat_iters; ++i) {
    fabric_desc(&ds[0], GNI_POST_FMA_PUT, src, sh, t->win, t->win_h, 8);
    if (post_wait(ep, &ds[0], 0) != 0) return fail("latency put", i);
  }
  printf("fabric_rma bench: FMA PUT 8 B round trip %.1f us\n", (fabric_now_s() - t0) / lat_iters * 1e6);
  printf("fabric_rma bench: %-10s %10s %10s %10s\n", "bytes", "FMA PUT", "RDMA PUT", "RDMA GET");
  static const uint64_t sizes[] = {8, 64, 512, 4096, 32768, 262144, 1048576, BENCH_BYTES};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; ++si) {
    const uint64_t len = sizes[si];
    if (only && len != only) continue;
    double mbs[3];
    for (int kind = 0; kind < 3; ++kind) {
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
 * handle, fills it with 0xA5 and deregisters it; rank 0 then posts an RDMA PUT, an FMA PUT
 * and an FMA GET through the stale handle: each must complete with an error event (status
 * printed), never a crash or a hang, and rank 1's page must hold 0xA5 still (no stray
 * write). A PUT into the live window still works afterwards. */
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

static int errors_mode(gni_ep_handle_t *ep, const struct peer_info *all) {
  uint8_t *page = aligned_alloc(4096, 4096), *buf = aligned_alloc(4096, 4096);
  gni_mem_handle_t ph = {0, 0}, bh = {0, 0};
  if (!page || !buf) return fail("alloc", 0);
  memset(page, 0xA5, 4096);
  memset(buf, 0x5A, 4096);
  if (GNI_MemRegister(nic, (uint64_t)buf, 4096, NULL, GNI_MEM_READWRITE, -1, &bh) != GNI_RC_SUCCESS)
    return fail("register", 0);
  if (rank == 1 && GNI_MemRegister(nic, (uint64_t)page, 4096, NULL, GNI_MEM_READWRITE, -1, &ph) != GNI_RC_SUCCESS)
    return fail("register page", 0);
  struct { uint64_t va; gni_mem_handle_t h; } mine = {(uint64_t)page, ph}, got[MAX_RANKS];
  if (PMI_Allgather(&mine, got, sizeof mine) != PMI_SUCCESS) return fail("PMI_Allgather", 0);
  if (rank == 1 && GNI_MemDeregister(nic, &ph) != GNI_RC_SUCCESS) return fail("deregister", 0);
  PMI_Barrier();
  int bad = 0;
  if (rank == 0) {
    gni_post_descriptor_t d;
    const struct { gni_post_type_t t; int rdma; const char *name; } posts[] = {
        {GNI_POST_RDMA_PUT, 1, "RDMA PUT"}, {GNI_POST_FMA_PUT, 0, "FMA PUT"}, {GNI_POST_FMA_GET, 0, "FMA GET"}};
    for (int i = 0; i < 3; ++i) {
      fabric_desc(&d, posts[i].t, buf, bh, got[1].va, got[1].h, 256);
      gni_return_t rc = posts[i].rdma ? GNI_PostRdma(ep[1], &d) : GNI_PostFma(ep[1], &d);
      long st = rc == GNI_RC_SUCCESS ? wait_any() : -100 - rc;
      if (st > 0) printf("fabric_rma errors: %s through a deregistered handle: error event, status %ld\n", posts[i].name, st - 1);
      else { bad = 1; fail(posts[i].name, st); }
    }
    /* The ofi fabric's tcp provider drops the connection on a key its target does not know:
     * a post racing that completes with a recoverable error, and is reposted as a client
     * would (GNI_CqErrorRecoverable), after a pause. */
    long st = -1;
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
  }
  PMI_Barrier();
  if (rank == 1) {
    for (int i = 0; i < 4096; ++i)
      if (page[i] != 0xA5) { bad = 1; fail("stray write into the deregistered page", i); break; }
    if (!bad) printf("fabric_rma errors: the deregistered page is untouched\n");
  }
  free(page);
  free(buf);
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
    fprintf(stderr, "usage: fabric_rma ROUNDS [SLOT_BYTES] | fabric_rma bench | fabric_rma errors\n");
    return 2;
  }
  if (argc == 3) SLOT = strtoull(argv[2], NULL, 0) & ~4095ull;
  if (SLOT < SMALL) return 2;
  const int bench_mode = strcmp(argv[1], "bench") == 0;
  const int errors = strcmp(argv[1], "errors") == 0;
  const int rounds = bench_mode || errors ? 0 : atoi(argv[1]);
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

  if (errors) {
    int r = errors_mode(ep, all);
    PMI_Barrier();
    PMI_Finalize();
    teardown(cdm, ep);
    free(win);
    return r;
  }
  if (bench_mode) {
    int r = rank == 0 ? bench(ep[1], &all[1]) : 0;
    PMI_Barrier();
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
