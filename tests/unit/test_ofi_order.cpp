// Order between the ofi fabric's paths to a peer (ugni/src/ofi_order.h): which post is held
// behind which by its path and class, given the provider's order bits; that held posts go in
// FIFO order from the completion that gives back what they waited for (never in the post
// call's own wait); that a refused issue is tried again, and that held posts can be failed
// by peer. A stand-in plays the port: it records what was issued and completes on demand.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "ofi_order.h"

using nicemu::ugni::OfiAdmit;
using nicemu::ugni::OfiIssue;
using nicemu::ugni::OfiOrder;
using nicemu::ugni::OfiOrderCaps;
using nicemu::ugni::OfiOrderHooks;
using nicemu::ugni::OfiOrderTicket;
using nicemu::ugni::OfiPath;
namespace ord = nicemu::ugni::ordering;

namespace {

// A post of the stand-in port: its ticket once issued.
struct Post {
  Post(int i) : id(i) {}  // NOLINT: brace lists of posts read better
  int id = 0;
  OfiOrderTicket t;
  bool issued = false;
  uint64_t dropped = 0;  // the drop hook's status
};

struct Port {
  OfiOrder* o = nullptr;
  std::vector<int> issued;   // ids in issue order
  int refuse = 0;            // the next `refuse` issues find no room
  bool fail_at_once = false;  // an issue completes with an error inside the hook (leave re-entered)
  std::vector<Post*> in_flight;
};

OfiIssue issue(void* owner, void* item, const OfiOrderTicket& t) {
  auto* port = static_cast<Port*>(owner);
  auto* p = static_cast<Post*>(item);
  if (port->refuse > 0) {
    --port->refuse;
    return OfiIssue::kRetry;
  }
  p->t = t;
  p->issued = true;
  port->issued.push_back(p->id);
  if (port->fail_at_once) {
    port->o->leave(p->t);  // the port's complete: gives the count back from inside the issue
    return OfiIssue::kDone;
  }
  port->in_flight.push_back(p);
  return OfiIssue::kDone;
}

void drop(void*, void* item, uint64_t status) { static_cast<Post*>(item)->dropped = status ? status : ~0ull; }

OfiOrderCaps rxm() {  // what tcp;ofi_rxm gives: no write-after-read order
  OfiOrderCaps c;
  c.raw = c.waw = c.rar = c.sas = true;
  return c;
}

struct Fixture {
  Port port;
  OfiOrder o;
  explicit Fixture(const OfiOrderCaps& caps = rxm(), uint32_t max_held = 100) : o(caps, hooks(), max_held) {
    port.o = &o;
  }
  OfiOrderHooks hooks() {
    OfiOrderHooks h;
    h.issue = issue;
    h.drop = drop;
    h.owner = &port;
    return h;
  }
  // A post as the port makes one: the fast path, else held. True if issued by the caller now.
  OfiAdmit post(Post& p, OfiPath path, ord::Class cls, uint64_t peer = 7) {
    if (o.enter(peer, path, cls, p.t)) {
      p.issued = true;
      port.issued.push_back(p.id);
      port.in_flight.push_back(&p);
      return OfiAdmit::kGo;
    }
    const OfiAdmit a = o.hold(peer, path, cls, &p, true, p.t);
    if (a == OfiAdmit::kGo) {
      p.issued = true;
      port.issued.push_back(p.id);
      port.in_flight.push_back(&p);
    }
    return a;
  }
  // The provider completes the oldest post in flight.
  void complete_one() {
    REQUIRE(!port.in_flight.empty());
    Post* p = port.in_flight.front();
    port.in_flight.erase(port.in_flight.begin());
    o.leave(p->t);
  }
  void complete_all() {
    while (!port.in_flight.empty()) complete_one();
  }
};

// Posts `first`, then `then` (same peer unless told): whether `then` was held.
bool held(const OfiOrderCaps& caps, OfiPath first, ord::Class c1, OfiPath then, ord::Class c2, uint64_t peer2 = 7) {
  Fixture f(caps);
  Post a{1}, b{2};
  CHECK(f.post(a, first, c1) == OfiAdmit::kGo);  // nothing in flight: the first goes
  const OfiAdmit r = f.post(b, then, c2, peer2);
  const bool was_held = r == OfiAdmit::kHeld && !b.issued;
  f.complete_all();  // the first completes: a held second goes from there
  CHECK(b.issued);
  f.complete_all();
  CHECK(f.o.held() == 0);
  CHECK(f.o.any_held() == (0 != 0));
  return was_held;
}

}  // namespace

