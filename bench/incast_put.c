/* incast_put: RDMA PUT streams from several hosts into one, for bench/fabric-incast and the
 * fabric-incast test. Not a PMI job: the receiver publishes its window (NIC address, inst,
 * address, memory handle) in a file every sender reads, so any number of senders on any
 * namespace hosts can join without a launcher. Credential from PMI_GNI_PTAG / PMI_GNI_COOKIE,
 * daemon from NICEMU_RUNDIR / NICEMU_NODE, as for every client.
 *
 *   incast_put recv FILE SLOTS SIZE
 *       registers a window of SLOTS * SIZE bytes, writes FILE (atomically: FILE.tmp, then
 *       rename), prints "incast_put recv: ready" and waits for SIGTERM/SIGINT: the daemon
 *       does the receiving, the process only keeps the registration alive.
 *   incast_put send FILE INDEX SECONDS SIZE INFLIGHT SAMPLE_MS
 *       waits for FILE, attaches, binds to the receiver, prints "ready", then waits for
 *       FILE.go (so that every sender starts within a few milliseconds of the others) and
 *       keeps INFLIGHT RDMA PUTs of SIZE bytes into slot INDEX % SLOTS of the window for
 *       SECONDS. Prints at the end, one line each:
 *         incast_put send INDEX: bytes B completions C errors E post_errors P max_gap_ms G
 *           drain_errors DE unfinished U start_realtime T
 *         incast_put samples INDEX SAMPLE_MS: b0 b1 ...   (bytes completed in each sample)
 *       A stall (max_gap_ms) is the longest time inside the run without a successful
 *       completion, counting the start (before the first) and the end (after the last).
 *       Completions that come after SECONDS (the drain, at most 30 s) are not counted in the
 *       bytes; their errors are (drain_errors), and posts never completed are "unfinished".
 *       Error completions do not stop the stream: the descriptor is posted again after
 *       ERROR_RETRY_MS, as an application that retries would (at once, a sender whose
 *       channel is down would only count how fast the library fails posts).
 * Exit: 0 the run happened (what it measured is in the output), 1 set-up failed, 2 usage. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gni_pub.h"

#define MAX_INFLIGHT 64
#define RECV_INST 4000u
#define SEND_INST 5000u
#define ERROR_RETRY_MS 10

static const char *usage =
    "usage: incast_put recv FILE SLOTS SIZE\n"
    "       incast_put send FILE INDEX SECONDS SIZE INFLIGHT SAMPLE_MS\n";

static double now_s(int clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void nap_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

static int attach(uint32_t inst, const char *who, gni_cdm_handle_t *cdm, gni_nic_handle_t *nic, uint32_t *addr) {
  const char *ptag_s = getenv("PMI_GNI_PTAG"), *cookie_s = getenv("PMI_GNI_COOKIE");
  if (!ptag_s || !cookie_s) {
    fprintf(stderr, "incast_put %s: no credential in PMI_GNI_PTAG / PMI_GNI_COOKIE\n", who);
    return 1;
  }
  gni_return_t rc = GNI_CdmCreate(inst, (uint8_t)strtoul(ptag_s, NULL, 0), (uint32_t)strtoul(cookie_s, NULL, 0), 0, cdm);
  if (rc == GNI_RC_SUCCESS) rc = GNI_CdmAttach(*cdm, 0, addr, nic);
  if (rc != GNI_RC_SUCCESS) {
    fprintf(stderr, "incast_put %s: GNI_CdmCreate/GNI_CdmAttach failed (rc %d)\n", who, (int)rc);
    return 1;
  }
  return 0;
}

static volatile sig_atomic_t stop;
static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

static int receiver(const char *file, uint64_t slots, uint64_t size) {
  gni_cdm_handle_t cdm;
  gni_nic_handle_t nic;
  uint32_t addr;
  if (attach(RECV_INST, "recv", &cdm, &nic, &addr)) return 1;
  const uint64_t bytes = slots * size;
  void *win = aligned_alloc(4096, bytes);
  gni_mem_handle_t h;
  if (!win) {
    fprintf(stderr, "incast_put recv: cannot allocate %llu bytes\n", (unsigned long long)bytes);
    return 1;
  }
  memset(win, 0, bytes);
  gni_return_t rc = GNI_MemRegister(nic, (uint64_t)win, bytes, NULL, GNI_MEM_READWRITE, -1, &h);
  if (rc != GNI_RC_SUCCESS) {
    fprintf(stderr, "incast_put recv: GNI_MemRegister of %llu bytes failed (rc %d)\n", (unsigned long long)bytes, (int)rc);
    return 1;
  }
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", file);
  FILE *f = fopen(tmp, "w");
  if (!f || fprintf(f, "%u %u %llu %llu %llu %llu %llu\n", addr, RECV_INST, (unsigned long long)(uintptr_t)win,
                    (unsigned long long)h.qword1, (unsigned long long)h.qword2, (unsigned long long)slots,
                    (unsigned long long)size) < 0 ||
      fclose(f) != 0 || rename(tmp, file) != 0) {
    fprintf(stderr, "incast_put recv: cannot write %s: %s\n", file, strerror(errno));
    return 1;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  printf("incast_put recv: ready (NIC address %u, window %llu bytes)\n", addr, (unsigned long long)bytes);
  fflush(stdout);
  while (!stop) pause();
  GNI_MemDeregister(nic, &h);
  GNI_CdmDestroy(cdm);
  free(win);
  return 0;
}

/* The receiver's window from FILE, waiting up to 30 s for it to appear. */
static int read_target(const char *file, uint32_t *addr, uint32_t *inst, uint64_t *win, gni_mem_handle_t *h,
                       uint64_t *slots) {
  for (int i = 0; i < 3000; ++i) {
    FILE *f = fopen(file, "r");
    if (f) {
      unsigned long long w, q1, q2, s, sz;
      int n = fscanf(f, "%u %u %llu %llu %llu %llu %llu", addr, inst, &w, &q1, &q2, &s, &sz);
      fclose(f);
      if (n == 7) {
        *win = w;
        h->qword1 = q1;
        h->qword2 = q2;
        *slots = s;
        return 0;
      }
      fprintf(stderr, "incast_put send: %s is malformed\n", file);
      return 1;
    }
    nap_ms(10);
  }
  fprintf(stderr, "incast_put send: no receiver file %s after 30 s\n", file);
  return 1;
}

