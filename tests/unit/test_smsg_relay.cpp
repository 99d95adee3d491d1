// The daemons' SMSG relay (nicemu/daemon/remote/smsg_relay.h) without sockets: two relays, a
// sender's (node 0) and a receiver's (node 1), over a fake fabric the test pumps by hand,
// with real CDM regions. Delivery into the mailbox, remote and local CQEs, credits coming
// back through the relay block; the receiver's checks (forged, out-of-sequence, oversized
// and over-credit messages refused before the mailbox is touched, a mailbox outside any
// registration refused); failures (receiver gone, peer down, an ack past the deadline, which
// stretches while the fabric is overloaded) reported as error CQEs.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <vector>
#include <nlohmann/json.hpp>

#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/daemon_protocol.h"
#include "nicemu/abi/gni_values.h"
#include "nicemu/abi/mem_handle.h"
#include "nicemu/abi/region_access.h"
#include "nicemu/abi/relay_ring.h"
#include "cdm_fixture.h"
#include "nicemu/daemon/remote/smsg_relay.h"
#include "nicemu/abi/smsg_channel.h"

using namespace nicemu;
using namespace nicemu::daemon;
namespace ctl = nicemu::abi::ctl;
namespace cqe = nicemu::abi::cqe;

namespace {

constexpr uint32_t kPtag = 7, kCookie = 0x12340000, kCredits = 4, kMax = 256;

std::unique_ptr<CdmRegion> make_cdm(uint32_t node, uint32_t inst, uint64_t attach_id) {
  return cdm_fixture::make_cdm(node, inst, attach_id, kPtag, kCookie);
}
using cdm_fixture::drain;
using cdm_fixture::kRegion;
using cdm_fixture::make_cq;

struct Wire {  // one direction of the fake fabric
  std::deque<std::vector<char>> q;
  bool up = true;
  int refuse = 0;  // sends refused as by a full backlog (the channel stays up)
};

struct Rig {
  asio::io_context io;
  StatsPage stats0{"", 0}, stats1{"", 1};
  Wire to1, to0;  // messages to node 1, to node 0
  std::unique_ptr<CdmRegion> sender = make_cdm(0, 10, 1), receiver = make_cdm(1, 20, 2);
  bool receiver_attached = true;
  uint64_t rma_unsent_of = 0;  // the CDM whose RMA pieces wait to be sent, as RemoteRequester::unsent says
  bool overloaded = false;     // what FabricPort::overloaded would say (the fabric's load view)
  SmsgRelay a{0, stats0, env(0)}, b{1, stats1, env(1)};
  uint32_t scq = make_cq(*sender), rcq = make_cq(*receiver);
  std::vector<char> mbox_mem = std::vector<char>(abi::smsg_buffer_size(kCredits, kMax) + 4096);
  uint64_t q1 = 0, q2 = 0;

  SmsgRelayEnv env(uint32_t self) {
    SmsgRelayEnv e;
    e.cdm = [this, self](uint64_t id) -> CdmRegion* {
      if (self == 0) return id == 1 ? sender.get() : nullptr;
      return id == 2 && receiver_attached ? receiver.get() : nullptr;
    };
    e.find_domain = [this, self](const Credential& c, uint32_t domain) -> CdmRegion* {
      bool ok = c == Credential{kPtag, kCookie};
      if (self == 1) return ok && domain == receiver->mem_domain() && receiver_attached ? receiver.get() : nullptr;
      return ok && domain == sender->mem_domain() ? sender.get() : nullptr;
    };
    e.may_open_mailbox = [](CdmRegion&) { return true; };
    e.remote = [self](uint32_t node) { return node != self; };
    e.send = [this, self](uint32_t node, const void* m, size_t n) {
      Wire& w = self == 0 ? to1 : to0;
      if (node == self || !w.up) return false;
      if (w.refuse > 0) return --w.refuse, false;
      w.q.emplace_back(static_cast<const char*>(m), static_cast<const char*>(m) + n);
      return true;
    };
    e.peer_up = [this, self](uint32_t) { return (self == 0 ? to1 : to0).up; };
    e.rma_unsent = [this](uint64_t attach_id, uint32_t) { return attach_id == rma_unsent_of; };
    e.fabric_overloaded = [this] { return overloaded; };
    return e;
  }

  Rig() {
    a.start(io);
    b.start(io);
    // The receiver's mailbox memory, registered with its CQ for remote events.
    RegSpec spec{reinterpret_cast<uint64_t>(mbox_mem.data()), mbox_mem.size(), 0, rcq, {}};
    REQUIRE(cdm_fixture::reg_store(*receiver, 3, spec, rcq) == abi::gni::kSuccess);
    abi::mdh::encode(abi::mdh::registration_fields(spec.address, spec.length, receiver->mem_domain(), 3, false), q1, q2);
  }

