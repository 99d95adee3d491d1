// Memory handles built by the client itself, the way libfabric's gni provider does (issue
// 22): it sends peers a 64-bit key (VA page and MDH) and turns it back into a handle with
// the layout macros of Cray's private header — VA, MDH, page count 0xFFFFFFF ("unbounded"),
// page shift 12, flags, CRC (left 0 for FMA and AMO posts) — so the handle carries no
// registration slot. The target must
// find the registration by (memory domain, first page). FMA PUT/GET/AMO, RDMA PUT/GET and
// CQ writes through such handles, and the refusals: bounds, read-only, unknown page,
// another domain; GNI_GetJobResInfo(GNI_JOB_RES_FMA), which the provider needs too; and the
// provider's progress threads, cancelled asynchronously inside GNI_PostdataProbeWaitById,
// GNI_CqVectorMonitor and GNI_CqWaitEvent. Run on one node, on two emulated nodes, with the
// BTE engine and (NICEMU_TEST_FABRIC=1) across hosts.
#include <doctest/doctest.h>

#include <pthread.h>

#include <cstring>

#include "harness.h"

using namespace harness;

namespace {

constexpr size_t kBuf = 3 * 4096;
constexpr size_t kOff = 96;  // registrations start mid-page (16-byte aligned), as malloc'd buffers do

// CRC-8 of the 15 low bytes, bit by bit (reflected, polynomial 0x8C): the algorithm of the
// handle layout (fact sheet §10.4), written independently of nicemu's table version.
uint8_t crc8_bitwise(uint64_t q1, uint64_t q2) {
  uint8_t crc = 0;
  for (int i = 0; i < 15; ++i) {
    uint8_t byte = uint8_t(i < 8 ? q1 >> (8 * i) : q2 >> (8 * (i - 8)));
    crc ^= byte;
    for (int b = 0; b < 8; ++b) crc = (crc & 1) ? uint8_t((crc >> 1) ^ 0x8C) : uint8_t(crc >> 1);
  }
  return crc;
}

// What the provider sends its peers for a registration: the key's fields.
struct Key {
  uint64_t pfn;  // VA >> 12 of the handle
  uint32_t mdd;  // the handle's MDH (qword1 bits 63..52)
  bool read_only;
};
Key key_of(const gni_mem_handle_t& h) {
  return Key{(h.qword1 & ((uint64_t{1} << 52) - 1)), uint32_t(h.qword1 >> 52) & 0xFFF,
             ((h.qword2 >> 34) & 0x01) != 0};
}

// _gnix_convert_key_to_mhdl: INIT, PAGESIZE 12, NPAGES 0xFFFFFFF, VA, MDH, FLAGS, CRC
// (_no_crc, for FMA and AMO posts: CRC left 0).
gni_mem_handle_t handle_from_key(const Key& k, bool crc = true) {
  gni_mem_handle_t h{0, 0};
  h.qword2 |= uint64_t{12} << 28;
  h.qword2 |= 0xFFFFFFFull;
  h.qword1 |= k.pfn & ((uint64_t{1} << 52) - 1);
  h.qword1 |= uint64_t{k.mdd & 0xFFF} << 52;
  h.qword2 |= uint64_t{k.read_only ? 1u : 0u} << 34;
  if (crc) h.qword2 |= uint64_t{crc8_bitwise(h.qword1, h.qword2)} << 56;
  return h;
}

struct Target {
  uint32_t addr;
  uint64_t rw, ro;  // registered addresses (kOff into their buffers)
  Key rw_key, ro_key;
  uint32_t rw_slot;
};

int target(Oob& oob, Cred c) {
  Gni g = open_gni(7, c);
  // Other registrations first, so the one under test is not in slot 0 (the slot bits a
  // client-built handle leaves at 0).
  static char pad[4][4096];
  gni_mem_handle_t ph;
  for (auto& p : pad) ph = mem_register(g.nic, uint64_t(p), sizeof p);
  alignas(4096) static char rw[kBuf + 4096], ro[kBuf + 4096];
  std::memset(rw, 't', sizeof rw);
  std::memset(ro, 'r', sizeof ro);
  gni_mem_handle_t rwh, roh;
  rwh = mem_register(g.nic, uint64_t(rw + kOff), kBuf, g.rcq, GNI_MEM_READWRITE);
  roh = mem_register(g.nic, uint64_t(ro + kOff), kBuf, g.rcq, GNI_MEM_READ_ONLY);
  Target t{g.addr, uint64_t(rw + kOff), uint64_t(ro + kOff), key_of(rwh), key_of(roh), uint32_t(rwh.qword2 >> 42) & 0x3FFF};
  CHILD_CHECK(t.rw_slot != 0);
  oob.send(1, t);
  CHILD_CHECK(oob.recv<int>(1) == 1);
  for (size_t i = 0; i < 64; ++i) CHILD_CHECK(rw[kOff + i] == 'F');           // FMA PUT
  for (size_t i = 4096; i < 4096 + 6000; ++i) CHILD_CHECK(rw[kOff + i] == 'R');  // RDMA PUT
  uint64_t word;
  std::memcpy(&word, rw + kOff + 256, 8);
  CHILD_CHECK(word == 40 + 2);  // FADD
  for (size_t i = 0; i < sizeof ro; ++i) CHILD_CHECK(ro[i] == 'r');  // nothing wrote read-only memory
  CHILD_CHECK(rw[kOff + kBuf] == 't');                               // nor past the registration
  // The CQ write through a client-built handle lands in the registration's CQ.
  gni_cq_entry_t e = 0;
  bool found = false;
  for (int tries = 0; tries < 2000 && !found; ++tries)
    if (GNI_CqWaitEvent(g.rcq, 5, &e) == GNI_RC_SUCCESS && GNI_CQ_GET_DATA(e) == 0xBEEFull) found = true;
  CHILD_CHECK(found);
  oob.send(1, 2);
  return 0;
}

int initiator(Oob& oob, Cred c) {
  Gni g = open_gni(3, c);
  // The provider sizes its NIC pool from the job's FMA descriptors (one per attached CDM).
  gni_job_res_desc_t jr{};
  CHILD_CHECK(GNI_GetJobResInfo(0, c.ptag, GNI_JOB_RES_FMA, &jr) == GNI_RC_SUCCESS);
  CHILD_CHECK(jr.used == 1 && jr.limit >= jr.used);
  Target t = oob.recv<Target>(0);
  gni_ep_handle_t ep = bound_ep(g.nic, g.cq, t.addr, 7);
  alignas(4096) static char src[kBuf], back[kBuf];
  gni_mem_handle_t sh, bh;
  sh = mem_register(g.nic, uint64_t(src), kBuf);
  bh = mem_register(g.nic, uint64_t(back), kBuf);
  const gni_mem_handle_t rw = handle_from_key(t.rw_key), ro = handle_from_key(t.ro_key);
  CHILD_CHECK(((rw.qword2 >> 42) & 0x3FFF) == 0);  // no slot: found by address

  // FMA PUT and GET back.
  std::memset(src, 'F', 64);
  auto put = make_desc(GNI_POST_FMA_PUT, uint64_t(src), sh, t.rw, handle_from_key(t.rw_key, false), 64);
  CHILD_CHECK(post_and_wait(g.cq, ep, put) == 0);
  auto get = make_desc(GNI_POST_FMA_GET, uint64_t(back), bh, t.rw, rw, 64);
  CHILD_CHECK(post_and_wait(g.cq, ep, get) == 0);
  CHILD_CHECK(std::memcmp(back, src, 64) == 0);
  // A fetching AMO inside the registration.
  uint64_t forty = 40;
  std::memcpy(src + 128, &forty, 8);
  auto seed = make_desc(GNI_POST_FMA_PUT, uint64_t(src + 128), sh, t.rw + 256, rw, 8);
  CHILD_CHECK(post_and_wait(g.cq, ep, seed) == 0);
  // The provider skips the CRC of FMA and AMO handles (the hardware does not check it there).
  auto fadd = make_desc(GNI_POST_AMO, uint64_t(back + 512), bh, t.rw + 256, handle_from_key(t.rw_key, false), 8);
  fadd.amo_cmd = GNI_FMA_ATOMIC_FADD;
  fadd.first_operand = 2;
  CHILD_CHECK(post_and_wait(g.cq, ep, fadd) == 0);
  uint64_t old = 0;
  std::memcpy(&old, back + 512, 8);
  CHILD_CHECK(old == 40);
  // RDMA PUT and GET across the registration's second and third pages.
  std::memset(src, 'R', 6000);
  auto rput = make_desc(GNI_POST_RDMA_PUT, uint64_t(src), sh, t.rw + 4096, rw, 6000);
  CHILD_CHECK(post_and_wait(g.cq, ep, rput) == 0);
  std::memset(back, 0, kBuf);
  auto rget = make_desc(GNI_POST_RDMA_GET, uint64_t(back), bh, t.rw + 4096, rw, 6000);
  CHILD_CHECK(post_and_wait(g.cq, ep, rget) == 0);
  CHILD_CHECK(std::memcmp(back, src, 6000) == 0);
  // Reading read-only memory is allowed.
  auto roget = make_desc(GNI_POST_FMA_GET, uint64_t(back), bh, t.ro, ro, 16);
  CHILD_CHECK(post_and_wait(g.cq, ep, roget) == 0);
  CHILD_CHECK(back[0] == 'r');

  // Refusals, as error completions (nothing is written: the target checks its bytes).
  std::memset(src, 'X', kBuf);
  auto past = make_desc(GNI_POST_FMA_PUT, uint64_t(src), sh, t.rw + kBuf - 8, rw, 64);  // beyond the end
  CHILD_CHECK(post_and_wait(g.cq, ep, past) != 0);
  auto rpast = make_desc(GNI_POST_RDMA_PUT, uint64_t(src), sh, t.rw + 4096, rw, kBuf);
  CHILD_CHECK(post_and_wait(g.cq, ep, rpast) != 0);
  Key hidden = t.ro_key;
  hidden.read_only = false;  // a key that hides the flag: the target's table still refuses
  auto ro_put = make_desc(GNI_POST_FMA_PUT, uint64_t(src), sh, t.ro, handle_from_key(hidden), 16);
  CHILD_CHECK(post_and_wait(g.cq, ep, ro_put) != 0);
  Key elsewhere = t.rw_key;
  elsewhere.pfn += 64;  // no registration starts there
  auto nowhere = make_desc(GNI_POST_FMA_PUT, uint64_t(src), sh, t.rw + 64 * 4096, handle_from_key(elsewhere), 8);
  CHILD_CHECK(post_and_wait(g.cq, ep, nowhere) != 0);
  Key other = t.rw_key;
  other.mdd = (other.mdd % 4095) + 1;  // another memory domain
  auto wrong = make_desc(GNI_POST_FMA_PUT, uint64_t(src), sh, t.rw, handle_from_key(other), 8);
  CHILD_CHECK(post_and_wait(g.cq, ep, wrong) != 0);

  // A CQ write through the client-built handle.
  auto cqw = cqwrite_desc(rw, 0xBEEF);
  CHILD_CHECK(post_and_wait(g.cq, ep, cqw) == 0);
  oob.send(0, 1);
  CHILD_CHECK(oob.recv<int>(0) == 2);
  return 0;
}

void run(int target_node, int initiator_node) {
  Cluster cl(2);
  Cred c = cl.credential();
  Oob oob;
  pid_t t = cl.spawn(target_node, [&] { return target(oob, c); });
  pid_t i = cl.spawn(initiator_node, [&] { return initiator(oob, c); });
  CHECK(cl.wait(i) == 0);
  CHECK(cl.wait(t) == 0);
}

}  // namespace

