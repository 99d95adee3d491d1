// Memory operations across hosts (nicemu/daemon/remote/remote_requester.h, remote_responder.h)
// without sockets: an initiating daemon's requester (node 0) and a target daemon's responder
// (node 1) over a fake fabric pumped by hand, with real CDM regions of this process. PUT and
// GET in several pieces, AMOs, CQ writes, remote events; a transfer outside the target's
// registration writes nothing; forged answers are refused; the per-peer window holds; a
// lost peer fails what is outstanding with a recoverable error.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <vector>
#include <nlohmann/json.hpp>

#include "nicemu/abi/bte_ring.h"
#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/abi/region_access.h"
#include "cdm_fixture.h"
#include "nicemu/daemon/cdm/cdm_region.h"
#include "nicemu/daemon/remote/remote_requester.h"
#include "nicemu/daemon/remote/remote_responder.h"

using namespace nicemu;
using namespace nicemu::daemon;
namespace actl = nicemu::abi::ctl;
namespace cqe = nicemu::abi::cqe;
namespace rop = nicemu::abi::remote;

namespace {

constexpr uint32_t kPtag = 9, kCookie = 0x55660000;
constexpr uint32_t kFetchAdd = 0x008;  // GNI_FMA_ATOMIC_FADD

std::unique_ptr<CdmRegion> make_cdm(uint32_t node, uint32_t inst, uint64_t attach_id) {
  return cdm_fixture::make_cdm(node, inst, attach_id, kPtag, kCookie);
}
using cdm_fixture::drain;
using cdm_fixture::kRegion;
using cdm_fixture::make_cq;

struct Handle {
  uint64_t q1 = 0, q2 = 0;
};

Handle reg(CdmRegion& r, uint32_t slot, std::vector<char>& mem, uint32_t dst_cq) {
  RegSpec spec{reinterpret_cast<uint64_t>(mem.data()), mem.size(), 0, dst_cq, {}};
  REQUIRE(cdm_fixture::reg_store(r, slot, spec, dst_cq) == abi::gni::kSuccess);
  Handle h;
  abi::mdh::encode(abi::mdh::registration_fields(spec.address, spec.length, r.mem_domain(), slot, false), h.q1, h.q2);
  return h;
}

struct Rig {
  std::unique_ptr<CdmRegion> init = make_cdm(0, 10, 1), target = make_cdm(1, 20, 2);
  RegionDirectory dir1{1, "/nonexistent"};
  std::shared_ptr<MappedRegion> init_map;
  std::deque<std::vector<char>> to1, to0;  // the wires
  bool up = true;
  int refuse = 0;  // the requester's sends refused as by a full backlog
  uint64_t reach = cqe::kOk;
  RemoteRequester req{[this](uint32_t node, const void* m, size_t n) { return wire(node, 1, m, n); },
                      [this](uint32_t) { return reach; }};
  RemoteResponder resp{1, dir1, [this](uint32_t node, const void* m, size_t n) { return wire(node, 0, m, n); }};
  uint32_t icq = make_cq(*init), tcq = make_cq(*target);
  std::vector<char> tmem = std::vector<char>(256 * 1024), imem = std::vector<char>(256 * 1024);
  Handle th, ih;

  bool wire(uint32_t node, uint32_t want, const void* m, size_t n) {
    if (node != want || !up) return false;
    if (want == 1 && refuse > 0) return --refuse, false;
    (want == 1 ? to1 : to0).emplace_back(static_cast<const char*>(m), static_cast<const char*>(m) + n);
    return true;
  }

  Rig() {
    init_map = MappedRegion::map(init->ro_memfd(), init->mdd_memfd(), init->heap_memfd(), kRegion, getpid());
    REQUIRE(init_map);
    REQUIRE(dir1.add_local(target->ro_memfd(), target->mdd_memfd(), target->heap_memfd(), kRegion, getpid()));
    th = reg(*target, 3, tmem, tcq);
    ih = reg(*init, 4, imem, abi::kNoCq);
  }

  // Delivers both ways until quiet; returns how many messages were refused as malformed.
  int pump() {
    int bad = 0;
    for (int round = 0; round < 10000 && (!to1.empty() || !to0.empty()); ++round) {
      while (!to1.empty()) {
        auto m = std::move(to1.front());
        to1.pop_front();
        if (!resp.request(0, reinterpret_cast<const uint8_t*>(m.data()), m.size())) ++bad;
      }
      while (!to0.empty()) {
        auto m = std::move(to0.front());
        to0.pop_front();
        if (!req.reply(1, reinterpret_cast<const uint8_t*>(m.data()), m.size())) ++bad;
      }
    }
    return bad;
  }