TEST_CASE("ofi order: a post is held behind the other path, not behind what the provider orders") {
  const auto d = ord::kDefault;
  CHECK(held(rxm(), OfiPath::kMsg, d, OfiPath::kWrite, d));    // AMO then PUT: the AMO's reply first
  CHECK(held(rxm(), OfiPath::kWrite, d, OfiPath::kMsg, d));    // PUT then AMO or CQ write
  CHECK(held(rxm(), OfiPath::kWrite, d, OfiPath::kSmsg, d));   // PUT then the SMSG message announcing it
  CHECK(held(rxm(), OfiPath::kSmsg, d, OfiPath::kMsg, d));     // a batched SMSG message is not on the wire yet
  CHECK(!held(rxm(), OfiPath::kWrite, d, OfiPath::kWrite, d));  // WAW
  CHECK(!held(rxm(), OfiPath::kWrite, d, OfiPath::kRead, d));   // RAW
  CHECK(!held(rxm(), OfiPath::kRead, d, OfiPath::kRead, d));    // RAR
  CHECK(held(rxm(), OfiPath::kRead, d, OfiPath::kWrite, d));    // no WAR: the GET must read the old value
  CHECK(!held(rxm(), OfiPath::kMsg, d, OfiPath::kMsg, d));      // one connection, executed in CQ order
  CHECK(!held(rxm(), OfiPath::kSmsg, d, OfiPath::kSmsg, d));    // channels keep their own order
  // A provider with no order bits at all: every RMA waits for the earlier one, messages too.
  CHECK(held(OfiOrderCaps{}, OfiPath::kWrite, d, OfiPath::kWrite, d));
  CHECK(held(OfiOrderCaps{}, OfiPath::kMsg, d, OfiPath::kMsg, d));
  // With every bit, WAR costs nothing either.
  OfiOrderCaps all = rxm();
  all.war = true;
  CHECK(!held(all, OfiPath::kRead, d, OfiPath::kWrite, d));
}

TEST_CASE("ofi order: classes") {
  const auto d = ord::kDefault, s = ord::kStrict, r = ord::kRelaxed;
  CHECK(!held(rxm(), OfiPath::kMsg, r, OfiPath::kWrite, d));  // either one relaxed: may pass
  CHECK(!held(rxm(), OfiPath::kMsg, d, OfiPath::kWrite, r));  // a relaxed post is never held for what is in flight
  CHECK(held(rxm(), OfiPath::kMsg, r, OfiPath::kWrite, s));   // a strict one waits for everything
  CHECK(held(rxm(), OfiPath::kMsg, s, OfiPath::kWrite, d));
  // Default orders as strict across paths (the target's PI flags are not known): a GET or AMO
  // after a PUT is held, though the model would let it pass a PUT into a default registration.
  CHECK(held(rxm(), OfiPath::kWrite, d, OfiPath::kMsg, d));
}

TEST_CASE("ofi order: peers are apart") {
  // Another peer's AMO in flight: a PUT goes (slots by AV address modulo 256; 7 and 8 differ).
  CHECK(!held(rxm(), OfiPath::kMsg, ord::kDefault, OfiPath::kWrite, ord::kDefault, 8));
  // A collision only orders more: 7 and 7 + 256 share a slot.
  CHECK(held(rxm(), OfiPath::kMsg, ord::kDefault, OfiPath::kWrite, ord::kDefault, 7 + 256));
}

