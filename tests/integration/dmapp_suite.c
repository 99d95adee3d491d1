/* SHMEM-style DMAPP suite, one program run on every PE by nicemu-run (test_dmapp.sh runs
 * it on one and on two emulated nodes): every data-motion, AMO, flag and lock call across
 * PEs checked against values the peers wrote, symmetric addresses, strided and indexed
 * layouts, nb/nbi completion, AMO totals under contention, and the documented error codes
 * for bad PEs, out-of-segment and unregistered addresses. Exit 0 when every check holds. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dmapp_check.h"

static dmapp_seg_desc_t *heap_seg, *data_seg;

/* The symmetric data segment: globals, same offset on every PE. */
static int64_t g_data[64];
static volatile uint64_t g_flag;

static uint64_t pattern(int pe, uint64_t i) { return ((uint64_t)pe << 40) ^ (i * 0x9E3779B97F4A7C15ull); }

static void test_init_and_symmetry(void) {
  int flag = 0;
  OK(dmapp_initialized(&flag));
  CHECK(flag == 1);
  CHECK(info.npes == npes && info.pe == me);
  CHECK(info.sheap_seg.len >= (1u << 20));
  /* Same heap address and same sheap_malloc results on every PE. */
  void *p = dmapp_sheap_malloc(1000);
  CHECK(p != NULL);
  uint64_t mine[2] = {(uint64_t)(uintptr_t)info.sheap_seg.addr, (uint64_t)(uintptr_t)p};
  uint64_t *all = calloc((size_t)npes, sizeof mine);
  PMI_Allgather(mine, all, sizeof mine);
  for (int i = 0; i < npes; ++i) CHECK(all[2 * i] == mine[0] && all[2 * i + 1] == mine[1]);
  free(all);
  void *q = dmapp_sheap_realloc(p, 5000);
  CHECK(q != NULL);
  dmapp_sheap_free(q);
  dmapp_sheap_stats_t st;
  OK(dmapp_sheap_stats(&st));
  CHECK(st.total_bytes == info.sheap_seg.len);
}

/* Contiguous put and get of every element type, blocking, to the right neighbour. */
static void test_contiguous(void) {
  const int right = (me + 1) % npes, left = (me + npes - 1) % npes;
  const dmapp_type_t types[] = {DMAPP_DQW, DMAPP_QW, DMAPP_DW, DMAPP_BYTE};
  const uint64_t sizes[] = {16, 8, 4, 1};
  uint8_t *dst = dmapp_sheap_malloc(4096);
  for (int t = 0; t < 4; ++t) {
    const uint64_t n = 37, bytes = n * sizes[t];
    uint8_t src[37 * 16];
    for (uint64_t i = 0; i < bytes; ++i) src[i] = (uint8_t)(me * 31 + i * 7 + t);
    memset(dst, 0, 4096);
    barrier();
    OK(dmapp_put(dst, heap_seg, right, src, n, types[t]));
    barrier();
    int good = 1;
    for (uint64_t i = 0; i < bytes; ++i) good &= dst[i] == (uint8_t)(left * 31 + i * 7 + t);
    CHECK(good);
    CHECK(dst[bytes] == 0); /* nothing past the end */
    {
      uint8_t back[37 * 16];
      OK(dmapp_get(back, dst, heap_seg, right, n, types[t]));
      int same = 1;
      for (uint64_t i = 0; i < bytes; ++i) same &= back[i] == (uint8_t)(me * 31 + i * 7 + t);
      CHECK(same);
    }
    barrier();
  }
  dmapp_sheap_free(dst);
}

/* Large transfers through FMA and through BTE: threshold forced both ways and automatic;
 * local buffers registered (heap), small unregistered (bounce) and large unregistered. */