  rop::RemotePost post(uint16_t kind, uint16_t engine, uint64_t local, uint64_t remote, uint64_t len,
                       uint32_t tid = 7) {
    rop::RemotePost p{};
    p.kind = kind;
    p.engine = engine;
    p.cq_mode = abi::kBteEventGlobal;
    p.src_cq = icq;
    p.tid = tid;
    p.local_event = 0x11;
    p.remote_event = 0x22;
    p.remote_nic = 1;
    p.local_addr = local;
    p.local_qword1 = ih.q1;
    p.local_qword2 = ih.q2;
    p.remote_addr = remote;
    p.remote_qword1 = th.q1;
    p.remote_qword2 = th.q2;
    p.length = len;
    return p;
  }
  uint64_t taddr(uint64_t off) const { return reinterpret_cast<uint64_t>(tmem.data()) + off; }
  uint64_t iaddr(uint64_t off) const { return reinterpret_cast<uint64_t>(imem.data()) + off; }
};

}  // namespace

TEST_CASE("remote ops: RDMA PUT and GET in pieces, events, and the bytes at both ends") {
  Rig r;
  const uint64_t len = 100 * 1024 + 12;  // four pieces, the last one short
  for (uint64_t i = 0; i < len; ++i) r.imem[i] = static_cast<char>(i * 7 + 1);
  auto p = r.post(rop::kPut, rop::kBte, r.iaddr(0), r.taddr(64), len);
  p.flags = rop::kFlagRemoteEvent;
  r.req.post(r.init_map, p, nullptr);
  CHECK(r.pump() == 0);
  CHECK(std::memcmp(r.tmem.data() + 64, r.imem.data(), len) == 0);
  auto local = drain(*r.init, r.icq);
  REQUIRE(local.size() == 1);
  CHECK(cqe::status_of(local[0]) == cqe::kOk);
  CHECK(cqe::tid_of(local[0]) == 7);
  auto remote = drain(*r.target, r.tcq);
  REQUIRE(remote.size() == 1);  // one remote event for the whole transfer, not per piece
  CHECK(remote[0] == cqe::make(cqe::kSrcRemoteDma, cqe::kTypePost, cqe::kOk, 0, 0, 0x22));

  // GET it back into another part of the initiator's registration.
  r.req.post(r.init_map, r.post(rop::kGet, rop::kBte, r.iaddr(128 * 1024), r.taddr(64), len), nullptr);
  CHECK(r.pump() == 0);
  CHECK(std::memcmp(r.imem.data() + 128 * 1024, r.imem.data(), len) == 0);
  local = drain(*r.init, r.icq);
  REQUIRE(local.size() == 1);
  CHECK(cqe::status_of(local[0]) == cqe::kOk);
  CHECK(r.req.status()["outstanding"] == 0);
}

TEST_CASE("remote ops: FMA PUT inline, fetching AMO, CQ write") {
  Rig r;
  const char text[] = "across hosts";
  auto p = r.post(rop::kPut, rop::kFma, 0, r.taddr(8), sizeof text);
  p.inline_length = sizeof text;
  r.req.post(r.init_map, p, reinterpret_cast<const uint8_t*>(text));
  CHECK(r.pump() == 0);
  CHECK(std::memcmp(r.tmem.data() + 8, text, sizeof text) == 0);

  uint64_t start = 40;
  std::memcpy(r.tmem.data() + 4096, &start, 8);
  for (int k = 0; k < 3; ++k) {
    auto a = r.post(rop::kAmo, rop::kFma, r.iaddr(0), r.taddr(4096), 8);
    a.amo_cmd = kFetchAdd;
    a.operand1 = 2;
    r.req.post(r.init_map, a, nullptr);
    CHECK(r.pump() == 0);
    uint64_t fetched = 0, now = 0;
    std::memcpy(&fetched, r.imem.data(), 8);
    std::memcpy(&now, r.tmem.data() + 4096, 8);
    CHECK(fetched == 40 + 2 * uint64_t(k));
    CHECK(now == 42 + 2 * uint64_t(k));
  }

  auto w = r.post(rop::kCqWrite, rop::kFma, 0, 0, 0);
  w.operand1 = 0xABCDEF123456ull;
  r.req.post(r.init_map, w, nullptr);
  CHECK(r.pump() == 0);
  auto remote = drain(*r.target, r.tcq);
  REQUIRE(remote.size() == 1);
  CHECK(remote[0] == cqe::make_cqwrite(0xABCDEF123456ull));
  auto local = drain(*r.init, r.icq);
  CHECK(local.size() == 5);  // PUT, 3 AMOs, CQ write
  for (uint64_t e : local) CHECK(cqe::status_of(e) == cqe::kOk);
}