  // Delivers what is on the wires (and what the relays post meanwhile) until quiet;
  // returns the malformed reasons.
  std::vector<std::string> pump() {
    std::vector<std::string> bad;
    for (int round = 0; round < 100; ++round) {
      io.poll();
      io.restart();
      if (to1.q.empty() && to0.q.empty()) break;
      auto deliver = [&](Wire& w, SmsgRelay& r, uint32_t from) {
        while (!w.q.empty()) {
          std::vector<char> m = std::move(w.q.front());
          w.q.pop_front();
          ctl::Header h;
          std::memcpy(&h, m.data(), sizeof h);
          if (const char* why = r.fabric_message(from, h, m.data(), m.size())) bad.emplace_back(why);
        }
      };
      deliver(to1, b, 0);
      deliver(to0, a, 1);
    }
    return bad;
  }

  ctl::SmsgRelayOpen attrs() const {
    ctl::SmsgRelayOpen o{};
    o.peer_addr = 1;
    o.peer_inst = 20;
    o.mbox = {q1, q2, reinterpret_cast<uint64_t>(mbox_mem.data()), 0, static_cast<uint32_t>(mbox_mem.size()),
              kCredits, kMax};
    return o;
  }

  abi::SmsgRelayCtl* open(ctl::SmsgRelayOpenReply& rep, const ctl::SmsgRelayOpen& o) {
    REQUIRE(a.open(*sender, o, rep) == abi::gni::kSuccess);
    return reinterpret_cast<abi::SmsgRelayCtl*>(sender->heap_ptr(rep.ctl_offset, sizeof(abi::SmsgRelayCtl)));
  }

  // `at`: when the message counts as handed to the fabric (the ack deadline runs from it).
  bool send(uint32_t relay, uint32_t seq, const std::string& text, uint32_t msg_id,
            std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now()) {
    std::vector<char> m = build(relay, seq, text, msg_id);
    return a.send(*sender, m.data(), m.size(), at);
  }

  // Runs the loop for `ms` of real time (the relay's liveness check is every 50 ms while
  // messages are in flight), or until the relay block reports a failure.
  void run_for(const abi::SmsgRelayCtl* blk, int ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (blk->state.load() == 0 && std::chrono::steady_clock::now() < end) {
      io.run_for(std::chrono::milliseconds(5));
      io.restart();
    }
  }

  // Opens the usual relay; its CDM's relay ring.
  abi::RelayRingCtl* open_ring(ctl::SmsgRelayOpenReply& rep) {
    REQUIRE(open(rep, attrs()));
    auto* ring = reinterpret_cast<abi::RelayRingCtl*>(sender->heap_ptr(rep.ring_offset, abi::kRelayRingBytes));
    REQUIRE(ring);
    return ring;
  }

  // As the library: one record into the CDM's relay ring (abi/relay_ring.h) at its tail;
  // true when the daemon had armed the doorbell.
  bool ring_push(abi::RelayRingCtl* r, const std::vector<char>& m) {
    uint64_t tail = r->tail.load();
    uint64_t off = tail % abi::kRelayRingCapacity;
    const uint64_t need = abi::relay_record_bytes(m.size());
    if (abi::kRelayRingCapacity - off < need) {
      const uint32_t pad = abi::kRelayPad;
      std::memcpy(abi::relay_ring_data(r) + off, &pad, 4);
      tail += abi::kRelayRingCapacity - off;
      off = 0;
    }
    const uint32_t len = static_cast<uint32_t>(m.size());
    std::memcpy(abi::relay_ring_data(r) + off, &len, 4);
    std::memcpy(abi::relay_ring_data(r) + off + 4, m.data(), m.size());
    r->tail.store(tail + need);
    return r->armed.exchange(0) != 0;
  }
  // A message as send() builds it, without handing it to the daemon.
  std::vector<char> build(uint32_t relay, uint32_t seq, const std::string& text, uint32_t msg_id) {
    std::vector<char> m(sizeof(ctl::SmsgRelaySend) + text.size());
    ctl::SmsgRelaySend s{};
    s.h = ctl::Header{ctl::kMagic, ctl::kVersion, static_cast<uint16_t>(ctl::Op::kSmsgRelaySend), 0,
                      static_cast<uint32_t>(m.size())};
    s.relay = relay;
    s.seq = seq;
    s.msg_id = msg_id;
    s.remote_event = 0xABC;
    s.src_cq = scq;
    s.length = static_cast<uint32_t>(text.size());
    s.tag = static_cast<uint8_t>(seq + 1);
    std::memcpy(m.data(), &s, sizeof s);
    std::memcpy(m.data() + sizeof s, text.data(), text.size());
    return m;
  }