static void test_threshold(void) {
  const int right = (me + 1) % npes, left = (me + npes - 1) % npes;
  const uint64_t n = 1 << 17; /* 1 MiB of QW */
  uint64_t *dst = dmapp_sheap_malloc(n * 8);
  uint64_t *src = malloc(n * 8), *back = malloc(n * 8);
  dmapp_rma_attrs_t a, got;
  OK(dmapp_get_rma_attrs(&a));
  CHECK(a.offload_threshold == DMAPP_OFFLOAD_THRESHOLD);
  const uint32_t thresholds[] = {0, DMAPP_OFFLOAD_THRESHOLD, 0xFFFFFFFFu};
  for (int k = 0; k < 3; ++k) {
    a.offload_threshold = thresholds[k];
    OK(dmapp_set_rma_attrs(&a, &got));
    CHECK(got.offload_threshold == thresholds[k]);
    for (uint64_t i = 0; i < n; ++i) src[i] = pattern(me, i + k);
    barrier();
    OK(dmapp_put(dst, heap_seg, right, src, n, DMAPP_QW));          /* large, unregistered source */
    OK(dmapp_put(dst + 3, heap_seg, right, src + 3, 100, DMAPP_QW)); /* small */
    barrier();
    int good = 1;
    for (uint64_t i = 0; i < n; ++i) good &= dst[i] == pattern(left, i + k);
    CHECK(good);
    memset(back, 0, n * 8);
    OK(dmapp_get(back, dst, heap_seg, right, n, DMAPP_QW));
    good = 1;
    for (uint64_t i = 0; i < n; ++i) good &= back[i] == pattern(me, i + k);
    CHECK(good);
    OK(dmapp_get(back, dst + 5, heap_seg, right, 7, DMAPP_QW));
    CHECK(back[0] == pattern(me, 5 + k) && back[6] == pattern(me, 11 + k));
    barrier();
  }
  a.offload_threshold = DMAPP_OFFLOAD_THRESHOLD;
  OK(dmapp_set_rma_attrs(&a, NULL));
  free(src);
  free(back);
  dmapp_sheap_free(dst);
}

/* _nb with syncids and _nbi with gsync, into the heap and the data segment. */
static void test_nonblocking(void) {
  const int right = (me + 1) % npes, left = (me + npes - 1) % npes;
  uint64_t *dst = dmapp_sheap_malloc(64 * 8);
  static uint64_t src[64];
  for (int i = 0; i < 64; ++i) src[i] = pattern(me, (uint64_t)i);
  memset(dst, 0, 64 * 8);
  memset(g_data, 0, sizeof g_data);
  barrier();
  dmapp_syncid_handle_t ids[8];
  for (int i = 0; i < 8; ++i) OK(dmapp_put_nb(dst + 8 * i, heap_seg, right, src + 8 * i, 8, DMAPP_QW, &ids[i]));
  for (int i = 0; i < 4; ++i) {
    int done = 0;
    while (!done) OK(dmapp_syncid_test(&ids[i], &done));
  }
  for (int i = 4; i < 8; ++i) OK(dmapp_syncid_wait(&ids[i]));
  CHECK_RC(dmapp_syncid_wait(&ids[0]), DMAPP_RC_INVALID_PARAM); /* retired */
  for (int i = 0; i < 64; ++i) OK(dmapp_put_nbi(&g_data[i], data_seg, right, &src[i], 1, DMAPP_QW));
  int flag = 0;
  OK(dmapp_gsync_test(&flag));
  OK(dmapp_gsync_wait());
  OK(dmapp_gsync_test(&flag));
  CHECK(flag == 1);
  barrier();
  int good = 1;
  for (int i = 0; i < 64; ++i) good &= dst[i] == pattern(left, (uint64_t)i) && (uint64_t)g_data[i] == pattern(left, (uint64_t)i);
  CHECK(good);
  /* Gets back, nb and nbi. */
  uint64_t back[64];
  memset(back, 0, sizeof back);
  dmapp_syncid_handle_t id;
  OK(dmapp_get_nb(back, dst, heap_seg, right, 32, DMAPP_QW, &id));
  OK(dmapp_syncid_wait(&id));
  OK(dmapp_get_nbi(back + 32, (void *)&g_data[32], data_seg, right, 32, DMAPP_QW));
  OK(dmapp_gsync_wait());
  good = 1;
  for (int i = 0; i < 64; ++i) good &= back[i] == pattern(me, (uint64_t)i);
  CHECK(good);
  /* gsync does not retire explicit syncids (§3): the syncid stays valid until tested. Nor
   * does it wait for them: a PUT to another host or under injected delays may still be in
   * flight, so test until done (tools/soak found the check racing). */
  OK(dmapp_put_nb(dst, heap_seg, right, src, 1, DMAPP_QW, &id));
  OK(dmapp_gsync_wait());
  CHECK(id != NULL);
  int done = 0;
  dmapp_return_t trc = DMAPP_RC_SUCCESS;
  const time_t until = time(NULL) + 30; /* a lost packet costs a retransmission or more */
  while (trc == DMAPP_RC_SUCCESS && !done && time(NULL) < until) trc = dmapp_syncid_test(&id, &done);
  if (trc != DMAPP_RC_SUCCESS || !done) fprintf(stderr, "PE %d: syncid_test rc %d done %d\n", me, (int)trc, done);
  CHECK(trc == DMAPP_RC_SUCCESS && done == 1 && id == NULL);
  /* get_flag_nbi behaves as get_nbi. */
  uint64_t one = 0;
  OK(dmapp_get_flag_nbi(&one, dst + 9, heap_seg, right, 1, DMAPP_QW));
  OK(dmapp_gsync_wait());
  CHECK(one == pattern(me, 9));
  barrier();
  dmapp_sheap_free(dst);
}

