/* DMAPP transfers of any size and alignment, and the attribute query before init (issue 20,
 * items 5 and 6), run on every PE by nicemu-run (dmapp_align.sh: one node, two nodes, two
 * Gemini nodes).
 *
 * Transfers: GET and PUT of DMAPP_BYTE, DW, QW and DQW elements, lengths 1..67 elements at
 * every remote byte offset 0..15 (for BYTE that is the element offset; for the wider types
 * it covers every byte offset, so every residue of the address modulo the element size and
 * modulo 4), with the local buffer at a varying byte offset in registered (symmetric heap)
 * or unregistered (malloc) memory; blocking, _nb (each syncid tested or waited) and _nbi
 * (gsync); on FMA (offload threshold at its maximum) and on the BTE (threshold 0). Then
 * transfers above the default threshold with unaligned heads and tails (64 KiB + 3 bytes at
 * offset 5 ...), the strided, indexed and multi-PE forms with small and unaligned elements.
 * Every byte of the destination is checked, and the 16 bytes on each side of it must be
 * untouched. PUTs are read back with an aligned GET of the whole window (and, once, checked
 * in the target's own memory).
 *
 * Attributes: dmapp_get_rma_attrs_ext / dmapp_get_rma_attrs before init return SUCCESS and
 * the defaults; the read values, changed in a few fields, are accepted by init; after init
 * the query reports the values in force, after finalize the defaults again.
 * `--plain` does the same with dmapp_get_rma_attrs and dmapp_init (one init per process).
 *
 * Exit 0 when every check holds; PE 0 prints "dmapp align: ... checks passed". */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmapp_check.h"

static int right;
static dmapp_seg_desc_t *heap_seg;

enum { kGuard = 0xEE };
/* Byte i of PE p's source area; never the guard byte, so an untouched byte is never
 * mistaken for a moved one. */
static uint8_t pat(int p, uint64_t i) {
  uint8_t v = (uint8_t)(i * 131u + (i >> 8) * 7u + (uint64_t)p * 61u + 1u);
  return v == kGuard ? (uint8_t)~kGuard : v;
}

static const dmapp_type_t kTypes[4] = {DMAPP_BYTE, DMAPP_DW, DMAPP_QW, DMAPP_DQW};
static const uint64_t kSizes[4] = {1, 4, 8, 16};
static const char *const kTypeNames[4] = {"BYTE", "DW", "QW", "DQW"};
enum Mode { kBlocking, kNb, kNbi };
static const char *const kModeNames[3] = {"blocking", "nb", "nbi"};

/* Sweep geometry: 16 windows (one per remote offset), each kSlot bytes: 16 guard bytes,
 * up to 15 bytes of local offset, up to 67 * 16 bytes of data, then guard. */
enum { kOffsets = 16, kMaxLen = 67, kSlot = 1152, kLead = 16 };
/* Large transfers: room for 1 MiB + a few bytes at any offset, plus guards. */
enum { kBig = (1 << 20) + 4096 };

static uint8_t *src_area;  /* symmetric: this PE's pattern, read by the left neighbour's GETs */
static uint8_t *put_area;  /* symmetric: the left neighbour PUTs here */
static uint8_t *heap_local, *malloc_local; /* local buffers: registered and unregistered */
static uint8_t *expect;    /* what the local buffer should hold */

static void set_threshold(uint32_t t) {
  dmapp_rma_attrs_ext_t a;
  OK(dmapp_get_rma_attrs_ext(&a));
  a.offload_threshold = t;
  OK(dmapp_set_rma_attrs_ext(&a, NULL));
}

/* One contiguous GET or PUT of `n` elements in mode `m`; for _nb the syncid is returned. */
static dmapp_return_t xfer(int is_get, enum Mode m, void *local, void *remote, uint64_t n, dmapp_type_t t,
                           dmapp_syncid_handle_t *id) {
  if (is_get) {
    switch (m) {
      case kBlocking: return dmapp_get(local, remote, heap_seg, right, n, t);
      case kNb: return dmapp_get_nb(local, remote, heap_seg, right, n, t, id);
      case kNbi: return dmapp_get_nbi(local, remote, heap_seg, right, n, t);
    }
  } else {
    switch (m) {
      case kBlocking: return dmapp_put(remote, heap_seg, right, local, n, t);
      case kNb: return dmapp_put_nb(remote, heap_seg, right, local, n, t, id);
      case kNbi: return dmapp_put_nbi(remote, heap_seg, right, local, n, t);
    }
  }
  return DMAPP_RC_INVALID_PARAM;
}

