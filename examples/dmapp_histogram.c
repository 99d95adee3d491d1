/* A distributed histogram with DMAPP atomics: the bins are spread over the PEs' symmetric
 * heaps (bin b lives on PE b % npes), every PE draws its own pseudo-random samples and adds
 * one to the owning bin with a non-blocking remote atomic add (dmapp_aadd_qw_nbi), then
 * waits for all of them with dmapp_gsync_wait. PE 0 gathers the bins with dmapp_get and
 * prints the histogram; the total and every bin are checked against a serial recount.
 * Run it with: nicemu-run -n 4 --nodes 2 build/examples/dmapp_histogram [samples] */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmapp.h"
#include "pmi.h"

#define BINS 16

/* A small deterministic generator per PE, so PE 0 can recount every PE's samples. */
static uint64_t next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Roughly bell-shaped: the sum of four uniform draws, scaled to the bins. */
static int sample_bin(uint64_t *s) {
  uint64_t sum = 0;
  for (int i = 0; i < 4; ++i) sum += next(s) % BINS;
  return (int)(sum / 4);
}

int main(int argc, char **argv) {
  const long samples = argc > 1 ? atol(argv[1]) : 20000;
  if (dmapp_init(NULL, NULL) != DMAPP_RC_SUCCESS) {
    fprintf(stderr, "dmapp_histogram: dmapp_init failed (run it with nicemu-run)\n");
    return 1;
  }
  dmapp_jobinfo_t info;
  dmapp_get_jobinfo(&info);
  const int me = info.pe, npes = info.npes;
  const int per_pe = (BINS + npes - 1) / npes;
  /* Same call on every PE: the same symmetric address everywhere. */
  int64_t *bins = dmapp_sheap_malloc((size_t)per_pe * sizeof *bins);
  if (!bins) return 1;
  memset(bins, 0, (size_t)per_pe * sizeof *bins);
  PMI_Barrier();

  uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)(me + 1);
  for (long i = 0; i < samples; ++i) {
    const int b = sample_bin(&seed);
    dmapp_return_t rc = dmapp_aadd_qw_nbi(&bins[b / npes], &info.sheap_seg, b % npes, 1);
    if (rc == DMAPP_RC_NO_SPACE) { /* too many in flight: complete them and retry */
      rc = dmapp_gsync_wait(); /* an add that failed is reported here, not later */
      if (rc == DMAPP_RC_SUCCESS) rc = dmapp_aadd_qw_nbi(&bins[b / npes], &info.sheap_seg, b % npes, 1);
    }
    if (rc != DMAPP_RC_SUCCESS) {
      const char *msg;
      dmapp_explain_error(rc, &msg);
      fprintf(stderr, "PE %d: %s\n", me, msg);
      return 1;
    }
  }
  if (dmapp_gsync_wait() != DMAPP_RC_SUCCESS) {
    fprintf(stderr, "PE %d: an atomic add failed\n", me);
    return 1;
  }
  PMI_Barrier(); /* every PE's adds are done */

  int bad = 0;
  if (me == 0) {
    int64_t all[BINS], expect[BINS] = {0}, total = 0, peak = 1;
    for (int b = 0; b < BINS; ++b)
      if (dmapp_get(&all[b], &bins[b / npes], &info.sheap_seg, b % npes, 1, DMAPP_QW) != DMAPP_RC_SUCCESS) return 1;
    for (int p = 0; p < npes; ++p) {
      uint64_t s = 0x9E3779B97F4A7C15ull ^ (uint64_t)(p + 1);
      for (long i = 0; i < samples; ++i) ++expect[sample_bin(&s)];
    }
    for (int b = 0; b < BINS; ++b) {
      total += all[b];
      if (all[b] > peak) peak = all[b];
      bad |= all[b] != expect[b];
    }
    printf("histogram of %ld samples from %d PEs (bin: count, owner PE)\n", samples * npes, npes);
    for (int b = 0; b < BINS; ++b) {
      char bar[51];
      int w = (int)(all[b] * 50 / peak);
      memset(bar, '#', (size_t)w);
      bar[w] = '\0';
      printf("%3d: %8" PRId64 "  PE %d  %s\n", b, all[b], b % npes, bar);
    }
    printf("total %" PRId64 ", %s\n", total, bad || total != samples * npes ? "MISMATCH with the serial recount" : "matches the serial recount");
    bad |= total != samples * npes;
  }
  dmapp_sheap_free(bins);
  dmapp_finalize();
  return bad;
}
