// The symmetric heap's allocator (dmapp/src/symmetric_heap.h): the same call sequence gives
// the same addresses, blocks are aligned and never overlap, free space coalesces, realloc
// in place grows into free space only; XT_SYMMETRIC_HEAP_SIZE parsing.
#include <doctest/doctest.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "symmetric_heap.h"

using nicemu::dmapp::SymmetricHeap;

namespace {
constexpr uint64_t kBase = 0x100000, kSize = 1 << 20;

std::vector<uint64_t> run(SymmetricHeap& h, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<uint64_t> live, trace;
  for (int i = 0; i < 2000; ++i) {
    if (!live.empty() && rng() % 3 == 0) {
      size_t k = rng() % live.size();
      CHECK(h.release(live[k]));
      live.erase(live.begin() + long(k));
    } else {
      uint64_t a = h.allocate(1 + rng() % 5000);
      trace.push_back(a);
      if (a) live.push_back(a);
    }
  }
  return trace;
}
}  // namespace

TEST_CASE("the same calls give the same addresses") {
  SymmetricHeap a, b;
  a.reset(kBase, kSize);
  b.reset(kBase, kSize);
  CHECK(run(a, 7) == run(b, 7));
}

TEST_CASE("blocks are aligned, inside the range and disjoint") {
  SymmetricHeap h;
  h.reset(kBase, kSize);
  std::vector<std::pair<uint64_t, uint64_t>> blocks;
  for (uint64_t n : {1, 63, 64, 65, 1000, 4096, 100000}) {
    uint64_t a = h.allocate(n);
    REQUIRE(a != 0);
    CHECK(a % SymmetricHeap::kAlign == 0);
    CHECK(a >= kBase);
    CHECK(a + n <= kBase + kSize);
    for (auto& [b, m] : blocks) CHECK((a + n <= b || b + m <= a));
    blocks.emplace_back(a, n);
  }
  CHECK(h.allocate(kSize) == 0);  // too large: refused, nothing changes
  CHECK(h.allocations() == blocks.size());
}

TEST_CASE("freeing everything coalesces back to one block") {
  SymmetricHeap h;
  h.reset(kBase, kSize);
  std::vector<uint64_t> v;
  for (int i = 0; i < 100; ++i) v.push_back(h.allocate(1000));
  for (size_t i = 0; i < v.size(); i += 2) CHECK(h.release(v[i]));
  for (size_t i = 1; i < v.size(); i += 2) CHECK(h.release(v[i]));
  CHECK(h.used() == 0);
  CHECK(h.largest_free() == kSize);
  CHECK_FALSE(h.release(v[0]));  // double free refused
  CHECK_FALSE(h.release(kBase + 8));
}

TEST_CASE("resize in place") {
  SymmetricHeap h;
  h.reset(kBase, kSize);
  uint64_t a = h.allocate(100), b = h.allocate(100);
  CHECK_FALSE(h.resize_in_place(a, 1000));  // b is in the way
  CHECK(h.release(b));
  CHECK(h.resize_in_place(a, 1000));
  CHECK(h.block_size(a) == 1024);
  CHECK(h.resize_in_place(a, 10));
  CHECK(h.block_size(a) == 64);
  CHECK(h.allocate(200) == a + 64);  // the tail went back to the free list
}

TEST_CASE("XT_SYMMETRIC_HEAP_SIZE") {
  using nicemu::dmapp::symmetric_heap_size_from_env;
  unsetenv("XT_SYMMETRIC_HEAP_SIZE");
  CHECK(symmetric_heap_size_from_env() == (64ull << 20));
  setenv("XT_SYMMETRIC_HEAP_SIZE", "16M", 1);
  CHECK(symmetric_heap_size_from_env() == (16ull << 20));
  setenv("XT_SYMMETRIC_HEAP_SIZE", "2g", 1);
  CHECK(symmetric_heap_size_from_env() == (2ull << 30));
  setenv("XT_SYMMETRIC_HEAP_SIZE", "1000", 1);
  CHECK(symmetric_heap_size_from_env() == 4096);  // whole pages
  for (const char* bad : {"lots", "12Q", "0", "-5M", "1T"}) {
    setenv("XT_SYMMETRIC_HEAP_SIZE", bad, 1);
    CHECK_MESSAGE(symmetric_heap_size_from_env() == 0, bad);
  }
  unsetenv("XT_SYMMETRIC_HEAP_SIZE");
}