/* Completes an explicit request by polling dmapp_syncid_test; a failed post left no id. */
static void test_until_done(dmapp_syncid_handle_t *id) {
  int done = 0;
  dmapp_return_t rc = DMAPP_RC_SUCCESS;
  while (*id && !done && (rc = dmapp_syncid_test(id, &done)) == DMAPP_RC_SUCCESS) {
  }
  CHECK(rc == DMAPP_RC_SUCCESS);
}
static void wait_for(dmapp_syncid_handle_t *id) {
  if (*id) OK(dmapp_syncid_wait(id));
}

/* `got` against `want` over `len` bytes; reports the first difference with its context. */
static int same(const uint8_t *got, const uint8_t *want, size_t len, const char *what) {
  for (size_t i = 0; i < len; ++i)
    if (got[i] != want[i]) {
      if (failures < 40)
        fprintf(stderr, "PE %d: %s: byte %zu is 0x%02x, expected 0x%02x\n", me, what, i, got[i], want[i]);
      return 0;
    }
  return 1;
}

/* GET sweep: window k of the local buffer receives the remote bytes at offset k. */
static void sweep_get(int t, enum Mode m) {
  const uint64_t es = kSizes[t];
  for (uint64_t len = 1; len <= kMaxLen; ++len) {
    const uint64_t bytes = len * es;
    /* Registered or not, alternating with the length; local offsets differ per window. */
    uint8_t *local = (len & 1) ? heap_local : malloc_local;
    memset(local, kGuard, (size_t)kOffsets * kSlot);
    memset(expect, kGuard, (size_t)kOffsets * kSlot);
    dmapp_syncid_handle_t ids[kOffsets] = {0};
    for (int k = 0; k < kOffsets; ++k) {
      const uint64_t lo = (uint64_t)(k * 5 + (int)len) % 16;
      uint8_t *dst = local + k * kSlot + kLead + lo;
      const uint64_t ro = 64 + (uint64_t)k;
      for (uint64_t i = 0; i < bytes; ++i) expect[k * kSlot + kLead + lo + i] = pat(right, ro + i);
      OK(xfer(1, m, dst, src_area + ro, len, kTypes[t], &ids[k]));
    }
    /* Completion: _nb tests some syncids (checking the window as soon as the test says 1)
     * and waits for the others; _nbi polls gsync_test, then checks. */
    char what[96];
    if (m == kNb) {
      for (int k = 0; k < kOffsets; ++k) {
        if (k & 1)
          wait_for(&ids[k]);
        else
          test_until_done(&ids[k]);
        snprintf(what, sizeof what, "get_nb %s x%" PRIu64 " offset %d", kTypeNames[t], len, k);
        CHECK(same(local + k * kSlot, expect + k * kSlot, kSlot, what));
      }
      continue;
    }
    if (m == kNbi) {
      int done = 0;
      dmapp_return_t rc = DMAPP_RC_SUCCESS;
      while (!done && (rc = dmapp_gsync_test(&done)) == DMAPP_RC_SUCCESS) {
      }
      CHECK(rc == DMAPP_RC_SUCCESS);
    }
    snprintf(what, sizeof what, "get %s %s x%" PRIu64, kModeNames[m], kTypeNames[t], len);
    CHECK(same(local, expect, (size_t)kOffsets * kSlot, what));
  }
}

/* PUT sweep: window k on the right neighbour receives our bytes at its offset k; read back
 * with one aligned GET of all windows. */
