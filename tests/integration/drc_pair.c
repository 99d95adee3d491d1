/* Two jobs started separately that share one DRC credential (test_drc_jobs.sh): a service
 * job acquires the credential and grants it to the client job by its workload-manager id;
 * the client job's ranks drc_access it, attach with its cookie and ptag, and each exchanges
 * SMSG ping-pong messages and RDMA PUT / GET data with the service, all verified. Then
 * the service revokes the grant (a new attach by the client is refused, its attached CDM
 * keeps working) and releases the credential (drc_access finds nothing, an attach with the
 * cookie and ptag is refused). The service and the clients are processes of different users:
 * the kernel refuses them cross-memory attach to each other, so their FMA PUT/GET, AMOs
 * (plain and chained) and RDMA go through the daemons (docs/decisions.md), with no setting. The jobs have no PMI in common: they meet through files in
 * DIR, each written whole (renamed into place) and polled for.
 *   drc_pair serve DIR CLIENTS COUNT   the service (one process, the credential's owner)
 *   drc_pair client DIR COUNT          a client rank (PMI_RANK, else SLURM_PROCID, of a job of CLIENTS ranks)
 *   drc_pair probe DIR                 a process neither owner nor granted: every way in refused
 * Prints "drc_pair ...: ok" and exits 0 when everything checked. */
#define NICEMU_DRC_STRERROR
#include <rdmacred.h>

#include <gni_pub.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_CLIENTS 8
#define LEN 16384     /* bytes PUT and GET each way */
#define MSG_MAX 512   /* SMSG maximum message size */
#define WAIT_S 60     /* for a file or a message */
#define SERVE_INST 100
#define CLIENT_INST 200 /* + rank */
#define MAGIC 0x44525031u
#define AMO_INIT 7u
#define REGION (3 * LEN + 64)   /* each region's AMO word before the peer's fetch-and-add */

static const char* me = "drc_pair";
static const char* dir;

#define FAIL(...)                               \
  do {                                          \
    fprintf(stderr, "%s: ", me);                \
    fprintf(stderr, __VA_ARGS__);               \
    fputc('\n', stderr);                        \
    return 1;                                   \
  } while (0)

/* What one side tells the other: where to send, and what to PUT into and GET from. */
struct side {
  uint32_t magic, addr, inst, ptag, cookie, job, uid;
  uint64_t region; /* [0, LEN) the peer's RDMA PUT lands here, [LEN, 2 LEN) the peer GETs this (RDMA
                     and FMA), [2 LEN, 3 LEN) its FMA PUT lands here, then its AMO word */
  gni_mem_handle_t region_mh;
  gni_smsg_attr_t smsg;
};

/* A pairing of this process with one peer. */
struct link {
  struct side mine, peer;
  gni_ep_handle_t ep;
  /* scratch: [0, LEN) our PUTs' source, [LEN, 2 LEN) our RDMA GET's target, [2 LEN, 3 LEN) our
   * FMA GETs' target, then our AMO's fetched value */
  uint8_t *mbox, *region, *scratch;
  gni_mem_handle_t mbox_mh, region_mh, scratch_mh;
};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void path_of(char* out, size_t n, const char* name) { snprintf(out, n, "%s/%s", dir, name); }

static int put_file(const char* name, const void* data, size_t len) {
  char path[4096], tmp[4200];
  path_of(path, sizeof path, name);
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  FILE* f = fopen(tmp, "wb");
  if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0 || rename(tmp, path) != 0) FAIL("cannot write %s", path);
  return 0;
}

/* Waits for the file `name` (polled every 10 ms) and reads exactly `len` bytes of it. */
static int get_file(const char* name, void* data, size_t len) {
  char path[4096];
  path_of(path, sizeof path, name);
  double until = now_s() + WAIT_S;
  FILE* f;
  while (!(f = fopen(path, "rb"))) {
    if (now_s() > until) FAIL("no %s after %d s", path, WAIT_S);
    usleep(10000);
  }
  size_t got = fread(data, 1, len, f);
  fclose(f);
  if (got != len) FAIL("%s: %zu bytes, want %zu", path, got, len);
  return 0;
}

static int put_u32(const char* name, uint32_t v) { return put_file(name, &v, sizeof v); }
static int get_u32(const char* name, uint32_t* v) { return get_file(name, v, sizeof *v); }

