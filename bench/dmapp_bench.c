/* The relaxed-ordering micro-benchmark on DMAPP: pairs of PEs (PE 2k initiates, 2k+1 is
 * the target), a window of non-blocking (_nbi) GETs or PUTs completed by one gsync_wait,
 * sizes 8 B .. 4 MiB, ordering strict (DMAPP_ROUTING_IN_ORDER) vs relaxed
 * (DMAPP_ROUTING_ADAPTIVE), engine FMA (offload threshold at its maximum), BTE (threshold
 * 0) or DMAPP's automatic switch (DMAPP_OFFLOAD_THRESHOLD). Each point repeats windows
 * for --ms milliseconds. PE 0 prints one line per point:
 *   op ordering engine bytes windows MB/s us_per_op
 * Run with nicemu-run -n 2 (or more, in pairs); bench/run-dmapp drives it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dmapp.h"
#include "pmi.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  int window = 64;
  double ms = 40;
  uint64_t max_bytes = 4u << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--window")) window = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--ms")) ms = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--max")) max_bytes = strtoull(argv[i + 1], NULL, 0);
  }
  /* The library's defaults, with the most outstanding operations and relaxed ordering. */
  dmapp_rma_attrs_ext_t req, act;
  if (dmapp_get_rma_attrs_ext(&req) != DMAPP_RC_SUCCESS) {
    fprintf(stderr, "dmapp_bench: dmapp_get_rma_attrs_ext failed\n");
    return 1;
  }
  req.max_outstanding_nb = DMAPP_MAX_OUTSTANDING_NB;
  req.put_relaxed_ordering = DMAPP_ROUTING_ADAPTIVE;
  req.PI_ordering = DMAPP_PI_ORDERING_RELAXED;
  if (dmapp_init_ext(&req, &act) != DMAPP_RC_SUCCESS) {
    fprintf(stderr, "dmapp_bench: dmapp_init_ext failed\n");
    return 1;
  }
  dmapp_jobinfo_t info;
  dmapp_get_jobinfo(&info);
  const int me = info.pe, npes = info.npes;
  if (npes < 2 || npes % 2) {
    if (me == 0) fprintf(stderr, "dmapp_bench: needs an even number of PEs\n");
    dmapp_finalize();
    return 1;
  }
  const int initiator = me % 2 == 0, peer = initiator ? me + 1 : me - 1;
  char *remote = dmapp_sheap_malloc(max_bytes), *local = dmapp_sheap_malloc(max_bytes);
  if (!remote || !local) {
    fprintf(stderr, "dmapp_bench: symmetric heap too small (raise XT_SYMMETRIC_HEAP_SIZE)\n");
    return 1;
  }
  memset(remote, 1, max_bytes);
  memset(local, 2, max_bytes);
  /* Around the 4 KiB switch point densely, then up to 4 MiB. */
  const uint64_t sizes[] = {8, 64, 512, 2048, 4096, 8192, 32768, 262144, 1u << 20, 4u << 20};
  const char *ops[] = {"get", "put"};
  const char *orders[] = {"strict", "relaxed"};
  const uint8_t routing[] = {DMAPP_ROUTING_IN_ORDER, DMAPP_ROUTING_ADAPTIVE};
  const char *engines[] = {"fma", "bte", "auto"};
  const uint32_t thresholds[] = {0xFFFFFFFFu, 0, DMAPP_OFFLOAD_THRESHOLD};
  if (me == 0) printf("# op ordering engine bytes windows MB/s us_per_op (window %d, %d PEs)\n", window, npes);
  for (int op = 0; op < 2; ++op)
    for (int o = 0; o < 2; ++o)
      for (int e = 0; e < 3; ++e) {
        dmapp_rma_attrs_ext_t a;
        dmapp_get_rma_attrs_ext(&a);
        a.put_relaxed_ordering = a.get_relaxed_ordering = routing[o];
        a.offload_threshold = thresholds[e];
        dmapp_set_rma_attrs_ext(&a, NULL);
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; ++si) {
          const uint64_t bytes = sizes[si], n = bytes / 4;
          if (bytes > max_bytes) break;
          PMI_Barrier();
          long windows = 0;
          double t0 = now_s(), t = t0;
          if (initiator) {
            /* One window untimed (first touch, mapping of the peer), then windows for --ms. */
            for (long k = -1; k == -1 || t - t0 < ms * 1e-3; ++k) {
              for (int w = 0; w < window; ++w) {
                dmapp_return_t rc = op == 0 ? dmapp_get_nbi(local, remote, &info.sheap_seg, peer, n, DMAPP_DW)
                                            : dmapp_put_nbi(remote, &info.sheap_seg, peer, local, n, DMAPP_DW);
                if (rc != DMAPP_RC_SUCCESS) {
                  fprintf(stderr, "dmapp_bench: PE %d: op failed: %d\n", me, rc);
                  return 1;
                }
              }
              if (dmapp_gsync_wait() != DMAPP_RC_SUCCESS) return 1;
              t = now_s();
              if (k == -1) t0 = t;
              windows = k + 1;
            }
          }
          double res[2] = {windows ? (double)bytes * window * windows / (t - t0) / 1e6 : 0,
                           windows ? (t - t0) * 1e6 / ((double)window * windows) : 0};
          double *all = calloc((size_t)npes, sizeof res);
          PMI_Allgather(res, all, sizeof res);
          if (me == 0) {
            /* Sum of the pairs' bandwidth; mean time per operation. */
            double bw = 0, us = 0;
            for (int i = 0; i < npes; ++i) {
              bw += all[2 * i];
              us += all[2 * i + 1];
            }
            printf("%s %s %s %llu %ld %.1f %.3f\n", ops[op], orders[o], engines[e], (unsigned long long)bytes,
                   windows, bw, us / (npes / 2));
            fflush(stdout);
          }
          free(all);
        }
      }
  dmapp_finalize();
  return 0;
}
