/* Cross-host PUTs in phases a script drives (test_fabric_ofi_faults.sh): 2 ranks under a
 * PMI launcher, one per host; rank 0 posts, rank 1 is the target.
 *
 *   fabric_faults pmi PHASES        (FAULTS_DIR names the directory of the handshake files)
 *
 * Rank 0 writes FAULTS_DIR/ready ("peer ADDR": the target's NIC address, for fault specs),
 * then for phase k = 1..PHASES waits for FAULTS_DIR/go.k (the script has set the phase's
 * faults), posts an FMA PUT of 8 bytes (value k) and an RDMA PUT of 4 KiB (bytes k) to rank
 * 1's window, each waiting for its GLOBAL event, and prints per post
 *   phase K fma|rdma rc RC status S recoverable R ms T
 * (RC: the post call's return code; S: the CQE status, 0 = ok, -1 no event within 30 s),
 * then writes FAULTS_DIR/done.k. At the end rank 1 prints the target's words
 *   target fma K rdma K
 * (the phase whose PUT landed last). Exit 0 unless a call outside the posts failed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fabric_job.h"

#define WIN 8192

struct info {
  uint32_t addr, inst;
  uint64_t win;
  gni_mem_handle_t h;
};

static int wait_file(const char *dir, const char *name, int k) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s.%d", dir, name, k);
  for (int i = 0; i < 24000; ++i) { /* 120 s */
    if (access(p, F_OK) == 0) return 0;
    usleep(5000);
  }
  return -1;
}

static void write_file(const char *dir, const char *name, int k, const char *text) {
  char p[4096];
  if (k >= 0)
    snprintf(p, sizeof p, "%s/%s.%d", dir, name, k);
  else
    snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

/* One post and its GLOBAL event; prints its line. */
static void post_one(gni_ep_handle_t ep, gni_cq_handle_t cq, int k, int rdma, void *src, gni_mem_handle_t sh,
                     const struct info *t, uint64_t off, uint64_t len) {
  gni_post_descriptor_t d;
  fabric_desc(&d, rdma ? GNI_POST_RDMA_PUT : GNI_POST_FMA_PUT, src, sh, t->win + off, t->h, len);
  const double t0 = fabric_now_s();
  gni_return_t rc = rdma ? GNI_PostRdma(ep, &d) : GNI_PostFma(ep, &d);
  long status = -1;
  uint32_t recoverable = 0;
  if (rc == GNI_RC_SUCCESS) {
    for (;;) {
      gni_cq_entry_t e;
      gni_return_t w = GNI_CqWaitEvent(cq, 1000, &e);
      if (w == GNI_RC_TIMEOUT && fabric_now_s() - t0 < 30) continue;
      if (w != GNI_RC_SUCCESS && w != GNI_RC_TRANSACTION_ERROR) {
        status = -1 - (long)w;
        break;
      }
      gni_post_descriptor_t *done = NULL;
      GNI_GetCompleted(cq, e, &done);
      status = GNI_CQ_STATUS_OK(e) ? 0 : (long)GNI_CQ_GET_STATUS(e);
      if (status) GNI_CqErrorRecoverable(e, &recoverable);
      break;
    }
  }
  printf("phase %d %s rc %d status %ld recoverable %u ms %.0f\n", k, rdma ? "rdma" : "fma", (int)rc, status,
         recoverable, (fabric_now_s() - t0) * 1e3);
  fflush(stdout);
}

int main(int argc, char **argv) {
  struct fabric_job j;
  int r = fabric_job_start(argc, argv, "fabric_faults", "fabric_faults pmi PHASES", 1, &j);
  if (r) return r;
  const char *dir = getenv("FAULTS_DIR");
  if (!dir || j.npeers != 1) {
    fprintf(stderr, "fabric_faults: needs FAULTS_DIR and 2 ranks\n");
    return 2;
  }
  gni_cq_handle_t cq;
  gni_ep_handle_t ep;
  uint8_t *win = aligned_alloc(4096, WIN), *src = aligned_alloc(4096, WIN);
  if (!win || !src) return 1;
  memset(win, 0, WIN);
  struct info me = {j.my_addr, j.inst, (uint64_t)win, {0, 0}}, all[2];
  gni_mem_handle_t sh;
  gni_return_t rc = GNI_CqCreate(j.nic, 64, 0, GNI_CQ_BLOCKING, NULL, NULL, &cq);
  if (rc == GNI_RC_SUCCESS) rc = GNI_MemRegister(j.nic, (uint64_t)win, WIN, NULL, GNI_MEM_READWRITE, -1, &me.h);
  if (rc == GNI_RC_SUCCESS) rc = GNI_MemRegister(j.nic, (uint64_t)src, WIN, NULL, GNI_MEM_READWRITE, -1, &sh);
  if (rc == GNI_RC_SUCCESS) rc = GNI_EpCreate(j.nic, cq, &ep);
  if (rc == GNI_RC_SUCCESS) rc = GNI_EpBind(ep, j.peer_addr[0], j.peer_inst[0]);
  if (rc != GNI_RC_SUCCESS || PMI_Allgather(&me, all, sizeof me) != PMI_SUCCESS) {
    fprintf(stderr, "fabric_faults rank %d: setup failed (rc %d)\n", j.rank, (int)rc);
    return 1;
  }
  const struct info *t = &all[j.rank == 0 ? 1 : 0];
  if (j.rank == 0) {
    char text[64];
    snprintf(text, sizeof text, "peer %u\n", t->addr);
    write_file(dir, "ready", -1, text);
    for (int k = 1; k <= (int)j.count; ++k) {
      if (wait_file(dir, "go", k)) {
        fprintf(stderr, "fabric_faults: no go.%d\n", k);
        break;
      }
      uint64_t v = (uint64_t)k;
      memcpy(src, &v, sizeof v);
      memset(src + 4096, k, 4096);
      post_one(ep, cq, k, 0, src, sh, t, 0, 8);
      post_one(ep, cq, k, 1, src + 4096, sh, t, 4096, 4096);
      write_file(dir, "done", k, "");
    }
  }
  PMI_Barrier();
  if (j.rank == 1) {
    uint64_t w;
    memcpy(&w, win, sizeof w);
    printf("target fma %llu rdma %u\n", (unsigned long long)w, (unsigned)win[4096 + 100]);
    fflush(stdout);
  }
  // Whatever the NIC's state (rank 0's daemon is gone after the last phase), the handles
  // and buffers are ours to give back.
  GNI_EpDestroy(ep);
  GNI_MemDeregister(j.nic, &sh);
  GNI_MemDeregister(j.nic, &me.h);
  GNI_CqDestroy(cq);
  fabric_job_end(j.cdm, j.use_pmi);
  free(win);
  free(src);
  return 0;
}
