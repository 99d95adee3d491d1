// The daemons' MSGQ relay (nicemu/daemon/remote/msgq_relay.h) without sockets: a sender's relay
// (node 1) and a target's (node 2) over a fake fabric the test pumps by hand, with real
// segments. Local completions: posted in order when the target's results come back, with
// PEER_GONE for a message nobody could take, TRANSIENT for everything waiting on a peer
// that is down or lost; results about more than was sent are refused. Credits: taken by
// senders in the sender's segment, reported by the target as receivers free ring slots,
// never returned past what was sent; a message nobody can take gives its credit back; a
// lost peer gives every credit back; the fabric's backlog makes messages wait in order at
// the sender, a down peer loses them (credit back).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <memory>
#include <vector>
#include <nlohmann/json.hpp>

#include "cdm_fixture.h"
#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/msgq_ring.h"
#include "nicemu/daemon/remote/msgq_relay.h"

using namespace nicemu;
using namespace nicemu::daemon;
namespace mq = nicemu::abi::msgq;
namespace remote = nicemu::abi::remote;
namespace cqe = nicemu::abi::cqe;

namespace {

constexpr uint32_t kPtag = 9, kCookie = 0x55660000, kDepth = 4;

struct Link {  // one daemon's side of the fake fabric, and the CQEs it posted
  std::deque<std::pair<uint32_t, std::vector<uint8_t>>> out;  // (to node, message)
  bool up = true;
  size_t room = SIZE_MAX;  // messages the backlog still takes
  std::vector<std::pair<uint32_t, uint64_t>> cqes;  // (CQ slot, entry)
};

MsgqRelay make_relay(uint32_t self, Link& l, MsgqSegment& seg) {
  return MsgqRelay(
      self,
      [&l](uint32_t node, const void* m, size_t n) {
        if (!l.up || l.room == 0) return false;
        --l.room;
        auto* p = static_cast<const uint8_t*>(m);
        l.out.emplace_back(node, std::vector<uint8_t>(p, p + n));
        return true;
      },
      [&l](uint32_t) { return l.up; },
      [&seg](const Credential& c) { return c == seg.credential() ? &seg : nullptr; },
      [&seg](const std::function<void(MsgqSegment&)>& f) { f(seg); },
      [&l](uint64_t attach_id, uint32_t cq, uint64_t entry) {
        CHECK(attach_id == 11);
        l.cqes.emplace_back(cq, entry);
      });
}

remote::MsgqRemoteSend request(uint32_t dst_pe, uint32_t dst_inst, uint32_t seq) {
  remote::MsgqRemoteSend m{};
  m.dst_pe = dst_pe;
  m.dst_inst = dst_inst;
  m.hdr_len = 4;
  m.msg_len = 4;
  m.snd_cq = 5;
  m.msg_id = 1000 + seq;
  std::memcpy(m.payload, &seq, 4);
  std::memcpy(m.payload + 4, &seq, 4);
  return m;
}

uint16_t op_of(const std::vector<uint8_t>& m) {
  abi::ctl::Header h;
  std::memcpy(&h, m.data(), sizeof h);
  return h.op;
}

// Takes one message for `member` from the ring for node `from`; its sequence number or -1.
// The local completions posted so far, as (msg_id, status); clears them.
std::vector<std::pair<uint32_t, uint32_t>> completions(Link& l) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (auto [cq, e] : l.cqes) {
    CHECK(cq == 5);
    CHECK(cqe::type_of(e) == cqe::kTypeMsgq);
    out.emplace_back(uint32_t(cqe::id_of(e)), uint32_t(cqe::status_of(e)));
  }
  l.cqes.clear();
  return out;
}

long take(const MsgqSegment& seg, uint32_t ring, uint16_t member) {
  const mq::SegmentView& v = seg.view();
  mq::RingView r = mq::RingView::at(v.ring(ring), v.attrs.smsg_q_sz, v.lay.slot_size);
  alignas(8) char buf[192];
  mq::EntryHeader e;
  if (r.take([member](const mq::EntryHeader& x) { return x.dst_member == member; }, e, buf) != mq::RingView::Take::kTaken)
    return -1;
  uint32_t seq;
  std::memcpy(&seq, buf, 4);
  return long(seq);
}

