// The process's caches by name (§2: UDREG_CacheCreate names a cache, UDREG_CacheAccess finds
// it, several components may share one), with the count of open accesses of each.
#pragma once
#include <cstdint>
#include <mutex>
#include <vector>

#include "cache.h"
#include "udreg_pub.h"

namespace nicemu::udreg {

class CacheRegistry {
 public:
  static CacheRegistry& instance();

  udreg_return_t create(const udreg_cache_attr_t* attr, Watcher* watcher);
  udreg_return_t access(const char* name, udreg_cache_handle_t* out);
  udreg_return_t release(udreg_cache_handle_t h);
  udreg_return_t destroy(udreg_cache_handle_t h);

 private:
  struct Slot {
    Cache* cache;
    uint32_t accesses;
  };
  Slot* find_locked(const char* name);
  Slot* find_locked(udreg_cache_handle_t h);

  std::mutex mu_;
  std::vector<Slot> caches_;
};

}  // namespace nicemu::udreg
