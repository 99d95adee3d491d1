// Conformance of the collective engine (fact sheet §16) under a PMI launcher: every rank
// builds two trees over the job (a binary tree of one channel per rank, and a flat tree of
// one channel per node whose root has the other nodes' channels as children), runs every
// CE command in its 32- and 64-bit forms, with and without GNI_CEMODE_TWO_OP, in every
// rounding mode, and checks each result, its exception bits, reduction id and CQ events
// against a serial evaluation of the same tree. Then back-to-back posts on one channel and
// the error cases (bad command, EP without CE attributes, bad modes, an unconfigured
// channel). On a Gemini node it checks that every CE call answers GNI_RC_ILLEGAL_OP.
//   ce_conformance             the conformance run (any number of ranks, any placement)
//   ce_conformance die         3+ ranks: after one good reduction the last rank exits; the
//                              others must get an error completion within a second
//   ce_conformance stall       the same, but the last rank stops its node's daemon (SIGSTOP,
//                              a NIC or host gone silent) for 3 s instead
//   ce_conformance die-early   3..32 ranks on one channel of rank 0 (every rank a PE child):
//                              the last rank exits before it ever posts; the others' first
//                              reduction must fail within a second
// Exit: 0 pass, 1 fail.
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cfenv>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gni_pub.h"
#include "pmi.h"

namespace {

int g_rank = 0, g_size = 1, g_fails = 0;

#define EXPECT(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      ++g_fails;                                                               \
      if (g_fails <= 20) {                                                     \
        std::fprintf(stderr, "rank %d: FAIL %s:%d: %s: ", g_rank, __FILE__, __LINE__, #cond); \
        std::fprintf(stderr, __VA_ARGS__);                                     \
        std::fputc('\n', stderr);                                              \
      }                                                                        \
    }                                                                          \
  } while (0)

