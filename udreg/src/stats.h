// Counters of one cache. The first three are the API's statistics (UDREG_STAT_*); the rest
// are nicemu's own, printed when the cache has debug_mode set. Kept under the cache lock.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include "udreg_pub.h"

namespace nicemu::udreg {

enum class Stat : size_t {
  kHit = UDREG_STAT_CACHE_HIT,
  kMiss = UDREG_STAT_CACHE_MISS,
  kEvicted = UDREG_STAT_CACHE_EVICTED,
  kInvalidated,      // entries dropped because their memory was unmapped or given back
  kInvalidateAll,    // invalidation records lost (ring overrun, fork): every entry dropped
  kDeviceReg,        // successful device_reg_func calls
  kDeviceDereg,      // device_dereg_func calls
  kDeviceDeregFailed,
  kUnwatched,        // registrations no invalidation source could watch (not cached)
  kCount
};

inline constexpr std::array<const char*, size_t(Stat::kCount)> kStatNames = {
    "hit", "miss", "evicted", "invalidated", "invalidate_all",
    "device_reg", "device_dereg", "device_dereg_failed", "unwatched"};

static_assert(size_t(Stat::kHit) == 0 && size_t(Stat::kMiss) == 1 && size_t(Stat::kEvicted) == 2);

class Stats {
 public:
  void add(Stat s, uint64_t n = 1) { v_[size_t(s)] += n; }
  uint64_t get(Stat s) const { return v_[size_t(s)]; }
  void reset(Stat s) { v_[size_t(s)] = 0; }

 private:
  std::array<uint64_t, size_t(Stat::kCount)> v_{};
};

}  // namespace nicemu::udreg