  // The receiver's view of the mailbox (found through a kMboxOpen as its GNI_SmsgInit does).
  abi::MailboxView mailbox() {
    ctl::MboxOpen req{};
    ctl::SmsgRelayOpen o = attrs();
    req.ptag = kPtag;
    req.cookie = kCookie;
    ctl::copy_mailbox_attrs(req, o.mbox);
    ctl::MboxOpenReply rep{};
    REQUIRE(receiver->mbox_open(req, rep) == abi::gni::kSuccess);
    char* mem = receiver->heap_ptr(rep.ctl_offset, rep.bytes);
    abi::MailboxView v;
    v.ctl = reinterpret_cast<abi::MboxCtl*>(mem);
    v.slots = mem + sizeof(abi::MboxCtl);
    v.credits = kCredits;
    v.slot_size = abi::mbox_slot_size(kMax);
    v.max_size = kMax;
    return v;
  }
};

std::vector<char> data_msg(uint32_t relay, uint32_t seq, uint32_t length, uint32_t declared) {
  std::vector<char> m(sizeof(ctl::SmsgData) + length, 'x');
  ctl::SmsgData d{};
  d.h = ctl::Header{ctl::kMagic, ctl::kVersion, static_cast<uint16_t>(ctl::Op::kSmsgData), 0,
                    static_cast<uint32_t>(m.size())};
  d.relay = relay;
  d.seq = seq;
  d.length = declared;
  std::memcpy(m.data(), &d, sizeof d);
  return m;
}

}  // namespace

TEST_CASE("SMSG relay: messages land in the mailbox in order, CQEs on both sides, credits come back") {
  Rig r;
  ctl::SmsgRelayOpenReply rep{};
  abi::SmsgRelayCtl* blk = r.open(rep, r.attrs());
  REQUIRE(blk);
  CHECK(blk->magic == abi::kRelayMagic);
  CHECK(blk->credits == kCredits);
  for (uint32_t i = 0; i < kCredits; ++i) CHECK(r.send(rep.relay, i, "message " + std::to_string(i), 100 + i));
  // A fifth would exceed the credits: the daemon refuses it as malformed (the library checks first).
  CHECK_FALSE(r.send(rep.relay, kCredits, "too many", 200));
  CHECK(r.pump().empty());
  abi::MailboxView v = r.mailbox();
  for (uint32_t i = 0; i < kCredits; ++i) {
    abi::MboxSlotHeader* s = abi::smsg_peek(v);
    REQUIRE(s);
    CHECK(std::string(reinterpret_cast<char*>(s + 1), s->length) == "message " + std::to_string(i));
    CHECK(s->tag == i + 1);
    abi::smsg_release(v);
  }
  CHECK(abi::smsg_peek(v) == nullptr);
  auto remote = drain(*r.receiver, r.rcq);
  REQUIRE(remote.size() == kCredits);
  for (uint64_t e : remote) {
    CHECK(cqe::type_of(e) == cqe::kTypeSmsg);
    CHECK(cqe::status_of(e) == 0);
    CHECK(cqe::id_of(e) == 0xABC);  // the sender EP's remote event data
  }
  auto local = drain(*r.sender, r.scq);
  REQUIRE(local.size() == kCredits);
  for (uint32_t i = 0; i < kCredits; ++i) {
    CHECK(cqe::status_of(local[i]) == 0);
    CHECK(cqe::id_of(local[i]) == 100 + i);  // msg_id, in order
  }
  CHECK(blk->delivered.load() == kCredits);
  // The releases reach the sender through the poll (no new traffic).
  for (int i = 0; i < 200 && blk->released.load() != kCredits; ++i) {
    r.io.run_for(std::chrono::milliseconds(1));
    r.io.restart();
    r.pump();
  }
  CHECK(blk->released.load() == kCredits);
  CHECK(blk->state.load() == 0);
  // Credits back: the next message goes.
  CHECK(r.send(rep.relay, kCredits, "after release", 300));
  CHECK(r.pump().empty());
  REQUIRE(abi::smsg_peek(v));
  // The same attributes again resume the same relay.
  ctl::SmsgRelayOpenReply again{};
  CHECK(r.open(again, r.attrs()) == blk);
  CHECK(again.relay == rep.relay);
}

