/* One process of the cross-host SMSG test (test_fabric_smsg.sh). Attaches to the daemon
 * named by NICEMU_RUNDIR/NICEMU_NODE (or placed by a PMI launcher), opens one SMSG channel
 * with every peer (mailbox attributes exchanged by directed datagrams, as MPI does), then
 * sends COUNT messages to every peer while receiving COUNT from each: sizes vary from 20
 * bytes to the mailbox's maximum, tags cycle, every message carries its sequence number,
 * sender and a checksum. Checked: every message arrives exactly once and in order, intact,
 * with its tag; one remote SMSG CQE per message in the CQ bound to the mailbox, carrying the
 * sender EP's remote event data; one local completion CQE per message, in msg_id order;
 * GNI_RC_NOT_DONE when out of credits, the send succeeding later. A datagram round with
 * every peer after the checks keeps everybody's mailbox alive until all are done.
 *   fabric_smsg pmi COUNT                      every other rank is a peer
 *   fabric_smsg INST COUNT PEER_ADDR:PEER_INST...
 * FABRIC_SMSG_MODE (after the verified exchange):
 *   fail  wait for the file $FABRIC_SMSG_GO, then keep sending to the first peer (whose
 *         daemon the test stops, or who exits): within 15 s a send or the CQ must report an
 *         error (exit 0), never hang;
 *   idle  wait for the file $FABRIC_SMSG_GO (30 s at most), then exit without cleanup;
 *   die   exit at once (the peer's sends must then fail);
 *   bench (two ranks) SMSG 8-byte ping-pong latency (half the round trip, median of 2000, or
 *         $FABRIC_SMSG_PINGPONG)
 *         and message rate (20000 messages of 8 bytes, or $FABRIC_SMSG_STREAM, streamed within
 *         128 credits), printed by the rank with the lower inst (bench/run-fabric).
 * Prints one "verified" line per process; exit 0 = everything checked. */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "fabric_job.h"
#include "gni_pub.h"
#include "pmi.h"

#define MAX_PEERS 8
#define CREDITS 16        /* verify and fault modes: few credits, so stalls happen */
#define BENCH_CREDITS 128 /* bench mode: a streaming window, as message-rate benchmarks use */
static int credits = CREDITS;
#define MAXSIZE 1024
#define MAGIC 0x534d5347u

struct msg_hdr {
  uint32_t magic, seq, len, sum, from;
};

struct peer {
  uint32_t addr, inst;
  gni_ep_handle_t ep;
  char *mbox;
  gni_mem_handle_t mh;
  uint32_t sent, received, local_done, remote_cqes;
  uint64_t stalls;
};

static uint32_t my_inst;

static int fail(const char *what, int rc) {
  fprintf(stderr, "fabric_smsg %u: %s failed (rc %d)\n", my_inst, what, rc);
  return 1;
}

static uint32_t msg_len(uint32_t seq) { return (uint32_t)sizeof(struct msg_hdr) + (seq * 97u) % (MAXSIZE - sizeof(struct msg_hdr) + 1); }
static uint8_t msg_tag(uint32_t seq) { return (uint8_t)(seq % 200 + 1); }
static uint8_t pattern(uint32_t seq, uint32_t from, uint32_t j) { return (uint8_t)(seq * 131u + j * 7u + from); }

static uint32_t checksum(const uint8_t *p, uint32_t n) {
  uint32_t s = 2166136261u;
  for (uint32_t i = 0; i < n; ++i) s = (s ^ p[i]) * 16777619u;
  return s;
}

/* One datagram round with every peer: a barrier across the fabric. */
static int dgram_round(struct peer *p, int npeers, uint64_t id, const void *in, size_t in_len, void *outs, size_t out_len) {
  gni_return_t rc;
  for (int i = 0; i < npeers; ++i)
    if ((rc = GNI_EpPostDataWId(p[i].ep, (void *)in, (uint16_t)in_len, (char *)outs + i * out_len, (uint16_t)out_len, id)) !=
        GNI_RC_SUCCESS)
      return fail("GNI_EpPostDataWId", rc);
  for (int i = 0; i < npeers; ++i) {
    gni_post_state_t st;
    uint32_t ra, ri;
    rc = GNI_EpPostDataWaitById(p[i].ep, id, 30000, &st, &ra, &ri);
    if (rc != GNI_RC_SUCCESS || st != GNI_POST_COMPLETED || ra != p[i].addr || ri != p[i].inst) {
      fprintf(stderr, "fabric_smsg %u: datagram round %llu with %u/%u: rc %d state %d\n", my_inst, (unsigned long long)id,
              p[i].addr, p[i].inst, rc, (int)st);
      return 1;
    }
  }
  return 0;
}