/* Strided and indexed layouts. */
static void test_strided_indexed(void) {
  const int right = (me + 1) % npes, left = (me + npes - 1) % npes;
  uint64_t *dst = dmapp_sheap_malloc(256 * 8);
  uint64_t src[256], back[256];
  for (int i = 0; i < 256; ++i) src[i] = pattern(me, (uint64_t)i);
  memset(dst, 0, 256 * 8);
  barrier();
  OK(dmapp_iput(dst, heap_seg, right, src, 3, 2, 40, DMAPP_QW)); /* target every 3rd, source every 2nd */
  barrier();
  int good = 1;
  for (int i = 0; i < 120; ++i) good &= dst[i] == (i % 3 == 0 ? pattern(left, (uint64_t)(i / 3) * 2) : 0);
  CHECK(good);
  memset(back, 0, sizeof back);
  OK(dmapp_iget(back, dst, heap_seg, right, 2, 3, 40, DMAPP_QW)); /* gather it back into every 2nd */
  good = 1;
  for (int i = 0; i < 40; ++i) good &= back[2 * i] == pattern(me, (uint64_t)i * 2) && back[2 * i + 1] == 0;
  CHECK(good);
  barrier();
  memset(dst, 0, 256 * 8);
  barrier();
  ptrdiff_t idx[10] = {200, 0, 7, 100, 3, 255, 50, 51, 9, 128};
  dmapp_syncid_handle_t id;
  OK(dmapp_ixput_nb(dst, heap_seg, right, src, idx, 10, DMAPP_QW, &id));
  OK(dmapp_syncid_wait(&id));
  barrier();
  good = 1;
  for (int i = 0; i < 10; ++i) good &= dst[idx[i]] == pattern(left, (uint64_t)i);
  CHECK(good);
  memset(back, 0, sizeof back);
  OK(dmapp_ixget(back, dst, heap_seg, right, idx, 10, DMAPP_QW));
  good = 1;
  for (int i = 0; i < 10; ++i) good &= back[i] == pattern(me, (uint64_t)i);
  CHECK(good);
  barrier(); /* the neighbour has checked before we overwrite */
  OK(dmapp_iput_nbi(dst, heap_seg, right, src, 2, 1, 5, DMAPP_DW));
  OK(dmapp_gsync_wait());
  barrier();
  /* DW element i of the source lands at DW 2i of the target: the low halves of QW 0..4. */
  uint64_t lsrc[3] = {pattern(left, 0), pattern(left, 1), pattern(left, 2)};
  good = 1;
  for (int i = 0; i < 5; ++i) good &= ((uint32_t *)dst)[2 * i] == ((uint32_t *)lsrc)[i];
  CHECK(good);
  /* Indexed GET of bytes (Cray's header: not supported; nicemu moves them). */
  uint8_t bytes_back[10];
  OK(dmapp_ixget(bytes_back, dst, heap_seg, right, idx, 10, DMAPP_BYTE));
  OK(dmapp_get(back, dst, heap_seg, right, 256, DMAPP_QW)); /* the whole block, aligned */
  good = 1;
  for (int i = 0; i < 10; ++i) good &= bytes_back[i] == ((uint8_t *)back)[idx[i]];
  CHECK(good);
  barrier();
  dmapp_sheap_free(dst);
}

/* Multi-PE calls: the same data to all, a scatter of blocks, a gather of blocks. */
static void test_ixpe(void) {
  int64_t *slot = dmapp_sheap_malloc((size_t)npes * 8);
  int64_t *all = dmapp_sheap_malloc((size_t)npes * 8);
  dmapp_pe_t *pes = malloc((size_t)npes * sizeof *pes);
  for (int i = 0; i < npes; ++i) pes[i] = i;
  memset(slot, 0, (size_t)npes * 8);
  barrier();
  int64_t v = 1000 + me;
  OK(dmapp_put_ixpe(&slot[me], heap_seg, pes, (uint32_t)npes, &v, 1, DMAPP_QW));
  barrier();
  int good = 1;
  for (int i = 0; i < npes; ++i) good &= slot[i] == 1000 + i;
  CHECK(good);
  barrier();
  /* PE 0 scatters block i (one QW: 500+i) into `all[0]` of PE i. */
  int64_t *blocks = malloc((size_t)npes * 8);
  for (int i = 0; i < npes; ++i) blocks[i] = 500 + i;
  if (me == 0) OK(dmapp_scatter_ixpe(all, heap_seg, pes, (uint32_t)npes, blocks, 1, DMAPP_QW));
  barrier();
  CHECK(all[0] == 500 + me);
  /* Everyone gathers slot[me]... from every PE: element i is PE i's value 1000+me. */
  int64_t *got = calloc((size_t)npes, 8);
  dmapp_syncid_handle_t id;
  OK(dmapp_gather_ixpe_nb(got, &slot[me], heap_seg, pes, (uint32_t)npes, 1, DMAPP_QW, &id));
  OK(dmapp_syncid_wait(&id));
  good = 1;
  for (int i = 0; i < npes; ++i) good &= got[i] == 1000 + me;
  CHECK(good);
  barrier();
  free(got);
  free(blocks);
  free(pes);
  dmapp_sheap_free(all);
  dmapp_sheap_free(slot);
}