static int sender(const char *file, unsigned index, double seconds, uint64_t size, int inflight, int sample_ms) {
  uint32_t taddr, tinst;
  uint64_t twin, slots;
  gni_mem_handle_t th;
  if (read_target(file, &taddr, &tinst, &twin, &th, &slots)) return 1;
  gni_cdm_handle_t cdm;
  gni_nic_handle_t nic;
  uint32_t addr;
  if (attach(SEND_INST + index, "send", &cdm, &nic, &addr)) return 1;
  gni_cq_handle_t cq;
  gni_ep_handle_t ep;
  gni_return_t rc = GNI_CqCreate(nic, 4 * MAX_INFLIGHT, 0, GNI_CQ_BLOCKING, NULL, NULL, &cq);
  if (rc == GNI_RC_SUCCESS) rc = GNI_EpCreate(nic, cq, &ep);
  if (rc == GNI_RC_SUCCESS) rc = GNI_EpBind(ep, taddr, tinst);
  if (rc != GNI_RC_SUCCESS) {
    fprintf(stderr, "incast_put send %u: CQ/EP towards NIC address %u failed (rc %d)\n", index, taddr, (int)rc);
    return 1;
  }
  void *src = aligned_alloc(4096, size);
  gni_mem_handle_t sh;
  if (!src) return 1;
  memset(src, (int)(0x40 + index), size);
  if ((rc = GNI_MemRegister(nic, (uint64_t)src, size, NULL, GNI_MEM_READWRITE, -1, &sh)) != GNI_RC_SUCCESS) {
    fprintf(stderr, "incast_put send %u: GNI_MemRegister failed (rc %d)\n", index, (int)rc);
    return 1;
  }
  const uint64_t remote = twin + (index % slots) * size;
  const size_t nsamples = (size_t)(seconds * 1000 / sample_ms) + 1;
  uint64_t *sample = calloc(nsamples, sizeof *sample);
  if (!sample) return 1;
  static gni_post_descriptor_t d[MAX_INFLIGHT];
  int busy[MAX_INFLIGHT] = {0};
  double retry_at[MAX_INFLIGHT] = {0}; /* after an error completion: not before this */
  printf("incast_put send %u: ready (NIC address %u -> %u)\n", index, addr, taddr);
  fflush(stdout);

  char go[4096];
  snprintf(go, sizeof go, "%s.go", file);
  for (int i = 0; access(go, F_OK) != 0; ++i) {
    if (i > 60000) {
      fprintf(stderr, "incast_put send %u: no %s after 120 s\n", index, go);
      return 1;
    }
    nap_ms(2);
  }
  const double start_rt = now_s(CLOCK_REALTIME), t0 = now_s(CLOCK_MONOTONIC), t_end = t0 + seconds;
  uint64_t bytes = 0, completions = 0, errors = 0, post_errors = 0, drain_errors = 0;
  double last_ok = t0, max_gap = 0;
  int outstanding = 0;
  for (;;) {
    double t = now_s(CLOCK_MONOTONIC);
    const int running = t < t_end;
    if (!running && outstanding == 0) break;
    if (!running && t > t_end + 30) break; /* the drain gives up: the rest stays unfinished */
    for (int i = 0; running && i < inflight; ++i) {
      if (busy[i]) continue;
      if (retry_at[i] > t) continue;
      memset(&d[i], 0, sizeof d[i]);
      d[i].type = GNI_POST_RDMA_PUT;
      d[i].cq_mode = GNI_CQMODE_GLOBAL_EVENT;
      d[i].dlvr_mode = GNI_DLVMODE_PERFORMANCE;
      d[i].local_addr = (uint64_t)src;
      d[i].local_mem_hndl = sh;
      d[i].remote_addr = remote;
      d[i].remote_mem_hndl = th;
      d[i].length = size;
      if (GNI_PostRdma(ep, &d[i]) != GNI_RC_SUCCESS) {
        ++post_errors; /* tried again after the next completion or wait */
        break;
      }
      busy[i] = 1;
      ++outstanding;
    }
    if (outstanding == 0) { /* every post refused or waiting to retry: do not spin */
      nap_ms(1);
      continue;
    }
    gni_cq_entry_t e;
    rc = GNI_CqWaitEvent(cq, 20, &e);
    if (rc == GNI_RC_TIMEOUT || rc == GNI_RC_NOT_DONE) continue;
    if (rc != GNI_RC_SUCCESS && rc != GNI_RC_TRANSACTION_ERROR) {
      fprintf(stderr, "incast_put send %u: GNI_CqWaitEvent failed (rc %d)\n", index, (int)rc);
      return 1;
    }
    gni_post_descriptor_t *pd = NULL;
    gni_return_t grc = GNI_GetCompleted(cq, e, &pd);
    if (!pd) {
      /* An event without a descriptor (the NIC-down entry): an error, nothing to re-post. */
      ++errors;
      continue;
    }
    busy[pd - d] = 0;
    --outstanding;
    t = now_s(CLOCK_MONOTONIC);
    if (grc != GNI_RC_SUCCESS || rc != GNI_RC_SUCCESS) {
      if (t < t_end) ++errors; else ++drain_errors;
      retry_at[pd - d] = t + ERROR_RETRY_MS / 1000.0;
      continue;
    }
    if (t >= t_end) continue;
    bytes += size;
    ++completions;
    sample[(size_t)((t - t0) * 1000 / sample_ms)] += size;
    if (t - last_ok > max_gap) max_gap = t - last_ok;
    last_ok = t;
  }
  if (t_end - last_ok > max_gap) max_gap = t_end - last_ok;
  printf("incast_put send %u: bytes %llu completions %llu errors %llu post_errors %llu max_gap_ms %.1f drain_errors "
         "%llu unfinished %d start_realtime %.3f\n",
         index, (unsigned long long)bytes, (unsigned long long)completions, (unsigned long long)errors,
         (unsigned long long)post_errors, max_gap * 1000, (unsigned long long)drain_errors, outstanding, start_rt);
  printf("incast_put samples %u %d:", index, sample_ms);
  for (size_t i = 0; i + 1 < nsamples; ++i) printf(" %llu", (unsigned long long)sample[i]); /* whole samples only */
  printf("\n");
  fflush(stdout);
  /* Posts the drain gave up on still name our buffer: leave it registered and let the
   * process exit release everything. */
  if (outstanding == 0) {
    GNI_MemDeregister(nic, &sh);
    GNI_EpDestroy(ep);
    GNI_CqDestroy(cq);
    GNI_CdmDestroy(cdm);
  }
  free(sample);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "recv") == 0) {
    uint64_t slots = strtoull(argv[3], NULL, 0), size = strtoull(argv[4], NULL, 0);
    if (slots < 1 || slots > 1024 || size < 8 || size > (64u << 20)) {
      fputs(usage, stderr);
      return 2;
    }
    return receiver(argv[2], slots, size);
  }
  if (argc == 8 && strcmp(argv[1], "send") == 0) {
    unsigned index = (unsigned)strtoul(argv[3], NULL, 0);
    double seconds = strtod(argv[4], NULL);
    uint64_t size = strtoull(argv[5], NULL, 0);
    int inflight = atoi(argv[6]), sample_ms = atoi(argv[7]);
    if (index > 1000 || seconds <= 0 || seconds > 3600 || size < 8 || size > (64u << 20) || inflight < 1 ||
        inflight > MAX_INFLIGHT || sample_ms < 10 || sample_ms > 10000) {
      fputs(usage, stderr);
      return 2;
    }
    return sender(argv[2], index, seconds, size, inflight, sample_ms);
  }
  fputs(usage, stderr);
  return 2;
}