TEST_CASE("SMSG relay: the receiver's release note returns the credits without waiting for the poll") {
  Rig r;
  ctl::SmsgRelayOpenReply rep{};
  abi::SmsgRelayCtl* blk = r.open(rep, r.attrs());
  REQUIRE(blk);
  for (uint32_t i = 0; i < kCredits; ++i) CHECK(r.send(rep.relay, i, "m" + std::to_string(i), i));
  const auto t0 = std::chrono::steady_clock::now();  // the receiver's poll timer starts now
  CHECK(r.pump().empty());
  abi::MailboxView v = r.mailbox();
  // The receiving daemon asks for a note an eighth of a mailbox past what it reported
  // (nothing yet): the library's release that reaches it says so, once.
  constexpr uint32_t kNoteEvery = std::max<uint32_t>(1, kCredits / 8);
  CHECK(v.ctl->note_at.load() == kNoteEvery);
  uint32_t noted = ~0u;
  for (uint32_t i = 0; i < kCredits / 2; ++i) {
    REQUIRE(abi::smsg_peek(v));
    abi::smsg_release(v);
    CHECK(abi::smsg_note_due(v, noted) == (i + 1 == kNoteEvery));
  }
  CHECK_FALSE(abi::smsg_note_due(v, noted));
  CHECK(r.pump().empty());
  // Without the note the releases wait for the daemon's poll (100 µs at the soonest):
  // checkable when this ran faster than that (sanitizer builds may not).
  if (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(100)) CHECK(blk->released.load() == 0);
  r.b.released(*r.receiver);
  CHECK(r.pump().empty());
  CHECK(blk->released.load() == kCredits / 2);
  // Reported: the next note is due an eighth of a mailbox further on.
  CHECK(v.ctl->note_at.load() == kCredits / 2 + kNoteEvery);
  REQUIRE(abi::smsg_peek(v));
  abi::smsg_release(v);
  CHECK(abi::smsg_note_due(v, noted) == (kNoteEvery == 1));
  CHECK(r.pump().empty());
  // Reported now, so that no poll of the receiving daemon is due below (under a sanitizer
  // or a loaded machine its timer could otherwise fire inside the next io.poll()).
  r.b.released(*r.receiver);
  CHECK(r.pump().empty());
  CHECK(blk->released.load() == kCredits / 2 + 1);
  // A note from a CDM that released nothing of a relay sends nothing.
  r.b.released(*r.sender);
  r.io.poll();
  r.io.restart();
  CHECK(r.to0.q.empty());
}

TEST_CASE("SMSG relay: only relays whose sender is short of credits are polled") {
  // A daemon of a large all-to-all holds hundreds of relays with a message or two delivered;
  // polling them (every 100 µs, later 128 of them every 20 ms) cost it its CPU. Their
  // senders have credits to spare: nothing polls them, and their releases ride on the acks
  // of the next messages (or a note), which also make a relay short once its sender is.
  Rig r;
  ctl::SmsgRelayOpenReply rep{};
  abi::SmsgRelayCtl* blk = r.open(rep, r.attrs());
  REQUIRE(blk);
  CHECK(r.send(rep.relay, 0, "one", 1));
  CHECK(r.pump().empty());
  auto st = r.b.status();
  CHECK(st["rx_watched"] == 1);
  CHECK(st["rx_credit_short"] == 0);  // 3 of 4 credits left
  abi::MailboxView v = r.mailbox();
  REQUIRE(abi::smsg_peek(v));
  abi::smsg_release(v);
  // The sender's liveness check of its (acknowledged) message runs out first.
  r.io.run_for(std::chrono::milliseconds(80));
  r.io.restart();
  CHECK(r.pump().empty());
  // Then no timer at all: an idle relay costs the receiver's daemon nothing.
  CHECK(r.io.run_for(std::chrono::milliseconds(30)) == 0);
  r.io.restart();
  CHECK(r.to0.q.empty());
  CHECK(blk->released.load() == 0);
  CHECK(r.b.status()["rx_watched"] == 1);
  // The next message's ack carries the release.
  CHECK(r.send(rep.relay, 1, "two", 2));
  CHECK(r.pump().empty());
  CHECK(blk->released.load() == 1);
  st = r.b.status();
  CHECK(st["rx_watched"] == 1);  // "two" is not released
  CHECK(st["rx_credit_short"] == 0);
  // Three in the mailbox: one credit left, the relay is polled fast.
  for (uint32_t i = 2; i <= 3; ++i) CHECK(r.send(rep.relay, i, "more", 1 + i));
  CHECK(r.pump().empty());
  st = r.b.status();
  CHECK(st["rx_watched"] == 1);
  CHECK(st["rx_credit_short"] == 1);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(abi::smsg_peek(v));
    abi::smsg_release(v);
  }
  for (int i = 0; i < 1000 && blk->released.load() != 4; ++i) {
    r.io.run_for(std::chrono::milliseconds(1));
    r.io.restart();
    r.pump();
  }
  CHECK(blk->released.load() == 4);
  st = r.b.status();
  CHECK(st["rx_watched"] == 0);
  CHECK(st["rx_credit_short"] == 0);
  // Everything reported: no timer is left behind either.
  r.io.run_for(std::chrono::milliseconds(80));
  r.io.restart();
  CHECK(r.io.run_for(std::chrono::milliseconds(30)) == 0);
}

