// Integration tests of chained transactions (fact sheet §12.4, §12.5) against real daemons:
// GNI_CtPostFma PUT, GET and AMO chains whose elements name EPs to targets on the
// initiator's node and on another node, one completion per chain with the first
// descriptor, an error in one element failing the chain, every parameter check refusing
// the whole chain before anything runs; GNI_CtPostCqWrite chains.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "harness.h"
#include "nicemu/abi/cq_entry.h"

using namespace harness;
namespace cqe = nicemu::abi::cqe;

namespace {

struct Info {
  uint32_t addr, inst;
  uint64_t buf;            // 4 KiB, remote events to the target's rcq
  gni_mem_handle_t buf_h;
  gni_mem_handle_t nocq_h; // the same buffer, registered without a CQ
};

// What the initiator reports to the targets when it is done: expected remote events and
// CQ-write values per target.
struct Expect {
  uint32_t remote_events;
  uint32_t cqw_count;
  uint64_t cqw[4];
};

struct Target {
  Gni g;
  alignas(64) static inline uint64_t buf[512];

  Info open(uint32_t inst, Cred c) {
    CHILD_CHECK(g.open(inst, c) == GNI_RC_SUCCESS);
    std::memset(buf, 0, sizeof buf);
    Info i{g.addr, inst, uint64_t(buf), {}, {}};
    i.buf_h = mem_register(g.nic, i.buf, sizeof buf, g.rcq);
    i.nocq_h = mem_register(g.nic, i.buf, sizeof buf);
    return i;
  }