/* Put with flag: the target sees the flag only after the data; FMA and BTE sizes. */
static void test_put_flag(void) {
  const int right = (me + 1) % npes, left = (me + npes - 1) % npes;
  const uint64_t sizes[] = {16, 65536};
  uint64_t *buf = dmapp_sheap_malloc(65536 * 8 + 64);
  volatile uint64_t *flag = (volatile uint64_t *)(buf + 65536);
  uint64_t *src = malloc(65536 * 8);
  for (int k = 0; k < 2; ++k) {
    const uint64_t n = sizes[k];
    for (uint64_t i = 0; i < n; ++i) src[i] = pattern(me, i + (uint64_t)k);
    memset(buf, 0, 65536 * 8 + 64);
    barrier();
    if (k == 0)
      OK(dmapp_put_flag(buf, heap_seg, right, src, n, DMAPP_QW, (void *)flag, 77));
    else
      OK(dmapp_put_flag_nbi(buf, heap_seg, right, src, n, DMAPP_QW, (void *)flag, 78));
    while (*flag == 0) dmapp_progress();
    CHECK(*flag == (k == 0 ? 77u : 78u));
    int good = 1;
    for (uint64_t i = 0; i < n; ++i) good &= buf[i] == pattern(left, i + (uint64_t)k);
    CHECK(good);
    OK(dmapp_gsync_wait());
    barrier();
  }
  /* Flag in the data segment, _nb form. */
  g_flag = 0;
  barrier();
  dmapp_syncid_handle_t id;
  OK(dmapp_put_flag_nb(&g_data[0], data_seg, right, src, 4, DMAPP_QW, (void *)&g_flag, 5, &id));
  OK(dmapp_syncid_wait(&id));
  while (g_flag == 0) dmapp_progress();
  CHECK(g_flag == 5 && (uint64_t)g_data[3] == pattern(left, 4)); /* src holds the k = 1 pattern */
  barrier();
  free(src);
  dmapp_sheap_free(buf);
}

/* AMOs: N PEs hammer one counter on PE 0 and one on the last PE (another node with
 * --nodes 2); fetched values are all distinct; bitwise ops, afax, cswap. */
