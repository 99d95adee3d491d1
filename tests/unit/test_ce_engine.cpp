// The daemon's collective engine (nicemu/daemon/ce_engine.h) as another daemon sees it,
// without processes: malformed and forged CE messages are refused with a reason (the node
// counts and drops them), a contribution for a channel that does not exist is answered
// with an error result to its sender, probes are answered, a probe nobody answers fails
// the waiting post after the timeout.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>
#include <nlohmann/json.hpp>

#include "gni_pub.h"
#include "nicemu/abi/ce_ops.h"
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