/* Takes every remote event from rcq and every message they announce. */
static int receive(struct peer *p, int npeers, gni_cq_handle_t rcq, uint32_t count) {
  gni_cq_entry_t ev;
  gni_return_t rc;
  while ((rc = GNI_CqGetEvent(rcq, &ev)) == GNI_RC_SUCCESS) {
    if (GNI_CQ_GET_TYPE(ev) != GNI_CQ_EVENT_TYPE_SMSG) return fail("remote CQE type", (int)GNI_CQ_GET_TYPE(ev));
    uint32_t from = (uint32_t)GNI_CQ_GET_INST_ID(ev);  /* the sender EP's remote event data: its inst */
    int k = -1;
    for (int i = 0; i < npeers; ++i)
      if (p[i].inst == from) k = i;
    if (k < 0) {
      fprintf(stderr, "fabric_smsg %u: remote CQE names inst %u, not a peer\n", my_inst, from);
      return 1;
    }
    p[k].remote_cqes++;
    /* Messages are taken in order, no more than CQEs seen: a message is in the mailbox before
       its CQE is in the CQ, and a loop that kept taking what a streaming sender sends (GetNext
       drives the ofi provider) would never come back to the CQ, which would overrun. */
    while (p[k].received < p[k].remote_cqes) {
      void *m = NULL;
      uint8_t tag = GNI_SMSG_ANY_TAG;
      rc = GNI_SmsgGetNextWTag(p[k].ep, &m, &tag);
      if (rc == GNI_RC_NOT_DONE) break;
      if (rc != GNI_RC_SUCCESS) return fail("GNI_SmsgGetNextWTag", rc);
      struct msg_hdr h;
      memcpy(&h, m, sizeof h);
      uint32_t want = p[k].received;
      if (h.magic != MAGIC || h.from != p[k].inst || h.seq != want || h.len != msg_len(want) || tag != msg_tag(want)) {
        fprintf(stderr, "fabric_smsg %u: from %u: got seq %u len %u from %u tag %u, want seq %u len %u tag %u\n", my_inst,
                p[k].inst, h.seq, h.len, h.from, tag, want, msg_len(want), msg_tag(want));
        return 1;
      }
      const uint8_t *body = (const uint8_t *)m + sizeof h;
      uint32_t n = h.len - (uint32_t)sizeof h;
      if (checksum(body, n) != h.sum) {
        fprintf(stderr, "fabric_smsg %u: from %u: message %u corrupted\n", my_inst, p[k].inst, want);
        return 1;
      }
      for (uint32_t j = 0; j < n; ++j)
        if (body[j] != pattern(want, p[k].inst, j)) {
          fprintf(stderr, "fabric_smsg %u: from %u: message %u byte %u wrong\n", my_inst, p[k].inst, want, j);
          return 1;
        }
      if ((rc = GNI_SmsgRelease(p[k].ep)) != GNI_RC_SUCCESS) return fail("GNI_SmsgRelease", rc);
      p[k].received++;
      if (p[k].received > count) return fail("more messages than sent", (int)p[k].received);
    }
  }
  if (rc != GNI_RC_NOT_DONE) return fail("GNI_CqGetEvent (remote)", rc);
  return 0;
}

