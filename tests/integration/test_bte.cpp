// Integration tests of GNI_PostRdma against real daemons: PUT/GET of 4 B .. 64 MiB executed
// by the daemons' BTE engines between processes of one node and of two nodes, events and
// descriptor identity, alignment and protection errors, dead targets and initiators,
// many outstanding posts, a full submission ring, per-EP ordering, channel configuration.
#include <doctest/doctest.h>

#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "harness.h"
#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/mem_handle.h"

using namespace harness;
namespace cqe = nicemu::abi::cqe;
namespace mdh = nicemu::abi::mdh;

namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kBig = 64 * kMiB;  // the largest transfer
constexpr uint64_t kGuard = 4096;

uint64_t now_ms() {
  return uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

// Anonymous memory that is not in any shared region: the common case for clients.
char* big_buffer(uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHILD_CHECK(p != MAP_FAILED);
  return static_cast<char*>(p);
}

// Byte i of the pattern `seed`: position-dependent, so a misplaced chunk shows.
inline uint8_t pattern(uint64_t i, uint32_t seed) { return uint8_t(((i * 0x9E3779B1u) >> 13) ^ i ^ seed); }
void fill(char* p, uint64_t n, uint32_t seed) {
  for (uint64_t i = 0; i < n; ++i) p[i] = char(pattern(i, seed));
}
bool matches(const char* p, uint64_t n, uint32_t seed) {
  for (uint64_t i = 0; i < n; ++i)
    if (uint8_t(p[i]) != pattern(i, seed)) return false;
  return true;
}
bool all(const char* p, uint64_t n, char c) {
  for (uint64_t i = 0; i < n; ++i)
    if (p[i] != c) return false;
  return true;
}

// An attached CDM with room for many events: cq (EP default), cq2 (override), rcq (remote).
struct Node {
  gni_cdm_handle_t cdm = nullptr;
  gni_nic_handle_t nic = nullptr;
  gni_cq_handle_t cq = nullptr, cq2 = nullptr, rcq = nullptr;
  uint32_t addr = 0, inst = 0;

  void open(uint32_t inst_id, Cred c, uint32_t modes = GNI_CDM_MODE_ERR_NO_KILL | GNI_CDM_MODE_DUAL_EVENTS) {
    inst = inst_id;
    CHILD_CHECK(GNI_CdmCreate(inst_id, c.ptag, c.cookie, modes, &cdm) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CdmAttach(cdm, 0, &addr, &nic) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CqCreate(nic, 4096, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &cq) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CqCreate(nic, 64, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &cq2) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CqCreate(nic, 1024, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &rcq) == GNI_RC_SUCCESS);
  }
  gni_mem_handle_t reg(const void* p, uint64_t n, gni_cq_handle_t dst = nullptr, uint32_t flags = 0) {
    gni_mem_handle_t h{};
    h = mem_register(nic, uint64_t(p), n, dst, flags);
    return h;
  }
  gni_ep_handle_t ep(uint32_t to_addr, uint32_t to_inst) {
    gni_ep_handle_t e = bound_ep(nic, cq, to_addr, to_inst);
    return e;
  }
};

struct Info {
  uint32_t addr, inst;
  uint64_t buf;               // registered [buf, buf + len), remote events to rcq
  uint64_t len;
  gni_mem_handle_t buf_h;
  uint64_t ro;                // read-only registration
  gni_mem_handle_t ro_h;
  uint64_t dead;              // deregistered
  gni_mem_handle_t dead_h;
};

// What the initiator asks the target to check in its own memory.
struct Verify {
  uint32_t op;                // 1 = pattern at [off, off + len), guards intact; 0 = done
  uint32_t seed;
  uint64_t off, len;
};

// One completion from `cq`: it must belong to `expect`; returns its status (0 = ok).
uint64_t complete_one(gni_cq_handle_t cq, gni_post_descriptor_t* expect, uint64_t ms = 10000) {
  const uint64_t status = wait_completion(cq, *expect, uint32_t(ms));
  CHILD_CHECK(expect->status == status);
  return status;
}

uint64_t post_and_complete(Node& n, gni_ep_handle_t ep, gni_post_descriptor_t& d) {
  CHILD_CHECK(GNI_PostRdma(ep, &d) == GNI_RC_SUCCESS);
  return complete_one(n.cq, &d);
}

// Target of the data and protection tests: a 64 MiB registration between guard pages
// (remote events to rcq), a read-only and a deregistered one. Checks what it is asked to.
int target_process(Oob& oob, int side, Cred c, uint32_t inst) {
  Node n;
  n.open(inst, c);
  char* mem = big_buffer(kBig + 2 * kGuard);
  std::memset(mem, 't', kBig + 2 * kGuard);
  char* buf = mem + kGuard;
  static char ro[8192], dead[8192];
  std::memset(ro, 'o', sizeof ro);
  std::memset(dead, 'd', sizeof dead);
  Info info{};
  info.addr = n.addr;
  info.inst = inst;
  info.buf = uint64_t(buf);
  info.len = kBig;
  info.buf_h = n.reg(buf, kBig, n.rcq);
  info.ro = uint64_t(ro);
  info.ro_h = n.reg(ro, sizeof ro, nullptr, GNI_MEM_READ_ONLY);
  info.dead = uint64_t(dead);
  info.dead_h = n.reg(dead, sizeof dead);
  CHILD_CHECK(GNI_MemDeregister(n.nic, &info.dead_h) == GNI_RC_SUCCESS);
  oob.send(side, info);
  for (;;) {
    auto v = oob.recv<Verify>(side);
    if (v.op == 0) break;
    bool ok = matches(buf + v.off, v.len, v.seed) && all(mem, kGuard, 't') && all(buf + kBig, kGuard, 't') &&
              all(ro, sizeof ro, 'o') && all(dead, sizeof dead, 'd');
    oob.send(side, int(ok));
  }
  // Remote events: the ids the initiator announces, in posting order.
  int expected = oob.recv<int>(side);
  for (int i = 0; i < expected; ++i) {
    gni_cq_entry_t e;
    CHILD_CHECK(GNI_CqWaitEvent(n.rcq, 5000, &e) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_POST);
    uint32_t want = oob.recv<uint32_t>(side);
    CHILD_CHECK(GNI_CQ_GET_REM_INST_ID(e) == want);
  }
  gni_cq_entry_t e;
  CHILD_CHECK(GNI_CqGetEvent(n.rcq, &e) == GNI_RC_NOT_DONE);  // nothing for failed posts
  oob.send(side, 1);
  return 0;
}

bool verify(Oob& oob, int side, uint64_t off, uint64_t len, uint32_t seed) {
  oob.send(side, Verify{1, seed, off, len});
  return oob.recv<int>(side) == 1;
}

// PUT and GET of every size class, data checked on both sides.
int data_initiator(Oob& oob, int side, Cred c, uint32_t inst) {
  Node n;
  n.open(inst, c);
  Info t = oob.recv<Info>(side);
  gni_ep_handle_t ep = n.ep(t.addr, t.inst);
  char* src = big_buffer(kBig + 64);
  char* back = big_buffer(kBig + 64);
  gni_mem_handle_t src_h = n.reg(src, kBig + 64);
  gni_mem_handle_t back_h = n.reg(back, kBig + 64);
  uint32_t seed = 1;
  for (uint64_t len : std::initializer_list<uint64_t>{4, 8, 64, 1020, 4096, 65540, kMiB, 4 * kMiB + 12, 16 * kMiB, kBig}) {
    ++seed;
    const uint64_t off = len == kBig ? 0 : 4;  // 4-byte aligned remote offset: GET may read it back
    fill(src, len, seed);
    gni_post_descriptor_t d = make_desc(GNI_POST_RDMA_PUT, uint64_t(src), src_h, t.buf + off, t.buf_h, len);
    CHILD_CHECK(post_and_complete(n, ep, d) == 0);
    CHILD_CHECK(verify(oob, side, off, len, seed));
    std::memset(back, 0, len + 8);
    gni_post_descriptor_t g = make_desc(GNI_POST_RDMA_GET, uint64_t(back), back_h, t.buf + off, t.buf_h, len);
    CHILD_CHECK(post_and_complete(n, ep, g) == 0);
    CHILD_CHECK(std::memcmp(back, src, len) == 0);
    CHILD_CHECK(all(back + len, 8, 0));
  }
  // PUT has no alignment rule: odd source, odd target, odd length.
  fill(src + 1, 13, 99);
  gni_post_descriptor_t d = make_desc(GNI_POST_RDMA_PUT, uint64_t(src + 1), src_h, t.buf + 3, t.buf_h, 13);
  CHILD_CHECK(post_and_complete(n, ep, d) == 0);
  CHILD_CHECK(verify(oob, side, 3, 13, 99));
  // On Aries the GET's local address may be unaligned.
  std::memset(back, 0, 64);
  gni_post_descriptor_t g = make_desc(GNI_POST_RDMA_GET, uint64_t(back + 1), back_h, t.buf, t.buf_h, 16);
  CHILD_CHECK(post_and_complete(n, ep, g) == 0);
  CHILD_CHECK(back[0] == 0 && back[17] == 0 && std::memcmp(back + 4, src + 1, 13) == 0);
  oob.send(side, Verify{0, 0, 0, 0});
  oob.send(side, 0);  // no remote events expected
  return oob.recv<int>(side) == 1 ? 0 : 1;
}

bool direct_mode() {
  const char* v = std::getenv("NICEMU_RDMA_DIRECT");
  return v && std::strcmp(v, "1") == 0;
}

void run_pair(int nodes, std::function<int(Oob&, int, Cred, uint32_t)> initiator) {
  Cluster cl(nodes);
  Cred c = cl.credential();
  Oob oob;
  pid_t t = cl.spawn(nodes - 1, [&] { return target_process(oob, 1, c, 7); });
  pid_t i = cl.spawn(0, [&] { return initiator(oob, 0, c, 3); });
  CHECK(cl.wait(i, 60) == 0);
  CHECK(cl.wait(t, 60) == 0);
  if (cl.fabric() && nodes > 1) {
    // Across hosts (NICEMU_TEST_FABRIC=1) the daemons carry every post, whatever the mode.
    auto r = cl.status(0)["remote_ops"]["initiator"];
    CHECK(r["posts"].get<uint64_t>() > 0);
    CHECK(r["dropped"].get<uint64_t>() == 0);
    CHECK(r["outstanding"].get<uint64_t>() == 0);
    return;
  }
  auto st = cl.status(0)["bte"];
  // With NICEMU_RDMA_DIRECT=1 (the bte-direct run) the initiator moves the data itself,
  // one post at a time, so the daemon's engine must not have seen a request.
  if (direct_mode())
    CHECK(st["requests"].get<uint64_t>() == 0);
  else
    CHECK(st["requests"].get<uint64_t>() > 0);
  // Small posts of an EP with nothing outstanding run in the engine's dispatcher.
  if (!direct_mode()) CHECK(st["inline"].get<uint64_t>() > 0);
  CHECK(st["dropped"].get<uint64_t>() == 0);
}

// Events, event ids, the src_cq_hndl override, DUAL_EVENTS, descriptor identity.
int events_initiator(Oob& oob, int side, Cred c, uint32_t inst) {
  Node n;
  n.open(inst, c);
  Info t = oob.recv<Info>(side);
  gni_ep_handle_t ep = n.ep(t.addr, t.inst);
  static char src[8192], back[8192];
  gni_mem_handle_t src_h = n.reg(src, sizeof src);
  gni_mem_handle_t back_h = n.reg(back, sizeof back);
  std::vector<uint32_t> remote_ids;
  fill(src, sizeof src, 5);

  // GLOBAL + REMOTE: local id from EpSetEventData, the target sees the remote id.
  CHILD_CHECK(GNI_EpSetEventData(ep, 111, 222) == GNI_RC_SUCCESS);
  gni_post_descriptor_t d = make_desc(GNI_POST_RDMA_PUT, uint64_t(src), src_h, t.buf, t.buf_h, 4096,
                                 GNI_CQMODE_GLOBAL_EVENT | GNI_CQMODE_REMOTE_EVENT);
  d.post_id = 0xABCDEF;
  d.first_operand = 0x1111;  // clients stash their own data in unused fields
  d.cqwrite_value = 0x2222;
  CHILD_CHECK(GNI_PostRdma(ep, &d) == GNI_RC_SUCCESS);
  // Event data is captured at post time: changing it now affects only later posts.
  CHILD_CHECK(GNI_EpSetEventData(ep, 333, 444) == GNI_RC_SUCCESS);
  remote_ids.push_back(222);
  gni_cq_entry_t e;
  CHILD_CHECK(GNI_CqWaitEvent(n.cq, 5000, &e) == GNI_RC_SUCCESS);
  CHILD_CHECK(GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_POST && GNI_CQ_GET_INST_ID(e) == 111);
  CHILD_CHECK(GNI_CQ_GET_SOURCE(e) != 0);
  gni_post_descriptor_t* out = nullptr;
  CHILD_CHECK(GNI_GetCompleted(n.cq, e, &out) == GNI_RC_SUCCESS && out == &d);
  CHILD_CHECK(d.cq_mode_complete == GNI_CQMODE_GLOBAL_EVENT && d.status == 0);
  CHILD_CHECK(d.post_id == 0xABCDEF && d.first_operand == 0x1111 && d.cqwrite_value == 0x2222);
  CHILD_CHECK(GNI_GetCompleted(n.cq, e, &out) == GNI_RC_DESCRIPTOR_ERROR && out == nullptr);
  CHILD_CHECK(verify(oob, side, 0, 4096, 5));

  // DUAL_EVENTS: a LOCAL and a GLOBAL event for one descriptor, returned twice.
  gni_post_descriptor_t dual = make_desc(GNI_POST_RDMA_GET, uint64_t(back), back_h, t.buf, t.buf_h, 4096,
                                    GNI_CQMODE_DUAL_EVENTS);
  CHILD_CHECK(GNI_PostRdma(ep, &dual) == GNI_RC_SUCCESS);
  uint16_t seen = 0;
  for (int k = 0; k < 2; ++k) {
    CHILD_CHECK(GNI_CqWaitEvent(n.cq, 5000, &e) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CQ_GET_INST_ID(e) == 333);
    seen |= uint16_t(GNI_CQ_GET_INFO(e));
    CHILD_CHECK(GNI_GetCompleted(n.cq, e, &out) == GNI_RC_SUCCESS && out == &dual);
  }
  CHILD_CHECK(seen == (cqe::kInfoLocal | cqe::kInfoGlobal));
  CHILD_CHECK(dual.cq_mode_complete == GNI_CQMODE_DUAL_EVENTS);
  CHILD_CHECK(GNI_GetCompleted(n.cq, e, &out) == GNI_RC_DESCRIPTOR_ERROR);
  CHILD_CHECK(std::memcmp(back, src, 4096) == 0);

  // The descriptor's src_cq_hndl takes its events; the EP's CQ stays empty.
  gni_post_descriptor_t ov = make_desc(GNI_POST_RDMA_PUT, uint64_t(src), src_h, t.buf + 4096, t.buf_h, 100,
                                  GNI_CQMODE_LOCAL_EVENT | GNI_CQMODE_REMOTE_EVENT);
  ov.src_cq_hndl = n.cq2;
  CHILD_CHECK(GNI_PostRdma(ep, &ov) == GNI_RC_SUCCESS);
  remote_ids.push_back(444);
  CHILD_CHECK(complete_one(n.cq2, &ov) == 0);
  CHILD_CHECK(ov.cq_mode_complete == GNI_CQMODE_LOCAL_EVENT);
  CHILD_CHECK(GNI_CqGetEvent(n.cq, &e) == GNI_RC_NOT_DONE);
  CHILD_CHECK(ov.src_cq_hndl == n.cq2);

  // A silent post is never returned; posts of one EP complete in order, so the next
  // post's completion covers it. GET with REMOTE_EVENT notifies the target too.
  fill(src, 4096, 6);
  gni_post_descriptor_t silent = make_desc(GNI_POST_RDMA_PUT, uint64_t(src), src_h, t.buf, t.buf_h, 4096, 0);
  CHILD_CHECK(GNI_PostRdma(ep, &silent) == GNI_RC_SUCCESS);
  gni_post_descriptor_t after = make_desc(GNI_POST_RDMA_GET, uint64_t(back), back_h, t.buf, t.buf_h, 4096,
                                     GNI_CQMODE_GLOBAL_EVENT | GNI_CQMODE_REMOTE_EVENT);
  CHILD_CHECK(GNI_PostRdma(ep, &after) == GNI_RC_SUCCESS);
  remote_ids.push_back(444);
  CHILD_CHECK(complete_one(n.cq, &after) == 0);
  CHILD_CHECK(std::memcmp(back, src, 4096) == 0);
  CHILD_CHECK(GNI_CqGetEvent(n.cq, &e) == GNI_RC_NOT_DONE);
  CHILD_CHECK(verify(oob, side, 0, 4096, 6));

  // Posts of one EP are applied in order even when an earlier one is large (and shared
  // between channels): a small fenced PUT after a 16 MiB one wins where they overlap.
  char* big = big_buffer(16 * kMiB + 64);
  gni_mem_handle_t big_h = n.reg(big, 16 * kMiB + 64);
  fill(big, 16 * kMiB, 20);
  fill(big + 16 * kMiB, 64, 21);
  gni_post_descriptor_t large = make_desc(GNI_POST_RDMA_PUT, uint64_t(big), big_h, t.buf, t.buf_h, 16 * kMiB, 0);
  gni_post_descriptor_t tail = make_desc(GNI_POST_RDMA_PUT, uint64_t(big + 16 * kMiB), big_h, t.buf + 16 * kMiB - 64,
                                    t.buf_h, 64);
  tail.rdma_mode = GNI_RDMAMODE_FENCE;
  CHILD_CHECK(GNI_PostRdma(ep, &large) == GNI_RC_SUCCESS);
  CHILD_CHECK(GNI_PostRdma(ep, &tail) == GNI_RC_SUCCESS);
  CHILD_CHECK(complete_one(n.cq, &tail) == 0);
  CHILD_CHECK(verify(oob, side, 16 * kMiB - 64, 64, 21));
  CHILD_CHECK(verify(oob, side, 0, 16 * kMiB - 64, 20));

  oob.send(side, Verify{0, 0, 0, 0});
  oob.send(side, int(remote_ids.size()));
  for (uint32_t id : remote_ids) oob.send(side, id);
  return oob.recv<int>(side) == 1 ? 0 : 1;
}

// Refused at post time with the API's codes, or completed with an error CQE and no write.
int protection_initiator(Oob& oob, int side, Cred c, uint32_t inst) {
  Node n;
  n.open(inst, c, GNI_CDM_MODE_ERR_NO_KILL);  // no DUAL_EVENTS
  Info t = oob.recv<Info>(side);
  gni_ep_handle_t ep = n.ep(t.addr, t.inst);
  char* src = big_buffer(2 * kMiB);
  std::memset(src, 'X', 2 * kMiB);
  gni_mem_handle_t src_h = n.reg(src, 2 * kMiB);
  static char ro_local[4096];
  gni_mem_handle_t ro_local_h = n.reg(ro_local, sizeof ro_local, nullptr, GNI_MEM_READ_ONLY);
  // The target's rw registration holds pattern 8 throughout.
  fill(src, kMiB, 8);
  {
    gni_post_descriptor_t d = make_desc(GNI_POST_RDMA_PUT, uint64_t(src), src_h, t.buf, t.buf_h, kMiB);
    CHILD_CHECK(post_and_complete(n, ep, d) == 0);
    std::memset(src, 'X', kMiB);
  }
  // --- refused at post time
  gni_post_descriptor_t d = make_desc(GNI_POST_RDMA_GET, uint64_t(src), src_h, t.buf + 2, t.buf_h, 8);
  CHILD_CHECK(GNI_PostRdma(ep, &d) == GNI_RC_ALIGNMENT_ERROR);  // remote address
  d.remote_addr = t.buf;
  d.length = 6;
  CHILD_CHECK(GNI_PostRdma(ep, &d) == GNI_RC_ALIGNMENT_ERROR);  // length
  d.length = 0;
  CHILD_CHECK(GNI_PostRdma(ep, &d) == GNI_RC_INVALID_PARAM);
  d.length = 8;
  d.cq_mode = GNI_CQMODE_DUAL_EVENTS;
  CHILD_CHECK(GNI_PostRdma(ep, &d) == GNI_RC_INVALID_PARAM);  // needs GNI_CDM_MODE_DUAL_EVENTS
  d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
  d.type = GNI_POST_FMA_PUT;
  CHILD_CHECK(GNI_PostRdma(ep, &d) == GNI_RC_INVALID_PARAM);  // not an RDMA type
  d.type = GNI_POST_RDMA_GET;
  d.local_mem_hndl = gni_mem_handle_t{};
  CHILD_CHECK(GNI_PostRdma(ep, &d) == GNI_RC_INVALID_PARAM);  // no local registration
  d.local_mem_hndl = src_h;
  d.local_addr = uint64_t(src) + 2 * kMiB - 4;
  CHILD_CHECK(GNI_PostRdma(ep, &d) == GNI_RC_INVALID_PARAM);  // beyond the local registration
  d.local_addr = uint64_t(ro_local);
  d.local_mem_hndl = ro_local_h;
  CHILD_CHECK(GNI_PostRdma(ep, &d) == GNI_RC_PERMISSION_ERROR);  // GET into read-only memory
  d.local_addr = uint64_t(src);
  d.local_mem_hndl = src_h;
  d.src_cq_hndl = reinterpret_cast<gni_cq_handle_t>(&d);
  CHILD_CHECK(GNI_PostRdma(ep, &d) == GNI_RC_INVALID_PARAM);  // not a CQ
  d.src_cq_hndl = nullptr;
  gni_post_descriptor_t p = make_desc(GNI_POST_RDMA_PUT, uint64_t(src), src_h, t.ro, t.ro_h, 8);
  CHILD_CHECK(GNI_PostRdma(ep, &p) == GNI_RC_PERMISSION_ERROR);  // the handle says read-only
  gni_ep_handle_t unbound;
  CHILD_CHECK(GNI_EpCreate(n.nic, n.cq, &unbound) == GNI_RC_SUCCESS);
  CHILD_CHECK(GNI_PostRdma(unbound, &p) == GNI_RC_INVALID_PARAM);
  CHILD_CHECK(GNI_PostRdma(nullptr, &p) == GNI_RC_INVALID_PARAM);
  CHILD_CHECK(GNI_PostRdma(ep, nullptr) == GNI_RC_INVALID_PARAM);

  // --- error completions at the target, nothing written; REMOTE_EVENT asked but not sent
  gni_mem_handle_t forged = t.ro_h;  // a handle that lies about the read-only flag
  {
    auto f = mdh::decode(forged.qword1, forged.qword2);
    CHILD_CHECK(f && (f->flags & mdh::kFlagReadOnly));
    f->flags &= ~mdh::kFlagReadOnly;
    mdh::encode(*f, forged.qword1, forged.qword2);
  }
  gni_mem_handle_t bad_crc = t.buf_h;
  bad_crc.qword1 ^= 0x10;
  struct Bad {
    gni_post_type_t type;
    uint64_t remote;
    gni_mem_handle_t h;
    uint64_t len;
    uint64_t want;
  } bad[] = {
      {GNI_POST_RDMA_PUT, t.ro, forged, 8, cqe::kErrReadOnly},
      {GNI_POST_RDMA_PUT, t.buf + t.len - kMiB + 4, t.buf_h, kMiB, cqe::kErrBounds},  // crosses the end
      {GNI_POST_RDMA_PUT, t.buf - 4, t.buf_h, 8, cqe::kErrBounds},                    // before the start
      {GNI_POST_RDMA_PUT, t.dead, t.dead_h, 8, cqe::kErrProtection},                  // deregistered
      {GNI_POST_RDMA_PUT, t.buf, bad_crc, 8, cqe::kErrProtection},                    // forged handle
      {GNI_POST_RDMA_GET, t.buf + t.len - 4, t.buf_h, 8, cqe::kErrBounds},
      {GNI_POST_RDMA_GET, t.dead, t.dead_h, 8, cqe::kErrProtection},
  };
  for (auto& b : bad) {
    gni_post_descriptor_t x =
        make_desc(b.type, uint64_t(src), src_h, b.remote, b.h, b.len, GNI_CQMODE_GLOBAL_EVENT | GNI_CQMODE_REMOTE_EVENT);
    CHILD_CHECK(GNI_PostRdma(ep, &x) == GNI_RC_SUCCESS);
    uint64_t st = complete_one(n.cq, &x);
    if (st != b.want) std::fprintf(stderr, "status %llu, want %llu\n", (unsigned long long)st, (unsigned long long)b.want);
    CHILD_CHECK(st == b.want);
    uint32_t rec = 1;
    gni_cq_entry_t fake = cqe::make(cqe::kSrcBte, 0, st, 0, 0, 0);
    CHILD_CHECK(GNI_CqErrorRecoverable(fake, &rec) == GNI_RC_SUCCESS && rec == 0);
  }
  CHILD_CHECK(all(src, 2 * kMiB, 'X'));  // failed GETs wrote nothing locally either
  // A GET from read-only memory is fine.
  gni_post_descriptor_t r = make_desc(GNI_POST_RDMA_GET, uint64_t(src), src_h, t.ro, t.ro_h, 64);
  CHILD_CHECK(post_and_complete(n, ep, r) == 0);
  CHILD_CHECK(all(src, 64, 'o'));
  CHILD_CHECK(verify(oob, side, 0, kMiB, 8));  // target memory unchanged
  oob.send(side, Verify{0, 0, 0, 0});
  oob.send(side, 0);
  return oob.recv<int>(side) == 1 ? 0 : 1;
}

}  // namespace