static void test_amos(void) {
  enum { kIters = 300 };
  int64_t *w = dmapp_sheap_malloc(8 * 8);
  memset(w, 0, 8 * 8);
  barrier();
  const int last = npes - 1;
  int64_t fetched_sum = 0;
  for (int i = 0; i < kIters; ++i) {
    int64_t old = -1;
    OK(dmapp_afadd_qw(&old, &w[0], heap_seg, 0, 1));
    fetched_sum += old;
    OK(dmapp_aadd_qw_nbi(&w[1], heap_seg, last, 2));
  }
  dmapp_syncid_handle_t id;
  dmapp_return_t nrc = dmapp_aadd_qw_nb(&w[1], heap_seg, last, 5, &id);
  if (nrc == DMAPP_RC_NO_SPACE) { /* the nbi adds may still hold every slot (a PE on another host) */
    OK(dmapp_gsync_wait());
    nrc = dmapp_aadd_qw_nb(&w[1], heap_seg, last, 5, &id);
  }
  CHECK(nrc == DMAPP_RC_SUCCESS);
  OK(dmapp_syncid_wait(&id));
  OK(dmapp_gsync_wait());
  /* Bit me of word 2 set by OR, bit me of word 3 cleared by AND (starts all ones), word 4
   * toggled by XOR; word 5 via afax (set bit me+32). */
  if (me == 0) w[3] = -1;
  barrier();
  OK(dmapp_aor_qw(&w[2], heap_seg, 0, (int64_t)1 << (me % 32)));
  OK(dmapp_aand_qw_nbi(&w[3], heap_seg, 0, ~((int64_t)1 << (me % 32))));
  OK(dmapp_axor_qw(&w[4], heap_seg, 0, (int64_t)1 << (me % 32)));
  int64_t old = 0;
  OK(dmapp_afax_qw(&old, &w[5], heap_seg, 0, -1, (int64_t)1 << (32 + me % 32)));
  /* Each fetch into its own word: an implicit (nbi) result may land any time before the
   * gsync, also after a later blocking AMO's (seen under injected packet delays). */
  int64_t o_or = -1, o_xor = -1;
  OK(dmapp_afor_qw_nbi(&o_or, &w[6], heap_seg, 0, 1));
  OK(dmapp_afxor_qw_nb(&o_xor, &w[6], heap_seg, 0, 0, &id));
  OK(dmapp_syncid_wait(&id));
  OK(dmapp_gsync_wait()); /* our OR is done: w[6] is 1 from here on */
  CHECK((o_or == 0 || o_or == 1) && (o_xor == 0 || o_xor == 1));
  OK(dmapp_afand_qw(&old, &w[6], heap_seg, 0, -1));
  CHECK(old == 1);
  OK(dmapp_gsync_wait());
  barrier();
  int64_t *sums = calloc((size_t)npes, 8);
  PMI_Allgather(&fetched_sum, sums, 8);
  if (me == 0) {
    const int64_t total = (int64_t)npes * kIters;
    CHECK(w[0] == total);
    int64_t s = 0;
    for (int i = 0; i < npes; ++i) s += sums[i];
    CHECK(s == total * (total - 1) / 2); /* every value 0..total-1 fetched exactly once */
    int64_t mask = 0;
    for (int i = 0; i < npes; ++i) mask |= (int64_t)1 << (i % 32);
    CHECK(w[2] == mask);
    if (npes <= 32) CHECK(w[3] == ~mask);
    if (npes <= 32) CHECK(w[4] == mask);
    if (npes <= 32) CHECK(w[5] == (mask << 32));
  }
  if (me == last) CHECK(w[1] == (int64_t)npes * (kIters * 2 + 5));
  barrier();
  /* Compare-and-swap: exactly one PE wins slot 7 (0 -> pe+1). */
  int64_t prev = -1;
  OK(dmapp_acswap_qw(&prev, &w[7], heap_seg, 0, 0, me + 1));
  int won = prev == 0, *wins = calloc((size_t)npes, sizeof(int));
  PMI_Allgather(&won, wins, sizeof won);
  int nwins = 0;
  for (int i = 0; i < npes; ++i) nwins += wins[i];
  CHECK(nwins == 1);
  barrier();
  free(wins);
  free(sums);
  dmapp_sheap_free(w);
}

/* Locks: a get/increment/put on PE 0's word under the lock is never lost. */
static void test_locks(void) {
  enum { kRounds = 40 };
  dmapp_lock_desc_t *lock = dmapp_sheap_malloc(sizeof *lock);
  int64_t *counter = dmapp_sheap_malloc(8);
  memset(lock, 0, sizeof *lock);
  *counter = 0;
  barrier();
  for (int i = 0; i < kRounds; ++i) {
    dmapp_lock_handle_t h;
    OK(dmapp_lock_acquire(lock, heap_seg, 0, 0, &h));
    int64_t v = 0;
    OK(dmapp_get(&v, counter, heap_seg, 0, 1, DMAPP_QW));
    ++v;
    OK(dmapp_put(counter, heap_seg, 0, &v, 1, DMAPP_QW));
    if (i % 2)
      OK(dmapp_lock_release(h, 0));
    else
      OK(dmapp_lock_release_addr(lock, 0, 0));
  }
  barrier();
  if (me == 0) CHECK(*counter == (int64_t)npes * kRounds);
  /* try: free lock taken, then held lock refused. */
  barrier();
  if (me == 0) {
    dmapp_lock_handle_t h, h2;
    OK(dmapp_lock_try(lock, heap_seg, 0, 0, &h));
    CHECK_RC(dmapp_lock_try(lock, heap_seg, 0, 0, &h2), DMAPP_RC_NOT_DONE);
    OK(dmapp_lock_release(h, 0));
  }
  barrier();
  dmapp_sheap_free(counter);
  dmapp_sheap_free(lock);
}

/* Dynamic registration: descriptors exchanged over PMI, puts into the neighbour's malloc'd
 * buffer; after the neighbour unregisters, the access is a transaction error. */
