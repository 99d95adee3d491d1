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
 * (the phase whose PUT landed last). Exit 0 unless a call outside the posts failed.
 *
 * With FAULTS_KILL=K, phase K kills a target mid-stream: rank 1 forks, before PMI, a victim
 * process with a CDM of its own (inst 100) on rank 1's node, which registers a window and
 * writes FAULTS_DIR/victim ("PID ADDR INST WIN Q1 Q2"), then waits to be killed; rank 0, at
 * phase K, writes FAULTS_DIR/streaming.K and keeps up to 16 posts in flight to the victim
 * (FMA PUT 8 B, RDMA PUT 4 KiB, fetching AMO FADD, in turn) until one completes with an error
 * (the script SIGKILLs the victim meanwhile), then waits for the rest and prints
 *   kill K statuses S,... recoverable R,... hung H drain_ms T
 * (the distinct error statuses and recoverable flags of the stream's completions, the posts
 * without an event after 60 s, the time from the first error to the last event), then
 * posts the phase's two PUTs to the dead victim. The ranks themselves stay (a launcher takes
 * a job down with any of its ranks). */
#include <signal.h>
#include <sys/wait.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fabric_job.h"

#define WIN 16384

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

/* The stream of phase k (FAULTS_KILL): posts until the target is gone, every event reaped. */
static void stream(gni_ep_handle_t ep, gni_cq_handle_t cq, int k, uint8_t *src, gni_mem_handle_t sh,
                   const struct info *t, const char *dir) {
  enum { W = 16 };
  gni_post_descriptor_t ds[W];
  int busy[W] = {0}, inflight = 0, posting = 1;
  unsigned seq = 0, statuses = 0, recoverables = 0;
  double t_err = 0, t_last = 0;
  const double t0 = fabric_now_s();
  write_file(dir, "streaming", k, "");
  while (posting || inflight) {
    if (fabric_now_s() - t0 > 60) break; /* the rest hung */
    for (int i = 0; posting && i < W; ++i) {
      if (busy[i]) continue;
      gni_post_descriptor_t *d = &ds[i];
      gni_return_t rc;
      switch (seq++ % 3) {
        case 0:
          fabric_desc(d, GNI_POST_FMA_PUT, src, sh, t->win + 8192, t->h, 8);
          rc = GNI_PostFma(ep, d);
          break;
        case 1:
          fabric_desc(d, GNI_POST_RDMA_PUT, src + 4096, sh, t->win + 12288, t->h, 4096);
          rc = GNI_PostRdma(ep, d);
          break;
        default:
          fabric_desc(d, GNI_POST_AMO, src + 128, sh, t->win + 8448, t->h, 8);
          d->amo_cmd = GNI_FMA_ATOMIC_FADD;
          d->first_operand = 1;
          rc = GNI_PostFma(ep, d);
          break;
      }
      if (rc != GNI_RC_SUCCESS) { /* a refused post: the stream ends, said as status 100 + rc */
        statuses |= 1u << 31;
        posting = 0;
        break;
      }
      busy[i] = 1;
      ++inflight;
    }
    gni_cq_entry_t e;
    gni_return_t w = GNI_CqWaitEvent(cq, 100, &e);
    if (w == GNI_RC_TIMEOUT) continue;
    if (w != GNI_RC_SUCCESS && w != GNI_RC_TRANSACTION_ERROR) break;
    gni_post_descriptor_t *done = NULL;
    if (GNI_GetCompleted(cq, e, &done) != GNI_RC_SUCCESS && !done) continue;
    const long i = done - ds;
    if (i < 0 || i >= W || !busy[i]) continue;
    busy[i] = 0;
    --inflight;
    t_last = fabric_now_s();
    if (!GNI_CQ_STATUS_OK(e)) {
      uint32_t r = 0;
      GNI_CqErrorRecoverable(e, &r);
      statuses |= 1u << (GNI_CQ_GET_STATUS(e) & 31);
      recoverables |= 1u << (r ? 1 : 0);
      if (posting) t_err = t_last;
      posting = 0;
    }
  }
  printf("kill %d statuses ", k);
  for (int s = 0, first = 1; s < 32; ++s)
    if (statuses & (1u << s)) printf(first ? "%d" : ",%d", s == 31 ? -1 : s), first = 0;
  printf(" recoverable %s hung %d drain_ms %.0f\n",
         recoverables == 3 ? "0,1" : recoverables == 2 ? "1" : recoverables == 1 ? "0" : "-", inflight,
         t_err ? (t_last - t_err) * 1e3 : -1.0);
  fflush(stdout);
}