TEST_CASE("client-built handles: one node") {
  if (across_hosts()) return;  // across hosts means two nodes
  run(0, 0);
}

TEST_CASE("client-built handles: two emulated nodes") { run(1, 0); }

namespace {

// What a provider progress thread does: asynchronous cancellation, then a blocking call
// without timeout. `which` picks the call.
struct Blocker {
  gni_nic_handle_t nic;
  gni_cq_handle_t cq;
  int which;
  gni_ep_handle_t ep = nullptr;  // with a wildcard post outstanding (which == 4)
};
constexpr uint64_t kPostId = 0x5151;
void* block_forever(void* arg) {
  auto* b = static_cast<Blocker*>(arg);
  int unused;
  pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &unused);
  for (;;) {
    uint64_t id = 0;
    uint32_t w = 0;
    gni_cq_entry_t e = 0;
    if (b->which == 0) GNI_PostdataProbeWaitById(b->nic, UINT32_MAX, &id);
    if (b->which == 1) GNI_CqVectorMonitor(&b->cq, 1, UINT64_MAX, &w);
    if (b->which == 2) GNI_CqWaitEvent(b->cq, UINT64_MAX, &e);
    // The provider's loop: a short wait that returns, then non-blocking calls. A cancel
    // that lands inside the short wait is acted on as it returns.
    if (b->which == 3) GNI_PostdataProbeWaitById(b->nic, 1, &id);
    // The provider's datagram thread between waits: probes and tests, never blocking. The
    // cancel lands inside them (they hold the library's datagram lock most of the time).
    if (b->which == 4) {
      gni_post_state_t st;
      uint32_t a = 0, i = 0;
      GNI_PostDataProbeById(b->nic, &id);
      GNI_EpPostDataTestById(b->ep, kPostId, &st, &a, &i);
    }
  }
  return nullptr;
}

}  // namespace

