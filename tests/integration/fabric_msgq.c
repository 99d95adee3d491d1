/* One process of the cross-host MSGQ test with a member killed (test_fabric_ofi_msgq.sh).
 * Attaches to the daemon named by NICEMU_RUNDIR/NICEMU_NODE, joins its node's MSGQ (two
 * instances per node), and the node's leader exchanges connection attributes with the other
 * node's through files in $FABRIC_MSGQ_DIR (as applications do through PMI), then streams
 * messages to every instance of the other node while delivering what comes:
 *   fabric_msgq INST NODE LEADER OTHER_PE "DEST_INST..." [victim]
 * Phase 1: ROUNDS rounds, one message to each destination per round; every message is
 * checked on delivery (sender, sequence strictly increasing per sender, tag, body), every
 * local completion counted. Then $DIR/streaming.INST, and the stream goes on until the test
 * has SIGKILLed the victim ($DIR/killed). A victim streams until killed.
 * Phase 2 (survivors): keeps sending to every destination; the dead victim must answer with
 * PEER_GONE completions (or a failed GNI_MsgqSend) within 10 s of the kill, and every error
 * completion of a message to it after the kill must be PEER_GONE (its messages waiting for
 * the dead member's reply are judged: the daemon says it died); every GNI_MsgqProgress call
 * must return within 1 s; then AFTER more messages to each live destination must all
 * complete without error (none refused: the new member resynchronised the credits) and be
 * delivered, and an end message closes each stream. Messages in flight at the kill to a live destination
 * of the victim's node may complete with an error (they went through the victim: the error
 * says so, none is lost silently); counted, not failed.
 * Prints "msgq INST: ..." lines the test reads; exit 0 = everything checked. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gni_pub.h"

#define ROUNDS 300
#define AFTER 200
#define MAX_DEST 4
#define MAX_SRC 64
#define END_FLAG 1u

struct hdr {
  uint32_t src_inst, seq, flags, len;
};

static uint32_t my_inst;
static const char *dir;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}
static int exists(const char *name) {
  char p[512];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return stat(p, &st) == 0;
}
static void touch(const char *name) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (f) fclose(f);
}
static int die(const char *what, int rc) {
  fprintf(stderr, "msgq %u: %s failed (rc %d)\n", my_inst, what, rc);
  return 1;
}
static uint8_t tag_of(uint32_t src, uint32_t seq) { return (uint8_t)(seq * 7 + src); }
static char byte_of(uint32_t src, uint32_t seq, uint32_t i) { return (char)(src * 31 + seq + i); }

/* Delivery: per sender instance, sequence numbers strictly increasing (a message that
 * completed with an error may or may not have been stored), content intact. */
struct rx {
  uint32_t src[MAX_SRC], next[MAX_SRC], got[MAX_SRC], ended[MAX_SRC];
  int nsrc;
  uint32_t bad, total;
};
static struct rx rx;

static int slot_of(uint32_t src) {
  for (int i = 0; i < rx.nsrc; ++i)
    if (rx.src[i] == src) return i;
  if (rx.nsrc == MAX_SRC) return -1;
  rx.src[rx.nsrc] = src;
  return rx.nsrc++;
}

static int on_message(uint32_t snd_id, uint32_t snd_pe, void *msg, uint8_t tag, void *cb_data) {
  (void)snd_pe, (void)cb_data;
  struct hdr h;
  memcpy(&h, msg, sizeof h);
  int k = slot_of(snd_id);
  int ok = k >= 0 && h.src_inst == snd_id && h.seq >= rx.next[k] && tag == tag_of(snd_id, h.seq) && h.len <= 32;
  const char *body = (const char *)msg + sizeof h;
  for (uint32_t i = 0; ok && i < h.len; ++i) ok = body[i] == byte_of(snd_id, h.seq, i);
  if (!ok) {
    fprintf(stderr, "msgq %u: bad message from %u: seq %u (next %u) tag %u\n", my_inst, snd_id, h.seq,
            k >= 0 ? rx.next[k] : 0, tag);
    ++rx.bad;
  } else {
    rx.next[k] = h.seq + 1;
    ++rx.got[k];
    if (h.flags & END_FLAG) rx.ended[k] = 1;
  }
  ++rx.total;
  return 1;
}