// Node 1's queue connected to node 2 (credits `cr`), node 2's with member inst 3 and a ring
// for node 1; each node's relay on its own link; CDM 11 of node 1 sends.
struct Rig {
  const mq::Attrs attrs{64, kDepth, 1, 2, 2, 0, 16, 0};
  MsgqSegment src{1, Credential{kPtag, kCookie}, attrs, 1}, dst{2, Credential{kPtag, kCookie}, attrs, 1};
  uint32_t conn = 0, gen = 0, member = 0, mgen = 0, ring = 0, rgen = 0;
  mq::TxCredit* cr = nullptr;
  std::unique_ptr<CdmRegion> cdm = cdm_fixture::make_cdm(1, 1, 11, kPtag, kCookie);
  Link la, lb;
  MsgqRelay a = make_relay(1, la, src), b = make_relay(2, lb, dst);

  Rig() {
    REQUIRE(src.connect(2, 1, conn, gen) == abi::gni::kSuccess);
    REQUIRE(dst.join(77, getpid(), 3, member, mgen) == abi::gni::kSuccess);
    REQUIRE(dst.conn_open(1, ring, rgen) == abi::gni::kSuccess);
    cr = src.tx_credit(2);
    REQUIRE(cr);
  }
  // Delivers what `from` sent to the relay `to` (of the other node); how many messages.
  static size_t carry(Link& from, MsgqRelay& to, uint32_t sender) {
    size_t n = 0;
    for (; !from.out.empty(); from.out.pop_front(), ++n) {
      auto& [node, m] = from.out.front();
      if (op_of(m) == uint16_t(abi::ctl::Op::kMsgqDeliver))
        REQUIRE(to.deliver(sender, m.data(), m.size()));
      else if (op_of(m) == uint16_t(abi::ctl::Op::kMsgqResult))
        REQUIRE(to.result(sender, m.data(), m.size()));
      else
        REQUIRE(to.credit(sender, m.data(), m.size()));
    }
    return n;
  }
};

}  // namespace

TEST_CASE_FIXTURE(Rig, "MSGQ relay: credits go back as receivers free ring slots, never past what was sent") {
  CHECK(src.tx_credit(5) == nullptr);  // not connected to node 5

  // The library took kDepth credits; the sender's daemon forwards, the target stores.
  cr->sent.store(kDepth);
  for (uint32_t i = 0; i < kDepth; ++i) REQUIRE(a.forward(*cdm, src, request(2, 3, i)));
  CHECK(carry(la, b, 1) == kDepth);
  CHECK(b.status()["delivered"] == kDepth);
  CHECK(b.status()["held"] == 0);
  // Nobody took anything: no credits yet, but the outcomes go back (one result message) and
  // complete the sends, in order; work stays outstanding (the timer looks again).
  CHECK(a.status()["awaiting_results"] == kDepth);
  b.progress();
  REQUIRE(lb.out.size() == 1);
  CHECK(carry(lb, a, 2) == 1);
  CHECK(completions(la) == std::vector<std::pair<uint32_t, uint32_t>>{{1000, 0}, {1001, 0}, {1002, 0}, {1003, 0}});
  CHECK(a.status()["awaiting_results"] == 0);
  CHECK(cr->returned.load() == 0);
  CHECK(b.busy());
  // The receiver takes two: one report of two freed slots, added to `returned`.
  CHECK(take(dst, ring, uint16_t(member)) == 0);
  CHECK(take(dst, ring, uint16_t(member)) == 1);
  b.progress();
  REQUIRE(lb.out.size() == 1);
  CHECK(carry(lb, a, 2) == 1);
  CHECK(cr->returned.load() == 2);
  CHECK(a.status()["credits_received"] == 2);

  // A message for an instance that is not there: dropped at the target, its credit back.
  cr->sent.fetch_add(1);
  REQUIRE(a.forward(*cdm, src, request(2, 99, 4)));
  carry(la, b, 1);
  CHECK(b.status()["undeliverable"] == 1);
  b.progress();
  carry(lb, a, 2);
  CHECK(cr->returned.load() == 3);
  CHECK(completions(la) == std::vector<std::pair<uint32_t, uint32_t>>{{1004, cqe::kErrPeerGone}});
  // No queue of that domain at the target at all: the same, and the credit report for a
  // domain the sender has no queue of either is counted as stale.
  auto other = cdm_fixture::make_cdm(1, 2, 11, kPtag, kCookie + 1);
  REQUIRE(a.forward(*other, src, request(2, 3, 5)));
  carry(la, b, 1);
  CHECK(b.status()["undeliverable"] == 2);
  b.progress();
  carry(lb, a, 2);
  CHECK(completions(la) == std::vector<std::pair<uint32_t, uint32_t>>{{1005, cqe::kErrPeerGone}});
  CHECK(a.status()["stale_credits"] == 1);
  // Results about more messages than wait for one are refused, nothing posted.
  std::vector<uint8_t> res(sizeof(remote::MsgqResult) + sizeof(remote::MsgqResultRun));
  remote::MsgqResult rh{};
  rh.h = abi::ctl::Header{abi::ctl::kMagic, abi::ctl::kVersion, uint16_t(abi::ctl::Op::kMsgqResult), 0,
                          uint32_t(res.size())};
  rh.origin_pe = 2;
  rh.runs = 1;
  remote::MsgqResultRun run{1, 0};
  std::memcpy(res.data(), &rh, sizeof rh);
  std::memcpy(res.data() + sizeof rh, &run, sizeof run);
  CHECK_FALSE(a.result(2, res.data(), res.size()));
  CHECK_FALSE(a.result(2, res.data(), res.size() - 1));
  CHECK(la.cqes.empty());

  // A send the daemon refuses (node 5: not connected; the library checks, but a connection
  // can be released meanwhile) completes at once with NO_PEER; nothing goes out.
  CHECK_FALSE(a.forward(*cdm, src, request(5, 3, 6)));
  CHECK(la.out.empty());
  CHECK(completions(la) == std::vector<std::pair<uint32_t, uint32_t>>{{1006, cqe::kErrNoPeer}});
  // A report of more than was sent (a lying or confused peer) stops at `sent`; one that
  // claims to come from another node is refused.
  remote::MsgqCredit lie{};
  lie.h = abi::ctl::Header{abi::ctl::kMagic, abi::ctl::kVersion, uint16_t(abi::ctl::Op::kMsgqCredit), 0, sizeof lie};
  lie.origin_pe = 2;
  lie.ptag = kPtag;
  lie.cookie = kCookie;
  lie.freed = 1000;
  CHECK(a.credit(2, reinterpret_cast<const uint8_t*>(&lie), sizeof lie));
  CHECK(cr->returned.load() == cr->sent.load());
  CHECK_FALSE(a.credit(3, reinterpret_cast<const uint8_t*>(&lie), sizeof lie));
  CHECK_FALSE(a.credit(2, reinterpret_cast<const uint8_t*>(&lie), sizeof lie - 1));

  // The rest taken: the last two slots reported, nothing outstanding at the target.
  CHECK(take(dst, ring, uint16_t(member)) == 2);
  CHECK(take(dst, ring, uint16_t(member)) == 3);
  b.progress();
  CHECK(b.status()["credits_sent"] == kDepth + 2);
  CHECK_FALSE(b.busy());
}

