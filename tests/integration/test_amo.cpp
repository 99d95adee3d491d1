// Integration tests of FMA AMOs against real daemons and processes: several processes (on
// the target's node, on another emulated node, and the target itself) hammer the same
// 8-byte and 4-byte words and the totals come out exact; every opcode of fact sheet §13
// once against known values with the fetched value checked; post-time and completion
// errors (alignment, length, opcode, read-only, bounds, local handle).
#include <doctest/doctest.h>

#include <bit>
#include <cstring>
#include <memory>
#include <vector>

#include "harness.h"
#include "nicemu/abi/cq_entry.h"

using namespace harness;
namespace cqe = nicemu::abi::cqe;

namespace {

constexpr int kIters = 1501;     // hammering rounds per process
constexpr uint32_t kGuard = 0x5A5A5A5A;

// Target word layout (offsets in the registered buffer):
//   0  u64 counter: FADD / IADD / ADD_C        8  u32 counter: FIADD_S +1
//   12 u32 counter: IADD_S +2 (same 8-byte word) 16 u64 counter: FCSWAP increments
//   24 u32 counter: FCSWAP_S increments          28 u32 guard, never an AMO target
//   32 u64 AX toggles: bit r by FAX, bit r+8 by AX (rank r), high bits fixed
//   40 u64 error cases                           48 u64 opcode sweep (8-byte)
//   56, 60 u32 opcode sweep (4-byte)
constexpr uint64_t kAxFixed = 0xF00D000000000000ull;

struct Info {
  uint32_t addr, inst;
  uint64_t words, ro, small;
  gni_mem_handle_t words_h, ro_h, small_h;
};

// One process's end of the job: an attached CDM, an EP to the target, a registered buffer
// for fetched values.
struct Initiator {
  Gni g;
  gni_ep_handle_t ep = nullptr;
  alignas(64) uint64_t result[8] = {};
  gni_mem_handle_t result_h{};

  void open(Cred c, uint32_t inst, const Info& t) {
    CHILD_CHECK(g.open(inst, c) == GNI_RC_SUCCESS);
    ep = bound_ep(g.nic, g.cq, t.addr, t.inst);
    result_h = mem_register(g.nic, uint64_t(result), sizeof result);
  }

  // An AMO that must succeed; returns the fetched value (fetching forms).
  uint64_t amo(uint32_t cmd, uint64_t remote, gni_mem_handle_t rh, uint64_t len, uint64_t a, uint64_t b = 0) {
    gni_post_descriptor_t d = amo_desc(cmd, remote, rh, len, a, b);
    result[0] = 0;
    d.local_addr = uint64_t(&result[0]);
    d.local_mem_hndl = result_h;
    CHILD_CHECK(post_and_wait(g.cq, ep, d, 5000) == 0);
    // The library leaves the caller's fields alone (§12.2).
    CHILD_CHECK(d.first_operand == a && d.second_operand == b && uint32_t(d.amo_cmd) == cmd);
    return result[0];
  }

  void put64(uint64_t remote, gni_mem_handle_t rh, uint64_t v) {
    static uint64_t src;
    src = v;
    gni_post_descriptor_t d{};
    d.type = GNI_POST_FMA_PUT;
    d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
    d.local_addr = uint64_t(&src);
    d.remote_addr = remote;
    d.remote_mem_hndl = rh;
    d.length = 8;
    CHILD_CHECK(post_and_wait(g.cq, ep, d, 5000) == 0);
  }