TEST_CASE("SMSG relay: messages through the relay ring arrive in order; the doorbell is re-armed when idle") {
  Rig r;
  ctl::SmsgRelayOpenReply rep{};
  abi::RelayRingCtl* ring = r.open_ring(rep);
  CHECK(ring->magic == abi::kRelayRingMagic);
  CHECK(ring->capacity == abi::kRelayRingCapacity);
  CHECK(ring->armed.load() == 1);  // idle: the first message rings
  // A second relay of the same CDM shares the ring.
  ctl::SmsgRelayOpen other = r.attrs();
  other.peer_inst = 21;
  ctl::SmsgRelayOpenReply rep2{};
  REQUIRE(r.a.open(*r.sender, other, rep2) == abi::gni::kSuccess);
  CHECK(rep2.ring_offset == rep.ring_offset);
  CHECK(r.ring_push(ring, r.build(rep.relay, 0, "first", 1)));       // rings
  CHECK_FALSE(r.ring_push(ring, r.build(rep.relay, 1, "second", 2)));  // already rung
  r.a.doorbell(*r.sender);
  CHECK(ring->head.load() == ring->tail.load());
  CHECK(r.pump().empty());
  abi::MailboxView v = r.mailbox();
  for (const char* want : {"first", "second"}) {
    abi::MboxSlotHeader* s = abi::smsg_peek(v);
    REQUIRE(s);
    CHECK(std::string(reinterpret_cast<char*>(s + 1), s->length) == want);
    abi::smsg_release(v);
  }
  // One doorbell, one message: not streaming, so the doorbell is armed again at once.
  CHECK(ring->armed.load() == 1);
  CHECK(r.a.status()["ring_messages"] == 2);
  CHECK(r.a.status()["ring_malformed"] == 0);
}

TEST_CASE("SMSG relay: a corrupt relay ring is refused without a byte sent") {
  Rig r;
  ctl::SmsgRelayOpenReply rep{};
  abi::RelayRingCtl* ring = r.open_ring(rep);
  SUBCASE("a record longer than the ring holds") {
    const uint32_t len = 0x7FFFFFF0;
    std::memcpy(abi::relay_ring_data(ring), &len, 4);
    ring->tail.store(64);
  }
  SUBCASE("a tail beyond the capacity") { ring->tail.store(abi::kRelayRingCapacity + 8); }
  SUBCASE("a pad record past the tail") {
    const uint32_t pad = abi::kRelayPad;
    std::memcpy(abi::relay_ring_data(ring), &pad, 4);
    ring->tail.store(8);
  }
  r.a.doorbell(*r.sender);
  CHECK(r.a.status()["ring_malformed"] == 1);
  CHECK(r.a.status()["ring_messages"] == 0);
  CHECK(r.to1.q.empty());
  // Broken for good: later records are not read either.
  r.ring_push(ring, r.build(rep.relay, 0, "late", 1));
  r.a.doorbell(*r.sender);
  CHECK(r.to1.q.empty());
}

TEST_CASE("SMSG relay: the receiver's daemon refuses forged and malformed messages before writing") {
  Rig r;
  ctl::SmsgRelayOpenReply rep{};
  r.open(rep, r.attrs());
  CHECK(r.send(rep.relay, 0, "first", 1));
  CHECK(r.pump().empty());
  abi::MailboxView v = r.mailbox();
  const uint32_t sent_before = v.ctl->sent.load();
  auto inject = [&](const std::vector<char>& m, uint32_t from = 0) {
    ctl::Header h;
    std::memcpy(&h, m.data(), sizeof h);
    const char* why = r.b.fabric_message(from, h, m.data(), m.size());
    return why ? std::string(why) : std::string();
  };
  CHECK(inject(data_msg(rep.relay, 5, 4, 4)) == "SmsgData out of sequence");
  CHECK(inject(data_msg(rep.relay, 1, 4, 100)) == "SmsgData length does not match");
  const uint32_t over = abi::smsg_capacity(kMax) + 1;  // msg_maxsize plus a tagged header fits
  CHECK(inject(data_msg(rep.relay, 1, over, over)) == "SmsgData longer than the mailbox's messages");
  // Fill the credits (message 0 is unreleased), then one more is refused.
  for (uint32_t s = 1; s < kCredits; ++s) CHECK(inject(data_msg(rep.relay, s, 4, 4)).empty());
  CHECK(inject(data_msg(rep.relay, kCredits, 4, 4)) == "SmsgData beyond the credits");
  CHECK(inject(data_msg(rep.relay, 0, 4, 4)).empty());  // a duplicate: ignored, not written again
  CHECK(v.ctl->sent.load() == sent_before + kCredits - 1);
  // An open that speaks for another node.
  ctl::SmsgOpen o{};
  o.h = ctl::make_header<ctl::SmsgOpen>(ctl::Op::kSmsgOpen, 0);
  o.origin_node = 5;
  o.mbox.credits = kCredits;
  o.mbox.max_size = kMax;
  std::vector<char> om(reinterpret_cast<char*>(&o), reinterpret_cast<char*>(&o) + sizeof o);
  CHECK(inject(om) == "SmsgOpen about another node");
  // Data from another node for this relay is not this relay's: it gets a failure answer.
  CHECK(inject(data_msg(rep.relay, 1, 4, 4), 3).empty());
  CHECK(r.to0.q.size() == 1);
}