static uint8_t pattern(uint32_t inst, uint32_t seq, uint32_t j) { return (uint8_t)(inst * 37u + seq * 131u + j * 11u + (j >> 8)); }
static uint32_t msg_len(uint32_t seq) { return 8 + (seq * 53u) % (MSG_MAX - 8 + 1); }
static uint8_t msg_tag(uint32_t seq) { return (uint8_t)(seq % 200 + 1); }

/* The credential's cookie and ptag through drc_access and GNI_GetPtag, as uGNI callers
 * (DataSpaces, LDMS) do. Returns the drc_access code; *grc the GNI_GetPtag code. */
static int cookie_of(uint32_t cred, uint32_t* cookie, uint8_t* ptag, gni_return_t* grc) {
  drc_info_handle_t info = NULL;
  int rc = drc_access(cred, 0, &info);
  *grc = GNI_RC_PERMISSION_ERROR;
  if (rc != DRC_SUCCESS) return rc;
  *cookie = drc_get_first_cookie(info);
  drc_release_local(&info);
  *grc = GNI_GetPtag(0, *cookie, ptag);
  return rc;
}

/* A CDM of its own with (ptag, cookie), attached and destroyed: what a fresh attach gets. */
static gni_return_t try_attach(uint32_t inst, uint8_t ptag, uint32_t cookie) {
  gni_cdm_handle_t cdm;
  gni_nic_handle_t nic;
  uint32_t addr;
  gni_return_t rc = GNI_CdmCreate(inst, ptag, cookie, 0, &cdm);
  if (rc != GNI_RC_SUCCESS) return rc;
  rc = GNI_CdmAttach(cdm, 0, &addr, &nic);
  GNI_CdmDestroy(cdm);
  return rc;
}

/* Takes local completions off cq until the post `want` has completed (SMSG send
 * completions, also in cq, are checked and passed over). */
static int wait_post(gni_cq_handle_t cq, gni_post_descriptor_t* want) {
  double until = now_s() + WAIT_S;
  for (;;) {
    gni_cq_entry_t ev;
    gni_return_t rc = GNI_CqGetEvent(cq, &ev);
    if (rc == GNI_RC_NOT_DONE) {
      if (now_s() > until) FAIL("post type %d not completed after %d s", (int)want->type, WAIT_S);
      usleep(50);
      continue;
    }
    if (rc != GNI_RC_SUCCESS || !GNI_CQ_STATUS_OK(ev)) FAIL("local CQ: rc %d, event status not OK", (int)rc);
    if (GNI_CQ_GET_TYPE(ev) != GNI_CQ_EVENT_TYPE_POST) continue;
    gni_post_descriptor_t* d = NULL;
    if ((rc = GNI_GetCompleted(cq, ev, &d)) != GNI_RC_SUCCESS) FAIL("GNI_GetCompleted: rc %d", (int)rc);
    if (d != want) FAIL("completion of another post");
    return 0;
  }
}

/* Drains the mailbox CQ and the local CQ while waiting for a message. */
static int drain(gni_cq_handle_t rcq, gni_cq_handle_t cq) {
  gni_cq_entry_t ev;
  gni_return_t rc;
  while ((rc = GNI_CqGetEvent(rcq, &ev)) == GNI_RC_SUCCESS) {
  }
  if (rc != GNI_RC_NOT_DONE) FAIL("mailbox CQ: rc %d", (int)rc);
  while ((rc = GNI_CqGetEvent(cq, &ev)) == GNI_RC_SUCCESS)
    if (!GNI_CQ_STATUS_OK(ev) || GNI_CQ_GET_TYPE(ev) != GNI_CQ_EVENT_TYPE_SMSG) FAIL("unexpected local CQ event");
  if (rc != GNI_RC_NOT_DONE) FAIL("local CQ: rc %d", (int)rc);
  return 0;
}