static void sweep_put(int t, enum Mode m) {
  const uint64_t es = kSizes[t];
  uint8_t *back = malloc((size_t)kOffsets * kSlot), *guard = malloc((size_t)kOffsets * kSlot);
  memset(guard, kGuard, (size_t)kOffsets * kSlot);
  for (uint64_t len = 1; len <= kMaxLen; ++len) {
    const uint64_t bytes = len * es;
    uint8_t *local = (len & 1) ? malloc_local : heap_local;
    OK(dmapp_put(put_area, heap_seg, right, guard, kOffsets * kSlot, DMAPP_BYTE));
    memset(expect, kGuard, (size_t)kOffsets * kSlot);
    dmapp_syncid_handle_t ids[kOffsets] = {0};
    for (int k = 0; k < kOffsets; ++k) {
      const uint64_t lo = (uint64_t)(k * 3 + (int)len) % 16;
      uint8_t *src = local + k * kSlot + lo;
      for (uint64_t i = 0; i < bytes; ++i) src[i] = pat(me, len * 977 + (uint64_t)k * 31 + i);
      memcpy(expect + k * kSlot + kLead + k, src, bytes);
      OK(xfer(0, m, src, put_area + k * kSlot + kLead + k, len, kTypes[t], &ids[k]));
    }
    if (m == kNb)
      for (int k = 0; k < kOffsets; ++k) {
        if (k & 1)
          wait_for(&ids[k]);
        else
          test_until_done(&ids[k]);
      }
    if (m == kNbi) OK(dmapp_gsync_wait());
    memset(back, 0, (size_t)kOffsets * kSlot);
    OK(dmapp_get(back, put_area, heap_seg, right, kOffsets * kSlot / 4, DMAPP_DW));
    char what[96];
    snprintf(what, sizeof what, "put %s %s x%" PRIu64, kModeNames[m], kTypeNames[t], len);
    CHECK(same(back, expect, (size_t)kOffsets * kSlot, what));
  }
  free(back);
  free(guard);
}

/* The sweeps on one engine: every type, every mode, GET and PUT. */
static void sweep(const char *engine, uint32_t threshold) {
  set_threshold(threshold);
  const int before = failures;
  for (int t = 0; t < 4; ++t)
    for (int m = 0; m < 3; ++m) {
      sweep_get(t, (enum Mode)m);
      sweep_put(t, (enum Mode)m);
    }
  if (me == 0) printf("sweep on %s: %s\n", engine, failures == before ? "ok" : "FAILED");
  barrier();
}

/* Above the offload threshold, unaligned head and tail: GET into a registered or an
 * unregistered buffer at a local offset, PUT from one; every mode. */
struct Big {
  int t;
  uint64_t n, ro, lo;
};
static const struct Big kBigs[] = {
    {0, 65536 + 3, 5, 0}, {0, 65536 + 3, 5, 3}, {0, 4097, 1, 2},      {0, 4096, 3, 0},
    {0, 4093, 3, 1},      {0, 4095, 1, 1},      {1, 16385, 2, 1},     {2, 8193, 7, 0},
    {3, 4097, 9, 13},     {0, (1 << 20) + 7, 3, 6}, {1, 1025, 6, 2},  {2, 600, 1, 3},
};

static void big_transfers(const char *engine, uint32_t threshold) {
  set_threshold(threshold);
  const int before = failures;
  uint8_t *ml = malloc(kBig);
  uint8_t *hl = dmapp_sheap_malloc(kBig);
  uint8_t *want = malloc(kBig), *back = malloc(kBig);
  for (size_t b = 0; b < sizeof kBigs / sizeof *kBigs; ++b) {
    const struct Big *x = &kBigs[b];
    const uint64_t bytes = x->n * kSizes[x->t];
    for (int m = 0; m < 3; ++m)
      for (int reg = 0; reg < 2; ++reg) {
        uint8_t *local = reg ? hl : ml;
        char what[128];
        /* GET: the right neighbour's pattern from offset ro, into local + 16 + lo. */
        const uint64_t span = kLead + x->lo + bytes + kLead;
        memset(local, kGuard, span);
        memset(want, kGuard, span);
        for (uint64_t i = 0; i < bytes; ++i) want[kLead + x->lo + i] = pat(right, x->ro + i);
        dmapp_syncid_handle_t id = NULL;
        OK(xfer(1, (enum Mode)m, local + kLead + x->lo, src_area + x->ro, x->n, kTypes[x->t], &id));
        if (m == kNb) wait_for(&id);
        if (m == kNbi) OK(dmapp_gsync_wait());
        snprintf(what, sizeof what, "%s get %s %s x%" PRIu64 " at %" PRIu64 " into %s+%" PRIu64, engine,
                 kModeNames[m], kTypeNames[x->t], x->n, x->ro, reg ? "heap" : "malloc", x->lo);
        CHECK(same(local, want, span, what));
        /* PUT: local + lo to the neighbour's put_area + 16 + ro; read back aligned. */
        memset(local, kGuard, span);
        memset(want, kGuard, kBig);
        OK(dmapp_put(put_area, heap_seg, right, want, kBig / 4, DMAPP_DW));
        for (uint64_t i = 0; i < bytes; ++i) local[x->lo + i] = want[kLead + x->ro + i] = pat(me, i * 3 + b);
        id = NULL;
        OK(xfer(0, (enum Mode)m, local + x->lo, put_area + kLead + x->ro, x->n, kTypes[x->t], &id));
        if (m == kNb) wait_for(&id);
        if (m == kNbi) OK(dmapp_gsync_wait());
        memset(back, 0, kBig);
        OK(dmapp_get(back, put_area, heap_seg, right, kBig / 4, DMAPP_DW));
        snprintf(what, sizeof what, "%s put %s %s x%" PRIu64 " at %" PRIu64 " from %s+%" PRIu64, engine,
                 kModeNames[m], kTypeNames[x->t], x->n, x->ro, reg ? "heap" : "malloc", x->lo);
        CHECK(same(back, want, kBig, what));
      }
  }
  /* The last PUT, seen in the target's own memory (not through a GET). */
  barrier();
  const struct Big *last = &kBigs[sizeof kBigs / sizeof *kBigs - 1];
  const int left = (me + npes - 1) % npes;
  const uint64_t lbytes = last->n * kSizes[last->t];
  int good = 1;
  for (uint64_t i = 0; i < kLead + last->ro; ++i) good &= put_area[i] == kGuard;
  for (uint64_t i = 0; i < lbytes; ++i)
    good &= put_area[kLead + last->ro + i] == pat(left, i * 3 + sizeof kBigs / sizeof *kBigs - 1);
  for (uint64_t i = kLead + last->ro + lbytes; i < kBig; ++i) good &= put_area[i] == kGuard;
  CHECK(good);
  barrier();
  free(ml);
  free(want);
  free(back);
  dmapp_sheap_free(hl);
  if (me == 0) printf("large transfers, %s: %s\n", engine, failures == before ? "ok" : "FAILED");
}