static void test_dynamic(void) {
  const int right = (me + 1) % npes, left = (me + npes - 1) % npes;
  uint64_t *buf = aligned_alloc(4096, 8192);
  memset(buf, 0, 8192);
  dmapp_seg_desc_t mine, *all = calloc((size_t)npes, sizeof mine);
  OK(dmapp_mem_register(buf, 8192, &mine));
  CHECK(mine.addr == buf && mine.len == 8192);
  struct {
    int pe;
    dmapp_seg_desc_t d;
  } x = {me, mine}, *xs = calloc((size_t)npes, sizeof x);
  PMI_Allgather(&x, xs, sizeof x);
  for (int i = 0; i < npes; ++i) all[xs[i].pe] = xs[i].d;
  dmapp_seg_desc_t *rseg = &all[right];
  uint64_t v[4] = {pattern(me, 1), pattern(me, 2), pattern(me, 3), pattern(me, 4)};
  barrier();
  OK(dmapp_put(rseg->addr, rseg, right, v, 4, DMAPP_QW));
  barrier();
  CHECK(buf[0] == pattern(left, 1) && buf[3] == pattern(left, 4));
  uint64_t back[4] = {0};
  OK(dmapp_get(back, rseg->addr, rseg, right, 4, DMAPP_QW));
  CHECK(back[3] == pattern(me, 4));
  /* Out of the neighbour's segment: refused before anything moves. */
  CHECK_RC(dmapp_put((char *)rseg->addr + 8192, rseg, right, v, 1, DMAPP_QW), DMAPP_RC_INVALID_PARAM);
  CHECK_RC(dmapp_put((char *)rseg->addr + 8190, rseg, right, v, 1, DMAPP_QW), DMAPP_RC_INVALID_PARAM);
  int same = 0;
  OK(dmapp_segdesc_compare(&mine, &mine, &same));
  CHECK(same == 1);
  OK(dmapp_segdesc_compare(&mine, heap_seg, &same));
  CHECK(same == 0);
  barrier();
  OK(dmapp_mem_unregister(&mine));
  barrier();
  /* The neighbour's memory is no longer registered: the target refuses. */
  for (int i = 0; i < 4; ++i) v[i] = 0xDEADull + (uint64_t)i;
  CHECK_RC(dmapp_put(rseg->addr, rseg, right, v, 1, DMAPP_QW), DMAPP_RC_TRANSACTION_ERROR);
  CHECK_RC(dmapp_get(back, rseg->addr, rseg, right, 1, DMAPP_QW), DMAPP_RC_TRANSACTION_ERROR);
  int64_t o;
  CHECK_RC(dmapp_afadd_qw(&o, rseg->addr, rseg, right, 1), DMAPP_RC_TRANSACTION_ERROR);
  dmapp_syncid_handle_t id;
  OK(dmapp_put_nb(rseg->addr, rseg, right, v, 1, DMAPP_QW, &id));
  CHECK_RC(dmapp_syncid_wait(&id), DMAPP_RC_TRANSACTION_ERROR);
  OK(dmapp_put_nbi(rseg->addr, rseg, right, v, 1, DMAPP_QW));
  CHECK_RC(dmapp_gsync_wait(), DMAPP_RC_TRANSACTION_ERROR);
  OK(dmapp_gsync_wait()); /* the error was reported once */
  CHECK_RC(dmapp_mem_unregister(&mine), DMAPP_RC_INVALID_PARAM);
  barrier();
  CHECK(buf[0] == pattern(left, 1)); /* nothing written after unregister */
  free(xs);
  free(all);
  free(buf);
}

/* Queues: every PE sends kMsgs messages to every other PE through rings of 8 slots (so
 * senders wait for room and wrap many times); each sender's messages arrive complete and
 * in order, and the callback may itself call DMAPP. */
enum { kMsgs = 60 };
static long q_received, q_bad;
static int64_t q_next[64];

static int on_message(void *ctx, void *data, uint32_t len, dmapp_pe_t from) {
  int64_t m[3];
  if (ctx != (void *)&q_received || len != sizeof m || from < 0 || from >= npes) {
    ++q_bad;
    return 0;
  }
  memcpy(m, data, sizeof m);
  if (m[0] != from || m[1] != q_next[from] || m[2] != (int64_t)pattern(from, (uint64_t)m[1])) ++q_bad;
  q_next[from] = m[1] + 1;
  ++q_received;
  int flag;
  dmapp_gsync_test(&flag); /* DMAPP from inside a callback */
  return 0;
}

static void test_queues(void) {
  dmapp_queue_handle_t q;
  CHECK_RC(dmapp_queue_attach(on_message, &q_received, DMAPP_QUEUE_ASYNC_PROGRESS, &q), DMAPP_RC_NOT_SUPPORTED);
  OK(dmapp_queue_attach(on_message, &q_received, 0, &q));
  dmapp_queue_handle_t q2;
  CHECK_RC(dmapp_queue_attach(on_message, NULL, 0, &q2), DMAPP_RC_BUSY);
  barrier();
  for (int i = 0; i < kMsgs; ++i)
    for (int k = 1; k < npes; ++k) {
      const int to = (me + k) % npes;
      int64_t m[3] = {me, i, (int64_t)pattern(me, (uint64_t)i)};
      OK(dmapp_queue_put(q, m, 3, DMAPP_QW, to, 0));
    }
  int64_t big[8] = {0};
  CHECK_RC(dmapp_queue_put(q, big, 5, DMAPP_QW, 0, 0), DMAPP_RC_INVALID_PARAM); /* > queue_nelems */
  CHECK_RC(dmapp_queue_put(q, big, 1, DMAPP_QW, npes, 0), DMAPP_RC_INVALID_PARAM);
  while (q_received < (long)kMsgs * (npes - 1)) dmapp_progress();
  CHECK(q_received == (long)kMsgs * (npes - 1));
  CHECK(q_bad == 0);
  barrier();
  OK(dmapp_queue_detach(q, 0));
  CHECK_RC(dmapp_queue_detach(q, 0), DMAPP_RC_INVALID_PARAM);
}