TEST_CASE("ofi order: held posts go in FIFO order from the completions, later posts behind them") {
  Fixture f;
  const auto d = ord::kDefault;
  Post amo{1}, put1{2}, put2{3}, amo2{4}, put3{5};
  CHECK(f.post(amo, OfiPath::kMsg, d) == OfiAdmit::kGo);
  CHECK(f.post(put1, OfiPath::kWrite, d) == OfiAdmit::kHeld);
  // A PUT after a held PUT: the provider would order it behind put1 (WAW), but put1 is not
  // issued yet, so it is held too (FIFO); so is an AMO and the PUT after it.
  CHECK(f.post(put2, OfiPath::kWrite, d) == OfiAdmit::kHeld);
  CHECK(f.post(amo2, OfiPath::kMsg, d) == OfiAdmit::kHeld);
  CHECK(f.post(put3, OfiPath::kWrite, d) == OfiAdmit::kHeld);
  CHECK(f.o.held() == 4);
  CHECK(f.o.any_held() == (4 != 0));
  CHECK(f.port.issued == std::vector<int>{1});
  // Another peer is not held behind them.
  Post other{9};
  CHECK(f.post(other, OfiPath::kWrite, d, 8) == OfiAdmit::kGo);
  f.port.in_flight.pop_back();
  f.o.leave(other.t);
  // The AMO's reply: both PUTs go (WAW between them); the AMO after them waits for them.
  f.complete_one();
  CHECK(f.port.issued == std::vector<int>{1, 9, 2, 3});
  f.complete_one();
  CHECK(f.port.issued == std::vector<int>{1, 9, 2, 3});  // put2 still in flight
  f.complete_one();
  CHECK(f.port.issued == std::vector<int>{1, 9, 2, 3, 4});
  f.complete_one();
  CHECK(f.port.issued == std::vector<int>{1, 9, 2, 3, 4, 5});
  f.complete_all();
  CHECK(f.o.held() == 0);
  CHECK(f.o.any_held() == (0 != 0));
  // Nothing in flight, nothing held: the fast path again.
  Post last{6};
  CHECK(f.post(last, OfiPath::kMsg, d) == OfiAdmit::kGo);
  f.complete_all();
}

TEST_CASE("ofi order: an issue that fails at once gives back inside the drain, which goes on") {
  Fixture f;
  const auto d = ord::kDefault;
  Post amo{1}, p[4] = {{2}, {3}, {4}, {5}};
  CHECK(f.post(amo, OfiPath::kMsg, d) == OfiAdmit::kGo);
  for (int k = 0; k < 4; ++k) CHECK(f.post(p[k], k % 2 ? OfiPath::kMsg : OfiPath::kWrite, d) == OfiAdmit::kHeld);
  f.port.fail_at_once = true;  // each held post fails as it is issued (leave from the hook)
  f.complete_one();
  CHECK(f.port.issued == std::vector<int>{1, 2, 3, 4, 5});
  CHECK(f.o.held() == 0);
  CHECK(f.o.any_held() == (0 != 0));
}

TEST_CASE("ofi order: no room in the provider: the head stays first, pump tries again") {
  Fixture f;
  const auto d = ord::kDefault;
  Post amo{1}, put1{2}, put2{3};
  CHECK(f.post(amo, OfiPath::kMsg, d) == OfiAdmit::kGo);
  CHECK(f.post(put1, OfiPath::kWrite, d) == OfiAdmit::kHeld);
  CHECK(f.post(put2, OfiPath::kWrite, d) == OfiAdmit::kHeld);
  f.port.refuse = 2;  // refused at the AMO's completion, and once more at the next post
  f.complete_one();
  CHECK(f.port.issued == std::vector<int>{1});
  CHECK(f.o.any_parked());
  CHECK(f.o.held() == 2);
  CHECK(f.o.any_held() == (2 != 0));
  // A post meanwhile is held behind them, not issued before them.
  Post put3{4};
  CHECK(f.post(put3, OfiPath::kWrite, d) == OfiAdmit::kHeld);
  CHECK(f.port.issued == std::vector<int>{1});
  f.o.pump();
  CHECK(!f.o.any_parked());
  CHECK(f.port.issued == std::vector<int>{1, 2, 3, 4});
  f.complete_all();
  CHECK(f.o.held() == 0);
  CHECK(f.o.any_held() == (0 != 0));
}