/* Strided, indexed and multi-PE forms with small and unaligned elements. */
static void other_forms(const char *engine) {
  const int before = failures;
  uint8_t *buf = malloc(4096), *want = malloc(4096), *back = malloc(4096);
  for (int t = 0; t < 4; ++t) {
    const uint64_t es = kSizes[t];
    for (int m = 0; m < 3; ++m) {
      char what[96];
      /* iget: element i from remote offset ro + i*sst*es to local offset lo + i*tst*es. */
      const uint64_t n = 21, ro = 1 + (uint64_t)(t * 3 + m) % 15, lo = (uint64_t)(t + 2 * m) % 16;
      const ptrdiff_t tst = 2, sst = 3;
      memset(buf, kGuard, 4096);
      memset(want, kGuard, 4096);
      for (uint64_t i = 0; i < n; ++i)
        for (uint64_t b = 0; b < es; ++b)
          want[kLead + lo + i * (uint64_t)tst * es + b] = pat(right, 64 + ro + i * (uint64_t)sst * es + b);
      uint8_t *dst = buf + kLead + lo;
      dmapp_syncid_handle_t id = NULL;
      if (m == kBlocking) OK(dmapp_iget(dst, src_area + 64 + ro, heap_seg, right, tst, sst, n, kTypes[t]));
      if (m == kNb) {
        OK(dmapp_iget_nb(dst, src_area + 64 + ro, heap_seg, right, tst, sst, n, kTypes[t], &id));
        wait_for(&id);
      }
      if (m == kNbi) {
        OK(dmapp_iget_nbi(dst, src_area + 64 + ro, heap_seg, right, tst, sst, n, kTypes[t]));
        OK(dmapp_gsync_wait());
      }
      snprintf(what, sizeof what, "iget %s %s", kModeNames[m], kTypeNames[t]);
      CHECK(same(buf, want, 4096, what));

      /* ixget: element i from remote offset ro + idx[i]*es. */
      ptrdiff_t idx[9] = {7, 0, 3, 100, 1, 2, 55, 54, 9};
      memset(buf, kGuard, 4096);
      memset(want, kGuard, 4096);
      for (uint64_t i = 0; i < 9; ++i)
        for (uint64_t b = 0; b < es; ++b) want[kLead + lo + i * es + b] = pat(right, 64 + ro + (uint64_t)idx[i] * es + b);
      if (m == kBlocking) OK(dmapp_ixget(dst, src_area + 64 + ro, heap_seg, right, idx, 9, kTypes[t]));
      if (m == kNb) {
        OK(dmapp_ixget_nb(dst, src_area + 64 + ro, heap_seg, right, idx, 9, kTypes[t], &id));
        wait_for(&id);
      }
      if (m == kNbi) {
        OK(dmapp_ixget_nbi(dst, src_area + 64 + ro, heap_seg, right, idx, 9, kTypes[t]));
        OK(dmapp_gsync_wait());
      }
      snprintf(what, sizeof what, "ixget %s %s", kModeNames[m], kTypeNames[t]);
      CHECK(same(buf, want, 4096, what));

      /* iput then ixput into the neighbour's put_area at unaligned offsets, read back. */
      memset(want, kGuard, 4096);
      OK(dmapp_put(put_area, heap_seg, right, want, 1024, DMAPP_DW));
      for (uint64_t i = 0; i < 4096; ++i) buf[i] = pat(me, i + (uint64_t)(t * 7 + m));
      for (uint64_t i = 0; i < n; ++i)
        memcpy(want + kLead + ro + i * (uint64_t)tst * es, buf + lo + i * (uint64_t)sst * es, es);
      if (m == kBlocking) OK(dmapp_iput(put_area + kLead + ro, heap_seg, right, buf + lo, tst, sst, n, kTypes[t]));
      if (m == kNb) {
        OK(dmapp_iput_nb(put_area + kLead + ro, heap_seg, right, buf + lo, tst, sst, n, kTypes[t], &id));
        wait_for(&id);
      }
      if (m == kNbi) {
        OK(dmapp_iput_nbi(put_area + kLead + ro, heap_seg, right, buf + lo, tst, sst, n, kTypes[t]));
        OK(dmapp_gsync_wait());
      }
      OK(dmapp_get(back, put_area, heap_seg, right, 1024, DMAPP_DW));
      snprintf(what, sizeof what, "iput %s %s", kModeNames[m], kTypeNames[t]);
      CHECK(same(back, want, 4096, what));

      memset(want, kGuard, 4096);
      OK(dmapp_put(put_area, heap_seg, right, want, 1024, DMAPP_DW));
      for (uint64_t i = 0; i < 9; ++i) memcpy(want + kLead + ro + (uint64_t)idx[i] * es, buf + lo + i * es, es);
      if (m == kBlocking) OK(dmapp_ixput(put_area + kLead + ro, heap_seg, right, buf + lo, idx, 9, kTypes[t]));
      if (m == kNb) {
        OK(dmapp_ixput_nb(put_area + kLead + ro, heap_seg, right, buf + lo, idx, 9, kTypes[t], &id));
        wait_for(&id);
      }
      if (m == kNbi) {
        OK(dmapp_ixput_nbi(put_area + kLead + ro, heap_seg, right, buf + lo, idx, 9, kTypes[t]));
        OK(dmapp_gsync_wait());
      }
      OK(dmapp_get(back, put_area, heap_seg, right, 1024, DMAPP_DW));
      snprintf(what, sizeof what, "ixput %s %s", kModeNames[m], kTypeNames[t]);
      CHECK(same(back, want, 4096, what));
    }
  }
  /* gather_ixpe: 5 elements at an odd offset from every PE, concatenated. */
  dmapp_pe_t *pes = malloc((size_t)npes * sizeof *pes);
  for (int i = 0; i < npes; ++i) pes[i] = i;
  for (int t = 0; t < 4; ++t) {
    const uint64_t es = kSizes[t], n = 5, ro = 3;
    memset(buf, kGuard, 4096);
    memset(want, kGuard, 4096);
    for (int p = 0; p < npes; ++p)
      for (uint64_t i = 0; i < n * es; ++i) want[kLead + 1 + (uint64_t)p * n * es + i] = pat(p, 64 + ro + i);
    OK(dmapp_gather_ixpe(buf + kLead + 1, src_area + 64 + ro, heap_seg, pes, (uint32_t)npes, n, kTypes[t]));
    char what[64];
    snprintf(what, sizeof what, "gather_ixpe %s", kTypeNames[t]);
    CHECK(same(buf, want, 4096, what));
  }
  /* get_flag_nbi of 3 bytes at offset 1. */
  memset(buf, kGuard, 64);
  memset(want, kGuard, 64);
  for (int i = 0; i < 3; ++i) want[kLead + i] = pat(right, 65 + (uint64_t)i);
  OK(dmapp_get_flag_nbi(buf + kLead, src_area + 65, heap_seg, right, 3, DMAPP_BYTE));
  OK(dmapp_gsync_wait());
  CHECK(same(buf, want, 64, "get_flag_nbi BYTE x3"));
  free(pes);
  free(buf);
  free(want);
  free(back);
  barrier();
  if (me == 0) printf("strided, indexed and multi-PE forms, %s: %s\n", engine, failures == before ? "ok" : "FAILED");
}