/* Sending: msg_id = destination index << 24 | sequence number. */
struct dest {
  uint32_t inst;
  gni_ep_handle_t ep;
  uint32_t seq, ok, err, err_after_kill, last_err_status;
  uint32_t sent_after_recovery, ok_after_recovery, refused_after_recovery;
  int gone;              /* the dead victim: an error seen after the kill */
  double first_err_at;   /* any error after the kill */
  double gone_at;        /* PEER_GONE after the kill, or a failed send */
  uint32_t first_err_status;
  uint32_t not_gone_after_kill; /* error completions after the kill other than PEER_GONE */
};
static struct dest d[MAX_DEST];
static int nd;
static gni_cq_handle_t scq;
static gni_msgq_handle_t q;
static double killed_at, max_progress;
static int killed, victim;

static void drain(void) {
  gni_cq_entry_t e;
  gni_return_t rc;
  while ((rc = GNI_CqGetEvent(scq, &e)) == GNI_RC_SUCCESS || rc == GNI_RC_TRANSACTION_ERROR) {
    uint32_t id = GNI_CQ_GET_MSG_ID(e), k = id >> 24, seq = id & 0xFFFFFF;
    if (k >= (uint32_t)nd) continue;
    if (GNI_CQ_STATUS_OK(e)) {
      d[k].ok++;
      if (seq >= d[k].sent_after_recovery && d[k].sent_after_recovery) d[k].ok_after_recovery++;
    } else {
      if (seq >= d[k].sent_after_recovery && d[k].sent_after_recovery) d[k].refused_after_recovery++;
      d[k].err++;
      d[k].last_err_status = (uint32_t)GNI_CQ_GET_STATUS(e);
      if (killed) {
        d[k].err_after_kill++;
        if (!d[k].first_err_at) d[k].first_err_at = now_s(), d[k].first_err_status = d[k].last_err_status;
        if (!d[k].gone_at && d[k].last_err_status == 4 /* PEER_GONE */) d[k].gone_at = now_s();
        if (d[k].last_err_status != 4) d[k].not_gone_after_kill++;
      }
    }
  }
}

static int progress(void) {
  double t = now_s();
  gni_return_t rc = GNI_MsgqProgress(q, 0);
  const double took = now_s() - t;
  if (took > max_progress) max_progress = took;
  if (took > 0.5)
    fprintf(stderr, "msgq %u: GNI_MsgqProgress took %.3f s (%s the kill, at %.2f s)\n", my_inst, took,
            killed ? "after" : "before", killed ? t - killed_at : 0.0);
  if (rc != GNI_RC_SUCCESS && rc != GNI_RC_NOT_DONE) return die("GNI_MsgqProgress", rc);
  return 0;
}

/* One message to destination k: SUCCESS, or an error rc (the destination is gone). NOT_DONE
 * (no credit) is retried while delivering, for 30 s at most. */