/* Message `seq` from this side's inst: its number, the sender and a pattern. */
static int send_msg(struct link* l, uint32_t seq, gni_cq_handle_t rcq, gni_cq_handle_t cq) {
  uint8_t body[MSG_MAX];
  uint32_t n = msg_len(seq), hdr[2] = {seq, l->mine.inst};
  for (uint32_t j = 8; j < n; ++j) body[j - 8] = pattern(l->mine.inst, seq, j);
  double until = now_s() + WAIT_S;
  for (;;) {
    gni_return_t rc = GNI_SmsgSendWTag(l->ep, hdr, sizeof hdr, body, n - 8, seq, msg_tag(seq));
    if (rc == GNI_RC_SUCCESS) return 0;
    if (rc != GNI_RC_NOT_DONE) FAIL("GNI_SmsgSendWTag of message %u to inst %u: rc %d", seq, l->peer.inst, (int)rc);
    if (now_s() > until || drain(rcq, cq)) FAIL("no credit to send message %u to inst %u", seq, l->peer.inst);
    usleep(50);
  }
}

static int recv_msg(struct link* l, uint32_t seq, gni_cq_handle_t rcq, gni_cq_handle_t cq) {
  double until = now_s() + WAIT_S;
  for (;;) {
    void* m = NULL;
    uint8_t tag = GNI_SMSG_ANY_TAG;
    gni_return_t rc = GNI_SmsgGetNextWTag(l->ep, &m, &tag);
    if (rc == GNI_RC_NOT_DONE) {
      if (now_s() > until || drain(rcq, cq)) FAIL("message %u from inst %u did not come", seq, l->peer.inst);
      usleep(50);
      continue;
    }
    if (rc != GNI_RC_SUCCESS) FAIL("GNI_SmsgGetNextWTag: rc %d", (int)rc);
    uint32_t hdr[2];
    memcpy(hdr, m, sizeof hdr);
    if (hdr[0] != seq || hdr[1] != l->peer.inst || tag != msg_tag(seq))
      FAIL("got message %u from inst %u tag %u; want %u from %u tag %u", hdr[0], hdr[1], tag, seq, l->peer.inst,
           msg_tag(seq));
    const uint8_t* b = (const uint8_t*)m;
    for (uint32_t j = 8; j < msg_len(seq); ++j)
      if (b[j] != pattern(l->peer.inst, seq, j)) FAIL("message %u from inst %u: byte %u wrong", seq, l->peer.inst, j);
    if ((rc = GNI_SmsgRelease(l->ep)) != GNI_RC_SUCCESS) FAIL("GNI_SmsgRelease: rc %d", (int)rc);
    return 0;
  }
}

/* The local half of a link: an endpoint, a mailbox (its events in rcq) and the regions. */
static int link_open(struct link* l, uint32_t inst, gni_nic_handle_t nic, gni_cq_handle_t cq, gni_cq_handle_t rcq) {
  gni_return_t rc;
  l->mine.inst = inst;
  if ((rc = GNI_EpCreate(nic, cq, &l->ep)) != GNI_RC_SUCCESS) FAIL("GNI_EpCreate: rc %d", (int)rc);
  gni_smsg_attr_t* a = &l->mine.smsg;
  memset(a, 0, sizeof *a);
  a->msg_type = GNI_SMSG_TYPE_MBOX_AUTO_RETRANSMIT;
  a->mbox_maxcredit = 8;
  a->msg_maxsize = MSG_MAX;
  unsigned need = 0;
  if ((rc = GNI_SmsgBufferSizeNeeded(a, &need)) != GNI_RC_SUCCESS) FAIL("GNI_SmsgBufferSizeNeeded: rc %d", (int)rc);
  l->mbox = calloc(1, need);
  l->region = aligned_alloc(64, REGION);
  l->scratch = aligned_alloc(64, REGION);
  if (!l->mbox || !l->region || !l->scratch) FAIL("out of memory");
  memset(l->region, 0, REGION);
  for (uint32_t j = 0; j < LEN; ++j) l->region[LEN + j] = pattern(l->mine.inst, 1000, j);
  uint64_t init = AMO_INIT;
  memcpy(l->region + 3 * LEN, &init, sizeof init);
  memset(l->scratch, 0, REGION);
  for (uint32_t j = 0; j < LEN; ++j) l->scratch[j] = pattern(l->mine.inst, 2000, j);
  if ((rc = GNI_MemRegister(nic, (uint64_t)l->mbox, need, rcq, GNI_MEM_READWRITE, -1, &l->mbox_mh)) != GNI_RC_SUCCESS ||
      (rc = GNI_MemRegister(nic, (uint64_t)l->region, REGION, NULL, GNI_MEM_READWRITE, -1, &l->region_mh)) !=
          GNI_RC_SUCCESS ||
      (rc = GNI_MemRegister(nic, (uint64_t)l->scratch, REGION, NULL, GNI_MEM_READWRITE, -1, &l->scratch_mh)) !=
          GNI_RC_SUCCESS)
    FAIL("GNI_MemRegister: rc %d", (int)rc);
  a->msg_buffer = l->mbox;
  a->buff_size = need;
  a->mem_hndl = l->mbox_mh;
  l->mine.magic = MAGIC;
  l->mine.region = (uint64_t)l->region;
  l->mine.region_mh = l->region_mh;
  return 0;
}

