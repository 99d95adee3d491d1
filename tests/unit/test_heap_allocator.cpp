// The daemon's region heap allocator: alignment, reuse and coalescing.
#include <doctest/doctest.h>

#include "nicemu/daemon/cdm/heap_allocator.h"

using nicemu::daemon::HeapAllocator;

TEST_CASE("allocations are aligned, disjoint and coalesce when freed") {
  HeapAllocator h(4096, 4096 + 1024);
  auto a = h.allocate(100);
  auto b = h.allocate(200);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(*a % 64 == 0);
  CHECK(*b >= *a + 128);
  CHECK_FALSE(h.allocate(2048));
  CHECK(h.release(*a) == 128);
  CHECK(h.release(*a) == 0);  // double free is refused
  CHECK(h.release(*b) == 256);
  CHECK(h.in_use() == 0);
  auto whole = h.allocate(1024);
  REQUIRE(whole);
  CHECK(*whole == 4096);
}