/* The defaults nicemu documents (docs/dmapp.md). */
static int is_default_ext(const dmapp_rma_attrs_ext_t *a) {
  return a->max_outstanding_nb == DMAPP_DEF_OUTSTANDING_NB && a->offload_threshold == DMAPP_OFFLOAD_THRESHOLD &&
         a->put_relaxed_ordering == DMAPP_ROUTING_DETERMINISTIC && a->get_relaxed_ordering == DMAPP_ROUTING_ADAPTIVE &&
         a->max_concurrency == 1 && a->PI_ordering == DMAPP_PI_ORDERING_STRICT &&
         a->queue_depth == DMAPP_QUEUE_DEFAULT_DEPTH && a->queue_nelems == DMAPP_QUEUE_DEFAULT_NELEMS;
}
static int is_default(const dmapp_rma_attrs_t *a) {
  return a->max_outstanding_nb == DMAPP_DEF_OUTSTANDING_NB && a->offload_threshold == DMAPP_OFFLOAD_THRESHOLD &&
         a->put_relaxed_ordering == DMAPP_ROUTING_DETERMINISTIC && a->get_relaxed_ordering == DMAPP_ROUTING_ADAPTIVE &&
         a->max_concurrency == 1;
}

/* A 7-byte GET from the right neighbour, as a sign that init with the queried attributes
 * gave a working library. */