/* The remote half: bound to the peer's NIC address and inst, the mailboxes joined. */
static int link_join(struct link* l) {
  gni_return_t rc;
  if (l->peer.magic != MAGIC) FAIL("peer's attributes are not drc_pair's");
  if ((rc = GNI_EpBind(l->ep, l->peer.addr, l->peer.inst)) != GNI_RC_SUCCESS)
    FAIL("GNI_EpBind to %u/%u: rc %d", l->peer.addr, l->peer.inst, (int)rc);
  if ((rc = GNI_SmsgInit(l->ep, &l->mine.smsg, &l->peer.smsg)) != GNI_RC_SUCCESS) FAIL("GNI_SmsgInit: rc %d", (int)rc);
  return 0;
}

/* FMA: our pattern PUT into the peer's region, the peer's pattern GET back as a chain of two
 * GETs, and a fetch-and-add of its AMO word, checked. The peer is another user's process:
 * libugni sends these to the daemon, which may reach it. */
static int link_fma(struct link* l, gni_cq_handle_t cq) {
  gni_post_descriptor_t d;
  memset(&d, 0, sizeof d);
  d.type = GNI_POST_FMA_PUT;
  d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
  d.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
  d.local_addr = (uint64_t)l->scratch;
  d.remote_addr = l->peer.region + 2 * LEN;
  d.remote_mem_hndl = l->peer.region_mh;
  d.length = LEN;
  gni_return_t rc = GNI_PostFma(l->ep, &d);
  if (rc != GNI_RC_SUCCESS) FAIL("GNI_PostFma PUT: rc %d", (int)rc);
  if (wait_post(cq, &d)) return 1;
  /* The chain: [LEN, 1.5 LEN) by the first descriptor, [1.5 LEN, 2 LEN) by its element. */
  gni_ct_get_post_descriptor_t e;
  memset(&e, 0, sizeof e);
  e.ep_hndl = l->ep;
  e.length = LEN / 2;
  e.remote_addr = l->peer.region + LEN + LEN / 2;
  e.remote_mem_hndl = l->peer.region_mh;
  e.local_addr = (uint64_t)(l->scratch + 2 * LEN + LEN / 2);
  e.local_mem_hndl = l->scratch_mh;
  memset(&d, 0, sizeof d);
  d.type = GNI_POST_FMA_GET;
  d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
  d.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
  d.local_addr = (uint64_t)(l->scratch + 2 * LEN);
  d.local_mem_hndl = l->scratch_mh;
  d.remote_addr = l->peer.region + LEN;
  d.remote_mem_hndl = l->peer.region_mh;
  d.length = LEN / 2;
  d.next_descr = &e;
  if ((rc = GNI_CtPostFma(l->ep, &d)) != GNI_RC_SUCCESS) FAIL("GNI_CtPostFma GET: rc %d", (int)rc);
  if (wait_post(cq, &d)) return 1;
  for (uint32_t j = 0; j < LEN; ++j)
    if (l->scratch[2 * LEN + j] != pattern(l->peer.inst, 1000, j))
      FAIL("FMA GET from inst %u: byte %u wrong", l->peer.inst, j);
  memset(&d, 0, sizeof d);
  d.type = GNI_POST_AMO;
  d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
  d.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
  d.local_addr = (uint64_t)(l->scratch + 3 * LEN);
  d.local_mem_hndl = l->scratch_mh;
  d.remote_addr = l->peer.region + 3 * LEN;
  d.remote_mem_hndl = l->peer.region_mh;
  d.length = 8;
  d.amo_cmd = GNI_FMA_ATOMIC_FADD;
  d.first_operand = 0x100u + l->mine.inst;
  if ((rc = GNI_PostFma(l->ep, &d)) != GNI_RC_SUCCESS) FAIL("GNI_PostFma AMO: rc %d", (int)rc);
  if (wait_post(cq, &d)) return 1;
  uint64_t fetched;
  memcpy(&fetched, l->scratch + 3 * LEN, sizeof fetched);
  if (fetched != AMO_INIT) FAIL("fetch-and-add at inst %u fetched %llu, want %u", l->peer.inst, (unsigned long long)fetched, AMO_INIT);
  return 0;
}