TEST_CASE("SMSG relay: a mailbox outside the receiver's registration is refused, the sender fails") {
  Rig r;
  ctl::SmsgRelayOpen o = r.attrs();
  o.mbox.mbox_offset = 4096 * 16;  // beyond the registered buffer
  ctl::SmsgRelayOpenReply rep{};
  abi::SmsgRelayCtl* blk = r.open(rep, o);
  CHECK(r.send(rep.relay, 0, "lost", 7));
  CHECK(r.pump().empty());
  CHECK(blk->state.load() == cqe::kErrProtection);
  auto local = drain(*r.sender, r.scq);
  REQUIRE(local.size() == 1);
  CHECK(cqe::status_of(local[0]) == cqe::kErrProtection);
  CHECK(cqe::id_of(local[0]) == 7);
  CHECK(drain(*r.receiver, r.rcq).empty());
  // A re-open after the failure is a new relay.
  ctl::SmsgRelayOpenReply rep2{};
  CHECK(r.open(rep2, o) != blk);
}

TEST_CASE("SMSG relay: receiver gone and peer down complete messages in flight with errors") {
  SUBCASE("the receiving CDM is reclaimed") {
    Rig r;
    ctl::SmsgRelayOpenReply rep{};
    abi::SmsgRelayCtl* blk = r.open(rep, r.attrs());
    CHECK(r.send(rep.relay, 0, "one", 1));
    CHECK(r.pump().empty());
    r.receiver_attached = false;
    r.b.cdm_gone(2);
    CHECK(r.send(rep.relay, 1, "two", 2));  // before the failure is known
    CHECK(r.pump().empty());
    CHECK(blk->state.load() == cqe::kErrPeerGone);
    auto local = drain(*r.sender, r.scq);
    REQUIRE(local.size() == 2);
    CHECK(cqe::status_of(local[0]) == 0);
    CHECK(cqe::status_of(local[1]) == cqe::kErrPeerGone);
  }
  SUBCASE("the receiver takes the message and exits before its daemon's ack went out") {
    // Finding 11 (docs/fault-campaigns.md): a fin delivered, then the receiving process gone
    // while the daemon's ack was still only posted. The ack must go before the failure, so
    // the sender's message completes as delivered (one CQE, no error, none missing).
    Rig r;
    ctl::SmsgRelayOpenReply rep{};
    abi::SmsgRelayCtl* blk = r.open(rep, r.attrs());
    CHECK(r.send(rep.relay, 0, "fin", 7));
    while (!r.to1.q.empty()) {  // to the receiver's daemon, its loop not run: no ack yet
      std::vector<char> m = std::move(r.to1.q.front());
      r.to1.q.pop_front();
      ctl::Header h;
      std::memcpy(&h, m.data(), sizeof h);
      CHECK(r.b.fabric_message(0, h, m.data(), m.size()) == nullptr);
    }
    CHECK(r.to0.q.empty());
    abi::MailboxView v = r.mailbox();
    REQUIRE(abi::smsg_peek(v));  // the receiver has it
    abi::smsg_release(v);
    r.b.cdm_gone(2);  // as Node::connection_closed: before the region is reclaimed
    r.receiver_attached = false;
    CHECK(r.pump().empty());
    CHECK(blk->state.load() == cqe::kErrPeerGone);  // later sends fail
    CHECK(blk->delivered.load() == 1);
    auto local = drain(*r.sender, r.scq);
    REQUIRE(local.size() == 1);
    CHECK(cqe::status_of(local[0]) == 0);
    CHECK(cqe::id_of(local[0]) == 7);
    CHECK(r.a.status()["tx_in_flight"] == 0);
  }
  SUBCASE("the fabric reports the peer lost (retry budget, restart)") {
    Rig r;
    ctl::SmsgRelayOpenReply rep{};
    abi::SmsgRelayCtl* blk = r.open(rep, r.attrs());
    CHECK(r.send(rep.relay, 0, "one", 1));
    r.to1.q.clear();  // abandoned by the channel
    r.a.peer_lost(1);
    CHECK(blk->state.load() == cqe::kErrPeerGone);
    auto local = drain(*r.sender, r.scq);
    REQUIRE(local.size() == 1);
    CHECK(cqe::status_of(local[0]) == cqe::kErrPeerGone);
  }
  SUBCASE("the receiver's daemon lost the sender's: the relay is forgotten, later data refused") {
    Rig r;
    ctl::SmsgRelayOpenReply rep{};
    abi::SmsgRelayCtl* blk = r.open(rep, r.attrs());
    CHECK(r.send(rep.relay, 0, "one", 1));
    CHECK(r.pump().empty());
    CHECK(r.b.status()["rx_relays"] == 1);
    r.b.peer_lost(0);
    CHECK(r.b.status()["rx_relays"] == 0);
    CHECK(r.b.status()["rx_watched"] == 0);
    CHECK(r.send(rep.relay, 1, "two", 2));
    r.pump();
    CHECK(blk->state.load() == cqe::kErrPeerGone);
    auto local = drain(*r.sender, r.scq);
    REQUIRE(local.size() == 2);
    CHECK(cqe::status_of(local[0]) == 0);  // delivered before: stays in the mailbox
    CHECK(cqe::status_of(local[1]) == cqe::kErrPeerGone);
  }
  SUBCASE("the fabric channel to the peer is down") {
    Rig r;
    ctl::SmsgRelayOpenReply rep{};
    abi::SmsgRelayCtl* blk = r.open(rep, r.attrs());
    CHECK(r.send(rep.relay, 0, "one", 1));
    r.to1.q.clear();  // lost with the channel
    r.to1.up = false;
    for (int i = 0; i < 200 && blk->state.load() == 0; ++i) {
      r.io.run_for(std::chrono::milliseconds(1));
      r.io.restart();
    }
    CHECK(blk->state.load() == cqe::kErrPeerGone);
    auto local = drain(*r.sender, r.scq);
    REQUIRE(local.size() == 1);
    CHECK(cqe::status_of(local[0]) == cqe::kErrPeerGone);
  }
}

