// The daemon's collective engine (nicemu/daemon/ce/ce_engine.h) as another daemon sees it,
// without processes: malformed and forged CE messages are refused with a reason (the node
// counts and drops them), a contribution for a channel that does not exist is answered
// with an error result to its sender, probes are answered, a probe nobody answers fails
// the waiting post after the timeout; posts through the post page.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <vector>
#include <nlohmann/json.hpp>

#include "gni_pub.h"
#include "cdm_fixture.h"
#include "nicemu/abi/ce_ops.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/daemon/ce/ce_engine.h"

namespace ace = nicemu::abi::ce;
namespace ctl = nicemu::abi::ctl;
using nicemu::daemon::CeEngine;
using nicemu::daemon::CeEnv;

namespace {

struct Sent {
  uint32_t node;
  std::vector<char> bytes;
};

template <typename T>
T make(ctl::Op op) {
  T m{};
  m.h = ctl::Header{ctl::kMagic, ctl::kVersion, static_cast<uint16_t>(op), 0, static_cast<uint32_t>(sizeof(T))};
  return m;
}

template <typename T>
const char* feed(CeEngine& e, uint32_t from, const T& m, size_t len = sizeof(T)) {
  return e.message(from, m.h, reinterpret_cast<const char*>(&m), len);
}

ace::CeContribute contribution(uint32_t origin) {
  auto c = make<ace::CeContribute>(ctl::Op::kCeContribute);
  c.origin_node = origin;
  c.to_ce = 5;
  c.child_id = 1;
  c.kind = ace::kChildVce;
  c.from_ce = 2;
  c.ptag = 7;
  c.cookie = 9;
  c.cmd = GNI_FMA_CE_IADD;
  c.token = (1ull << 63) | 2;
  c.red_id = 44;
  c.a = 3;
  return c;
}

}  // namespace

TEST_CASE("ce_engine: malformed and forged messages are refused with a reason") {
  std::vector<Sent> sent;
  CeEngine e(1, CeEnv{[&](uint32_t n, const void* m, size_t len) {
                        sent.push_back({n, std::vector<char>((const char*)m, (const char*)m + len)});
                        return true;
                      },
                      [](uint64_t) { return nullptr; }});
  auto c = contribution(4);
  CHECK(feed(e, 4, c, sizeof c - 8) != nullptr);  // truncated
  CHECK(feed(e, 3, c) != nullptr);                // names another sender
  auto bad = c;
  bad.kind = 7;
  CHECK(feed(e, 4, bad) != nullptr);
  bad = c;
  bad.child_id = ace::kMaxChildren;
  CHECK(feed(e, 4, bad) != nullptr);
  bad = c;
  bad.cmd = 0x7;  // no CE command
  CHECK(feed(e, 4, bad) != nullptr);
  bad = c;
  bad.status = 99;
  CHECK(feed(e, 4, bad) != nullptr);
  bad = c;
  bad.token = 0;
  CHECK(feed(e, 4, bad) != nullptr);
  auto r = make<ace::CeResult>(ctl::Op::kCeResult);
  r.origin_node = 4;
  r.fpe = 0x10;  // not an exception bit
  CHECK(feed(e, 4, r) != nullptr);
  auto p = make<ace::CeProbe>(ctl::Op::kCeProbe);
  p.origin_node = 4;
  p.what = 9;
  CHECK(feed(e, 4, p) != nullptr);
  auto wrong = make<ace::CeCreate>(ctl::Op::kCeCreate);  // not a daemon-to-daemon message
  CHECK(feed(e, 4, wrong) != nullptr);
  CHECK(sent.empty());
}

TEST_CASE("ce_engine: an operand for a channel that does not exist comes back as an error result") {
  std::vector<Sent> sent;
  CeEngine e(1, CeEnv{[&](uint32_t n, const void* m, size_t len) {
                        sent.push_back({n, std::vector<char>((const char*)m, (const char*)m + len)});
                        return true;
                      },
                      [](uint64_t) { return nullptr; }});
  auto c = contribution(4);
  CHECK(feed(e, 4, c) == nullptr);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].node == 4);
  REQUIRE(sent[0].bytes.size() == sizeof(ace::CeResult));
  ace::CeResult r;
  std::memcpy(&r, sent[0].bytes.data(), sizeof r);
  CHECK(r.h.op == uint16_t(ctl::Op::kCeResult));
  CHECK(r.origin_node == 1);
  CHECK(r.token == c.token);
  CHECK(r.status == ace::kErrConfig);
  CHECK(r.red_id == 44);
  // A result for a channel we do not have is dropped quietly (it was destroyed meanwhile).
  auto late = make<ace::CeResult>(ctl::Op::kCeResult);
  late.origin_node = 4;
  late.token = (1ull << 63) | 3;
  CHECK(feed(e, 4, late) == nullptr);
  CHECK(e.status()["dropped"] == 1);
  CHECK(e.status()["refused"] == 1);
}