  uint64_t get64(uint64_t remote, gni_mem_handle_t rh) {
    gni_post_descriptor_t d{};
    d.type = GNI_POST_FMA_GET;
    d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
    d.local_addr = uint64_t(&result[7]);
    d.local_mem_hndl = result_h;
    d.remote_addr = remote;
    d.remote_mem_hndl = rh;
    d.length = 8;
    CHILD_CHECK(post_and_wait(g.cq, ep, d, 5000) == 0);
    return result[7];
  }
};

// Rank r's share of the concurrent work on the target's words.
void hammer(Initiator& in, const Info& t, int rank) {
  const uint64_t w = t.words;
  uint64_t last_fetched = 0;
  uint64_t cas64 = 0, cas32 = 0;  // guesses of the current values
  for (int k = 0; k < kIters; ++k) {
    // 8-byte counter through three opcodes of both generations; fetched values only grow.
    if (k % 3 == 0) {
      uint64_t old = in.amo(GNI_FMA_ATOMIC_FADD, w, t.words_h, 8, 1);
      CHILD_CHECK(k == 0 || old > last_fetched);
      last_fetched = old;
    } else {
      in.amo(k % 3 == 1 ? GNI_FMA_ATOMIC2_IADD : GNI_FMA_ATOMIC_ADD_C, w, t.words_h, 8, 1);
    }
    // Two 4-byte counters in one 8-byte word; high operand bits are ignored.
    in.amo(GNI_FMA_ATOMIC2_FIADD_S, w + 8, t.words_h, 4, 0xABCD000000000001ull);
    in.amo(GNI_FMA_ATOMIC2_IADD_S, w + 12, t.words_h, 4, 2);
    // Compare-and-swap increments, 8 and 4 bytes.
    for (;;) {
      uint64_t seen = in.amo(GNI_FMA_ATOMIC2_FCSWAP, w + 16, t.words_h, 8, cas64, cas64 + 1);
      if (seen == cas64) {
        ++cas64;
        break;
      }
      cas64 = seen;
    }
    for (;;) {
      uint64_t seen = in.amo(GNI_FMA_ATOMIC2_FCSWAP_S, w + 24, t.words_h, 4, cas32, cas32 + 1);
      CHILD_CHECK(seen >> 32 == 0);  // a 4-byte fetch writes 4 bytes
      if (seen == cas32) {
        ++cas32;
        break;
      }
      cas32 = seen;
    }
    // AX toggles of our own bits: T = (T & ~0) ^ bit. Nobody else touches bit r, so the
    // fetched value must show it as we left it; a lost update would flip it back.
    uint64_t before = in.amo(GNI_FMA_ATOMIC2_FAX, w + 32, t.words_h, 8, ~0ull, uint64_t{1} << rank);
    CHILD_CHECK(((before >> rank) & 1) == uint64_t(k & 1));
    CHILD_CHECK((before & kAxFixed) == kAxFixed);
    in.amo(GNI_FMA_ATOMIC_AX, w + 32, t.words_h, 8, ~0ull, uint64_t{1} << (rank + 8));
  }
}

// The target: registers its words (with a remote-event CQ), a read-only and a small buffer;
// lets the initiators in, hammers too (through an EP to itself), checks the totals.
int target_process(std::vector<Oob*> oobs, Cred c, int ranks) {
  Initiator self;
  static uint64_t words[16] __attribute__((aligned(64)));
  static uint64_t ro[8] __attribute__((aligned(64)));
  static uint64_t small[2] __attribute__((aligned(64)));
  std::memset(words, 0, sizeof words);
  std::memcpy(reinterpret_cast<char*>(words) + 28, &kGuard, 4);
  words[4] = kAxFixed;
  for (auto& x : ro) x = 0x1234;
  Info info{};
  info.words = uint64_t(words);
  info.ro = uint64_t(ro);
  info.small = uint64_t(small);
  CHILD_CHECK(self.g.open(100, c) == GNI_RC_SUCCESS);
  info.addr = self.g.addr;
  info.inst = 100;
  info.words_h = mem_register(self.g.nic, info.words, sizeof words, self.g.rcq);
  info.ro_h = mem_register(self.g.nic, info.ro, sizeof ro, nullptr, GNI_MEM_READ_ONLY);
  info.small_h = mem_register(self.g.nic, info.small, 8);
  self.ep = bound_ep(self.g.nic, self.g.cq, info.addr, info.inst);
  self.result_h = mem_register(self.g.nic, uint64_t(self.result), sizeof self.result);

  for (Oob* o : oobs) o->send(1, info);
  for (Oob* o : oobs) CHILD_CHECK(o->recv<int>(1) == 1);  // all attached: start together
  for (Oob* o : oobs) o->send(1, 1);
  hammer(self, info, 0);
  for (Oob* o : oobs) CHILD_CHECK(o->recv<int>(1) == 2);  // all done

  const uint64_t total = uint64_t(ranks) * kIters;
  uint32_t u32[4];
  std::memcpy(u32, reinterpret_cast<char*>(words) + 8, 4);
  std::memcpy(u32 + 1, reinterpret_cast<char*>(words) + 12, 4);
  std::memcpy(u32 + 2, reinterpret_cast<char*>(words) + 24, 4);
  std::memcpy(u32 + 3, reinterpret_cast<char*>(words) + 28, 4);
  std::fprintf(stderr, "target: add %lu, add_s %u/%u, cswap %lu, cswap_s %u, ax %#lx (want %lu)\n",
               (unsigned long)words[0], u32[0], u32[1], (unsigned long)words[2], u32[2], (unsigned long)words[4],
               (unsigned long)total);
  CHILD_CHECK(words[0] == total);
  CHILD_CHECK(u32[0] == total);
  CHILD_CHECK(u32[1] == 2 * total);
  CHILD_CHECK(words[2] == total);
  CHILD_CHECK(u32[2] == total);
  CHILD_CHECK(u32[3] == kGuard);
  uint64_t bits = 0;
  if (kIters & 1)
    for (int r = 0; r < ranks; ++r) bits |= (uint64_t{1} << r) | (uint64_t{1} << (r + 8));
  CHILD_CHECK(words[4] == (kAxFixed | bits));

  // After the sweep and the error cases: refused AMOs wrote nothing, and exactly one AMO
  // asked for a remote event, which carries the initiator's remote event id.
  for (Oob* o : oobs) CHILD_CHECK(o->recv<int>(1) == 3);
  for (auto x : ro) CHILD_CHECK(x == 0x1234);
  gni_cq_entry_t e;
  int remote_events = 0;
  while (GNI_CqGetEvent(self.g.rcq, &e) == GNI_RC_SUCCESS) {
    CHILD_CHECK(GNI_CQ_GET_REM_INST_ID(e) == 4242);
    ++remote_events;
  }
  CHILD_CHECK(remote_events == 1);
  for (Oob* o : oobs) o->send(1, 4);
  return 0;
}

// The opcode sweep: every enumerator once against a known target value.
enum class K { Add, And, Or, Xor, Ax, Cswap, Swap, Imin, Imax, Fpmin, Fpmax, Fpadd };
struct Op {
  uint32_t cmd;
  K k;
  unsigned size;
  bool fetching;
};
#define G1(name, k, f) {GNI_FMA_ATOMIC_##name, K::k, 8, f}, {GNI_FMA_ATOMIC_##name##_C, K::k, 8, f}
#define G2(name, k, f)                                                                            \
  {GNI_FMA_ATOMIC2_##name, K::k, 8, f}, {GNI_FMA_ATOMIC2_##name##_C, K::k, 8, f},                 \
      {GNI_FMA_ATOMIC2_##name##_S, K::k, 4, f}, {GNI_FMA_ATOMIC2_##name##_SC, K::k, 4, f}
const Op kOps[] = {
    G1(FADD, Add, true),    G1(FAND, And, true),      G1(FOR, Or, true),        G1(FXOR, Xor, true),
    G1(FAX, Ax, true),      G1(CSWAP, Cswap, true),   G1(ADD, Add, false),      G1(AND, And, false),
    G1(OR, Or, false),      G1(XOR, Xor, false),      G1(AX, Ax, false),        G2(FAND, And, true),
    G2(FOR, Or, true),      G2(FXOR, Xor, true),      G2(FSWAP, Swap, true),    G2(FAX, Ax, true),
    G2(FCSWAP, Cswap, true), G2(FIMIN, Imin, true),   G2(FIMAX, Imax, true),    G2(FIADD, Add, true),
    G2(FFPMIN, Fpmin, true), G2(FFPMAX, Fpmax, true), G2(FFPADD, Fpadd, true),  G2(AND, And, false),
    G2(OR, Or, false),      G2(XOR, Xor, false),      G2(SWAP, Swap, false),    G2(AX, Ax, false),
    G2(CSWAP, Cswap, false), G2(IMIN, Imin, false),   G2(IMAX, Imax, false),    G2(IADD, Add, false),
    G2(FPMIN, Fpmin, false), G2(FPMAX, Fpmax, false), G2(FPADD, Fpadd, false),
};
#undef G1
#undef G2
static_assert(sizeof kOps / sizeof kOps[0] == 118);

// (old, a, b) -> expected new value, computed by hand for each operation.
struct Vec {
  uint64_t old, a, b, want;
};
Vec vector_for(K k, unsigned size) {
  auto fp = [size](double v) -> uint64_t {
    return size == 8 ? std::bit_cast<uint64_t>(v) : std::bit_cast<uint32_t>(static_cast<float>(v));
  };
  const uint64_t m = size == 8 ? ~0ull : 0xFFFFFFFFull;
  switch (k) {
    case K::Add: return {240, 15, 0, 255};
    case K::And: return {0xF0, 0x3C, 0, 0x30};
    case K::Or: return {0xF0, 0x3C, 0, 0xFC};
    case K::Xor: return {0xF0, 0x3C, 0, 0xCC};
    case K::Ax: return {0xF0, 0x3C, 0x01, 0x31};
    case K::Cswap: return {240, 240, 7, 7};
    case K::Swap: return {240, 0x3C, 0, 0x3C};
    case K::Imin: return {240, uint64_t(-5) & m, 0, uint64_t(-5) & m};
    case K::Imax: return {240, 500, 0, 500};
    case K::Fpmin: return {fp(2.5), fp(-1.0), 0, fp(-1.0)};
    case K::Fpmax: return {fp(2.5), fp(4.0), 0, fp(4.0)};
    case K::Fpadd: return {fp(2.5), fp(0.25), 0, fp(2.75)};
  }
  return {};
}

void sweep(Initiator& in, const Info& t) {
  const uint64_t w8 = t.words + 48;
  int i = 0;
  for (const Op& op : kOps) {
    Vec v = vector_for(op.k, op.size);
    // 4-byte ops alternate between both halves of an 8-byte word; the other half is a guard.
    const bool high = op.size == 4 && (i++ & 1);
    const uint64_t word = op.size == 8 ? w8 : t.words + 56;
    const uint64_t remote = word + (high ? 4 : 0);
    const uint64_t initial = op.size == 8 ? v.old : high ? (v.old << 32) | kGuard : (uint64_t{kGuard} << 32) | v.old;
    in.put64(word, t.words_h, initial);
    gni_post_descriptor_t d = amo_desc(op.cmd, remote, t.words_h, op.size, v.a | (op.size == 4 ? 0xDEAD000000000000ull : 0),
                                       v.b);
    in.result[0] = 0xAAAAAAAAAAAAAAAAull;
    d.local_addr = uint64_t(&in.result[0]);
    d.local_mem_hndl = in.result_h;
    if (op.cmd == GNI_FMA_ATOMIC2_FIADD_S) {  // one AMO asks for a remote event as well
      d.cq_mode |= GNI_CQMODE_REMOTE_EVENT;
      CHILD_CHECK(GNI_EpSetEventData(in.ep, 1, 4242) == GNI_RC_SUCCESS);
    }
    if (post_and_wait(in.g.cq, in.ep, d, 5000) != 0) {
      std::fprintf(stderr, "amo %#x failed\n", op.cmd);
      _exit(1);
    }
    const uint64_t got = in.get64(word, t.words_h);
    const uint64_t want = op.size == 8 ? v.want : high ? (v.want << 32) | kGuard : (uint64_t{kGuard} << 32) | v.want;
    if (got != want) std::fprintf(stderr, "amo %#x: target %#lx, want %#lx\n", op.cmd, (unsigned long)got, (unsigned long)want);
    CHILD_CHECK(got == want);
    // Fetching: the old value (4 bytes for _S, the rest of the buffer untouched);
    // non-fetching: nothing written locally.
    uint64_t fetched_want = 0xAAAAAAAAAAAAAAAAull;
    if (op.fetching) fetched_want = op.size == 8 ? v.old : 0xAAAAAAAA00000000ull | v.old;
    if (in.result[0] != fetched_want)
      std::fprintf(stderr, "amo %#x: fetched %#lx, want %#lx\n", op.cmd, (unsigned long)in.result[0],
                   (unsigned long)fetched_want);
    CHILD_CHECK(in.result[0] == fetched_want);
  }
}

// Refused at post time, or completed with an error CQE and no effect.
void errors(Initiator& in, const Info& t) {
  auto post_rc = [&](uint32_t cmd, uint64_t remote, uint64_t len) {
    gni_post_descriptor_t d = amo_desc(cmd, remote, t.words_h, len, 1);
    d.local_addr = uint64_t(&in.result[0]);
    d.local_mem_hndl = in.result_h;
    return GNI_PostFma(in.ep, &d);
  };
  const uint64_t w = t.words + 40;
  CHILD_CHECK(post_rc(GNI_FMA_ATOMIC_FADD, w + 4, 8) == GNI_RC_ALIGNMENT_ERROR);
  CHILD_CHECK(post_rc(GNI_FMA_ATOMIC2_IADD, w + 1, 8) == GNI_RC_ALIGNMENT_ERROR);
  CHILD_CHECK(post_rc(GNI_FMA_ATOMIC2_FIADD_S, w + 2, 4) == GNI_RC_ALIGNMENT_ERROR);
  CHILD_CHECK(post_rc(GNI_FMA_ATOMIC_FADD, w, 4) == GNI_RC_INVALID_PARAM);
  CHILD_CHECK(post_rc(GNI_FMA_ATOMIC2_FIADD_S, w, 8) == GNI_RC_INVALID_PARAM);
  CHILD_CHECK(post_rc(GNI_FMA_ATOMIC2_IADD, w, 0) == GNI_RC_INVALID_PARAM);
  CHILD_CHECK(post_rc(0x10D, w, 8) == GNI_RC_INVALID_PARAM);  // gen-1 has no non-fetching CSWAP
  CHILD_CHECK(post_rc(0x007, w, 8) == GNI_RC_INVALID_PARAM);
  CHILD_CHECK(post_rc(0xFFFF, w, 8) == GNI_RC_INVALID_PARAM);
  {
    gni_post_descriptor_t d = amo_desc(GNI_FMA_ATOMIC2_FIADD, w, t.words_h, 8, 1);
    d.type = GNI_POST_AMO_W_FLAG;
    CHILD_CHECK(GNI_PostFma(in.ep, &d) == GNI_RC_ILLEGAL_OP);
    d.type = GNI_POST_FMA_GET_W_FLAG;
    CHILD_CHECK(GNI_PostFma(in.ep, &d) == GNI_RC_ILLEGAL_OP);
  }
  in.put64(w, t.words_h, 77);
  struct Bad {
    uint32_t cmd;
    uint64_t remote;
    gni_mem_handle_t h;
    bool local_ok;
    uint64_t want;
  } bad[] = {
      {GNI_FMA_ATOMIC2_IADD, t.ro, t.ro_h, true, cqe::kErrReadOnly},
      {GNI_FMA_ATOMIC2_FCSWAP, t.ro, t.ro_h, true, cqe::kErrReadOnly},   // even a compare that fails
      {GNI_FMA_ATOMIC2_FIADD_S, t.ro + 4, t.ro_h, true, cqe::kErrReadOnly},
      {GNI_FMA_ATOMIC_FADD, t.small + 8, t.small_h, true, cqe::kErrBounds},  // just past the end
      {GNI_FMA_ATOMIC_FADD, w, t.words_h, false, cqe::kErrLocalProtection},  // fetch into unregistered memory
  };
  static uint64_t unregistered = 0x99;
  for (const Bad& b : bad) {
    gni_post_descriptor_t d = amo_desc(b.cmd, b.remote, b.h, b.cmd == GNI_FMA_ATOMIC2_FIADD_S ? 4 : 8, 1, 2);
    d.local_addr = b.local_ok ? uint64_t(&in.result[0]) : uint64_t(&unregistered);
    d.local_mem_hndl = in.result_h;
    in.result[0] = 0x55;
    CHILD_CHECK(post_and_wait(in.g.cq, in.ep, d, 5000) == b.want);
    CHILD_CHECK(d.status == b.want);
    CHILD_CHECK(in.result[0] == 0x55 && unregistered == 0x99);
  }
  CHILD_CHECK(in.get64(w, t.words_h) == 77);  // the refused fetching AMO did not run
}

}  // namespace

TEST_CASE_FIXTURE(TwoNodes, "AMOs from processes on two nodes and the target itself are atomic; every opcode; errors") {
  constexpr int kInitiators = 3;  // plus the target itself
  std::vector<std::unique_ptr<Oob>> oobs;
  std::vector<Oob*> raw;
  for (int i = 0; i < kInitiators; ++i) {
    oobs.push_back(std::make_unique<Oob>());
    raw.push_back(oobs.back().get());
  }
  pid_t t = cl.spawn(0, [&] { return target_process(raw, c, kInitiators + 1); });
  std::vector<pid_t> kids;
  for (int i = 0; i < kInitiators; ++i) {
    const int node = i == kInitiators - 1 ? 1 : 0;  // the last one on the other emulated node
    kids.push_back(cl.spawn(node, [&, i] {
      Oob& o = *raw[size_t(i)];
      Info info = o.recv<Info>(0);
      Initiator in;
      in.open(c, uint32_t(200 + i), info);
      o.send(0, 1);
      CHILD_CHECK(o.recv<int>(0) == 1);
      hammer(in, info, i + 1);
      o.send(0, 2);
      if (i == kInitiators - 1) sweep(in, info);
      if (i == 0) errors(in, info);
      o.send(0, 3);
      return o.recv<int>(0) == 4 ? 0 : 1;
    }));
  }
  for (pid_t k : kids) CHECK(cl.wait(k, 60) == 0);
  CHECK(cl.wait(t, 60) == 0);
}