/* Local completions: one per message, in msg_id order per peer. */
static int local_events(struct peer *p, int npeers, gni_cq_handle_t cq) {
  gni_cq_entry_t ev;
  gni_return_t rc;
  while ((rc = GNI_CqGetEvent(cq, &ev)) == GNI_RC_SUCCESS) {
    uint32_t id = (uint32_t)GNI_CQ_GET_MSG_ID(ev);
    int k = (int)(id >> 24);
    if (GNI_CQ_GET_TYPE(ev) != GNI_CQ_EVENT_TYPE_SMSG || k >= npeers || (id & 0xFFFFFF) != (p[k].local_done & 0xFFFFFF)) {
      fprintf(stderr, "fabric_smsg %u: local CQE type %d msg_id %#x, want peer %d seq %u\n", my_inst,
              (int)GNI_CQ_GET_TYPE(ev), id, k, k < npeers ? p[k].local_done : 0);
      return 1;
    }
    p[k].local_done++;
  }
  if (rc != GNI_RC_NOT_DONE) return fail("GNI_CqGetEvent (local)", rc);
  return 0;
}

/* Waits for the next message from p (polling the remote CQ, yielding: two shared cores),
 * takes (its first 8 bytes into `out`, if given) and releases it. */
static int bench_take(struct peer *p, gni_cq_handle_t rcq, gni_cq_handle_t cq, void *out) {
  for (;;) {
    void *m = NULL;
    gni_return_t rc = GNI_SmsgGetNext(p->ep, &m);
    if (rc == GNI_RC_SUCCESS) {
      if (out) memcpy(out, m, 8);
      return GNI_SmsgRelease(p->ep) == GNI_RC_SUCCESS ? 0 : fail("GNI_SmsgRelease", -1);
    }
    if (rc != GNI_RC_NOT_DONE) return fail("GNI_SmsgGetNext (bench)", rc);
    gni_cq_entry_t ev;
    while (GNI_CqGetEvent(rcq, &ev) == GNI_RC_SUCCESS) {
    }
    while (GNI_CqGetEvent(cq, &ev) == GNI_RC_SUCCESS) {
    }
    sched_yield();
  }
}

static int bench_send(struct peer *p, gni_cq_handle_t cq, const void *word8) {
  uint64_t word = 0x5eed;
  if (word8) memcpy(&word, word8, sizeof word);
  for (;;) {
    gni_return_t rc = GNI_SmsgSendWTag(p->ep, &word, sizeof word, NULL, 0, 0, 1);
    if (rc == GNI_RC_SUCCESS) return 0;
    if (rc != GNI_RC_NOT_DONE) return fail("GNI_SmsgSendWTag (bench)", rc);
    gni_cq_entry_t ev;
    while (GNI_CqGetEvent(cq, &ev) == GNI_RC_SUCCESS) {
    }
    sched_yield();
  }
}

/* CPU seconds of this process, every thread (libugni's progress thread too). */
static double cpu_now_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int bench(struct peer *p, gni_cq_handle_t rcq, gni_cq_handle_t cq) {
  const int lead = my_inst < p->inst;
  const char *ns = getenv("FABRIC_SMSG_STREAM"); /* a longer stream for profiling */
  const int stream = ns && atoi(ns) > 0 ? atoi(ns) : 20000;
  const char *np = getenv("FABRIC_SMSG_PINGPONG"); /* more round trips, for tracing */
  const int iters = np && atoi(np) > 0 ? atoi(np) : 2000;
  double *rtt = malloc(sizeof *rtt * (size_t)iters);
  if (!rtt) return fail("malloc", iters);
  for (int i = 0; i < iters; ++i) {
    double t0 = fabric_now_s();
    if (lead ? bench_send(p, cq, NULL) || bench_take(p, rcq, cq, NULL)
             : bench_take(p, rcq, cq, NULL) || bench_send(p, cq, NULL)) {
      free(rtt);
      return 1;
    }
    rtt[i] = fabric_now_s() - t0;
  }
  qsort(rtt, iters, sizeof rtt[0], cmp_double);
  const double median_rtt = rtt[iters / 2];
  free(rtt);
  double t0 = fabric_now_s(), c0 = cpu_now_s(), peer_cpu = 0;
  for (int i = 0; i < stream; ++i)
    if (lead ? bench_send(p, cq, NULL) : bench_take(p, rcq, cq, NULL)) return 1;
  /* The receiver's "all in", with the CPU time it spent on the stream. */
  if (lead) {
    if (bench_take(p, rcq, cq, &peer_cpu)) return 1;
  } else {
    const double mine = cpu_now_s() - c0;
    if (bench_send(p, cq, &mine)) return 1;
  }
  double secs = fabric_now_s() - t0, cpu = cpu_now_s() - c0;
  if (lead)
    printf("fabric_smsg bench: SMSG 8 B latency %.1f us (half the median round trip of %d), message rate %.0f "
           "messages/s (%d streamed, %d credits), CPU s sender %.3f receiver %.3f\n",
           median_rtt / 2 * 1e6, iters, stream / secs, stream, credits, cpu, peer_cpu);
  fflush(stdout);
  return 0;
}