TEST_CASE("ce_engine: probes are answered; unknown channels and processes are not alive") {
  std::vector<Sent> sent;
  CeEngine e(1, CeEnv{[&](uint32_t n, const void* m, size_t len) {
                        sent.push_back({n, std::vector<char>((const char*)m, (const char*)m + len)});
                        return true;
                      },
                      [](uint64_t) { return nullptr; }});
  for (uint32_t what : {ace::kProbeNode, ace::kProbeChannel, ace::kProbeProcess}) {
    auto p = make<ace::CeProbe>(ctl::Op::kCeProbe);
    p.origin_node = 6;
    p.what = what;
    p.ce_id = 3;
    p.attach_id = 12;
    p.probe_id = 100 + what;
    CHECK(feed(e, 6, p) == nullptr);
  }
  REQUIRE(sent.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    ace::CeProbeReply rep;
    REQUIRE(sent[i].bytes.size() == sizeof rep);
    std::memcpy(&rep, sent[i].bytes.data(), sizeof rep);
    CHECK(sent[i].node == 6);
    CHECK(rep.probe_id == 100 + i);
    CHECK(rep.alive == (i == 0 ? 1u : 0u));  // the daemon answers; channel 3 and attach 12 are not here
  }
  // A reply to a probe we never sent is ignored.
  auto rep = make<ace::CeProbeReply>(ctl::Op::kCeProbeReply);
  rep.origin_node = 6;
  rep.probe_id = 555;
  CHECK(feed(e, 6, rep) == nullptr);
  CHECK_FALSE(e.busy());
}

