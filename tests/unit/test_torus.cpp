// The emulated torus (nicemu/common/torus.h): parsing NICEMU_TORUS, the default sides from a
// node count, and the address <-> coordinate arithmetic libpmi, librca and nicemuctl share.
#include <doctest/doctest.h>

#include <cstdlib>
#include <set>
#include <tuple>

#include "nicemu/common/torus.h"

namespace torus = nicemu::torus;

TEST_CASE("torus: XxYxZ parses; anything else is refused") {
  CHECK(torus::parse("4x2x3") == torus::Dims{4, 2, 3});
  CHECK(torus::parse("1X1X1") == torus::Dims{1, 1, 1});
  CHECK(torus::parse("65535x1x1") == torus::Dims{65535, 1, 1});
  for (const char* bad : {"", "4", "4x2", "4x2x", "0x1x1", "4x2x3x1", "4x-2x3", "65536x1x1", "4 x2x3", "a4x2x3",
                          "99999999999999999999x1x1"})
    CHECK_MESSAGE(!torus::parse(bad), bad);
}

TEST_CASE("torus: the default sides multiply to the node count, largest side smallest") {
  CHECK(torus::balanced(1) == torus::Dims{1, 1, 1});
  CHECK(torus::balanced(2) == torus::Dims{2, 1, 1});
  CHECK(torus::balanced(4) == torus::Dims{2, 2, 1});
  CHECK(torus::balanced(6) == torus::Dims{3, 2, 1});
  CHECK(torus::balanced(8) == torus::Dims{2, 2, 2});
  CHECK(torus::balanced(7) == torus::Dims{7, 1, 1});
  CHECK(torus::balanced(64) == torus::Dims{4, 4, 4});
  CHECK(torus::balanced(96) == torus::Dims{6, 4, 4});
  for (uint64_t n = 1; n <= 300; ++n) {
    auto d = torus::balanced(n);
    CHECK(d.nodes() == n);
    CHECK((d.x >= d.y && d.y >= d.z));
  }
  // Beyond one 16-bit side: a cube that holds them all.
  auto big = torus::balanced(65537);
  CHECK(big.nodes() >= 65537);
  CHECK(big.x <= torus::kMaxSide);
}

TEST_CASE("torus: every address inside has its own coordinate, x fastest") {
  torus::Dims d{3, 2, 2};
  std::set<std::tuple<uint32_t, uint32_t, uint32_t>> seen;
  for (uint64_t a = 0; a < d.nodes(); ++a) {
    auto c = torus::coord_of(d, a);
    REQUIRE(c);
    CHECK(c->x < d.x);
    CHECK(c->y < d.y);
    CHECK(c->z < d.z);
    CHECK(c->x + uint64_t{d.x} * (c->y + uint64_t{d.y} * c->z) == a);
    seen.insert({c->x, c->y, c->z});
  }
  CHECK(seen.size() == d.nodes());
  CHECK(torus::coord_of(d, 4) == torus::Coord{1, 1, 0});
  CHECK(!torus::coord_of(d, 12));
  CHECK(torus::max_coord(d) == torus::Coord{2, 1, 1});
}

TEST_CASE("torus: NICEMU_TORUS wins over the node count; a malformed one is an error") {
  ::setenv("NICEMU_TORUS", "1x2x1", 1);
  CHECK(torus::from_env(8) == torus::Dims{1, 2, 1});
  ::setenv("NICEMU_TORUS", "2by2", 1);
  std::string error;
  CHECK(!torus::from_env(8, &error));
  CHECK(error.find("NICEMU_TORUS=2by2") != std::string::npos);
  ::unsetenv("NICEMU_TORUS");
  CHECK(torus::from_env(8) == torus::Dims{2, 2, 2});
}