static void small_get_works(void) {
  uint8_t *area = dmapp_sheap_malloc(64), got[16];
  for (int i = 0; i < 64; ++i) area[i] = pat(me, (uint64_t)i);
  barrier();
  memset(got, kGuard, sizeof got);
  OK(dmapp_get(got + 1, area + 3, heap_seg, right, 7, DMAPP_BYTE));
  int good = got[0] == kGuard && got[8] == kGuard;
  for (int i = 0; i < 7; ++i) good &= got[1 + i] == pat(right, 3 + (uint64_t)i);
  CHECK(good);
  barrier();
  dmapp_sheap_free(area);
}

static int finish(const char *what) {
  if (end_job()) return 1;
  if (me == 0)
    printf("dmapp align%s: %d PEs on %s, %d checks passed on PE 0\n", what, npes,
           info.hw_version == GNI_DEVICE_GEMINI ? "Gemini" : "Aries", checks);
  return 0;
}

/* --plain: dmapp_get_rma_attrs before dmapp_init, the values changed and passed back. */
static int plain(void) {
  dmapp_rma_attrs_t a, act, now;
  memset(&a, 0x5A, sizeof a);
  OK(dmapp_get_rma_attrs(&a));
  CHECK(is_default(&a));
  a.max_outstanding_nb = 64;
  a.offload_threshold = 16384;
  a.get_relaxed_ordering = DMAPP_ROUTING_IN_ORDER;
  OK(dmapp_init(&a, &act));
  dmapp_get_jobinfo(&info);
  me = info.pe;
  npes = info.npes;
  right = (me + 1) % npes;
  heap_seg = &info.sheap_seg;
  CHECK(act.max_outstanding_nb == 64 && act.offload_threshold == 16384 &&
        act.get_relaxed_ordering == DMAPP_ROUTING_IN_ORDER && act.put_relaxed_ordering == DMAPP_ROUTING_DETERMINISTIC &&
        act.max_concurrency == 1);
  memset(&now, 0, sizeof now);
  OK(dmapp_get_rma_attrs(&now));
  CHECK(now.max_outstanding_nb == 64 && now.offload_threshold == 16384 &&
        now.get_relaxed_ordering == DMAPP_ROUTING_IN_ORDER && now.max_concurrency == 1);
  dmapp_rma_attrs_ext_t e;
  OK(dmapp_get_rma_attrs_ext(&e));
  CHECK(e.max_outstanding_nb == 64 && e.PI_ordering == DMAPP_PI_ORDERING_STRICT &&
        e.queue_depth == DMAPP_QUEUE_DEFAULT_DEPTH);
  small_get_works();
  OK(dmapp_finalize());
  OK(dmapp_get_rma_attrs(&now));
  CHECK(is_default(&now));
  return finish(" (plain init)");
}