  // Remote events are POST events carrying the initiator EP's remote event data; CQ
  // writes carry their value. Anything beyond what was announced fails the test.
  void check(const Expect& x, uint32_t remote_data) {
    uint32_t cqw = 0;
    for (uint32_t k = 0; k < x.remote_events + x.cqw_count; ++k) {
      gni_cq_entry_t e = 0;
      CHILD_CHECK(GNI_CqWaitEvent(g.rcq, 5000, &e) == GNI_RC_SUCCESS);
      if (GNI_CQ_GET_INST_ID(e) == remote_data) continue;
      CHILD_CHECK(cqw < x.cqw_count);
      CHILD_CHECK(GNI_CQ_GET_DATA(e) == x.cqw[cqw]);
      ++cqw;
    }
    CHILD_CHECK(cqw == x.cqw_count);
    gni_cq_entry_t e = 0;
    CHILD_CHECK(GNI_CqGetEvent(g.rcq, &e) == GNI_RC_NOT_DONE);
  }
};

constexpr uint32_t kRemoteData = 0xABCD0001;  // remote event data of the initiator's EPs

// The chain's first descriptor: make_desc with a post id that its one completion carries.
gni_post_descriptor_t first(gni_post_type_t type, uint64_t local, gni_mem_handle_t lh, uint64_t remote,
                            gni_mem_handle_t rh, uint64_t len) {
  gni_post_descriptor_t d = make_desc(type, local, lh, remote, rh, len);
  d.post_id = 0x1234567;
  return d;
}

// Waits for the chain's one completion: it must carry `d`; returns its status. A second
// event for the same chain fails the test.
uint64_t complete(Gni& g, gni_post_descriptor_t& d) {
  const uint64_t status = wait_completion(g.cq, d, 5000);
  CHILD_CHECK(d.post_id == 0x1234567);
  gni_cq_entry_t more = 0;
  CHILD_CHECK(GNI_CqGetEvent(g.cq, &more) == GNI_RC_NOT_DONE);
  return status;
}

int initiator(Cred c, Oob& o1, Oob& o2) {
  Gni g = open_gni(200, c);
  const Info t1 = o1.recv<Info>(0), t2 = o2.recv<Info>(0);
  gni_ep_handle_t e1, e2, unbound;
  for (auto [ep, t] : {std::pair{&e1, &t1}, std::pair{&e2, &t2}}) {
    CHILD_CHECK(GNI_EpCreate(g.nic, g.cq, ep) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpBind(*ep, t->addr, t->inst) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_EpSetEventData(*ep, 0x77, kRemoteData) == GNI_RC_SUCCESS);
  }
  CHILD_CHECK(GNI_EpCreate(g.nic, g.cq, &unbound) == GNI_RC_SUCCESS);
  Expect x1{}, x2{};

  alignas(64) static char src[512], dst[512];
  gni_mem_handle_t dst_h{};
  dst_h = mem_register(g.nic, uint64_t(dst), sizeof dst);
  for (int i = 0; i < 512; ++i) src[i] = char(i * 7 + 1);

  // PUT chain: t1[0,64), t2[8,108), t1[256,260), a zero-length element, with remote events.
  auto d = first(GNI_POST_FMA_PUT, uint64_t(src), {}, t1.buf, t1.buf_h, 64);
  d.cq_mode |= GNI_CQMODE_REMOTE_EVENT;
  gni_ct_put_post_descriptor_t p[3]{};
  p[0] = {&p[1], e2, 100, t2.buf + 8, t2.buf_h, uint64_t(src + 64)};
  p[1] = {&p[2], e1, 4, t1.buf + 256, t1.buf_h, uint64_t(src + 200)};
  p[2] = {nullptr, e2, 0, t2.buf, t2.buf_h, uint64_t(src)};
  d.next_descr = &p[0];
  CHILD_CHECK(GNI_CtPostFma(e1, &d) == GNI_RC_SUCCESS);
  CHILD_CHECK(complete(g, d) == 0);
  CHILD_CHECK(d.next_descr == &p[0] && p[0].next_descr == &p[1]);  // the caller's links stay
  x1.remote_events += 2;
  x2.remote_events += 2;
  uint32_t stat = 0;
  CHILD_CHECK(GNI_GetNicStat(g.nic, GNI_STAT_FMA_LAUNCH_COUNT, &stat) == GNI_RC_SUCCESS && stat == 4);

  // GET chain reading all of it back: first on e2, elements on e1 and e2.
  std::memset(dst, 0, sizeof dst);
  auto gd = first(GNI_POST_FMA_GET, uint64_t(dst), dst_h, t2.buf + 8, t2.buf_h, 100);
  gni_ct_get_post_descriptor_t q[2]{};
  q[0] = {&q[1], e1, 64, t1.buf, t1.buf_h, uint64_t(dst + 128), dst_h};
  q[1] = {nullptr, e1, 4, t1.buf + 256, t1.buf_h, uint64_t(dst + 300), dst_h};
  gd.next_descr = &q[0];
  CHILD_CHECK(GNI_CtPostFma(e2, &gd) == GNI_RC_SUCCESS);
  CHILD_CHECK(complete(g, gd) == 0);
  CHILD_CHECK(std::memcmp(dst, src + 64, 100) == 0);
  CHILD_CHECK(std::memcmp(dst + 128, src, 64) == 0);
  CHILD_CHECK(std::memcmp(dst + 300, src + 200, 4) == 0);

  // AMO chain: fetching adds on both targets, a non-fetching add, a 4-byte fetching add.
  alignas(8) static uint64_t res[4];
  gni_mem_handle_t res_h{};
  res_h = mem_register(g.nic, uint64_t(res), sizeof res);
  auto ad = first(GNI_POST_AMO, uint64_t(&res[0]), res_h, t1.buf + 1024, t1.buf_h, 8);
  ad.amo_cmd = GNI_FMA_ATOMIC_FADD;
  ad.first_operand = 5;
  gni_ct_amo_post_descriptor_t a[3]{};
  a[0] = {&a[1], e2, 8, t2.buf + 1024, t2.buf_h, uint64_t(&res[1]), res_h, GNI_FMA_ATOMIC2_FIADD, 9, 0};
  a[1] = {&a[2], e1, 8, t1.buf + 1024, t1.buf_h, 0, {}, GNI_FMA_ATOMIC_ADD, 100, 0};
  a[2] = {nullptr, e2, 4, t2.buf + 1032, t2.buf_h, uint64_t(&res[2]), res_h, GNI_FMA_ATOMIC2_FIADD_S, 3, 0};
  ad.next_descr = &a[0];
  for (int round = 0; round < 2; ++round) {
    CHILD_CHECK(GNI_CtPostFma(e1, &ad) == GNI_RC_SUCCESS);
    CHILD_CHECK(complete(g, ad) == 0);
    CHILD_CHECK(res[0] == uint64_t(round * 105));
    CHILD_CHECK(res[1] == uint64_t(round * 9));
    CHILD_CHECK(res[2] == uint64_t(round * 3));
  }

  // An element out of bounds fails the chain; the good elements still ran. Not over the ofi
  // fabric: there bounds are the provider's, by page (docs/ofi-fabric.md, Memory handles).
  if (!across_hosts_ofi()) {
    std::memset(dst, 0, sizeof dst);
    auto bd = first(GNI_POST_FMA_PUT, uint64_t(src + 300), {}, t1.buf + 512, t1.buf_h, 16);
    gni_ct_put_post_descriptor_t bp[2]{};
    bp[0] = {&bp[1], e2, 16, t2.buf + 4096 - 8, t2.buf_h, uint64_t(src)};  // 8 bytes past the end
    bp[1] = {nullptr, e2, 16, t2.buf + 512, t2.buf_h, uint64_t(src + 316)};
    bd.next_descr = &bp[0];
    CHILD_CHECK(GNI_CtPostFma(e1, &bd) == GNI_RC_SUCCESS);
    CHILD_CHECK(complete(g, bd) == cqe::kErrBounds);
    auto check = first(GNI_POST_FMA_GET, uint64_t(dst), dst_h, t1.buf + 512, t1.buf_h, 16);
    gni_ct_get_post_descriptor_t cq1{nullptr, e2, 16, t2.buf + 512, t2.buf_h, uint64_t(dst + 16), dst_h};
    check.next_descr = &cq1;
    CHILD_CHECK(GNI_CtPostFma(e1, &check) == GNI_RC_SUCCESS);
    CHILD_CHECK(complete(g, check) == 0);
    CHILD_CHECK(std::memcmp(dst, src + 300, 32) == 0);
  }

  // Parameter checks: each refuses the whole chain; nothing runs, no event appears.
  auto refused = [&](gni_post_descriptor_t& r, gni_ep_handle_t ep, gni_return_t want) {
    uint32_t before = 0, after = 0;
    GNI_GetNicStat(g.nic, GNI_STAT_FMA_LAUNCH_COUNT, &before);
    CHILD_CHECK(GNI_CtPostFma(ep, &r) == want);
    GNI_GetNicStat(g.nic, GNI_STAT_FMA_LAUNCH_COUNT, &after);
    CHILD_CHECK(before == after);
    gni_cq_entry_t e = 0;
    CHILD_CHECK(GNI_CqGetEvent(g.cq, &e) == GNI_RC_NOT_DONE);
  };
  gni_ct_put_post_descriptor_t z{nullptr, e2, 8, t2.buf, t2.buf_h, uint64_t(src)};
  auto bad = first(GNI_POST_FMA_PUT_W_SYNCFLAG, uint64_t(src), {}, t1.buf, t1.buf_h, 8);
  refused(bad, e1, GNI_RC_INVALID_PARAM);  // only PUT, GET and AMO chain
  bad.type = GNI_POST_RDMA_PUT;
  refused(bad, e1, GNI_RC_INVALID_PARAM);
  bad.type = GNI_POST_FMA_GET_W_FLAG;
  refused(bad, e1, GNI_RC_INVALID_PARAM);
  bad = first(GNI_POST_FMA_PUT, uint64_t(src), {}, t1.buf, t1.buf_h, 8);
  bad.next_descr = &z;
  bad.dlvr_mode = GNI_DLVMODE_ORDERED_TAIL;
  refused(bad, e1, GNI_RC_INVALID_PARAM);
  bad.dlvr_mode = GNI_DLVMODE_IN_ORDER;
  refused(bad, unbound, GNI_RC_INVALID_PARAM);
  CHILD_CHECK(GNI_CtPostFma(nullptr, &bad) == GNI_RC_INVALID_PARAM);
  CHILD_CHECK(GNI_CtPostFma(e1, nullptr) == GNI_RC_INVALID_PARAM);
  z.ep_hndl = unbound;
  refused(bad, e1, GNI_RC_INVALID_PARAM);
  z.ep_hndl = nullptr;
  refused(bad, e1, GNI_RC_INVALID_PARAM);
  {
    // An EP of another NIC handle (a second CDM of this process).
    Gni other = open_gni(201, c);
    gni_ep_handle_t foreign = bound_ep(other.nic, other.cq, t2.addr, t2.inst);
    z.ep_hndl = foreign;
    refused(bad, e1, GNI_RC_INVALID_PARAM);
    CHILD_CHECK(GNI_EpDestroy(foreign) == GNI_RC_SUCCESS);
    CHILD_CHECK(GNI_CdmDestroy(other.cdm) == GNI_RC_SUCCESS);
  }
  z.ep_hndl = e2;
  z.next_descr = &z;  // a cycle
  refused(bad, e1, GNI_RC_INVALID_PARAM);
  z.next_descr = nullptr;
  // Over 1 GiB in total (lengths only: nothing is ever read).
  bad.length = 600u << 20;
  z.length = 500u << 20;
  refused(bad, e1, GNI_RC_SIZE_ERROR);
  bad.length = 8;
  z.length = 8;
  bad.cq_mode = GNI_CQMODE_DUAL_EVENTS;  // the CDM lacks GNI_CDM_MODE_DUAL_EVENTS
  refused(bad, e1, GNI_RC_INVALID_PARAM);
  bad.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
  // GET elements: alignment and zero length, in an element rather than the first.
  auto gb = first(GNI_POST_FMA_GET, uint64_t(dst), dst_h, t1.buf, t1.buf_h, 8);
  gni_ct_get_post_descriptor_t ge{nullptr, e2, 8, t2.buf + 2, t2.buf_h, uint64_t(dst), dst_h};
  gb.next_descr = &ge;
  refused(gb, e1, GNI_RC_ALIGNMENT_ERROR);
  ge.remote_addr = t2.buf;
  ge.length = 6;
  refused(gb, e1, GNI_RC_ALIGNMENT_ERROR);
  ge.length = 0;
  refused(gb, e1, GNI_RC_INVALID_PARAM);
  // AMO elements: alignment, opcode, operand size.
  auto ab = first(GNI_POST_AMO, 0, {}, t1.buf, t1.buf_h, 8);
  ab.amo_cmd = GNI_FMA_ATOMIC_ADD;
  gni_ct_amo_post_descriptor_t ae{nullptr, e2, 8, t2.buf + 4, t2.buf_h, 0, {}, GNI_FMA_ATOMIC_ADD, 1, 0};
  ab.next_descr = &ae;
  refused(ab, e1, GNI_RC_ALIGNMENT_ERROR);
  ae.remote_addr = t2.buf;
  ae.amo_cmd = gni_fma_cmd_type_t(0x7FF);
  refused(ab, e1, GNI_RC_INVALID_PARAM);
  ae.amo_cmd = GNI_FMA_ATOMIC_ADD;
  ae.length = 4;
  refused(ab, e1, GNI_RC_INVALID_PARAM);

  // CQ-write chain: t1, t2, t1; then one with an element whose handle has no CQ.
  auto w = first(GNI_POST_CQWRITE, 0, {}, 0, t1.buf_h, 0);
  w.cqwrite_value = 0x111111;
  gni_ct_cqw_post_descriptor_t cw[2]{};
  cw[0] = {&cw[1], e2, t2.buf_h, 0x222222};
  cw[1] = {nullptr, e1, t1.buf_h, 0xFFFF333333333333ull};  // only 48 bits arrive
  w.next_descr = &cw[0];
  CHILD_CHECK(GNI_CtPostCqWrite(e1, &w) == GNI_RC_SUCCESS);
  CHILD_CHECK(complete(g, w) == 0);
  x1.cqw[x1.cqw_count++] = 0x111111;
  x1.cqw[x1.cqw_count++] = 0x333333333333ull;
  x2.cqw[x2.cqw_count++] = 0x222222;
  cw[1].remote_mem_hndl = t1.nocq_h;
  CHILD_CHECK(GNI_CtPostCqWrite(e1, &w) == GNI_RC_SUCCESS);
  CHILD_CHECK(complete(g, w) == cqe::kErrProtection);
  x1.cqw[x1.cqw_count++] = 0x111111;
  x2.cqw[x2.cqw_count++] = 0x222222;
  w.type = GNI_POST_FMA_PUT;
  CHILD_CHECK(GNI_CtPostCqWrite(e1, &w) == GNI_RC_INVALID_PARAM);
  w.type = GNI_POST_CQWRITE;
  cw[0].ep_hndl = unbound;
  CHILD_CHECK(GNI_CtPostCqWrite(e1, &w) == GNI_RC_INVALID_PARAM);

  o1.send(0, x1);
  o2.send(0, x2);
  CHILD_CHECK(o1.recv<int>(0) == 1 && o2.recv<int>(0) == 1);
  return 0;
}

}  // namespace