/* Our pattern PUT into the peer's region and the peer's pattern GET back, checked, by RDMA:
 * the one-copy path cannot reach another user's process, so libugni queues them for the
 * daemon's BTE engine. */
static int link_rma(struct link* l, gni_cq_handle_t cq) {
  gni_post_descriptor_t d;
  memset(&d, 0, sizeof d);
  d.type = GNI_POST_RDMA_PUT;
  d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
  d.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
  d.local_addr = (uint64_t)l->scratch;
  d.local_mem_hndl = l->scratch_mh;
  d.remote_addr = l->peer.region;
  d.remote_mem_hndl = l->peer.region_mh;
  d.length = LEN;
  gni_return_t rc = GNI_PostRdma(l->ep, &d);
  if (rc != GNI_RC_SUCCESS) FAIL("GNI_PostRdma PUT: rc %d", (int)rc);
  if (wait_post(cq, &d)) return 1;
  memset(&d, 0, sizeof d);
  d.type = GNI_POST_RDMA_GET;
  d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
  d.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
  d.local_addr = (uint64_t)(l->scratch + LEN);
  d.local_mem_hndl = l->scratch_mh;
  d.remote_addr = l->peer.region + LEN;
  d.remote_mem_hndl = l->peer.region_mh;
  d.length = LEN;
  if ((rc = GNI_PostRdma(l->ep, &d)) != GNI_RC_SUCCESS) FAIL("GNI_PostRdma GET: rc %d", (int)rc);
  if (wait_post(cq, &d)) return 1;
  for (uint32_t j = 0; j < LEN; ++j)
    if (l->scratch[LEN + j] != pattern(l->peer.inst, 1000, j)) FAIL("GET from inst %u: byte %u wrong", l->peer.inst, j);
  return 0;
}

/* What the peer PUT into our region (by RDMA and by FMA), and added to our AMO word. */
static int link_check_put(struct link* l) {
  for (uint32_t j = 0; j < LEN; ++j)
    if (l->region[j] != pattern(l->peer.inst, 2000, j)) FAIL("RDMA PUT by inst %u: byte %u wrong", l->peer.inst, j);
  for (uint32_t j = 0; j < LEN; ++j)
    if (l->region[2 * LEN + j] != pattern(l->peer.inst, 2000, j))
      FAIL("FMA PUT by inst %u: byte %u wrong", l->peer.inst, j);
  uint64_t word;
  memcpy(&word, l->region + 3 * LEN, sizeof word);
  if (word != AMO_INIT + 0x100u + l->peer.inst)
    FAIL("AMO word after inst %u's fetch-and-add: %llu, want %u", l->peer.inst, (unsigned long long)word,
         AMO_INIT + 0x100u + l->peer.inst);
  return 0;
}

static void link_close(struct link* l, gni_nic_handle_t nic) {
  GNI_EpDestroy(l->ep);
  GNI_MemDeregister(nic, &l->mbox_mh);
  GNI_MemDeregister(nic, &l->region_mh);
  GNI_MemDeregister(nic, &l->scratch_mh);
  free(l->mbox);
  free(l->region);
  free(l->scratch);
}

/* A CDM with the credential, and its two CQs. */
static int attach(uint32_t inst, uint8_t ptag, uint32_t cookie, gni_cdm_handle_t* cdm, gni_nic_handle_t* nic,
                  uint32_t* addr, gni_cq_handle_t* cq, gni_cq_handle_t* rcq) {
  gni_return_t rc = GNI_CdmCreate(inst, ptag, cookie, 0, cdm);
  if (rc == GNI_RC_SUCCESS) rc = GNI_CdmAttach(*cdm, 0, addr, nic);
  if (rc != GNI_RC_SUCCESS) FAIL("attach with the DRC credential (ptag %u): rc %d", ptag, (int)rc);
  if ((rc = GNI_CqCreate(*nic, 1024, 0, GNI_CQ_NOBLOCK, NULL, NULL, cq)) != GNI_RC_SUCCESS ||
      (rc = GNI_CqCreate(*nic, 1024, 0, GNI_CQ_NOBLOCK, NULL, NULL, rcq)) != GNI_RC_SUCCESS)
    FAIL("GNI_CqCreate: rc %d", (int)rc);
  return 0;
}