TEST_CASE("RDMA PUT/GET 4 B .. 64 MiB between processes of one node") { run_pair(1, data_initiator); }

TEST_CASE("RDMA PUT/GET 4 B .. 64 MiB between two emulated nodes") { run_pair(2, data_initiator); }

TEST_CASE("RDMA events: local/global/remote, event ids, src_cq_hndl, DUAL_EVENTS, descriptor identity") {
  run_pair(2, events_initiator);
}

TEST_CASE("RDMA protection: API error codes at post time, error completions and no write at the target") {
  run_pair(1, protection_initiator);
}

TEST_CASE("RDMA protection between two emulated nodes") { run_pair(2, protection_initiator); }

TEST_CASE("RDMA within one process and Gemini alignment") {
  Cluster cl(1, {"--device", "gemini"});
  Cred c = cl.credential();
  pid_t p = cl.spawn(0, [&] {
    Node n;
    n.open(1, c);
    gni_ep_handle_t ep = n.ep(n.addr, n.inst);  // to itself
    static char a[65536], b[65536];
    fill(a, sizeof a, 3);
    gni_mem_handle_t ah = n.reg(a, sizeof a), bh = n.reg(b, sizeof b, n.rcq);
    gni_post_descriptor_t d = make_desc(GNI_POST_RDMA_PUT, uint64_t(a), ah, uint64_t(b), bh, sizeof a,
                                   GNI_CQMODE_GLOBAL_EVENT | GNI_CQMODE_REMOTE_EVENT);
    CHILD_CHECK(post_and_complete(n, ep, d) == 0);
    CHILD_CHECK(std::memcmp(a, b, sizeof a) == 0);
    gni_cq_entry_t e;
    CHILD_CHECK(GNI_CqWaitEvent(n.rcq, 1000, &e) == GNI_RC_SUCCESS && GNI_CQ_GET_REM_INST_ID(e) == 1);
    gni_post_descriptor_t g = make_desc(GNI_POST_RDMA_GET, uint64_t(a + 2), ah, uint64_t(b), bh, 64);
    CHILD_CHECK(GNI_PostRdma(ep, &g) == GNI_RC_ALIGNMENT_ERROR);  // Gemini: local address too
    g.local_addr = uint64_t(a + 4);
    CHILD_CHECK(post_and_complete(n, ep, g) == 0);
    return 0;
  });
  CHECK(cl.wait(p) == 0);
}

