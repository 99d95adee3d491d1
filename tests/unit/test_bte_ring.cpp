// BTE submission ring: order and wrap-around, a full ring, the doorbell contract (ring only
// when the consumer armed it), a claimed-but-unpublished slot, many producers.
#include <doctest/doctest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "nicemu/abi/bte_ring.h"
#include "ring_fixture.h"

using namespace nicemu::abi;

namespace {
struct Ring : RingFixture<BteRingCtl, BteSlot, BteRingView, &BteRingView::slots> {
  using RingFixture::RingFixture;
  uint64_t head = 0;  // the consumer's private index
};

BteRequest req(uint64_t n) {
  BteRequest r{};
  r.op = kBtePut;
  r.length = n;
  r.ep_id = uint32_t(n);
  return r;
}
}  // namespace

TEST_CASE("BTE ring: requests come out in order, the ring wraps and fills") {
  Ring r(8);
  BteRequest out;
  for (uint64_t round = 0; round < 4; ++round) {
    for (uint64_t i = 0; i < 8; ++i) CHECK(r.view.push(req(round * 10 + i)) == BteRingView::Push::kOk);
    CHECK(r.view.push(req(99)) == BteRingView::Push::kFull);
    for (uint64_t i = 0; i < 8; ++i) {
      REQUIRE(r.view.pop(r.head, out));
      CHECK(out.length == round * 10 + i);
    }
    CHECK_FALSE(r.view.pop(r.head, out));
  }
  CHECK(r.ctl.head.load() == r.head);
}

TEST_CASE("BTE ring: the producer rings only an armed consumer, once") {
  Ring r(8);
  BteRequest out;
  CHECK(r.view.push(req(1)) == BteRingView::Push::kOk);  // consumer awake: no system call
  CHECK(r.view.arm(r.head));                              // published meanwhile: do not sleep
  REQUIRE(r.view.pop(r.head, out));
  CHECK_FALSE(r.view.arm(r.head));                        // empty: sleep
  CHECK(r.view.push(req(2)) == BteRingView::Push::kRing);
  CHECK(r.view.push(req(3)) == BteRingView::Push::kOk);   // already rung
  CHECK(r.view.pop(r.head, out));
  CHECK(r.view.pop(r.head, out));
}

TEST_CASE("BTE ring: a slot claimed but never published keeps nobody awake") {
  Ring r(8);
  r.ctl.tail.store(1);  // a producer claimed position 0 and died
  BteRequest out;
  CHECK_FALSE(r.view.pop(r.head, out));
  CHECK_FALSE(r.view.arm(r.head));
}

TEST_CASE("BTE ring: many producers, one consumer, every request exactly once") {
  Ring r(64);
  constexpr int kProducers = 4, kEach = 20000;
  std::vector<std::thread> ts;
  std::atomic<int> full{0};
  for (int p = 0; p < kProducers; ++p)
    ts.emplace_back([&, p] {
      for (int i = 0; i < kEach; ++i) {
        while (r.view.push(req(uint64_t(p) * kEach + uint64_t(i))) == BteRingView::Push::kFull) {
          full.fetch_add(1, std::memory_order_relaxed);
          std::this_thread::yield();
        }
      }
    });
  std::set<uint64_t> seen;
  std::vector<uint64_t> last(kProducers, 0);
  BteRequest out;
  while (seen.size() < size_t(kProducers) * kEach) {
    if (!r.view.pop(r.head, out)) {
      std::this_thread::yield();
      continue;
    }
    CHECK(seen.insert(out.length).second);
    // One producer's requests stay in its posting order.
    uint64_t p = out.length / kEach, i = out.length % kEach;
    CHECK((i == 0 || i > last[p]));
    last[p] = i;
  }
  for (auto& t : ts) t.join();
}

TEST_CASE("BTE ring: a producer preempted in a push is not told the ring is full when it is not") {
  // The CQ ring's F4 race (test_cq_ring.cpp) in the BTE ring: a posting thread preempted
  // between its read of tail and its read of head, while another thread posted and the
  // daemon consumed, compared an old tail with a newer head and got GNI_RC_ERROR_RESOURCE.
  // Credits keep the ring from ever being full.
  constexpr uint32_t kCap = 8;
  Ring r(kCap);
  RingCredits credits(kCap);
  std::atomic<uint64_t> pushes{0}, refused{0};
  auto push = [&](uint64_t n) {
    if (r.view.push(req(n)) == BteRingView::Push::kFull) {
      refused.fetch_add(1, std::memory_order_relaxed);
      credits.give();
    } else {
      pushes.fetch_add(1, std::memory_order_relaxed);
    }
  };
  uint64_t got = 0;
  race_preempted(
      [&](std::atomic<bool>& stop) {
        for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i)
          if (credits.take()) push(i);
      },
      [&](std::atomic<bool>& stop) {
        BteRequest out;
        for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
          if (credits.take()) push(i);
          while (r.view.pop(r.head, out)) {
            ++got;
            credits.give();
          }
        }
      },
      std::chrono::seconds(3));
  BteRequest out;
  while (r.view.pop(r.head, out)) ++got;
  CHECK(got == pushes.load());
  CHECK(refused.load() == 0);
}