TEST_CASE("remote ops: out of bounds writes nothing; bad handles and forged answers") {
  Rig r;
  std::memset(r.imem.data(), 'x', r.imem.size());
  // Starts inside the registration, ends past it: every piece refused, no byte written.
  auto p = r.post(rop::kPut, rop::kBte, r.iaddr(0), r.taddr(r.tmem.size() - 40 * 1024), 64 * 1024);
  r.req.post(r.init_map, p, nullptr);
  CHECK(r.pump() == 0);
  for (char c : r.tmem) REQUIRE(c == 0);
  auto local = drain(*r.init, r.icq);
  REQUIRE(local.size() == 1);
  CHECK(cqe::status_of(local[0]) == cqe::kErrBounds);

  // A forged target handle; a well-formed handle of a memory domain nobody has.
  auto f = r.post(rop::kGet, rop::kBte, r.iaddr(0), r.taddr(0), 64);
  f.remote_qword1 ^= 0x10;
  r.req.post(r.init_map, f, nullptr);
  auto g = r.post(rop::kGet, rop::kBte, r.iaddr(0), r.taddr(0), 64);
  auto other = *abi::mdh::decode(g.remote_qword1, g.remote_qword2);
  other.domain = 99;
  abi::mdh::encode(other, g.remote_qword1, g.remote_qword2);
  r.req.post(r.init_map, g, nullptr);
  CHECK(r.pump() == 0);
  local = drain(*r.init, r.icq);
  REQUIRE(local.size() == 2);
  CHECK(cqe::status_of(local[0]) == cqe::kErrProtection);
  CHECK(cqe::status_of(local[1]) == cqe::kErrProtection);  // the target node cannot translate it

  // A GET into local memory that is not registered fails at the initiator, nothing sent.
  auto l = r.post(rop::kGet, rop::kBte, r.iaddr(0), r.taddr(0), 64);
  l.local_qword1 ^= 0x10;
  r.req.post(r.init_map, l, nullptr);
  CHECK(r.to1.empty());
  local = drain(*r.init, r.icq);
  REQUIRE(local.size() == 1);
  CHECK(cqe::status_of(local[0]) == cqe::kErrLocalProtection);

  // Answers: for nothing outstanding (stale: ignored), from the wrong node, lying lengths.
  abi::remote::RmaReply a{};
  a.h = actl::Header{actl::kMagic, actl::kVersion, static_cast<uint16_t>(actl::Op::kRmaReply), 0, sizeof a};
  a.id = 12345;
  CHECK(r.req.reply(1, reinterpret_cast<const uint8_t*>(&a), sizeof a));
  r.req.post(r.init_map, r.post(rop::kGet, rop::kBte, r.iaddr(0), r.taddr(0), 64), nullptr);
  REQUIRE(r.to1.size() == 1);
  abi::remote::RmaRequest q;
  std::memcpy(&q, r.to1.front().data(), sizeof q);
  a.id = q.id;
  CHECK_FALSE(r.req.reply(2, reinterpret_cast<const uint8_t*>(&a), sizeof a));   // not the target
  CHECK_FALSE(r.req.reply(1, reinterpret_cast<const uint8_t*>(&a), sizeof a));   // GET without its bytes
  a.length = 64;
  CHECK_FALSE(r.req.reply(1, reinterpret_cast<const uint8_t*>(&a), sizeof a));   // length lies
  CHECK(r.pump() == 0);  // the real answer still completes it
  local = drain(*r.init, r.icq);
  REQUIRE(local.size() == 1);
  CHECK(cqe::status_of(local[0]) == cqe::kOk);

  // Requests the responder refuses as malformed.
  q.kind = 9;
  CHECK_FALSE(r.resp.request(0, reinterpret_cast<const uint8_t*>(&q), sizeof q));
  q.kind = rop::kPut;
  q.length = 100;  // and no payload
  CHECK_FALSE(r.resp.request(0, reinterpret_cast<const uint8_t*>(&q), sizeof q));
}