TEST_CASE_FIXTURE(Rig, "MSGQ relay: a full backlog makes messages wait in order; a lost peer gives every credit back") {
  cr->sent.store(3);
  la.room = 1;  // the fabric takes one, then refuses for backlog
  for (uint32_t i = 0; i < 3; ++i) REQUIRE(a.forward(*cdm, src, request(2, 3, i)));
  CHECK(la.out.size() == 1);
  CHECK(a.status()["waiting"] == 2);
  CHECK(a.busy());
  la.room = SIZE_MAX;
  a.progress();
  REQUIRE(la.out.size() == 3);
  for (auto& [node, m] : la.out) REQUIRE(b.deliver(1, m.data(), m.size()));
  la.out.clear();
  for (long i = 0; i < 3; ++i) CHECK(take(dst, ring, uint16_t(member)) == i);  // in order
  CHECK(a.status()["forwarded"] == 3);

  // The peer goes down before its results came back: those three sends and the next one
  // complete with TRANSIENT, in order; the new message is lost at once, its credit back.
  la.up = false;
  cr->sent.fetch_add(1);
  REQUIRE(a.forward(*cdm, src, request(2, 3, 3)));
  CHECK(a.status()["send_failed"] == 1);
  CHECK(cr->returned.load() == 1);
  CHECK(completions(la) == std::vector<std::pair<uint32_t, uint32_t>>{{1000, cqe::kErrTransient},
                                                                        {1001, cqe::kErrTransient},
                                                                        {1002, cqe::kErrTransient},
                                                                        {1003, cqe::kErrTransient}});
  // Lost for good (it restarted, or stayed silent): credits of what it never reported come
  // back, and the target owes nothing to a sender that forgot it.
  a.peer_lost(2);
  CHECK(cr->returned.load() == cr->sent.load());
  b.peer_lost(1);
  CHECK_FALSE(b.busy());
  // A new connection starts with every credit.
  cr->sent.fetch_add(2);
  REQUIRE(src.conn_release(2) == abi::gni::kSuccess);
  REQUIRE(src.connect(2, 1, conn, gen) == abi::gni::kSuccess);
  cr = src.tx_credit(2);
  REQUIRE(cr);
  CHECK(cr->returned.load() == cr->sent.load());
}
