// The block placement of ranks over emulated nodes (nicemu/common/placement.h) that
// nicemu-run, libalpsutil and tools/lib/nicemu-rank (through nicemu-run --place) share.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "nicemu/common/placement.h"

using nicemu::placement::node_of_rank;

namespace {

std::vector<int> layout(int np, int nodes, int per_node = 0) {
  std::vector<int> out;
  for (int r = 0; r < np; ++r) out.push_back(node_of_rank(r, np, nodes, per_node));
  return out;
}

}  // namespace

TEST_CASE("placement: equal blocks, in rank order") {
  CHECK(layout(4, 2) == std::vector<int>{0, 0, 1, 1});
  CHECK(layout(5, 2) == std::vector<int>{0, 0, 0, 1, 1});
  CHECK(layout(3, 3) == std::vector<int>{0, 1, 2});
  CHECK(layout(7, 1) == std::vector<int>(7, 0));
  // More nodes than ranks: the ranks spread out, some nodes stay empty.
  CHECK(layout(2, 4) == std::vector<int>{0, 2});
}

TEST_CASE("placement: blocks are contiguous, none empty, sizes differ by at most one") {
  for (int np = 1; np <= 40; ++np)
    for (int nodes = 1; nodes <= np; ++nodes) {
      std::vector<int> count(nodes, 0);
      int prev = 0;
      for (int r = 0; r < np; ++r) {
        int n = node_of_rank(r, np, nodes);
        REQUIRE(n >= 0);
        REQUIRE(n < nodes);
        CHECK(n - prev >= 0);  // in rank order
        CHECK(n - prev <= 1);  // no node skipped
        prev = n;
        ++count[n];
      }
      int lo = count[0], hi = count[0];
      for (int c : count) lo = std::min(lo, c), hi = std::max(hi, c);
      CHECK_MESSAGE(lo >= 1, np, " ranks on ", nodes, " nodes");
      CHECK_MESSAGE(hi - lo <= 1, np, " ranks on ", nodes, " nodes");
    }
}

TEST_CASE("placement: --ranks-per-node fills each node, the last takes the rest") {
  CHECK(layout(8, 2, 4) == std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1});
  CHECK(layout(5, 3, 2) == std::vector<int>{0, 0, 1, 1, 2});
  CHECK(layout(6, 2, 1) == std::vector<int>{0, 1, 1, 1, 1, 1});
}

TEST_CASE("placement: a million ranks on thousands of nodes do not overflow") {
  const int np = 1 << 20, nodes = 4096;
  CHECK(node_of_rank(np - 1, np, nodes) == nodes - 1);
  CHECK(node_of_rank(np / 2, np, nodes) == nodes / 2);
  CHECK(node_of_rank(255, np, nodes) == 0);
  CHECK(node_of_rank(256, np, nodes) == 1);
}