/* The victim of FAULTS_KILL (forked by rank 1 before PMI): its own CDM, a window, its
 * description in FAULTS_DIR/victim; then it waits to be killed. */
static int victim(const char *dir) {
  const char *fd = getenv("PMI_FD");
  if (fd) close(atoi(fd)); /* rank 1's PMI connection is not ours */
  gni_cdm_handle_t cdm;
  gni_nic_handle_t nic;
  uint32_t addr;
  gni_mem_handle_t h;
  uint8_t *win = aligned_alloc(4096, WIN);
  if (!win) return 1;
  memset(win, 0, WIN);
  gni_return_t rc = GNI_CdmCreate(100, (uint8_t)strtoul(getenv("PMI_GNI_PTAG"), NULL, 0),
                                  (uint32_t)strtoul(getenv("PMI_GNI_COOKIE"), NULL, 0), 0, &cdm);
  if (rc == GNI_RC_SUCCESS) rc = GNI_CdmAttach(cdm, 0, &addr, &nic);
  if (rc == GNI_RC_SUCCESS) rc = GNI_MemRegister(nic, (uint64_t)win, WIN, NULL, GNI_MEM_READWRITE, -1, &h);
  if (rc != GNI_RC_SUCCESS) {
    fprintf(stderr, "fabric_faults victim: setup failed (rc %d)\n", (int)rc);
    return 1;
  }
  char text[256], tmp[4096], path[4096];
  snprintf(text, sizeof text, "%d %u 100 %llu %llu %llu\n", (int)getpid(), addr, (unsigned long long)(uintptr_t)win,
           (unsigned long long)h.qword1, (unsigned long long)h.qword2);
  snprintf(tmp, sizeof tmp, "%s/victim.tmp", dir);
  snprintf(path, sizeof path, "%s/victim", dir);
  FILE *f = fopen(tmp, "w");
  if (!f) return 1;
  fputs(text, f);
  fclose(f);
  rename(tmp, path); /* whole or absent */
  for (;;) pause();
}

int main(int argc, char **argv) {
  const char *kill_s = getenv("FAULTS_KILL"), *rank_s = getenv("PMI_RANK");
  const int kill_at = kill_s ? atoi(kill_s) : 0;
  pid_t victim_pid = -1;
  if (kill_at > 0 && rank_s && atoi(rank_s) == 1 && getenv("FAULTS_DIR")) {
    victim_pid = fork();
    if (victim_pid == 0) _exit(victim(getenv("FAULTS_DIR")));
  }
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
  gni_ep_handle_t vep = NULL;
  struct info vt = {0, 0, 0, {0, 0}};
  if (j.rank == 0 && kill_at > 0) { /* the victim's window, and an EP to it */
    char path[4096];
    snprintf(path, sizeof path, "%s/victim", dir);
    int pid = 0;
    unsigned long long w = 0, q1 = 0, q2 = 0;
    FILE *f = NULL;
    for (int i = 0; i < 6000 && !(f = fopen(path, "r")); ++i) usleep(10000);
    if (!f || fscanf(f, "%d %u %u %llu %llu %llu", &pid, &vt.addr, &vt.inst, &w, &q1, &q2) != 6 ||
        GNI_EpCreate(j.nic, cq, &vep) != GNI_RC_SUCCESS || GNI_EpBind(vep, vt.addr, vt.inst) != GNI_RC_SUCCESS) {
      fprintf(stderr, "fabric_faults: no victim\n");
      return 1;
    }
    fclose(f);
    vt.win = w;
    vt.h.qword1 = q1;
    vt.h.qword2 = q2;
  }
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
      gni_ep_handle_t e = ep;
      const struct info *to = t;
      if (k == kill_at) { /* the victim: killed during the stream, then posted to */
        stream(vep, cq, k, src, sh, &vt, dir);
        e = vep;
        to = &vt;
      }
      post_one(e, cq, k, 0, src, sh, to, 0, 8);
      post_one(e, cq, k, 1, src + 4096, sh, to, 4096, 4096);
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
  if (vep) GNI_EpDestroy(vep);  // before the CQ it completes into: a CQ in use is not destroyed
  GNI_MemDeregister(j.nic, &sh);
  GNI_MemDeregister(j.nic, &me.h);
  GNI_CqDestroy(cq);
  fabric_job_end(j.cdm, j.use_pmi);
  if (victim_pid > 0) { /* killed by the script; reaped (or killed, if it was not) */
    kill(victim_pid, SIGKILL);
    waitpid(victim_pid, NULL, 0);
  }
  free(win);
  free(src);
  return 0;
}