static gni_return_t send_one(int k, uint32_t flags) {
  struct hdr h = {my_inst, d[k].seq, flags, d[k].seq % 17};
  char body[32];
  for (uint32_t i = 0; i < h.len; ++i) body[i] = byte_of(my_inst, h.seq, i);
  double until = now_s() + 30;
  gni_return_t rc;
  while ((rc = GNI_MsgqSend(q, d[k].ep, &h, sizeof h, body, h.len, ((uint32_t)k << 24) | d[k].seq,
                            tag_of(my_inst, h.seq))) == GNI_RC_NOT_DONE) {
    if (progress()) return GNI_RC_ERROR_RESOURCE;
    drain();
    if (now_s() > until) return GNI_RC_NOT_DONE;
    if (!killed && exists("killed")) killed = 1, killed_at = now_s();
  }
  if (rc == GNI_RC_SUCCESS) d[k].seq++;
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: fabric_msgq INST NODE LEADER OTHER_PE \"DEST_INST...\" [victim]\n");
    return 2;
  }
  my_inst = (uint32_t)strtoul(argv[1], NULL, 0);
  const int node = atoi(argv[2]), leader = atoi(argv[3]);
  const uint32_t other_pe = (uint32_t)strtoul(argv[4], NULL, 0);
  victim = argc > 6 && strcmp(argv[6], "victim") == 0;
  dir = getenv("FABRIC_MSGQ_DIR");
  const char *ptag_s = getenv("PMI_GNI_PTAG"), *cookie_s = getenv("PMI_GNI_COOKIE");
  const char *victim_s = getenv("FABRIC_MSGQ_VICTIM");  /* the victim's inst */
  if (!dir || !ptag_s || !cookie_s || !victim_s) {
    fprintf(stderr, "msgq: FABRIC_MSGQ_DIR, FABRIC_MSGQ_VICTIM, PMI_GNI_PTAG, PMI_GNI_COOKIE needed\n");
    return 2;
  }
  const uint32_t victim_inst = (uint32_t)strtoul(victim_s, NULL, 0);
  /* FABRIC_MSGQ_PAUSE: the instance that stops reading when $DIR/pause appears (0: none). */
  const uint32_t pause_inst = getenv("FABRIC_MSGQ_PAUSE") ? (uint32_t)strtoul(getenv("FABRIC_MSGQ_PAUSE"), NULL, 0) : 0;
  gni_cdm_handle_t cdm;
  gni_nic_handle_t nic;
  uint32_t my_addr;
  gni_return_t rc = GNI_CdmCreate(my_inst, (uint8_t)strtoul(ptag_s, NULL, 0), (uint32_t)strtoul(cookie_s, NULL, 0), 0, &cdm);
  if (rc == GNI_RC_SUCCESS) rc = GNI_CdmAttach(cdm, 0, &my_addr, &nic);
  if (rc != GNI_RC_SUCCESS) return die("GNI_CdmCreate/Attach", rc);
  if ((rc = GNI_CqCreate(nic, 4096, 0, GNI_CQ_NOBLOCK, NULL, NULL, &scq)) != GNI_RC_SUCCESS) return die("GNI_CqCreate", rc);
  gni_msgq_attr_t a;
  memset(&a, 0, sizeof a);
  a.max_msg_sz = 64;
  a.smsg_q_sz = 16;
  a.rcv_pool_sz = 1;
  a.num_msgq_eps = 2;
  a.nloc_insts = 2;
  a.modes = GNI_MSGQ_MODE_BLOCKING;
  a.rcv_cq_sz = 16;
  if ((rc = GNI_MsgqInit(nic, on_message, NULL, scq, &a, &q)) != GNI_RC_SUCCESS) return die("GNI_MsgqInit", rc);
  char name[64];
  snprintf(name, sizeof name, "init.%u", my_inst);
  touch(name);
  double until = now_s() + 60;
  if (leader) {
    /* Attributes through files, as through PMI: written whole, then named. */
    gni_msgq_ep_attr_t mine, peer;
    uint32_t size = 0;
    while (!exists("init.all")) {
      if (now_s() > until) return die("waiting for every instance", 0);
      usleep(2000);
    }
    if ((rc = GNI_MsgqGetConnAttrs(q, other_pe, &mine, &size)) != GNI_RC_SUCCESS) return die("GNI_MsgqGetConnAttrs", rc);
    char tmp[512], path[512];
    snprintf(tmp, sizeof tmp, "%s/attrs.%d.tmp", dir, node);
    snprintf(path, sizeof path, "%s/attrs.%d", dir, node);
    FILE *f = fopen(tmp, "w");
    if (!f || fwrite(&mine, 1, size, f) != size || fclose(f) != 0 || rename(tmp, path) != 0) return die("writing attrs", 0);
    snprintf(path, sizeof path, "%s/attrs.%d", dir, 1 - node);
    while (!(f = fopen(path, "r"))) {
      if (now_s() > until) return die("waiting for the other node's attrs", 0);
      usleep(2000);
    }
    memset(&peer, 0, sizeof peer);
    size_t got = fread(&peer, 1, sizeof peer, f);
    fclose(f);
    if (got < offsetof(gni_msgq_ep_attr_t, insts)) return die("reading attrs", (int)got);
    if ((rc = GNI_MsgqConnect(q, other_pe, &peer)) != GNI_RC_SUCCESS) return die("GNI_MsgqConnect", rc);
    snprintf(name, sizeof name, "conn.%d", node);
    touch(name);
  }
  while (!exists("conn.0") || !exists("conn.1")) {
    if (now_s() > until) return die("waiting for both nodes' connections", 0);
    usleep(2000);
  }
  /* Destinations: the other node's instances. */
  char *list = strdup(argv[5]);
  for (char *t = strtok(list, " "); t && nd < MAX_DEST; t = strtok(NULL, " ")) {
    d[nd].inst = (uint32_t)strtoul(t, NULL, 0);
    if ((rc = GNI_EpCreate(nic, scq, &d[nd].ep)) != GNI_RC_SUCCESS ||
        (rc = GNI_EpBind(d[nd].ep, other_pe, d[nd].inst)) != GNI_RC_SUCCESS)
      return die("GNI_EpCreate/Bind", rc);
    ++nd;
  }
  free(list);

  /* Phase 1: the exchange, then streaming until the kill. */
  for (uint32_t r = 0;; ++r) {
    for (int k = 0; k < nd; ++k)
      if ((rc = send_one(k, 0)) != GNI_RC_SUCCESS && !killed) return die("GNI_MsgqSend before the kill", rc);
    if (progress()) return 1;
    drain();
    if (r == ROUNDS) {
      snprintf(name, sizeof name, "streaming.%u", my_inst);
      touch(name);
      printf("msgq %u: phase 1: %u rounds to %d destinations, %u delivered, %u bad\n", my_inst, ROUNDS, nd, rx.total,
             rx.bad);
      fflush(stdout);
    }
    if (pause_inst == my_inst && !killed && exists("pause")) {
      /* Stop reading until 8 s after the kill: the ring for the other node fills with
       * messages the victim stored, which the member taking over must count. */
      while (!exists("killed")) usleep(10000);
      killed = 1, killed_at = now_s();
      while (now_s() < killed_at + 8) usleep(10000);
    }
    if (!killed && exists("killed")) killed = 1, killed_at = now_s();
    if (killed || r > 100000) break;
    usleep(victim ? 200 : 500);  /* the victim streams; nobody floods */
  }
  if (!killed) return die("the kill never came", 0);

  /* Phase 2: the dead destination errs, the live ones keep flowing. */
  int bad = 0;
  for (int k = 0; k < nd; ++k) {
    if (d[k].inst != victim_inst) continue;
    uint32_t failed_rc = 0;
    while (!d[k].gone_at) {
      rc = send_one(k, 0);
      if (rc != GNI_RC_SUCCESS && !d[k].gone_at) d[k].gone_at = now_s(), failed_rc = rc;
      if (progress()) return 1;
      drain();
      if (now_s() > killed_at + 20) break;
      usleep(5000);
    }
    const double first = d[k].first_err_at ? d[k].first_err_at - killed_at : -1;
    const double gone = d[k].gone_at ? d[k].gone_at - killed_at : -1;
    if (failed_rc)
      printf("msgq %u: dead destination %u: GNI_MsgqSend rc %u after %.2f s\n", my_inst, d[k].inst, failed_rc, gone);
    else
      printf("msgq %u: dead destination %u: first error after %.2f s (status %u), PEER_GONE after %.2f s, %u errors "
             "(%u after the kill not PEER_GONE)\n", my_inst, d[k].inst, first, d[k].first_err_status, gone, d[k].err,
             d[k].not_gone_after_kill);
    if (!(gone >= 0 && gone < 10) || d[k].not_gone_after_kill) bad = 1;
    d[k].gone = 1;
  }
  for (int k = 0; k < nd; ++k) {
    if (d[k].gone) continue;
    /* AFTER messages completed without error, the last of them the end message. A
     * recoverable refusal (TRANSIENT: the member's ring was full) is sent again as a client
     * would, and fails the test: the new member's sync answer should have prevented it. */
    d[k].sent_after_recovery = d[k].seq ? d[k].seq : 1;
    const double give_up = now_s() + 30;
    uint32_t sent = 0;
    while (d[k].ok_after_recovery < AFTER && now_s() < give_up) {
      const uint32_t settled = d[k].ok_after_recovery + d[k].refused_after_recovery;
      /* The end message alone, once the others completed. */
      const int last = d[k].ok_after_recovery + 1 == AFTER;
      if (sent - settled < (last ? 1u : 8u) && d[k].ok_after_recovery + (sent - settled) < AFTER - (last ? 0 : 1)) {
        if ((rc = send_one(k, last ? END_FLAG : 0)) != GNI_RC_SUCCESS) {
          fprintf(stderr, "msgq %u: GNI_MsgqSend to live %u after the kill: rc %d\n", my_inst, d[k].inst, rc);
          bad = 1;
          break;
        }
        ++sent;
      }
      if (progress()) return 1;
      drain();
    }
  }
  /* Our completions, and the end messages from every live sender (whose number the test
   * gives as FABRIC_MSGQ_ENDS). */
  const uint32_t ends = (uint32_t)strtoul(getenv("FABRIC_MSGQ_ENDS") ? getenv("FABRIC_MSGQ_ENDS") : "0", NULL, 0);
  until = now_s() + 30;
  for (;;) {
    if (progress()) return 1;
    drain();
    uint32_t e = 0, done = 1;
    for (int i = 0; i < rx.nsrc; ++i) e += rx.ended[i];
    for (int k = 0; k < nd; ++k)
      if (!d[k].gone && d[k].ok_after_recovery < AFTER) done = 0;
    if (e >= ends && done) break;
    if (now_s() > until) {
      fprintf(stderr, "msgq %u: %u of %u end messages, completions after recovery:", my_inst, e, ends);
      for (int k = 0; k < nd; ++k) fprintf(stderr, " %u:%u/%u", d[k].inst, d[k].ok_after_recovery, AFTER);
      fprintf(stderr, "\n");
      bad = 1;
      break;
    }
    usleep(1000);
  }
  for (int k = 0; k < nd; ++k)
    if (!d[k].gone)
      printf("msgq %u: live destination %u: %u sent, %u ok, %u errors (%u after the kill), after recovery %u ok "
             "(%u refused, sent again; last status %u)\n", my_inst, d[k].inst, d[k].seq, d[k].ok, d[k].err,
             d[k].err_after_kill, d[k].ok_after_recovery, d[k].refused_after_recovery, d[k].last_err_status);
  for (int k = 0; k < nd; ++k)
    if (!d[k].gone && d[k].refused_after_recovery) bad = 1;
  for (int i = 0; i < rx.nsrc; ++i)
    printf("msgq %u: from %u: %u delivered in order%s\n", my_inst, rx.src[i], rx.got[i], rx.ended[i] ? ", ended" : "");
  printf("msgq %u: longest GNI_MsgqProgress %.3f s, %u bad messages\n", my_inst, max_progress, rx.bad);
  if (max_progress > 1.0 || rx.bad) bad = 1;
  snprintf(name, sizeof name, "done.%u", my_inst);
  touch(name);
  /* Nobody releases while others may still send to us. */
  until = now_s() + 30;
  while (!exists("done.all") && now_s() < until) {
    if (progress()) return 1;
    usleep(2000);
  }
  rc = GNI_MsgqRelease(q);
  printf("msgq %u: %s\n", my_inst, bad ? "FAILED" : "verified");
  return bad;
}
