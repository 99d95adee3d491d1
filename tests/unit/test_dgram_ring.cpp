// Datagram completion ring: events come out in order and the ring wraps; a full ring
// refuses (the daemon keeps a backlog then); the stall flag handshake; a scribbled head
// reads as full; a producer and a consumer thread lose nothing.
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "nicemu/abi/dgram_ring.h"
#include "ring_fixture.h"

using namespace nicemu::abi;

namespace {
using Ring = RingFixture<DgramRingCtl, DgramEvent, DgramRingView, &DgramRingView::events>;

DgramEvent ev(uint64_t seq) {
  DgramEvent e{};
  e.lib_seq = seq;
  e.state = 3;
  e.data_len = 1;
  e.data[0] = uint8_t(seq);
  return e;
}
}  // namespace

TEST_CASE("datagram ring: events in order, wrap-around, full ring, stall handshake") {
  Ring r(4);
  uint64_t next = 1, want = 1;
  auto take = [&] {
    return r.view.drain([&](const DgramEvent& e) {
      CHECK(e.lib_seq == want);
      CHECK(e.data[0] == uint8_t(want));
      ++want;
    });
  };
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 4; ++i) CHECK(r.view.push(ev(next++)));
    CHECK_FALSE(r.view.push(ev(next)));  // full: the daemon would keep it in its backlog
    CHECK(take() == 4);
  }
  CHECK(take() == 0);
  CHECK(want == next);

  // Nothing held back: no kick. Held back: exactly one consumer sees the flag.
  CHECK_FALSE(r.view.take_stall());
  r.ctl.stalled.store(1);
  CHECK(r.view.take_stall());
  CHECK_FALSE(r.view.take_stall());
}

TEST_CASE("datagram ring: a head the consumer scribbled on reads as full to the daemon") {
  Ring r(4);
  r.ctl.head.store(100);  // ahead of tail
  CHECK_FALSE(r.view.push(ev(1)));
  r.ctl.head.store(0);
  r.ctl.tail.store(0);
  CHECK(r.view.push(ev(1)));
  // A tail further ahead than the capacity (nobody honest wrote it): the consumer takes nothing.
  r.ctl.tail.store(50);
  CHECK(r.view.drain([](const DgramEvent&) { FAIL("no event expected"); }) == 0);
}

TEST_CASE("datagram ring: one producer thread, one consumer thread, every event once") {
  Ring r(8);
  constexpr uint64_t kN = 100000;
  std::thread producer([&] {
    for (uint64_t i = 1; i <= kN;) {
      if (r.view.push(ev(i)))
        ++i;
      else
        std::this_thread::yield();
    }
  });
  uint64_t want = 1;
  bool in_order = true;
  while (want <= kN) {
    if (r.view.drain([&](const DgramEvent& e) { in_order &= e.lib_seq == want++; }) == 0) std::this_thread::yield();
  }
  producer.join();
  CHECK(in_order);
  CHECK(want == kN + 1);
}