TEST_CASE_FIXTURE(TwoNodes, "GNI_CtPostFma and GNI_CtPostCqWrite: chains over EPs to two nodes, one completion each") {
  Oob o1, o2;
  auto target = [&](int node, uint32_t inst, Oob& o, bool first_target) {
    return cl.spawn(node, [&, inst, first_target] {
      Target t;
      o.send(1, t.open(inst, c));
      Expect x = o.recv<Expect>(1);
      t.check(x, kRemoteData);
      // The AMO chains' totals (the data of the PUT chains was read back by GET chains).
      const uint64_t* b = Target::buf;
      if (first_target) {
        CHILD_CHECK(b[128] == 210);  // 2 x (5 + 100)
      } else {
        CHILD_CHECK(b[128] == 18);  // 2 x 9
        CHILD_CHECK(b[129] == 6);   // 2 x 3, by the 4-byte form into the low half
      }
      o.send(1, 1);
      return 0;
    });
  };
  pid_t t1 = target(0, 100, o1, true);
  pid_t t2 = target(1, 101, o2, false);
  pid_t in = cl.spawn(0, [&] { return initiator(c, o1, o2); });
  CHECK(cl.wait(in, 60) == 0);
  CHECK(cl.wait(t1, 60) == 0);
  CHECK(cl.wait(t2, 60) == 0);
  // Across hosts (chained-fabric) the chains went through node 0's daemon; with the daemons
  // on ofi (chained-fabric-ofi) rank to rank, CQ-write chains too, all but the PUT chain with
  // a zero-length member (the port takes no zero-length post: docs/ofi-fabric.md).
  if (cl.fabric()) {
    auto st = cl.status(0);
    const uint64_t chains = st["remote_ops"]["initiator"]["chains"].get<uint64_t>();
    if (across_hosts_ofi()) {
      CHECK(chains == 1);
      CHECK(st["ofi"]["ops"].get<uint64_t>() > 0);
    } else {
      CHECK(chains > 0);
    }
  }
}

