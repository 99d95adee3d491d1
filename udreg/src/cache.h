// One registration cache (UDREG_Cache*): the entries of one client configuration, found by
// address through the interval index, kept unreferenced in LRU order when deregistration is
// lazy, dropped when the invalidation ring reports their memory gone. One mutex serialises
// everything, including the device callbacks (§3: callbacks run under uDREG's lock).
#pragma once
#include <cstdint>
#include <mutex>

#include "entry.h"
#include "entry_pool.h"
#include "interval_index.h"
#include "lru_list.h"
#include "stats.h"
#include "udreg_pub.h"
#include "watcher.h"

namespace nicemu::udreg {

inline constexpr uint32_t kCacheMagic = 0x55434348;  // "UCCH"

class Cache {
 public:
  // attr must have been validated (validate_attr); it is copied.
  Cache(const udreg_cache_attr_t& attr, Watcher* watcher);
  ~Cache();

  static udreg_return_t validate_attr(const udreg_cache_attr_t* attr);

  static Cache* from_handle(udreg_cache_handle_t h) {
    auto* c = reinterpret_cast<Cache*>(h);
    return c && c->magic_ == kCacheMagic ? c : nullptr;
  }
  udreg_cache_handle_t handle() { return reinterpret_cast<udreg_cache_handle_t>(this); }
  const char* name() const { return attr_.cache_name; }

  udreg_return_t reg(void* addr, uint64_t length, udreg_entry_t** out);
  // A reference goes; `unregister` is UDREG_Unregister (evicts with EVICT_W_UNREG).
  udreg_return_t release(udreg_entry_t* entry, bool unregister);
  udreg_return_t evict();
  udreg_return_t get_stat(udreg_stat_t stat, uint64_t* value);
  udreg_return_t reset_stat(udreg_stat_t stat);
  // Deregisters every entry, referenced or not, then calls the destructor callback.
  void destroy();

  // Introspection for tests and debug output.
  size_t live_entries();
  size_t cached_unreferenced();
  size_t indexed_entries();
  uint64_t stat(Stat s);
  bool verify();

 private:
  bool lazy() const { return attr_.modes & UDREG_CC_MODE_USE_LAZY_DEREG; }
  bool evict_w_unreg() const { return attr_.modes & UDREG_CC_MODE_USE_EVICT_W_UNREG; }

  void apply_invalidations_locked();
  void invalidate_range_locked(uint64_t a, uint64_t b);
  void invalidate_all_locked();
  bool evict_one_locked();
  void unindex_locked(Entry* e);
  void drop_locked(Entry* e);  // deregister with the device and free
  void debug(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));

  uint32_t magic_ = kCacheMagic;
  std::mutex mu_;
  udreg_cache_attr_t attr_;
  Watcher* watcher_;
  IntervalIndex index_;
  LruList lru_;
  EntryPool pool_;
  Stats stats_;
  uint64_t ring_cursor_;
  uint64_t ring_epoch_;
};

}  // namespace nicemu::udreg