TEST_CASE("RDMA: many outstanding posts, a full submission ring, per-EP order, one channel from the config file") {
  char cfg[] = "/tmp/nicemu-bte-cfg-XXXXXX";
  int fd = mkstemp(cfg);
  REQUIRE(fd >= 0);
  const char text[] = "bte_channels = 1\nbte_poll_us = 5\n";  // and a dispatcher that polls after work
  REQUIRE(write(fd, text, sizeof text - 1) == long(sizeof text - 1));
  close(fd);
  Cluster cl(1, {"--config", cfg});
  unlink(cfg);
  CHECK(cl.status(0)["bte"]["channels"].get<int>() == 1);
  CHECK(cl.status(0)["bte"]["poll_us"].get<int>() == 5);
  Cred c = cl.credential();
  Oob oob;
  pid_t t = cl.spawn(0, [&] {
    Node n;
    n.open(2, c);
    char* buf = big_buffer(kBig);
    std::memset(buf, 0, kBig);
    Info info{};
    info.addr = n.addr;
    info.inst = 2;
    info.buf = uint64_t(buf);
    info.len = kBig;
    info.buf_h = n.reg(buf, kBig);
    oob.send(1, info);
    (void)oob.recv<int>(1);
    // 256 posts of 16 KiB, each its own pattern, then the last bytes of the big region.
    for (uint32_t k = 0; k < 256; ++k) CHILD_CHECK(matches(buf + k * 16384, 16384, k));
    CHILD_CHECK(all(buf + kBig - 4096, 4096, 'B'));
    oob.send(1, 1);
    return 0;
  });
  pid_t i = cl.spawn(0, [&] {
    Node n;
    n.open(1, c);
    Info t = oob.recv<Info>(0);
    gni_ep_handle_t ep = n.ep(t.addr, t.inst);
    char* src = big_buffer(kBig);
    gni_mem_handle_t h = n.reg(src, kBig);
    for (uint32_t k = 0; k < 256; ++k) fill(src + k * 16384, 16384, k);
    // 256 outstanding posts on 4 EPs, all completing, each descriptor returned once.
    std::vector<gni_post_descriptor_t> ds(256);
    gni_ep_handle_t eps[4] = {ep, n.ep(t.addr, t.inst), n.ep(t.addr, t.inst), n.ep(t.addr, t.inst)};
    for (uint32_t k = 0; k < 256; ++k) {
      ds[k] = make_desc(GNI_POST_RDMA_PUT, uint64_t(src) + k * 16384, h, t.buf + k * 16384, t.buf_h, 16384);
      ds[k].post_id = k;
      CHILD_CHECK(GNI_PostRdma(eps[k % 4], &ds[k]) == GNI_RC_SUCCESS);
    }
    std::vector<int> seen(256, 0);
    for (uint32_t k = 0; k < 256; ++k) {
      gni_cq_entry_t e;
      CHILD_CHECK(GNI_CqWaitEvent(n.cq, 10000, &e) == GNI_RC_SUCCESS);
      gni_post_descriptor_t* out = nullptr;
      CHILD_CHECK(GNI_GetCompleted(n.cq, e, &out) == GNI_RC_SUCCESS);
      CHILD_CHECK(out >= &ds[0] && out <= &ds[255] && out->post_id == uint64_t(out - &ds[0]));
      CHILD_CHECK(++seen[out->post_id] == 1);
    }
    // One EP, one channel: a big PUT then thousands of small ones. The ring (1024) and the
    // engine's in-flight window (1024) fill while the big one runs: ERROR_RESOURCE, retry.
    // The big one ends with 'A' where the small ones write 'B': posting order decides.
    std::memset(src + kBig - 4096, 'A', 4096);
    gni_post_descriptor_t first = make_desc(GNI_POST_RDMA_PUT, uint64_t(src) + 4 * kMiB, h, t.buf + 4 * kMiB, t.buf_h,
                                       kBig - 4 * kMiB);
    CHILD_CHECK(GNI_PostRdma(ep, &first) == GNI_RC_SUCCESS);
    std::memset(src, 'B', 4096);  // the 256 posts above are done with this part
    std::vector<gni_post_descriptor_t> small(3000);
    int full = 0;
    for (size_t k = 0; k < small.size(); ++k) {
      small[k] = make_desc(GNI_POST_RDMA_PUT, uint64_t(src) + (k % 1024) * 4, h, t.buf + kBig - 4096 + (k % 1024) * 4,
                      t.buf_h, 4);
      gni_return_t rc;
      while ((rc = GNI_PostRdma(ep, &small[k])) == GNI_RC_ERROR_RESOURCE) {
        ++full;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      CHILD_CHECK(rc == GNI_RC_SUCCESS);
    }
    CHILD_CHECK(full > 0);
    CHILD_CHECK(complete_one(n.cq, &first) == 0);  // the first post completes first
    for (size_t k = 0; k < small.size(); ++k) CHILD_CHECK(complete_one(n.cq, &small[k]) == 0);
    oob.send(0, 1);
    return oob.recv<int>(0) == 1 ? 0 : 1;
  });
  CHECK(cl.wait(i, 60) == 0);
  CHECK(cl.wait(t, 60) == 0);
  auto st = cl.status(0)["bte"];
  CHECK(st["helped_chunks"].get<uint64_t>() == 0);  // one channel: nobody to help
  CHECK(st["errors"].get<uint64_t>() == 0);
}

TEST_CASE("RDMA: a target killed during large transfers gives error completions within a second") {
  Cluster cl(2, {"--bte-channels", "3"});
  CHECK(cl.status(0)["bte"]["channels"].get<int>() == 3);
  Cred c = cl.credential();
  Oob oob, ctlc;
  pid_t victim = cl.spawn(1, [&] {
    Node n;
    n.open(2, c);
    char* buf = big_buffer(kBig);
    std::memset(buf, 0, kBig);
    Info info{};
    info.addr = n.addr;
    info.inst = 2;
    info.buf = uint64_t(buf);
    info.len = kBig;
    info.buf_h = n.reg(buf, kBig);
    oob.send(1, info);
    pause();
    return 0;
  });
  pid_t survivor = cl.spawn(0, [&] {
    Node n;
    n.open(1, c);
    Info t = oob.recv<Info>(0);
    gni_ep_handle_t ep = n.ep(t.addr, t.inst);
    char* src = big_buffer(kBig);
    std::memset(src, 's', kBig);
    gni_mem_handle_t h = n.reg(src, kBig);
    // Gigabytes queued on one EP: far more than can finish before the kill.
    constexpr int kPosts = 48;
    std::vector<gni_post_descriptor_t> ds(kPosts);
    for (int k = 0; k < kPosts; ++k) {
      ds[k] = make_desc(k % 2 ? GNI_POST_RDMA_GET : GNI_POST_RDMA_PUT, uint64_t(src), h, t.buf, t.buf_h, kBig);
      CHILD_CHECK(GNI_PostRdma(ep, &ds[k]) == GNI_RC_SUCCESS);
    }
    CHILD_CHECK(complete_one(n.cq, &ds[0]) == 0);  // a transfer is running
    ctlc.send(0, 1);
    (void)ctlc.recv<int>(0);  // killed
    uint64_t t0 = now_ms();
    int failed = 0;
    for (int k = 1; k < kPosts; ++k) {
      uint64_t st = complete_one(n.cq, &ds[k]);
      if (st) {
        CHILD_CHECK(st == cqe::kErrPeerGone || st == cqe::kErrNoPeer);
        ++failed;
      } else {
        CHILD_CHECK(failed == 0);  // in order: nothing succeeds after the first failure
      }
    }
    uint64_t took = now_ms() - t0;
    if (took >= 1000) std::fprintf(stderr, "completions took %llu ms after the kill\n", (unsigned long long)took);
    CHILD_CHECK(took < 1000);
    CHILD_CHECK(failed > 0);
    ctlc.send(0, 2);
    (void)ctlc.recv<int>(0);
    return 0;
  });
  CHECK(ctlc.recv<int>(1) == 1);
  kill(victim, SIGKILL);
  CHECK(cl.wait(victim) == 128 + SIGKILL);
  ctlc.send(1, 1);
  CHECK(ctlc.recv<int>(1) == 2);
  ctlc.send(1, 3);
  CHECK(cl.wait(survivor) == 0);
  if (cl.fabric())
    CHECK(cl.status(0)["remote_ops"]["initiator"]["errors"].get<uint64_t>() > 0);
  else
    CHECK(cl.status(0)["bte"]["errors"].get<uint64_t>() > 0);
}

TEST_CASE_FIXTURE(OneNode, "RDMA: an initiator killed during large transfers is dropped; the engine serves others") {
  pid_t target = cl.spawn(0, [&] {
    Node n;
    n.open(2, c);
    char* buf = big_buffer(kBig);
    std::memset(buf, 'T', kBig);
    Info info{};
    info.addr = n.addr;
    info.inst = 2;
    info.buf = uint64_t(buf);
    info.len = kBig;
    info.buf_h = n.reg(buf, kBig);
    oob.send(1, info);
    oob.send(1, info);
    pause();
    return 0;
  });
  pid_t doomed = cl.spawn(0, [&] {
    Node n;
    n.open(1, c);
    Info ti = oob.recv<Info>(0);
    gni_ep_handle_t ep = n.ep(ti.addr, ti.inst);
    char* dst = big_buffer(kBig);
    gni_mem_handle_t h = n.reg(dst, kBig);
    std::vector<gni_post_descriptor_t> ds(32);
    for (auto& d : ds) {
      d = make_desc(GNI_POST_RDMA_GET, uint64_t(dst), h, ti.buf, ti.buf_h, kBig);
      CHILD_CHECK(GNI_PostRdma(ep, &d) == GNI_RC_SUCCESS);
    }
    CHILD_CHECK(complete_one(n.cq, &ds[0]) == 0);
    oob.send(0, 1);
    pause();
    return 0;
  });
  CHECK(oob.recv<int>(1) == 1);
  kill(doomed, SIGKILL);
  CHECK(cl.wait(doomed) == 128 + SIGKILL);
  uint64_t t0 = now_ms();
  uint64_t dropped = 0;
  while ((dropped = cl.status(0)["bte"]["dropped"].get<uint64_t>()) == 0 && now_ms() - t0 < 2000)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(dropped > 0);
  CHECK(now_ms() - t0 < 1000);
  // A new initiator gets its transfers done.
  pid_t next = cl.spawn(0, [&] {
    Node n;
    n.open(3, c);
    Info ti = oob.recv<Info>(0);
    gni_ep_handle_t ep = n.ep(ti.addr, ti.inst);
    static char small[4096];
    gni_mem_handle_t h = n.reg(small, sizeof small);
    gni_post_descriptor_t d = make_desc(GNI_POST_RDMA_GET, uint64_t(small), h, ti.buf, ti.buf_h, sizeof small);
    CHILD_CHECK(GNI_PostRdma(ep, &d) == GNI_RC_SUCCESS);
    CHILD_CHECK(complete_one(n.cq, &d, 5000) == 0);
    CHILD_CHECK(all(small, sizeof small, 'T'));
    return 0;
  });
  CHECK(cl.wait(next, 20) == 0);
  kill(target, SIGKILL);
  cl.wait(target);
}