// The ack deadline (SmsgRelay::kAckDeadline, 5 s) is stretched to kAckDeadlineOverloaded
// (20 s) while the fabric says the host is starved: then every peer's acks come late
// (docs/notes/2026-12-07-liveness-overload.md, run B4). The message's send time is set in
// the past instead of waiting seconds: the deadline runs from the time send() is given.
TEST_CASE("SMSG relay: the ack deadline is 5 s, 20 s while the fabric is overloaded") {
  using std::chrono::seconds;
  static_assert(SmsgRelay::kAckDeadline == seconds(5) && SmsgRelay::kAckDeadlineOverloaded == seconds(20));
  Rig r;
  ctl::SmsgRelayOpenReply rep{};
  abi::SmsgRelayCtl* blk = r.open(rep, r.attrs());
  const auto now = std::chrono::steady_clock::now();
  auto expect_failed = [&](bool failed) {
    auto local = drain(*r.sender, r.scq);
    if (!failed) {
      CHECK(blk->state.load() == 0);
      CHECK(local.empty());
      CHECK(r.a.status()["failures"] == 0);
      return;
    }
    CHECK(blk->state.load() == cqe::kErrPeerGone);
    REQUIRE(local.size() == 1);
    CHECK(cqe::status_of(local[0]) == cqe::kErrPeerGone);
    CHECK(r.a.status()["failures"] == 1);
  };
  // 200 ms of loop: four liveness checks, so "not failed" is a verdict, not a timer not yet due.
  SUBCASE("not overloaded: an ack 4 s late is waited for") {
    CHECK(r.send(rep.relay, 0, "m", 1, now - seconds(4)));
    r.run_for(blk, 200);
    expect_failed(false);
    CHECK(r.pump().empty());  // the ack comes: delivered, no error
    auto local = drain(*r.sender, r.scq);
    REQUIRE(local.size() == 1);
    CHECK(cqe::status_of(local[0]) == 0);
    CHECK(blk->state.load() == 0);
  }
  SUBCASE("not overloaded: 6 s without an ack fails the relay") {
    CHECK(r.send(rep.relay, 0, "m", 1, now - seconds(6)));
    r.run_for(blk, 200);
    expect_failed(true);
  }
  SUBCASE("overloaded: 6 s and 19 s without an ack are waited for; the ack then delivers") {
    r.overloaded = true;
    CHECK(r.send(rep.relay, 0, "m", 1, now - seconds(19)));
    CHECK(r.send(rep.relay, 1, "n", 2, now - seconds(6)));
    r.run_for(blk, 200);
    expect_failed(false);
    CHECK(r.pump().empty());
    auto local = drain(*r.sender, r.scq);
    REQUIRE(local.size() == 2);
    CHECK(cqe::status_of(local[0]) == 0);
    CHECK(cqe::status_of(local[1]) == 0);
    CHECK(blk->delivered.load() == 2);
  }
  SUBCASE("overloaded: 21 s without an ack fails the relay (the bound holds)") {
    r.overloaded = true;
    CHECK(r.send(rep.relay, 0, "m", 1, now - seconds(21)));
    r.run_for(blk, 200);
    expect_failed(true);
  }
  SUBCASE("the overload ends: the 5 s deadline applies again at the next check") {
    r.overloaded = true;
    CHECK(r.send(rep.relay, 0, "m", 1, now - seconds(6)));
    r.run_for(blk, 200);
    expect_failed(false);
    r.overloaded = false;
    r.run_for(blk, 200);
    expect_failed(true);
  }
}

