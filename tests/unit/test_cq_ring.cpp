// CQ ring: order, overrun, wrap-around, and many producers against one consumer.
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "nicemu/abi/cq_entry.h"
#include "nicemu/abi/cq_ring.h"

using namespace nicemu::abi;

namespace {
struct Ring {
  explicit Ring(uint32_t cap) : storage(cap) {
    view.ctl = &ctl;
    view.entries = storage.data();
    view.mask = cap - 1;
  }
  CqRingCtl ctl{};
  std::vector<std::atomic<uint64_t>> storage;
  CqRingView view;
};
}  // namespace

TEST_CASE("entries come out in push order and the ring wraps") {
  Ring r(16);
  for (uint64_t round = 0; round < 5; ++round) {
    for (uint64_t i = 1; i <= 16; ++i) CHECK(r.view.push(cqe::make(1, 0, 0, 0, 0, round * 100 + i)));
    for (uint64_t i = 1; i <= 16; ++i) CHECK(cqe::id_of(r.view.pop()) == round * 100 + i);
    CHECK(r.view.pop() == 0);
  }
}

TEST_CASE("a full ring reports overrun once and keeps earlier entries") {
  Ring r(16);
  for (uint64_t i = 1; i <= 16; ++i) REQUIRE(r.view.push(cqe::make(1, 0, 0, 0, 0, i)));
  CHECK_FALSE(r.view.push(cqe::make(1, 0, 0, 0, 0, 99)));
  CHECK(r.view.has_overrun());
  CHECK(r.view.take_overrun());
  CHECK_FALSE(r.view.take_overrun());
  CHECK(cqe::id_of(r.view.pop()) == 1);
}

TEST_CASE("four producers, one consumer: nothing lost, per-producer order kept") {
  Ring r(64);
  constexpr int kProducers = 4, kPer = 20000;
  std::vector<std::thread> ts;
  for (int p = 0; p < kProducers; ++p)
    ts.emplace_back([&, p] {
      for (int i = 0; i < kPer; ++i)
        while (!r.view.push(cqe::make(1, 0, 0, 0, uint64_t(p), uint64_t(i)))) {
          r.view.take_overrun();  // full: the consumer is behind; retry
          std::this_thread::yield();
        }
    });
  std::vector<int> next(kProducers, 0);
  int got = 0;
  while (got < kProducers * kPer) {
    uint64_t e = r.view.pop();
    if (!e) continue;
    int p = int(cqe::tid_of(e));
    REQUIRE(int(cqe::id_of(e)) == next[p]);
    ++next[p];
    ++got;
  }
  for (auto& t : ts) t.join();
  CHECK(r.view.pop() == 0);
}
