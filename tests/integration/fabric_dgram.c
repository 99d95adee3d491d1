/* One process of the cross-host datagram test (test_fabric.sh): attaches to the daemon
 * named by NICEMU_RUNDIR/NICEMU_NODE with the credential in PMI_GNI_PTAG/PMI_GNI_COOKIE,
 * then for ROUNDS rounds exchanges a directed datagram with every peer (directed <->
 * directed matching, done by the daemons across the UDP fabric) and checks each payload
 * names the peer and the round. With FABRIC_DGRAM_REMOTE_FMA set, an FMA PUT and an RDMA
 * PUT towards the first peer, which lives on another host, with a memory handle that peer
 * never registered, must complete with an error (validated by the target's daemon), not
 * hang. (SMSG across hosts: fabric_smsg.c.)
 *   fabric_dgram INST ROUNDS PEER_ADDR:PEER_INST...       exit 0 = all verified
 *   fabric_dgram pmi ROUNDS      under a PMI launcher (nicemu-run --fabric udp, mpiexec):
 *                                inst = rank, every other rank is a peer */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fabric_job.h"
#include "gni_pub.h"
#include "pmi.h"

#define MAX_PEERS 16

static int fail(const char *what, int rc) {
  fprintf(stderr, "fabric_dgram: %s failed (rc %d)\n", what, rc);
  return 1;
}

/* A PUT (FMA or RDMA: `kind`) with a handle the target never registered: refused at post,
 * or completed with an error. 1 (said) when it succeeded or hung. */
static int expect_refused(gni_ep_handle_t ep, gni_cq_handle_t cq, gni_post_descriptor_t *d, const char *kind,
                          uint32_t my_addr, uint32_t inst) {
  char what[64];
  gni_return_t rc = d->type == GNI_POST_RDMA_PUT ? GNI_PostRdma(ep, d) : GNI_PostFma(ep, d);
  if (rc != GNI_RC_SUCCESS) {
    printf("fabric_dgram %u/%u: remote %s PUT refused at post (rc %d), as documented\n", my_addr, inst, kind, rc);
    return 0;
  }
  gni_cq_entry_t ev;
  rc = GNI_CqWaitEvent(cq, 5000, &ev);
  snprintf(what, sizeof what, rc == GNI_RC_TIMEOUT ? "remote %s completion (hung)" : "remote %s should not succeed",
           kind);
  if (rc == GNI_RC_TIMEOUT || rc == GNI_RC_SUCCESS) return fail(what, rc);
  gni_post_descriptor_t *done = NULL;
  GNI_GetCompleted(cq, ev, &done);
  printf("fabric_dgram %u/%u: remote %s PUT with a foreign handle completed with an error\n", my_addr, inst, kind);
  return 0;
}

