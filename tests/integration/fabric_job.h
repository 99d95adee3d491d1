/* The start shared by the cross-host test programs (fabric_smsg.c, fabric_dgram.c): the
 * job's shape from a PMI launcher (first argument "pmi": inst = rank, every other rank is a
 * peer) or from the command line (INST COUNT PEER_ADDR:PEER_INST...), the credential from
 * PMI_GNI_PTAG / PMI_GNI_COOKIE, the CDM created and attached to the daemon named by
 * NICEMU_RUNDIR / NICEMU_NODE (or placed by the launcher), and under PMI every other rank's
 * NIC address and inst gathered. */
#ifndef NICEMU_TESTS_FABRIC_JOB_H
#define NICEMU_TESTS_FABRIC_JOB_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gni_pub.h"
#include "pmi.h"

#define FABRIC_JOB_MAX_PEERS 16

struct fabric_job {
  int use_pmi, rank, size;
  uint32_t inst, count, my_addr;
  int npeers;
  uint32_t peer_addr[FABRIC_JOB_MAX_PEERS], peer_inst[FABRIC_JOB_MAX_PEERS];
  gni_cdm_handle_t cdm;
  gni_nic_handle_t nic;
};

/* 0: ready. 2: bad arguments (usage printed) or more than max_peers peers. 1: a call
 * failed (said on stderr, prefixed with prog). */
static inline int fabric_job_start(int argc, char **argv, const char *prog, const char *usage, int max_peers,
                            struct fabric_job *j) {
  memset(j, 0, sizeof *j);
  j->use_pmi = argc == 3 && strcmp(argv[1], "pmi") == 0;
  j->size = 1;
  if (argc < 4 && !j->use_pmi) {
    fprintf(stderr, "usage: %s\n", usage);
    return 2;
  }
  if (max_peers > FABRIC_JOB_MAX_PEERS) max_peers = FABRIC_JOB_MAX_PEERS;
  if (j->use_pmi) {
    int spawned;
    if (PMI_Init(&spawned) != PMI_SUCCESS || PMI_Get_rank(&j->rank) != PMI_SUCCESS ||
        PMI_Get_size(&j->size) != PMI_SUCCESS) {
      fprintf(stderr, "%s: PMI_Init failed\n", prog);
      return 1;
    }
  }
  j->inst = j->use_pmi ? (uint32_t)j->rank : (uint32_t)strtoul(argv[1], NULL, 0);
  j->count = (uint32_t)strtoul(argv[2], NULL, 0);
  j->npeers = j->use_pmi ? j->size - 1 : argc - 3;
  if (j->npeers > max_peers) {
    fprintf(stderr, "%s: %d peers, at most %d\n", prog, j->npeers, max_peers);
    return 2;
  }
  for (int i = 0; i < j->npeers && !j->use_pmi; ++i)
    if (sscanf(argv[3 + i], "%u:%u", &j->peer_addr[i], &j->peer_inst[i]) != 2) {
      fprintf(stderr, "usage: %s\n", usage);
      return 2;
    }
  const char *ptag_s = getenv("PMI_GNI_PTAG"), *cookie_s = getenv("PMI_GNI_COOKIE");
  if (!ptag_s || !cookie_s) {
    fprintf(stderr, "%s: no credential in PMI_GNI_PTAG / PMI_GNI_COOKIE\n", prog);
    return 1;
  }
  uint8_t ptag = (uint8_t)strtoul(ptag_s, NULL, 0);
  uint32_t cookie = (uint32_t)strtoul(cookie_s, NULL, 0);
  gni_return_t rc = GNI_CdmCreate(j->inst, ptag, cookie, 0, &j->cdm);
  if (rc == GNI_RC_SUCCESS) rc = GNI_CdmAttach(j->cdm, 0, &j->my_addr, &j->nic);
  if (rc != GNI_RC_SUCCESS) {
    fprintf(stderr, "%s: GNI_CdmCreate/GNI_CdmAttach failed (rc %d)\n", prog, (int)rc);
    return 1;
  }
  if (j->use_pmi) {
    uint32_t me[2] = {j->my_addr, j->inst}, all[2 * (FABRIC_JOB_MAX_PEERS + 1)];
    if (PMI_Allgather(me, all, sizeof me) != PMI_SUCCESS) {
      fprintf(stderr, "%s: PMI_Allgather failed\n", prog);
      return 1;
    }
    int k = 0;
    for (int i = 0; i < j->size; ++i)
      if (all[2 * i + 1] != j->inst) {
        j->peer_addr[k] = all[2 * i];
        j->peer_inst[k++] = all[2 * i + 1];
      }
  }
  return 0;
}

/* Seconds on the monotonic clock. */
static inline double fabric_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* *d: a post of `type` with the fields these programs set, the rest zero. */
static inline void fabric_desc(gni_post_descriptor_t *d, gni_post_type_t type, const void *local, gni_mem_handle_t lh,
                               uint64_t remote, gni_mem_handle_t rh, uint64_t len) {
  memset(d, 0, sizeof *d);
  d->type = type;
  d->cq_mode = GNI_CQMODE_GLOBAL_EVENT;
  d->dlvr_mode = GNI_DLVMODE_PERFORMANCE;
  d->local_addr = (uint64_t)local;
  d->local_mem_hndl = lh;
  d->remote_addr = remote;
  d->remote_mem_hndl = rh;
  d->length = len;
}

/* The job's end: the CDM destroyed, and under PMI the other ranks waited for. */
static inline void fabric_job_end(gni_cdm_handle_t cdm, int use_pmi) {
  GNI_CdmDestroy(cdm);
  if (use_pmi) {
    PMI_Barrier();
    PMI_Finalize();
  }
}

#endif
