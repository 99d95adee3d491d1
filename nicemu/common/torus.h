// The emulated machine's 3-D torus: the one place that turns a NIC address into mesh
// coordinates. libpmi (PMI_Get_meshcoord, PMI_Get_max_dimension), librca and nicemuctl
// all answer from here, so they agree by construction.
//
// The sides come from NICEMU_TORUS ("XxYxZ"), else from the number of nodes: that count
// factored into three sides as close to each other as its divisors allow (8 -> 2x2x2,
// 6 -> 3x2x1, a prime p -> px1x1), so every address below the count has its own
// coordinate. Address a sits at x = a mod X, y = (a / X) mod Y, z = a / (X * Y).
// Header-only: the libraries link nothing for it. NICEMU_TORUS is the row "torus" of the
// parameter table (params.h, docs/configuration.md).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "nicemu/common/params.h"

namespace nicemu::torus {

struct Dims {
  uint32_t x = 1, y = 1, z = 1;
  uint64_t nodes() const { return uint64_t{x} * y * z; }
  bool operator==(const Dims&) const = default;
};

struct Coord {
  uint32_t x = 0, y = 0, z = 0;
  bool operator==(const Coord&) const = default;
};

inline constexpr const char* kEnv = "NICEMU_TORUS";
static_assert(params::param("torus").env == std::string_view(kEnv));

// Largest side the coordinates can carry: Cray's mesh coordinate fields are 16 bits.
inline constexpr uint32_t kMaxSide = 0xFFFF;

// "XxYxZ" (also 'X'), each side 1..kMaxSide. nullopt on anything else.
inline std::optional<Dims> parse(std::string_view s) {
  uint32_t v[3] = {};
  for (int i = 0; i < 3; ++i) {
    size_t n = 0;
    uint64_t x = 0;
    while (n < s.size() && s[n] >= '0' && s[n] <= '9' && x <= kMaxSide) x = x * 10 + static_cast<uint64_t>(s[n++] - '0');
    if (n == 0 || x == 0 || x > kMaxSide) return std::nullopt;
    v[i] = static_cast<uint32_t>(x);
    s.remove_prefix(n);
    if (i < 2) {
      if (s.empty() || (s[0] != 'x' && s[0] != 'X')) return std::nullopt;
      s.remove_prefix(1);
    }
  }
  if (!s.empty()) return std::nullopt;
  return Dims{v[0], v[1], v[2]};
}

// `nodes` (at least 1) as X >= Y >= Z with X*Y*Z == nodes and the largest side smallest.
inline Dims balanced(uint64_t nodes) {
  if (nodes < 1) nodes = 1;
  if (nodes > kMaxSide) {  // beyond one side: the smallest cube-ish box that holds them
    uint32_t s = 1;
    while (uint64_t{s} * s * s < nodes) ++s;
    return Dims{s, s, s};
  }
  Dims best{static_cast<uint32_t>(nodes), 1, 1};
  for (uint64_t z = 1; z * z * z <= nodes; ++z) {
    if (nodes % z) continue;
    for (uint64_t y = z; y * y <= nodes / z; ++y) {
      if ((nodes / z) % y) continue;
      uint64_t x = nodes / z / y;
      if (x < best.x) best = Dims{static_cast<uint32_t>(x), static_cast<uint32_t>(y), static_cast<uint32_t>(z)};
    }
  }
  return best;
}

// The torus in force: NICEMU_TORUS when set (nullopt with `error` filled when it is
// malformed), else balanced(nodes).
inline std::optional<Dims> from_env(uint64_t nodes, std::string* error = nullptr) {
  const char* v = std::getenv(kEnv);
  if (!v || !*v) return balanced(nodes);
  auto d = parse(v);
  if (!d && error) *error = std::string(kEnv) + "=" + v + " is not XxYxZ with sides 1.." + std::to_string(kMaxSide);
  return d;
}

// Coordinates of NIC address `addr`; nullopt when it lies outside the torus.
inline std::optional<Coord> coord_of(const Dims& d, uint64_t addr) {
  if (addr >= d.nodes()) return std::nullopt;
  return Coord{static_cast<uint32_t>(addr % d.x), static_cast<uint32_t>(addr / d.x % d.y),
               static_cast<uint32_t>(addr / (uint64_t{d.x} * d.y))};
}

// The largest coordinate on each axis (what rca_get_max_dimension reports).
inline Coord max_coord(const Dims& d) { return Coord{d.x - 1, d.y - 1, d.z - 1}; }

}  // namespace nicemu::torus