int main(int argc, char **argv) {
  int spawned;
  if (PMI_Init(&spawned) != PMI_SUCCESS) return 1;
  /* Item 6: the query before init. */
  CHECK(dmapp_get_rma_attrs_ext(NULL) == DMAPP_RC_INVALID_PARAM);
  CHECK(dmapp_get_rma_attrs(NULL) == DMAPP_RC_INVALID_PARAM);
  if (argc == 2 && !strcmp(argv[1], "--plain")) return plain();
  dmapp_rma_attrs_ext_t req, act, now;
  memset(&req, 0x5A, sizeof req);
  OK(dmapp_get_rma_attrs_ext(&req));
  CHECK(is_default_ext(&req));
  dmapp_rma_attrs_t narrow;
  OK(dmapp_get_rma_attrs(&narrow));
  CHECK(is_default(&narrow));
  /* A few fields changed, the rest passed back as read. */
  req.max_outstanding_nb = 256;
  req.PI_ordering = DMAPP_PI_ORDERING_RELAXED;
  req.put_relaxed_ordering = DMAPP_ROUTING_ADAPTIVE;
  if (start_job(&req, &act, "dmapp_init_ext with the queried defaults")) return 1;
  right = (me + 1) % npes;
  heap_seg = &info.sheap_seg;
  CHECK(act.max_outstanding_nb == 256 && act.PI_ordering == DMAPP_PI_ORDERING_RELAXED &&
        act.put_relaxed_ordering == DMAPP_ROUTING_ADAPTIVE && act.offload_threshold == DMAPP_OFFLOAD_THRESHOLD &&
        act.get_relaxed_ordering == DMAPP_ROUTING_ADAPTIVE && act.max_concurrency == 1 &&
        act.queue_depth == DMAPP_QUEUE_DEFAULT_DEPTH && act.queue_nelems == DMAPP_QUEUE_DEFAULT_NELEMS);
  OK(dmapp_get_rma_attrs_ext(&now));
  CHECK(now.max_outstanding_nb == act.max_outstanding_nb && now.offload_threshold == act.offload_threshold &&
        now.put_relaxed_ordering == act.put_relaxed_ordering && now.get_relaxed_ordering == act.get_relaxed_ordering &&
        now.max_concurrency == act.max_concurrency && now.PI_ordering == act.PI_ordering &&
        now.queue_depth == act.queue_depth && now.queue_nelems == act.queue_nelems);
  /* The query follows dmapp_set_rma_attrs_ext. */
  set_threshold(12345);
  OK(dmapp_get_rma_attrs(&narrow));
  CHECK(narrow.offload_threshold == 12345 && narrow.max_outstanding_nb == 256);
  set_threshold(DMAPP_OFFLOAD_THRESHOLD);

  /* Item 5. */
  src_area = dmapp_sheap_malloc(kBig);
  put_area = dmapp_sheap_malloc(kBig);
  heap_local = dmapp_sheap_malloc((size_t)kOffsets * kSlot);
  malloc_local = malloc((size_t)kOffsets * kSlot);
  expect = malloc((size_t)kOffsets * kSlot);
  CHECK(src_area && put_area && heap_local && malloc_local && expect);
  if (!src_area || !put_area || !heap_local) return finish("");
  for (uint64_t i = 0; i < kBig; ++i) src_area[i] = pat(me, i);
  barrier();
  small_get_works();
  sweep("FMA (threshold max)", 0xFFFFFFFFu);
  sweep("BTE (threshold 0)", 0);
  big_transfers("default threshold", DMAPP_OFFLOAD_THRESHOLD);
  big_transfers("FMA (threshold max)", 0xFFFFFFFFu);
  set_threshold(DMAPP_OFFLOAD_THRESHOLD);
  other_forms("default threshold");
  set_threshold(0);
  other_forms("BTE (threshold 0)");
  set_threshold(DMAPP_OFFLOAD_THRESHOLD);

  free(malloc_local);
  free(expect);
  OK(dmapp_finalize());
  OK(dmapp_get_rma_attrs_ext(&now));
  CHECK(is_default_ext(&now)); /* after finalize: the defaults again */
  return finish("");
}
