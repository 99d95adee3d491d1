// Integration tests of GNI_MemRegisterSegments against real daemons: peers address a
// multi-segment registration by offset within the concatenation of its segments (fact
// sheet §10.2). FMA PUT/GET, RDMA PUT/GET (the daemon's BTE engine) and AMOs across
// segment boundaries, from the target's node and from another node, with segments out of
// address order; local multi-segment handles for GETs and RDMA; bounds and read-only
// errors; the segment table freed on deregistration and full when exhausted.
#include <doctest/doctest.h>

#include <sys/mman.h>

#include <cstring>
#include <vector>

#include "harness.h"
#include "nicemu/abi/cq_entry.h"

using namespace harness;
namespace cqe = nicemu::abi::cqe;

namespace {

constexpr uint64_t kMem = 65536;  // the target's buffer; segments are pieces of it
constexpr char kGap = char(0xEE);  // bytes of the buffer outside every segment

// Offsets [0,3002) [3002,11194) [11194,16194) [16194,20292): out of address order, odd
// lengths, so an 8-byte word at offset 3000 straddles the first boundary.
struct Piece {
  uint64_t at, len;
};
constexpr Piece kSegs[] = {{40960, 3002}, {0, 8192}, {20000, 5000}, {12288, 4098}};
constexpr uint64_t kTotal = 3002 + 8192 + 5000 + 4098;
static_assert(kTotal % 8 == 4 && kTotal % 4 == 0);
constexpr uint64_t kAmoOff = 16200;  // an 8-byte word inside the last segment

inline uint8_t pattern(uint64_t i, uint32_t seed) { return uint8_t(((i * 0x9E3779B1u) >> 11) ^ i ^ seed); }

// Byte `off` of the offset space of a buffer segmented as `segs`.
char* at_offset(char* base, const Piece* segs, size_t n, uint64_t off) {
  for (size_t i = 0; i < n; ++i) {
    if (off < segs[i].len) return base + segs[i].at + off;
    off -= segs[i].len;
  }
  return nullptr;
}

gni_mem_handle_t register_segments(gni_nic_handle_t nic, char* base, const Piece* segs, size_t n,
                                   gni_cq_handle_t dst, uint32_t flags = 0) {
  std::vector<gni_mem_segment_t> s;
  for (size_t i = 0; i < n; ++i) s.push_back({uint64_t(base + segs[i].at), segs[i].len});
  gni_mem_handle_t h{};
  CHILD_CHECK(GNI_MemRegisterSegments(nic, s.data(), uint32_t(n), dst, flags, uint32_t(-1), &h) == GNI_RC_SUCCESS);
  return h;
}

char* anon(uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHILD_CHECK(p != MAP_FAILED);
  return static_cast<char*>(p);
}

struct Info {
  uint32_t addr, inst;
  gni_mem_handle_t seg_h;  // kSegs of the target's buffer, remote events to its rcq
  gni_mem_handle_t ro_h;   // the same segments, read-only
};

// What an initiator tells the target when it is done.
struct Done {
  uint32_t seed;     // the whole offset space holds pattern(seed) ...
  uint64_t amo_add;  // ... but the word at kAmoOff was FADDed by this much
  uint32_t remote_events;
};

// One initiator's whole exchange with the target; returns what the target must find.
Done initiate(Gni& g, const Info& t, uint32_t seed) {
  gni_ep_handle_t ep = bound_ep(g.nic, g.cq, t.addr, t.inst);
  Done done{};

  // FMA PUT of the offset space in three posts, the middle one across two boundaries.
  char* src = anon(kTotal);
  for (uint64_t i = 0; i < kTotal; ++i) src[i] = char(pattern(i, seed));
  const uint64_t cut[] = {0, 2990, 2990 + 8300, kTotal};
  for (int k = 0; k < 3; ++k) {
    auto d = make_desc(GNI_POST_FMA_PUT, uint64_t(src + cut[k]), {}, cut[k], t.seg_h, cut[k + 1] - cut[k]);
    d.cq_mode |= GNI_CQMODE_REMOTE_EVENT;
    CHILD_CHECK(post_and_wait(g.cq, ep, d) == 0);
    ++done.remote_events;
  }

  // FMA GET of everything into a plain local buffer.
  char* dst = anon(kTotal);
  gni_mem_handle_t dst_h{};
  dst_h = mem_register(g.nic, uint64_t(dst), kTotal);
  auto get = make_desc(GNI_POST_FMA_GET, uint64_t(dst), dst_h, 0, t.seg_h, kTotal);
  CHILD_CHECK(post_and_wait(g.cq, ep, get) == 0);
  CHILD_CHECK(std::memcmp(dst, src, kTotal) == 0);

  // RDMA PUT of a second pattern from a local multi-segment registration: local_addr is an
  // offset in it too.
  const uint32_t seed2 = seed ^ 0x5A;
  const Piece local_segs[] = {{8192, 10000}, {0, 5000}, {30000, kTotal - 15000}};
  char* lbuf = anon(kMem);
  for (uint64_t i = 0; i < kTotal; ++i) *at_offset(lbuf, local_segs, 3, i) = char(pattern(i, seed2));
  gni_mem_handle_t lseg_h = register_segments(g.nic, lbuf, local_segs, 3, nullptr);
  auto rput = make_desc(GNI_POST_RDMA_PUT, 0, lseg_h, 0, t.seg_h, kTotal);
  CHILD_CHECK(post_and_wait(g.cq, ep, rput) == 0);

  // RDMA GET of it back into the plain buffer, then an unaligned-in-segments piece into
  // the local multi-segment buffer by FMA GET (both sides in pieces).
  std::memset(dst, 0, kTotal);
  auto rget = make_desc(GNI_POST_RDMA_GET, uint64_t(dst), dst_h, 0, t.seg_h, kTotal);
  CHILD_CHECK(post_and_wait(g.cq, ep, rget) == 0);
  for (uint64_t i = 0; i < kTotal; ++i) CHILD_CHECK(uint8_t(dst[i]) == pattern(i, seed2));
  for (uint64_t i = 0; i < kTotal; ++i) *at_offset(lbuf, local_segs, 3, i) = 0;
  auto fget = make_desc(GNI_POST_FMA_GET, 4996, lseg_h, 2996, t.seg_h, 8204);  // 4996..13200 locally
  CHILD_CHECK(post_and_wait(g.cq, ep, fget) == 0);
  for (uint64_t i = 0; i < 8204; ++i)
    CHILD_CHECK(uint8_t(*at_offset(lbuf, local_segs, 3, 4996 + i)) == pattern(2996 + i, seed2));
  CHILD_CHECK(*at_offset(lbuf, local_segs, 3, 4995) == 0 && *at_offset(lbuf, local_segs, 3, 13200) == 0);

  // AMOs: a fetching add inside a segment (the old value lands at an offset of the local
  // multi-segment buffer), and a word across a boundary, which has no single target word.
  uint64_t expect_old;
  std::memcpy(&expect_old, dst + kAmoOff, 8);
  auto amo = make_desc(GNI_POST_AMO, 10000 - 4, lseg_h, kAmoOff, t.seg_h, 8);  // result straddles locally
  amo.amo_cmd = GNI_FMA_ATOMIC_FADD;
  amo.first_operand = 77;
  CHILD_CHECK(post_and_wait(g.cq, ep, amo) == 0);
  uint64_t fetched = 0;
  for (int b = 0; b < 8; ++b)
    reinterpret_cast<char*>(&fetched)[b] = *at_offset(lbuf, local_segs, 3, 10000 - 4 + uint64_t(b));
  CHILD_CHECK(fetched == expect_old);
  done.amo_add = 77;
  auto straddle = make_desc(GNI_POST_AMO, 0, {}, 3000, t.seg_h, 8);
  straddle.amo_cmd = GNI_FMA_ATOMIC_ADD;
  straddle.first_operand = 1;
  CHILD_CHECK(post_and_wait(g.cq, ep, straddle) == cqe::kErrBounds);

  // Bounds: the offset space ends at kTotal, whatever the segments' addresses.
  auto past = make_desc(GNI_POST_FMA_PUT, uint64_t(src), {}, kTotal - 4, t.seg_h, 8);
  CHILD_CHECK(post_and_wait(g.cq, ep, past) == cqe::kErrBounds);
  auto past_get = make_desc(GNI_POST_FMA_GET, uint64_t(dst), dst_h, kTotal, t.seg_h, 4);
  CHILD_CHECK(post_and_wait(g.cq, ep, past_get) == cqe::kErrBounds);
  auto past_rdma = make_desc(GNI_POST_RDMA_PUT, uint64_t(dst), dst_h, kTotal - 8, t.seg_h, 16);
  CHILD_CHECK(post_and_wait(g.cq, ep, past_rdma) == cqe::kErrBounds);
  auto past_rget = make_desc(GNI_POST_RDMA_GET, uint64_t(dst), dst_h, kTotal - 4096, t.seg_h, 8192);
  CHILD_CHECK(post_and_wait(g.cq, ep, past_rget) == cqe::kErrBounds);
  auto by_va = make_desc(GNI_POST_FMA_PUT, uint64_t(src), {}, 1ull << 40, t.seg_h, 8);
  CHILD_CHECK(post_and_wait(g.cq, ep, by_va) == cqe::kErrBounds);
  // Local side past the end of the local multi-segment registration: refused at post time
  // for RDMA, a local protection error for FMA.
  auto lpast = make_desc(GNI_POST_RDMA_GET, kTotal - 4, lseg_h, 0, t.seg_h, 8);
  CHILD_CHECK(GNI_PostRdma(ep, &lpast) == GNI_RC_INVALID_PARAM);
  auto lpast_f = make_desc(GNI_POST_FMA_GET, kTotal - 4, lseg_h, 0, t.seg_h, 8);
  CHILD_CHECK(post_and_wait(g.cq, ep, lpast_f) == cqe::kErrLocalProtection);
  // Read-only segments: readable, never written.
  auto ro_put = make_desc(GNI_POST_FMA_PUT, uint64_t(src), {}, 0, t.ro_h, 64);
  CHILD_CHECK(post_and_wait(g.cq, ep, ro_put) == cqe::kErrReadOnly);
  auto ro_rput = make_desc(GNI_POST_RDMA_PUT, uint64_t(dst), dst_h, 0, t.ro_h, 64);
  CHILD_CHECK(GNI_PostRdma(ep, &ro_rput) == GNI_RC_PERMISSION_ERROR);  // the handle says read-only
  auto ro_get = make_desc(GNI_POST_FMA_GET, uint64_t(dst), dst_h, 3000, t.ro_h, 8);
  CHILD_CHECK(post_and_wait(g.cq, ep, ro_get) == 0);
  CHILD_CHECK(uint8_t(dst[0]) == pattern(3000, seed2));

  CHILD_CHECK(GNI_MemDeregister(g.nic, &lseg_h) == GNI_RC_SUCCESS);
  CHILD_CHECK(GNI_MemDeregister(g.nic, &dst_h) == GNI_RC_SUCCESS);
  CHILD_CHECK(GNI_EpUnbind(ep) == GNI_RC_SUCCESS);
  CHILD_CHECK(GNI_EpDestroy(ep) == GNI_RC_SUCCESS);
  done.seed = seed2;
  return done;
}

// The target checks its own memory: the offset space through its segments, gaps untouched.
void verify_target(char* mem, const Done& d) {
  uint64_t amo_word;
  std::memcpy(&amo_word, at_offset(mem, kSegs, 4, kAmoOff), 8);
  uint64_t expect = 0;
  for (int b = 0; b < 8; ++b) reinterpret_cast<uint8_t*>(&expect)[b] = pattern(kAmoOff + uint64_t(b), d.seed);
  CHILD_CHECK(amo_word == expect + d.amo_add);
  for (uint64_t i = 0; i < kTotal; ++i) {
    if (i >= kAmoOff && i < kAmoOff + 8) continue;
    CHILD_CHECK(uint8_t(*at_offset(mem, kSegs, 4, i)) == pattern(i, d.seed));
  }
  std::vector<bool> in_seg(kMem, false);
  for (const Piece& p : kSegs)
    for (uint64_t i = 0; i < p.len; ++i) in_seg[p.at + i] = true;
  for (uint64_t i = 0; i < kMem; ++i)
    if (!in_seg[i]) CHILD_CHECK(mem[i] == kGap);
}

}  // namespace