static int serve(int clients, uint32_t count) {
  me = "drc_pair serve";
  uint32_t cred = 0;
  int rc = drc_acquire(&cred, DRC_FLAGS_FLEX_CREDENTIAL);
  if (rc != DRC_SUCCESS) FAIL("drc_acquire: %s", drc_strerror(rc));
  if (put_u32("cred", cred)) return 1;
  /* The client job's id, from each of its ranks: one job. */
  uint32_t job = 0;
  for (int k = 0; k < clients; ++k) {
    char name[32];
    uint32_t j;
    snprintf(name, sizeof name, "job.%d", k);
    if (get_u32(name, &j)) return 1;
    if (j == 0 || (k > 0 && j != job)) FAIL("client rank %d says job %u (rank 0: %u)", k, j, job);
    job = j;
  }
  if (job == drc_get_wlm_id()) FAIL("the client job has this job's id %u: not a separate job", job);
  if ((rc = drc_grant(cred, job, DRC_FLAGS_TARGET_WLM)) != DRC_SUCCESS) FAIL("drc_grant to job %u: %s", job, drc_strerror(rc));
  if (put_u32("granted", job)) return 1;

  uint32_t cookie = 0;
  uint8_t ptag = 0;
  gni_return_t grc;
  if ((rc = cookie_of(cred, &cookie, &ptag, &grc)) != DRC_SUCCESS || grc != GNI_RC_SUCCESS)
    FAIL("the owner's drc_access %s, GNI_GetPtag rc %d", drc_strerror(rc), (int)grc);
  gni_cdm_handle_t cdm;
  gni_nic_handle_t nic;
  gni_cq_handle_t cq, rcq;
  uint32_t addr;
  if (attach(SERVE_INST, ptag, cookie, &cdm, &nic, &addr, &cq, &rcq)) return 1;
  static struct link l[MAX_CLIENTS];
  for (int k = 0; k < clients; ++k) {
    char name[32];
    if (link_open(&l[k], SERVE_INST, nic, cq, rcq)) return 1;
    l[k].mine.addr = addr;
    l[k].mine.ptag = ptag;
    l[k].mine.cookie = cookie;
    snprintf(name, sizeof name, "serve.%d", k);
    if (put_file(name, &l[k].mine, sizeof l[k].mine)) return 1;
  }
  for (int k = 0; k < clients; ++k) {
    char name[32];
    snprintf(name, sizeof name, "client.%d", k);
    if (get_file(name, &l[k].peer, sizeof l[k].peer) || link_join(&l[k])) return 1;
    if (l[k].peer.job != job) FAIL("client %d is in job %u, not %u", k, l[k].peer.job, job);
  }
  /* Ping-pong with each client in turn; then RMA both ways. */
  for (int k = 0; k < clients; ++k)
    for (uint32_t i = 0; i < count; ++i)
      if (send_msg(&l[k], i, rcq, cq) || recv_msg(&l[k], i, rcq, cq)) return 1;
  for (int k = 0; k < clients; ++k) {
    char mine[32], theirs[32];
    uint32_t v;
    snprintf(mine, sizeof mine, "serve-rma.%d", k);
    snprintf(theirs, sizeof theirs, "client-rma.%d", k);
    if (link_fma(&l[k], cq) || link_rma(&l[k], cq) || put_u32(mine, 1) || get_u32(theirs, &v) ||
        link_check_put(&l[k]))
      return 1;
  }
  printf("%s: %u SMSG messages each way, %d bytes FMA PUT and GET (chained), a fetch-and-add and %d bytes RDMA PUT "
         "and GET each way with %d clients of job %u verified\n",
         me, count, LEN, LEN, clients, job);
  fflush(stdout);

  /* The grant stays until the test has tried the credential as a user it was not granted to. */
  uint32_t v;
  if (get_u32("probed", &v)) return 1;
  if ((rc = drc_revoke(cred, job, DRC_FLAGS_TARGET_WLM)) != DRC_SUCCESS) FAIL("drc_revoke: %s", drc_strerror(rc));
  if (put_u32("revoked", 1)) return 1;
  /* Each client's CDM, attached before the revoke, still sends. */
  for (int k = 0; k < clients; ++k)
    if (recv_msg(&l[k], count, rcq, cq)) return 1;
  if ((rc = drc_release(cred, 0)) != DRC_SUCCESS) FAIL("drc_release: %s", drc_strerror(rc));
  if (put_u32("released", 1)) return 1;
  for (int k = 0; k < clients; ++k) {
    char name[32];
    snprintf(name, sizeof name, "final.%d", k);
    if (get_u32(name, &v)) return 1;
  }
  for (int k = 0; k < clients; ++k) link_close(&l[k], nic);
  GNI_CqDestroy(cq);
  GNI_CqDestroy(rcq);
  GNI_CdmDestroy(cdm);
  printf("%s: ok\n", me);
  return 0;
}

