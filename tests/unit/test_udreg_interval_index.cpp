// uDREG interval index and LRU list: covering lookups and overlap enumeration against a
// brute-force model over random inserts and erases, B+tree and summary invariants, LRU order.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "interval_index.h"
#include "lru_list.h"

using namespace nicemu::udreg;

namespace {

bool covers(const Entry* e, uint64_t a, uint64_t b) { return e->start <= a && e->end >= b; }

std::set<Entry*> overlapping(const std::vector<Entry*>& live, uint64_t a, uint64_t b) {
  std::set<Entry*> s;
  for (Entry* e : live)
    if (e->start < b && e->end > a) s.insert(e);
  return s;
}

std::set<Entry*> collected(const IntervalIndex& idx, uint64_t a, uint64_t b) {
  std::set<Entry*> s;
  for (Entry* e = idx.collect_overlapping(a, b); e; e = e->next_hit) CHECK(s.insert(e).second);
  return s;
}

}  // namespace

TEST_CASE("interval index: empty, single, nested and repeated ranges") {
  IntervalIndex idx;
  CHECK(idx.find_covering(10, 20) == nullptr);
  CHECK(idx.collect_overlapping(0, UINT64_MAX) == nullptr);

  Entry big, small, dup;
  big.start = 0x1000, big.end = 0x9000;
  small.start = 0x2000, small.end = 0x3000;
  dup.start = 0x2000, dup.end = 0x3000;
  REQUIRE(idx.insert(&big));
  REQUIRE(idx.insert(&small));
  REQUIRE(idx.insert(&dup));
  CHECK(idx.size() == 3);
  CHECK(idx.verify());

  CHECK(idx.find_covering(0x1000, 0x9000) == &big);   // exact
  CHECK(idx.find_covering(0x8fff, 0x9000) == &big);   // last byte
  CHECK(idx.find_covering(0x0fff, 0x2000) == nullptr);  // starts before everything
  CHECK(idx.find_covering(0x8000, 0x9001) == nullptr);  // one byte past the end
  Entry* c = idx.find_covering(0x2100, 0x2200);
  REQUIRE(c != nullptr);
  CHECK(covers(c, 0x2100, 0x2200));

  // Ranges are half-open: [0x3000, 0x4000) touches small's end but does not overlap it.
  CHECK(collected(idx, 0x3000, 0x4000) == std::set<Entry*>{&big});
  CHECK(collected(idx, 0x2fff, 0x3000) == std::set<Entry*>{&big, &small, &dup});

  idx.erase(&small);
  CHECK(idx.verify());
  CHECK(idx.size() == 2);
  idx.erase(&big);
  CHECK(idx.find_covering(0x2000, 0x3000) == &dup);
  CHECK(idx.find_covering(0x1000, 0x3000) == nullptr);
  idx.erase(&dup);
  CHECK(idx.empty());
  CHECK(idx.verify());
}

TEST_CASE("interval index: random operations agree with a brute-force model") {
  std::mt19937_64 rng(12345);
  std::vector<Entry> pool(3000);
  std::vector<Entry*> live;
  std::vector<Entry*> spare;
  for (auto& e : pool) spare.push_back(&e);
  IntervalIndex idx;

  auto random_range = [&](uint64_t* a, uint64_t* b) {
    // A small address space, so ranges overlap and nest often.
    *a = rng() % 100000;
    *b = *a + 1 + rng() % (rng() % 4 == 0 ? 20000 : 300);
  };

  for (int step = 0; step < 20000; ++step) {
    int op = int(rng() % 10);
    if (op < 5 && !spare.empty()) {
      Entry* e = spare.back();
      spare.pop_back();
      random_range(&e->start, &e->end);
      REQUIRE(idx.insert(e));
      live.push_back(e);
    } else if (op < 8 && !live.empty()) {
      size_t i = rng() % live.size();
      idx.erase(live[i]);
      spare.push_back(live[i]);
      live[i] = live.back();
      live.pop_back();
    } else {
      uint64_t a, b;
      random_range(&a, &b);
      if (rng() % 2) b = a + 1 + rng() % 64;
      Entry* f = idx.find_covering(a, b);
      bool exists = std::any_of(live.begin(), live.end(), [&](Entry* e) { return covers(e, a, b); });
      REQUIRE((f != nullptr) == exists);
      if (f) REQUIRE(covers(f, a, b));
      REQUIRE(collected(idx, a, b) == overlapping(live, a, b));
    }
    REQUIRE(idx.size() == live.size());
    if (step % 500 == 0) REQUIRE(idx.verify());
  }
  CHECK(idx.verify());
}