int main(int argc, char **argv) {
  struct fabric_job job;
  int r = fabric_job_start(argc, argv, "fabric_dgram",
                           "fabric_dgram pmi ROUNDS | fabric_dgram INST ROUNDS PEER_ADDR:PEER_INST...", MAX_PEERS, &job);
  if (r != 0) return r;
  const uint32_t inst = job.inst;
  const int rounds = (int)job.count, npeers = job.npeers, use_pmi = job.use_pmi;
  const uint32_t *paddr = job.peer_addr, *pinst = job.peer_inst;
  gni_cdm_handle_t cdm = job.cdm;
  gni_nic_handle_t nic = job.nic;
  const uint32_t my_addr = job.my_addr;
  gni_return_t rc;
  gni_cq_handle_t cq;
  rc = GNI_CqCreate(nic, 64, 0, GNI_CQ_BLOCKING, NULL, NULL, &cq);
  if (rc != GNI_RC_SUCCESS) return fail("GNI_CqCreate", rc);

  gni_ep_handle_t ep[MAX_PEERS];
  for (int i = 0; i < npeers; ++i) {
    if ((rc = GNI_EpCreate(nic, cq, &ep[i])) != GNI_RC_SUCCESS) return fail("GNI_EpCreate", rc);
    if ((rc = GNI_EpBind(ep[i], paddr[i], pinst[i])) != GNI_RC_SUCCESS) return fail("GNI_EpBind", rc);
  }

  char in[MAX_PEERS][128], out[MAX_PEERS][128];
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < npeers; ++i) {
      snprintf(in[i], sizeof in[i], "from %u/%u round %d", my_addr, inst, r);
      memset(out[i], 0, sizeof out[i]);
      rc = GNI_EpPostDataWId(ep[i], in[i], sizeof in[i], out[i], sizeof out[i], (uint64_t)r);
      if (rc != GNI_RC_SUCCESS) return fail("GNI_EpPostDataWId", rc);
    }
    for (int i = 0; i < npeers; ++i) {
      gni_post_state_t st;
      uint32_t ra = 0, ri = 0;
      rc = GNI_EpPostDataWaitById(ep[i], (uint64_t)r, 20000, &st, &ra, &ri);
      if (rc != GNI_RC_SUCCESS || st != GNI_POST_COMPLETED) {
        fprintf(stderr, "fabric_dgram %u/%u: round %d peer %u/%u: rc %d state %d\n", my_addr, inst, r, paddr[i],
                pinst[i], rc, (int)st);
        /* An expected outcome in the fault tests: leave nothing for the leak checker (no
         * PMI barrier: the peers may be gone). */
        for (int j = 0; j < npeers; ++j) GNI_EpDestroy(ep[j]);
        GNI_CqDestroy(cq);
        GNI_CdmDestroy(cdm);
        return 1;
      }
      char want[128];
      snprintf(want, sizeof want, "from %u/%u round %d", paddr[i], pinst[i], r);
      if (ra != paddr[i] || ri != pinst[i] || strcmp(out[i], want) != 0) {
        fprintf(stderr, "fabric_dgram %u/%u: round %d: got '%s' from %u/%u, want '%s'\n", my_addr, inst, r, out[i],
                ra, ri, want);
        return 1;
      }
    }
  }

  clock_gettime(CLOCK_MONOTONIC, &t1);
  double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3) / (rounds ? rounds : 1);
  printf("fabric_dgram %u/%u: %.1f us per round (post to every peer, wait for every match)\n", my_addr, inst, us);
  /* Bad accesses across hosts fail at the target's daemon, promptly. */
  if (npeers > 0 && getenv("FABRIC_DGRAM_REMOTE_FMA")) {
    static uint64_t src = 42;
    gni_mem_handle_t mh;
    if ((rc = GNI_MemRegister(nic, (uint64_t)&src, sizeof src, NULL, GNI_MEM_READWRITE, -1, &mh)) != GNI_RC_SUCCESS)
      return fail("GNI_MemRegister", rc);
    gni_post_descriptor_t d;
    fabric_desc(&d, GNI_POST_FMA_PUT, &src, mh, 4096, mh, sizeof src);
    if (expect_refused(ep[0], cq, &d, "FMA", my_addr, inst)) return 1;
    /* RDMA: the same handle, refused the same way. */
    static uint64_t big[512];
    gni_mem_handle_t bh;
    if ((rc = GNI_MemRegister(nic, (uint64_t)big, sizeof big, NULL, GNI_MEM_READWRITE, -1, &bh)) != GNI_RC_SUCCESS)
      return fail("GNI_MemRegister", rc);
    fabric_desc(&d, GNI_POST_RDMA_PUT, big, bh, 4096, bh, sizeof big);
    if (expect_refused(ep[0], cq, &d, "RDMA", my_addr, inst)) return 1;
    GNI_MemDeregister(nic, &bh);
    GNI_MemDeregister(nic, &mh);
  }
  printf("fabric_dgram %u/%u: %d rounds with %d peers verified\n", my_addr, inst, rounds, npeers);
  for (int i = 0; i < npeers; ++i) GNI_EpDestroy(ep[i]);
  GNI_CqDestroy(cq);
  fabric_job_end(cdm, use_pmi);
  return 0;
}