TEST_CASE("SMSG relay: messages the fabric refuses for a full backlog wait, in order, and go later") {
  Rig r;
  ctl::SmsgRelayOpenReply rep{};
  abi::SmsgRelayCtl* blk = r.open(rep, r.attrs());
  r.to1.refuse = 1;  // the SmsgOpen is refused: it and everything behind it wait
  for (uint32_t i = 0; i < 3; ++i) CHECK(r.send(rep.relay, i, "queued " + std::to_string(i), i));
  CHECK(r.to1.q.empty());
  SUBCASE("retried by the timer") {
    for (int i = 0; i < 100 && r.to1.q.empty(); ++i) {
      r.io.run_for(std::chrono::milliseconds(1));
      r.io.restart();
    }
  }
  SUBCASE("sent at the fabric's next flush") { r.a.progress(); }
  CHECK(r.to1.q.size() == 4);  // open + 3 messages
  CHECK(r.pump().empty());
  abi::MailboxView v = r.mailbox();
  for (uint32_t i = 0; i < 3; ++i) {
    abi::MboxSlotHeader* s = abi::smsg_peek(v);
    REQUIRE(s);
    CHECK(std::string(reinterpret_cast<char*>(s + 1), s->length) == "queued " + std::to_string(i));
    abi::smsg_release(v);
  }
  CHECK(blk->delivered.load() == 3);
  CHECK(blk->state.load() == 0);
}

TEST_CASE("SMSG relay: a message waits in the ring for the RemotePosts its CDM sent before it") {
  Rig r;
  ctl::SmsgRelayOpenReply rep{};
  abi::RelayRingCtl* ring = r.open_ring(rep);
  // Sent after two RemotePosts the daemon has not taken yet; the next one after it too.
  std::vector<char> m = r.build(rep.relay, 0, "after two posts", 1);
  ctl::SmsgRelaySend hdr;
  std::memcpy(&hdr, m.data(), sizeof hdr);
  hdr.posts_before = 2;
  std::memcpy(m.data(), &hdr, sizeof hdr);
  r.ring_push(ring, m);
  r.ring_push(ring, r.build(rep.relay, 1, "behind it", 2));
  r.a.doorbell(*r.sender);
  CHECK(r.to1.q.empty());
  CHECK(ring->head.load() == 0);
  CHECK(r.a.status()["held_behind_posts"] == 1);
  r.sender->took_remote_post();
  r.a.posts_taken(*r.sender);
  CHECK(r.to1.q.empty());  // one of two
  r.sender->took_remote_post();
  r.a.posts_taken(*r.sender);
  CHECK(ring->head.load() == ring->tail.load());
  CHECK(r.pump().empty());
  abi::MailboxView v = r.mailbox();
  for (const char* want : {"after two posts", "behind it"}) {
    abi::MboxSlotHeader* s = abi::smsg_peek(v);
    REQUIRE(s);
    CHECK(std::string(reinterpret_cast<char*>(s + 1), s->length) == want);
    abi::smsg_release(v);
  }
  CHECK(r.a.status()["ring_malformed"] == 0);
}

TEST_CASE("SMSG relay: a message waits behind its CDM's RMA pieces not yet sent to that node") {
  Rig r;
  ctl::SmsgRelayOpenReply rep{};
  r.open(rep, r.attrs());
  r.rma_unsent_of = r.sender->attach_id();
  CHECK(r.send(rep.relay, 0, "after the PUT", 1));
  CHECK(r.send(rep.relay, 1, "and another", 2));
  r.io.poll();
  r.io.restart();
  CHECK(r.to1.q.size() == 1);  // the relay's open (no data) goes; both messages wait
  r.a.rma_sent(1);             // an early call: the pieces still wait
  CHECK(r.to1.q.size() == 1);
  r.rma_unsent_of = 0;
  r.a.rma_sent(1);
  CHECK(r.to1.q.size() == 3);
  CHECK(r.pump().empty());
  abi::MailboxView v = r.mailbox();
  for (const char* want : {"after the PUT", "and another"}) {
    abi::MboxSlotHeader* s = abi::smsg_peek(v);
    REQUIRE(s);
    CHECK(std::string(reinterpret_cast<char*>(s + 1), s->length) == want);
    abi::smsg_release(v);
  }
}