// libfabric's gni provider cancels its datagram and CQ progress threads (asynchronous
// cancellation) while they sit in these calls; the process must go on (it used to end in
// std::terminate: the cancel unwound through a lock of this C++ library).
TEST_CASE("blocking calls cancelled asynchronously") {
  CHECK(in_one_child(5, 30, [&](Cluster&, Cred, Gni& g) {
    gni_ep_handle_t ep = nullptr;
    CHILD_CHECK(GNI_EpCreate(g.nic, g.cq, &ep) == GNI_RC_SUCCESS);
    uint64_t in = 1, out = 0;
    CHILD_CHECK(GNI_EpPostDataWId(ep, &in, sizeof in, &out, sizeof out, kPostId) == GNI_RC_SUCCESS);
    // ASan cannot follow an asynchronous cancel through instrumented frames: the frames it
    // unwinds keep their poisoned redzones, and the thread's exit then trips over them (a
    // false stack-buffer-overflow in sigaltstack). The non-blocking loop runs without it.
    // ThreadSanitizer gives every instrumented function an exception table (a cleanup that
    // calls __tsan_func_exit), so the unwind that starts in pthread_setcanceltype, a nothrow
    // call with no entry in that table, ends in std::terminate; uninstrumented, the entry
    // point has no table and the unwind passes through. The same four cases run there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    constexpr int kCases = 4;
#else
    constexpr int kCases = 5;
#endif
    for (int which = 0; which < kCases; ++which) {
      // The non-blocking loop is cancelled many times, at many places.
      for (int round = 0; round < (which == 4 ? 40 : 1); ++round) {
        Blocker b{g.nic, g.cq, which, ep};
        pthread_t t;
        CHILD_CHECK(pthread_create(&t, nullptr, block_forever, &b) == 0);
        usleep(which == 4 ? 5000 + 500 * round : 300000);  // well into the loop or the sleep
        CHILD_CHECK(pthread_cancel(t) == 0);
        void* ret = nullptr;
        CHILD_CHECK(pthread_join(t, &ret) == 0);
        CHILD_CHECK(ret == PTHREAD_CANCELED);
      }
    }
    // The library still works afterwards: no lock was left held, the post is still pending.
    gni_cq_entry_t e;
    CHILD_CHECK(GNI_CqGetEvent(g.cq, &e) == GNI_RC_NOT_DONE);
    gni_post_state_t st = GNI_POST_COMPLETED;
    uint32_t a = 0, i = 0;
    CHILD_CHECK(GNI_EpPostDataTestById(ep, kPostId, &st, &a, &i) == GNI_RC_SUCCESS);
    CHILD_CHECK(st == GNI_POST_PENDING);
    CHILD_CHECK(GNI_EpPostDataCancelById(ep, kPostId) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpDestroy(ep) == GNI_RC_SUCCESS);
    return 0;
  }) == 0);
}
