// The uDREG API (udreg_pub.h): argument checks and dispatch to the registry and the caches.
#include <mutex>

#include "cache.h"
#include "cache_registry.h"
#include "memory_monitor.h"
#include "udreg_nicemu.h"
#include "udreg_pub.h"
#include "uffd_source.h"

using namespace nicemu::udreg;

extern "C" {

udreg_return_t UDREG_CacheCreate(udreg_cache_attr_t* cache_attr) {
  if (udreg_return_t rc = Cache::validate_attr(cache_attr); rc != UDREG_RC_SUCCESS) return rc;
  MemoryMonitor& m = MemoryMonitor::instance();
  static std::once_flag started;
  std::call_once(started, [&m] { m.start(); });
  m.restart_after_fork();
  return CacheRegistry::instance().create(cache_attr, &m);
}

udreg_return_t UDREG_CacheAccess(const char* cache_name, udreg_cache_handle_t* cache) {
  return CacheRegistry::instance().access(cache_name, cache);
}

udreg_return_t UDREG_CacheRelease(udreg_cache_handle_t cache) { return CacheRegistry::instance().release(cache); }

udreg_return_t UDREG_CacheDestroy(udreg_cache_handle_t cache) { return CacheRegistry::instance().destroy(cache); }

udreg_return_t UDREG_Register(udreg_cache_handle_t cache, void* addr, uint64_t length, udreg_entry_t** entry) {
  Cache* c = Cache::from_handle(cache);
  return c ? c->reg(addr, length, entry) : UDREG_RC_INVALID_PARAM;
}

udreg_return_t UDREG_Unregister(udreg_cache_handle_t cache, udreg_entry_t* entry) {
  Cache* c = Cache::from_handle(cache);
  return c ? c->release(entry, true) : UDREG_RC_INVALID_PARAM;
}

udreg_return_t UDREG_DecrRefcount(udreg_cache_handle_t cache, udreg_entry_t* entry) {
  Cache* c = Cache::from_handle(cache);
  return c ? c->release(entry, false) : UDREG_RC_INVALID_PARAM;
}

udreg_return_t UDREG_Evict(udreg_cache_handle_t cache) {
  Cache* c = Cache::from_handle(cache);
  return c ? c->evict() : UDREG_RC_INVALID_PARAM;
}

udreg_return_t UDREG_GetStat(udreg_cache_handle_t cache, udreg_stat_t stat, uint64_t* value) {
  Cache* c = Cache::from_handle(cache);
  return c ? c->get_stat(stat, value) : UDREG_RC_INVALID_PARAM;
}

udreg_return_t UDREG_ResetStat(udreg_cache_handle_t cache, udreg_stat_t stat) {
  Cache* c = Cache::from_handle(cache);
  return c ? c->reset_stat(stat) : UDREG_RC_INVALID_PARAM;
}

unsigned nicemu_udreg_invalidation_sources(void) {
  MemoryMonitor& m = MemoryMonitor::instance();
  unsigned s = 0;
  if (m.mode() == Mode::kNone) s |= NICEMU_UDREG_SOURCE_NONE;
  if (uffd_active()) s |= NICEMU_UDREG_SOURCE_UFFD;
  if (m.hooks_complete() && m.mode() != Mode::kUffd && m.mode() != Mode::kNone) s |= NICEMU_UDREG_SOURCE_HOOKS;
  return s;
}

}  // extern "C"