TEST_CASE_FIXTURE(TwoNodes, "peers address a multi-segment registration by offset: FMA, RDMA and AMOs across boundaries") {
  Oob near, far;  // initiator on the target's node / on the other node
  pid_t target = cl.spawn(0, [&] {
    Gni g = open_gni(100, c);
    char* mem = anon(kMem);
    std::memset(mem, kGap, kMem);
    Info info{g.addr, 100, register_segments(g.nic, mem, kSegs, 4, g.rcq),
              register_segments(g.nic, mem, kSegs, 4, nullptr, GNI_MEM_READ_ONLY)};
    // The registration lists itself as the offset space: address 0, the total length.
    gni_mem_handle_t it{};
    uint64_t a = 1, l = 0;
    CHILD_CHECK(GNI_MemQueryHndls(g.nic, -1, &it, &a, &l) == GNI_RC_SUCCESS);
    CHILD_CHECK(std::memcmp(&it, &info.seg_h, sizeof it) == 0 && a == 0 && l == kTotal);
    for (Oob* o : {&near, &far}) {
      o->send(1, info);
      Done d = o->recv<Done>(1);
      verify_target(mem, d);
      // One remote event per PUT that asked for one, and nothing else.
      for (uint32_t k = 0; k < d.remote_events; ++k) {
        gni_cq_entry_t e = 0;
        CHILD_CHECK(GNI_CqWaitEvent(g.rcq, 5000, &e) == GNI_RC_SUCCESS);
        CHILD_CHECK(GNI_CQ_GET_TYPE(e) == GNI_CQ_EVENT_TYPE_POST);
      }
      gni_cq_entry_t e = 0;
      CHILD_CHECK(GNI_CqGetEvent(g.rcq, &e) == GNI_RC_NOT_DONE);
      std::memset(mem, kGap, kMem);
      o->send(1, 1);
    }
    CHILD_CHECK(GNI_MemDeregister(g.nic, &info.seg_h) == GNI_RC_SUCCESS);
    return 0;
  });
  auto initiator = [&](int node, uint32_t inst, Oob& o, uint32_t seed) {
    return cl.spawn(node, [&, inst, seed] {
      Gni g = open_gni(inst, c);
      Info t = o.recv<Info>(0);
      o.send(0, initiate(g, t, seed));
      CHILD_CHECK(o.recv<int>(0) == 1);
      return 0;
    });
  };
  pid_t a = initiator(0, 200, near, 0x11);
  CHECK(cl.wait(a, 60) == 0);
  pid_t b = initiator(1, 300, far, 0x77);
  CHECK(cl.wait(b, 60) == 0);
  CHECK(cl.wait(target, 60) == 0);
}