void die(const char* what, int rc) {
  std::fprintf(stderr, "rank %d: %s failed (rc %d)\n", g_rank, what, rc);
  PMI_Abort(1, what);
  std::exit(1);
}
#define CALL(x)                            \
  do {                                     \
    gni_return_t rc_ = (x);                \
    if (rc_ != GNI_RC_SUCCESS) die(#x, rc_); \
  } while (0)

double now_s() {
  timeval tv;
  gettimeofday(&tv, nullptr);
  return double(tv.tv_sec) + tv.tv_usec * 1e-6;
}

// ---- The serial model: an independent statement of the documented semantics ----------

struct Val {
  uint64_t a = 0, b = 0;
  unsigned fpe = 0;
};

bool is_s(uint32_t cmd) { return (cmd & 1) == 0; }
int family(uint32_t cmd) { return int(cmd & ~1u); }
bool indexed(uint32_t cmd) {
  int f = family(cmd);
  return f == 0x10 || f == 0x12 || f == 0x18 || f == 0x1a || f == 0x30 || f == 0x32 || f == 0x38 || f == 0x3a;
}
bool fp_cmd(uint32_t cmd) {
  int f = family(cmd);
  return f == 0x18 || f == 0x1a || f == 0x1c || f == 0x38 || f == 0x3a;
}

unsigned fe_bits() {
  int e = std::fetestexcept(FE_ALL_EXCEPT);
  return (e & FE_INVALID ? GNI_CE_FPE_OP_INVAL : 0) | (e & FE_OVERFLOW ? GNI_CE_FPE_OFLOW : 0) |
         (e & FE_UNDERFLOW ? GNI_CE_FPE_UFLOW : 0) | (e & FE_INEXACT ? GNI_CE_FPE_PRECISION : 0);
}

int fe_round(uint32_t modes) {
  if (modes & GNI_CE_MODE_ROUND_UP) return FE_UPWARD;
  if (modes & GNI_CE_MODE_ROUND_DOWN) return FE_DOWNWARD;
  if (modes & GNI_CE_MODE_ROUND_ZERO) return FE_TOWARDZERO;
  return FE_TONEAREST;
}

Val leaf(uint32_t cmd, uint32_t mode, uint64_t first, uint64_t second) {
  const uint64_t m = is_s(cmd) ? 0xFFFFFFFFull : ~0ull;
  Val v;
  v.a = first & m;
  v.b = (indexed(cmd) || (mode & GNI_CEMODE_TWO_OP)) ? second & m : 0;
  v.fpe = (mode >> 1) & 0xF;
  return v;
}

double as_fp(uint32_t cmd, uint64_t v) {
  return is_s(cmd) ? double(std::bit_cast<float>(uint32_t(v))) : std::bit_cast<double>(v);
}
int64_t as_int(uint32_t cmd, uint64_t v) { return is_s(cmd) ? int64_t(int32_t(uint32_t(v))) : int64_t(v); }

uint64_t add_lane(uint32_t cmd, uint32_t modes, uint64_t x, uint64_t y, unsigned& fpe) {
  if (family(cmd) == 0x14) return is_s(cmd) ? (x + y) & 0xFFFFFFFFull : x + y;
  std::fesetround(fe_round(modes));
  std::feclearexcept(FE_ALL_EXCEPT);
  uint64_t out;
  if (is_s(cmd)) {
    volatile float p = std::bit_cast<float>(uint32_t(x)), q = std::bit_cast<float>(uint32_t(y));
    volatile float s = p + q;
    out = std::bit_cast<uint32_t>(float(s));
  } else {
    volatile double p = std::bit_cast<double>(x), q = std::bit_cast<double>(y);
    volatile double s = p + q;
    out = std::bit_cast<uint64_t>(double(s));
  }
  fpe |= fe_bits();
  std::fesetround(FE_TONEAREST);
  return out;
}

Val combine(uint32_t cmd, uint32_t mode, uint32_t modes, Val x, Val y) {
  Val r;
  r.fpe = x.fpe | y.fpe;
  const int f = family(cmd);
  if (indexed(cmd)) {
    const bool min = f == 0x10 || f == 0x18 || f == 0x30 || f == 0x38;
    const bool greatest = f >= 0x30;
    bool take_x;
    if (fp_cmd(cmd) && (std::isnan(as_fp(cmd, x.a)) || std::isnan(as_fp(cmd, y.a)))) {
      r.fpe |= GNI_CE_FPE_OP_INVAL;
      take_x = std::isnan(as_fp(cmd, x.a));
    } else {
      const bool lt = fp_cmd(cmd) ? as_fp(cmd, x.a) < as_fp(cmd, y.a) : as_int(cmd, x.a) < as_int(cmd, y.a);
      const bool gt = fp_cmd(cmd) ? as_fp(cmd, x.a) > as_fp(cmd, y.a) : as_int(cmd, x.a) > as_int(cmd, y.a);
      if (!lt && !gt)
        take_x = greatest ? x.b >= y.b : x.b <= y.b;
      else
        take_x = min ? lt : gt;
    }
    r.a = take_x ? x.a : y.a;
    r.b = take_x ? x.b : y.b;
    return r;
  }
  auto lane = [&](uint64_t p, uint64_t q) -> uint64_t {
    switch (f) {
      case 0x00: return p & q;
      case 0x02: return p | q;
      case 0x04: return p ^ q;
      default: return add_lane(cmd, modes, p, q, r.fpe);
    }
  };
  r.a = lane(x.a, y.a);
  r.b = (mode & GNI_CEMODE_TWO_OP) ? lane(x.b, y.b) : 0;
  return r;
}

// ---- The job ---------------------------------------------------------------------------

struct Job {
  gni_nic_handle_t nic = nullptr;
  gni_cq_handle_t cq = nullptr, ce_cq = nullptr;
  uint32_t my_addr = 0;
  std::vector<uint32_t> addr;  // by rank
  std::vector<int> node_of;    // index of the node (by first rank on it)
  gni_ce_result_t* res = nullptr;  // 16 result structures
  gni_mem_handle_t res_mh{};
};

// A tree: for each channel (owned by a rank), its children in slot order.
struct Child {
  bool vce = false;
  int rank = 0;  // PE: the leaf's rank; VCE: the owner of the child channel
};
struct Tree {
  std::string name;
  std::vector<int> owners;                    // ranks owning a channel
  std::vector<std::vector<Child>> children;   // by owner rank (empty if none)
  std::vector<int> parent;                    // owner rank of the parent channel, -1 root
  std::vector<int> parent_slot;
  std::vector<int> leaf_parent, leaf_slot;    // by rank: channel owner and slot of its leaf edge
  int root = 0;
};

Tree binary_tree(int n) {
  Tree t;
  t.name = "binary";
  t.children.resize(n);
  t.parent.assign(n, -1);
  t.parent_slot.assign(n, 0);
  t.leaf_parent.resize(n);
  t.leaf_slot.assign(n, 0);
  for (int r = 0; r < n; ++r) {
    t.owners.push_back(r);
    t.children[r].push_back({false, r});
    for (int c : {2 * r + 1, 2 * r + 2})
      if (c < n) {
        t.parent[c] = r;
        t.parent_slot[c] = int(t.children[r].size());
        t.children[r].push_back({true, c});
      }
    t.leaf_parent[r] = r;
  }
  return t;
}

// One channel per node (owned by its first rank) with the node's ranks as PE children; the
// root's channel has every other node's channel as a child too while they fit in its 32
// slots (GNI_CE_MAX_CHILDREN); beyond (more than about 30 nodes), the node channels form a
// tree of up to 16 per parent.
Tree flat_tree(const std::vector<int>& node_of) {
  const int n = int(node_of.size());
  Tree t;
  t.name = "flat";
  t.children.resize(n);
  t.parent.assign(n, -1);
  t.parent_slot.assign(n, 0);
  t.leaf_parent.resize(n);
  t.leaf_slot.resize(n);
  for (int r = 0; r < n; ++r) {
    const int leader = node_of[r];
    if (leader == r) t.owners.push_back(r);
    t.leaf_parent[r] = leader;
    t.leaf_slot[r] = int(t.children[leader].size());
    t.children[leader].push_back({false, r});
  }
  size_t per_node = 0;
  for (int o : t.owners) per_node = std::max(per_node, t.children[o].size());
  const size_t max_vce = 32 - std::min<size_t>(per_node, 31);
  const size_t fanout = t.owners.size() - 1 <= max_vce ? max_vce : std::min<size_t>(16, max_vce);
  t.name = t.owners.size() - 1 <= max_vce ? "flat" : "node tree";
  for (size_t j = 1; j < t.owners.size(); ++j) {
    const int o = t.owners[j], p = t.owners[(j - 1) / fanout];
    t.parent[o] = p;
    t.parent_slot[o] = int(t.children[p].size());
    t.children[p].push_back({true, o});
  }
  return t;
}

// One channel (rank 0's) with every rank as a PE child: leaves on other nodes than their
// channel.
Tree star_tree(int n) {
  Tree t;
  t.name = "star";
  t.owners.push_back(0);
  t.children.resize(n);
  t.parent.assign(n, -1);
  t.parent_slot.assign(n, 0);
  t.leaf_parent.assign(n, 0);
  t.leaf_slot.resize(n);
  for (int r = 0; r < n; ++r) {
    t.leaf_slot[r] = r;
    t.children[0].push_back({false, r});
  }
  return t;
}

struct Post {
  uint32_t cmd, mode;
  std::function<uint64_t(int)> first, second;
};

Val eval(const Tree& t, int owner, const Post& p, uint32_t modes) {
  Val acc;
  bool firstc = true;
  for (const Child& c : t.children[owner]) {
    Val v = c.vce ? eval(t, c.rank, p, modes)
                  : leaf(p.cmd, p.mode, p.first(c.rank), p.second(c.rank));
    acc = firstc ? v : combine(p.cmd, p.mode, modes, acc, v);
    firstc = false;
  }
  return acc;
}

struct Built {
  gni_ce_handle_t ce = nullptr;
  uint32_t ce_id = 0;
  std::vector<gni_ep_handle_t> eps;  // by rank
  gni_ep_handle_t leaf_ep = nullptr;
};

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t dbits(double v) { return std::bit_cast<uint64_t>(v); }
uint64_t fbits(float v) { return std::bit_cast<uint32_t>(v); }

std::vector<uint32_t> all_ids(uint32_t mine) {
  std::vector<uint32_t> v(g_size);
  PMI_Allgather(&mine, v.data(), sizeof mine);
  return v;
}

void build(Job& j, const Tree& t, Built& b, uint32_t modes) {
  b.eps.assign(g_size, nullptr);
  for (int r = 0; r < g_size; ++r) {
    CALL(GNI_EpCreate(j.nic, j.cq, &b.eps[r]));
    CALL(GNI_EpBind(b.eps[r], j.addr[r], uint32_t(r)));
  }
  const bool owner = !t.children[g_rank].empty();
  if (owner && !b.ce) {
    CALL(GNI_CeCreate(j.nic, &b.ce));
    CALL(GNI_CeGetId(b.ce, &b.ce_id));
  }
  std::vector<uint32_t> ids = all_ids(owner ? b.ce_id : ~0u);
  if (owner) {
    std::vector<gni_ep_handle_t> kids;
    for (size_t s = 0; s < t.children[g_rank].size(); ++s) {
      const Child& c = t.children[g_rank][s];
      // A child PE is the EP to that rank (ce_id unused: Cray passes -1); a child VCE names
      // the child's channel.
      gni_ep_handle_t e = b.eps[c.rank];
      if (c.vce) {
        CALL(GNI_EpSetCeAttr(e, ids[c.rank], uint32_t(s), GNI_CE_CHILD_VCE));
      } else if (c.rank != g_rank) {
        CALL(GNI_EpSetCeAttr(e, uint32_t(-1), uint32_t(s), GNI_CE_CHILD_PE));
      } else {
        // Our own leaf edge: the same EP is also the one we post on (see below).
        CALL(GNI_EpSetCeAttr(e, b.ce_id, uint32_t(s), GNI_CE_CHILD_PE));
      }
      kids.push_back(e);
    }
    gni_ep_handle_t parent = nullptr;
    if (t.parent[g_rank] >= 0) {
      parent = b.eps[t.parent[g_rank]];
      CALL(GNI_EpSetCeAttr(parent, ids[t.parent[g_rank]], uint32_t(t.parent_slot[g_rank]), GNI_CE_CHILD_VCE));
    }
    CALL(GNI_CeConfigure(b.ce, kids.data(), uint32_t(kids.size()), parent, j.ce_cq, modes));
  }
  const int lp = t.leaf_parent[g_rank];
  b.leaf_ep = b.eps[lp];
  if (lp != g_rank) CALL(GNI_EpSetCeAttr(b.leaf_ep, ids[lp], uint32_t(t.leaf_slot[g_rank]), GNI_CE_CHILD_PE));
}

void reconfigure(Job& j, const Tree& t, Built& b, uint32_t modes) {
  PMI_Barrier();  // every reduction of the previous configuration has completed everywhere
  if (t.children[g_rank].empty()) return PMI_Barrier(), void();
  std::vector<uint32_t> dummy;
  std::vector<gni_ep_handle_t> kids;
  for (const Child& c : t.children[g_rank]) kids.push_back(b.eps[c.rank]);
  gni_ep_handle_t parent = t.parent[g_rank] >= 0 ? b.eps[t.parent[g_rank]] : nullptr;
  CALL(GNI_CeConfigure(b.ce, kids.data(), uint32_t(kids.size()), parent, j.ce_cq, modes));
  PMI_Barrier();
}

uint32_t g_red = 0x100;

gni_post_descriptor_t make_post(Job& j, int slot, uint32_t cmd, uint32_t mode, uint64_t first, uint64_t second,
                                uint64_t red) {
  gni_post_descriptor_t d{};
  d.type = GNI_POST_CE;
  d.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
  d.dlvr_mode = GNI_DLVMODE_PERFORMANCE;
  d.local_addr = uint64_t(&j.res[slot]);
  d.local_mem_hndl = j.res_mh;
  d.ce_cmd = static_cast<gni_ce_cmd_type_t>(cmd);
  d.ce_mode = mode;
  d.ce_red_id = red;
  d.first_operand = first;
  d.second_operand = second;
  return d;
}

// Waits for the CQ event of a CE post and returns its descriptor.
gni_post_descriptor_t* wait_post(Job& j, gni_cq_entry_t* ev_out = nullptr) {
  gni_cq_entry_t ev = 0;
  gni_return_t rc = GNI_CqWaitEvent(j.cq, 20000, &ev);
  if (rc != GNI_RC_SUCCESS && rc != GNI_RC_TRANSACTION_ERROR) die("GNI_CqWaitEvent (CE result)", rc);
  gni_post_descriptor_t* d = nullptr;
  GNI_GetCompleted(j.cq, ev, &d);
  if (ev_out) *ev_out = ev;
  return d;
}

bool same_value(uint32_t cmd, uint64_t got, uint64_t want) {
  if (fp_cmd(cmd) && std::isnan(as_fp(cmd, got)) && std::isnan(as_fp(cmd, want))) return true;
  return got == want;
}

int run_one(Job& j, const Tree& t, Built& b, const Post& p, uint32_t modes, bool channel_events) {
  const uint64_t red = g_red++;
  gni_post_descriptor_t d = make_post(j, 0, p.cmd, p.mode, p.first(g_rank), p.second(g_rank), red);
  std::memset(&j.res[0], 0, sizeof j.res[0]);
  CALL(GNI_PostFma(b.leaf_ep, &d));
  gni_cq_entry_t ev = 0;
  gni_post_descriptor_t* got = wait_post(j, &ev);
  EXPECT(got == &d, "%s cmd %#x: GetCompleted gave another descriptor", t.name.c_str(), p.cmd);
  EXPECT(GNI_CQ_STATUS_OK(ev), "%s cmd %#x: CQE status %#lx", t.name.c_str(), p.cmd, (unsigned long)GNI_CQ_GET_STATUS(ev));
  gni_return_t rc = GNI_CeCheckResult(&j.res[0], sizeof j.res[0]);
  const Val want = eval(t, t.root, p, modes);
  const gni_ce_result_t& r = j.res[0];
  EXPECT(rc == (want.fpe ? GNI_RC_TRANSACTION_ERROR : GNI_RC_SUCCESS), "%s cmd %#x mode %#x: CeCheckResult %d",
         t.name.c_str(), p.cmd, p.mode, rc);
  EXPECT(gni_ce_res_status_ok(const_cast<gni_ce_result_t*>(&r)), "%s cmd %#x: status %lu", t.name.c_str(), p.cmd,
         (unsigned long)gni_ce_res_get_status(const_cast<gni_ce_result_t*>(&r)));
  EXPECT(gni_ce_res_get_red_id(const_cast<gni_ce_result_t*>(&r)) == (red & 0xFFFFFFFF), "%s cmd %#x: red id %lu",
         t.name.c_str(), p.cmd, (unsigned long)gni_ce_res_get_red_id(const_cast<gni_ce_result_t*>(&r)));
  EXPECT(gni_ce_res_get_fpe(const_cast<gni_ce_result_t*>(&r)) == want.fpe, "%s cmd %#x mode %#x modes %#x: fpe %#lx want %#x",
         t.name.c_str(), p.cmd, p.mode, modes, (unsigned long)gni_ce_res_get_fpe(const_cast<gni_ce_result_t*>(&r)),
         want.fpe);
  EXPECT(same_value(p.cmd, r.result1, want.a) && r.result2 == want.b,
         "%s cmd %#x mode %#x modes %#x: result %#lx %#lx, want %#lx %#lx", t.name.c_str(), p.cmd, p.mode, modes,
         (unsigned long)r.result1, (unsigned long)r.result2, (unsigned long)want.a, (unsigned long)want.b);
  if (channel_events && !t.children[g_rank].empty()) {
    // CQE_ONCOMP: one event per completed reduction at every channel of the tree.
    gni_cq_entry_t ce = 0;
    gni_return_t crc = GNI_CqWaitEvent(j.ce_cq, 20000, &ce);
    EXPECT(crc == GNI_RC_SUCCESS && gni_cq_get_ce_id(ce) == b.ce_id && gni_cq_get_reductn_id(ce) == (red & 0xFFFF),
           "channel event rc %d ce %lu red %lu", crc, (unsigned long)gni_cq_get_ce_id(ce),
           (unsigned long)gni_cq_get_reductn_id(ce));
  }
  return 0;
}

std::vector<Post> all_posts() {
  std::vector<Post> v;
  using U = std::function<uint64_t(int)>;
  for (uint32_t w : {0u, 1u}) {
    for (uint32_t mode : {0u, uint32_t(GNI_CEMODE_TWO_OP)}) {
      v.push_back({GNI_FMA_CE_AND_S + w, mode, U([](int r) { return ~(1ull << (r % 64)); }),
                   U([](int r) { return ~(1ull << ((r * 5 + 3) % 64)); })});
      v.push_back({GNI_FMA_CE_OR_S + w, mode, U([](int r) { return 1ull << ((r * 3) % 64); }),
                   U([](int r) { return 1ull << ((r + 17) % 64); })});
      v.push_back({GNI_FMA_CE_XOR_S + w, mode, U([](int r) { return mix(uint64_t(r)); }),
                   U([](int r) { return mix(uint64_t(r) + 1000); })});
      v.push_back({GNI_FMA_CE_IADD_S + w, mode, U([](int r) { return uint64_t(int64_t(r) * 1000003 - 5); }),
                   U([](int r) { return uint64_t(INT64_MAX / 3 + r); })});  // wraps at 3+ ranks
      v.push_back({0x1c + w, mode, nullptr, nullptr});  // FPADD_S / FPADD: operands below
    }
    // Min/max: few distinct values, so ties are everywhere; indices distinct and unordered.
    for (uint32_t fam : {0x10u, 0x12u, 0x30u, 0x32u}) {
      v.push_back({fam + w, 0, U([](int r) { return uint64_t(int64_t((r * 7) % 5) - 2); }),
                   U([](int r) { return uint64_t((r * 37) % 101 + 1); })});
    }
    for (uint32_t fam : {0x18u, 0x1au, 0x38u, 0x3au}) {
      v.push_back({fam + w, 0, nullptr, U([](int r) { return uint64_t(200 - r); })});
    }
  }
  // Fill in the FP operands (they depend on the width).
  for (Post& p : v) {
    const bool s = is_s(p.cmd);
    if (family(p.cmd) == 0x1c) {
      p.first = s ? U([](int r) { return fbits(0.1f * float(r + 1)); }) : U([](int r) { return dbits(0.1 * (r + 1)); });
      p.second = s ? U([](int r) { return fbits(float(r + 1)); }) : U([](int r) { return dbits(double(r + 1)); });
    } else if (fp_cmd(p.cmd)) {
      p.first = s ? U([](int r) { return fbits(float((r * 5) % 7) - 3.0f); })
                  : U([](int r) { return dbits(double((r * 5) % 7) - 3.0); });
    }
  }
  return v;
}

int conformance(Job& j) {
  const double t0 = now_s();
  std::vector<Tree> trees = {binary_tree(g_size), flat_tree(j.node_of)};
  std::vector<Post> posts = all_posts();
  int reductions = 0;
  for (Tree& t : trees) {
    Built b;
    const uint32_t near = GNI_CE_MODE_ROUND_NEAR | GNI_CE_MODE_CQE_ONCOMP;
    build(j, t, b, near);
    PMI_Barrier();
    for (const Post& p : posts) run_one(j, t, b, p, near, true), ++reductions;
    // Rounding: 1 + a few tiny terms (and the negatives), exact only in some modes.
    Post tiny{GNI_FMA_CE_FPADD, GNI_CEMODE_TWO_OP,
              [](int r) { return dbits(r == 0 ? 1.0 : std::ldexp(1.0, -60) * (r % 3 + 1)); },
              [](int r) { return dbits(r == 0 ? -1.0 : -std::ldexp(1.0, -58) * (r % 2 + 1)); }};
    Post tiny_s{GNI_FMA_CE_FPADD_S, GNI_CEMODE_TWO_OP,
                [](int r) { return fbits(r == 0 ? 1.0f : std::ldexp(1.0f, -30) * float(r % 3 + 1)); },
                [](int r) { return fbits(r == 0 ? -1.0f : -std::ldexp(1.0f, -28) * float(r % 2 + 1)); }};
    Post over{GNI_FMA_CE_FPADD, 0, [](int) { return dbits(DBL_MAX / 2); }, [](int) { return uint64_t(0); }};
    Post inval{GNI_FMA_CE_FPADD_S, 0, [](int r) { return fbits(r % 2 ? -INFINITY : INFINITY); },
               [](int) { return uint64_t(0); }};
    Post nan_min{GNI_FMA_CE_FPMIN_LIDX, 0, [](int r) { return dbits(r == g_size - 1 ? NAN : double(r)); },
                 [](int r) { return uint64_t(r); }};
    // An operand that arrives with an exception (GNI_CEMODE_FPE_UFLOW on rank 0's post).
    Post carried{GNI_FMA_CE_IADD, 0, [](int r) { return uint64_t(r); }, [](int) { return uint64_t(0); }};
    for (uint32_t rnd : {uint32_t(GNI_CE_MODE_ROUND_NEAR), uint32_t(GNI_CE_MODE_ROUND_UP),
                         uint32_t(GNI_CE_MODE_ROUND_DOWN), uint32_t(GNI_CE_MODE_ROUND_ZERO)}) {
      const uint32_t modes = rnd | GNI_CE_MODE_CQE_ONERR;
      reconfigure(j, t, b, modes);
      for (const Post* p : {&tiny, &tiny_s, &over}) run_one(j, t, b, *p, modes, false), ++reductions;
      if (rnd == GNI_CE_MODE_ROUND_NEAR) {
        run_one(j, t, b, inval, modes, false);
        run_one(j, t, b, nan_min, modes, false);
        reductions += 2;
        // The FPE bit of a post is per rank: build its expectation by hand.
        const uint64_t red = g_red++;
        gni_post_descriptor_t d = make_post(j, 0, carried.cmd, g_rank == 0 ? GNI_CEMODE_FPE_UFLOW : 0,
                                            uint64_t(g_rank), 0, red);
        std::memset(&j.res[0], 0, sizeof j.res[0]);
        CALL(GNI_PostFma(b.leaf_ep, &d));
        wait_post(j);
        EXPECT(GNI_CeCheckResult(&j.res[0], 0) == GNI_RC_TRANSACTION_ERROR &&
                   gni_ce_res_status_ok(&j.res[0]) && gni_ce_res_get_fpe(&j.res[0]) == GNI_CE_FPE_UFLOW &&
                   j.res[0].result1 == uint64_t(g_size) * uint64_t(g_size - 1) / 2,
               "carried exception: fpe %#lx result %lu", (unsigned long)gni_ce_res_get_fpe(&j.res[0]),
               (unsigned long)j.res[0].result1);
        ++reductions;
      }
    }
    // Back to back on one channel: 8 reductions posted before any result is waited for.
    PMI_Barrier();
    std::vector<gni_post_descriptor_t> ds;
    ds.reserve(8);
    const uint64_t red0 = g_red;
    g_red += 8;
    for (int k = 0; k < 8; ++k) {
      std::memset(&j.res[k], 0, sizeof j.res[k]);
      ds.push_back(make_post(j, k, GNI_FMA_CE_IADD, GNI_CEMODE_TWO_OP, uint64_t(g_rank + k), uint64_t(k), red0 + k));
      CALL(GNI_PostFma(b.leaf_ep, &ds.back()));
    }
    for (int k = 0; k < 8; ++k) wait_post(j);
    for (int k = 0; k < 8; ++k) {
      const uint64_t want = uint64_t(g_size) * uint64_t(g_size - 1) / 2 + uint64_t(k) * g_size;
      EXPECT(GNI_CeCheckResult(&j.res[k], 0) == GNI_RC_SUCCESS && j.res[k].result1 == want &&
                 j.res[k].result2 == uint64_t(k) * g_size && gni_ce_res_get_red_id(&j.res[k]) == red0 + k,
             "back-to-back %d: %lu %lu red %lu", k, (unsigned long)j.res[k].result1, (unsigned long)j.res[k].result2,
             (unsigned long)gni_ce_res_get_red_id(&j.res[k]));
    }
    reductions += 8;
    // CQE_ONERR: no channel event for any of these good reductions.
    gni_cq_entry_t e = 0;
    if (!t.children[g_rank].empty()) EXPECT(GNI_CqGetEvent(j.ce_cq, &e) == GNI_RC_NOT_DONE, "unexpected channel event");
    // Children posting different commands in one reduction: everybody gets the mismatch
    // status (3) and no result; each channel that combined them reports it (CQE_ONERR).
    if (g_size > 1) {
      PMI_Barrier();
      const uint64_t red = g_red++;
      std::memset(&j.res[0], 0, sizeof j.res[0]);
      gni_post_descriptor_t d = make_post(j, 0, g_rank == g_size - 1 ? GNI_FMA_CE_XOR : GNI_FMA_CE_IADD, 0,
                                          uint64_t(g_rank), 0, red);
      CALL(GNI_PostFma(b.leaf_ep, &d));
      gni_cq_entry_t ev = 0;
      wait_post(j, &ev);
      EXPECT(!GNI_CQ_STATUS_OK(ev) && GNI_CeCheckResult(&j.res[0], 0) == GNI_RC_TRANSACTION_ERROR &&
                 gni_ce_res_get_status(&j.res[0]) == 3,
             "differing commands: status %lu", (unsigned long)gni_ce_res_get_status(&j.res[0]));
      ++reductions;
      PMI_Barrier();  // every result is out, so every channel event is in
      if (!t.children[g_rank].empty()) {
        int errors = 0;
        gni_return_t rc;
        while ((rc = GNI_CqGetEvent(j.ce_cq, &e)) == GNI_RC_SUCCESS || rc == GNI_RC_TRANSACTION_ERROR)
          errors += !GNI_CQ_STATUS_OK(e);
        // The channel where the commands meet reports the mismatch, and every channel above
        // and below it the error travelling through.
        EXPECT(errors >= 1, "differing commands: %d error events on the channel CQ", errors);
      }
    }
    PMI_Barrier();
    if (b.ce) CALL(GNI_CeDestroy(b.ce));
    for (gni_ep_handle_t ep : b.eps) GNI_EpDestroy(ep);
  }

  // Error cases, each rank on its own.
  {
    gni_ep_handle_t self_ep, plain;
    CALL(GNI_EpCreate(j.nic, j.cq, &self_ep));
    CALL(GNI_EpBind(self_ep, j.my_addr, uint32_t(g_rank)));
    CALL(GNI_EpCreate(j.nic, j.cq, &plain));
    CALL(GNI_EpBind(plain, j.my_addr, uint32_t(g_rank)));
    gni_ce_handle_t u;
    uint32_t uid;
    CALL(GNI_CeCreate(j.nic, &u));
    CALL(GNI_CeGetId(u, &uid));
    CALL(GNI_EpSetCeAttr(self_ep, uid, 0, GNI_CE_CHILD_PE));
    gni_post_descriptor_t d = make_post(j, 0, 0x7, 0, 1, 0, 1);  // 0x7 is no CE command
    EXPECT(GNI_PostFma(self_ep, &d) == GNI_RC_INVALID_PARAM, "bad command accepted");
    d = make_post(j, 0, GNI_FMA_CE_IADD, 0x40, 1, 0, 1);  // unknown post mode bit
    EXPECT(GNI_PostFma(self_ep, &d) == GNI_RC_INVALID_PARAM, "bad post mode accepted");
    d = make_post(j, 0, GNI_FMA_CE_IADD, 0, 1, 0, 1);
    EXPECT(GNI_PostFma(plain, &d) == GNI_RC_INVALID_PARAM, "post on an EP without CE attributes accepted");
    d.local_mem_hndl.qword1 ^= 0x1234;  // not our registration
    EXPECT(GNI_PostFma(self_ep, &d) == GNI_RC_INVALID_PARAM, "unregistered result buffer accepted");
    EXPECT(GNI_EpSetCeAttr(plain, 0, GNI_CE_MAX_CHILDREN, GNI_CE_CHILD_PE) == GNI_RC_INVALID_PARAM, "child id 32");
    EXPECT(GNI_EpSetCeAttr(plain, 0, 0, GNI_CE_CHILD_UNUSED) == GNI_RC_INVALID_PARAM, "child type unused");
    gni_ep_handle_t kids[1] = {self_ep};
    EXPECT(GNI_CeConfigure(u, kids, 1, nullptr, nullptr, GNI_CE_MODE_ROUND_UP | GNI_CE_MODE_ROUND_DOWN) ==
               GNI_RC_INVALID_PARAM, "two rounding modes");
    EXPECT(GNI_CeConfigure(u, kids, 0, nullptr, nullptr, 0) == GNI_RC_INVALID_PARAM, "no children");
    EXPECT(GNI_CeConfigure(u, kids, 1, plain, nullptr, 0) == GNI_RC_INVALID_PARAM, "parent EP without attributes");
    gni_ce_result_t zero{};
    EXPECT(GNI_CeCheckResult(&zero, 0) == GNI_RC_NOT_DONE, "a zeroed result is not done");
    EXPECT(GNI_CeCheckResult(nullptr, 0) == GNI_RC_INVALID_PARAM, "NULL result");
    // The channel exists but was never configured: an error completion, not a hang.
    d = make_post(j, 0, GNI_FMA_CE_IADD, 0, 1, 0, 77);
    std::memset(&j.res[0], 0, sizeof j.res[0]);
    CALL(GNI_PostFma(self_ep, &d));
    gni_cq_entry_t ev = 0;
    wait_post(j, &ev);
    EXPECT(!GNI_CQ_STATUS_OK(ev), "unconfigured channel: CQE without error");
    EXPECT(GNI_CeCheckResult(&j.res[0], 0) == GNI_RC_TRANSACTION_ERROR && !gni_ce_res_status_ok(&j.res[0]) &&
               gni_ce_res_get_red_id(&j.res[0]) == 77,
           "unconfigured channel: result status %lu", (unsigned long)gni_ce_res_get_status(&j.res[0]));
    CALL(GNI_CeDestroy(u));
    GNI_EpDestroy(self_ep);
    GNI_EpDestroy(plain);
  }
  PMI_Barrier();
  int nodes = 0;
  for (int r = 0; r < g_size; ++r) nodes += j.node_of[r] == r;
  if (g_rank == 0)
    std::printf("ce conformance: %d ranks on %d nodes, %d reductions per rank (26 commands, TWO_OP, 4 rounding "
                "modes, binary and flat trees) verified in %.2f s\n",
                g_size, nodes, reductions, now_s() - t0);
  return 0;
}

// The last rank leaves after one good reduction; the others' next reduction must fail
// within a second of its exit (binary tree: its parent waits for it).
// early: a star tree, and the last rank leaves before its first post (its channel knows it
// only from GNI_EpSetCeAttr on its side).
int die_test(Job& j, bool stall, bool early) {
  if (g_size < 3) die("die mode needs 3 ranks", 0);
  if (early && g_size > int(GNI_CE_MAX_CHILDREN)) die("die-early needs at most GNI_CE_MAX_CHILDREN ranks", 0);
  Tree t = early ? star_tree(g_size) : binary_tree(g_size);
  Built b;
  build(j, t, b, GNI_CE_MODE_ROUND_NEAR | GNI_CE_MODE_CQE_ONERR);
  PMI_Barrier();
  if (!early) {
    Post p{GNI_FMA_CE_IADD, 0, [](int r) { return uint64_t(r); }, [](int) { return uint64_t(0); }};
    run_one(j, t, b, p, GNI_CE_MODE_ROUND_NEAR, false);
    PMI_Barrier();
  }
  if (g_rank == g_size - 1 && !stall) {
    std::fflush(stdout);
    _exit(0);  // dies: no PMI_Finalize, no detach
  }
  if (g_rank == g_size - 1) {
    // Our daemon goes silent: found by its socket's peer credentials, stopped, resumed
    // after the others had their error.
    const char* dir = std::getenv("NICEMU_RUNDIR");
    const char* node = std::getenv("NICEMU_NODE");
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s/nic-%s.sock", dir ? dir : "", node ? node : "0");
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    ucred cr{};
    socklen_t len = sizeof cr;
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || cr.pid <= 0)
      die("finding our daemon", 0);
    ::close(fd);
    kill(cr.pid, SIGSTOP);
    sleep(3);
    kill(cr.pid, SIGCONT);
    std::fflush(stdout);
    _exit(0);
  }
  const double t0 = now_s();
  gni_post_descriptor_t d = make_post(j, 0, GNI_FMA_CE_IADD, 0, 1, 0, 99);
  std::memset(&j.res[0], 0, sizeof j.res[0]);
  CALL(GNI_PostFma(b.leaf_ep, &d));
  gni_cq_entry_t ev = 0;
  wait_post(j, &ev);
  const double took = now_s() - t0;
  EXPECT(!GNI_CQ_STATUS_OK(ev) && GNI_CeCheckResult(&j.res[0], 0) == GNI_RC_TRANSACTION_ERROR &&
             !gni_ce_res_status_ok(&j.res[0]),
         "a member died: no error completion (status %lu)", (unsigned long)gni_ce_res_get_status(&j.res[0]));
  EXPECT(took < 1.5, "the error took %.3f s", took);
  std::printf("rank %d: %s reported as an error completion in %.3f s\n", g_rank,
              stall ? "a silent daemon" : early ? "death of a leaf that never posted" : "member death", took);
  if (b.ce) GNI_CeDestroy(b.ce);
  for (gni_ep_handle_t ep : b.eps) GNI_EpDestroy(ep);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool stall = argc > 1 && std::strcmp(argv[1], "stall") == 0;
  const bool early = argc > 1 && std::strcmp(argv[1], "die-early") == 0;
  const bool die_mode = stall || early || (argc > 1 && std::strcmp(argv[1], "die") == 0);
  int spawned = 0;
  if (PMI_Init(&spawned) != PMI_SUCCESS || PMI_Get_rank(&g_rank) != PMI_SUCCESS ||
      PMI_Get_size(&g_size) != PMI_SUCCESS) {
    std::fprintf(stderr, "ce_conformance: PMI_Init failed\n");
    return 1;
  }
  const char* ptag_s = std::getenv("PMI_GNI_PTAG");
  const char* cookie_s = std::getenv("PMI_GNI_COOKIE");
  if (!ptag_s || !cookie_s) die("PMI_GNI_PTAG / PMI_GNI_COOKIE", 0);
  Job j;
  gni_cdm_handle_t cdm;
  CALL(GNI_CdmCreate(uint32_t(g_rank), uint8_t(std::strtoul(ptag_s, nullptr, 0)),
                     uint32_t(std::strtoul(cookie_s, nullptr, 0)), 0, &cdm));
  CALL(GNI_CdmAttach(cdm, 0, &j.my_addr, &j.nic));
  gni_nic_device_t dev = GNI_DEVICE_ARIES;
  CALL(GNI_GetDeviceType(&dev));
  if (dev == GNI_DEVICE_GEMINI) {
    gni_ce_handle_t ce = nullptr;
    EXPECT(GNI_CeCreate(j.nic, &ce) == GNI_RC_ILLEGAL_OP, "Gemini: GNI_CeCreate");
    gni_ce_result_t r{};
    EXPECT(GNI_CeCheckResult(&r, 0) == GNI_RC_ILLEGAL_OP, "Gemini: GNI_CeCheckResult");
    if (g_rank == 0 && !g_fails) std::printf("ce conformance: Gemini device, every CE call GNI_RC_ILLEGAL_OP\n");
    GNI_CdmDestroy(cdm);
    PMI_Finalize();
    return g_fails ? 1 : 0;
  }
  CALL(GNI_CqCreate(j.nic, 256, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &j.cq));
  CALL(GNI_CqCreate(j.nic, 256, 0, GNI_CQ_BLOCKING, nullptr, nullptr, &j.ce_cq));
  j.addr.resize(g_size);
  PMI_Allgather(&j.my_addr, j.addr.data(), sizeof j.my_addr);
  // Nodes: ranks sharing a NIC address; the first of them owns the node's channel.
  j.node_of.resize(g_size);
  for (int r = 0; r < g_size; ++r) {
    j.node_of[r] = r;
    for (int q = 0; q < r; ++q)
      if (j.addr[q] == j.addr[r]) {
        j.node_of[r] = q;
        break;
      }
  }
  if (posix_memalign(reinterpret_cast<void**>(&j.res), 64, 16 * sizeof(gni_ce_result_t)) != 0) die("memalign", 0);
  std::memset(j.res, 0, 16 * sizeof(gni_ce_result_t));
  CALL(GNI_MemRegister(j.nic, uint64_t(j.res), 16 * sizeof(gni_ce_result_t), nullptr, GNI_MEM_READWRITE, uint32_t(-1),
                       &j.res_mh));
  int rc = die_mode ? die_test(j, stall, early) : conformance(j);
  if (g_fails) std::fprintf(stderr, "rank %d: %d checks failed\n", g_rank, g_fails);
  GNI_MemDeregister(j.nic, &j.res_mh);
  std::free(j.res);
  GNI_CqDestroy(j.cq);
  GNI_CqDestroy(j.ce_cq);
  GNI_CdmDestroy(cdm);
  PMI_Finalize();
  return rc || g_fails ? 1 : 0;
}