TEST_CASE("remote ops: the per-peer window, backlog refusals, and a lost peer") {
  Rig r;
  const uint64_t len = 2 * RemoteRequester::kPeerWindow;
  std::vector<char> big(len, 'b');
  Handle bh = reg(*r.init, 5, big, abi::kNoCq);
  std::vector<char> tbig(len);
  Handle tb = reg(*r.target, 6, tbig, abi::kNoCq);
  auto p = r.post(rop::kPut, rop::kBte, reinterpret_cast<uint64_t>(big.data()), reinterpret_cast<uint64_t>(tbig.data()),
                  len);
  p.local_qword1 = bh.q1;
  p.local_qword2 = bh.q2;
  p.remote_qword1 = tb.q1;
  p.remote_qword2 = tb.q2;
  r.req.post(r.init_map, p, nullptr);
  // Only the window's worth went out before any answer.
  uint64_t bytes = 0;
  for (auto& m : r.to1) bytes += m.size() - sizeof(abi::remote::RmaRequest);
  CHECK(bytes == RemoteRequester::kPeerWindow);
  // The fabric refuses (backlog full): the pieces wait and go out on pump().
  r.refuse = 1000;
  CHECK(r.pump() == 0);
  CHECK(r.req.waiting());
  r.refuse = 0;
  r.req.pump();
  CHECK(r.pump() == 0);
  CHECK(std::memcmp(tbig.data(), big.data(), len) == 0);
  auto local = drain(*r.init, r.icq);
  REQUIRE(local.size() == 1);
  CHECK(cqe::status_of(local[0]) == cqe::kOk);

  // The peer goes silent mid-transfer: everything outstanding fails, recoverably.
  r.req.post(r.init_map, p, nullptr);
  r.req.post(r.init_map, r.post(rop::kGet, rop::kBte, r.iaddr(0), r.taddr(0), 64), nullptr);
  r.to1.clear();
  r.req.peer_lost(1);
  local = drain(*r.init, r.icq);
  REQUIRE(local.size() == 2);
  for (uint64_t e : local) {
    CHECK(cqe::status_of(e) == cqe::kErrTransient);
    CHECK(cqe::status_recoverable(cqe::status_of(e)));
  }
  CHECK(r.req.status()["outstanding"] == 0);
  // And while it is down, new posts fail at once.
  r.reach = cqe::kErrTransient;
  r.req.post(r.init_map, r.post(rop::kGet, rop::kBte, r.iaddr(0), r.taddr(0), 64), nullptr);
  CHECK(r.to1.empty());
  local = drain(*r.init, r.icq);
  REQUIRE(local.size() == 1);
  CHECK(cqe::status_of(local[0]) == cqe::kErrTransient);
}