static int client(uint32_t count) {
  const char* r = getenv("PMI_RANK");
  if (!r) r = getenv("SLURM_PROCID"); /* a plain srun step, without a PMI plugin */
  int rank = r ? atoi(r) : 0;
  static char name_buf[64];
  snprintf(name_buf, sizeof name_buf, "drc_pair client %d", rank);
  me = name_buf;
  if (rank < 0 || rank >= MAX_CLIENTS) FAIL("rank %d: at most %d clients", rank, MAX_CLIENTS);
  uint32_t job = drc_get_wlm_id(), cred, v;
  if (job == 0) FAIL("not in a job (drc_get_wlm_id 0)");
  if (get_u32("cred", &cred)) return 1;
  uint32_t cookie = 0;
  uint8_t ptag = 0;
  gni_return_t grc;
  int rc = cookie_of(cred, &cookie, &ptag, &grc);
  if (rc != -DRC_EPERM) FAIL("drc_access before the grant: %s, want DRC_EPERM", drc_strerror(rc));
  char name[32];
  snprintf(name, sizeof name, "job.%d", rank);
  if (put_u32(name, job) || get_u32("granted", &v)) return 1;
  if (v != job) FAIL("the service granted job %u, not this job %u", v, job);
  if ((rc = cookie_of(cred, &cookie, &ptag, &grc)) != DRC_SUCCESS || grc != GNI_RC_SUCCESS)
    FAIL("granted, drc_access %s, GNI_GetPtag rc %d", drc_strerror(rc), (int)grc);

  gni_cdm_handle_t cdm;
  gni_nic_handle_t nic;
  gni_cq_handle_t cq, rcq;
  uint32_t addr;
  if (attach(CLIENT_INST + (uint32_t)rank, ptag, cookie, &cdm, &nic, &addr, &cq, &rcq)) return 1;
  struct link l;
  memset(&l, 0, sizeof l);
  if (link_open(&l, CLIENT_INST + (uint32_t)rank, nic, cq, rcq)) return 1;
  l.mine.addr = addr;
  l.mine.ptag = ptag;
  l.mine.cookie = cookie;
  l.mine.job = job;
  l.mine.uid = (uint32_t)getuid();
  snprintf(name, sizeof name, "client.%d", rank);
  if (put_file(name, &l.mine, sizeof l.mine)) return 1;
  snprintf(name, sizeof name, "serve.%d", rank);
  if (get_file(name, &l.peer, sizeof l.peer) || link_join(&l)) return 1;
  if (l.peer.ptag != ptag || l.peer.cookie != cookie) FAIL("the service attached with another credential");
  if (l.peer.addr == addr) fprintf(stderr, "%s: on the service's node %u\n", me, addr);

  for (uint32_t i = 0; i < count; ++i)
    if (recv_msg(&l, i, rcq, cq) || send_msg(&l, i, rcq, cq)) return 1;
  char theirs[32];
  snprintf(name, sizeof name, "client-rma.%d", rank);
  snprintf(theirs, sizeof theirs, "serve-rma.%d", rank);
  if (link_fma(&l, cq) || link_rma(&l, cq) || put_u32(name, 1) || get_u32(theirs, &v) || link_check_put(&l)) return 1;
  printf("%s: NIC %u inst %u (uid %u, job %u): %u SMSG messages each way, %d bytes FMA PUT and GET (chained), a "
         "fetch-and-add and %d bytes RDMA PUT and GET each way with NIC %u inst %u verified\n",
         me, addr, l.mine.inst, l.mine.uid, job, count, LEN, LEN, l.peer.addr, l.peer.inst);
  fflush(stdout);

  /* Revoked: no new access or attach; the CDM attached before still sends. */
  if (get_u32("revoked", &v)) return 1;
  uint32_t c2;
  uint8_t p2;
  if ((rc = cookie_of(cred, &c2, &p2, &grc)) != -DRC_EPERM) FAIL("revoked, drc_access: %s, want DRC_EPERM", drc_strerror(rc));
  if ((grc = try_attach(CLIENT_INST + 100 + (uint32_t)rank, ptag, cookie)) != GNI_RC_PERMISSION_ERROR)
    FAIL("revoked, a new attach: rc %d, want GNI_RC_PERMISSION_ERROR", (int)grc);
  if (send_msg(&l, count, rcq, cq)) return 1;
  /* Released: the credential is gone. */
  if (get_u32("released", &v)) return 1;
  if ((rc = cookie_of(cred, &c2, &p2, &grc)) != -DRC_CRED_NOT_FOUND)
    FAIL("released, drc_access: %s, want DRC_CRED_NOT_FOUND", drc_strerror(rc));
  if ((grc = try_attach(CLIENT_INST + 100 + (uint32_t)rank, ptag, cookie)) != GNI_RC_PERMISSION_ERROR)
    FAIL("released, a new attach: rc %d, want GNI_RC_PERMISSION_ERROR", (int)grc);
  link_close(&l, nic);
  GNI_CqDestroy(cq);
  GNI_CqDestroy(rcq);
  GNI_CdmDestroy(cdm);
  snprintf(name, sizeof name, "final.%d", rank);
  if (put_u32(name, 1)) return 1;
  printf("%s: ok\n", me);
  return 0;
}