static int send_one(struct peer *p, int k, uint8_t *buf, gni_return_t *out) {
  uint32_t seq = p[k].sent, len = msg_len(seq), n = len - (uint32_t)sizeof(struct msg_hdr);
  for (uint32_t j = 0; j < n; ++j) buf[j] = pattern(seq, my_inst, j);
  struct msg_hdr h = {MAGIC, seq, len, checksum(buf, n), my_inst};
  *out = GNI_SmsgSendWTag(p[k].ep, &h, sizeof h, buf, n, ((uint32_t)k << 24) | (seq & 0xFFFFFF), msg_tag(seq));
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = getenv("FABRIC_SMSG_MODE");
  if (!mode) mode = "verify";
  if (strcmp(mode, "bench") == 0) credits = BENCH_CREDITS;
  struct fabric_job job;
  int r = fabric_job_start(argc, argv, "fabric_smsg",
                           "fabric_smsg pmi COUNT | fabric_smsg INST COUNT PEER_ADDR:PEER_INST...", MAX_PEERS, &job);
  if (r != 0) return r;
  my_inst = job.inst;
  const uint32_t count = job.count;
  const int npeers = job.npeers, use_pmi = job.use_pmi;
  if (count >= (1u << 24)) return 2;
  struct peer p[MAX_PEERS];
  memset(p, 0, sizeof p);
  for (int i = 0; i < npeers; ++i) {
    p[i].addr = job.peer_addr[i];
    p[i].inst = job.peer_inst[i];
  }
  gni_nic_handle_t nic = job.nic;
  gni_cdm_handle_t cdm = job.cdm;
  const uint32_t my_addr = job.my_addr;
  gni_return_t rc;
  gni_cq_handle_t cq, rcq;  /* local completions; remote SMSG events (bound to the mailboxes) */
  if ((rc = GNI_CqCreate(nic, 4096, 0, GNI_CQ_NOBLOCK, NULL, NULL, &cq)) != GNI_RC_SUCCESS) return fail("GNI_CqCreate", rc);
  if ((rc = GNI_CqCreate(nic, 4096, 0, GNI_CQ_NOBLOCK, NULL, NULL, &rcq)) != GNI_RC_SUCCESS) return fail("GNI_CqCreate", rc);

  gni_smsg_attr_t local[MAX_PEERS], remote[MAX_PEERS];
  for (int i = 0; i < npeers; ++i) {
    if ((rc = GNI_EpCreate(nic, cq, &p[i].ep)) != GNI_RC_SUCCESS) return fail("GNI_EpCreate", rc);
    if ((rc = GNI_EpBind(p[i].ep, p[i].addr, p[i].inst)) != GNI_RC_SUCCESS) return fail("GNI_EpBind", rc);
    /* Our inst as remote event data: the receiver's CQE names us. */
    if ((rc = GNI_EpSetEventData(p[i].ep, 0, my_inst)) != GNI_RC_SUCCESS) return fail("GNI_EpSetEventData", rc);
    gni_smsg_attr_t *a = &local[i];
    memset(a, 0, sizeof *a);
    a->msg_type = GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT;
    a->mbox_maxcredit = credits;
    a->msg_maxsize = MAXSIZE;
    unsigned need = 0;
    if ((rc = GNI_SmsgBufferSizeNeeded(a, &need)) != GNI_RC_SUCCESS) return fail("GNI_SmsgBufferSizeNeeded", rc);
    p[i].mbox = calloc(1, need);
    if ((rc = GNI_MemRegister(nic, (uint64_t)p[i].mbox, need, rcq, GNI_MEM_READWRITE, -1, &p[i].mh)) != GNI_RC_SUCCESS)
      return fail("GNI_MemRegister", rc);
    a->msg_buffer = p[i].mbox;
    a->buff_size = need;
    a->mem_hndl = p[i].mh;
  }
  /* Exchange the attributes: everybody posts the same datagram to all (each peer's own
   * mailbox attributes for it are what it needs; ours differ per peer only in the buffer). */
  for (int i = 0; i < npeers; ++i) {
    gni_post_state_t st;
    uint32_t ra, ri;
    if ((rc = GNI_EpPostDataWId(p[i].ep, &local[i], sizeof local[i], &remote[i], sizeof remote[i], 1)) != GNI_RC_SUCCESS)
      return fail("GNI_EpPostDataWId (attributes)", rc);
    rc = GNI_EpPostDataWaitById(p[i].ep, 1, 30000, &st, &ra, &ri);
    if (rc != GNI_RC_SUCCESS || st != GNI_POST_COMPLETED) return fail("attribute exchange", rc);
  }
  for (int i = 0; i < npeers; ++i)
    if ((rc = GNI_SmsgInit(p[i].ep, &local[i], &remote[i])) != GNI_RC_SUCCESS) {
      fprintf(stderr, "fabric_smsg %u: GNI_SmsgInit to %u/%u: rc %d\n", my_inst, p[i].addr, p[i].inst, rc);
      return 1;
    }
  /* Everybody's channels exist before anybody sends (not required: a mailbox is opened by
   * whichever side comes first, but it keeps the timing honest). */
  char din[8] = "ready", dout[MAX_PEERS][8];
  if (dgram_round(p, npeers, 2, din, sizeof din, dout, sizeof dout[0])) return 1;

  static uint8_t buf[MAXSIZE];
  double t0 = fabric_now_s(), deadline = t0 + 50;
  uint32_t done = 0, idle = 0;
  while (done < (uint32_t)npeers) {
    uint64_t before = 0, after = 0;
    for (int k = 0; k < npeers; ++k) before += p[k].sent + p[k].received + p[k].local_done;
    if (fabric_now_s() > deadline) {
      for (int i = 0; i < npeers; ++i)
        fprintf(stderr, "fabric_smsg %u: peer %u: sent %u received %u local %u remote CQEs %u\n", my_inst, p[i].inst,
                p[i].sent, p[i].received, p[i].local_done, p[i].remote_cqes);
      return fail("exchange (timed out)", -1);
    }
    for (int k = 0; k < npeers; ++k) {
      /* Up to a burst per peer per turn, as long as credits last. */
      for (int b = 0; b < 8 && p[k].sent < count; ++b) {
        send_one(p, k, buf, &rc);
        if (rc == GNI_RC_NOT_DONE) {
          p[k].stalls++;
          break;
        }
        if (rc != GNI_RC_SUCCESS) return fail("GNI_SmsgSendWTag", rc);
        p[k].sent++;
      }
    }
    if (receive(p, npeers, rcq, count) || local_events(p, npeers, cq)) return 1;
    /* Waiting for credits or messages: leave the cores to the daemons (2 shared cores
     * run both daemons and both ranks here). */
    for (int k = 0; k < npeers; ++k) after += p[k].sent + p[k].received + p[k].local_done;
    if (after != before)
      idle = 0;
    else if (++idle < 64)
      sched_yield();
    else
      usleep(20);
    done = 0;
    for (int k = 0; k < npeers; ++k)
      done += p[k].sent == count && p[k].received == count && p[k].local_done == count && p[k].remote_cqes >= count;
  }
  double secs = fabric_now_s() - t0;
  uint64_t stalls = 0;
  for (int k = 0; k < npeers; ++k) stalls += p[k].stalls;
  /* Nothing more may arrive. */
  if (receive(p, npeers, rcq, count) || local_events(p, npeers, cq)) return 1;
  /* The library's own count of sends that found no credit includes those whose retry, right
   * after asking for the credit event, went through: that event still comes. */
  uint32_t nic_stalls = 0;
  if ((rc = GNI_GetNicStat(nic, GNI_STAT_SMSG_MBOX_CREDITS_STALL, &nic_stalls)) != GNI_RC_SUCCESS)
    return fail("GNI_GetNicStat", rc);
  const uint64_t retried = nic_stalls > stalls ? nic_stalls - stalls : 0;
  for (int k = 0; k < npeers; ++k) {
    void *m;
    if ((rc = GNI_SmsgGetNext(p[k].ep, &m)) != GNI_RC_NOT_DONE) return fail("GNI_SmsgGetNext after the last message", rc);
    /* One remote CQE per message, plus at most one credit event (an SMSG event with no
     * message, as the hardware's credit messages raise) per time we ran out of credits. */
    if (p[k].remote_cqes > count + p[k].stalls + retried) {
      fprintf(stderr, "fabric_smsg %u: from %u: %u remote CQEs for %u messages and %llu credit stalls\n", my_inst,
              p[k].inst, p[k].remote_cqes, count, (unsigned long long)p[k].stalls);
      return 1;
    }
  }
  /* Everybody done checking before anybody goes away (a receiver that left would make its
   * peers' last checks see the channel broken). */
  if (dgram_round(p, npeers, 3, din, sizeof din, dout, sizeof dout[0])) return 1;
  printf("fabric_smsg %u/%u: %u messages each way with %d peers verified in %.2f s (%.0f messages/s sent), %llu "
         "credit stalls\n",
         my_addr, my_inst, count, npeers, secs, secs > 0 ? count * npeers / secs : 0.0, (unsigned long long)stalls);
  fflush(stdout);

  if (strcmp(mode, "bench") == 0) {
    if (npeers != 1) return fail("bench needs two ranks", npeers);
    if (bench(&p[0], rcq, cq)) return 1;
    if (dgram_round(p, npeers, 4, din, sizeof din, dout, sizeof dout[0])) return 1;
  }
  if (strcmp(mode, "die") == 0) _exit(0);
  if (strcmp(mode, "idle") == 0 || strcmp(mode, "fail") == 0) {
    const char *go = getenv("FABRIC_SMSG_GO");
    if (!go) return fail("FABRIC_SMSG_GO not set", -1);
    double until = fabric_now_s() + 30;
    while (access(go, F_OK) != 0 && fabric_now_s() < until) usleep(10000);
    if (strcmp(mode, "idle") == 0) _exit(0);
    if (access(go, F_OK) != 0) return fail("waiting for FABRIC_SMSG_GO", -1);
    /* Keep sending to the first peer until an error shows; never more than 15 s. */
    double start = fabric_now_s();
    const char *how = NULL;
    while (!how && fabric_now_s() - start < 15) {
      send_one(p, 0, buf, &rc);
      if (rc == GNI_RC_SUCCESS)
        p[0].sent++;
      else if (rc != GNI_RC_NOT_DONE)
        how = "the send returned an error";
      gni_cq_entry_t ev;
      gni_return_t crc;
      while (!how && (crc = GNI_CqGetEvent(cq, &ev)) != GNI_RC_NOT_DONE)
        if (crc != GNI_RC_SUCCESS || !GNI_CQ_STATUS_OK(ev)) how = "an error CQE in the send CQ";
      void *m;
      if (!how && GNI_SmsgGetNext(p[0].ep, &m) == GNI_RC_INVALID_STATE) how = "GNI_SmsgGetNext says INVALID_STATE";
      usleep(1000);
    }
    if (!how) return fail("no error within 15 s of the peer going away", -1);
    printf("fabric_smsg %u/%u: peer %u/%u unreachable: %s after %.2f s (rc %d)\n", my_addr, my_inst, p[0].addr,
           p[0].inst, how, fabric_now_s() - start, rc);
    fflush(stdout);
    _exit(0);
  }

  for (int i = 0; i < npeers; ++i) {
    GNI_EpDestroy(p[i].ep);
    GNI_MemDeregister(nic, &p[i].mh);
    free(p[i].mbox);
  }
  GNI_CqDestroy(cq);
  GNI_CqDestroy(rcq);
  fabric_job_end(cdm, use_pmi);
  return 0;
}
