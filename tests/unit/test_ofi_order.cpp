// Order between the ofi fabric's paths to a peer (ugni/src/ofi_order.h): what a post waits for
// by its path and class, given the provider's order bits; the wait drives (here: a stand-in
// that completes what is in flight, as the provider's completions would).
#include <doctest/doctest.h>

#include <vector>

#include "ofi_order.h"

using nicemu::ugni::OfiOrder;
using nicemu::ugni::OfiOrderCaps;
using nicemu::ugni::OfiOrderTicket;
using nicemu::ugni::OfiPath;
namespace ord = nicemu::ugni::ordering;

namespace {

// What is in flight, and how often a post had to drive the provider before it could go.
struct Flight {
  OfiOrder* o = nullptr;
  std::vector<OfiOrderTicket> t;
  int drives = 0;
};
Flight* flight = nullptr;

// The provider completes everything in flight at the first look.
void complete_all(nicemu::ugni::Nic*) {
  ++flight->drives;
  for (auto& t : flight->t) flight->o->leave(t);
  flight->t.clear();
}

// Posts `first` (not waited for), then `then`: how many looks at the provider `then` needed.
int waits(const OfiOrderCaps& caps, OfiPath first, ord::Class c1, OfiPath then, ord::Class c2, uint64_t peer2 = 7) {
  OfiOrder o(caps);
  Flight f;
  f.o = &o;
  flight = &f;
  f.t.push_back(o.enter(nullptr, 7, first, c1, complete_all));
  REQUIRE(f.drives == 0);  // nothing in flight: the first never waits
  f.t.push_back(o.enter(nullptr, peer2, then, c2, complete_all));
  const int d = f.drives;
  for (auto& t : f.t) o.leave(t);
  flight = nullptr;
  return d;
}

OfiOrderCaps rxm() {  // what tcp;ofi_rxm gives: no write-after-read order
  OfiOrderCaps c;
  c.raw = c.waw = c.rar = c.sas = true;
  return c;
}

}  // namespace

TEST_CASE("ofi order: a post waits for the other path, not for what the provider orders") {
  const auto d = ord::kDefault;
  CHECK(waits(rxm(), OfiPath::kMsg, d, OfiPath::kWrite, d) == 1);   // AMO then PUT: the AMO's reply first
  CHECK(waits(rxm(), OfiPath::kWrite, d, OfiPath::kMsg, d) == 1);   // PUT then AMO or CQ write
  CHECK(waits(rxm(), OfiPath::kWrite, d, OfiPath::kSmsg, d) == 1);  // PUT then the SMSG message announcing it
  CHECK(waits(rxm(), OfiPath::kSmsg, d, OfiPath::kMsg, d) == 1);    // a batched SMSG message is not on the wire yet
  CHECK(waits(rxm(), OfiPath::kWrite, d, OfiPath::kWrite, d) == 0);  // WAW
  CHECK(waits(rxm(), OfiPath::kWrite, d, OfiPath::kRead, d) == 0);   // RAW
  CHECK(waits(rxm(), OfiPath::kRead, d, OfiPath::kRead, d) == 0);    // RAR
  CHECK(waits(rxm(), OfiPath::kRead, d, OfiPath::kWrite, d) == 1);   // no WAR: the GET must read the old value
  CHECK(waits(rxm(), OfiPath::kMsg, d, OfiPath::kMsg, d) == 0);      // one connection, executed in CQ order
  CHECK(waits(rxm(), OfiPath::kSmsg, d, OfiPath::kSmsg, d) == 0);    // channels keep their own order
  // A provider with no order bits at all: every RMA waits for the earlier one, messages too.
  CHECK(waits(OfiOrderCaps{}, OfiPath::kWrite, d, OfiPath::kWrite, d) == 1);
  CHECK(waits(OfiOrderCaps{}, OfiPath::kMsg, d, OfiPath::kMsg, d) == 1);
  // With every bit, WAR costs nothing either.
  OfiOrderCaps all = rxm();
  all.war = true;
  CHECK(waits(all, OfiPath::kRead, d, OfiPath::kWrite, d) == 0);
}

TEST_CASE("ofi order: classes") {
  const auto d = ord::kDefault, s = ord::kStrict, r = ord::kRelaxed;
  CHECK(waits(rxm(), OfiPath::kMsg, r, OfiPath::kWrite, d) == 0);  // either one relaxed: may pass
  CHECK(waits(rxm(), OfiPath::kMsg, d, OfiPath::kWrite, r) == 0);  // a relaxed post never waits
  CHECK(waits(rxm(), OfiPath::kMsg, r, OfiPath::kWrite, s) == 1);  // a strict one waits for everything
  CHECK(waits(rxm(), OfiPath::kMsg, s, OfiPath::kWrite, d) == 1);
  // Default orders as strict across paths (the target's PI flags are not known): a GET or AMO
  // after a PUT waits, though the model would let it pass a PUT into a default registration.
  CHECK(waits(rxm(), OfiPath::kWrite, d, OfiPath::kMsg, d) == 1);
}

TEST_CASE("ofi order: peers are apart") {
  // Another peer's AMO in flight: a PUT goes (slots by AV address modulo 256; 7 and 8 differ).
  CHECK(waits(rxm(), OfiPath::kMsg, ord::kDefault, OfiPath::kWrite, ord::kDefault, 8) == 0);
  // A collision only orders more: 7 and 7 + 256 share a slot.
  CHECK(waits(rxm(), OfiPath::kMsg, ord::kDefault, OfiPath::kWrite, ord::kDefault, 7 + 256) == 1);
}