/* Neither owner nor granted, and knowing the credential's id, cookie and ptag. */
static int probe(void) {
  me = "drc_pair probe";
  uint32_t cred;
  struct side s;
  if (get_u32("cred", &cred) || get_file("serve.0", &s, sizeof s)) return 1;
  drc_info_handle_t info = NULL;
  int rc = drc_access(cred, 0, &info);
  if (rc != -DRC_EPERM) FAIL("drc_access: %s, want DRC_EPERM", drc_strerror(rc));
  uint8_t ptag = 0;
  gni_return_t grc = GNI_GetPtag(0, s.cookie, &ptag);
  if (grc != GNI_RC_NO_MATCH) FAIL("GNI_GetPtag of the cookie: rc %d, want GNI_RC_NO_MATCH", (int)grc);
  if ((grc = try_attach(999, (uint8_t)s.ptag, s.cookie)) != GNI_RC_PERMISSION_ERROR)
    FAIL("attach with the cookie and ptag: rc %d, want GNI_RC_PERMISSION_ERROR", (int)grc);
  if ((rc = drc_grant(cred, (uint32_t)getuid(), DRC_FLAGS_TARGET_UID)) != -DRC_EPERM)
    FAIL("granting itself: %s, want DRC_EPERM", drc_strerror(rc));
  if ((rc = drc_release(cred, 0)) != -DRC_EPERM) FAIL("releasing: %s, want DRC_EPERM", drc_strerror(rc));
  printf("%s: uid %u refused\n", me, (unsigned)getuid());
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 3) dir = argv[2];
  if (argc == 5 && strcmp(argv[1], "serve") == 0) {
    int clients = atoi(argv[3]);
    long count = atol(argv[4]);
    if (clients < 1 || clients > MAX_CLIENTS || count < 1 || count > 100000) {
      fprintf(stderr, "drc_pair serve: 1 to %d clients, 1 to 100000 messages\n", MAX_CLIENTS);
      return 2;
    }
    return serve(clients, (uint32_t)count);
  }
  if (argc == 4 && strcmp(argv[1], "client") == 0) {
    long count = atol(argv[3]);
    if (count < 1 || count > 100000) {
      fprintf(stderr, "drc_pair client: 1 to 100000 messages\n");
      return 2;
    }
    return client((uint32_t)count);
  }
  if (argc == 3 && strcmp(argv[1], "probe") == 0) return probe();
  fprintf(stderr, "usage: drc_pair serve DIR CLIENTS COUNT | drc_pair client DIR COUNT | drc_pair probe DIR\n");
  return 2;
}