/* Documented errors for bad input; nothing moves. */
static void test_errors(void) {
  uint64_t *w = dmapp_sheap_malloc(64);
  uint64_t v = 1, r = 0;
  CHECK_RC(dmapp_put(w, heap_seg, npes, &v, 1, DMAPP_QW), DMAPP_RC_INVALID_PARAM);
  CHECK_RC(dmapp_put(w, heap_seg, -1, &v, 1, DMAPP_QW), DMAPP_RC_INVALID_PARAM);
  CHECK_RC(dmapp_get(&r, w, heap_seg, npes + 3, 1, DMAPP_QW), DMAPP_RC_INVALID_PARAM);
  CHECK_RC(dmapp_aadd_qw(w, heap_seg, npes, 1), DMAPP_RC_INVALID_PARAM);
  /* Outside the symmetric heap (just past its end) and outside the data segment. */
  char *end = (char *)info.sheap_seg.addr + info.sheap_seg.len;
  CHECK_RC(dmapp_put(end, heap_seg, 0, &v, 1, DMAPP_QW), DMAPP_RC_INVALID_PARAM);
  CHECK_RC(dmapp_put(end - 4, heap_seg, 0, &v, 1, DMAPP_QW), DMAPP_RC_INVALID_PARAM);
  CHECK_RC(dmapp_put(&v, data_seg, 0, &v, 1, DMAPP_QW), DMAPP_RC_INVALID_PARAM); /* a stack address */
  CHECK_RC(dmapp_put(w, NULL, 0, &v, 1, DMAPP_QW), DMAPP_RC_INVALID_PARAM);
  CHECK_RC(dmapp_put(w, heap_seg, 0, &v, 1, (dmapp_type_t)9), DMAPP_RC_INVALID_PARAM);
  CHECK_RC(dmapp_iput(w, heap_seg, 0, &v, 0, 1, 1, DMAPP_QW), DMAPP_RC_INVALID_PARAM);
  /* GETs of any address and length succeed (the library moves what GNI would refuse, as
   * Cray's DMAPP does; dmapp_align.c sweeps them); zero-length GETs are refused. AMOs need
   * 8-byte alignment. */
  OK(dmapp_put(w, heap_seg, me, "0123456789", 10, DMAPP_BYTE));
  r = 0;
  OK(dmapp_get(&r, (char *)w + 2, heap_seg, me, 4, DMAPP_BYTE));
  CHECK(memcmp(&r, "2345", 4) == 0);
  r = 0;
  OK(dmapp_get((char *)&r + 1, w, heap_seg, me, 3, DMAPP_BYTE));
  CHECK(memcmp((char *)&r + 1, "012", 3) == 0 && ((char *)&r)[0] == 0 && ((char *)&r)[4] == 0);
  CHECK_RC(dmapp_get(&r, w, heap_seg, 0, 0, DMAPP_QW), DMAPP_RC_INVALID_PARAM);
  CHECK_RC(dmapp_aadd_qw((char *)w + 4, heap_seg, 0, 1), DMAPP_RC_ALIGNMENT_ERROR);
  CHECK_RC(dmapp_afadd_qw((char *)&r + 1, w, heap_seg, 0, 1), DMAPP_RC_ALIGNMENT_ERROR);
  /* Bytes put anywhere work (no alignment rule for PUTs). */
  OK(dmapp_put((char *)w + 3, heap_seg, me, "abc", 3, DMAPP_BYTE));
  CHECK(memcmp((char *)w + 3, "abc", 3) == 0);
  /* Syncids run out at max_outstanding_nb while none is retired. */
  dmapp_rma_attrs_t a;
  OK(dmapp_get_rma_attrs(&a));
  dmapp_syncid_handle_t *ids = calloc(a.max_outstanding_nb + 1, sizeof *ids);
  uint32_t held = 0;
  dmapp_return_t rc = DMAPP_RC_SUCCESS;
  while (held <= a.max_outstanding_nb &&
         (rc = dmapp_put_nb(w, heap_seg, me, &v, 1, DMAPP_QW, &ids[held])) == DMAPP_RC_SUCCESS)
    ++held;
  CHECK(held == a.max_outstanding_nb);
  CHECK(rc == DMAPP_RC_NO_SPACE);
  for (uint32_t i = 0; i < held; ++i) OK(dmapp_syncid_wait(&ids[i]));
  OK(dmapp_put_nb(w, heap_seg, me, &v, 1, DMAPP_QW, &ids[0]));
  OK(dmapp_syncid_wait(&ids[0]));
  free(ids);
  CHECK_RC(dmapp_syncid_test(NULL, NULL), DMAPP_RC_INVALID_PARAM);
  CHECK_RC(dmapp_queue_detach(NULL, 0), DMAPP_RC_INVALID_PARAM);
  CHECK_RC(dmapp_c_pset_export(NULL), DMAPP_RC_NOT_SUPPORTED);
  CHECK_RC(dmapp_init(NULL, NULL), DMAPP_RC_INVALID_PARAM); /* twice */
  const char *msg = NULL;
  OK(dmapp_explain_error(DMAPP_RC_NO_SPACE, &msg));
  CHECK(msg && strstr(msg, "NO_SPACE"));
  barrier();
  dmapp_sheap_free(w);
}