TEST_CASE("interval index: depth stays logarithmic, emptied nodes go away") {
  std::vector<Entry> pool(1 << 14);
  IntervalIndex idx;
  for (size_t i = 0; i < pool.size(); ++i) {  // sorted inserts: the worst order for splits
    pool[i].start = i * 4096;
    pool[i].end = i * 4096 + 4096;
    REQUIRE(idx.insert(&pool[i]));
  }
  CHECK(idx.verify());
  // Half-full nodes at worst: depth <= 1 + log8(n).
  CHECK(idx.depth() <= 6);
  CHECK(idx.find_covering(5000 * 4096 + 10, 5000 * 4096 + 20) == &pool[5000]);
  CHECK(idx.find_covering(5000 * 4096 + 10, 5001 * 4096 + 20) == nullptr);
  // Same start many times (ties across splits), then everything removed.
  std::vector<Entry> same(200);
  for (size_t i = 0; i < same.size(); ++i) {
    same[i].start = 5000 * 4096;
    same[i].end = 5000 * 4096 + 1 + i;
    REQUIRE(idx.insert(&same[i]));
  }
  CHECK(idx.verify());
  Entry* c = idx.find_covering(5000 * 4096, 5000 * 4096 + 150);
  REQUIRE(c != nullptr);
  CHECK(c->end >= 5000 * 4096 + 150);
  for (auto& e : same) idx.erase(&e);
  for (size_t i = 0; i < pool.size(); i += 2) idx.erase(&pool[i]);
  CHECK(idx.verify());
  CHECK(idx.find_covering(5000 * 4096 + 10, 5000 * 4096 + 20) == nullptr);
  CHECK(idx.find_covering(5001 * 4096 + 10, 5001 * 4096 + 20) == &pool[5001]);
  CHECK(idx.find_covering(5002 * 4096 + 10, 5002 * 4096 + 20) == nullptr);
  for (size_t i = 1; i < pool.size(); i += 2) idx.erase(&pool[i]);
  CHECK(idx.empty());
  CHECK(idx.depth() == 0);
  CHECK(idx.verify());
}

TEST_CASE("LRU list: order, removal from any position, back is the oldest") {
  Entry e[4];
  LruList lru;
  CHECK(lru.back() == nullptr);
  for (auto& x : e) lru.push_front(&x);  // e[0] is now the least recently used
  CHECK(lru.size() == 4);
  CHECK(lru.back() == &e[0]);
  CHECK(lru.front() == &e[3]);
  lru.remove(&e[0]);
  CHECK(lru.back() == &e[1]);
  lru.remove(&e[2]);  // middle
  CHECK(lru.back() == &e[1]);
  CHECK(e[1].lru_prev == &e[3]);
  CHECK(e[3].lru_next == &e[1]);
  lru.remove(&e[2]);  // not in the list any more: no effect
  CHECK(lru.size() == 2);
  lru.push_front(&e[1]);  // already in: moves to the front
  CHECK(lru.size() == 2);
  CHECK(lru.front() == &e[1]);
  CHECK(lru.back() == &e[3]);
  lru.remove(&e[3]);
  CHECK(lru.front() == &e[1]);
  CHECK(lru.back() == &e[1]);
  lru.remove(&e[1]);
  CHECK(lru.empty());
  CHECK(lru.back() == nullptr);
}