TEST_CASE("remote ops: a chain's members post one event, with the first failure's status") {
  Rig r;
  auto member = [&](uint64_t id, uint32_t members, uint32_t index, uint64_t remote,
                    uint32_t fail_index = rop::kNoChainFailure, uint32_t fail_status = 0) {
    auto p = r.post(rop::kPut, rop::kFma, 0, remote, 8);
    static const char eight[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    p.inline_length = 8;
    p.chain_id = id;
    p.chain_members = members;
    p.chain_index = index;
    p.chain_fail_index = fail_index;
    p.chain_fail_status = fail_status;
    r.req.post(r.init_map, p, reinterpret_cast<const uint8_t*>(eight));
    return p;
  };
  // Three members, all fine: nothing until the last is answered, then one OK event.
  member(1, 3, 0, r.taddr(0));
  member(1, 3, 1, r.taddr(8));
  CHECK(r.pump() == 0);
  CHECK(drain(*r.init, r.icq).empty());
  CHECK(r.req.status()["chains_open"] == 1);
  member(1, 3, 2, r.taddr(16));
  CHECK(r.pump() == 0);
  auto local = drain(*r.init, r.icq);
  REQUIRE(local.size() == 1);
  CHECK(cqe::status_of(local[0]) == cqe::kOk);
  CHECK(cqe::tid_of(local[0]) == 7);
  CHECK(r.req.status()["chains_open"] == 0);
  CHECK(r.tmem[16] == 1);

  // Members 1 and 3 here, member 2 ran in the library and failed: its status wins over
  // member 3's out-of-bounds failure (the lower index), member 1 is fine.
  member(2, 2, 1, r.taddr(24), 2, cqe::kErrMemAccess);
  member(2, 2, 3, r.taddr(r.tmem.size() + 4096), 2, cqe::kErrMemAccess);
  CHECK(r.pump() == 0);
  local = drain(*r.init, r.icq);
  REQUIRE(local.size() == 1);
  CHECK(cqe::status_of(local[0]) == cqe::kErrMemAccess);

  // Only the remote member fails: its status.
  member(3, 1, 0, r.taddr(r.tmem.size() + 4096));
  CHECK(r.pump() == 0);
  local = drain(*r.init, r.icq);
  REQUIRE(local.size() == 1);
  CHECK(cqe::status_of(local[0]) != cqe::kOk);

  // A lost peer fails every member; still one event.
  r.up = false;
  member(4, 2, 0, r.taddr(0));
  member(4, 2, 1, r.taddr(8));
  r.req.peer_lost(1);
  local = drain(*r.init, r.icq);
  REQUIRE(local.size() == 1);
  CHECK(cqe::status_of(local[0]) == cqe::kErrTransient);

  // Chain fields no library makes: an error event of its own.
  r.up = true;
  member(5, 0, 0, r.taddr(0));
  member(6, 1, 0, r.taddr(0), 0, cqe::kOk);  // a failure with no error status
  local = drain(*r.init, r.icq);
  REQUIRE(local.size() == 2);
  CHECK(cqe::status_of(local[0]) == cqe::kErrProtection);
  CHECK(cqe::status_of(local[1]) == cqe::kErrProtection);
  CHECK(r.req.status()["chains_open"] == 0);
}

// Finding F5 (docs/security.md) suspected the requester's flow control after a peer's
// restart: AMOs in flight when the peer is lost fail, the peer's window starts over, answers
// to the lost ones arriving late change nothing, and a following burst completes whole with
// nothing left in flight.
TEST_CASE("remote ops: a burst of AMOs after a lost peer; late answers leave the window alone") {
  Rig r;
  auto add = [&](uint32_t tid) {
    auto a = r.post(rop::kAmo, rop::kFma, 0, r.taddr(8192), 8, tid);
    a.amo_cmd = 0x108;  // GNI_FMA_ATOMIC_ADD (non-fetching)
    a.operand1 = 1;
    return a;
  };
  for (uint32_t i = 0; i < 100; ++i) r.req.post(r.init_map, add(i), nullptr);
  CHECK(r.req.status()["bytes_in_flight"] == 800);
  // The requests reached the target, the peer restarted before answering.
  std::deque<std::vector<char>> requests;
  requests.swap(r.to1);
  r.req.peer_lost(1);
  auto local = drain(*r.init, r.icq);
  REQUIRE(local.size() == 100);
  for (uint64_t e : local) CHECK(cqe::status_of(e) == cqe::kErrTransient);
  CHECK(r.req.status()["bytes_in_flight"] == 0);
  // A new burst; the old requests are answered only now, after it was sent.
  for (uint32_t i = 0; i < 200; ++i) r.req.post(r.init_map, add(i), nullptr);
  CHECK(r.req.status()["bytes_in_flight"] == 1600);
  for (auto& m : requests) CHECK(r.resp.request(0, reinterpret_cast<const uint8_t*>(m.data()), m.size()));
  std::deque<std::vector<char>> late;
  late.swap(r.to0);
  for (auto& m : late) CHECK(r.req.reply(1, reinterpret_cast<const uint8_t*>(m.data()), m.size()));
  CHECK(r.req.status()["bytes_in_flight"] == 1600);  // stale: not counted against the new burst
  CHECK(r.pump() == 0);
  local = drain(*r.init, r.icq);
  REQUIRE(local.size() == 200);
  for (uint64_t e : local) CHECK(cqe::status_of(e) == cqe::kOk);
  CHECK(r.req.status()["bytes_in_flight"] == 0);
  CHECK(r.req.status()["outstanding"] == 0);
  uint64_t total = 0;
  std::memcpy(&total, r.tmem.data() + 8192, 8);
  CHECK(total == 300);  // the lost ones had taken effect at the target: AMOs are not reposted
}