TEST_CASE("ofi order: held posts fail by peer (peer gone, NIC down), the rest go on") {
  Fixture f;
  const auto d = ord::kDefault;
  Post amo7{1}, amo263{2}, put7{3}, put263{4}, put7b{5};
  // Peers 7 and 263 share a slot.
  CHECK(f.post(amo7, OfiPath::kMsg, d, 7) == OfiAdmit::kGo);
  CHECK(f.post(amo263, OfiPath::kMsg, d, 263) == OfiAdmit::kGo);
  CHECK(f.post(put7, OfiPath::kWrite, d, 7) == OfiAdmit::kHeld);
  CHECK(f.post(put263, OfiPath::kWrite, d, 263) == OfiAdmit::kHeld);
  CHECK(f.post(put7b, OfiPath::kWrite, d, 7) == OfiAdmit::kHeld);
  CHECK(f.o.fail(7, 42) == 2);  // peer 7 gone: its held posts fail with the status given
  CHECK(put7.dropped == 42);
  CHECK(put7b.dropped == 42);
  CHECK(put263.dropped == 0);
  CHECK(f.o.held() == 1);
  CHECK(f.o.any_held() == (1 != 0));
  f.complete_all();  // both AMOs: peer 263's PUT goes
  CHECK(put263.issued);
  CHECK(!put7.issued);
  f.complete_all();
  // All peers (NIC down, close: status 0 is dropped silently by the port).
  Post amo{6}, put{7};
  CHECK(f.post(amo, OfiPath::kMsg, d) == OfiAdmit::kGo);
  CHECK(f.post(put, OfiPath::kWrite, d) == OfiAdmit::kHeld);
  CHECK(f.o.fail(OfiOrder::kAllPeers, 0) == 1);
  CHECK(put.dropped == ~0ull);
  f.complete_all();
  CHECK(!put.issued);
}

TEST_CASE("ofi order: held posts are capped, relaxed ones pass default held posts") {
  Fixture f(rxm(), 2);
  const auto d = ord::kDefault;
  Post amo{1}, p1{2}, p2{3}, p3{4}, relaxed{5}, strict{6}, relaxed2{7};
  CHECK(f.post(amo, OfiPath::kMsg, d) == OfiAdmit::kGo);
  CHECK(f.post(p1, OfiPath::kWrite, d) == OfiAdmit::kHeld);
  CHECK(f.post(p2, OfiPath::kWrite, d) == OfiAdmit::kHeld);
  CHECK(f.post(p3, OfiPath::kWrite, d) == OfiAdmit::kFull);  // not taken: the caller says "no resource"
  CHECK(!p3.issued);
  CHECK(f.post(relaxed, OfiPath::kWrite, ord::kRelaxed) == OfiAdmit::kGo);  // may pass default posts
  f.complete_all();
  CHECK(f.port.issued == std::vector<int>{1, 5, 2, 3});
  f.complete_all();
  // Behind a held strict post a relaxed one is held too.
  Post amo2{8};
  CHECK(f.post(amo2, OfiPath::kMsg, d) == OfiAdmit::kGo);
  CHECK(f.post(strict, OfiPath::kWrite, ord::kStrict) == OfiAdmit::kHeld);
  CHECK(f.post(relaxed2, OfiPath::kWrite, ord::kRelaxed) == OfiAdmit::kHeld);
  f.complete_all();
  f.complete_all();
  CHECK(relaxed2.issued);
  CHECK(f.o.held() == 0);
  CHECK(f.o.any_held() == (0 != 0));
}