TEST_CASE("segment lists: parameter errors, a full table, and entries freed on deregistration") {
  CHECK(in_one_child(7, 60, [&](Cluster&, Cred, Gni& g) {
    const uint32_t n = 1024;
    char* mem = anon(uint64_t{n} * 64);
    std::vector<gni_mem_segment_t> s(n + 1);
    for (uint32_t i = 0; i <= n; ++i) s[i] = {uint64_t(mem) + uint64_t{(i * 7) % n} * 64, 64};
    gni_mem_handle_t h{}, keep = h;
    CHILD_CHECK(GNI_MemRegisterSegments(g.nic, s.data(), n + 1, nullptr, 0, uint32_t(-1), &h) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MemRegisterSegments(g.nic, s.data(), 0, nullptr, 0, uint32_t(-1), &h) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MemRegisterSegments(g.nic, nullptr, 2, nullptr, 0, uint32_t(-1), &h) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MemRegisterSegments(nullptr, s.data(), 2, nullptr, 0, uint32_t(-1), &h) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MemRegisterSegments(g.nic, s.data(), 2, nullptr, GNI_MEM_USE_VMDH, 0, &h) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_MemRegisterSegments(g.nic, s.data(), 2, nullptr, GNI_MEM_PHYS_SEGMENTS, 0, &h) ==
                GNI_RC_INVALID_PARAM);
    gni_mem_segment_t bad[2] = {s[0], {s[1].address, 0}};
    CHILD_CHECK(GNI_MemRegisterSegments(g.nic, bad, 2, nullptr, 0, uint32_t(-1), &h) == GNI_RC_INVALID_PARAM);
    bad[1] = {~uint64_t{0} - 8, 64};  // wraps around the address space
    CHILD_CHECK(GNI_MemRegisterSegments(g.nic, bad, 2, nullptr, 0, uint32_t(-1), &h) == GNI_RC_INVALID_PARAM);
    CHILD_CHECK(std::memcmp(&h, &keep, sizeof h) == 0);  // untouched on failure (§10.2)

    // 16 registrations of 1024 segments fill the 16384-entry table; the next is refused
    // as a registration resource shortage, and deregistering one makes room again.
    std::vector<gni_mem_handle_t> hs(16);
    for (auto& x : hs)
      CHILD_CHECK(GNI_MemRegisterSegments(g.nic, s.data(), n, nullptr, 0, uint32_t(-1), &x) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MemRegisterSegments(g.nic, s.data(), 2, nullptr, 0, uint32_t(-1), &h) == GNI_RC_ERROR_RESOURCE);
    CHILD_CHECK(GNI_MemDeregister(g.nic, &hs[3]) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_MemRegisterSegments(g.nic, s.data(), n, nullptr, 0, uint32_t(-1), &hs[3]) == GNI_RC_SUCCESS);
    for (auto& x : hs) CHILD_CHECK(GNI_MemDeregister(g.nic, &x) == GNI_RC_SUCCESS);
    // Many more rounds than the table holds at once.
    for (int round = 0; round < 40; ++round) {
      CHILD_CHECK(GNI_MemRegisterSegments(g.nic, s.data(), n, nullptr, 0, uint32_t(-1), &h) == GNI_RC_SUCCESS);
      CHILD_CHECK(GNI_MemDeregister(g.nic, &h) == GNI_RC_SUCCESS);
    }
    // A deregistered handle no longer reaches the memory.
    gni_ep_handle_t ep = bound_ep(g.nic, g.cq, g.addr, 7);
    uint64_t v = 1;
    auto d = make_desc(GNI_POST_FMA_PUT, uint64_t(&v), {}, 0, h, 8);
    CHILD_CHECK(post_and_wait(g.cq, ep, d) == cqe::kErrProtection);
    // One segment is a registration addressed by offset too.
    CHILD_CHECK(GNI_MemRegisterSegments(g.nic, &s[5], 1, nullptr, 0, uint32_t(-1), &h) == GNI_RC_SUCCESS);
    auto one = make_desc(GNI_POST_FMA_PUT, uint64_t(&v), {}, 56, h, 8);
    CHILD_CHECK(post_and_wait(g.cq, ep, one) == 0);
    uint64_t got;
    std::memcpy(&got, reinterpret_cast<char*>(s[5].address) + 56, 8);
    CHILD_CHECK(got == 1);
    return 0;
  }) == 0);
}