// The post page (abi/ce_ops.h, PostPage): leaves of a channel's own node write their posts
// into their slots and only the post completing the round rings; the daemon takes the
// posts on the ring (or on any later CE event, or a tick, if the ring never came), writes
// the results into the leaves' memory (this process) and their CQ events, and clears the
// round's bits. A post written into a slot with a result address outside the leaf's
// registrations is refused; another job's page is another memfd, where the channel is
// not local.
TEST_CASE("ce_engine: posts through the post page ring once per round") {
  namespace abi = nicemu::abi;
  constexpr uint32_t kA = 7, kCookieA = 0x1234, kB = 8, kCookieB = 0x5678;
  std::vector<std::unique_ptr<nicemu::daemon::CdmRegion>> cdms;
  for (uint32_t i = 0; i < 3; ++i) cdms.push_back(cdm_fixture::make_cdm(0, i, 10 + i, kA, kCookieA));
  cdms.push_back(cdm_fixture::make_cdm(0, 9, 20, kB, kCookieB));
  std::vector<bool> gone(cdms.size(), false);
  CeEngine e(0, CeEnv{[](uint32_t, const void*, size_t) { return false; },
                      [&](uint64_t id) -> nicemu::daemon::CdmRegion* {
                        for (size_t i = 0; i < cdms.size(); ++i)
                          if (!gone[i] && cdms[i]->attach_id() == id) return cdms[i].get();
                        return nullptr;
                      }});
  // Each leaf: a CQ, a registered gni_ce_result_t, its page slot.
  struct Leaf {
    uint32_t cq = 0, slot = 0;
    alignas(64) gni_ce_result_t res{};
    uint64_t q1 = 0, q2 = 0;
  };
  std::vector<Leaf> leaves(cdms.size());
  std::vector<ace::PostPage*> pages(cdms.size(), nullptr);
  std::vector<int> fds(cdms.size(), -1);
  for (size_t i = 0; i < cdms.size(); ++i) {
    leaves[i].cq = cdm_fixture::make_cq(*cdms[i]);
    nicemu::daemon::RegSpec spec{reinterpret_cast<uint64_t>(&leaves[i].res), sizeof(gni_ce_result_t), 0,
                                 abi::kNoCq, {}};
    REQUIRE(cdm_fixture::reg_store(*cdms[i], 1, spec, abi::kNoCq) == abi::gni::kSuccess);
    abi::mdh::encode(abi::mdh::registration_fields(spec.address, spec.length, cdms[i]->mem_domain(), 1, false),
                     leaves[i].q1, leaves[i].q2);
    REQUIRE(e.open_page(*cdms[i], leaves[i].slot, fds[i]) == abi::gni::kSuccess);
    void* m = mmap(nullptr, ace::kPostPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[i], 0);
    REQUIRE(m != MAP_FAILED);
    pages[i] = static_cast<ace::PostPage*>(m);
  }
  CHECK(fds[0] == fds[1]);
  CHECK(fds[0] == fds[2]);
  CHECK(fds[3] != fds[0]);  // another job: another page
  CHECK(leaves[0].slot != leaves[1].slot);
  CHECK(pages[0]->magic == ace::kPostPageMagic);
  // A resized page would fault the daemon: the memfd is sealed.
  CHECK(ftruncate(fds[0], 4096) != 0);

  uint32_t ce_id = 0;
  REQUIRE(e.create(*cdms[0], ce_id) == abi::gni::kSuccess);
  auto conf = make<ace::CeConfigure>(ctl::Op::kCeConfigure);
  conf.ce_id = ce_id;
  conf.modes = GNI_CE_MODE_ROUND_NEAR;
  conf.cq = abi::kNoCq;
  conf.num_children = 3;
  for (uint32_t s = 0; s < 3; ++s) conf.children[s] = ace::Edge{0, 0, s, ace::kChildPe, s, 0};
  REQUIRE(e.configure(*cdms[0], conf) == abi::gni::kSuccess);
  CHECK(pages[0]->chan[ce_id].local == 7u);
  CHECK(pages[3]->chan[ce_id].local == 0u);  // not a channel of job B

  // What libugni's post_to_daemon does; true if this post rang.
  auto post = [&](size_t i, uint64_t v, uint64_t red, uint64_t result_addr = 0) {
    ace::PostSlot& s = pages[i]->slot[leaves[i].slot];
    s.post.ce_id = ce_id;
    s.post.child_id = uint32_t(i);
    s.post.cmd = GNI_FMA_CE_IADD;
    s.post.mode = 0;
    s.post.src_cq = leaves[i].cq;
    s.post.tid = 5;
    s.post.local_event = 0;
    s.post.cq_mode = GNI_CQMODE_GLOBAL_EVENT;
    s.post.red_id = red;
    s.post.first = v;
    s.post.second = 0;
    s.post.result_addr = result_addr ? result_addr : reinterpret_cast<uint64_t>(&leaves[i].res);
    s.mem_qword1 = leaves[i].q1;
    s.mem_qword2 = leaves[i].q2;
    std::atomic_ref<uint32_t>(s.seq).store(s.seq + 1, std::memory_order_release);
    const uint32_t bit = 1u << i;
    const uint32_t local = pages[i]->chan[ce_id].local;
    const uint32_t old = std::atomic_ref<uint32_t>(pages[i]->chan[ce_id].posted).fetch_or(bit);
    return ((old | bit) & local) == local;
  };
  auto done = [&](size_t i) { return (leaves[i].res.control & ace::kResDone) != 0; };

  for (uint64_t round = 1; round <= 3; ++round) {
    for (auto& l : leaves) l.res = gni_ce_result_t{};
    CHECK_FALSE(post(0, 1, round));
    CHECK_FALSE(post(1, 2, round));
    CHECK_FALSE(done(0));  // nobody rang: the daemon has not even looked
    CHECK(post(2, 4 * round, round));
    e.ring();
    for (size_t i = 0; i < 3; ++i) {
      REQUIRE(done(i));
      CHECK(leaves[i].res.result1 == 3 + 4 * round);
      CHECK((leaves[i].res.control >> ace::kResRedIdShift) == round);
      CHECK(((leaves[i].res.control >> ace::kResStatusShift) & ace::kResStatusMask) == ace::kOk);
      auto ev = cdm_fixture::drain(*cdms[i], leaves[i].cq);
      REQUIRE(ev.size() == 1);
      CHECK(GNI_CQ_STATUS_OK(ev[0]));
    }
    CHECK(pages[0]->chan[ce_id].posted == 0u);  // the round's bits cleared for the next
  }
  CHECK(e.status()["rings"] == 3);
  CHECK(e.status()["page_posts"] == 9);

  // A ring that never comes (a hostile leaf of the job rang early, or not at all): the
  // next tick takes the posts.
  for (auto& l : leaves) l.res = gni_ce_result_t{};
  post(0, 1, 9);
  post(1, 1, 9);
  post(2, 1, 9);
  CHECK_FALSE(done(0));
  e.tick();
  CHECK(done(0));
  CHECK(leaves[2].res.result1 == 3);
  for (size_t i = 0; i < 3; ++i) cdm_fixture::drain(*cdms[i], leaves[i].cq);

  // A result address outside the leaf's registrations (written by another process of the
  // job into its slot): refused, nothing written there.
  alignas(64) gni_ce_result_t stray{};
  post(1, 1, 10, reinterpret_cast<uint64_t>(&stray));
  e.scan();
  CHECK(e.status()["page_refused"] == 1);
  CHECK(stray.control == 0);

  for (size_t i = 0; i < cdms.size(); ++i) {
    e.cdm_gone(cdms[i]->attach_id());
    gone[i] = true;
    munmap(pages[i], ace::kPostPageBytes);
  }
  CHECK(e.status()["post_pages"] == 0);
  CHECK_FALSE(e.busy());
}