TEST_CASE_FIXTURE(OneNode, "GNI_CtPostFma: 1 MiB in total when the CDM shares FMA descriptors") {
  pid_t p = cl.spawn(0, [&] {
    Gni g = open_gni(5, c, GNI_CDM_MODE_ERR_NO_KILL | GNI_CDM_MODE_FMA_SHARED);
    static char buf[2 << 20];
    gni_mem_handle_t h{};
    h = mem_register(g.nic, uint64_t(buf), sizeof buf);
    gni_ep_handle_t ep = bound_ep(g.nic, g.cq, g.addr, 5);
    static char src[1 << 20];
    std::memset(src, 0x3C, sizeof src);
    auto d = first(GNI_POST_FMA_PUT, uint64_t(src), {}, uint64_t(buf), h, (1 << 20) - 8);
    gni_ct_put_post_descriptor_t e{nullptr, ep, 8, uint64_t(buf) + (1 << 20), h, uint64_t(src)};
    d.next_descr = &e;
    CHILD_CHECK(GNI_CtPostFma(ep, &d) == GNI_RC_SUCCESS);  // exactly 1 MiB
    CHILD_CHECK(complete(g, d) == 0);
    CHILD_CHECK(buf[0] == 0x3C && buf[(1 << 20) - 9] == 0x3C && buf[(1 << 20) + 7] == 0x3C);
    CHILD_CHECK(buf[(1 << 20) - 8] == 0 && buf[(1 << 20) + 8] == 0);
    e.length = 9;
    CHILD_CHECK(GNI_CtPostFma(ep, &d) == GNI_RC_SIZE_ERROR);
    return 0;
  });
  CHECK(cl.wait(p, 60) == 0);
}