TEST_CASE_FIXTURE(OneNode, "RDMA in many chunks over segments on both sides (chunks split across segments and channels)") {
  // ~2.3 MiB in odd-sized segments out of order on the target, other cuts locally: the
  // engine's 256 KiB chunks start and end inside segments on both sides.
  constexpr Piece remote_segs[] = {{3 << 20, 700001}, {0, 1000003}, {(5 << 20) + 5, 611111}};
  constexpr Piece local_segs[] = {{1 << 20, 1311111}, {0, 1000004}};
  constexpr uint64_t total = 700001 + 1000003 + 611111;
  static_assert(total == 1311111 + 1000004 && total % 4 == 3);
  constexpr uint64_t len = total - 3;  // RDMA GET lengths are multiples of 4
  Oob o;
  pid_t target = cl.spawn(0, [&] {
    Gni g = open_gni(100, c);
    char* mem = anon(8 << 20);
    std::memset(mem, kGap, 8 << 20);
    o.send(1, Info{g.addr, 100, register_segments(g.nic, mem, remote_segs, 3, nullptr), {}});
    CHILD_CHECK(o.recv<int>(1) == 1);
    for (uint64_t i = 0; i < len; ++i) CHILD_CHECK(uint8_t(*at_offset(mem, remote_segs, 3, i)) == pattern(i, 3));
    CHILD_CHECK(*at_offset(mem, remote_segs, 3, len) == kGap);
    o.send(1, 2);
    CHILD_CHECK(o.recv<int>(1) == 3);  // the initiator has read it back
    return 0;
  });
  pid_t in = cl.spawn(0, [&] {
    Gni g = open_gni(200, c);
    Info t = o.recv<Info>(0);
    gni_ep_handle_t ep = bound_ep(g.nic, g.cq, t.addr, t.inst);
    char* lbuf = anon(4 << 20);
    for (uint64_t i = 0; i < len; ++i) *at_offset(lbuf, local_segs, 2, i) = char(pattern(i, 3));
    gni_mem_handle_t lh = register_segments(g.nic, lbuf, local_segs, 2, nullptr);
    auto put = make_desc(GNI_POST_RDMA_PUT, 0, lh, 0, t.seg_h, len);
    CHILD_CHECK(post_and_wait(g.cq, ep, put) == 0);
    o.send(0, 1);
    CHILD_CHECK(o.recv<int>(0) == 2);
    std::memset(lbuf, 0, 4 << 20);
    auto get = make_desc(GNI_POST_RDMA_GET, 0, lh, 0, t.seg_h, len);
    CHILD_CHECK(post_and_wait(g.cq, ep, get) == 0);
    for (uint64_t i = 0; i < len; ++i) CHILD_CHECK(uint8_t(*at_offset(lbuf, local_segs, 2, i)) == pattern(i, 3));
    CHILD_CHECK(*at_offset(lbuf, local_segs, 2, len) == 0);
    o.send(0, 3);
    return 0;
  });
  CHECK(cl.wait(in, 120) == 0);
  CHECK(cl.wait(target, 120) == 0);
}
