// uDREG invalidation ring and address filter: records reach every consumer once and in
// order, a consumer that falls behind learns it lost records, the filter only lets through
// ranges near cached entries, concurrent producers (as hooks in many threads) lose nothing.
#include <doctest/doctest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "address_filter.h"
#include "invalidation_ring.h"

using namespace nicemu::udreg;

TEST_CASE("invalidation ring: consumers see each record once, in order; overrun is reported") {
  InvalidationRing& ring = invalidation_ring();
  uint64_t c1 = ring.head(), c2 = ring.head();
  for (uint64_t i = 1; i <= 10; ++i) ring.push(i << 12, (i + 1) << 12);
  std::vector<uint64_t> seen;
  CHECK(ring.consume(c1, [&](uint64_t a, uint64_t b) {
    CHECK(b - a == 4096);
    seen.push_back(a >> 12);
  }));
  CHECK(seen == std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  CHECK(c1 == ring.head());
  CHECK(!ring.pending(c1, ring.epoch()));
  CHECK(ring.pending(c2, ring.epoch()));

  // c2 now falls more than a ring behind.
  for (uint64_t i = 0; i < InvalidationRing::kCapacity; ++i) ring.push(1 << 12, 2 << 12);
  size_t n = 0;
  CHECK_FALSE(ring.consume(c2, [&](uint64_t, uint64_t) { ++n; }));
  CHECK(n == 0);
  CHECK(c2 == ring.head());
  // c1 is exactly one ring behind: everything is still there.
  CHECK(ring.consume(c1, [&](uint64_t, uint64_t) { ++n; }));
  CHECK(n == InvalidationRing::kCapacity);
}

TEST_CASE("address filter: ranges near entries pass, others and empty filters do not") {
  AddressFilter& f = address_filter();
  REQUIRE(f.empty());
  uint64_t base = 0x7f0000000000ull;
  CHECK_FALSE(f.may_overlap(base, base + 4096));
  f.add(base + 4096, base + 8192);
  CHECK(f.may_overlap(base, base + 4096 + 1));
  CHECK(f.may_overlap(base + (1 << 20), base + (1 << 20) + 4096));  // same 2 MiB region: a false positive
  CHECK_FALSE(f.may_overlap(base + (64ull << 20), base + (64ull << 20) + 4096));
  CHECK(f.may_overlap(0, UINT64_MAX));  // too wide to scan: assumed to overlap
  f.remove(base + 4096, base + 8192);
  CHECK(f.empty());
  CHECK_FALSE(f.may_overlap(base, base + 4096 + 1));

  // An entry wider than the table counts once and matches everything.
  f.add(0x1000, 0x1000 + (1ull << 40));
  CHECK(f.may_overlap(base, base + 4096));
  f.remove(0x1000, 0x1000 + (1ull << 40));
  CHECK(f.empty());

  // report_unmapped consults the filter, rounds out to pages.
  uint64_t c = invalidation_ring().head();
  report_unmapped(base + 10, base + 20);
  CHECK(invalidation_ring().head() == c);
  f.add(base, base + 100);
  report_unmapped(base + 10, base + 20);
  REQUIRE(invalidation_ring().head() == c + 1);
  CHECK(invalidation_ring().consume(c, [&](uint64_t a, uint64_t b) {
    CHECK(a == base);
    CHECK(b == base + 4096);
  }));
  f.remove(base, base + 100);
}

TEST_CASE("invalidation ring: concurrent producers and a consumer lose nothing") {
  InvalidationRing& ring = invalidation_ring();
  constexpr int kProducers = 3;
  constexpr uint64_t kEach = 20000;
  uint64_t cursor = ring.head();
  std::atomic<int> done{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      for (uint64_t i = 0; i < kEach; ++i) ring.push((uint64_t(p) << 40) | (i << 12), (uint64_t(p) << 40) | ((i + 1) << 12));
      done.fetch_add(1);
    });
  std::vector<uint64_t> next(kProducers, 0);
  bool lost = false, bad = false;
  uint64_t consumed = 0;
  auto drain = [&] {
    bool ok = ring.consume(cursor, [&](uint64_t a, uint64_t b) {
      auto p = size_t(a >> 40);
      uint64_t i = (a & ((1ull << 40) - 1)) >> 12;
      if (p >= kProducers || b != a + 4096) bad = true;
      // Per producer, records come in its order; after a loss some are skipped.
      else if (i < next[p]) bad = true;
      else if (i > next[p] && !lost) bad = true;
      else next[p] = i + 1;
      ++consumed;
    });
    if (!ok) lost = true;
  };
  while (done.load() < kProducers) drain();
  drain();
  for (auto& t : producers) t.join();
  CHECK_FALSE(bad);
  if (!lost) CHECK(consumed == kProducers * kEach);
  // Either everything arrived, or the loss was reported (a slow consumer on a busy machine).
  CHECK((lost || consumed == kProducers * kEach));
}