/* --probe BYTES THRESHOLD: one PUT and one GET of BYTES to the right neighbour with the
 * offload threshold at THRESHOLD, nothing else; test_dmapp.sh checks from the daemon's
 * counters which engine carried them. */
static int probe(uint64_t bytes, uint32_t threshold) {
  if (dmapp_init(NULL, NULL) != DMAPP_RC_SUCCESS) return 1;
  dmapp_get_jobinfo(&info);
  dmapp_rma_attrs_t a;
  dmapp_get_rma_attrs(&a);
  a.offload_threshold = threshold;
  dmapp_set_rma_attrs(&a, NULL);
  char *buf = dmapp_sheap_malloc(bytes), *src = malloc(bytes);
  memset(src, 7, bytes);
  int rc = dmapp_put(buf, &info.sheap_seg, (info.pe + 1) % info.npes, src, bytes, DMAPP_BYTE) != DMAPP_RC_SUCCESS;
  rc |= dmapp_get(src, buf, &info.sheap_seg, (info.pe + 1) % info.npes, bytes, DMAPP_BYTE) != DMAPP_RC_SUCCESS;
  free(src);
  rc |= dmapp_finalize() != DMAPP_RC_SUCCESS;
  return rc;
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--probe")) return probe(strtoull(argv[2], NULL, 0), (uint32_t)strtoul(argv[3], NULL, 0));
  int spawned;
  /* Before init: a clear error, no crash. */
  dmapp_jobinfo_t early;
  if (dmapp_get_jobinfo(&early) != DMAPP_RC_INVALID_PARAM) {
    fprintf(stderr, "dmapp_get_jobinfo before init did not fail\n");
    return 1;
  }
  if (PMI_Init(&spawned) != PMI_SUCCESS) return 1;
  dmapp_rma_attrs_ext_t req, act;
  memset(&req, 0, sizeof req);
  req.max_outstanding_nb = 64;
  req.offload_threshold = DMAPP_OFFLOAD_THRESHOLD;
  req.put_relaxed_ordering = DMAPP_ROUTING_DETERMINISTIC;
  req.get_relaxed_ordering = DMAPP_ROUTING_ADAPTIVE;
  req.max_concurrency = 1;
  req.PI_ordering = DMAPP_PI_ORDERING_RELAXED;
  req.queue_depth = 8;
  req.queue_nelems = 4;
  dmapp_rma_attrs_ext_t bad = req;
  bad.max_outstanding_nb = DMAPP_MAX_OUTSTANDING_NB + 1;
  if (dmapp_init_ext(&bad, &act) != DMAPP_RC_INVALID_PARAM) {
    fprintf(stderr, "dmapp_init_ext accepted max_outstanding_nb above the maximum\n");
    return 1;
  }
  if (start_job(&req, &act, "dmapp_init_ext")) return 1;
  heap_seg = &info.sheap_seg;
  data_seg = &info.data_seg;
  CHECK(act.max_outstanding_nb == 64 && act.PI_ordering == DMAPP_PI_ORDERING_RELAXED);

  test_init_and_symmetry();
  test_contiguous();
  test_threshold();
  test_nonblocking();
  test_strided_indexed();
  test_ixpe();
  test_put_flag();
  test_amos();
  test_locks();
  test_dynamic();
  test_queues();
  test_errors();

  OK(dmapp_finalize());
  if (end_job()) return 1;
  if (me == 0) printf("dmapp suite: %d PEs, %d checks passed on PE 0\n", npes, checks);
  /* The suite's own PMI_Init: Hydra ends a job with SIGKILL when one of its processes exits
   * without PMI_Finalize, and with PEs that finish at different times the slower ones die. */
  fflush(stdout);
  PMI_Finalize();
  return 0;
}
